"""What became of the signals, as kept in the checkpoint (signal_ledger)."""

from __future__ import annotations

import json

import pytest

from gtidsnap.signal_ledger import HISTORY_KEPT, IDS_KEPT, SignalLedger, SignalOutcome


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
