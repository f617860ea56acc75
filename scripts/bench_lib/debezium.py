"""Part b's peer: Debezium's embedded engine (``scripts/debezium/DebeziumPeer.java``, jars from Maven
Central by ``scripts/debezium/deps.sh``) streaming the same row changes from the same replica into JSON
lines, in the same run as gtidsnap.

As gtidsnap's runs are, it is primed before the changes (``snapshot.mode=no_data``: it records where
the binlog is and stops), so its second start streams exactly those changes. Its rate is counted from
the engine's start (the JVM's start-up and the Java source's compilation left out), as the issue that
asked for it measured it; the rate from its first record and its CPU seconds are kept too.

A peer that fails says why and costs nothing else: its connector gives up after a few retries (never
retries for ever), the prime has its own short deadline, and :class:`PeerFailed` carries the log's path
and last lines, which the results keep (``debezium.error``, ``debezium.log``) beside gtidsnap's figures
of the same part."""

from __future__ import annotations

import contextlib
import json
import logging
import random
import subprocess
from pathlib import Path
from typing import Any

from bench_lib.context import Context
from bench_lib.env import REPO

log = logging.getLogger("bench.debezium")

PRIME_TIMEOUT_S = 120.0  # a prime only connects and records where the binlog is: seconds, not minutes
LOG_TAIL_LINES = 25


class PeerFailed(RuntimeError):
    """The peer did not start or wrote no figures; the message names its log and ends with its tail."""

    def __init__(self, message: str, log_path: Path) -> None:
        super().__init__(message)
        self.log_path = log_path


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last lines of a peer's log, Java stack frames left out (its messages say why)."""
    if not path.exists():
        return "(no log)"
    text = path.read_text(encoding="utf-8", errors="replace").splitlines()
    return "\n".join([line for line in text if not line.lstrip().startswith("at ")][-lines:])


PEER = REPO / "scripts" / "debezium" / "DebeziumPeer.java"
DEPS = REPO / "scripts" / "debezium" / "deps.sh"
CONNECTORS = {
    "mariadb": "io.debezium.connector.mariadb.MariaDbConnector",
    "mysql": "io.debezium.connector.mysql.MySqlConnector",
}


def jars() -> Path:
    """The Debezium jars' folder, resolved first if need be."""
    done = subprocess.run(["bash", str(DEPS)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"scripts/debezium/deps.sh failed:\n{done.stderr[-2000:]}")
    return Path(done.stdout.strip().splitlines()[-1])


class DebeziumPeer:
    """One Debezium embedded engine's offsets and schema history in ``work``, on ``ctx``'s replica."""

    def __init__(self, ctx: Context, work: Path, database: str, table: str, timeout_s: float) -> None:
        self.ctx, self.work, self.timeout_s = ctx, work, timeout_s
        self.jars = jars()
        work.mkdir(parents=True, exist_ok=True)
        reader = ctx.pair.reader_settings().pymysql_kwargs()
        settings = {
            "name": "peer",
            "connector.class": CONNECTORS[ctx.flavor],
            "offset.storage": "org.apache.kafka.connect.storage.FileOffsetBackingStore",
            "offset.storage.file.filename": str(work / "offsets.dat"),
            "offset.flush.interval.ms": "1000",
            "database.hostname": str(reader["host"]),
            "database.port": str(reader["port"]),
            "database.user": str(reader["user"]),
            "database.password": str(reader["password"]),
            "database.server.id": str(random.randint(100_000, 2**31 - 1)),
            "topic.prefix": "peer",
            "database.include.list": database,
            "table.include.list": f"{database}.{table}",
            "schema.history.internal": "io.debezium.storage.file.history.FileSchemaHistory",
            "schema.history.internal.file.filename": str(work / "schema-history.dat"),
            "snapshot.mode": "no_data",
            "snapshot.locking.mode": "none",
            "converter.schemas.enable": "false",
            "errors.max.retries": "3",  # a refused connection ends the engine, said in its log
        }
        self.settings = settings
        self.properties = work / "peer.properties"  # holds the reader's password: the work folder only

    def prime(self) -> None:
        """Start, record the binlog's position, stop (:class:`PeerFailed` if it does not)."""
        facts = self._run(0, "prime", min(PRIME_TIMEOUT_S, self.timeout_s))
        if not facts.get("finished"):
            path = self.ctx.log_path("debezium-prime")
            raise PeerFailed(
                f"{self.ctx.flavor}: Debezium did not start: "
                f"{facts.get('failed') or f'not streaming within {PRIME_TIMEOUT_S:.0f} s'}; "
                f"its log, {path}, ends:\n{log_tail(path)}",
                path,
            )

    def stream(self, expected: int) -> dict[str, Any]:
        """Stream from the primed position until ``expected`` change records of the table are out."""
        facts = self._run(expected, "stream", self.timeout_s)
        records, last, first = facts["records"], facts["last_s"], facts["first_s"]
        if records < expected or last <= 0:
            path = self.ctx.log_path("debezium-stream")
            log.warning(
                "%s: Debezium wrote %d of %d records; its log: %s", self.ctx.flavor, records, expected, path
            )
            return {
                **facts,
                "rows_per_s": 0.0,
                "error": f"wrote {records} of {expected}: {facts.get('failed') or 'not within the deadline'}",
                "log": str(path),
                "log_tail": log_tail(path),
            }
        facts["rows_per_s"] = round(records / last, 1)  # from the engine's start
        facts["rows_per_s_from_first"] = round(records / max(last - first, 1e-6), 1)
        facts["cpu_us_per_row"] = round(facts["cpu_s"] / records * 1e6, 2)
        log.info(
            "%s: Debezium streaming into JSON lines: %.0f rows/s from engine start (%.0f from its first "
            "record), %.1f CPU-s",
            self.ctx.flavor,
            facts["rows_per_s"],
            facts["rows_per_s_from_first"],
            facts["cpu_s"],
        )
        return facts

    def _run(self, expected: int, what: str, timeout_s: float) -> dict[str, Any]:
        stats = self.work / f"{what}.json"
        output = self.work / f"{what}.jsonl"
        settings = {**self.settings, "peer.timeout.s": str(int(timeout_s))}
        self.properties.write_text("".join(f"{k}={v}\n" for k, v in settings.items()), encoding="utf-8")
        command = [
            "java",
            "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
            "-cp",
            f"{self.jars}/*",
            str(PEER),
            str(self.properties),
            str(output),
            str(expected),
            str(stats),
        ]
        path = self.ctx.log_path(f"debezium-{what}")
        path.parent.mkdir(parents=True, exist_ok=True)
        # a peer past its deadline writes no figures: said below, with its log
        with path.open("w", encoding="utf-8") as log_file, contextlib.suppress(subprocess.TimeoutExpired):
            subprocess.run(
                command, stdout=log_file, stderr=subprocess.STDOUT, timeout=timeout_s + 120, check=False
            )
        if not stats.exists():
            raise PeerFailed(
                f"{self.ctx.flavor}: Debezium's {what} wrote no figures; its log, {path}, ends:\n"
                f"{log_tail(path)}",
                path,
            )
        facts: dict[str, Any] = json.loads(stats.read_text(encoding="utf-8"))
        output.unlink(missing_ok=True)
        return facts
