"""Live text: what a heartbeat carries and how a watcher that fell behind reads it."""

from __future__ import annotations

from durable_subagents.client._live_turn import LiveTurn
from durable_subagents.context._live_text import LIVE_TEXT_LIMIT, LiveText, parse_live


def test_heartbeats_carry_the_latest_text_and_where_it_starts() -> None:
    live = LiveText(turn=3, attempt=2)
    assert not live.changed
    live.add("a" * LIVE_TEXT_LIMIT)
    live.add("bcd")
    assert live.changed
    snapshot = parse_live(live.details())
    assert not live.changed
    assert snapshot is not None and (snapshot.turn, snapshot.attempt) == (3, 2)
    assert snapshot.start == 3 and snapshot.text.endswith("bcd")
    assert len(snapshot.text) == LIVE_TEXT_LIMIT and snapshot.end == LIVE_TEXT_LIMIT + 3
    for junk in (None, {}, {"live_text": "x"}, {"live_text": {"turn": "1"}}, [1]):
        assert parse_live(junk) is None


async def test_a_watcher_that_fell_behind_marks_the_gap() -> None:
    """More text than a heartbeat carries arrived between two looks: an ellipsis, then
    the latest text; the final piece still comes from the recorded answer."""
    full = "x" * 10 + "y" * LIVE_TEXT_LIMIT + "tail"
    turn = LiveTurn(client=None, task_id="t")
    turn.start(5, 1)
    beats = iter([LiveText(1, 1), LiveText(1, 1)])
    first, second = next(beats), next(beats)
    first.add(full[:5])
    second.add(full[:-4])
    beats_sent = iter([first.details(), second.details()])

    async def details() -> object:
        return next(beats_sent)

    turn._details = details  # type: ignore[method-assign]
    (a,) = await turn.poll()
    (b,) = await turn.poll()
    assert a.text == "xxxxx"
    assert b.text is not None and b.text.startswith("…") and b.text.endswith("y")
    (c,) = await turn.finish({"text": full})
    assert c.text == "tail" and c.summary is None
