"""The pins of a lock file (lock/dev.txt, written by scripts/lock) and how a Python environment's installed
versions differ from them: read by tests/unit/test_lock.py and printed by scripts/check-newest.

    python scripts/lock_pins.py lock/dev.txt   # the running environment against the lock, one line a package
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from importlib.metadata import distributions
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name


@dataclass(frozen=True)
class Pin:
    """One ``name==version`` line of a lock file, with its ``--hash`` options."""

    name: str  # canonical (PEP 503): lower case, runs of -_. as one -
    version: str
    hashes: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.name}=={self.version} ({len(self.hashes)} hashes)"


def pins(lock: Path) -> dict[str, Pin]:
    """The lock's pins by canonical name. A requirement may go on over lines ending in a backslash."""
    found: dict[str, Pin] = {}
    logical = ""
    for raw in lock.read_text(encoding="utf-8").splitlines():
        line = "" if raw.lstrip().startswith("#") else raw.split(" #", 1)[0].strip()
        if line.endswith("\\"):
            logical += line[:-1] + " "
            continue
        logical = (logical + line).strip()
        if logical and not logical.startswith("-"):  # an option line (--index-url ...) pins nothing
            requirement, *options = logical.split(" --")
            req = Requirement(requirement.strip())
            specs = list(req.specifier)
            if len(specs) != 1 or specs[0].operator != "==":
                raise ValueError(f"{lock}: {requirement.strip()!r} is not pinned with == (run scripts/lock)")
            hashes = tuple(o.split("=", 1)[1].strip() for o in options if o.startswith("hash="))
            found[canonicalize_name(req.name)] = Pin(canonicalize_name(req.name), specs[0].version, hashes)
        logical = ""
    return found


def installed_versions(skip: frozenset[str] = frozenset({"gtidsnap"})) -> dict[str, str]:
    """The running environment's distributions by canonical name (gtidsnap itself is not in a lock)."""
    found = {canonicalize_name(d.metadata["Name"]): d.version for d in distributions()}
    return {name: version for name, version in found.items() if name not in skip}


def differences(locked: dict[str, Pin], installed: dict[str, str]) -> list[tuple[str, str, str]]:
    """(name, locked version or "-", installed version or "-") for every package where they differ."""
    out = []
    for name in sorted(locked.keys() | installed.keys()):
        was = locked[name].version if name in locked else "-"
        now = installed.get(name, "-")
        if was != now:
            out.append((name, was, now))
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python scripts/lock_pins.py LOCK_FILE", file=sys.stderr)
        return 2
    lock = Path(argv[0])
    locked = pins(lock)
    # a venv comes with setuptools (it builds gtidsnap): a difference only when a locked package needs it
    installed = {n: v for n, v in installed_versions().items() if n != "setuptools" or n in locked}
    diff = differences(locked, installed)
    if not diff:
        print(f"every installed version is the one {lock} pins")
        return 0
    width = max(len(name) for name, _, _ in diff)
    print(f"{'package'.ljust(width)}  {'locked':>14}  {'installed':>14}")
    for name, was, now in diff:
        print(f"{name.ljust(width)}  {was:>14}  {now:>14}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
