"""A chunk reader process loads neither Spark's Python nor pandas: each costs every reader tens of MB
of RSS, and a reader needs neither (pyarrow would import pandas at its first ``pa.array``)."""

from __future__ import annotations

import subprocess
import sys

PROGRAM = """
import pickle, sys
from gtidsnap.snapshot import readers
import gtidsnap.sinks.delta.staging
from gtidsnap.sinks.arrow_columns import ArrowRows
from gtidsnap.process_memory import lean_process
lean_process()  # what a reader's start does
import pyarrow as pa
batch = pa.RecordBatch.from_arrays([pa.array([1, 2]), pa.array(["x", "y"])], names=["id", "name"])
back = pickle.loads(pickle.dumps(ArrowRows(batch)))
assert back.batch.equals(batch)
print(sorted(m for m in ("pandas", "pyspark", "py4j") if m in sys.modules))
"""


def test_a_reader_renders_and_sends_arrow_rows_without_pandas_or_pyspark() -> None:
    done = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", f"a reader loaded {done.stdout.strip()}"
