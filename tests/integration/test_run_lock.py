"""Acceptance scenario 27: two `gtidsnap run` on one checkpoint never both write. Started together, one
is refused naming the other; the holder killed with kill -9 mid-snapshot is taken over at once, and
the output is exact (every key read once, no record twice)."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from gtidsnap.engine.checkpoint_store import CheckpointStore
from tests.integration.cdc import REPO, cli_env, create_table, gtidsnap_cmd, read_records, run_args, wait_for
from tests.integration.fixtures.db_servers import ReplicaPair
from tests.integration.test_delta_engine import TABLES, DeltaCli, kill_group, tail, wait_for_log

pytestmark = pytest.mark.integration


def test_two_runs_on_one_checkpoint_never_both_write(
    mariadb_pair: ReplicaPair, maria_db: str, tmp_path: Path
) -> None:
    pair, table = mariadb_pair, f"{maria_db}.t"
    create_table(pair, maria_db, "t", 2000)
    env = dict(cli_env(pair), GTIDSNAP_SNAPSHOT_CHUNK_SIZE="50", GTIDSNAP_SNAPSHOT_CHUNK_DELAY_MS="100")
    args = run_args(tmp_path, table)

    def start(name: str) -> subprocess.Popen[str]:
        log = (tmp_path / f"{name}.log").open("w")
        return subprocess.Popen(gtidsnap_cmd(*args), env=env, cwd=REPO, stdout=log, stderr=log, text=True)

    runs = [start("a"), start("b")]  # together
    refused = wait_for("one of the two to be refused", lambda: [p for p in runs if p.poll() is not None])
    assert len(refused) == 1 and refused[0].returncode == 1
    loser = "a" if refused[0] is runs[0] else "b"
    holder = runs[1] if loser == "a" else runs[0]
    text = (tmp_path / f"{loser}.log").read_text()
    assert f"is in use by another gtidsnap run (pid {holder.pid} on {socket.gethostname()} since " in text, (
        text
    )

    def rows_read() -> int:
        cp = CheckpointStore(tmp_path / "checkpoint.json").load()
        return next((t.rows for t in cp.context.tables if not t.done), 0) if cp is not None else 0

    wait_for("the holder part way through the snapshot", lambda: rows_read() > 200)
    holder.send_signal(signal.SIGKILL)  # mid-batch: chunks read, records written, a checkpoint due
    holder.wait(30)
    started = time.monotonic()
    taker = start("c")
    assert taker.wait(120) == 0, (tmp_path / "c.log").read_text()[-3000:]
    assert "is in use" not in (tmp_path / "c.log").read_text()
    assert time.monotonic() - started < 60
    keys = [r["key"][0] for r in read_records(tmp_path) if r["snapshot"]]
    assert sorted(keys) == list(range(0, 4000, 2)), "every row read exactly once across the two holders"
    seqs = [r["seq"] for r in read_records(tmp_path)]
    assert seqs == sorted(set(seqs)), "no record twice, none rewound"
    held = json.loads((tmp_path / "checkpoint.json.lock").read_text())
    assert held["pid"] == taker.pid, "the lock file names its last holder"


def test_two_runs_on_one_delta_output_at_a_uri_never_both_write(
    mariadb_pair: ReplicaPair, maria_db: str, tmp_path: Path
) -> None:
    """An output at a URI (here ``file://``; ``s3a://`` in production) has no OS lock: a lease guards it.
    A run with another checkpoint is refused while the holder renews it, naming the holder; the holder
    killed with kill -9, its own restart takes over once the lease has run out."""
    pair = mariadb_pair
    for name in TABLES:
        create_table(pair, maria_db, name, 1500)
    root = f"file://{tmp_path / 'shared'}"

    class Shared(DeltaCli):
        @property
        def root(self) -> str:
            return root

    settings = {"GTIDSNAP_SNAPSHOT_CHUNK_SIZE": "20", "GTIDSNAP_SNAPSHOT_CHUNK_DELAY_MS": "100"}
    settings["GTIDSNAP_SINK_OWNER_LEASE_S"] = "4"
    first, other = (
        Shared(pair, maria_db, tmp_path / "one", settings),
        Shared(pair, maria_db, tmp_path / "two", settings),
    )
    for cli in (first, other):
        cli.out.mkdir()
    proc, log = first.start()
    try:
        assert wait_for_log(proc, log, lambda text: "Delta sink at " in text, "the first run's sink to open")
        code, text = other.run()
        assert code == 1 and f"is written by another gtidsnap run (pid {proc.pid} on " in text, tail(text)
    finally:
        kill_group(proc)
    code, text = first.run()  # its restart after the kill -9
    assert code == 0, tail(text)
    assert "the output's lease is held by" in text, "it waited for the dead run's lease to end"


def test_a_lock_file_planted_as_a_link_is_refused_and_its_target_untouched(
    mariadb_pair: ReplicaPair, maria_db: str, tmp_path: Path
) -> None:
    """The issue: ``ln -sf victim.txt cp.json.lock; gtidsnap run ...`` overwrote victim.txt with the
    holder's JSON. Now the run stops at once, naming the link, and victim.txt is as it was; the link
    removed, the same command runs."""
    pair = mariadb_pair
    create_table(pair, maria_db, "t", 20)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (tmp_path / "checkpoint.json.lock").symlink_to("victim.txt")
    args = run_args(tmp_path, f"{maria_db}.t")
    refused = subprocess.run(
        gtidsnap_cmd(*args), env=cli_env(pair), cwd=REPO, capture_output=True, text=True, timeout=120
    )
    errors = [line for line in refused.stderr.splitlines() if line.startswith("error:")]
    assert refused.returncode == 1 and "Traceback" not in refused.stderr, refused.stderr
    assert len(errors) == 1 and "checkpoint.json.lock is a symbolic link (to victim.txt)" in errors[0], errors
    assert "remove the link" in errors[0] and "this may pass" not in refused.stderr
    assert victim.read_text() == "precious\n" and not (tmp_path / "changes.jsonl").exists()
    (tmp_path / "checkpoint.json.lock").unlink()
    ran = subprocess.run(
        gtidsnap_cmd(*args), env=cli_env(pair), cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert victim.read_text() == "precious\n" and len(read_records(tmp_path)) == 20


@pytest.mark.parametrize("renewed", ["now + 1e9", "1e400"])
def test_a_lease_renewed_in_the_future_is_refused_at_once_naming_both_clocks(
    mariadb_pair: ReplicaPair, tmp_path: Path, renewed: str
) -> None:
    """The issue: ``"renewed": now + 1e9`` in ``_gtidsnap_owner.json`` of a ``file://`` Delta output made a
    run wait 1000000009 s for it to run out; ``1e400`` ended in ``unexpected OverflowError``. Now the run
    is refused within seconds, before Spark starts, naming the holder and both clocks."""
    out = tmp_path / "delta"
    out.mkdir()
    held = {"host": "host-b", "pid": 4242, "since": "2026-11-28T06:20:00+00:00", "run": "host-b:4242:1"}
    value = str(time.time() + 1e9) if renewed.startswith("now") else renewed
    text = json.dumps({**held, "renewed": 0.0}).replace('"renewed": 0.0', f'"renewed": {value}')
    (out / "_gtidsnap_owner.json").write_text(text)
    env = cli_env(mariadb_pair) | {"GTIDSNAP_SINK_TYPE": "delta", "GTIDSNAP_SINK_PATH": f"file://{out}"}
    env["GTIDSNAP_CHECKPOINT_PATH"] = str(tmp_path / "checkpoint.json")
    started = time.monotonic()
    refused = subprocess.run(
        gtidsnap_cmd("run", "--until-caught-up"),
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert time.monotonic() - started < 60, "it waited"
    errors = [line for line in refused.stderr.splitlines() if line.startswith("error:")]
    assert refused.returncode == 1 and "Traceback" not in refused.stderr, refused.stderr
    assert (
        len(errors) == 1
        and "a lease renewed in the future by another gtidsnap run (pid 4242 on host-b" in (errors[0])
    ), refused.stderr
    assert "this host's clock says" in errors[0] and "the clocks of the two hosts disagree" in errors[0]
