"""Every error gtidsnap raises on purpose, in one tree.

    GtidsnapError                 base: catch this to catch everything of ours
    ├── ConfigError               bad config file, environment variable or flag
    ├── CheckpointError           the checkpoint is unreadable, or does not belong to this replica
    ├── GtidParseError            a GTID or GTID set text that no server prints (quotes the text)
    ├── PrerequisiteError         the replica is not set up for read-only capture (lists every problem)
    ├── SourceError               the replica or its binlog failed; ``retryable`` says if a retry may help
    │   ├── QueryError            the replica refused or aborted one statement (server error, time limit)
    │   └── FatalSourceError      the binlog stream refused for good (grants, purged binlogs, undecodable)
    ├── SchemaError               a table missing, without a primary key, or changed in a way we refuse
    ├── SignalError               a signal message we cannot act on (logged and skipped, never fatal)
    ├── FilterError               a snapshot filter refused before it reaches the server (names why)
    └── SinkError                 the output could not be written
        ├── DeltaJarsMissingError the pre-resolved Delta jars are not where Spark is told to find them
        └── OutputRefusedError    the output is not one this run can write (another output's, a name
                                  taken, a setting it cannot take): the same run fails the same way

Whether an error is worth retrying is a property of its type (``retryable``), not of the call site;
the command line reads it to say whether the same command again may pass.
What a server's error code means is decided in one place, :mod:`gtidsnap.source.server_errors`.
Messages name the object and the cause, and never contain a password.
"""

from __future__ import annotations

REASON_CHARS = 500  # longest reason kept in the checkpoint (signal outcomes, snapshot errors)


def stored_reason(text: str, limit: int = REASON_CHARS) -> str:
    """``text`` on one line, at most ``limit`` characters: reasons are stored in every checkpoint."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


class GtidsnapError(Exception):
    """Base of every error gtidsnap raises on purpose."""

    retryable: bool = False


class ConfigError(GtidsnapError):
    """A config file, environment variable or flag is missing or wrong."""


class CheckpointError(GtidsnapError):
    """The checkpoint file cannot be read, or describes a stream this replica cannot continue."""


class GtidParseError(GtidsnapError, ValueError):
    """A GTID or GTID set text that is not what a server prints."""

    def __init__(self, text: str, reason: str) -> None:
        super().__init__(f"cannot parse GTID text {text!r}: {reason}")
        self.text = text
        self.reason = reason


class PrerequisiteError(GtidsnapError):
    """The replica is not set up for read-only capture; carries every problem found."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("the replica is not ready for gtidsnap:\n" + "\n".join(f"- {p}" for p in problems))
        self.problems = problems


class SourceError(GtidsnapError):
    """The replica or its binlog stream failed. ``retried_s``: how long the part that failed had already
    tried to reach the replica again (a failover need not wait that long a second time)."""

    retryable = True
    retried_s: float = 0.0


class QueryError(SourceError):
    """The replica answered one statement with an error: a filter it refuses, a value out of range, a
    statement over ``source.statement_timeout_s``. The table's snapshot fails with the server's message;
    streaming goes on. Not retryable: the same statement fails the same way."""

    retryable = False


class FatalSourceError(SourceError):
    """The source refused the binlog stream in a way a retry cannot fix (grants, TLS, purged binlogs,
    events that cannot be decoded without losing rows). A refused login is a ConfigError."""

    retryable = False


class SchemaError(GtidsnapError):
    """A captured table is missing, has no primary key, or changed in a way we refuse."""


class SignalError(GtidsnapError):
    """A signal message that cannot be acted on."""


class FilterError(GtidsnapError):
    """A snapshot filter (``additional-conditions``) that gtidsnap will not send to the server."""


class SinkError(GtidsnapError):
    """The output could not be written."""

    retryable = True


class OutputRefusedError(SinkError):
    """The output is not one this run can write as configured: it belongs to another checkpoint, a name is
    taken, a setting names what the output does not have. Not retryable: nothing changes by itself."""

    retryable = False
