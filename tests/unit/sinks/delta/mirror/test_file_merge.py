"""The MERGE done by rewriting files (gtidsnap.sinks.delta.mirror.file_merge: merged_file a file
at a time, then inserted) against a model of
the sink's Spark MERGE (``whenMatchedDelete`` / ``whenMatchedUpdateAll`` over an older ``_seq``,
``whenNotMatchedInsertAll`` but deletes) on random worlds: a mirror in several files, changes of
held keys newer and older than their rows, inserts, deletes of held and unknown keys. The mirror
after it and the Change Data Feed rows must be the model's; only files with a row changed are
rewritten; file statistics prune by key without losing a file."""

from __future__ import annotations

import json
from collections import Counter

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from gtidsnap.sinks.delta.mirror.file_merge import inserted, merged_file, touched

KEY = ["id"]


@st.composite
def worlds(draw: st.DrawFn) -> tuple[list[dict[int, int]], dict[int, tuple[int, str]]]:
    """Files of the mirror (key -> _seq, keys unique over the files) and the changes (key -> (_seq, op))."""
    keys = draw(st.lists(st.integers(0, 60), unique=True, max_size=40))
    files: list[dict[int, int]] = [{} for _ in range(draw(st.integers(1, 4)))]
    for k in keys:
        files[draw(st.integers(0, len(files) - 1))][k] = draw(st.integers(0, 10))
    changed = draw(st.lists(st.integers(0, 80), unique=True, max_size=30))
    changes = {k: (draw(st.integers(0, 12)), draw(st.sampled_from("cud"))) for k in changed}
    return files, changes


def _table(rows: list[tuple[int, int, str, str]]) -> pa.Table:
    ids, seqs, ops, vals = zip(*rows, strict=True) if rows else ((), (), (), ())
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "v": pa.array(vals, pa.string()),
            "_op": pa.array(ops, pa.string()),
            "_seq": pa.array(seqs, pa.int64()),
        }
    )


@settings(max_examples=300, deadline=None)
@given(worlds())
def test_rewrite_is_the_spark_merge(world: tuple[list[dict[int, int]], dict[int, tuple[int, str]]]) -> None:
    files, changes = world
    source = _table([(k, s, op, f"new-{k}-{s}") for k, (s, op) in changes.items()])
    done = [
        merged_file(_table([(k, s, "u", f"old-{k}-{s}") for k, s in f.items()]), source, KEY) for f in files
    ]
    new = inserted(source, [d.matched for d in done])
    target_rows = [(k, s, "u", f"old-{k}-{s}") for f in files for k, s in f.items()]

    # the model: Spark's MERGE, row by row
    mirror = {k: (s, "u", f"old-{k}-{s}") for k, s, _, _ in target_rows}
    cdf: Counter[tuple[str, int, str]] = Counter()
    changed_files = set()
    where = {k: i for i, f in enumerate(files) for k in f}
    for k, (s, op) in changes.items():
        if k in mirror:
            old = mirror[k]
            if s > old[0]:
                changed_files.add(where[k])
                if op == "d":
                    del mirror[k]
                    cdf[("delete", k, old[2])] += 1
                else:
                    mirror[k] = (s, op, f"new-{k}-{s}")
                    cdf[("update_preimage", k, old[2])] += 1
                    cdf[("update_postimage", k, f"new-{k}-{s}")] += 1
        elif op != "d":
            mirror[k] = (s, op, f"new-{k}-{s}")
            cdf[("insert", k, f"new-{k}-{s}")] += 1

    assert {i for i, d in enumerate(done) if d.rows is not None} == changed_files
    kept = [
        (k, s, "u", f"old-{k}-{s}") for i, f in enumerate(files) if done[i].rows is None for k, s in f.items()
    ]
    rows = _table(kept).to_pylist() + [r for d in done if d.rows is not None for r in d.rows.to_pylist()]
    rows += new.to_pylist()
    after = {r["id"]: (r["_seq"], r["_op"], r["v"]) for r in rows}
    assert len(rows) == len(after)  # no key twice
    assert after == mirror
    feed = [r for d in done for r in d.changes.to_pylist()]
    got = Counter((r["_change_type"], r["id"], r["v"]) for r in feed)
    got.update(("insert", r["id"], r["v"]) for r in new.to_pylist())
    assert got == cdf
    kinds = Counter(kind for kind, _, _ in cdf.elements())
    assert (sum(d.updated for d in done), sum(d.deleted for d in done), new.num_rows) == (
        kinds["update_postimage"],
        kinds["delete"],
        kinds["insert"],
    )


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(-50, 50), st.integers(0, 30)), max_size=8),
    st.lists(st.integers(-60, 80), max_size=20),
)
def test_statistics_never_lose_a_file_holding_a_key(spans: list[tuple[int, int]], keys: list[int]) -> None:
    files = [
        {
            "path": f"f{i}",
            "size": 1,
            "stats": json.dumps({"minValues": {"id": lo}, "maxValues": {"id": lo + w}}),
        }
        for i, (lo, w) in enumerate(spans)
    ]
    files.append({"path": "no-stats", "size": 1})
    found = {f["path"] for f in touched(files, "id", pa.array(keys, pa.int64()))}
    want = {f"f{i}" for i, (lo, w) in enumerate(spans) if any(lo <= k <= lo + w for k in keys)}
    assert found == want | {"no-stats"}
    strings = touched(files, "id", pa.array([str(k) for k in keys], pa.string()))
    assert len(strings) == len(files)  # a string's bounds are prefixes: every file
