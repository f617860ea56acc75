"""One meaning per server error code, read by the replica and the binlog alike (server_errors)."""

from __future__ import annotations

import pymysql

from gtidsnap.source.server_errors import FATAL_TO_THE_STREAM, Meaning, code_of, is_server_code, meaning


def test_a_refused_login_means_the_same_everywhere() -> None:
    for code in (1045, 1698, 1251, 2059):
        assert meaning(code) is Meaning.LOGIN_REFUSED
    assert Meaning.LOGIN_REFUSED in FATAL_TO_THE_STREAM


def test_codes_outside_the_table_are_the_clients_or_the_servers() -> None:
    assert meaning(0) is Meaning.CLIENT and meaning(2003) is Meaning.CLIENT
    assert meaning(1064) is Meaning.SERVER  # a syntax error: the server refused this statement
    assert meaning(2013) is Meaning.LOST_CONNECTION and meaning(1969) is Meaning.STATEMENT_TIMEOUT
    assert is_server_code(1064) and not is_server_code(2013) and not is_server_code(0)


def test_the_stream_stops_only_on_what_a_reconnect_cannot_fix() -> None:
    assert meaning(1236) in FATAL_TO_THE_STREAM and meaning(1227) in FATAL_TO_THE_STREAM
    assert meaning(2013) not in FATAL_TO_THE_STREAM and meaning(1064) not in FATAL_TO_THE_STREAM


def test_code_of_reads_pymysqls_errors() -> None:
    assert code_of(pymysql.err.OperationalError(1045, "Access denied")) == 1045
    assert code_of(pymysql.err.InterfaceError("closed")) == 0
    assert code_of(ValueError()) == 0
