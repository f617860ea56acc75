"""Acceptance scenario 27, TLS: ``source.tls = "verify_identity"`` checks the certificate names the host
connected to, and a client certificate logs in an account that REQUIRE X509. The second replica of each
flavour serves TLS with certificates the harness makes (scripts/lib.sh ``tls_files``: a CA, a server
certificate for 127.0.0.1, a client certificate)."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from gtidsnap.core.errors import ConfigError
from gtidsnap.source.connection import ConnectionSettings, Secret, TlsMode
from gtidsnap.source.replica import Replica
from tests.integration.cdc import (
    REPO,
    check_invariants,
    cli_env,
    create_table,
    gtidsnap_cmd,
    read_records,
    run_args,
    source_rows,
)
from tests.integration.fixtures.db_servers import READER, STATE_DIR, ReplicaPair
from tests.integration.test_failover import wait_replica2

pytestmark = pytest.mark.integration

TLS = STATE_DIR / "tls"


def on_replica2(
    pair: ReplicaPair, tls: TlsMode, host: str = "127.0.0.1", **more: object
) -> ConnectionSettings:
    settings = ConnectionSettings(host, pair.replica2_port, READER[0], Secret(READER[1]), tls=tls)
    return replace(settings, ca=TLS / "ca.pem", **more)  # type: ignore[arg-type]


def cipher(replica: Replica) -> str:
    _, rows = replica._query("SHOW SESSION STATUS LIKE 'Ssl_cipher'", [], "reading the cipher")
    return str(rows[0][1]) if rows else ""


def test_verify_identity_accepts_a_certificate_for_the_host(pair: ReplicaPair) -> None:
    with Replica(on_replica2(pair, TlsMode.VERIFY_IDENTITY)) as replica:
        assert cipher(replica).startswith("TLS_") and replica.executed()


def test_verify_identity_refuses_a_certificate_for_another_host(pair: ReplicaPair) -> None:
    """The certificate names 127.0.0.1 only: reached as localhost, ``required`` takes it (it is signed by
    the CA) and ``verify_identity`` refuses it, saying so."""
    with Replica(on_replica2(pair, TlsMode.REQUIRED, host="localhost")) as replica:
        assert cipher(replica).startswith("TLS_")
    with pytest.raises(ConfigError, match=r"is not for the host localhost \(source\.tls = verify_identity"):
        Replica(on_replica2(pair, TlsMode.VERIFY_IDENTITY, host="localhost"))


@pytest.fixture
def x509_account(pair: ReplicaPair) -> Iterator[str]:
    """A read-only account that logs in only with a client certificate the harness's CA signed."""
    name = f"x509_{uuid.uuid4().hex[:8]}"
    with pair.primary() as conn, conn.cursor() as cur:
        plugin = "" if pair.flavor == "mariadb" else " WITH mysql_native_password"
        cur.execute(f"CREATE USER '{name}'@'%' IDENTIFIED{plugin} BY 'x509-test-pw' REQUIRE X509")
        cur.execute(f"GRANT SELECT, REPLICATION CLIENT, REPLICATION SLAVE ON *.* TO '{name}'@'%'")
    wait_replica2(pair)
    try:
        yield name
    finally:
        with pair.primary() as conn, conn.cursor() as cur:
            cur.execute(f"DROP USER IF EXISTS '{name}'@'%'")


def test_a_client_certificate_logs_in_an_account_that_requires_one(
    pair: ReplicaPair, x509_account: str
) -> None:
    settings = replace(
        on_replica2(pair, TlsMode.VERIFY_IDENTITY), user=x509_account, password=Secret("x509-test-pw")
    )
    with pytest.raises(ConfigError, match="refused the login"):
        Replica(settings)
    with Replica(replace(settings, cert=TLS / "client-cert.pem", key=TLS / "client-key.pem")) as replica:
        assert cipher(replica).startswith("TLS_")


def test_a_run_over_verified_tls_with_a_client_certificate(
    pair: ReplicaPair, fresh_db: str, x509_account: str, tmp_path: Path
) -> None:
    """The CLI end to end: the engine's session, the chunk readers and the binlog stream all over TLS."""
    create_table(pair, fresh_db, "t", 300)
    wait_replica2(pair)
    env = cli_env(pair) | {
        "GTIDSNAP_SOURCE_PORT": str(pair.replica2_port),
        "GTIDSNAP_SOURCE_USER": x509_account,
        "GTIDSNAP_SOURCE_PASSWORD": "x509-test-pw",
        "GTIDSNAP_SOURCE_TLS": "verify_identity",
        "GTIDSNAP_SOURCE_CA": str(TLS / "ca.pem"),
        "GTIDSNAP_SOURCE_CERT": str(TLS / "client-cert.pem"),
        "GTIDSNAP_SOURCE_KEY": str(TLS / "client-key.pem"),
    }
    table = f"{fresh_db}.t"
    args = run_args(tmp_path, table)
    done = subprocess.run(gtidsnap_cmd(*args), env=env, cwd=REPO, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    check_invariants(read_records(tmp_path), {table: source_rows(pair, fresh_db, "t")})
