"""The checks of single setting values (table names, key columns, files, addresses) and how a value is
shown in an error: plain functions the settings' models (:mod:`gtidsnap.config.settings`) validate with."""

from __future__ import annotations

from typing import Any

from gtidsnap.core.errors import ConfigError
from gtidsnap.core.model import SYSTEM_SCHEMAS, TableId

_SHOW_MAX = 80  # longest value quoted in an error


def show_value(value: Any) -> str:
    """A value for an error message: its repr (one line), cut to ~80 characters."""
    text = repr(value)
    return text if len(text) <= _SHOW_MAX else text[: _SHOW_MAX - 3] + "..."


def plain_name(text: str) -> str:
    """A name as users write it, quoted only when it would not read as one short line."""
    return text if text.isprintable() and len(text) <= _SHOW_MAX else show_value(text)


def table_id_of(text: str) -> TableId:
    """``schema.table``, both parts non-empty and not a system schema; ValueError says what is wrong."""
    schema, dot, name = text.partition(".")
    if not dot or not schema or not name:
        raise ValueError(f"table {show_value(text)} must be written schema.table")
    if schema.lower() in SYSTEM_SCHEMAS:
        raise ValueError(
            f"{plain_name(text)} is in the system schema {plain_name(schema)}, "
            "which gtidsnap does not capture"
        )
    return TableId(schema, name)


def parse_table_name(text: str, where: str) -> TableId:
    """A configured table name, refused (ConfigError prefixed by ``where``) when malformed or system."""
    try:
        return table_id_of(text)
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def check_table_name(text: str) -> str:
    table_id_of(text)
    return text


def distinct_columns(columns: list[str]) -> list[str]:
    """A key that names a column twice is a typo, not a key."""
    for i, column in enumerate(columns):
        if column in columns[:i]:
            raise ValueError(f"the key names column {plain_name(column)} twice")
    return columns


def readable_ca(value: str) -> str:
    """An unreadable CA, certificate or key file would otherwise surface as an SSL traceback at the
    first connect."""
    if value:
        try:
            with open(value, "rb"):
                pass
        except OSError as exc:
            raise ValueError(f"the file {show_value(value)} cannot be read: {exc.strerror}") from None
    return value


def split_address(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (an IPv6 host in brackets) as host and port; ValueError names what is wrong."""
    host, sep, port = value.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{value!r} is not HOST:PORT (e.g. 127.0.0.1:3306)")
    return host, int(port)


def replica_address(value: str) -> str:
    split_address(value)
    return value


def lower(value: Any) -> Any:
    """Choices are case-insensitive; other types pass through to be refused by strict validation."""
    return value.lower() if isinstance(value, str) else value


def listen_address(value: str) -> str:
    """``HOST:PORT`` (an IPv6 host in brackets), or empty: a bare port would be taken for a host name."""
    if not value:
        return value
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f"{value!r} is not HOST:PORT (e.g. 127.0.0.1:9108)")
    return value
