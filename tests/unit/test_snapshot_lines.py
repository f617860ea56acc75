"""A snapshot row encoded by its reader makes the very line its record would."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from gtidsnap.model import TableId
from gtidsnap.records import Record, SnapshotLine, snapshot_line_body, snapshot_output

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
    st.dictionaries(st.text(max_size=8), _VALUES, min_size=1, max_size=6),
    st.integers(0, 2**40),
    st.integers(0, 2**34),
    st.text(st.characters(min_codepoint=32, exclude_categories=["Cs"]), min_size=1, max_size=10),
)
def test_a_reader_encoded_row_gives_its_records_line(
    row: dict[str, Any], seq: int, now: int, name: str
) -> None:
    table = TableId("db", name)
    key_columns = list(row)[:2]
    (record,) = snapshot_output(table, [row], key_columns, seq, False, now)
    assert isinstance(record, Record)
    body = snapshot_line_body([row.get(c) for c in key_columns], row)
    if body is None:  # orjson cannot write it: the record's own line is the fallback one
        try:
            orjson.dumps(record.to_json())
        except orjson.JSONEncodeError:
            return
        raise AssertionError("a body was refused though the record's line is orjson's")
    line = SnapshotLine(orjson.dumps(str(table)), body, seq, now).to_line()
    assert line == record.to_line()
