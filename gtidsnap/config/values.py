"""The checks of single setting values (table names, key columns, files, addresses) and how a value is
shown in an error: plain functions the settings' models (:mod:`gtidsnap.config.settings`) validate with."""

from __future__ import annotations

import re
import ssl
from typing import Any

from gtidsnap.core.errors import ConfigError
from gtidsnap.core.model import SYSTEM_SCHEMAS, TableId

_SHOW_MAX = 80  # longest value quoted in an error
_PORT = re.compile(r"[0-9]{1,5}")  # ASCII digits only: str.isdigit() and int() take fullwidth digits too


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


def readable_file(value: str) -> str:
    """An unreadable key file would otherwise surface as an SSL traceback at the first connect."""
    if value:
        try:
            with open(value, "rb"):
                pass
        except OSError as exc:
            raise ValueError(f"the file {show_value(value)} cannot be read: {exc.strerror}") from None
    return value


def certificate_file(value: str) -> str:
    """A CA or client certificate file that holds certificates (PEM): anything else would surface as an
    SSL error at the first connect, or never, with ``tls = "preferred"``, which does not use it."""
    readable_file(value)
    if value:
        try:
            ssl.create_default_context(cafile=value)
        except (ssl.SSLError, ValueError) as exc:
            reason = getattr(exc, "reason", None) or str(exc)
            raise ValueError(
                f"the file {show_value(value)} holds no certificate in PEM form ({reason}): "
                "give the certificate file (-----BEGIN CERTIFICATE-----)"
            ) from None
    return value


def split_address(value: str, example: str = "127.0.0.1:3306", port_zero: bool = False) -> tuple[str, int]:
    """``HOST:PORT`` (an IPv6 host in brackets) as host and port; ValueError names what is wrong."""
    host, sep, port = value.rpartition(":")
    bracketed = host.startswith("[") and host.endswith("]")
    host = host[1:-1] if bracketed else host
    lowest = 0 if port_zero else 1
    if not sep or not host or not _PORT.fullmatch(port) or not lowest <= int(port) < 65536:
        raise ValueError(f"{value!r} is not HOST:PORT (e.g. {example}; the port in ASCII digits)")
    if ":" in host and not bracketed:
        raise ValueError(f"{value!r}: write an IPv6 address in brackets, e.g. [{host}]:{port}")
    return host, int(port)


def replica_address(value: str) -> str:
    split_address(value)
    return value


def thrift_uris(value: str) -> str:
    """Hive metastore URIs, ``thrift://HOST:PORT`` each, comma-separated; or empty."""
    for uri in filter(None, (u.strip() for u in value.split(","))):
        scheme, sep, address = uri.partition("://")
        host, colon, port = address.rpartition(":")
        port_ok = port.isdigit() and 0 < int(port) < 65536
        if scheme != "thrift" or not (sep and host and colon and port_ok):
            raise ValueError(f"{uri!r} is not thrift://HOST:PORT (e.g. thrift://127.0.0.1:9083)")
    return value


def distinct_hosts(values: list[str]) -> list[str]:
    """A replica named twice (the same host and port) is a typo: which place would it have?"""
    seen: dict[tuple[str, int], str] = {}
    for value in values:
        host, port = split_address(value)
        key = (host.lower(), port)
        if key in seen:
            raise ValueError(f"{show_value(value)} names the replica {show_value(seen[key])} again")
        seen[key] = value
    return values


def lower(value: Any) -> Any:
    """Choices are case-insensitive; other types pass through to be refused by strict validation."""
    return value.lower() if isinstance(value, str) else value


def listen_address(value: str) -> str:
    """``HOST:PORT`` (an IPv6 host in brackets), or empty: a bare port would be taken for a host name."""
    if value:
        split_address(value, "127.0.0.1:9108 or [::1]:9108", port_zero=True)
    return value


_CATALOG_NAME = re.compile(r"[A-Za-z0-9_]+")


def catalog_name(value: str) -> str:
    """A Spark catalog's name: letters, digits and underscores (it is the first part of every name)."""
    if value and not _CATALOG_NAME.fullmatch(value):
        raise ValueError(
            f"{show_value(value)} is not a catalog name: use letters, digits and underscores only"
        )
    return value


def name_template(value: str) -> str:
    """``sink.database`` or ``sink.table_name``: letters, digits and underscores around ``{db}`` and
    ``{table}`` (a metastore refuses spaces, ``;``, dots and the like in a name, and a dot would make
    it two names)."""
    if not value:
        return value
    try:
        literal = value.format(db="", table="")
    except (KeyError, IndexError, ValueError) as exc:
        raise ValueError(
            f"{show_value(value)} is not a name template (letters, digits, _, {{db}}, {{table}}): {exc}"
        ) from None
    if literal and not _CATALOG_NAME.fullmatch(literal):
        raise ValueError(
            f"{show_value(value)} is not a name: use letters, digits and underscores around {{db}} and "
            "{table} (no spaces, dots or other signs)"
        )
    return value


def plain_catalog_name(name: str) -> bool:
    """Would a metastore take ``name`` (a database or table name made from a template)?"""
    return bool(_CATALOG_NAME.fullmatch(name))
