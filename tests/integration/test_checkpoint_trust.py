"""A checkpoint is trusted only as far as its output and its source agree with it (issue 56, part A),
on the real servers through the real CLI:

* its output: a ``sink_position`` or ``next_seq`` that does not fit the output (another checkpoint's,
  with a valid digest) is refused before the output is cut, the output byte for byte as it was (JSON
  lines here; Delta in :func:`test_a_lowered_delta_batch_is_refused_and_the_tables_kept`);
* its digest: an edit by hand (a lowered ``sink_position``, a processed set moved back, emptied or moved
  on) is refused naming ``gtidsnap checkpoint``; ``gtidsnap checkpoint set`` makes the deliberate edits
  (a poison transaction skipped, the source's stamp forgotten), recorded in its history;
* its source: a replica of an unrelated MariaDB primary whose GTIDs are numbered alike (same domain,
  same server id, ahead: ``other_mariadb_pair``) is refused as "another primary's history" before the
  output is touched, passed over for the next of ``source.hosts``; a sibling replica of the checkpoint's
  primary is accepted, on both flavours. MySQL: an unrelated primary has another server UUID, which the
  GTID check already refuses (test_bad_input.py, ``test_checkpoint_of_another_server_is_refused``);
  what the stamp adds there (a server cloned with the same UUID whose transaction at that GTID differs)
  is covered by a stamp that differs from what the replica's binlog holds.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from gtidsnap.core.checkpoint_edits import CHECKPOINT_COMMAND
from gtidsnap.core.gtid import MariadbGtidSet, parse_gtid_set
from gtidsnap.core.model import TableId
from gtidsnap.sinks.delta.layout import changelog_path
from tests.fakes import resealed
from tests.integration.cdc import (
    REPO,
    check_invariants,
    cli_env,
    create_table,
    execute,
    gtidsnap_cmd,
    read_records,
    run_args,
    source_rows,
)
from tests.integration.fixtures.db_servers import ReplicaPair, fresh_database
from tests.integration.test_delta_engine import TABLES, DeltaCli, check_output, tail
from tests.integration.test_failover import failover_env, wait_replica2

pytestmark = pytest.mark.integration

RUN_TIMEOUT_S = 240.0
OTHER_TIMESTAMP = 1_000_000_000  # the unrelated primary writes as of 2001: never a time of the pair's


def gtidsnap(out: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    command = gtidsnap_cmd(*(args or run_args(out)))
    return subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)


def fingerprint(folder: Path) -> dict[str, str]:
    """Every file's digest but the run locks' (who ran last, not output)."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.suffix != ".lock" and not p.name.endswith(".log")
    }


def checkpoint_of(out: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((out / "checkpoint.json").read_text(encoding="utf-8"))
    return data


def write_checkpoint(out: Path, data: dict[str, Any]) -> None:
    (out / "checkpoint.json").write_text(json.dumps(data), encoding="utf-8")


def refused(done: subprocess.CompletedProcess[str], *expected: str) -> str:
    """The one error line of a run that exited 1, holding every ``expected`` text."""
    lines = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 1 and len(lines) == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert all(text in lines[0] for text in expected), lines[0]
    assert "this may pass" not in done.stderr, "the same command again would not pass"
    return lines[0]


def insert(pair: ReplicaPair, db: str, *keys: int) -> None:
    execute(pair, db, *(f"INSERT INTO t VALUES ({k}, 1, 'k{k}')" for k in keys))


# ----------------------------------------------------------------------------- the output


def test_a_checkpoint_that_does_not_fit_its_output_is_refused_before_the_cut(
    mariadb_pair: ReplicaPair, maria_db: str, tmp_path: Path
) -> None:
    """100 snapshot records. Halving ``sink_position`` cut the file to 50 lines and a broken one, and
    ``sink_position = 0`` emptied it, both with exit 0; a ``next_seq`` raised would leave a hole. Now each
    is refused naming what differs, the output and the checkpoint as they were; put back, it runs."""
    pair, db = mariadb_pair, maria_db
    create_table(pair, db, "t", 100)
    env = cli_env(pair)
    assert (done := gtidsnap(tmp_path, env, *run_args(tmp_path, f"{db}.t"))).returncode == 0, done.stderr
    good = checkpoint_of(tmp_path)
    assert len(read_records(tmp_path)) == 100 and good["next_seq"] == 101
    content = (tmp_path / "changes.jsonl").read_bytes()
    half = good["sink_position"] // 2
    half -= content[half - 1 : half] == b"\n"  # inside a line, as halving a length mostly is
    for fields, expected in (
        ({"sink_position": half}, "inside a line"),
        ({"sink_position": 0}, "holds no record before it, but the checkpoint's next_seq is 101"),
        ({"next_seq": 104}, "is seq 100, not next_seq - 1 = 103"),
        ({"sink_position": content.index(b"\n") + 1}, "is seq 1, not next_seq - 1 = 100"),
    ):
        write_checkpoint(tmp_path, resealed({**good, **fields}))  # another checkpoint's: its digest matches
        before = fingerprint(tmp_path)
        line = refused(gtidsnap(tmp_path, env), "does not match its output", expected, "nothing was changed")
        assert str(tmp_path / "changes.jsonl") in line
        assert fingerprint(tmp_path) == before, f"{fields}: the refused run changed its output or checkpoint"
    write_checkpoint(tmp_path, good)
    insert(pair, db, 10_001)
    assert (done := gtidsnap(tmp_path, env)).returncode == 0, done.stderr
    check_invariants(read_records(tmp_path), {f"{db}.t": source_rows(pair, db, "t")})


def test_an_edit_by_hand_is_refused_naming_gtidsnap_checkpoint(
    mariadb_pair: ReplicaPair, maria_db: str, tmp_path: Path
) -> None:
    """Edited by hand, the processed set lowered by 3 transactions wrote 3 keys twice, emptied it
    streamed the whole binlog again, raised to the replica's position lost 3 inserts; a lowered
    ``sink_position`` cut the output. All exited 0. Now the digest refuses each; a checkpoint of an earlier
    version (no digest) is accepted, says so, and gets one."""
    pair, db = mariadb_pair, maria_db
    create_table(pair, db, "t", 20)
    env = cli_env(pair)
    assert (done := gtidsnap(tmp_path, env, *run_args(tmp_path, f"{db}.t"))).returncode == 0, done.stderr
    insert(pair, db, 1_001, 1_002, 1_003)
    assert (done := gtidsnap(tmp_path, env)).returncode == 0, done.stderr
    good = checkpoint_of(tmp_path)
    insert(pair, db, 2_001, 2_002, 2_003)  # pending: not streamed yet
    processed = parse_gtid_set("mariadb", good["processed"])
    assert isinstance(processed, MariadbGtidSet)
    with pair.replica_reader() as conn, conn.cursor() as cur:
        cur.execute("SELECT @@global.gtid_binlog_pos")
        replica_at = str(cur.fetchone()[0])
    lowered = ",".join(
        f"{d}-{p.split('-')[1]}-{int(p.split('-')[2]) - 3}" if (d := p.split("-")[0]) == "0" else p
        for p in processed.as_position().split(",")
    )
    for fields in (
        {"processed": lowered},
        {"processed": ""},
        {"processed": replica_at},
        {"sink_position": good["sink_position"] // 2},
    ):
        write_checkpoint(tmp_path, {**good, **fields})
        before = fingerprint(tmp_path)
        refused(gtidsnap(tmp_path, env), "does not match its digest", f"`{CHECKPOINT_COMMAND} set`")
        assert fingerprint(tmp_path) == before, f"{fields}: the refused run changed its output or checkpoint"
    write_checkpoint(tmp_path, {k: v for k, v in good.items() if k != "digest"})  # an earlier version's
    done = gtidsnap(tmp_path, env)
    assert done.returncode == 0 and "has no digest (written by an earlier version" in done.stderr, done.stderr
    assert checkpoint_of(tmp_path)["digest"].startswith("sha256:")
    records = read_records(tmp_path)
    check_invariants(records, {f"{db}.t": source_rows(pair, db, "t")})
    assert sum(1 for r in records if r["key"][0] >= 2_001) == 3, "the pending inserts, once each"


def test_checkpoint_set_skips_a_poison_transaction_and_records_it(
    other_mariadb_pair: ReplicaPair, tmp_path: Path
) -> None:
    """On the unrelated pair (only these tests write there, so the next transaction after the
    checkpoint is known): ``set --skip`` its GTID, and the run starts past it; ``show`` tells who did
    what and when, and the checkpoint still matches its digest."""
    pair = other_mariadb_pair
    with fresh_database(pair) as db:
        create_table(pair, db, "t", 5)
        env = cli_env(pair)
        assert (done := gtidsnap(tmp_path, env, *run_args(tmp_path, f"{db}.t"))).returncode == 0, done.stderr
        with pair.primary(db) as conn, conn.cursor() as cur:
            gtids = []
            for key in (101, 102):
                cur.execute(f"INSERT INTO t VALUES ({key}, 1, 'poison?')")
                cur.execute("SELECT @@session.last_gtid")
                gtids.append(str(cur.fetchone()[0]))
            pair.wait_replicated(conn)
        processed = parse_gtid_set("mariadb", checkpoint_of(tmp_path)["processed"])
        assert f"0-1-{processed.max_per_source()[0] + 1}" == gtids[0], "nobody else writes on this pair"
        where = ["--checkpoint", str(tmp_path / "checkpoint.json")]
        done = gtidsnap(tmp_path, env, "checkpoint", "set", *where, "--skip", gtids[1])
        assert done.returncode == 1 and "not the next transaction" in done.stderr, done.stderr
        done = gtidsnap(tmp_path, env, "checkpoint", "set", *where, "--skip", gtids[0])
        assert done.returncode == 0 and f"skipped {gtids[0]}" in done.stderr, done.stderr
        assert (done := gtidsnap(tmp_path, env)).returncode == 0, done.stderr
        changes = [r for r in read_records(tmp_path) if not r["snapshot"]]
        assert [(r["key"], r["gtid"]) for r in changes] == [([102], gtids[1])], "all but the skipped one"
        shown = json.loads(gtidsnap(tmp_path, env, "checkpoint", "show", "--json", *where).stdout)
        assert shown["digest"] == "matches" and shown["last_transaction"]["gtid"] == gtids[1]
        (edit,) = shown["history"]
        assert edit["change"].startswith(f"processed: skipped {gtids[0]}") and edit["by"] and edit["at"]


# ----------------------------------------------------------------------------- the source


def stamped_run(pair: ReplicaPair, db: str, out: Path) -> dict[str, Any]:
    """A run on the pair's replica after a write of its own; the checkpoint, stamped with a transaction
    of domain 0 on MariaDB (other tests on these servers write now and then in domains of their own)."""
    create_table(pair, db, "t", 10)
    assert (done := gtidsnap(out, cli_env(pair), *run_args(out, f"{db}.t"))).returncode == 0, done.stderr
    for key in range(501, 505):
        insert(pair, db, key)
        assert (done := gtidsnap(out, cli_env(pair))).returncode == 0, done.stderr
        data = checkpoint_of(out)
        if pair.flavor == "mysql" or data["last_transaction"]["gtid"].startswith("0-"):
            break
    assert data["last_transaction"]["timestamp"] > OTHER_TIMESTAMP, data.get("last_transaction")
    return data


def other_position(other: ReplicaPair) -> MariadbGtidSet:
    with other.primary() as conn, conn.cursor() as cur:
        cur.execute("SELECT @@global.gtid_binlog_pos")
        position = parse_gtid_set("mariadb", str(cur.fetchone()[0]))
    assert isinstance(position, MariadbGtidSet)
    return position


def write_other(other: ReplicaPair, domain: int, seq: int | None, count: int) -> None:
    """``count`` transactions on the unrelated primary in ``domain``, the first numbered ``seq`` (None:
    the next), stamped as of 2001."""
    with other.primary() as conn, conn.cursor() as cur:
        cur.execute("CREATE DATABASE IF NOT EXISTS other_history")
        cur.execute(
            "CREATE TABLE IF NOT EXISTS other_history.t (id BIGINT AUTO_INCREMENT PRIMARY KEY, note TEXT)"
        )
        cur.execute("SET SESSION gtid_domain_id = %s, SESSION timestamp = %s", (domain, OTHER_TIMESTAMP))
        for n in range(count):
            if n == 0 and seq is not None:
                cur.execute("SET SESSION gtid_seq_no = %s", (seq,))
            cur.execute("INSERT INTO other_history.t (note) VALUES ('another primary')")
        other.wait_replicated(conn)


def numbered_alike(other: ReplicaPair, checkpoint: dict[str, Any], hole: bool = False) -> str:
    """The unrelated primary's GTIDs brought past the checkpoint's in every domain (so the GTID check
    lets its replica serve), with its own transactions at the checkpoint's last GTID and the one before
    (``hole``: none before it, so its binlog cannot be read from there); that last GTID."""
    stamp = checkpoint["last_transaction"]
    domain, _, seq = (int(x) for x in stamp["gtid"].split("-"))
    processed = parse_gtid_set("mariadb", checkpoint["processed"])
    at = other_position(other).max_per_source()
    if at.get(domain, 0) >= seq - 1:
        pytest.fail(
            f"the unrelated primary is at {at} already, past {stamp['gtid']}: the pair's numbers moved back?"
        )
    write_other(other, domain, seq if hole else seq - 1, 2 if hole else 3)
    for d, top in processed.max_per_source().items():
        if d != domain and other_position(other).max_per_source().get(d, 0) < top:
            write_other(other, d, top, 1)
    return str(stamp["gtid"])


def test_a_replica_of_another_primary_numbered_alike_is_refused_before_the_output_is_touched(
    mariadb_pair: ReplicaPair, maria_db: str, other_mariadb_pair: ReplicaPair, tmp_path: Path
) -> None:
    """Cluster B's replica holds every GTID of cluster A's checkpoint and more, with its own transaction
    at the checkpoint's last GTID: it was accepted and B's rows went into A's output. Now it is refused
    as another primary's history, the output untouched; with A's replica next in source.hosts, the run
    passes over B and continues on A, exactly."""
    pair, db, other = mariadb_pair, maria_db, other_mariadb_pair
    good = stamped_run(pair, db, tmp_path)
    last = numbered_alike(other, good)
    insert(pair, db, 601)
    before = fingerprint(tmp_path)
    env = failover_env(other, other.replica_port)
    line = refused(gtidsnap(tmp_path, env), "another primary's history", f"another transaction at {last}")
    assert f":{other.replica_port}" in line and "2001-09-09T01:46:40+00:00" in line
    assert fingerprint(tmp_path) == before, "the refused run changed its output or checkpoint"
    env = failover_env(pair, other.replica_port, pair.replica_port)
    done = gtidsnap(tmp_path, env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"127.0.0.1:{other.replica_port} cannot serve the run (" in done.stderr
    assert checkpoint_of(tmp_path)["replica"]["where"].endswith(f":{pair.replica_port}")
    check_invariants(read_records(tmp_path), {f"{db}.t": source_rows(pair, db, "t")})


def test_a_mariadb_replica_that_cannot_show_the_last_transaction_is_refused_until_forgotten(
    mariadb_pair: ReplicaPair, maria_db: str, other_mariadb_pair: ReplicaPair, tmp_path: Path
) -> None:
    """Cluster B's binlog cannot be read from just before the checkpoint's last GTID (it has no
    transaction there): nothing tells its history from A's, so it is refused, saying how an operator who
    knows better accepts it; after ``gtidsnap checkpoint set --forget-source`` the run is accepted and
    stamps the transaction it meets."""
    pair, db, other = mariadb_pair, maria_db, other_mariadb_pair
    good = stamped_run(pair, db, tmp_path)
    numbered_alike(other, good, hole=True)
    before = fingerprint(tmp_path)
    env = failover_env(other, other.replica_port)
    refused(
        gtidsnap(tmp_path, env), "cannot show the transaction", "another primary's history", "--forget-source"
    )
    assert fingerprint(tmp_path) == before
    where = ["--checkpoint", str(tmp_path / "checkpoint.json")]
    assert (done := gtidsnap(tmp_path, env, "checkpoint", "set", *where, "--forget-source")).returncode == 0
    write_other(other, 0, None, 1)  # a transaction for the run to stamp
    assert (done := gtidsnap(tmp_path, env)).returncode == 0, done.stderr[-3000:]
    data = checkpoint_of(tmp_path)
    assert data["last_transaction"]["timestamp"] == OTHER_TIMESTAMP, "the operator's choice, stamped anew"
    assert "forgot" in data["history"][-1]["change"]


def test_a_sibling_replica_shows_the_same_transaction_and_a_forged_stamp_is_refused(
    pair: ReplicaPair, fresh_db: str, tmp_path: Path
) -> None:
    """Both flavours: the checkpoint written on the replica continues on replica2, whose binlog holds the
    same transaction at its last GTID (read back from replica2's binlog); a stamp that differs from it
    (a cloned server's history, on MySQL one with the same server UUID) is refused, nothing touched."""
    good = stamped_run(pair, fresh_db, tmp_path)
    wait_replica2(pair)
    saved = tmp_path / "saved"
    saved.mkdir()
    for name in ("checkpoint.json", "changes.jsonl"):
        shutil.copy(tmp_path / name, saved / name)
    env = failover_env(pair, pair.replica2_port)
    done = gtidsnap(tmp_path, env)
    assert done.returncode == 0 and "cannot show" not in done.stderr, done.stderr[-3000:]
    forged = {**good, "last_transaction": {**good["last_transaction"], "timestamp": OTHER_TIMESTAMP}}
    write_checkpoint(saved, resealed(forged))
    before = fingerprint(saved)
    refused(gtidsnap(saved, env), "another primary's history", good["last_transaction"]["gtid"])
    assert fingerprint(saved) == before


# ----------------------------------------------------------------------------- Delta


def test_a_lowered_delta_batch_is_refused_and_the_tables_kept(
    mariadb_pair: ReplicaPair, maria_db: str, tmp_path: Path, spark: SparkSession
) -> None:
    """A Delta checkpoint whose batch is lowered (with a valid digest: another checkpoint's) would have
    recovery undo the commits after it, changelog rows numbered below its next_seq among them: refused,
    every file of the tables as it was; the checkpoint put back, the run goes on exactly."""
    pair, db = mariadb_pair, maria_db
    for t in TABLES:
        create_table(pair, db, t, 30)
    settings = {
        "GTIDSNAP_SINK_BATCH_MS": "200",
        "GTIDSNAP_CAPTURE_TABLES": ",".join(f"{db}.{t}" for t in TABLES),
    }
    cli = DeltaCli(pair, db, tmp_path, settings)
    code, log = cli.run()
    assert code == 0, tail(log)
    for t in TABLES:
        execute(pair, db, *(f"UPDATE `{t}` SET v = v + 1 WHERE id = {k}" for k in range(0, 20, 2)))
    code, log = cli.run(snapshot=False)
    assert code == 0, tail(log)
    good = cli.checkpoint
    logged = sorted(b for t in TABLES for b in changelog_batches(cli.root, TableId(db, t)))
    assert logged, "the changes went into the changelogs, batch by batch"
    delta = Path(cli.root)
    for lowered in (logged[-1] - 1, 0):
        position = {**good["sink_position"], "delta_batch": lowered}
        write_checkpoint(tmp_path, resealed({**good, "sink_position": position}))
        before = fingerprint(delta)
        code, log = cli.run(snapshot=False)
        assert code == 1 and "does not match its output" in log, tail(log)
        assert "below the checkpoint's next_seq" in log or "holds the checkpointed data" in log, tail(log)
        assert fingerprint(delta) == before, "the refused run changed the Delta tables"
    write_checkpoint(tmp_path, good)
    code, log = cli.run(snapshot=False)
    assert code == 0, tail(log)
    check_output(spark, pair, db, cli.root)


def changelog_batches(root: str, table: TableId) -> list[int]:
    """The batches of a changelog's commits, oldest first, read from its log's commit files."""
    batches = []
    for commit in sorted(Path(changelog_path(root, table), "_delta_log").glob("*.json")):
        for line in commit.read_text(encoding="utf-8").splitlines():
            info = json.loads(line).get("commitInfo")
            meta = json.loads(info.get("userMetadata") or "{}") if info else {}
            if isinstance(meta.get("gtidsnap_batch"), int):
                batches.append(meta["gtidsnap_batch"])
    return batches
