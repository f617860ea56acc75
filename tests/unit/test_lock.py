"""The lock files (written by scripts/lock) are in step with pyproject.toml, and the running venv holds the
locked versions: the versions the tests run on are the ones scripts/setup and CI install."""

from __future__ import annotations

import importlib.util
import sys
import tomllib
from pathlib import Path
from types import ModuleType

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
DEV_LOCK = ROOT / "lock" / "dev.txt"
BENCH_LOCK = ROOT / "lock" / "bench.txt"
INSTALLER = ROOT / "lock" / "installer.in"


def load_lock_pins() -> ModuleType:
    """scripts/lock_pins.py, the lock reader scripts/check-newest prints with (scripts is no package)."""
    spec = importlib.util.spec_from_file_location("lock_pins", ROOT / "scripts" / "lock_pins.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("lock_pins", module)
    spec.loader.exec_module(module)
    return module


lock_pins = load_lock_pins()


def declared(*extras: str) -> list[Requirement]:
    """pyproject.toml's dependencies, with those of ``extras``, and the installer the locks pin too,
    each whose marker holds here (the locks are resolved for CPython 3.11 on Linux)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    lines = list(project["dependencies"])
    for extra in extras:
        lines += project["optional-dependencies"][extra]
    lines += [s for s in (ln.split("#", 1)[0].strip() for ln in INSTALLER.read_text().splitlines()) if s]
    reqs = [Requirement(line) for line in lines]
    return [r for r in reqs if r.marker is None or r.marker.evaluate({"extra": ""})]


def out_of_step(lock: Path, requirements: list[Requirement]) -> list[str]:
    """Each requirement the lock does not pin, or pins at a version outside the requirement's range."""
    pinned = lock_pins.pins(lock)
    problems = []
    for req in requirements:
        pin = pinned.get(canonicalize_name(req.name))
        if pin is None:
            problems.append(f"{req.name} is not in {lock.name}")
        elif not req.specifier.contains(pin.version, prereleases=True):
            problems.append(f"{req.name}=={pin.version} in {lock.name} is outside {req}")
    return problems


@pytest.mark.parametrize(("lock", "extras"), [(DEV_LOCK, ("dev",)), (BENCH_LOCK, ("dev", "bench"))])
def test_the_lock_pins_each_declared_dependency_in_its_range(lock: Path, extras: tuple[str, ...]) -> None:
    problems = out_of_step(lock, declared(*extras))
    assert not problems, "; ".join(problems) + ": run scripts/lock and commit the lock files"


@pytest.mark.parametrize("lock", [DEV_LOCK, BENCH_LOCK])
def test_every_pin_carries_the_hashes_pip_checks(lock: Path) -> None:
    unhashed = [name for name, pin in lock_pins.pins(lock).items() if not pin.hashes]
    assert not unhashed, f"{lock.name} pins {unhashed} without --hash: write it with scripts/lock"


def test_the_bench_lock_keeps_the_dev_locks_versions() -> None:
    dev, bench = lock_pins.pins(DEV_LOCK), lock_pins.pins(BENCH_LOCK)
    moved = [f"{n}: {dev[n]} -> {bench[n]}" for n in dev if n in bench and dev[n] != bench[n]]
    missing = sorted(dev.keys() - bench.keys())
    assert not moved and not missing, f"lock/bench.txt left lock/dev.txt: {moved} {missing}: run scripts/lock"


def test_the_installed_versions_are_the_locked_ones() -> None:
    installed = lock_pins.installed_versions()
    wrong = [
        (name, was, now)
        for name, was, now in lock_pins.differences(lock_pins.pins(DEV_LOCK), installed)
        if was != "-"  # what the lock does not pin (the bench extra, setuptools) may be there as well
    ]
    assert not wrong, (
        f"this venv ({sys.prefix}) is not the one lock/dev.txt pins (package, locked, installed): {wrong}; "
        "run scripts/setup"
    )


def test_a_pin_outside_its_range_is_out_of_step(tmp_path: Path) -> None:
    """The check above can fail: a lock a range has moved away from is named, and so is a missing pin."""
    lock = tmp_path / "lock.txt"
    lock.write_text("pymysql==1.1.0 \\\n    --hash=sha256:00\n    # via gtidsnap (pyproject.toml)\n")
    assert out_of_step(lock, [Requirement("pymysql==1.2.4"), Requirement("orjson>=3.10")]) == [
        "pymysql==1.1.0 in lock.txt is outside pymysql==1.2.4",
        "orjson is not in lock.txt",
    ]
