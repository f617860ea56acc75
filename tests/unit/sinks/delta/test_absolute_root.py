"""The output's root as Spark sees it."""

from __future__ import annotations

import os

import pytest

from gtidsnap.sinks.delta.layout import absolute_root


@pytest.mark.parametrize(
    ("given", "root"),
    [
        ("s3a://bucket/cdc/", "s3a://bucket/cdc"),
        ("file:///tmp/out/", "file:/tmp/out"),  # the form Delta records: no "two locations" at CREATE
        ("file:/tmp/out", "file:/tmp/out"),
        ("out/delta", os.path.abspath("out/delta")),
    ],
)
def test_the_root_spark_is_given(given: str, root: str) -> None:
    assert absolute_root(given) == root
