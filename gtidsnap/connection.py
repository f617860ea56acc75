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
    connect_timeout: float = 10.0

    def describe(self) -> str:
        """For messages: never includes the password."""
        return f"{self.user}@{self.host}:{self.port}"

    def pymysql_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``pymysql.connect`` (and python-mysql-replication's settings)."""
        kwargs: dict[str, Any] = {
            "host": self.host,
            "port": self.port,
            "user": self.user,
            "password": self.password.reveal(),
            "connect_timeout": int(self.connect_timeout),
        }
        if self.tls is TlsMode.DISABLED:
            kwargs["ssl_disabled"] = True
        elif self.tls is TlsMode.PREFERRED:
            kwargs["ssl"] = {"check_hostname": False}
            kwargs["ssl_verify_cert"] = False
        else:
            kwargs["ssl_ca"] = str(self.ca) if self.ca else None
            kwargs["ssl_verify_cert"] = True
        return kwargs
