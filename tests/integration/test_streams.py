"""One stream per task tree: offsets, resuming, trees, both model wires, a killed worker."""

from __future__ import annotations

import asyncio
import base64
import json
import random
import time
from asyncio.subprocess import PIPE, STDOUT
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType, WorkflowTaskFailedCause
from temporalio.client import Client

from bench.bench_faults import WorkerProcess
from durable_subagents import InvalidRequest, SubagentClient, TaskEvent, TaskStatus
from durable_subagents.agents import AgentSpec, PermissionRule
from durable_subagents.config import Settings
from durable_subagents.testing.fake_openai import FakeReply
from durable_subagents.wire._stream_items import (
    FORWARD_SIGNAL,
    ForwardedItem,
    StreamDirect,
    StreamEvent,
    StreamForward,
)
from durable_subagents.worker import create_worker

from ..helpers import CEILING, eventually
from ..helpers.cli import CLI, _env
from ..helpers.processes import worker_process
from ..helpers.providers import MODELS, PROVIDERS, model_api
from ..helpers.tasks import script

WORDS = " ".join(f"word{i}" for i in range(1, 31)) + "."


def key(event: TaskEvent) -> tuple[object, ...]:
    return (event.offset, event.task_id, event.kind, event.text, event.summary, event.status)


async def take(client: SubagentClient, task_id: str, **options: object) -> list[TaskEvent]:
    return [e async for e in client.watch(task_id, **options)]  # type: ignore[arg-type]


def two_turns() -> str:
    return script(
        {"text": WORDS, "stream": 2.0, "tool_calls": [{"name": "list_files", "arguments": {}}]},
        {"text": "All " + WORDS, "stream": 2.0},
    )


PUBLISH = "__temporal_workflow_stream_publish"
"""The Workflow Stream's publish signal (a model turn's live pieces)."""


async def signals(temporal: Client, task_id: str, name: str) -> int:
    """How many signals named ``name`` every run of the task took."""
    count = 0
    async for run in temporal.list_workflows(f"WorkflowId = '{task_id}'"):
        handle = temporal.get_workflow_handle(task_id, run_id=run.run_id)
        async for event in handle.fetch_history_events():
            count += event.workflow_execution_signaled_event_attributes.signal_name == name
    return count


def assert_offsets(events: list[TaskEvent]) -> None:
    offsets = [e.offset for e in events]
    assert None not in offsets, [e.kind for e in events if e.offset is None]
    assert offsets == sorted(set(offsets)), offsets  # type: ignore[type-var]


async def test_every_event_has_an_offset_and_after_resumes_exactly_after_it(
    client: SubagentClient, worker: None
) -> None:
    """Watchers cut at random offsets and resumed with ``after``, while the task runs and
    after it closed, see exactly what one uninterrupted watch saw."""
    task_id = await client.spawn_task("explore", "go", model=two_turns())
    rng = random.Random(7)

    async def resumed(stop_after: float | None) -> list[TaskEvent]:
        seen: list[TaskEvent] = []
        after: int | None = None
        while True:
            cut = rng.randint(1, 6)
            stream = client.watch(task_id, after=after)
            got = 0
            async for event in stream:
                seen.append(event)
                got += 1
                if got == cut:
                    break
            else:
                return seen
            await stream.aclose()
            after = seen[-1].offset
            if stop_after is not None and time.monotonic() > stop_after:
                await asyncio.sleep(0.3)

    whole, pieces = await asyncio.gather(take(client, task_id), resumed(time.monotonic() + 2.0))
    assert_offsets(whole)
    kinds = [e.kind for e in whole]
    assert kinds[-1] == "closed" and whole[-1].status == TaskStatus.COMPLETED
    assert {"status", "text", "turn", "tool_started", "tool_finished"} <= set(kinds)
    finished = next(e for e in whole if e.kind == "tool_finished")
    assert finished.tool == "list_files" and finished.result is not None
    assert [key(e) for e in pieces] == [key(e) for e in whole]
    # after it closed
    assert [key(e) for e in await resumed(None)] == [key(e) for e in whole]
    middle = whole[len(whole) // 2].offset
    assert [key(e) for e in await take(client, task_id, after=middle)] == [
        key(e)
        for e in whole
        if e.offset > middle  # type: ignore[operator]
    ]
    assert await take(client, task_id, after=whole[-1].offset) == []


async def test_bad_offsets_are_refused_and_one_past_the_end_waits(
    client: SubagentClient, worker: None
) -> None:
    task_id = await client.spawn_task("explore", "go", model=script({"text": WORDS, "stream": 3}))
    for bad in (-1, 1.5, "3", True):
        with pytest.raises(InvalidRequest, match="after must be an offset"):
            await anext(client.watch(task_id, after=bad))  # type: ignore[arg-type]
    far = client.watch(task_id, after=10_000)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(anext(far), 1.5)  # nothing yet: it waits
    await far.aclose()
    whole = await take(client, task_id)
    assert "".join(e.text or "" for e in whole if e.kind == "text") == WORDS


async def test_a_tree_streams_as_one(
    client: SubagentClient, temporal_client: Client, worker: None
) -> None:
    """A parent, a child that finished before the watcher came, a child still streaming
    and a grandchild registered with it by ``parent_id``: one ``watch(tree=True)``."""
    client.agents["lead"] = AgentSpec(name="lead", tools=["read_file"], may_spawn=True)
    quick = script({"text": "quick done"})
    slow = script({"text": WORDS, "stream": 6.0})
    spawns = [
        {"name": "spawn_subagent", "arguments": {"agent": "explore", "prompt": p, "model": m}}
        for p, m in (("quick", quick), ("slow", slow))
    ]
    lead = script(
        {"tool_calls": spawns},
        {"tool_calls": [{"name": "wait_subagents", "arguments": {}}]},
        {"text": "lead done"},
    )
    task_id = await client.spawn_task("lead", "split", model=lead)

    async def children() -> dict[str, TaskStatus] | None:
        tasks = await client.list_tasks(parent_id=task_id)
        by_status = {t.description or t.id: t.status for t in tasks}
        return {t.id: t.status for t in tasks} if len(by_status) == 2 else None

    await eventually(children, "both children to start")
    kids = await client.list_tasks(parent_id=task_id)
    quick_id = next(t.id for t in kids if "quick" in (t.description or ""))
    slow_id = next(t.id for t in kids if t.id != quick_id)
    grand_id = await client.spawn_task(
        "explore", "grand", parent_id=slow_id, model=script({"text": "grand done"})
    )
    done = await client.check_task(grand_id, wait=True, timeout=CEILING)
    assert done.status == TaskStatus.COMPLETED
    quick_info = await client.check_task(quick_id, wait=True, timeout=CEILING)
    assert quick_info.status == TaskStatus.COMPLETED
    events = await take(client, task_id, tree=True)
    assert_offsets(events)
    by_task: dict[str, list[TaskEvent]] = {}
    for event in events:
        by_task.setdefault(event.task_id, []).append(event)
    assert set(by_task) == {task_id, quick_id, slow_id, grand_id}
    assert {e.depth for e in by_task[grand_id]} == {2}
    assert {e.depth for e in by_task[quick_id]} == {e.depth for e in by_task[slow_id]} == {1}
    for owned in by_task.values():
        assert owned[-1].kind == "closed" and owned[-1].status == TaskStatus.COMPLETED
        turns = [e.turn for e in owned if e.kind == "turn"]
        assert turns == sorted(turns)
    assert "".join(e.text or "" for e in by_task[slow_id] if e.kind == "text") == WORDS
    assert "".join(e.text or "" for e in by_task[grand_id] if e.kind == "text") == "grand done"
    assert events[-1].task_id == task_id and events[-1].kind == "closed"
    # without tree: the task's own events, the same offsets
    own = await take(client, task_id)
    assert [key(e) for e in own] == [key(e) for e in by_task[task_id]]
    # resumed in the middle of the tree
    middle = events[len(events) // 2].offset
    rest = await take(client, task_id, tree=True, after=middle)
    assert [key(e) for e in rest] == [key(e) for e in events if e.offset > middle]  # type: ignore[operator]


async def lead_of_one_child(client: SubagentClient) -> str:
    """A lead that spawns one child of ``two_turns`` and waits for it: the lead's id."""
    client.agents["lead"] = AgentSpec(name="lead", tools=["read_file"], may_spawn=True)
    spawn = {"agent": "explore", "prompt": "go", "model": two_turns()}
    lead = script(
        {"tool_calls": [{"name": "spawn_subagent", "arguments": spawn}]},
        {"tool_calls": [{"name": "wait_subagents", "arguments": {}}]},
        {"text": "lead done"},
    )
    return await client.spawn_task("lead", "split", model=lead)


async def test_a_watched_childs_turn_sends_its_text_to_the_parent_directly_and_in_order(
    client: SubagentClient, temporal_client: Client, worker: None
) -> None:
    """A child's live pieces reach its watched parent a hop sooner (its turn signals the
    parent itself), and the parent's stream holds the child's events exactly as the
    child's own does: each once, in the child's order."""
    task_id = await lead_of_one_child(client)
    tree = await take(client, task_id, tree=True)  # watched from the start
    [child_id] = {e.task_id for e in tree} - {task_id}
    own = await take(client, child_id)

    def shape(events: list[TaskEvent]) -> list[tuple[object, ...]]:
        return [(e.kind, e.turn, e.text, e.tool, e.summary, e.status) for e in events]

    assert shape([e for e in tree if e.task_id == child_id]) == shape(own)
    texts = [e.text for e in own if e.kind == "text"]
    assert len(texts) > 2 and "".join(t or "" for t in texts) == WORDS + "All " + WORDS
    direct = await signals(temporal_client, task_id, "stream_direct")
    assert direct > 0, "the child's turns sent no piece to the parent directly"
    # while they did, the child forwarded the copies once a second, not each publish,
    # and nobody watched the child itself: its own stream took the pieces once a second
    forwards = 0
    async for event in temporal_client.get_workflow_handle(child_id).fetch_history_events():
        forwards += (
            event.event_type == EventType.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED
        )
    assert 0 < forwards * 3 < len(texts), (forwards, len(texts))
    own_publishes = await signals(temporal_client, child_id, PUBLISH)
    assert 0 < own_publishes * 3 < direct, (own_publishes, direct)


async def test_a_child_watched_itself_takes_its_pieces_at_once_too(
    client: SubagentClient, temporal_client: Client, worker: None
) -> None:
    """Someone who watches the child itself (not only its tree) gets each piece as soon
    as the tree's watcher: the child's own stream is not spaced then."""
    task_id = await lead_of_one_child(client)
    tree: list[TaskEvent] = []
    child_watch: asyncio.Task[list[TaskEvent]] | None = None
    async for event in client.watch(task_id, tree=True):
        tree.append(event)
        if child_watch is None and event.task_id != task_id:
            child_watch = asyncio.create_task(take(client, event.task_id))
    assert child_watch is not None
    own = await child_watch
    [child_id] = {e.task_id for e in tree} - {task_id}
    texts = "".join(e.text or "" for e in own if e.kind == "text")
    assert texts.endswith("All " + WORDS), texts
    direct = await signals(temporal_client, task_id, "stream_direct")
    own_publishes = await signals(temporal_client, child_id, PUBLISH)
    # the second turn began watched: each of its publishes went to both streams
    assert direct > 10 and own_publishes * 2 > direct, (own_publishes, direct)


async def test_a_childs_news_is_not_held_behind_the_copies_of_its_pieces(
    client: SubagentClient, temporal_client: Client, worker: None
) -> None:
    """While a child's turn sends its pieces to the parent directly, the child forwards
    their copies once a second; an item that is news to the parent (here a grandchild's,
    forwarded through the child) goes at once, in the workflow task that took it."""
    task_id = await lead_of_one_child(client)
    grand = "subagent-grandchild-0123abcd"
    payload = temporal_client.data_converter.payload_converter.to_payloads(
        [StreamEvent(kind="status", status=TaskStatus.RUNNING, summary="grand news").item()]
    )[0]
    item = ForwardedItem(
        offset=0, topic="", data=base64.b64encode(payload.SerializeToString()).decode()
    )
    child_id = None
    seen: list[TaskEvent] = []
    async for event in client.watch(task_id, tree=True):
        seen.append(event)
        if child_id is None and event.depth == 1 and event.kind == "text":
            child_id = event.task_id  # its first turn streams (2 s): its copies are spaced
            await asyncio.sleep(0.3)
            forward = StreamForward(task_id=grand, items=[item], after=0)
            await temporal_client.get_workflow_handle(child_id).signal(FORWARD_SIGNAL, forward)
    assert child_id is not None
    assert [e.summary for e in seen if e.task_id == grand] == ["grand news"]
    history = [
        e async for e in temporal_client.get_workflow_handle(child_id).fetch_history_events()
    ]
    took = next(
        i
        for i, e in enumerate(history)
        if e.workflow_execution_signaled_event_attributes.signal_name == FORWARD_SIGNAL
    )
    sent = next(
        i
        for i, e in enumerate(history)
        if i > took
        and e.event_type == EventType.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED
    )
    between = [e.event_type for e in history[took:sent]]
    assert EventType.EVENT_TYPE_TIMER_FIRED not in between, between
    assert between.count(EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED) == 1, between


async def test_the_watched_memo_clears_soon_after_the_watcher_left_not_at_the_next_turn(
    client: SubagentClient, temporal_client: Client, worker: None
) -> None:
    """The ``watched`` memo tells a task's turns, and its subagents', to publish live: it
    clears ``WATCH_GRACE`` after the last poll, while the task is still in a long command
    (a parent waiting for its subagents is the costly case), not at its next turn."""
    client.agents["runner"] = AgentSpec(
        name="runner", tools=["bash"], permissions=[PermissionRule(tool="bash", action="allow")]
    )
    model = script(
        {"tool_calls": [{"name": "bash", "arguments": {"command": "sleep 2"}}]},
        {"tool_calls": [{"name": "bash", "arguments": {"command": "sleep 60"}}]},
        {"text": "done"},
    )
    task_id = await client.spawn_task("runner", "wait", model=model)
    handle = temporal_client.get_workflow_handle(task_id)

    async def memo() -> object:
        return (await (await handle.describe()).memo()).get("watched")

    watching = client.watch(task_id)
    async for event in watching:
        if event.kind == "tool_started":
            break
    await watching.aclose()  # its last poll stays in the task until the next event
    assert await memo() is True
    left = time.monotonic()
    await eventually(lambda: _is(memo(), False), "the memo to clear", ceiling=60)
    # the grace runs from the last poll's end in workflow time (a workflow task's start):
    # a little before the watcher left, so not to the millisecond
    assert time.monotonic() - left >= 8
    info = await client.check_task(task_id)
    assert info.status == TaskStatus.RUNNING and info.turns == 2, info  # in the long command
    await client.cancel_task(task_id)


async def _is(value: Any, expected: object) -> bool:
    return await value is expected


async def test_a_page_of_a_running_task_whose_worker_does_not_answer_is_what_was_read(
    client: SubagentClient, temporal_client: Client, settings: Settings
) -> None:
    """``events_since`` (``check_subagent``'s ``events_after``) on a running task whose
    worker does not answer the stream's Query in time (gone, busy, or its first workflow
    task not done) gives what it read, not an error: the next page brings the rest."""
    client.agents["careful"] = AgentSpec(
        name="careful", tools=["bash"], permissions=[PermissionRule(tool="bash", action="ask")]
    )
    model = script({"tool_calls": [{"name": "bash", "arguments": {"command": "true"}}]})
    async with create_worker(temporal_client, settings):
        task_id = await client.spawn_task("careful", "x", model=model)
        paused = await client.check_task(task_id, wait=True, timeout=CEILING)
        assert paused.status == TaskStatus.PAUSED
    # its worker is gone (its poll is still on record): the Query times out
    assert await client.events_since(task_id) == []
    async with create_worker(temporal_client, settings):
        events = await client.events_since(task_id)
    assert [e.kind for e in events][:1] == ["status"], events
    assert any(e.kind == "status" and e.status == TaskStatus.PAUSED for e in events), events


async def test_forged_direct_pieces_are_bounded_and_never_more_than_text(
    client: SubagentClient, temporal_client: Client, worker: None
) -> None:
    """Anyone who may signal a task may send it a ``stream_direct``: what it takes is a
    child's text or thinking, each piece once; no status, no close, nothing else."""
    slow = script({"text": WORDS, "stream": 3.0})
    task_id = await client.spawn_task("explore", "x", model=slow)
    handle = temporal_client.get_workflow_handle(task_id)
    forged = "subagent-forged-0123456789ab"
    junk: list[Any] = [
        {"kind": "closed", "status": "completed", "piece": "1"},
        {"kind": "status", "status": "failed", "piece": "2"},
        {"no": "kind"},
        {"kind": "text", "text": "no piece"},
        {"kind": "text", "text": "forged text", "piece": "3", "turn": "not a number"},
        *({"kind": "text", "text": f"t{i}", "piece": f"p{i}"} for i in range(20)),
        {"kind": "text", "text": "again", "piece": "p0"},
    ]
    await handle.signal("stream_direct", StreamDirect(task_id=forged, after=0, events=junk))
    await handle.signal("stream_direct", {"task_id": "no/such id", "events": junk})
    await handle.signal("stream_direct", StreamDirect(task_id=forged, after=0, events=junk[5:8]))
    done = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert done.status == TaskStatus.COMPLETED
    events = await take(client, task_id, tree=True)
    theirs = [e for e in events if e.task_id == forged]
    # the first batch's first 8 entries, of which only the text with a piece is taken
    # (its bad turn drops it too), then the repeat of p0..p2 is dropped: t0, t1, t2
    assert [(e.kind, e.text) for e in theirs] == [("text", "t0"), ("text", "t1"), ("text", "t2")]
    assert [e.kind for e in events if e.task_id == task_id][-1] == "closed"


async def test_a_grandchild_registered_under_a_registered_child_streams_live_to_the_root(
    client: SubagentClient, worker: None
) -> None:
    """A task registered under a registered task knows only its parent: it finds the
    watched root through each one's recorded parent and streams its text live, in
    pieces, while it runs (a turn nobody watches reaches the stream in one piece)."""
    long = script({"text": WORDS, "stream": 30.0})
    root_id = await client.spawn_task("explore", "root", model=long)
    middle_id = await client.spawn_task("explore", "middle", parent_id=root_id, model=long)
    watching = client.watch(root_id, tree=True)
    events = [await anext(watching)]  # the root's stream is polled: it is watched
    grand_id = await client.spawn_task(
        "explore", "grand", parent_id=middle_id, model=script({"text": WORDS, "stream": 4.0})
    )
    try:
        async with asyncio.timeout(CEILING):
            async for event in watching:
                events.append(event)
                if event.task_id == grand_id and event.kind == "closed":
                    break
    finally:
        await watching.aclose()
        for task_id in (middle_id, root_id):
            await client.cancel_task(task_id)
    grand = [e for e in events if e.task_id == grand_id]
    assert {e.depth for e in grand} == {2}
    pieces = [e.text or "" for e in grand if e.kind == "text"]
    assert "".join(pieces) == WORDS
    assert len(pieces) >= 3, pieces


MARKERS = [f"<m{i:03d}>" for i in range(40)]
UNHANDLED_COMMAND = WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_UNHANDLED_COMMAND


@pytest.mark.parametrize("kind", PROVIDERS)
async def test_markers_arrive_in_order_and_whole_through_each_wire(
    kind: str,
    monkeypatch: pytest.MonkeyPatch,
    client: SubagentClient,
    temporal_client: Client,
    settings: Settings,
) -> None:
    """Markers sent 0.1 s apart by the provider reach ``watch`` in order, each once, live
    (the first long before the last is sent); their latency is measured in bench/."""
    async with model_api(monkeypatch, kind) as api:
        api.add_reply(deltas=[m + " " for m in MARKERS], chunk_delay=0.1)
        async with create_worker(temporal_client, settings):
            task_id = await client.spawn_task("explore", "go", model=MODELS[kind])
            arrived: dict[str, float] = {}
            events = []
            async for event in client.watch(task_id):
                events.append(event)
                for marker in MARKERS:
                    if event.text and marker in event.text:
                        arrived.setdefault(marker, time.monotonic())
        sent = {m: next(t for t, frame in api.sent if m.encode() in frame) for m in MARKERS}
    text = "".join(e.text or "" for e in events if e.kind == "text" and e.turn == 1)
    assert text == "".join(m + " " for m in MARKERS)
    assert sorted(arrived, key=arrived.__getitem__) == MARKERS
    assert arrived[MARKERS[0]] < sent[MARKERS[-1]]  # live, not at the end of the turn
    assert len([e for e in events if e.kind == "text"]) >= 10


async def test_a_killed_worker_restarts_the_turn_and_loses_nothing_before(
    client: SubagentClient,
    temporal_client: Client,
    settings: Settings,
    workspace: Path,
    tmp_path: Path,
) -> None:
    """SIGKILL while a turn streams: a watcher that stays connected sees the pieces it
    had, then the turn's text again marked ``restarted``; a watch after the end sees the
    same events."""
    model = script({"text": WORDS, "stream": 6.0})
    first: WorkerProcess = worker_process(settings, workspace, tmp_path / "w.log", {})
    await first.start()
    task_id = await client.spawn_task("explore", "go", model=model)
    events: list[TaskEvent] = []
    killed = False
    try:
        async with asyncio.timeout(CEILING):
            async for event in client.watch(task_id):
                events.append(event)
                pieces = [e for e in events if e.kind == "text"]
                if not killed and len(pieces) >= 4:
                    await asyncio.to_thread(first.kill)
                    killed = True
                    second = create_worker(temporal_client, settings)
                    await second.__aenter__()
        await second.__aexit__(None, None, None)
    finally:
        first.close()
    assert killed
    assert_offsets(events)
    texts = [e for e in events if e.kind == "text"]
    restarted = [i for i, e in enumerate(texts) if e.summary == "restarted"]
    assert len(restarted) == 1 and restarted[0] >= 4, [(e.text, e.summary) for e in texts]
    before = "".join(e.text or "" for e in texts[: restarted[0]])
    assert WORDS.startswith(before) and len(before.split()) >= 4
    assert "".join(e.text or "" for e in texts[restarted[0] :]) == WORDS
    assert events[-1].kind == "closed" and events[-1].status == TaskStatus.COMPLETED
    async with create_worker(temporal_client, settings):
        again = await take(client, task_id)
    assert [key(e) for e in again] == [key(e) for e in events]


async def test_the_cli_watches_after_an_offset_and_a_tree(
    tmp_path: Path, settings: Settings, client: SubagentClient, worker: None
) -> None:
    """``subagents watch --json --after N`` prints the events after N with their offsets;
    ``--tree`` indents a child's lines and names it; a negative offset is a usage error."""
    client.agents["lead"] = AgentSpec(name="lead", tools=["read_file"], may_spawn=True)
    spawn = {"agent": "explore", "prompt": "kid", "model": script({"text": "kid done"})}
    lead = script(
        {"tool_calls": [{"name": "spawn_subagent", "arguments": spawn}]},
        {"tool_calls": [{"name": "wait_subagents", "arguments": {}}]},
        {"text": "lead done"},
    )
    task_id = await client.spawn_task("lead", "go", model=lead)
    await client.check_task(task_id, wait=True, timeout=CEILING)
    whole = await take(client, task_id)
    env = _env(
        tmp_path, TEMPORAL_ADDRESS=settings.address, SUBAGENTS_TASK_QUEUE=settings.task_queue
    )

    async def cli(*args: str) -> tuple[int, str]:
        proc = await asyncio.create_subprocess_exec(
            *CLI, "watch", task_id, *args, env=env, stdout=PIPE, stderr=STDOUT
        )
        out, _ = await asyncio.wait_for(proc.communicate(), CEILING)
        assert proc.returncode is not None
        return proc.returncode, out.decode()

    after = whole[2].offset
    assert after is not None
    code, out = await cli("--json", "--after", str(after))
    assert code == 0, out
    printed = [json.loads(line) for line in out.splitlines()]
    assert [p["offset"] for p in printed] == [e.offset for e in whole[3:]]
    code, out = await cli("--tree")
    assert code == 0, out
    kid = [line for line in out.splitlines() if line[9:].startswith("  [subagent-explore-")]
    assert any(" text " in line and line.endswith("kid done") for line in kid), out
    assert any(" closed " in line for line in kid), out
    code, out = await cli("--after", "-1")
    assert code == 2, out


async def test_the_stream_goes_on_across_continue_as_new(
    client: SubagentClient, temporal_client: Client, worker: None, workspace: Path
) -> None:
    """200 turns of 50 KB reads: the task continues as new, and one watch sees every
    turn once, in order, with offsets that go on from run to run. After the end, the
    stream keeps its latest items: a watch from the start is told where it goes on."""
    (workspace / "big.txt").write_text(("x" * 99 + "\n") * 500)
    model = script(
        {
            "text": "reading again",
            "tool_calls": [{"name": "read_file", "arguments": {"path": "big.txt"}}],
        },
        repeat=200,
        final="all done",
    )
    task_id = await client.spawn_task("explore", "read", model=model, max_turns=300)
    events = await take(client, task_id)
    assert_offsets(events)
    assert [e.turn for e in events if e.kind == "turn"] == list(range(1, 202))
    assert [e.text for e in events if e.kind == "text"] == ["reading again"] * 200 + ["all done"]
    reads = [e for e in events if e.kind == "tool_finished"]
    assert len(reads) == 200
    assert all(e.result and len(e.result) == 200 and "x" * 99 in e.result for e in reads)
    assert events[-1].kind == "closed" and events[-1].status == TaskStatus.COMPLETED
    runs = [r async for r in temporal_client.list_workflows(f"WorkflowId = '{task_id}'")]
    assert len(runs) >= 2, "the server suggested continue-as-new; the task must use it"
    again = await take(client, task_id, after=0)
    assert again[0].kind == "truncated" and again[0].offset is not None
    first = again[0].offset
    assert 0 < first < events[-1].offset  # type: ignore[operator]
    assert [key(e) for e in again[1:]] == [key(e) for e in events if e.offset >= first]  # type: ignore[operator]


async def test_children_that_end_with_their_parent_leave_replayable_histories(
    monkeypatch: pytest.MonkeyPatch,
    client: SubagentClient,
    temporal_client: Client,
    settings: Settings,
) -> None:
    """A lead and its child stream the same answer through the model wire at once, and
    the lead does not wait: the lead's end (which cancels the child) races the child's
    close, its last forward signals on their way to a parent that is gone. Watched as
    a tree, three times: no workflow task of either fails."""
    client.agents["lead"] = AgentSpec(name="lead", tools=["read_file"], may_spawn=True)
    deltas = [m + " " for m in MARKERS]

    def child(body: dict[str, Any]) -> FakeReply | None:
        """The child's first request (its prompt last) streams; the lead's come queued."""
        last = (body.get("messages") or [{}])[-1]
        if last.get("role") != "user" or "child-writes" not in json.dumps(last):
            return None
        return FakeReply(text="".join(deltas), deltas=deltas, chunk_delay=0.05)

    tasks: list[str] = []
    async with model_api(monkeypatch, "openai", responder=child) as api:
        async with create_worker(temporal_client, settings):
            for _ in range(3):
                spawn = {"agent": "explore", "prompt": "child-writes"}
                api.add_reply(tool_calls=[{"name": "spawn_subagent", "arguments": spawn}])
                api.add_reply(deltas=deltas, chunk_delay=0.05)
                task_id = await client.spawn_task("lead", "go", model=MODELS["openai"])
                events = await take(client, task_id, tree=True)
                assert events[-1].task_id == task_id and events[-1].kind == "closed"
                children = [t.id for t in await client.list_tasks(parent_id=task_id)]
                tasks += [task_id, *children]
                for child_id in children:
                    await client.check_task(child_id, wait=True, timeout=20)
    assert len(tasks) == 6
    for task_id in tasks:
        history = await temporal_client.get_workflow_handle(task_id).fetch_history()
        # (a close the server refused because a signal came meanwhile is retried: normal)
        failed = [
            e.workflow_task_failed_event_attributes.failure.message
            for e in history.events
            if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
            and e.workflow_task_failed_event_attributes.cause != UNHANDLED_COMMAND
        ]
        assert failed == [], (task_id, failed)
