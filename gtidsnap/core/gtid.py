"""GTID algebra for MySQL GTID sets and MariaDB GTID positions, behind one interface.

The watermark window needs five things of a set of transactions: "is this transaction in it",
union, difference, subset, and "the highest transaction number per source". Both flavours give
them; the window code never asks which flavour it holds.

MySQL (:class:`MysqlGtidSet`)
    ``3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5:7-9,<uuid>:tag:1-3`` as ``Executed_Gtid_Set`` prints it
    (servers put a newline after each comma). A *source* is ``(uuid, tag)``; tags exist from MySQL 8.4.
    Gaps are real (``1-5:7-9`` lacks 6) and are never widened. All operations are exact set algebra.

MariaDB (:class:`MariadbGtidSet`)
    ``0-1-100,5-1-3`` (``domain-server-seq``) as ``@@gtid_binlog_pos`` prints it. A *source* is the
    domain. Caveats, because a MariaDB position is not a set:

    * ``d-s-n`` means "every transaction of domain d with seq <= n". Containment ignores the server
      id, as the server does: under ``gtid_strict_mode`` seqs grow monotonically per domain.
    * Seqs may skip (filtered or ``gtid_seq_no``-set transactions); a position still counts the
      skipped numbers as "contained". This is what the server means by a position, and it is why
      the window closes on per-source maxima rather than waiting for every number.
    * Subtracting two positions (``hw = now - lw``) yields ranges that no server prints. They are
      written ``d-s-a..b`` (several joined by ``:``); :meth:`MariadbGtidSet.parse` reads them back.
    * The server id kept per domain is the one of the highest seq seen; it is what a replica must
      send to resume (``auto_position``). It is metadata: equality and hashing ignore it.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from bisect import bisect_right
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Self

from gtidsnap.core.errors import GtidParseError

Interval = tuple[int, int]  # inclusive [start, end], start >= 1
Intervals = tuple[Interval, ...]

MYSQL_MAX_GNO = 2**63 - 1
MARIADB_MAX_SEQ = 2**64 - 1

_UUID_RE = re.compile(r"^[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}$")
_TAG_RE = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]{0,31}$")
_NUMBER_RE = re.compile(r"^[0-9]+$")


# --------------------------------------------------------------------------- interval helpers


def normalize_intervals(intervals: Iterable[Interval]) -> Intervals:
    """Sort and merge overlapping or adjacent intervals; gaps stay gaps."""
    merged: list[Interval] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1] + 1:
            if end > merged[-1][1]:
                merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return tuple(merged)


def subtract_intervals(a: Intervals, b: Intervals) -> Intervals:
    """Every number in ``a`` and not in ``b``; both inputs normalised."""
    out: list[Interval] = []
    j = 0
    for start, end in a:
        cur = start
        while j < len(b) and b[j][1] < cur:
            j += 1
        k = j
        while k < len(b) and b[k][0] <= end and cur <= end:
            if b[k][0] > cur:
                out.append((cur, b[k][0] - 1))
            cur = max(cur, b[k][1] + 1)
            k += 1
        if cur <= end:
            out.append((cur, end))
    return tuple(out)


def intervals_contain(intervals: Intervals, number: int) -> bool:
    """True when ``number`` lies in one of the normalised ``intervals``."""
    i = bisect_right(intervals, (number, MARIADB_MAX_SEQ + 1)) - 1
    return i >= 0 and intervals[i][0] <= number <= intervals[i][1]


def _parse_number(text: str, whole: str, what: str, maximum: int) -> int:
    if not _NUMBER_RE.match(text):
        raise GtidParseError(whole, f"{what} {text!r} is not a whole number")
    value = int(text)
    if not 1 <= value <= maximum:
        raise GtidParseError(whole, f"{what} {value} is outside 1..{maximum}")
    return value


# --------------------------------------------------------------------------- the interface


class Gtid(ABC):
    """One transaction's global id: a source and a number increasing within that source."""

    @property
    @abstractmethod
    def source(self) -> object:
        """What numbers are counted per: ``(uuid, tag)`` on MySQL, the domain on MariaDB."""

    @property
    @abstractmethod
    def number(self) -> int:
        """The transaction's number within its source."""


class GtidSet(ABC):
    """An immutable set of transactions, as a replica reports what it has executed.

    Both flavours keep normalised intervals of transaction numbers per source in ``_sets``; the
    set algebra on those lives here, the text forms and the per-flavour rules in the subclasses.
    """

    _sets: dict[Any, Intervals]
    _hash: int

    def _init_sets(self, sets: Mapping[Any, Iterable[Interval]] | None) -> None:
        normal = {src: normalize_intervals(iv) for src, iv in (sets or {}).items()}
        self._sets = {src: iv for src, iv in sorted(normal.items()) if iv}
        self._hash = -1  # computed when first asked: most sets (one a streamed transaction) never are

    def _merged(self, other: GtidSet) -> dict[Any, list[Interval]]:
        merged: dict[Any, list[Interval]] = {s: list(iv) for s, iv in self._sets.items()}
        for source, intervals in other._sets.items():
            merged.setdefault(source, []).extend(intervals)
        return merged

    def _minus(self, other: GtidSet) -> dict[Any, Intervals]:
        return {s: subtract_intervals(iv, other._sets.get(s, ())) for s, iv in self._sets.items()}

    def _has(self, source: object, number: int) -> bool:
        intervals = self._sets.get(source)
        return intervals is not None and intervals_contain(intervals, number)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and self._sets == other._sets

    def __hash__(self) -> int:
        if self._hash == -1:  # never a hash's value: Python turns -1 into -2
            self._hash = hash(tuple(self._sets.items()))
        return self._hash

    def __bool__(self) -> bool:
        return bool(self._sets)

    def __le__(self, other: Self) -> bool:
        """Every transaction of this set is in ``other``; builds no set (an engine running until caught
        up asks this once per streamed transaction)."""
        if type(other) is not type(self):
            return not (self - other)  # the subtraction names the mismatch
        others = other._sets
        for source, intervals in self._sets.items():
            theirs = others.get(source)
            if theirs is None:
                return False
            if len(theirs) == 1:  # the usual case (a server's position, a gapless set): one comparison
                if intervals[0][0] < theirs[0][0] or intervals[-1][1] > theirs[0][1]:
                    return False
            elif subtract_intervals(intervals, theirs):
                return False
        return True

    def _with_source(self, source: Any, intervals: Intervals) -> Self:
        """A copy with one existing source's intervals (normalised) replaced, nothing re-sorted: the fast
        path of :meth:`add`, which runs once per streamed transaction (profiled at ~8% of a stream of
        one-row transactions through the general union)."""
        sets = dict(self._sets)
        sets[source] = intervals
        copy = object.__new__(type(self))
        copy._sets = sets
        copy._hash = -1
        return copy

    def count(self) -> int:
        """How many transactions the set holds (e.g. how far a checkpoint is behind a replica)."""
        return sum(end - start + 1 for intervals in self._sets.values() for start, end in intervals)

    def origins(self) -> Mapping[object, str]:
        """The server that wrote each source's transactions, as its identity reads: MySQL a source's
        server UUID; MariaDB the server id of a domain's newest GTID (errant transactions are told by it)."""
        return {source: self._origin(source) for source in self._sets}

    def _origin(self, source: Any) -> str:
        return str(source)

    def only(self, sources: Iterable[object]) -> Self:
        """This set restricted to ``sources``."""
        keep = set(sources)
        return self._restricted({s: iv for s, iv in self._sets.items() if s in keep})

    def _restricted(self, sets: Mapping[Any, Intervals]) -> Self:
        copy = object.__new__(type(self))
        copy._init_sets(sets)
        return copy

    def min_per_source(self) -> Mapping[object, int]:
        """Lowest transaction number per source: where a replica's missing part of a set begins."""
        return {source: intervals[0][0] for source, intervals in self._sets.items()}

    def max_per_source(self) -> Mapping[object, int]:
        """Highest transaction number per source: what a heartbeat is compared against."""
        return {source: intervals[-1][1] for source, intervals in self._sets.items()}

    @classmethod
    @abstractmethod
    def parse(cls, text: str) -> Self:
        """Read what the server prints; raise :class:`GtidParseError` quoting bad text."""

    @classmethod
    def empty(cls) -> Self:
        return cls.parse("")

    @abstractmethod
    def __contains__(self, gtid: object) -> bool: ...

    @abstractmethod
    def __or__(self, other: Self) -> Self: ...

    @abstractmethod
    def __sub__(self, other: Self) -> Self: ...

    @abstractmethod
    def add(self, gtid: Gtid) -> Self:
        """This set with one more transaction: how a stream's processed set advances."""

    def __ge__(self, other: Self) -> bool:
        return other <= self


# --------------------------------------------------------------------------- MySQL


@dataclass(frozen=True, order=True)
class MysqlGtid(Gtid):
    """``uuid:gno`` or ``uuid:tag:gno`` (tagged GTIDs exist from MySQL 8.4)."""

    uuid: str
    tag: str
    gno: int

    @property
    def source(self) -> tuple[str, str]:
        return (self.uuid, self.tag)

    @property
    def number(self) -> int:
        return self.gno

    @classmethod
    def of(cls, uuid: str, tag: str, gno: int) -> MysqlGtid:
        """``MysqlGtid(uuid, tag, gno)`` in half the time (see :meth:`MariadbGtid.of`)."""
        gtid = object.__new__(cls)
        fields = gtid.__dict__
        fields["uuid"], fields["tag"], fields["gno"] = uuid, tag, gno
        return gtid

    @classmethod
    def parse(cls, text: str) -> MysqlGtid:
        parts = text.strip().split(":")
        if len(parts) not in (2, 3):
            raise GtidParseError(text, "a GTID is uuid:number or uuid:tag:number")
        uuid = _parse_uuid(parts[0], text)
        tag = _parse_tag(parts[1], text) if len(parts) == 3 else ""
        return cls(uuid, tag, _parse_number(parts[-1], text, "transaction number", MYSQL_MAX_GNO))

    def __str__(self) -> str:
        return f"{self.uuid}:{self.tag}:{self.gno}" if self.tag else f"{self.uuid}:{self.gno}"


def _parse_uuid(text: str, whole: str) -> str:
    if not _UUID_RE.match(text):
        raise GtidParseError(whole, f"{text!r} is not a server UUID")
    h = text.replace("-", "").lower()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _parse_tag(text: str, whole: str) -> str:
    if not _TAG_RE.match(text):
        raise GtidParseError(whole, f"{text!r} is not a GTID tag (a letter or _, then up to 31 of a-z 0-9 _)")
    return text.lower()


MysqlSource = tuple[str, str]


class MysqlGtidSet(GtidSet):
    """An exact MySQL GTID set; see the module docstring for the text form."""

    __slots__ = ("_hash", "_sets")

    def __init__(self, sets: Mapping[MysqlSource, Iterable[Interval]] | None = None) -> None:
        self._init_sets(sets)

    @classmethod
    def parse(cls, text: str) -> MysqlGtidSet:
        sets: dict[MysqlSource, list[Interval]] = {}
        stripped = text.strip()
        if not stripped:
            return cls()
        for element in stripped.split(","):
            element = element.strip()
            if not element:
                raise GtidParseError(text, "empty element between commas")
            parts = element.split(":")
            uuid = _parse_uuid(parts[0].strip(), text)
            if len(parts) == 1:
                raise GtidParseError(text, f"{element!r} has a UUID but no transactions")
            tag = ""
            pending_tag = False
            for part in parts[1:]:
                part = part.strip()
                if part[:1].isdigit():
                    sets.setdefault((uuid, tag), []).append(_parse_interval(part, text))
                    pending_tag = False
                else:
                    if pending_tag:
                        raise GtidParseError(text, f"tag {tag!r} in {element!r} has no transactions")
                    tag = _parse_tag(part, text)
                    pending_tag = True
            if pending_tag:
                raise GtidParseError(text, f"tag {tag!r} in {element!r} has no transactions")
        return cls(sets)

    def __str__(self) -> str:
        by_uuid: dict[str, list[str]] = {}
        for (uuid, tag), intervals in self._sets.items():
            words = by_uuid.setdefault(uuid, [uuid])
            if tag:
                words.append(tag)
            words.extend(f"{a}" if a == b else f"{a}-{b}" for a, b in intervals)
        return ",".join(":".join(words) for words in by_uuid.values())

    def __repr__(self) -> str:
        return f"MysqlGtidSet.parse({str(self)!r})"

    def __contains__(self, gtid: object) -> bool:
        if isinstance(gtid, str):
            gtid = MysqlGtid.parse(gtid)
        return isinstance(gtid, MysqlGtid) and self._has(gtid.source, gtid.gno)

    def __or__(self, other: MysqlGtidSet) -> MysqlGtidSet:
        return MysqlGtidSet(self._merged(other))

    def __sub__(self, other: MysqlGtidSet) -> MysqlGtidSet:
        return MysqlGtidSet(self._minus(other))

    def add(self, gtid: Gtid) -> MysqlGtidSet:
        if not isinstance(gtid, MysqlGtid):
            raise TypeError(f"cannot add {gtid!r} to a MySQL GTID set")
        source, gno = gtid.source, gtid.gno
        intervals = self._sets.get(source)
        if intervals:
            start, end = intervals[-1]
            if start <= gno <= end:
                return self
            if gno == end + 1:  # the usual case: the next transaction of a source
                return self._with_source(source, (*intervals[:-1], (start, gno)))
        return self | MysqlGtidSet({source: [(gno, gno)]})

    def _origin(self, source: Any) -> str:
        return str(source[0])  # the server UUID (a tag is the same server's)

    def intervals(self) -> Mapping[MysqlSource, Intervals]:
        """The normalised intervals per ``(uuid, tag)``, for tests and adapters."""
        return dict(self._sets)

    def __iter__(self) -> Iterator[MysqlGtid]:
        """Every transaction; only sensible for small sets (tests)."""
        for (uuid, tag), intervals in self._sets.items():
            for a, b in intervals:
                for n in range(a, b + 1):
                    yield MysqlGtid(uuid, tag, n)


def _parse_interval(text: str, whole: str) -> Interval:
    start_text, dash, end_text = text.partition("-")
    start = _parse_number(start_text, whole, "transaction number", MYSQL_MAX_GNO)
    end = _parse_number(end_text, whole, "transaction number", MYSQL_MAX_GNO) if dash else start
    if end < start:
        raise GtidParseError(whole, f"interval {text!r} ends before it starts")
    return (start, end)


# --------------------------------------------------------------------------- MariaDB


@dataclass(frozen=True, order=True)
class MariadbGtid(Gtid):
    """``domain-server-seq``; containment and ordering go by ``(domain, seq)``."""

    domain: int
    server: int
    seq: int

    @property
    def source(self) -> int:
        return self.domain

    @property
    def number(self) -> int:
        return self.seq

    @classmethod
    def of(cls, domain: int, server: int, seq: int) -> MariadbGtid:
        """``MariadbGtid(domain, server, seq)`` in half the time (a frozen dataclass sets each field through
        ``object.__setattr__``): one is made a streamed transaction."""
        gtid = object.__new__(cls)
        fields = gtid.__dict__
        fields["domain"], fields["server"], fields["seq"] = domain, server, seq
        return gtid

    @classmethod
    def parse(cls, text: str) -> MariadbGtid:
        parts = text.strip().split("-")
        if len(parts) != 3:
            raise GtidParseError(text, "a MariaDB GTID is domain-server-seq")
        domain = _parse_uint32(parts[0], text, "domain")
        server = _parse_uint32(parts[1], text, "server id")
        return cls(domain, server, _parse_number(parts[2], text, "seq", MARIADB_MAX_SEQ))

    def __str__(self) -> str:
        return f"{self.domain}-{self.server}-{self.seq}"


def _parse_uint32(text: str, whole: str, what: str) -> int:
    if not _NUMBER_RE.match(text):
        raise GtidParseError(whole, f"{what} {text!r} is not a whole number")
    value = int(text)
    if value > 2**32 - 1:
        raise GtidParseError(whole, f"{what} {value} is larger than 4294967295")
    return value


class MariadbGtidSet(GtidSet):
    """Per-domain seq ranges; a server position is the special case ``[1..seq]`` per domain."""

    __slots__ = ("_hash", "_servers", "_sets")

    def __init__(
        self,
        sets: Mapping[int, Iterable[Interval]] | None = None,
        servers: Mapping[int, int] | None = None,
    ) -> None:
        self._init_sets(sets)
        self._servers: dict[int, int] = {d: (servers or {}).get(d, 0) for d in self._sets}

    @classmethod
    def parse(cls, text: str) -> MariadbGtidSet:
        sets: dict[int, list[Interval]] = {}
        servers: dict[int, tuple[int, int]] = {}  # domain -> (highest end, its server)
        stripped = text.strip()
        if not stripped:
            return cls()
        for element in stripped.split(","):
            element = element.strip()
            parts = element.split("-", 2)
            if len(parts) != 3:
                raise GtidParseError(text, f"{element!r} is not domain-server-seq")
            domain = _parse_uint32(parts[0], text, "domain")
            server = _parse_uint32(parts[1], text, "server id")
            intervals = _parse_mariadb_ranges(parts[2], text)
            if not intervals:
                continue  # seq 0: nothing executed in that domain yet
            sets.setdefault(domain, []).extend(intervals)
            end = intervals[-1][1]
            if domain not in servers or end >= servers[domain][0]:
                servers[domain] = (end, server)
        return cls(sets, {d: s for d, (_, s) in servers.items()})

    def __str__(self) -> str:
        words = []
        for domain, intervals in self._sets.items():
            server = self._servers[domain]
            if len(intervals) == 1 and intervals[0][0] == 1:
                words.append(f"{domain}-{server}-{intervals[0][1]}")
            else:
                ranges = ":".join(f"{a}..{b}" for a, b in intervals)
                words.append(f"{domain}-{server}-{ranges}")
        return ",".join(words)

    def __repr__(self) -> str:
        return f"MariadbGtidSet.parse({str(self)!r})"

    def __contains__(self, gtid: object) -> bool:
        if isinstance(gtid, str):
            gtid = MariadbGtid.parse(gtid)
        return isinstance(gtid, MariadbGtid) and self._has(gtid.domain, gtid.seq)

    def __or__(self, other: MariadbGtidSet) -> MariadbGtidSet:
        servers = dict(self._servers)
        for domain, intervals in other._sets.items():
            mine = self._sets.get(domain)
            if mine is None or intervals[-1][1] >= mine[-1][1]:
                servers[domain] = other._servers[domain]
        return MariadbGtidSet(self._merged(other), servers)

    def __sub__(self, other: MariadbGtidSet) -> MariadbGtidSet:
        return MariadbGtidSet(self._minus(other), self._servers)

    def add(self, gtid: Gtid) -> MariadbGtidSet:
        """Advance like a server position: the domain now holds every seq up to ``gtid.seq``."""
        if not isinstance(gtid, MariadbGtid):
            raise TypeError(f"cannot add {gtid!r} to a MariaDB GTID set")
        intervals = self._sets.get(gtid.domain)
        if intervals is not None and len(intervals) == 1 and intervals[0][0] == 1:  # a position
            top = intervals[0][1]
            copy = self._with_source(gtid.domain, ((1, max(top, gtid.seq)),))
            copy._servers = dict(self._servers)
            if gtid.seq >= top:
                copy._servers[gtid.domain] = gtid.server
            return copy
        return self | MariadbGtidSet({gtid.domain: [(1, gtid.seq)]}, {gtid.domain: gtid.server})

    def _origin(self, source: Any) -> str:
        return str(self._servers.get(source, 0))

    def _restricted(self, sets: Mapping[Any, Intervals]) -> Self:
        return type(self)(sets, {d: self._servers[d] for d in sets})

    def intervals(self) -> Mapping[int, Intervals]:
        """The normalised seq intervals per domain, for tests and adapters."""
        return dict(self._sets)

    def as_position(self) -> str:
        """The server's position form (``d-s-maxseq`` per domain), for ``auto_position``."""
        return ",".join(f"{d}-{self._servers[d]}-{iv[-1][1]}" for d, iv in self._sets.items())


def _parse_mariadb_ranges(text: str, whole: str) -> list[Interval]:
    if _NUMBER_RE.match(text):
        seq = int(text)
        if seq > MARIADB_MAX_SEQ:
            raise GtidParseError(whole, f"seq {seq} is larger than {MARIADB_MAX_SEQ}")
        return [(1, seq)] if seq else []
    out = []
    for part in text.split(":"):
        start_text, dots, end_text = part.partition("..")
        if not dots:
            raise GtidParseError(whole, f"{part!r} is neither a seq nor a range a..b")
        start = _parse_number(start_text, whole, "seq", MARIADB_MAX_SEQ)
        end = _parse_number(end_text, whole, "seq", MARIADB_MAX_SEQ)
        if end < start:
            raise GtidParseError(whole, f"range {part!r} ends before it starts")
        out.append((start, end))
    return out


def parse_gtid_set(flavor: str, text: str) -> GtidSet:
    """Parse an executed set for a server flavour (``"mysql"`` or ``"mariadb"``)."""
    if flavor == "mysql":
        return MysqlGtidSet.parse(text)
    if flavor == "mariadb":
        return MariadbGtidSet.parse(text)
    raise ValueError(f"unknown server flavour {flavor!r}; expected 'mysql' or 'mariadb'")
