"""Issue 28's save-path shortcuts in ``projections.records.delta``: positions replaced, grown,
shrunk, unchanged, and given as foreign objects; small and large states. Each frame, folded
onto a copy of the head before it, gives the head ``delta`` returns (and the record)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec
import pytest

from eventlog.records import CheckpointRecord, NodePosition
from projections.records import Head, Incoming, apply, delta, to_record

_enc = msgspec.msgpack.Encoder()


@dataclass(frozen=True)
class _TheirPosition:  # openarmature's shape: not our NodePosition
    namespace: tuple[str, ...]
    node_name: str
    step: int
    attempt_index: int = 0
    fan_out_index: int | None = None


def _pos(i: int) -> NodePosition:
    return NodePosition((), "n", i)


def _save(head: Head | None, positions: Any, state: Any, seq: int) -> Head:
    rec = CheckpointRecord("inv", "c", state, positions, (), float(seq))
    inc = Incoming("save", rec, _enc.encode(state), _enc.encode(()))
    before = head.copy() if head is not None else None
    frame, after = delta(head, inc, "inv")
    folded = apply(before, frame, seq, "inv")
    assert folded is not None
    assert folded.positions == after.positions
    assert folded.state == after.state
    assert to_record(folded) == to_record(after)
    got = to_record(after)
    assert got.completed_positions == tuple(
        p if isinstance(p, NodePosition) else NodePosition(p.namespace, p.node_name, p.step)
        for p in positions
    )
    assert got.state == state
    return after


@pytest.mark.parametrize("pad", [10, 300, 5000])  # stored whole, or spliced
def test_delta_positions_and_states_fold_to_the_head(pad: int) -> None:
    grown = tuple(_pos(i) for i in range(4))
    steps: list[Any] = [
        (_pos(0),),  # first save
        (_pos(1),),  # replaced (nothing in common)
        (_pos(1),),  # equal, another tuple
        grown,  # a different first position, then more
        (*grown, _pos(9)),  # grown by appending
        (*grown, _pos(9)),  # the same again (another tuple)
        grown[:2],  # shrunk
        (grown[0], _pos(7), _pos(8)),  # common prefix, then replaced
        (),  # none
        (_TheirPosition((), "n", 3),),  # foreign objects
        (_TheirPosition((), "n", 3), _TheirPosition(("a",), "m", 4)),  # foreign, grown
        (_pos(3), _pos(5)),  # ours again, first equal by value
    ]
    head: Head | None = None
    for seq, positions in enumerate(steps, 1):
        head = _save(head, positions, {"i": seq, "pad": "x" * pad}, seq)
    assert head is not None
    same = head.pos_src
    head = _save(head, same, {"i": 0, "pad": "x" * pad}, len(steps) + 1)  # the same tuple
    assert head.pos_src is same
