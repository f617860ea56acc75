"""The output refused by the system (a full disk, a file size limit): a clear, retryable error naming
the file, never "unexpected ... please report it", and the same command again finishes exactly."""

from __future__ import annotations

import json
import resource
import subprocess
from pathlib import Path

import pytest

from gtidsnap.core.model import TableId
from tests.integration.cdc import check_invariants, cli_env, create_table, gtidsnap_cmd, source_rows
from tests.integration.fixtures.db_servers import ReplicaPair

pytestmark = pytest.mark.integration

FILE_LIMIT = 32 * 1024  # bytes: the JSON lines of 2,000 rows are ~70 KB; the checkpoint is far smaller


def test_a_file_size_limit_is_a_retryable_error_naming_the_output(
    mariadb_pair: ReplicaPair, maria_db: str, tmp_path: Path
) -> None:
    pair, db = mariadb_pair, maria_db
    create_table(pair, db, "t", 2000)
    table = TableId(db, "t")
    out = tmp_path / "changes.jsonl"
    args = gtidsnap_cmd("run", "--snapshot", str(table), "--until-caught-up", "--sink-path", str(out))
    args += ["--checkpoint", str(tmp_path / "checkpoint.json")]
    env = {**cli_env(pair), "COLUMNS": "400"}  # rich wraps at 80 columns when not on a terminal

    def limited() -> None:  # as `ulimit -f` would: writes past it fail with EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_LIMIT, FILE_LIMIT))

    failed = subprocess.run(
        args, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300, preexec_fn=limited
    )
    assert failed.returncode == 1, failed.stderr
    errors = [line for line in failed.stderr.splitlines() if line.startswith("error: ")]
    wanted = f"error: writing {out} failed: File too large; what was committed is kept"
    assert errors == [wanted], failed.stderr
    assert "the same command again is safe" in failed.stderr and "unexpected" not in failed.stderr
    assert out.stat().st_size <= FILE_LIMIT

    done = subprocess.run(args, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    check_invariants(records, {str(table): source_rows(pair, db, "t")})
