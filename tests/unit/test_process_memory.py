"""gtidsnap's processes do without pandas: pyarrow and pyspark both try to import it, and take its
absence as "no pandas" (the engine's ~40 MB); a process that had it already keeps it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gtidsnap.process_memory import WithoutPandas

ENGINE = """
import sys
from gtidsnap.process_memory import lean_process
lean_process()
lean_process()  # twice: one finder
import pyarrow as pa
pa.array([1, 2])  # pyarrow's first array of Python values asks for pandas
from pyspark.testing.utils import have_pandas  # what pyspark's first Py4J call imports
from pyspark.sql.types import LongType, StructField, StructType
print(have_pandas, "pandas" in sys.modules, sum(type(f).__name__ == "WithoutPandas" for f in sys.meta_path))
"""


def run(program: str) -> str:
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_lean_process_imports_no_pandas_and_its_libraries_carry_on_without() -> None:
    assert run(ENGINE) == "False False 1"


def test_a_process_that_has_pandas_keeps_it() -> None:
    program = "import pandas, sys\nfrom gtidsnap.process_memory import lean_process\nlean_process()\n"
    program += "import pandas.api\nprint(sum(type(f).__name__ == 'WithoutPandas' for f in sys.meta_path))"
    assert run(program) == "0"


def test_the_import_of_pandas_fails_with_a_clear_error() -> None:
    with pytest.raises(ImportError, match="without pandas"):
        WithoutPandas().find_spec("pandas.core", None)
    assert WithoutPandas().find_spec("pyarrow", None) is None
