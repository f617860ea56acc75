"""What became of the signals, as kept in the checkpoint (signal_ledger)."""

from __future__ import annotations

import json

import pytest

from gtidsnap.core.commands import Command, SetChunkSize, SignalReceived
from gtidsnap.core.errors import ConfigError
from gtidsnap.core.signal_ledger import HISTORY_KEPT, IDS_KEPT, SignalLedger, SignalOutcome


def test_record_offsets_ids_and_history() -> None:
    ledger = SignalLedger()
    ledger.record(SignalOutcome("a", "execute-snapshot", 0, 4, "refused: no such table"))
    assert not ledger.repeated("a"), "a refused id may be sent again"
    ledger.record(SignalOutcome("a", "execute-snapshot", 0, 5, "done"))
    assert ledger.repeated("a") and not ledger.repeated(None)
    assert ledger.consumed(0, 5) and not ledger.consumed(0, 6) and not ledger.consumed(1, 0)
    for n in range(IDS_KEPT + HISTORY_KEPT):
        ledger.record(SignalOutcome(f"id{n}", "pause-snapshot", 1, n, "done"))
    assert len(ledger.ids) == IDS_KEPT and len(ledger.history) == HISTORY_KEPT
    assert ledger.history[-1].offset == IDS_KEPT + HISTORY_KEPT - 1


def test_json_is_the_checkpoint_format_of_before() -> None:
    written = {
        "offsets": {"0": 6, "2": 1},
        "ids": ["a"],
        "history": [{"id": "a", "type": "execute-snapshot", "partition": 0, "offset": 5, "outcome": "done"}],
    }
    ledger = SignalLedger.from_json(json.loads(json.dumps(written)))
    assert ledger.offsets == {0: 6, 2: 1} and ledger.to_json() == written
    copy = ledger.copy()
    copy.record(SignalOutcome(None, "pause-snapshot", 0, 6, "done"))
    assert ledger.to_json() == written, "a copy is taken for each checkpoint: independent"
    assert SignalLedger.from_json({}).to_json() == {"offsets": {}, "ids": [], "history": []}


@pytest.mark.parametrize(
    ("data", "named"),
    [
        ({"offsets": {"x": 1}}, "signals.offsets"),
        ({"offsets": {"0": True}}, "signals.offsets"),
        ({"ids": [1]}, "signals.ids"),
        ({"history": {}}, "signals.history"),
        ({"history": [{"id": "a"}]}, "signals.history"),
    ],
)
def test_a_ledger_not_as_written_is_named(data: dict[str, object], named: str) -> None:
    with pytest.raises(ValueError, match=named):
        SignalLedger.from_json(data)


def test_act_once_acts_refuses_ignores_and_skips_what_was_consumed() -> None:
    ledger = SignalLedger()
    acted: list[Command] = []

    def act(command: Command) -> None:
        if isinstance(command, SetChunkSize) and command.rows < 1:
            raise ConfigError("chunk size must be at least 1,\n got 0")
        acted.append(command)

    def signal(
        offset: int, id_: str | None, command: Command | None, error: str | None = None
    ) -> SignalReceived:
        return SignalReceived(0, offset, id_, "set-chunk-size", command, error)

    done = ledger.act_once(signal(0, "a", SetChunkSize(5)), act)
    assert done is not None and done.outcome == "done" and acted == [SetChunkSize(5)]
    again = ledger.act_once(signal(1, "a", SetChunkSize(6)), act)
    assert again is not None and again.outcome == "ignored: duplicate id" and len(acted) == 1
    refused = ledger.act_once(signal(2, "b", SetChunkSize(0)), act)
    assert refused is not None and refused.outcome == "refused: chunk size must be at least 1, got 0"
    assert not ledger.repeated("b"), "a refused id may be sent again, corrected"
    bad = ledger.act_once(signal(3, "c", None, "x" * 2_000), act)
    assert bad is not None and bad.outcome.startswith("refused: xxx") and len(bad.outcome) < 600
    assert ledger.act_once(signal(2, "d", SetChunkSize(9)), act) is None, "consumed before: nothing"
    assert [h.offset for h in ledger.history] == [0, 1, 2, 3] and ledger.offsets == {0: 4}
    assert acted == [SetChunkSize(5)]
