"""What a MySQL/MariaDB error code means to gtidsnap, in one table: the replica's queries
(:mod:`gtidsnap.source.replica`) and the binlog stream (:mod:`gtidsnap.source.binlog.stream`) read a code
the same way, and
each turns a meaning into its error type (a refused login is a :class:`~gtidsnap.core.errors.ConfigError`
on both connections)."""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum


class Meaning(Enum):
    LOGIN_REFUSED = "the account, its password or its authentication plugin was refused"
    TLS_UNAVAILABLE = "TLS is required by one side and not offered by the other"
    PRIVILEGE_MISSING = "the account lacks a privilege"
    BINLOG_UNREADABLE = "the binlog no longer holds the position asked for"
    LOST_CONNECTION = "the connection was lost"
    STATEMENT_TIMEOUT = "the statement ran over the server-side time limit"
    SCHEMA_CHANGED = "a table or column named by the statement does not exist (any more)"
    CLIENT = "the client library's own error (the connection, not the statement)"
    SERVER = "the server refused this statement"


CR_SSL_CONNECTION_ERROR = 2026  # the client wants TLS, the server offers none

CODES: Mapping[int, Meaning] = {
    1045: Meaning.LOGIN_REFUSED,  # ER_ACCESS_DENIED_ERROR
    1251: Meaning.LOGIN_REFUSED,  # ER_NOT_SUPPORTED_AUTH_MODE
    1698: Meaning.LOGIN_REFUSED,  # ER_ACCESS_DENIED_NO_PASSWORD_ERROR
    2059: Meaning.LOGIN_REFUSED,  # CR_AUTH_PLUGIN_CANNOT_LOAD
    CR_SSL_CONNECTION_ERROR: Meaning.TLS_UNAVAILABLE,
    3159: Meaning.TLS_UNAVAILABLE,  # ER_SECURE_TRANSPORT_REQUIRED (the server requires TLS)
    1044: Meaning.PRIVILEGE_MISSING,  # ER_DBACCESS_DENIED_ERROR
    1142: Meaning.PRIVILEGE_MISSING,  # ER_TABLEACCESS_DENIED_ERROR
    1143: Meaning.PRIVILEGE_MISSING,  # ER_COLUMNACCESS_DENIED_ERROR
    1227: Meaning.PRIVILEGE_MISSING,  # ER_SPECIFIC_ACCESS_DENIED_ERROR (REPLICATION SLAVE, ...)
    1236: Meaning.BINLOG_UNREADABLE,  # ER_MASTER_FATAL_ERROR_READING_BINLOG (purged, GTID not in it)
    2006: Meaning.LOST_CONNECTION,  # CR_SERVER_GONE_ERROR
    2013: Meaning.LOST_CONNECTION,  # CR_SERVER_LOST
    2055: Meaning.LOST_CONNECTION,  # CR_SERVER_LOST_EXTENDED
    3024: Meaning.STATEMENT_TIMEOUT,  # MySQL ER_QUERY_TIMEOUT (max_execution_time)
    1969: Meaning.STATEMENT_TIMEOUT,  # MariaDB ER_STATEMENT_TIMEOUT (max_statement_time)
    1146: Meaning.SCHEMA_CHANGED,  # ER_NO_SUCH_TABLE
    1054: Meaning.SCHEMA_CHANGED,  # ER_BAD_FIELD_ERROR
}

# Refusals of the binlog stream that a reconnect cannot fix.
FATAL_TO_THE_STREAM = frozenset(
    {Meaning.LOGIN_REFUSED, Meaning.TLS_UNAVAILABLE, Meaning.PRIVILEGE_MISSING, Meaning.BINLOG_UNREADABLE}
)


def code_of(exc: BaseException) -> int:
    """The error code PyMySQL put first in the exception's args (0: none)."""
    args = getattr(exc, "args", ())
    return args[0] if args and isinstance(args[0], int) else 0


def meaning(code: int) -> Meaning:
    """What ``code`` means; codes not in the table are the client library's (2000-2999, or none)
    or the server's refusal of one statement."""
    if code in CODES:
        return CODES[code]
    return Meaning.CLIENT if code == 0 or 2000 <= code < 3000 else Meaning.SERVER


def is_server_code(code: int) -> bool:
    """Did the server answer with this error (not the client library, whose codes are 2000-2999)?"""
    return code != 0 and not 2000 <= code < 3000
