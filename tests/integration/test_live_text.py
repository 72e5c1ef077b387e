"""Live text: ``watch`` yields a streaming turn's answer from the task's stream as it streams."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from pathlib import Path

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from durable_subagents import SubagentClient, TaskEvent, TaskStatus
from durable_subagents.activities._stream_text import STREAM_TEXT_LIMIT
from durable_subagents.client._live_turn import RESTARTED
from durable_subagents.config import Settings
from durable_subagents.context._live_text import LIVE_TEXT_LIMIT, parse_live
from durable_subagents.worker import create_worker

from ..helpers import CEILING, eventually
from ..helpers.cli import CLI, _env
from ..helpers.providers import (
    MODELS,
    PROVIDERS,
    model_api,
    turn_text,
)
from ..helpers.tasks import script

WORDS = " ".join(f"word{i}" for i in range(1, 25)) + "."


async def turn_open(temporal: Client, task_id: str) -> bool:
    desc = await temporal.get_workflow_handle(task_id).describe()
    return any(
        p.activity_type.name == "model_turn" for p in desc.raw_description.pending_activities
    )


async def words_heartbeated(temporal: Client, task_id: str) -> int:
    """Words of the open turn's text that its heartbeats have carried so far."""
    desc = await temporal.get_workflow_handle(task_id).describe()
    for pending in desc.raw_description.pending_activities:
        if pending.activity_type.name == "model_turn" and pending.heartbeat_details.payloads:
            [details] = await temporal.data_converter.decode(pending.heartbeat_details.payloads)
            live = parse_live(details)
            return 0 if live is None else len(live.text.split())
    return 0


async def watch_until_closed(client: SubagentClient, task_id: str) -> list[TaskEvent]:
    return [e async for e in client.watch(task_id)]


async def test_text_streams_before_its_turn_event(
    client: SubagentClient, temporal_client: Client, worker: None
) -> None:
    """Several pieces arrive while the model call still runs, then the turn event; the
    pieces add up to the answer."""
    task_id = await client.spawn_task("explore", "go", model=script({"text": WORDS, "stream": 4}))
    events: list[TaskEvent] = []
    open_at_first_text: bool | None = None
    async for event in client.watch(task_id):
        if event.kind == "text" and open_at_first_text is None:
            open_at_first_text = await turn_open(temporal_client, task_id)
        events.append(event)
    kinds = [e.kind for e in events]
    assert open_at_first_text, "the first text arrived only after the turn ended"
    first_turn = kinds.index("turn")
    texts = [e for e in events[:first_turn] if e.kind == "text"]
    assert len(texts) >= 3, kinds
    assert all(e.turn == 1 for e in texts)
    assert "".join(e.text or "" for e in texts) == WORDS
    assert events[first_turn].turn == 1 and events[first_turn].error is None
    assert kinds[-1] == "closed" and events[-1].status == TaskStatus.COMPLETED


async def test_a_late_watcher_gets_the_text_so_far(
    client: SubagentClient, temporal_client: Client, worker: None
) -> None:
    """A watcher that comes while the turn streams gets every piece from the first, at
    once, then the rest live."""
    task_id = await client.spawn_task("explore", "go", model=script({"text": WORDS, "stream": 8}))

    async def four_words_heartbeated() -> bool:
        return await words_heartbeated(temporal_client, task_id) >= 4

    await eventually(four_words_heartbeated, "four words in the turn's heartbeats")
    assert await turn_open(temporal_client, task_id)
    events = await watch_until_closed(client, task_id)
    texts = [e for e in events if e.kind == "text"]
    assert texts[0].text is not None and texts[0].text.startswith("word1")
    assert len(texts) >= 4, texts
    assert "".join(e.text or "" for e in texts) == WORDS
    offsets = [e.offset for e in events]
    assert offsets == sorted(set(offsets)) and None not in offsets


async def test_a_finished_task_replays_each_turns_text(
    client: SubagentClient, worker: None
) -> None:
    model = script(
        {"text": "Looking first.", "tool_calls": [{"name": "list_files", "arguments": {}}]},
        {"text": "All done."},
    )
    task_id = await client.spawn_task("explore", "go", model=model)
    await client.check_task(task_id, wait=True, timeout=CEILING)
    events = await watch_until_closed(client, task_id)
    shown = [(e.kind, e.turn, e.text) for e in events if e.kind in ("text", "turn")]
    assert shown == [
        ("text", 1, "Looking first."),
        ("turn", 1, None),
        ("text", 2, "All done."),
        ("turn", 2, None),
    ]


async def test_live_text_reaches_the_history_once_in_bounded_signals(
    monkeypatch: pytest.MonkeyPatch,
    client: SubagentClient,
    temporal_client: Client,
    settings: Settings,
) -> None:
    """The pieces reach the workflow in the stream's publish signals, one per piece at
    most, and hold the answer once; no heartbeat is recorded."""
    async with model_api(monkeypatch, "openai") as api:
        api.add_reply(text=WORDS, chunk_delay=0.15)
        async with create_worker(temporal_client, settings):
            task_id = await client.spawn_task("explore", "go", model=MODELS["openai"])
            seen = await watch_until_closed(client, task_id)
    assert sum(1 for e in seen if e.kind == "text") >= 3
    history = await temporal_client.get_workflow_handle(task_id).fetch_history()
    published = ""
    signals = 0
    for event in history.events:
        if event.event_type != EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            continue
        attrs = event.workflow_execution_signaled_event_attributes
        assert attrs.signal_name == "__temporal_workflow_stream_publish"
        signals += 1
        sent = json.loads(attrs.input.payloads[0].data)
        for entry in sent["items"]:
            item = Payload()
            item.ParseFromString(base64.b64decode(entry["data"]))
            published += json.loads(item.data).get("text", "")
    assert 1 <= signals <= len(WORDS.split()) + 1, signals
    assert published == WORDS
    assert turn_text(seen, 1) == WORDS


async def test_a_turn_nobody_watches_publishes_nothing_live(
    monkeypatch: pytest.MonkeyPatch,
    client: SubagentClient,
    temporal_client: Client,
    settings: Settings,
) -> None:
    """No watcher: no publish signal reaches the history, and a later watcher still reads
    the turn's text (the workflow published it from the turn's result)."""
    async with model_api(monkeypatch, "openai") as api:
        api.add_reply(text=WORDS, chunk_delay=0.1)
        async with create_worker(temporal_client, settings):
            task_id = await client.spawn_task("explore", "go", model=MODELS["openai"])
            info = await client.check_task(task_id, wait=True, timeout=CEILING)
            assert info.status == TaskStatus.COMPLETED
            seen = await watch_until_closed(client, task_id)
    assert api.completed_streams == 1
    history = await temporal_client.get_workflow_handle(task_id).fetch_history()
    kinds = [e.event_type for e in history.events]
    assert EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED not in kinds
    assert [e.text for e in seen if e.kind == "text"] == [WORDS]


@pytest.mark.parametrize("kind", PROVIDERS)
async def test_live_text_over_the_model_wire(
    kind: str,
    monkeypatch: pytest.MonkeyPatch,
    client: SubagentClient,
    temporal_client: Client,
    settings: Settings,
) -> None:
    """Through the real SDK and wire protocol: pieces while the stream runs."""
    async with model_api(monkeypatch, kind) as api:
        api.add_reply(text=WORDS, chunk_delay=0.15)
        async with create_worker(temporal_client, settings):
            task_id = await client.spawn_task("explore", "go", model=MODELS[kind])
            events: list[TaskEvent] = []
            live = False
            async for event in client.watch(task_id):
                if event.kind == "text" and not events_have_text(events):
                    live = await turn_open(temporal_client, task_id)
                events.append(event)
    assert live, "no text arrived while the stream ran"
    assert sum(1 for e in events if e.kind == "text") >= 2
    assert turn_text(events, 1) == WORDS


def events_have_text(events: list[TaskEvent]) -> bool:
    return any(e.kind == "text" for e in events)


async def test_a_retried_turn_restarts_its_text(
    monkeypatch: pytest.MonkeyPatch,
    client: SubagentClient,
    temporal_client: Client,
    settings: Settings,
) -> None:
    """The stream breaks after part of the answer was shown: the retry's text comes as a
    ``restarted`` piece, and what a watcher ends with is the recorded answer."""
    async with model_api(monkeypatch, "openai") as api:
        api.add_fault("reset", after_chunks=14)
        api.add_reply(text=WORDS, chunk_delay=0.15)
        async with create_worker(temporal_client, settings):
            task_id = await client.spawn_task("explore", "go", model=MODELS["openai"])
            events = await watch_until_closed(client, task_id)
    texts = [e for e in events if e.kind == "text"]
    assert any(e.summary == RESTARTED for e in texts), [(e.text, e.summary) for e in texts]
    assert turn_text(events, 1) == WORDS
    info = await client.check_task(task_id)
    assert info.result == WORDS


async def test_watch_prints_text_live(
    tmp_path: Path,
    settings: Settings,
    worker: None,
    client: SubagentClient,
    temporal_client: Client,
) -> None:
    """``subagents watch`` prints the pieces as they come, before the turn's line."""
    task_id = await client.spawn_task("explore", "go", model=script({"text": WORDS, "stream": 8}))
    env = _env(
        tmp_path, TEMPORAL_ADDRESS=settings.address, SUBAGENTS_TASK_QUEUE=settings.task_queue
    )
    proc = await asyncio.create_subprocess_exec(
        *CLI,
        "watch",
        task_id,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    out = b""
    live = False
    deadline = time.monotonic() + CEILING
    while time.monotonic() < deadline:
        chunk = await asyncio.wait_for(proc.stdout.read(256), timeout=CEILING)
        if not chunk:
            break
        out += chunk
        if not live and b"word2" in out and b" turn " not in out:
            live = await turn_open(temporal_client, task_id)
    await proc.wait()
    text = out.decode()
    assert live, text
    lines = text.splitlines()
    text_line = next(line for line in lines if line.split()[1:2] == ["text"])
    assert text_line.split(maxsplit=2)[2] == WORDS
    kinds = [line.split()[1] for line in lines if line[:1].isdigit()]
    assert kinds.index("text") < kinds.index("turn")


async def test_a_model_that_writes_a_flood_cannot_swell_the_heartbeats_or_the_stream(
    monkeypatch: pytest.MonkeyPatch,
    client: SubagentClient,
    temporal_client: Client,
    settings: Settings,
) -> None:
    """A hostile answer of 400,000 characters: each heartbeat carries at most the latest
    32 K of it, the stream its first 64 K and how much it cut; the result is exact."""
    flood = " ".join(f"{i:04d}" + "x" * 995 for i in range(400))
    largest = 0
    events: list[TaskEvent] = []
    async with model_api(monkeypatch, "openai") as api:
        api.add_reply(text=flood, chunk_delay=0.012)
        async with create_worker(temporal_client, settings):
            task_id = await client.spawn_task("explore", "go", model=MODELS["openai"])
            handle = temporal_client.get_workflow_handle(task_id)

            async def heartbeats() -> None:
                nonlocal largest
                while True:
                    desc = await handle.describe()
                    for pending in desc.raw_description.pending_activities:
                        largest = max(largest, pending.heartbeat_details.ByteSize())
                    await asyncio.sleep(0.2)

            sampling = asyncio.create_task(heartbeats())
            async for event in client.watch(task_id):
                events.append(event)
            sampling.cancel()
    assert 0 < largest <= LIVE_TEXT_LIMIT + 1024, largest
    pieces = [e for e in events if e.kind == "text"]
    streamed = "".join(e.text or "" for e in pieces)
    assert len(pieces) >= 2
    assert streamed == flood[:STREAM_TEXT_LIMIT]  # the stream, and so the history, is bounded
    cut = len(flood) - STREAM_TEXT_LIMIT
    assert pieces[-1].summary == f"cut: {cut} more characters are in the transcript"
    info = await client.check_task(task_id)
    assert info.result_truncated  # over 64 KiB: the result carries its head
    assert await client.get_result(task_id) == flood
