"""Tables by name in a real catalog server: the harness's Hive metastore (pyspark's own Hive 2.3 jars,
``scripts/metastore.sh``), on loopback only. gtidsnap registers an output's mirrors, changelogs and
histories there (``sink.metastore = "external"``, ``sink.metastore_uris``) while a second Spark
application reads them by name as gtidsnap streams; the metastore restarted mid-run; a run started
while it is down fails clearly and, run again, registers what it made; two outputs register side by
side. MariaDB only: names are the Delta side's alone."""

from __future__ import annotations

import ipaddress
import json
import re
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.cdc import REPO, Writer, create_table, execute, gtidsnap_cmd, source_rows, wait_for
from tests.integration.fixtures.db_servers import ReplicaPair, fresh_database
from tests.integration.test_delta_engine import DeltaCli, kill_group, read, tail

pytestmark = pytest.mark.integration

PORT = 39083  # scripts/lib.sh's METASTORE_PORT
URI = f"thrift://127.0.0.1:{PORT}"

# A consumer's own Spark application: reads what it is asked, by name, as long as the test runs.
READER = """
import json, sys
from gtidsnap.sinks.delta.spark_session import build_spark_session

spark = build_spark_session("consumer", "local[1]", None, {
    "spark.sql.catalogImplementation": "hive",
    "spark.hadoop.hive.metastore.uris": sys.argv[1],
    "spark.sql.warehouse.dir": sys.argv[2],
})
print("READY", flush=True)
for line in sys.stdin:
    names = json.loads(line)
    if isinstance(names, dict):  # a program to run here (its SparkSession is this one)
        exec(compile(names["program"], "readme", "exec"), {})
        print("SEEN {}", flush=True)
        continue
    seen = {}
    for name in names:
        try:
            seen[name] = spark.table(name).count()
        except Exception as exc:
            seen[name] = " ".join(str(exc).split())[:300]
    print("SEEN " + json.dumps(seen), flush=True)
"""


def metastore(step: str) -> None:
    done = subprocess.run(
        ["bash", str(REPO / "scripts" / "metastore.sh"), step],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, f"scripts/metastore.sh {step}:\n{done.stdout}{done.stderr}"


@pytest.fixture(scope="module")
def metastore_server() -> str:
    """The harness's metastore, started once (scripts/servers starts it too)."""
    metastore("start")
    return URI


class Consumer:
    """A second Spark application reading tables by name through the metastore (a process of its own)."""

    def __init__(self, cli: DeltaCli, warehouse: Path) -> None:
        script = cli.out / "reader.py"
        script.write_text(READER, encoding="utf-8")
        self.proc = subprocess.Popen(
            [sys.executable, str(script), URI, str(warehouse)],
            env=cli.env(), cwd=cli.out, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=(cli.out / "reader.log").open("wb"), text=True,
        )  # fmt: skip
        self.log = cli.out / "reader.log"
        line = self._line("READY")
        assert line == "READY", line

    def counts(self, names: list[str] | dict[str, str]) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(names) + "\n")
        self.proc.stdin.flush()
        seen: dict[str, Any] = json.loads(self._line("SEEN").removeprefix("SEEN "))
        return seen

    def _line(self, start: str) -> str:
        assert self.proc.stdout is not None
        while True:
            line = self.proc.stdout.readline()
            if not line:
                pytest.fail(f"the consumer's Spark application ended:\n{tail(read(self.log))}", pytrace=False)
            if line.startswith(start):
                return line.strip()

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def other_addresses() -> Iterator[str]:
    """This machine's addresses that are not loopback."""
    seen = set()
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            infos = socket.getaddrinfo(socket.gethostname(), None, family)
        except socket.gaierror:
            continue
        for info in infos:
            address = str(info[4][0]).split("%")[0]
            if not ipaddress.ip_address(address).is_loopback and address not in seen:
                seen.add(address)
                yield address
    done = subprocess.run(["hostname", "-I"], capture_output=True, text=True, check=False)
    for address in done.stdout.split():
        if address not in seen and not ipaddress.ip_address(address).is_loopback:
            seen.add(address)
            yield address


def listening_addresses(port: int) -> set[str]:
    """The local addresses of the sockets listening on ``port`` (from /proc/net/tcp and tcp6)."""
    found = set()
    for table, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            local, state = fields[1], fields[3]
            address, _, hex_port = local.partition(":")
            if state != "0A" or int(hex_port, 16) != port:
                continue
            raw = bytes.fromhex(address)
            if width == 8:
                found.add(str(ipaddress.IPv4Address(raw[::-1])))
            else:  # four little-endian 32-bit words
                words = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
                six = ipaddress.IPv6Address(words)
                found.add(str(six.ipv4_mapped or six))
    return found


def test_the_metastore_listens_on_loopback_only(metastore_server: str) -> None:
    assert listening_addresses(PORT) == {"127.0.0.1"}
    with socket.create_connection(("127.0.0.1", PORT), timeout=5):
        pass
    others = list(other_addresses())
    for address in others:
        with pytest.raises(OSError), socket.create_connection((address, PORT), timeout=5):
            pass


def names_of(db: str, table: str, suffix: str = "") -> list[str]:
    return [f"`{db}`.`{table}{suffix}{kind}`" for kind in ("", "__changelog", "__history")]


def test_tables_by_name_in_the_metastore_server(
    mariadb_pair: ReplicaPair, tmp_path: Path, metastore_server: str
) -> None:
    pair = mariadb_pair
    with fresh_database(pair) as db:
        create_table(pair, db, "a", 200)
        create_table(pair, db, "c", 40)
        by_name = {
            "GTIDSNAP_SINK_DATABASE": "{db}",
            "GTIDSNAP_SINK_METASTORE": "external",
            "GTIDSNAP_SINK_METASTORE_URIS": metastore_server,
            "GTIDSNAP_SINK_HISTORY": "true",
            "GTIDSNAP_SINK_MERGE_INTERVAL_S": "2",
        }
        cli = DeltaCli(pair, db, tmp_path, by_name)
        places = ["--sink-path", cli.root, "--checkpoint", str(tmp_path / "checkpoint.json")]
        consumer = Consumer(cli, tmp_path / "consumer-warehouse")
        writer = Writer(pair, db, ["a"], seed=3, transactions=100_000, pause_s=0.05).start()
        proc, log = cli._spawn(gtidsnap_cmd("run", "--snapshot", f"{db}.a", *places), "run", {})
        try:
            # read by name while gtidsnap streams: every table of a is there, the mirror whole soon
            def read_all() -> dict[str, Any] | None:
                assert proc.poll() is None, tail(read(log))
                seen = consumer.counts(names_of(db, "a"))
                return seen if all(isinstance(n, int) and n > 0 for n in seen.values()) else None

            wait_for("a's mirror, changelog and history by name", read_all, timeout_s=180)
            # the metastore restarted under the run: it goes on, and the names are still there
            metastore("restart")
            time.sleep(3)
            assert proc.poll() is None, f"the run stopped when the metastore restarted:\n{tail(read(log))}"
            wait_for("a's tables by name after the restart", read_all, timeout_s=120)
            # the metastore down while a run starts: it fails clearly, and nothing is lost
            metastore("stop")
        finally:
            kill_group(proc)
            writer.stop()
        writer.join()
        run_c = gtidsnap_cmd("run", "--snapshot", f"{db}.c", "--until-caught-up", *places)
        try:
            code, text = cli._finish(*cli._spawn(run_c, "run", {}), "a run while the metastore is down")
            assert code != 0 and "error:" in text and "Delta output" in text, tail(text)
        finally:
            metastore("start")
        code, text = cli._finish(*cli._spawn(run_c, "run", {}), "the run again")
        assert code == 0, tail(text)
        seen = consumer.counts([*names_of(db, "a"), *names_of(db, "c")])
        assert seen[f"`{db}`.`a`"] == len(source_rows(pair, db, "a")), seen
        assert seen[f"`{db}`.`c`"] == 40 and seen[f"`{db}`.`c__history`"] == 40, seen
        # a second output, with its own names, beside the first in the same metastore
        other = DeltaCli(
            pair, db, tmp_path / "second", {**by_name, "GTIDSNAP_SINK_TABLE_NAME": "{table}_copy"}
        )
        (tmp_path / "second").mkdir()
        execute(pair, db, "INSERT INTO c VALUES (9999, 1, 'only in the second output')")
        second = ["--sink-path", other.root, "--checkpoint", str(tmp_path / "second" / "checkpoint.json")]
        run_second = gtidsnap_cmd("run", "--snapshot", f"{db}.c", "--until-caught-up", *second)
        code, text = other._finish(*other._spawn(run_second, "run", {}), "the second output's run")
        assert code == 0, tail(text)
        seen = consumer.counts([f"`{db}`.`c`", f"`{db}`.`c_copy`", f"`{db}`.`c_copy__history`"])
        assert seen == {f"`{db}`.`c`": 40, f"`{db}`.`c_copy`": 41, f"`{db}`.`c_copy__history`": 41}, seen
        run_readme_samples(consumer, cli, db, tmp_path)
        consumer.close()


def readme_samples() -> str:
    """The Python samples of the README's "Reading the Delta tables", in order, as one program."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("### Reading the Delta tables", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert len(blocks) >= 4, "the section's samples: by name, stream, history, one point"
    return "\n".join(textwrap.dedent(b) for b in blocks)


def run_readme_samples(consumer: Consumer, cli: DeltaCli, db: str, tmp_path: Path) -> None:
    """The README's samples run as written, in the consumer's Spark application, against this output:
    its path, this metastore, the test's tables for the README's (``shop.orders`` is ``a``,
    ``shop.customers`` is ``c``)."""
    program = readme_samples()
    for theirs, ours in (
        ("thrift://10.0.0.5:9083", URI),
        ("/data/consumers/orders-feed", str(tmp_path / "readme-feed")),
        ("/data/cdc", cli.root),
        ("shop.orders", f"{db}.a"),
        ("shop.customers", f"{db}.c"),
    ):
        assert theirs in program, f"the README's samples no longer name {theirs}"
        program = program.replace(theirs, ours)
    assert consumer.counts({"program": program}) == {}, f"the README's samples failed:\n{program}"
