"""What a replica's binlog holds at the GTID of a checkpoint's last transaction: its stamp, read by a
short binlog dump started just before it (judged by :mod:`gtidsnap.core.source_identity`).

The dump starts where that transaction comes first of its source (MySQL: the checkpoint's set without
it; MariaDB: its domain's position before it), so the server skips what comes before on its side, as it
does for any replica connecting, and sends that transaction's GTID event right away; the read stops at
the first GTID event of the transaction's source, and never goes on past ``most`` GTID events.
Non-blocking: a binlog that ends first ends the read. It needs what the stream needs (REPLICATION
SLAVE) and changes nothing. A server that refuses the start (error 1236: purged, or a position its
binlog does not hold) shows nothing; any other failure is the replica's (a retryable SourceError).
"""

from __future__ import annotations

import random
from typing import Any

import pymysql
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import GtidEvent, MariadbGtidEvent

from gtidsnap.core.errors import SourceError
from gtidsnap.core.gtid import Gtid, GtidSet, MariadbGtid, MariadbGtidSet, MysqlGtid
from gtidsnap.core.source_identity import Shown, TransactionStamp, dump_start
from gtidsnap.source.binlog.frame_packets import mysql_gtid
from gtidsnap.source.binlog.library import EmptyMysqlPosition
from gtidsnap.source.connection import ConnectionSettings
from gtidsnap.source.server_errors import Meaning, code_of, meaning

MOST_TRANSACTIONS = 10_000  # GTID events read before giving up (other domains', transactions not processed)
READ_TIMEOUT_S = 30.0


def shown_at(settings: ConnectionSettings, stamp: TransactionStamp, processed: GtidSet) -> Shown:
    """What the replica at ``settings`` holds at ``stamp``'s GTID, for a checkpoint that ``processed``."""
    start = dump_start(stamp, processed)
    if start is None:
        return Shown(None, "it was the first transaction of its domain: no binlog position comes before it")
    mariadb = isinstance(start, MariadbGtidSet)
    target: Gtid = MariadbGtid.parse(stamp.gtid) if mariadb else MysqlGtid.parse(stamp.gtid)
    connection = settings.pymysql_kwargs() | {"read_timeout": READ_TIMEOUT_S, "write_timeout": READ_TIMEOUT_S}
    position: Any = start.as_position() if isinstance(start, MariadbGtidSet) else str(start)
    reader = BinLogStreamReader(
        connection_settings=connection | {"charset": "utf8mb4"},
        server_id=random.randint(100_000, 2**31 - 1),
        auto_position=position or EmptyMysqlPosition(),
        is_mariadb=mariadb,
        blocking=False,
        only_events=[MariadbGtidEvent if mariadb else GtidEvent],
        enable_logging=False,
    )
    try:
        for read, event in enumerate(reader):
            gtid = _gtid_of(event)
            if gtid.source == target.source and gtid.number >= target.number:
                if gtid.number > target.number:
                    return Shown(None, f"its binlog goes on at {gtid} without it")
                return Shown(TransactionStamp(str(gtid), event.packet.server_id, event.timestamp))
            if read >= MOST_TRANSACTIONS:
                return Shown(None, f"not among the first {MOST_TRANSACTIONS:,} transactions its binlog sent")
        return Shown(None, "its binlog does not hold it")
    except pymysql.err.MySQLError as exc:
        if meaning(code_of(exc)) is Meaning.BINLOG_UNREADABLE:
            return Shown(None, f"the server does not read its binlog from there: {_text(exc)}")
        raise SourceError(f"cannot read the binlog of {settings.describe()}: {_text(exc)}") from None
    except OSError as exc:
        raise SourceError(f"cannot read the binlog of {settings.describe()}: {_text(exc)}") from None
    finally:
        reader.close()


def _gtid_of(event: Any) -> Gtid:
    if isinstance(event, MariadbGtidEvent):
        return MariadbGtid.of(event.domain_id, event.packet.server_id, event.gtid_seq_no)
    return mysql_gtid(event.sid, event.gno)


def _text(exc: BaseException) -> str:
    """Server and client messages never hold the password; keep them short."""
    return " ".join(str(exc).split())[:300]
