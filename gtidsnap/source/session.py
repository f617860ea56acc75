"""Opening one read-only session on a replica: the PyMySQL connection, its errors in our words, and the
session settings every statement relies on (UTC, the server-side statement time limit).

Kept apart from :class:`gtidsnap.source.replica.Replica`, which reuses it for every reconnect; the first
session learns the server's flavour and version, later ones are told them.
"""

from __future__ import annotations

import math
from typing import Any

import pymysql

from gtidsnap.core.errors import ConfigError, PrerequisiteError, SourceError
from gtidsnap.core.model import Flavor
from gtidsnap.source.connection import ConnectionSettings
from gtidsnap.source.preflight import parse_version
from gtidsnap.source.server_errors import CR_SSL_CONNECTION_ERROR, Meaning, code_of, meaning

Version = tuple[int, int, int]


def open_session(
    settings: ConnectionSettings, read_timeout: float | None, known: tuple[Flavor, Version] | None
) -> tuple[pymysql.connections.Connection[Any], Flavor, Version]:
    """A connected session, its server's flavour and version (``known``: not asked again).

    Everything until the session is ready (the TCP connect, the handshake, the login, the first
    statements) answers within ``connect_timeout``: PyMySQL bounds only the TCP connect by it and the
    rest by the read timeout (the statement limit and its margin, a minute by default), so a host that
    accepts connections and never answers (a hung server, a proxy with no backend) held a run that long
    before the next of ``source.hosts`` was tried. The session's own read timeout applies from then on."""
    try:
        conn = pymysql.connect(
            **settings.pymysql_kwargs(),
            autocommit=True,
            charset="utf8mb4",
            read_timeout=settings.connect_timeout,
            write_timeout=settings.connect_timeout,
            init_command="SET time_zone = '+00:00'",
        )
    except pymysql.err.OperationalError as exc:
        error = _connect_error(settings, exc)
        raise error from (exc if isinstance(error, SourceError) else None)
    try:
        if settings.tls.verifies:
            _check_tls(conn, settings)
        flavor, version = known or _server_version(conn)
        _limit_statements(conn, settings, flavor, version)
    except pymysql.err.OperationalError as exc:  # the first statements did not answer in time
        conn.close()
        error = _connect_error(settings, exc)
        raise error from (exc if isinstance(error, SourceError) else None)
    except BaseException:
        conn.close()
        raise
    conn._read_timeout = read_timeout or None  # the session's own from here on (PyMySQL sets it per read)
    conn._write_timeout = None
    return conn, flavor, version


def _connect_error(settings: ConnectionSettings, exc: pymysql.err.OperationalError) -> Exception:
    where = settings.describe()
    code = code_of(exc)
    text = str(exc.args[1]) if len(exc.args) > 1 else str(exc)
    if meaning(code) is Meaning.LOGIN_REFUSED:
        return ConfigError(f"the replica {where} refused the login: {text}")
    if code == CR_SSL_CONNECTION_ERROR:
        return PrerequisiteError(
            [
                f"TLS is required but the replica {where} does not offer it: configure TLS on "
                "the server, or choose tls=preferred or tls=disabled"
            ]
        )
    if "CERTIFICATE_VERIFY_FAILED" in text:
        ca = settings.ca or "the system's trusted CAs"
        if "match" in text or "mismatch" in text.lower():
            return ConfigError(
                f"the TLS certificate of the replica {where} is not for the host {settings.host} "
                f"(source.tls = verify_identity checks it): {text}"
            )
        return ConfigError(f"the TLS certificate of the replica {where} is not signed by {ca}: {text}")
    if "timed out" in text:
        return SourceError(
            f"cannot connect to the replica {where}: no answer within source.connect_timeout_s "
            f"({settings.connect_timeout:g} s): {text}"
        )
    return SourceError(f"cannot connect to the replica {where}: {text}")


def _server_version(conn: pymysql.connections.Connection[Any]) -> tuple[Flavor, Version]:
    with conn.cursor() as cur:
        cur.execute("SELECT VERSION()")
        row = cur.fetchone()
    return parse_version(str(row[0] if row else ""))


def _limit_statements(
    conn: pymysql.connections.Connection[Any], settings: ConnectionSettings, flavor: Flavor, version: Version
) -> None:
    """The server-side statement time limit, ``source.statement_timeout_s``."""
    seconds = settings.statement_timeout
    with conn.cursor() as cur:
        if flavor == "mariadb":
            cur.execute("SET SESSION max_statement_time = %s", [seconds])
        else:  # milliseconds, SELECTs only (SHOW statements are quick); 0 would mean no limit. And
            # AVG_ROW_LENGTH as InnoDB has it now, not as cached up to a day ago (MySQL 8.0.3 on).
            fresh = ", information_schema_stats_expiry = 0" if version >= (8, 0, 3) else ""
            cur.execute(f"SET SESSION max_execution_time = %s{fresh}", [max(1, math.ceil(seconds * 1e3))])


def _check_tls(conn: pymysql.connections.Connection[Any], settings: ConnectionSettings) -> None:
    """PyMySQL < 1.2 falls back to plain TCP when the server offers no TLS: refuse that here."""
    with conn.cursor() as cur:
        cur.execute("SHOW SESSION STATUS LIKE 'Ssl_cipher'")
        row = cur.fetchone()
    if not row or not row[1]:
        raise PrerequisiteError(
            [
                f"TLS is required but the session with the replica {settings.describe()} is "
                "not encrypted: configure TLS on the server, or choose tls=preferred or tls=disabled"
            ]
        )
