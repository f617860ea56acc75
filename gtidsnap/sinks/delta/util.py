"""Small helpers the modules of the Delta sink share: the Delta session settings of a commit, SQL
quoting, short error messages."""

from __future__ import annotations

from collections.abc import Sequence

from gtidsnap.core.model import quote_ident

TXN_APP_ID = "spark.databricks.delta.write.txnAppId"
TXN_VERSION = "spark.databricks.delta.write.txnVersion"
USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"
# A MERGE reads its source twice; Delta copies a source that is not a Delta table first, in case it
# changes in between. Ours is an in-memory Arrow table that cannot change: the copy is pure cost.
MATERIALIZE_SOURCE = "spark.databricks.delta.merge.materializeSource"


def same_key(key: Sequence[str]) -> str:
    """The MERGE condition that pairs a target row ``t`` with a source row ``s`` of the same key."""
    return " AND ".join(f"t.{quote_ident(k)} = s.{quote_ident(k)}" for k in key)


def short_error(exc: BaseException) -> str:
    """The first line of a (often very long, JVM) error message."""
    text = str(exc).strip()
    return text.splitlines()[0][:500] if text else type(exc).__name__
