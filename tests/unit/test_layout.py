"""The package's shape: folders as layers (what may import what), modules of a readable size, a few flat
modules, a module map in docs/design.md that names every module, the public surface, and a README
sized for its readers (the other docs' checks: tests/unit/test_docs.py)."""

from __future__ import annotations

import ast
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import gtidsnap

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "gtidsnap"
# A module's size follows its concept: past REVIEW_LINES a module is named for review (is it one
# concept?), past MAX_LINES it fails (split it by concept, never to make room).
REVIEW_LINES = 400
MAX_LINES = 700
FLAT_AT_MOST = 6
README_MAX_BYTES = 25 * 1024  # the README is for users: what it does, how to run and operate it
# folder -> folders of gtidsnap it must never import
FORBIDDEN = {
    "core": {
        "source",
        "snapshot",
        "engine",
        "signals",
        "filters",
        "config",
        "cli",
        "sinks",
        "run",
        "observe",
        "verify",
    },
    "filters": {
        "source",
        "snapshot",
        "engine",
        "signals",
        "config",
        "cli",
        "sinks",
        "run",
        "observe",
        "verify",
    },
    "source": {"engine", "cli", "run", "snapshot", "sinks", "signals", "observe", "verify"},
    "snapshot": {"engine", "cli", "run", "sinks", "signals", "observe", "verify"},
    "sinks": {"engine", "cli", "run", "snapshot", "signals", "observe", "verify"},
    "signals": {"engine", "cli", "run", "snapshot", "sinks", "observe", "verify"},
    "config": {"engine", "cli", "run", "snapshot", "sinks", "signals", "observe", "verify"},
    "engine": {"cli", "run", "observe", "verify"},
    "verify": {"engine", "cli", "run", "snapshot", "signals", "observe"},
    "observe": {"cli", "run"},
}


def modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def relative(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def imported(path: Path) -> set[str]:
    """The gtidsnap modules ``path`` imports, as dotted names below ``gtidsnap.``."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        found.update(n.removeprefix("gtidsnap.") for n in names if n.startswith("gtidsnap."))
    return found


@pytest.mark.parametrize("path", modules(), ids=relative)
def test_no_module_imports_a_layer_above_its_own(path: Path) -> None:
    folder = path.relative_to(PACKAGE).parts[0] if path.parent != PACKAGE else None
    forbidden = FORBIDDEN.get(folder or "", set())
    wrong = sorted(m for m in imported(path) if m.split(".")[0] in forbidden)
    assert not wrong, f"{relative(path)} ({folder}/) must not import {wrong}"


def test_modules_stay_readable() -> None:
    sizes = {relative(p): len(p.read_text(encoding="utf-8").splitlines()) for p in modules()}
    review = {m: n for m, n in sizes.items() if REVIEW_LINES < n <= MAX_LINES}
    if review:
        warnings.warn(f"over {REVIEW_LINES} lines, to review as one concept each: {review}", stacklevel=1)
    long = {m: n for m, n in sizes.items() if n > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: split them by concept: {long}"


def test_few_modules_stay_flat() -> None:
    flat = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(flat) <= FLAT_AT_MOST, flat


def test_the_design_doc_names_every_module() -> None:
    design = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    missing = [relative(p) for p in modules() if p.name != "__init__.py" or p.parent == PACKAGE]
    missing = [m for m in missing if f"`{m}`" not in design]
    assert not missing, f"docs/design.md's module map lacks {missing}"


def test_the_readme_stays_a_users_page() -> None:
    """The README is for users: past README_MAX_BYTES it is carrying what belongs elsewhere."""
    size = len((ROOT / "README.md").read_bytes())
    assert size <= README_MAX_BYTES, (
        f"README.md is {size:,} bytes, over the {README_MAX_BYTES:,} a users' page may hold: figures go to "
        "docs/benchmarks.md, internals to docs/design.md (the README keeps a sentence and a link)"
    )


def test_the_public_surface_resolves_and_is_declared_whole() -> None:
    """Every name of ``__all__`` is there (each from its home module), and nothing else is offered."""
    assert set(gtidsnap.__all__) == {"__version__", *gtidsnap._HOMES}
    for name in gtidsnap.__all__:
        assert getattr(gtidsnap, name) is not None, name
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        gtidsnap.nope  # noqa: B018


def test_importing_the_package_or_a_reader_loads_no_spark_kafka_or_engine() -> None:
    """A chunk reader process (or a Spark executor's worker) imports gtidsnap.snapshot.readers: it must
    not pay for pyspark, Kafka or the engine."""
    code = (
        "import sys, gtidsnap, gtidsnap.snapshot.readers\n"
        "heavy = [m for m in ('pyspark', 'confluent_kafka', 'gtidsnap.engine.loop', 'typer') "
        "if m in sys.modules]\n"
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == ""
