"""Where each setting's value comes from (the TOML file, ``GTIDSNAP_*`` variables, flags; later ones
win) and the one-line error that names that source, the value and what is expected."""

from __future__ import annotations

import contextlib
import difflib
import json
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails

from gtidsnap.config.settings import ENV_PREFIX, PASSWORD_ENV, SECTIONS
from gtidsnap.config.values import plain_name, show_value
from gtidsnap.core.errors import ConfigError

# --------------------------------------------------------------------------- layering


@dataclass(frozen=True)
class Origin:
    """Where a value came from, so its error sends the reader to the line to fix."""

    kind: Literal["file", "env", "flag", "default"]
    name: str = ""  # the file path or the environment variable

    def where(self, dotted: str) -> str:
        if self.kind == "file":
            return f"{self.name}: {dotted}"
        if self.kind == "env":
            return self.name
        if self.kind == "flag":
            return f"flag {dotted}"
        return dotted

    def assigned(self, dotted: str, value: Any) -> str:
        if self.kind == "env":
            return f"{self.name}={show_value(value)}"
        return f"{self.where(dotted)} = {show_value(value)}"


Layer = dict[str, dict[str, Any]]
Origins = dict[tuple[str, str], Origin]


def file_layer(path: Path) -> tuple[Layer, Origins]:
    """The TOML file's values, with unknown sections and settings refused by name."""
    if path.is_dir():
        raise ConfigError(f"config file {path} is a folder, not a file")
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except OSError as exc:
        raise ConfigError(f"config file {path} cannot be read: {exc.strerror}") from None
    try:
        text = data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"config file {path} is not UTF-8 text (invalid byte at offset {exc.start})"
        ) from None
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        reason = " ".join(str(exc).split())
        raise ConfigError(f"config file {path} is not valid TOML: {reason}") from None
    known_sections = ", ".join(f"[{s}]" for s in SECTIONS)
    layer: Layer = {}
    for section, values in document.items():
        if section not in SECTIONS:
            if not isinstance(values, dict):
                raise ConfigError(
                    f"{path}: {plain_name(section)} is outside any section; known sections: {known_sections}"
                )
            raise ConfigError(
                f"{path}: unknown section [{plain_name(section)}]{_did_you_mean(section, SECTIONS)}; "
                f"known sections: {known_sections}"
            )
        if not isinstance(values, dict):
            raise ConfigError(
                f"{path}: {section} = {show_value(values)} is not a table: "
                f"write [{section}] and its settings on the lines below"
            )
        fields = SECTIONS[section].model_fields
        for key, value in values.items():
            if section == "source" and key == "password":
                raise ConfigError(
                    f"{path}: [source] password is not read from files that get committed; "
                    f"use {PASSWORD_ENV} or password_file"
                )
            if key not in fields:
                raise ConfigError(
                    f"{path}: unknown setting {section}.{plain_name(key)}{_did_you_mean(key, fields)}; "
                    f"known: {', '.join(fields)}"
                )
            layer.setdefault(section, {})[key] = value
    origin = Origin("file", str(path))
    return layer, {(section, key): origin for section, keys in layer.items() for key in keys}


def _did_you_mean(name: str, known: Mapping[str, Any]) -> str:
    close = difflib.get_close_matches(name, list(known), n=1)
    return f" (did you mean {close[0]}?)" if close else ""


def _env_name(section: str, key: str) -> str:
    return f"{ENV_PREFIX}{section.upper()}_{key.upper()}"


def env_layer(env: Mapping[str, str]) -> tuple[Layer, Origins]:
    """``GTIDSNAP_SECTION_KEY`` values parsed by their field's type; other GTIDSNAP_* names are not ours."""
    layer: Layer = {}
    origins: Origins = {}
    for section, model in SECTIONS.items():
        for key, info in model.model_fields.items():
            name = _env_name(section, key)
            if name in env:
                layer.setdefault(section, {})[key] = _from_env(name, env[name], f"{section}.{key}", info)
                origins[(section, key)] = Origin("env", name)
    return layer, origins


_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})
_INTEGER = re.compile(r"[+-]?[0-9]+")


def _from_env(name: str, text: str, dotted: str, info: FieldInfo) -> Any:
    """Environment values are text: read each as its field's type, refusing what does not parse."""
    kind = info.annotation
    origin = get_origin(kind)
    if kind is bool:
        word = text.strip().lower()
        if word in _TRUE or word in _FALSE:
            return word in _TRUE
        raise ConfigError(
            f"{name}={show_value(text)} is not a boolean: write 1/0, true/false, yes/no or on/off"
        )
    if kind is int:
        if not _INTEGER.fullmatch(text.strip()):
            raise ConfigError(f"{name}={show_value(text)} is not a valid integer")
        return int(text)
    if kind is float:
        try:
            return float(text)
        except ValueError:
            raise ConfigError(f"{name}={show_value(text)} is not a valid number") from None
    if origin is dict and get_args(kind)[1:] == (str,):  # text values (sink.spark_conf): a JSON object
        items = None
        if text.lstrip().startswith("{"):
            with contextlib.suppress(ValueError):
                items = json.loads(text)
        if not isinstance(items, dict):
            raise ConfigError(f"{name}={show_value(text)} is not a JSON object (of text values)")
        return items
    if origin is dict:
        raise ConfigError(
            f"{name} cannot be set from the environment: {dotted} is a table keyed by schema.table; "
            "set it in the config file"
        )
    if origin is list:
        if text.lstrip().startswith("["):
            try:
                items = json.loads(text)
            except ValueError:
                items = None
            if not isinstance(items, list):
                raise ConfigError(f"{name}={show_value(text)} is not a valid JSON array") from None
            return items
        return [part.strip() for part in text.split(",") if part.strip()]
    return text


def flag_layer(overrides: Mapping[str, Any]) -> tuple[Layer, Origins]:
    layer: Layer = {}
    for dotted, value in overrides.items():
        if value is None:
            continue
        section, _, key = dotted.partition(".")
        if section not in SECTIONS or key not in SECTIONS[section].model_fields:
            raise ConfigError(f"unknown setting {plain_name(dotted)} given as a flag")
        layer.setdefault(section, {})[key] = value
    origin = Origin("flag")
    return layer, {(section, key): origin for section, keys in layer.items() for key in keys}


# --------------------------------------------------------------------------- errors, one line each

_NOT_A = {
    "bool_type": "a boolean",
    "int_type": "an integer",
    "float_type": "a number",
    "finite_number": "a finite number",
    "string_type": "a string",
    "list_type": "a list",
    "dict_type": "a table",
    "model_type": "a table",
}
_BOUNDS = frozenset({"greater_than", "greater_than_equal", "less_than", "less_than_equal"})
_LIST_HINT = {"tables": '["schema.table", ...]', "surrogate_keys": '["column", ...]'}


def problem_line(error: ErrorDetails, origins: Origins) -> str:
    """One pydantic error as one line: where the value came from, the value, what is expected."""
    loc = error["loc"]
    section, key = str(loc[0]), str(loc[1]) if len(loc) > 1 else ""
    sub = "".join(f"[{p}]" if isinstance(p, int) else f"[{p!r}]" for p in loc[2:] if p != "[key]")
    dotted = f"{section}.{key}{sub}" if key else section
    origin = origins.get((section, key), Origin("default"))
    value, kind = error["input"], error["type"]
    if kind in _NOT_A:
        return f"{origin.assigned(dotted, value)} is not {_NOT_A[kind]}{_hint(kind, key, value, origin)}"
    if kind in _BOUNDS:
        info = SECTIONS[section].model_fields[key]
        return f"{origin.where(dotted)} must be {_bounds(info)}, got {show_value(value)}"
    if kind == "literal_error":
        expected = str(error.get("ctx", {}).get("expected", "")).replace("'", "")
        return f"{origin.where(dotted)} must be {expected}, got {show_value(value)}"
    if kind in ("too_short", "string_too_short"):
        return f"{origin.where(dotted)} must not be empty, got {show_value(value)}"
    if kind == "value_error":
        return f"{origin.where(dotted)}: {error.get('ctx', {}).get('error', error['msg'])}"
    if kind == "extra_forbidden":
        return f"unknown setting {dotted}"
    return f"{origin.assigned(dotted, value)} is refused: {error['msg']}"


def _hint(kind: str, key: str, value: Any, origin: Origin) -> str:
    """How to write it in TOML, where the mistake is a TOML spelling one."""
    if origin.kind != "file":
        return ""
    if kind == "bool_type":
        return ": write true or false (no quotes)"
    if kind in ("int_type", "float_type") and isinstance(value, bool):
        return ": write a number, not true or false"
    if kind in ("int_type", "float_type") and isinstance(value, str):
        return ": write it without quotes"
    if kind == "int_type" and isinstance(value, float):
        return ": write a whole number"
    if kind == "string_type":
        return ": write it in quotes"
    if kind == "list_type" and key in _LIST_HINT:
        return f": write {_LIST_HINT[key]}"
    if kind == "dict_type" and key == "surrogate_keys":
        return ': write { "schema.table" = ["column", ...] }'
    return ""


def _bounds(info: FieldInfo) -> str:
    """The accepted range in words, read from the field's own constraints."""
    found: dict[str, Any] = {}
    for item in info.metadata:
        for name in ("gt", "ge", "lt", "le"):
            if getattr(item, name, None) is not None:
                found[name] = getattr(item, name)
    ge, gt, le = found.get("ge"), found.get("gt"), found.get("le")
    if ge is not None and le is not None:
        return f"from {ge} to {le}"
    if gt is not None and le is not None:
        return f"more than {gt} and at most {le}"
    if gt == 0:
        return "positive (more than 0)"
    if ge == 1:
        return "positive (1 or more)"
    if ge is not None:
        return f"{ge} or more"
    if gt is not None:
        return f"more than {gt}"
    return f"at most {le}"
