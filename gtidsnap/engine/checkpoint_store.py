"""Where the checkpoint lives: one JSON file with the digest of its content
(:mod:`gtidsnap.core.checkpoint_edits`), replaced atomically (written, fsynced, renamed, and the folder
fsynced), so a kill -9 at any instant leaves the old checkpoint or the new one whole; one whose content
does not match its digest (edited by hand) is refused. And the checks before a run continues one: the
replica can continue it (:func:`resumable`), the output matches it before it is cut back to it and has
not used its ``next_seq`` yet (:func:`open_at`)."""

from __future__ import annotations

import json
import logging
import os
from dataclasses import replace
from pathlib import Path

from gtidsnap.core.checkpoint import Checkpoint, ReplicaInUse, problem_of, resume_verdict
from gtidsnap.core.checkpoint_edits import Digest, digest_of, edited_by_hand, sealed
from gtidsnap.core.errors import CheckpointError
from gtidsnap.core.gtid import GtidSet, parse_gtid_set
from gtidsnap.core.ports import CheckpointPort, CutCheckingSink, ReplicaPort, SeqReportingSink, Sink
from gtidsnap.core.replica_choice import START_OVER, Behind, Serves, Verdict, short
from gtidsnap.core.retention import Headroom
from gtidsnap.engine.safe_files import open_no_follow, replace_atomically
from gtidsnap.source.low_watermark import applied_covering

log = logging.getLogger(__name__)


ORIGINS_KEPT = 32  # replicas a checkpoint remembers having been written on
_UNDIGESTED_SAID: set[Path] = set()  # checkpoints without a digest already logged (once a process)


class CheckpointStore:
    """One JSON file with a digest of its content, replaced atomically."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> Checkpoint | None:
        """The checkpoint, None when there is none yet; CheckpointError says what is wrong with it (one
        edited by hand among that)."""
        found = self.load_as_written()
        if found is None:
            return None
        checkpoint, digest = found
        if digest is Digest.DIFFERS:
            raise CheckpointError(edited_by_hand(self.path))
        if digest is Digest.MISSING and self.path not in _UNDIGESTED_SAID:
            _UNDIGESTED_SAID.add(self.path)
            log.info(
                "checkpoint %s has no digest (written by an earlier version of gtidsnap): accepted; the next "
                "checkpoint saved carries one",
                self.path,
            )
        return checkpoint

    def load_as_written(self) -> tuple[Checkpoint, Digest] | None:
        """The checkpoint and what its digest says, an edited one too (``gtidsnap checkpoint show``)."""
        try:
            fd = open_no_follow(self.path, os.O_RDONLY, "checkpoint")  # a link there is refused
            with os.fdopen(fd, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return None
        except IsADirectoryError:
            raise CheckpointError(
                f"checkpoint {self.path} is a folder: point checkpoint.path at a file"
            ) from None
        except OSError as exc:
            raise CheckpointError(f"checkpoint {self.path} cannot be read: {exc.strerror}") from None
        try:
            parsed = json.loads(data.decode("utf-8"))
            return Checkpoint.from_json(parsed), digest_of(parsed)
        except (ValueError, UnicodeDecodeError) as exc:
            reason = " ".join(str(exc).split())[:300]
            raise CheckpointError(
                f"checkpoint {self.path} is not a gtidsnap checkpoint ({reason}): restore it from a "
                f"backup, or {START_OVER}"
            ) from None

    def save(self, checkpoint: Checkpoint) -> None:
        try:
            self._write(checkpoint)
        except OSError as exc:
            raise CheckpointError(
                f"cannot write the checkpoint {self.path}: {exc.strerror or exc}; the output is kept and the "
                "next start resumes from the last checkpoint written"
            ) from None

    def _write(self, checkpoint: Checkpoint) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = json.dumps(sealed(checkpoint), indent=1).encode("utf-8")
        replace_atomically(self.path, data, "checkpoint")  # never through a link planted at it or its .tmp


class StampingStore:
    """A checkpoint store that writes which replica the run reads into every checkpoint it saves."""

    def __init__(self, store: CheckpointPort, in_use: InUse) -> None:
        """``in_use``: the stamp as it stands at each save (it gains the retention headroom as measured)."""
        self.store, self.in_use = store, in_use
        self.path = store.path

    def load(self) -> Checkpoint | None:
        return self.store.load()

    def save(self, checkpoint: Checkpoint) -> None:
        self.store.save(replace(checkpoint, replica=self.in_use(), origins=self.in_use.origins))


class InUse:
    """The replica stamp each checkpoint gets: which replica and why, and its retention headroom as
    the :class:`RetentionWatch` last measured it."""

    def __init__(self, value: ReplicaInUse) -> None:
        self.value = value
        self.origins: tuple[str, ...] = ()

    def streamed_on(self, checkpoint: Checkpoint | None, identity: str) -> None:
        """The replicas the checkpoint was written on so far, and now the one of this run (its own
        writes, errant transactions, are excused on a sibling: :mod:`gtidsnap.core.replica_choice`)."""
        known = checkpoint.origins if checkpoint is not None else ()
        self.origins = tuple(dict.fromkeys([*known, identity][-ORIGINS_KEPT:]))

    def __call__(self) -> ReplicaInUse:
        return self.value

    def measured(self, headroom: Headroom, line: str, low: bool) -> None:
        self.value = replace(self.value, retention=line, retention_low=low)


def resumable(store: CheckpointPort, replica: ReplicaPort, flavor: str) -> tuple[Checkpoint | None, GtidSet]:
    """The checkpoint a run resumes from (None: a first run), once ``replica`` is known to be able to
    continue it (:func:`gtidsnap.core.checkpoint.resume_verdict`), and the errant transactions of other
    replicas it excused (nothing waits for those here); otherwise a CheckpointError that says what
    happened and what to do."""
    checkpoint = store.load()
    if checkpoint is None:
        return None, parse_gtid_set(flavor, "")
    purged, where, identity = replica.purged(), replica.describe(), replica.identity()

    def verdict_at(applied: GtidSet) -> Verdict:
        return resume_verdict(checkpoint, flavor, applied, purged, where, identity)

    verdict = verdict_at(applied_covering(replica.applied, lambda a: not isinstance(verdict_at(a), Behind)))
    problem = problem_of(verdict, where)
    if problem is not None or not isinstance(verdict, Serves):
        raise CheckpointError(f"checkpoint {store.path} cannot be continued: {problem}")
    if verdict.excused:
        log.warning(
            "%s does not have %s: errant transactions of a replica the checkpoint was written on (its own "
            "writes); they were streamed there, and nothing waits for them here",
            where,
            short(verdict.excused),
        )
    resumed = checkpoint
    if verdict.skipped:
        log.warning(
            "%s purged errant transactions of its own the checkpoint has not streamed (%s): the run starts "
            "past them",
            where,
            short(verdict.skipped),
        )
        resumed = replace(checkpoint, processed=checkpoint.processed | verdict.skipped)
    return resumed, verdict.excused or parse_gtid_set(flavor, "")


def open_at(sink: Sink, checkpoint: Checkpoint, path: Path) -> None:
    """Open ``sink`` at the checkpoint's position, once a sink that can tell says the output matches it
    (:class:`CutCheckingSink`: the cut back to it removes only records the replay writes again);
    then, if the output already holds a ``seq`` at or above the checkpoint's ``next_seq``, close it
    again (the output as it was) and raise a CheckpointError: the run would write those numbers a
    second time."""
    if isinstance(sink, CutCheckingSink):
        mismatch = sink.open_checked(checkpoint.sink_position, checkpoint.next_seq)
        if mismatch is not None:
            raise CheckpointError(
                f"checkpoint {path} does not match its output: {mismatch}; nothing was changed. It was "
                f"edited, or belongs to another output: use the checkpoint that belongs to this output "
                f"(or restore both from one backup), or {START_OVER}"
            )
    else:
        sink.open(checkpoint.sink_position)
    try:
        problem = reused_seq_problem(sink, checkpoint.next_seq)
    except BaseException:
        sink.close()
        raise
    if problem is not None:
        sink.close()
        raise CheckpointError(f"checkpoint {path} cannot be continued: {problem}")


def reused_seq_problem(sink: Sink, next_seq: int) -> str | None:
    """Why the opened ``sink``'s output forbids ``next_seq`` (None: it does not, or cannot tell)."""
    held = sink.greatest_seq() if isinstance(sink, SeqReportingSink) else None
    if held is None or held.seq < next_seq:
        return None
    return (
        f"{held.where} already holds records up to seq {held.seq} but the checkpoint's next_seq is "
        f"{next_seq}: this run would write seqs from {next_seq} on a second time. The checkpoint was "
        "edited, or belongs to another output: use the checkpoint that belongs to this output, or "
        f"{START_OVER}"
    )
