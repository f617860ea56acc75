"""A snapshot row encoded by its reader makes the very line its record would."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gtidsnap.core.model import TableId
from gtidsnap.core.records import (
    Record,
    SnapshotLines,
    emitted_rows,
    encoded_chunk_rows,
    encoded_line,
    snapshot_line_body,
    snapshot_output,
)

_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**64), 2**64)  # beyond 64 bits orjson refuses: the row travels as values
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()  # lone surrogates too: orjson refuses them
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
)


@settings(max_examples=500, deadline=None)
@given(
    st.lists(st.dictionaries(st.text(max_size=8), _VALUES, min_size=1, max_size=6), max_size=6),
    st.integers(0, 2**40),
    st.integers(0, 2**34),
    st.text(st.characters(min_codepoint=32, exclude_categories=["Cs"]), min_size=1, max_size=10),
    st.sampled_from([["k"], ["k", "k2"], ["k2", "k"]]),
    _VALUES,
)
def test_a_chunk_its_reader_encoded_gives_its_records_lines(
    rows: list[dict[str, Any]], seq: int, now: int, name: str, key_columns: list[str], k2: Any
) -> None:
    """A reader's chunk (some rows encoded, the ones orjson refuses as values) makes, byte for byte, the
    lines of the records of the same rows, numbered alike: one SnapshotLines per run of encoded rows.
    Keys of one column and of several (one of them a value orjson may refuse)."""
    table = TableId("db", name)
    rows = [{**row, "k": i, "k2": k2} for i, row in enumerate(rows)]
    plain = snapshot_output(table, rows, key_columns, seq, False, now)
    assert all(isinstance(r, Record) for r in plain) and len(plain) == len(rows)
    keys, encoded = encoded_chunk_rows((((i,), row) for i, row in enumerate(rows)), key_columns)
    assert keys == tuple((i,) for i in range(len(rows)))
    for row, sent in zip(rows, encoded, strict=True):
        if isinstance(sent, bytes):
            assert sent == snapshot_line_body([row[c] for c in key_columns], row)
        else:  # orjson cannot write it: the record's own line is the fallback one
            assert sent is row
            with pytest.raises(orjson.JSONEncodeError):
                orjson.dumps(row)
    out = snapshot_output(table, encoded, key_columns, seq, False, now)
    assert emitted_rows(out) == len(rows)
    runs = sum(
        1
        for i, r in enumerate(encoded)
        if isinstance(r, bytes) and (i == 0 or not isinstance(encoded[i - 1], bytes))
    )
    assert sum(isinstance(r, SnapshotLines) for r in out) == runs, "one object per run of encoded rows"
    assert b"".join(map(encoded_line, out)) == b"".join(r.to_line() for r in plain)
