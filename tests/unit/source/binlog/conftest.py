"""The library's value decoding as a stream uses it: with gtidsnap's value fixes, which a stream installs
when it starts (``source/binlog/library.py``), never an import."""

from __future__ import annotations

import pytest

from gtidsnap.source.binlog import values


@pytest.fixture(autouse=True, scope="session")
def value_fixes_installed() -> None:
    values.install()
