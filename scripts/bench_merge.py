"""What deletion vectors on a mirror pay: the sink's MERGE of changes into a 1M-row mirror, with and without
``delta.enableDeletionVectors``, for changes spread over the whole table and for changes to one range
of keys, measured in one run (wall seconds and the JVM's CPU seconds, read from /proc before and
after each MERGE). Results: ``scripts/results/merge-dv-<label>.json`` and ``.md``.

Run on a quiet machine: ``.venv/bin/python scripts/bench_merge.py --label s29``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gtidsnap.sinks.delta.spark_session import build_spark_session
from gtidsnap.sinks.delta.tables import merge_newest, table_properties
from gtidsnap.sinks.delta.util import same_key

RESULTS = Path(__file__).resolve().parent / "results"


def jvm_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def mirror(spark: Any, path: str, rows: int, files: int, deletion_vectors: bool, width: int) -> None:
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    fields = [
        T.StructField("id", T.LongType()),
        T.StructField("v", T.IntegerType()),
        T.StructField("payload", T.StringType()),
        T.StructField("_op", T.StringType()),
        T.StructField("_seq", T.LongType()),
        T.StructField("_gtid", T.StringType()),
        T.StructField("_source_ts", T.TimestampType()),
    ]
    builder = DeltaTable.createIfNotExists(spark).location(path).addColumns(T.StructType(fields))
    for name, value in table_properties(["id"], True, deletion_vectors).items():
        builder = builder.property(name, value)
    builder.execute()
    frame = spark.range(rows).select(
        F.col("id"),
        F.lit(0).alias("v"),
        F.concat(F.lit("p" * width), F.col("id").cast("string")).alias("payload"),
        F.lit("r").alias("_op"),
        (F.col("id") + 1).alias("_seq"),
        F.lit(None).cast("string").alias("_gtid"),
        F.current_timestamp().alias("_source_ts"),
    )
    frame.repartitionByRange(files, "id").write.format("delta").mode("append").save(path)


def changes(spark: Any, keys: list[int], seq: int) -> Any:
    from pyspark.sql import functions as F

    rows = [(k, 1, f"changed-{k}", "u", seq + i, f"0-1-{seq + i}") for i, k in enumerate(keys)]
    frame = spark.createDataFrame(rows, "id long, v int, payload string, _op string, _seq long, _gtid string")
    return frame.withColumn("_source_ts", F.current_timestamp())


def measure(spark: Any, pid: int, path: str, keys: list[int], seq: int) -> dict[str, float]:
    source = changes(spark, keys, seq).cache()
    source.count()
    cpu, started = jvm_cpu_s(pid), time.monotonic()
    merge_newest(spark, path, source, same_key(["id"]))
    wall, jvm = time.monotonic() - started, jvm_cpu_s(pid) - cpu
    source.unpersist()
    return {"changes": len(keys), "wall_s": round(wall, 2), "jvm_cpu_s": round(jvm, 2)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--label", required=True)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--files", type=int, default=16, help="data files of the mirror")
    parser.add_argument("--width", type=int, default=8, help="characters of each row's payload")
    args = parser.parse_args()
    spark = build_spark_session("gtidsnap-bench-merge", "local[2]")
    pid = int(spark._jvm.java.lang.ProcessHandle.current().pid())  # type: ignore[attr-defined]
    rnd = random.Random(29)
    shapes = {
        "scattered 1k": rnd.sample(range(args.rows), 1_000),
        "scattered 46k": rnd.sample(range(args.rows), 46_000),
        "one range 10k": list(range(args.rows // 2, args.rows // 2 + 10_000)),
    }
    results: dict[str, Any] = {"label": args.label, "rows": args.rows, "files": args.files}
    results["width"] = args.width
    results["merges"] = []
    with tempfile.TemporaryDirectory(prefix="bench-merge-") as work:
        for dv in (False, True):
            path = f"{work}/mirror-dv-{dv}"
            mirror(spark, path, args.rows, args.files, dv, args.width)
            seq = args.rows + 1
            merge_newest(spark, path, changes(spark, [1, 2], seq), same_key(["id"]))  # the JVM's first MERGE
            for shape, keys in shapes.items():
                seq += 100_000
                got = measure(spark, pid, path, keys, seq)
                results["merges"].append({"deletion_vectors": dv, "shape": shape, **got})
                print(f"deletion vectors {dv!s:5} {shape:14} {got}", flush=True)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"merge-dv-{args.label}.json").write_text(
        json.dumps(results, indent=1) + "\n", encoding="utf-8"
    )
    lines = [
        f"# MERGE into a {args.rows:,}-row mirror of {args.files} files ({args.width}-character payloads), "
        "with and without deletion vectors",
        "",
        "| changes | without: wall s | JVM CPU s | with: wall s | JVM CPU s |",
        "|---|---|---|---|---|",
    ]
    for shape in shapes:
        off = next(m for m in results["merges"] if m["shape"] == shape and not m["deletion_vectors"])
        on = next(m for m in results["merges"] if m["shape"] == shape and m["deletion_vectors"])
        lines.append(
            f"| {shape} | {off['wall_s']} | {off['jvm_cpu_s']} | {on['wall_s']} | {on['jvm_cpu_s']} |"
        )
    (RESULTS / f"merge-dv-{args.label}.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
