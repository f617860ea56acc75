"""gtidsnap as a user runs it: the real ``gtidsnap run`` in a child process, configured by
``GTIDSNAP_*`` environment variables, with every output line time-stamped on arrival and the child's
memory watched.

Timing comes from the child's own log lines (read as they are written: ``PYTHONUNBUFFERED``):
``started`` is the engine's "first run"/"resuming" line, logged once the sink is open (so Spark's
start-up is not in it), ``done`` is the CLI's final summary, printed after the last commit.

A run that is not done by its deadline is stopped with Ctrl-C (as a user would); its checkpoint,
read just before, says how far it got (what it committed), and its result says ``timed_out``.

Memory: the child's peak RSS from ``wait4`` (exact; for a Delta run it is the larger of Python's and
the JVM's, which the kernel folds in when the child reaps it), plus ``VmHWM`` of the child and of
every descendant (the Spark JVM) polled every 0.2 s. gtidsnap's own processes (the engine and its
chunk readers, not the JVM): the sum of their ``VmHWM`` (each process's peak, as if all peaked at
once), and the peak of their summed PSS (``smaps_rollup``: shared pages, such as the libraries every
process maps, counted once), polled alike.

CPU: user + system seconds of the child (the engine), of its chunk reader processes and of its JVM,
each process's last reading of ``/proc/<pid>/stat`` (polled with the memory; a reader that ends
between two polls loses at most its last 0.2 s), so the cost of a row is known by process.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from bench_lib.env import READER, Pair
from gtidsnap.core.checkpoint import Checkpoint
from gtidsnap.engine.checkpoint_store import CheckpointStore

MARKERS = {
    "started": re.compile(r"first run: streaming from|resuming after"),
    "sink_open": re.compile(r"Delta sink at .* open"),
    "snapshots_done": re.compile(r"snapshots done; streaming up to"),
    "done": re.compile(r"^done: "),
    "continued": re.compile(r"gtidsnap\.run\.failover: continuing on "),  # after a replica was lost
}
_DONE = re.compile(
    r"done: (?P<records>[\d,]+) records \((?P<rows>[\d,]+) snapshot rows in (?P<chunks>[\d,]+) chunks\) "
    r"in (?P<elapsed>[\d.]+)s; binlog paused per chunk p50 (?P<p50>[\d.]+) ms"
)
POLL_S = 0.2
STOP_S = 60.0  # after Ctrl-C at a deadline, how long a run may take to stop before SIGKILL


def gtidsnap_command() -> list[str]:
    script = Path(sys.executable).parent / "gtidsnap"
    return [str(script)] if script.exists() else [sys.executable, "-m", "gtidsnap"]


def cli_env(
    pair: Pair,
    work: Path,
    sink: str,
    tables: Sequence[str],
    chunk_size: int | None = None,
) -> dict[str, str]:
    """The child's environment: ours without any GTIDSNAP_*, plus the run's configuration. The binlog
    heartbeat, batch sizes and intervals stay at their defaults."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GTIDSNAP_")}
    env.update(
        {
            "GTIDSNAP_SOURCE_HOST": "127.0.0.1",
            "GTIDSNAP_SOURCE_PORT": str(pair.replica_port),
            "GTIDSNAP_SOURCE_USER": READER[0],
            "GTIDSNAP_SOURCE_PASSWORD": READER[1],
            "GTIDSNAP_CAPTURE_TABLES": ",".join(tables),
            "GTIDSNAP_SINK_TYPE": sink,
            "GTIDSNAP_SINK_PATH": str(work / ("delta" if sink == "delta" else "changes.jsonl")),
            "GTIDSNAP_CHECKPOINT_PATH": str(work / "checkpoint.json"),
            "PYTHONUNBUFFERED": "1",
            "COLUMNS": "400",  # rich wraps lines at 80 columns when not on a terminal
        }
    )
    # where the Delta jars are; how many binlog decoders (an A/B of the setting)
    for name in (
        "GTIDSNAP_STATE_DIR",
        "GTIDSNAP_DELTA_JARS",
        "GTIDSNAP_BINLOG_DECODERS",
        "GTIDSNAP_SNAPSHOT_COMPILED_READS",  # an A/B of the compiled chunk read
    ):
        if name in os.environ:
            env[name] = os.environ[name]
    if chunk_size is not None:
        env["GTIDSNAP_SNAPSHOT_CHUNK_SIZE"] = str(chunk_size)
    return env


@dataclass
class CliResult:
    """One finished run: exit code, marker times (monotonic), summary, memory."""

    returncode: int
    launched: float
    exited: float
    marks: dict[str, float]
    summary: dict[str, float]
    maxrss_kb: int
    python_hwm_kb: int
    children_hwm_kb: int
    readers_hwm_kb: int
    own_pss_kb: int
    log: Path
    cpu_s: dict[str, float] = field(default_factory=dict)  # by process kind: engine, readers, jvm, other
    timed_out: bool = False  # stopped with Ctrl-C at the deadline, unfinished
    progress: Checkpoint | None = None  # the checkpoint read at the deadline (what was committed)

    def seconds(self, start: str = "started", end: str = "done") -> float:
        """From one marker to another; for a run stopped at its deadline, to the deadline."""
        if self.timed_out and end == "done":
            end = "deadline"
        if start not in self.marks or end not in self.marks:
            raise RuntimeError(f"gtidsnap's log has no {start!r}/{end!r} line; see {self.log}")
        return self.marks[end] - self.marks[start]

    def facts(self) -> dict[str, Any]:
        """For the JSON: start-up, work and total seconds, the summary and memory."""
        out: dict[str, Any] = {
            "startup_s": round(self.marks.get("started", self.exited) - self.launched, 3),
            "total_s": round(self.exited - self.launched, 3),
            "peak_rss_mb": round(self.maxrss_kb / 1024, 1),
            "python_peak_rss_mb": round(self.python_hwm_kb / 1024, 1),
        }
        if "started" in self.marks and ("done" in self.marks or self.timed_out):
            out["work_s"] = round(self.seconds(), 3)
        if self.timed_out:
            out["timed_out"] = True
        if "started" in self.marks and "snapshots_done" in self.marks:  # the snapshot phase alone
            out["snapshots_done_s"] = round(self.seconds("started", "snapshots_done"), 3)
        if self.children_hwm_kb:
            out["children_peak_rss_mb"] = round(self.children_hwm_kb / 1024, 1)  # a JVM, chunk readers
        # gtidsnap's own processes: the engine and its chunk readers (the memory target)
        out["readers_peak_rss_mb"] = round(self.readers_hwm_kb / 1024, 1)
        out["own_peak_rss_mb"] = round((self.python_hwm_kb + self.readers_hwm_kb) / 1024, 1)
        out["own_peak_pss_mb"] = round(self.own_pss_kb / 1024, 1)
        if self.cpu_s:
            out["cpu_s"] = {kind: round(seconds, 3) for kind, seconds in sorted(self.cpu_s.items())}
        out.update(self.summary)
        if "records" in out and out.get("work_s"):  # everything written: snapshot rows and changes
            out["records_per_s"] = round(out["records"] / out["work_s"], 1)
        return out


@dataclass
class CliRun:
    """A running ``gtidsnap`` child; see the module doc."""

    args: list[str]
    env: dict[str, str]
    log: Path
    proc: subprocess.Popen[str] = field(init=False)
    marks: dict[str, float] = field(default_factory=dict)
    done_line: str = ""
    launched: float = 0.0
    _hwm: dict[int, int] = field(default_factory=dict)
    _readers: set[int] = field(default_factory=set)
    _own_pss_kb: int = 0
    _cpu: dict[int, tuple[str, float]] = field(default_factory=dict)  # pid -> (kind, CPU seconds)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _threads: list[threading.Thread] = field(default_factory=list)
    _file: IO[str] | None = None

    def start(self) -> CliRun:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.log.open("w", encoding="utf-8")
        self._file.write(f"$ {' '.join(self.args)}\n")
        self.launched = time.monotonic()
        self.proc = subprocess.Popen(
            self.args, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1
        )
        assert self.proc.stdout is not None and self.proc.stderr is not None
        for stream in (self.proc.stdout, self.proc.stderr):
            self._threads.append(threading.Thread(target=self._read, args=(stream,), daemon=True))
        self._threads.append(threading.Thread(target=self._watch, daemon=True))
        for t in self._threads:
            t.start()
        return self

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            now = time.monotonic()
            with self._lock:
                for name, pattern in MARKERS.items():
                    if name not in self.marks and pattern.search(line):
                        self.marks[name] = now
                if _DONE.search(line):
                    self.done_line = line
                if self._file is not None:
                    self._file.write(f"{now - self.launched:9.3f} {line}")

    def alive(self) -> bool:
        """Running (not a zombie). Never ``Popen.poll``: that would reap the child before ``wait4``."""
        try:
            stat = Path(f"/proc/{self.proc.pid}/stat").read_text()
        except OSError:
            return False
        return stat.rsplit(")", 1)[1].split()[0] != "Z"

    def _watch(self) -> None:
        pid = self.proc.pid
        while self.alive():
            pss = 0
            for p in [pid, *descendants(pid)]:
                hwm = vm_hwm_kb(p)
                if hwm:
                    self._hwm[p] = max(self._hwm.get(p, 0), hwm)
                used = cpu_seconds(p)
                kind = "engine" if p == pid else process_kind(p)
                if used is not None:  # the kind read each time: spark-submit's shell execs the JVM
                    self._cpu[p] = (kind, used)
                if kind in ("engine", "readers"):
                    pss += pss_kb(p)
                    if kind == "readers":
                        self._readers.add(p)
            self._own_pss_kb = max(self._own_pss_kb, pss)
            time.sleep(POLL_S)

    def wait_mark(self, name: str, timeout: float) -> float:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if name in self.marks:
                return self.marks[name]
            if not self.alive():
                time.sleep(0.3)  # let the readers finish
                if name in self.marks:
                    return self.marks[name]
                raise RuntimeError(f"gtidsnap exited before {name!r}; see {self.log}")
            time.sleep(0.02)
        raise RuntimeError(f"no {name!r} from gtidsnap within {timeout:.0f}s; see {self.log}")

    def interrupt(self) -> None:
        """Ctrl-C, as a user stops a streaming run."""
        if self.alive():
            os.kill(self.proc.pid, signal.SIGINT)

    def wait(self, timeout: float, ok: Sequence[int] = (0,), checkpoint: Path | None = None) -> CliResult:
        """Wait for the end; ``timeout`` seconds from now, read ``checkpoint`` (the progress committed so
        far) and stop the run with Ctrl-C (SIGKILL if that takes over a minute)."""
        deadline = time.monotonic() + timeout
        timed_out, progress = False, None
        while True:
            pid, status, rusage = os.wait4(self.proc.pid, os.WNOHANG)
            if pid:
                break
            now = time.monotonic()
            if now > deadline and not timed_out:
                timed_out, self.marks["deadline"] = True, now
                progress = CheckpointStore(checkpoint).load() if checkpoint is not None else None
                self.interrupt()
                ok = (*ok, 130)
            elif timed_out and now > deadline + STOP_S:
                os.kill(self.proc.pid, signal.SIGKILL)
                ok = (*ok, -signal.SIGKILL)
            time.sleep(0.05)
        exited = time.monotonic()
        self.proc.returncode = os.waitstatus_to_exitcode(status)
        for t in self._threads:
            t.join(timeout=30)
        if self._file is not None:
            self._file.write(f"exit {self.proc.returncode}\n")
            self._file.close()
            self._file = None
        if self.proc.returncode not in ok:
            tail = "".join(self.log.read_text(encoding="utf-8").splitlines(keepends=True)[-30:])
            raise RuntimeError(f"gtidsnap exited with {self.proc.returncode}; {self.log} ends with:\n{tail}")
        pid = self.proc.pid
        return CliResult(
            returncode=self.proc.returncode,
            launched=self.launched,
            exited=exited,
            marks=dict(self.marks),
            summary=parse_done(self.done_line),
            maxrss_kb=int(rusage.ru_maxrss),
            python_hwm_kb=self._hwm.get(pid, 0),
            children_hwm_kb=sum(v for p, v in self._hwm.items() if p != pid),
            readers_hwm_kb=sum(v for p, v in self._hwm.items() if p in self._readers),
            own_pss_kb=self._own_pss_kb,
            log=self.log,
            cpu_s=_by_kind(self._cpu),
            timed_out=timed_out,
            progress=progress,
        )


def run(
    args: Sequence[str], env: dict[str, str], log: Path, timeout: float, checkpoint: Path | None = None
) -> CliResult:
    """``gtidsnap <args>`` to the end, or stopped ``timeout`` seconds after its launch."""
    return CliRun([*gtidsnap_command(), *args], env, log).start().wait(timeout, checkpoint=checkpoint)


def spawn(args: Sequence[str], env: dict[str, str], log: Path) -> CliRun:
    return CliRun([*gtidsnap_command(), *args], env, log).start()


def parse_done(line: str) -> dict[str, float]:
    m = _DONE.search(line)
    if not m:
        return {}
    number = {k: float(v.replace(",", "")) for k, v in m.groupdict().items()}
    return {
        "records": int(number["records"]),
        "snapshot_rows": int(number["rows"]),
        "chunks": int(number["chunks"]),
        "cli_elapsed_s": number["elapsed"],
        "cli_pause_p50_ms": number["p50"],
    }


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (the Spark JVM of a Delta run), from /proc."""
    parents: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        parents.setdefault(ppid, []).append(int(entry.name))
    found: list[int] = []
    todo = list(parents.get(pid, []))
    while todo:
        p = todo.pop()
        found.append(p)
        todo.extend(parents.get(p, []))
    return found


def vm_hwm_kb(pid: int) -> int:
    """``pid``'s peak resident set size (0: gone)."""
    return _proc_kb(pid, "status", "VmHWM:")


def pss_kb(pid: int) -> int:
    """``pid``'s proportional set size (0: gone)."""
    return _proc_kb(pid, "smaps_rollup", "Pss:")


def _proc_kb(pid: int, file: str, name: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/{file}").read_text().splitlines():
            if line.startswith(name):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of ``pid`` so far (None: gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def process_kind(pid: int) -> str:
    """What a descendant of gtidsnap is: its JVM, a chunk reader (a spawned Python process), or other
    (the JVM's Python workers, for Spark readers)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "other"
    if "java" in cmdline.split(" ", 1)[0]:
        return "jvm"
    if "multiprocessing" in cmdline and "spawn_main" in cmdline:
        return "readers"
    if "resource_tracker" in cmdline:
        return "other"
    return "spark_workers" if "pyspark" in cmdline else "other"


def _by_kind(cpu: dict[int, tuple[str, float]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for kind, seconds in cpu.values():
        out[kind] = out.get(kind, 0.0) + seconds
    return out
