"""How to reach the replica: one value object shared by the replica and binlog adapters.

TLS is an explicit choice because PyMySQL's behaviour is otherwise implicit and each TLS handshake
costs tens of milliseconds per connection. The password is a :class:`Secret`, which never prints.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any


class Secret:
    """A password that never shows in ``repr``, ``str``, logs or tracebacks; ``reveal()`` to use it."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('********')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


class TlsMode(Enum):
    DISABLED = "disabled"  # plain TCP (loopback, or a trusted network)
    PREFERRED = "preferred"  # TLS without certificate verification
    REQUIRED = "required"  # TLS, server certificate verified against ``ca``
    VERIFY_IDENTITY = "verify_identity"  # REQUIRED, and the certificate is for the host connected to

    @property
    def verifies(self) -> bool:
        """Whether the server's certificate is checked (and TLS is required)."""
        return self in (TlsMode.REQUIRED, TlsMode.VERIFY_IDENTITY)


READ_TIMEOUT_MARGIN_S = 30.0  # the client gives up this long after the server's statement limit


@dataclass(frozen=True)
class ConnectionSettings:
    """Where the replica listens and who we are there. Example::

    ConnectionSettings("127.0.0.1", 3306, "gtidsnap", Secret("..."), tls=TlsMode.REQUIRED, ca=Path("ca.pem"))
    """

    host: str
    port: int
    user: str
    password: Secret
    tls: TlsMode = TlsMode.DISABLED
    ca: Path | None = None
    cert: Path | None = None  # a client certificate (and its ``key``), for accounts that REQUIRE X509
    key: Path | None = None
    connect_timeout: float = 10.0  # seconds, fractions included
    # Seconds any one statement gtidsnap runs may take on the replica (a server-side limit): a snapshot
    # whose chunk SELECT takes longer fails, streaming goes on. Applied by the replica adapter.
    statement_timeout: float = 30.0

    @property
    def read_timeout(self) -> float:
        """How long the client waits for a statement's answer: the server's limit and a margin."""
        return self.statement_timeout + READ_TIMEOUT_MARGIN_S

    def describe(self) -> str:
        """For messages: never includes the password."""
        return f"{self.user}@{self.host}:{self.port}"

    def pymysql_kwargs(self, pymysql_version: tuple[int, int] | None = None) -> dict[str, Any]:
        """Keyword arguments for ``pymysql.connect`` (and python-mysql-replication's settings).

        PyMySQL's own default changed under us: 1.1 speaks plain TCP unless given TLS options, and then
        silently falls back to plain TCP when the server offers no TLS; 1.2 tries TLS by default and
        makes any TLS option mean "required". So every mode is spelled out for the installed version:

        * DISABLED: ``ssl_disabled``. Also the fast one: PyMySQL builds a fresh default SSL context
          (loading the system CA store, ~25 ms) on every connect unless TLS is disabled, even when the
          server turns out to offer no TLS.
        * PREFERRED: TLS when the server offers it, certificate not verified; plain TCP otherwise.
        * REQUIRED: TLS with the server certificate verified against ``ca`` (the system CAs when None);
          the host name is not checked. PyMySQL < 1.2 may still fall back to plain TCP, so callers
          must confirm the session is encrypted (``Ssl_cipher``), as
          :class:`gtidsnap.source.replica.Replica` does.
        * VERIFY_IDENTITY: REQUIRED, and the certificate must name the host connected to.

        ``cert`` and ``key`` (a client certificate) go with the verifying modes only (the settings
        refuse them otherwise).
        """
        kwargs: dict[str, Any] = {
            "host": self.host,
            "port": self.port,
            "user": self.user,
            "password": self.password.reveal(),
            "connect_timeout": self.connect_timeout,  # a float: int(0.5) would be 0, which PyMySQL refuses
        }
        if pymysql_version is None:
            import pymysql  # only for its version: this module stays importable without a driver

            pymysql_version = (int(pymysql.VERSION[0]), int(pymysql.VERSION[1]))
        if self.tls is TlsMode.DISABLED:
            kwargs["ssl_disabled"] = True
        elif self.tls is TlsMode.PREFERRED:
            if pymysql_version < (1, 2):
                # 1.1 reads an ssl dict as "TLS if the server offers it"; verify_mode off, no host check.
                kwargs["ssl"] = {"verify_mode": False, "check_hostname": False}
            # 1.2+: no TLS option at all is exactly its PREFERRED mode (CERT_NONE, no host check).
        else:
            kwargs["ssl_verify_cert"] = True
            if self.tls is TlsMode.VERIFY_IDENTITY:
                kwargs["ssl_verify_identity"] = True
            if self.ca is not None:
                kwargs["ssl_ca"] = str(self.ca)
            if self.cert is not None:
                kwargs["ssl_cert"] = str(self.cert)
            if self.key is not None:
                kwargs["ssl_key"] = str(self.key)
        return kwargs
