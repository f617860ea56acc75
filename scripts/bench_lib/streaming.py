"""b. Binlog streaming throughput against the limit.

On the primary, ``--rows`` row changes (UPDATEs of ``--tx-rows`` rows per transaction, 1,000 by
default, cycling through the 10,000-row table ``bench.churn``) go into the binlog; the replica's
executed set is read before and after. Then, in this order:

* the limit: python-mysql-replication's ``BinLogStreamReader`` on the replica as the read-only user,
  from the start set, decoding every row (``event.rows``) and only counting them;
* ``gtidsnap run --until-caught-up`` into JSON lines, resuming from a checkpoint taken just before the
  changes (by a first ``run --until-caught-up`` of the same configuration: gtidsnap resumes as after
  any stop), so it streams exactly those changes;
* the same JSON-lines run with ``[metrics] listen`` set and ``/metrics`` scraped every second (what
  monitoring costs, as a ratio to the run without it);
* the same gtidsnap run into Delta;
* the bare decode again. Each gtidsnap run is compared with the mean of the two decodes (a decode of
  1M row changes takes over a minute: a third one between the runs would cost more than it tells);
* the peer, Debezium's embedded engine into JSON lines (:mod:`bench_lib.debezium`), primed with the
  gtidsnap runs, streams the same changes: ``ratio_jsonl_to_debezium`` is gtidsnap's JSON-lines rate
  over Debezium's, each from its own start.
"""

from __future__ import annotations

import logging
import random
import shutil
import socket
import threading
import time
import urllib.request
from typing import Any

from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import GtidEvent, HeartbeatLogEvent, MariadbGtidEvent, XidEvent
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from bench_lib import cli_run
from bench_lib.context import Context
from bench_lib.debezium import DebeziumPeer, PeerFailed
from bench_lib.env import DATABASE
from bench_lib.quiet import wait_quiet
from bench_lib.stats import mean, ratio
from bench_lib.tables import ensure_table
from gtidsnap.core.gtid import GtidSet, MariadbGtidSet
from gtidsnap.engine.checkpoint_store import CheckpointStore
from gtidsnap.source.binlog import library

log = logging.getLogger("bench.streaming")

CHURN_TABLE = "churn"
CHURN_ROWS = 10_000
DECODE_TIMEOUT_S = 1800.0
METRICS_ON = "jsonl-metrics"  # JSON lines with /metrics served and scraped
SCRAPE_EVERY_S = 1.0  # harsher than Prometheus' usual 15 s


def generate_changes(ctx: Context, changes: int) -> dict[str, Any]:
    """``changes`` row changes on ``bench.churn``; the replica's executed sets before and after."""
    ensure_table(ctx.pair, CHURN_TABLE, CHURN_ROWS)
    start = ctx.pair.wait_replicated()
    started = time.monotonic()
    done = 0
    with ctx.pair.primary() as conn, conn.cursor() as cur:
        while done < changes:
            count = min(ctx.tx_rows, changes - done)
            lo = done % CHURN_ROWS + 1
            cur.execute(
                f"UPDATE {DATABASE}.{CHURN_TABLE} SET n = n + 1, ts = NOW() WHERE id BETWEEN %s AND %s",
                (lo, lo + count - 1),
            )
            done += count
    written = time.monotonic() - started
    end = ctx.pair.wait_replicated()
    replicated = time.monotonic() - started
    # The second replica applies the same changes: measured while it does, a run shares the 2 cores
    # with its applier (10-row transactions keep it busy well after the first replica is done).
    ctx.pair.wait_replicated(port=ctx.pair.replica2_port)
    log.info(
        "%s: %d row changes written in %.1f s, replicated in %.1f s", ctx.flavor, changes, written, replicated
    )
    return {
        "start": start,
        "end": end,
        "changes": changes,
        "write_s": round(written, 3),
        "replicated_s": round(replicated, 3),
    }


def bare_decode(ctx: Context, start: GtidSet, expected: int) -> dict[str, Any]:
    """The limit: decode every row change after ``start`` with python-mysql-replication (its own
    ``event.rows``, which gtidsnap's row reading does not replace), count them."""
    library.uninstall()  # the library as shipped: its own parse of every table map, BEGIN, GTID event
    # and rows event's header
    settings = ctx.pair.reader_settings().pymysql_kwargs()
    settings["charset"] = "utf8mb4"
    position = start.as_position() if isinstance(start, MariadbGtidSet) else str(start)
    started = time.monotonic()
    reader = BinLogStreamReader(
        connection_settings=settings,
        server_id=random.randint(100_000, 2**31 - 1),
        auto_position=position,
        is_mariadb=ctx.flavor == "mariadb",
        blocking=True,
        slave_heartbeat=1.0,
        only_events=[
            GtidEvent,
            MariadbGtidEvent,
            XidEvent,
            WriteRowsEvent,
            UpdateRowsEvent,
            DeleteRowsEvent,
            HeartbeatLogEvent,
        ],
        enable_logging=False,
    )
    rows = 0
    try:
        for event in reader:
            if isinstance(event, WriteRowsEvent | UpdateRowsEvent | DeleteRowsEvent):
                if event.schema == DATABASE and event.table == CHURN_TABLE:
                    rows += len(event.rows)  # decodes every value of every row
                    if rows >= expected:
                        break
            elif time.monotonic() - started > DECODE_TIMEOUT_S:
                raise RuntimeError(f"{ctx.flavor}: the bare decode found {rows} of {expected} row changes")
    finally:
        reader.close()
    took = time.monotonic() - started
    log.info("%s: bare binlog decode: %d rows in %.1f s", ctx.flavor, rows, took)
    return {"rows": rows, "seconds": round(took, 3), "rows_per_s": round(rows / took, 1)}


class Scraper:
    """GETs ``/metrics`` every ``SCRAPE_EVERY_S`` on a thread while a run runs; counts the answers."""

    def __init__(self, listen: str) -> None:
        self.url = f"http://{listen}/metrics"
        self.ok = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Scraper:
        self._thread.start()
        return self

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.ok

    def _run(self) -> None:
        while not self._stop.wait(SCRAPE_EVERY_S):
            try:
                with urllib.request.urlopen(self.url, timeout=5) as answer:
                    answer.read()
                    self.ok += 1
            except OSError:
                pass  # the run is starting or ending


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def measure_b(ctx: Context) -> dict[str, Any]:
    table = f"{DATABASE}.{CHURN_TABLE}"
    ensure_table(ctx.pair, CHURN_TABLE, CHURN_ROWS)
    works = {sink: ctx.work(f"stream-{sink}") for sink in ("jsonl", METRICS_ON, "delta")}
    envs = {
        sink: cli_run.cli_env(ctx.pair, work, sink.removesuffix("-metrics"), [table])
        for sink, work in works.items()
    }
    listen = f"127.0.0.1:{free_port()}"
    envs[METRICS_ON]["GTIDSNAP_METRICS_LISTEN"] = listen
    for sink, env in envs.items():  # checkpoints at the replica's current set, before the changes
        cli_run.run(["run", "--until-caught-up"], env, ctx.log_path(f"stream-{sink}-prime"), ctx.timeout)
    peer = DebeziumPeer(ctx, ctx.work("stream-debezium"), DATABASE, CHURN_TABLE, ctx.timeout)
    peer_failed: PeerFailed | None = None
    try:
        peer.prime()
    except PeerFailed as exc:  # gtidsnap's figures are measured all the same; the peer's reason is kept
        log.warning("%s", exc)
        peer_failed = exc
    generated = generate_changes(ctx, ctx.rows)
    wait_quiet(f"{ctx.flavor}: bare decode")
    bare = [bare_decode(ctx, generated["start"], ctx.rows)]
    runs: dict[str, dict[str, Any]] = {}
    for sink, env in envs.items():
        checkpoint = works[sink] / "checkpoint.json"
        primed = CheckpointStore(checkpoint).load()
        first_seq = primed.next_seq if primed is not None else 1
        quiet_s = wait_quiet(f"{ctx.flavor}: gtidsnap into {sink}")
        scraper = Scraper(listen).start() if sink == METRICS_ON else None
        try:
            result = cli_run.run(
                ["run", "--until-caught-up"], env, ctx.log_path(f"stream-{sink}"), ctx.timeout, checkpoint
            )
        finally:
            scrapes = scraper.stop() if scraper is not None else None
        facts = result.facts()
        facts["quiet_wait_s"] = quiet_s
        if scrapes is not None:
            facts["scrapes"] = scrapes
        done = ctx.rows
        if result.timed_out:  # the records committed by the deadline
            done = result.progress.next_seq - first_seq if result.progress else 0
            facts["rows_done"] = done
            log.warning("%s: streaming into %s was stopped after %.0f s", ctx.flavor, sink, ctx.timeout)
        elif facts.get("records") != ctx.rows:
            log.warning("%s: gtidsnap emitted %s records, not %d", ctx.flavor, facts.get("records"), ctx.rows)
        facts["rows_per_s"] = round(done / result.seconds(), 1)
        log.info(
            "%s: gtidsnap streaming into %s: %.0f rows/s (work %.1f s, start-up %.1f s)",
            ctx.flavor,
            sink,
            facts["rows_per_s"],
            facts["work_s"],
            facts["startup_s"],
        )
        runs[sink] = facts
        shutil.rmtree(works[sink], ignore_errors=True)
    wait_quiet(f"{ctx.flavor}: bare decode")
    bare.append(bare_decode(ctx, generated["start"], ctx.rows))
    if peer_failed is None:
        quiet_s = wait_quiet(f"{ctx.flavor}: Debezium")
        try:
            debezium = peer.stream(ctx.rows)
            debezium["quiet_wait_s"] = quiet_s
        except PeerFailed as exc:
            log.warning("%s", exc)
            peer_failed = exc
    if peer_failed is not None:
        debezium = {
            "rows_per_s": 0.0,
            "error": str(peer_failed).splitlines()[0],
            "log": str(peer_failed.log_path),
        }
        debezium["log_tail"] = str(peer_failed).split("\n", 1)[-1]
    shutil.rmtree(peer.work, ignore_errors=True)
    limit = mean([b["rows_per_s"] for b in bare])
    return {
        "changes": ctx.rows,
        "rows_per_transaction": ctx.tx_rows,
        "generate": {k: str(v) if k in ("start", "end") else v for k, v in generated.items()},
        "bare_decodes": bare,
        "bare_rows_per_s": round(mean([b["rows_per_s"] for b in bare]), 1),
        "jsonl": runs["jsonl"],
        "jsonl_metrics": runs[METRICS_ON],
        "ratio_metrics_on": ratio(runs[METRICS_ON]["rows_per_s"], runs["jsonl"]["rows_per_s"]),
        "delta": runs["delta"],
        "limit_for_jsonl_rows_per_s": round(limit, 1),
        "limit_for_delta_rows_per_s": round(limit, 1),
        "ratio_jsonl": ratio(runs["jsonl"]["rows_per_s"], limit),
        "ratio_delta": ratio(runs["delta"]["rows_per_s"], limit),
        "debezium": debezium,
        "ratio_jsonl_to_debezium": ratio(runs["jsonl"]["rows_per_s"], debezium["rows_per_s"]),
    }
