"""A checkpoint's digest, and the deliberate edits an operator makes to it (pure).

The checkpoint file is JSON an operator can open, and an edit by hand resumes silently at a wrong
place: a lowered ``sink_position`` cuts records off the output, a processed set moved back writes
changes twice, moved on skips them. So each checkpoint saved carries a digest of its content
(:func:`sealed`), and one whose content no longer matches its digest is refused when it is read,
naming ``gtidsnap checkpoint``: ``show`` prints it, ``set`` makes the edits an operator needs
(:func:`skip_transactions`: a poison transaction the stream cannot get past; :func:`forget_source`: a
replica of the same primary that cannot show the last transaction, :mod:`.source_identity`), digested
again and recorded with when and by whom in the checkpoint's history. The digest catches edits, not
forgery: anyone who can write the file can also write a digest. A checkpoint of an earlier version has
no digest: it is accepted, and the next one saved has one.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from datetime import UTC, datetime
from enum import Enum
from typing import Any

from gtidsnap.core.checkpoint import Checkpoint, Edit
from gtidsnap.core.gtid import MariadbGtid, MariadbGtidSet, MysqlGtid

DIGEST_KEY = "digest"
DIGEST_PREFIX = "sha256:"
HISTORY_KEPT = 50  # edits a checkpoint remembers
CHECKPOINT_COMMAND = "gtidsnap checkpoint"


class Digest(Enum):
    """What a checkpoint's digest says of its content."""

    MATCHES = "matches"
    MISSING = "missing"  # written by an earlier version of gtidsnap
    DIFFERS = "differs"  # changed since it was written: by hand, or damaged


def content_digest(data: dict[str, Any]) -> str:
    """The digest of a checkpoint's JSON object, its own ``digest`` left out: SHA-256 of its canonical
    form (keys sorted, no spaces), so a file re-indented by an editor but unchanged still matches."""
    body = {k: v for k, v in data.items() if k != DIGEST_KEY}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return DIGEST_PREFIX + hashlib.sha256(text.encode("ascii")).hexdigest()


def sealed(checkpoint: Checkpoint) -> dict[str, Any]:
    """The checkpoint's JSON object with the digest of its content."""
    data: dict[str, Any] = json.loads(json.dumps(checkpoint.to_json()))  # as it will read back
    return data | {DIGEST_KEY: content_digest(data)}


def digest_of(data: Any) -> Digest:
    """Whether the JSON object ``data`` read from a checkpoint file matches its digest."""
    if not isinstance(data, dict) or DIGEST_KEY not in data:
        return Digest.MISSING
    return Digest.MATCHES if data[DIGEST_KEY] == content_digest(data) else Digest.DIFFERS


def edited_by_hand(path: object) -> str:
    """The error of a checkpoint whose content does not match its digest."""
    return (
        f"checkpoint {path} was changed after gtidsnap wrote it (its content does not match its digest): "
        "an edit by hand could cut records off the output or stream changes twice, so it is not used. "
        "Restore it (undo the edit, or a backup), then make deliberate changes with "
        f"`{CHECKPOINT_COMMAND} set` (`{CHECKPOINT_COMMAND} show` prints it)"
    )


def now_utc() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def recorded(checkpoint: Checkpoint, change: str, by: str, at: str) -> Checkpoint:
    """``checkpoint`` with ``change`` added to its history (the last :data:`HISTORY_KEPT` kept)."""
    history = (*checkpoint.history, Edit(at, by, change))[-HISTORY_KEPT:]
    return replace(checkpoint, history=history)


def skip_transactions(checkpoint: Checkpoint, gtids: list[str], by: str, at: str) -> Checkpoint:
    """The checkpoint with ``gtids`` counted as processed, so the stream starts past them (a transaction
    it cannot read: its changes will be missing from the output). ValueError: a GTID of another flavour,
    one processed already, or on MariaDB one that is not ahead of its domain's position."""
    processed = checkpoint.processed
    for text in gtids:
        mariadb = isinstance(processed, MariadbGtidSet)
        gtid = MariadbGtid.parse(text) if mariadb else MysqlGtid.parse(text)  # GtidParseError: ValueError
        if gtid in processed:
            raise ValueError(f"{text} is processed already: there is nothing to skip")
        if isinstance(gtid, MariadbGtid):
            top = processed.max_per_source().get(gtid.domain, 0)
            if gtid.seq != top + 1:
                raise ValueError(
                    f"{text} is not the next transaction of domain {gtid.domain} (the checkpoint is at seq "
                    f"{top}): skipping it would skip {gtid.seq - top - 1:,} more; skip the next one only"
                )
        processed = processed.add(gtid)
    change = f"processed: skipped {', '.join(gtids)} (was {checkpoint.processed or 'empty'})"
    return recorded(replace(checkpoint, processed=processed), change, by, at)


def forget_source(checkpoint: Checkpoint, by: str, at: str) -> Checkpoint:
    """The checkpoint without the stamp of its last transaction: the next run accepts the replica the
    GTIDs allow, and records the stamp again (:mod:`.source_identity`)."""
    stamp = checkpoint.last_transaction
    if stamp is None:
        raise ValueError("the checkpoint records no last transaction: there is nothing to forget")
    change = f"last_transaction: forgot {stamp.describe()}; the next run's replica is accepted by its GTIDs"
    return recorded(replace(checkpoint, last_transaction=None), change, by, at)
