"""Live text benchmark: how soon a model's text reaches ``watch``, and what it costs.

A local model server on each wire (OpenAI, Anthropic) streams ``--markers`` markers
``--gap`` seconds apart; a watcher notes when each arrives. Printed:

- latency, p50 and p95, from the server writing a marker to ``watch`` yielding it:
  for one task, and for a child seen in its parent's ``watch(tree=True)``; and the
  child's other events (status, turn, close) from its workflow stamping them;
- history events and bytes of one streaming turn, with live text published and with
  it turned off (``MAX_PUBLISHES = 0``: the turn's text reaches the stream from its
  result only), with and without a watcher;
- the process's CPU seconds per streaming turn, on and off, nobody watching.

    .venv/bin/python bench/bench_stream.py [--markers 50] [--gap 0.1] [--turns 5]
        [--wires openai,anthropic]

The 200-turn x 50 KB history is ``bench_long.py`` (run it on both versions).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from temporalio.client import Client

from durable_subagents import SubagentClient, TaskStatus, connect_client
from durable_subagents.activities import _stream_text
from durable_subagents.agents import AgentSpec
from durable_subagents.config import Settings
from durable_subagents.providers import clear_provider_cache, close_providers
from durable_subagents.testing import (
    DevServer,
    FakeAnthropicServer,
    FakeModelServer,
    FakeOpenAIServer,
    free_port,
)
from durable_subagents.testing.fake_openai import FakeReply
from durable_subagents.worker import create_worker

CHILD = "child-streams-markers"
"""The prompt of the child whose markers a tree's watcher times."""

WIRES = {
    "openai": (FakeOpenAIServer, "OPENAI", "openai:gpt-test"),
    "anthropic": (FakeAnthropicServer, "ANTHROPIC", "anthropic:claude-test"),
}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def history_of(temporal: Client, task_id: str) -> tuple[int, int]:
    events = size = 0
    async for execution in temporal.list_workflows(f"WorkflowId = '{task_id}'"):
        handle = temporal.get_workflow_handle(task_id, run_id=execution.run_id)
        async for event in handle.fetch_history_events():
            events += 1
            size += event.ByteSize()
    return events, size


class Bench:
    def __init__(self, temporal: Client, settings: Settings, markers: int, gap: float) -> None:
        self.temporal = temporal
        self.settings = settings
        self.client = SubagentClient(temporal, task_queue=settings.task_queue)
        self.client.agents["lead"] = AgentSpec(name="lead", tools=["read_file"], may_spawn=True)
        self.markers = [f"<m{i:03d}>" for i in range(markers)]
        self.deltas = [m + " " for m in self.markers]
        self.gap = gap

    def reply(self, server: FakeModelServer) -> None:
        server.add_reply(deltas=self.deltas, chunk_delay=self.gap)

    def child_reply(self, body: dict[str, Any]) -> FakeReply | None:
        """The markers for the child's request (its prompt last), None (the queue) else.

        The lead's later requests hold the child's prompt too, in the spawn call.
        """
        messages = body.get("messages") or [{}]
        last = messages[-1] if isinstance(messages, list) else {}
        if not isinstance(last, dict) or last.get("role") != "user":
            return None
        if CHILD not in json.dumps(last):
            return None
        return FakeReply(text="".join(self.deltas), deltas=self.deltas, chunk_delay=self.gap)

    async def latency(
        self, server: FakeModelServer, model: str, tree: bool
    ) -> tuple[list[float], list[float]]:
        """Seconds from each marker's frame to ``watch`` yielding it; and in a tree, from
        each of the child's other events (its status, turn, close) happening, as its
        workflow stamped it, to ``watch`` yielding it."""
        if tree:
            # the parent's turns from the queue; the child's (its prompt says so) streams
            spawn = {"agent": "explore", "prompt": CHILD}
            server.add_reply(tool_calls=[{"name": "spawn_subagent", "arguments": spawn}])
            server.add_reply(tool_calls=[{"name": "wait_subagents", "arguments": {}}])
            server.add_reply(text="done")
            task_id = await self.client.spawn_task("lead", "go", model=model)
        else:
            self.reply(server)
            task_id = await self.client.spawn_task("explore", "go", model=model)
        arrived: dict[str, float] = {}
        others: list[float] = []
        async for event in self.client.watch(task_id, tree=tree):
            if tree and event.depth == 1 and event.kind != "text" and event.time is not None:
                others.append((datetime.now(UTC) - event.time).total_seconds())
            if event.kind == "text" and event.text and event.depth == (1 if tree else 0):
                now = time.monotonic()
                for marker in self.markers:
                    if marker in event.text:
                        arrived.setdefault(marker, now)
        sent = {m: next(t for t, frame in server.sent if m.encode() in frame) for m in self.markers}
        server.sent.clear()
        assert len(arrived) == len(self.markers), f"{len(arrived)} of {len(self.markers)}"
        return [arrived[m] - sent[m] for m in self.markers], others

    async def turn_cost(
        self, server: FakeModelServer, model: str, publish: bool, watched: bool
    ) -> tuple[int, int]:
        """History events and bytes of a task of one streaming turn."""
        _stream_text.MAX_PUBLISHES = 300 if publish else 0
        try:
            self.reply(server)
            task_id = await self.client.spawn_task("explore", "go", model=model)
            if watched:
                async for _ in self.client.watch(task_id):
                    pass
            info = await self.client.check_task(task_id, wait=True, timeout=300)
            assert info.status == TaskStatus.COMPLETED, info
        finally:
            _stream_text.MAX_PUBLISHES = 300
        return await history_of(self.temporal, task_id)

    async def cpu(self, server: FakeModelServer, model: str, turns: int) -> tuple[float, float]:
        """CPU seconds of this process (worker, model server, client) per streaming turn
        nobody watches, live text off and on: ``turns`` of each, taken in turn."""
        spent = {False: 0.0, True: 0.0}
        try:
            for _ in range(turns):
                for publish in (False, True):
                    _stream_text.MAX_PUBLISHES = 300 if publish else 0
                    started = time.process_time()
                    self.reply(server)
                    task_id = await self.client.spawn_task("explore", "go", model=model)
                    await self.client.check_task(task_id, wait=True, timeout=300)
                    spent[publish] += time.process_time() - started
        finally:
            _stream_text.MAX_PUBLISHES = 300
        return spent[False] / turns, spent[True] / turns

    async def watch_checks(self, server: FakeModelServer, model: str) -> tuple[float, float]:
        """What live text costs a turn nobody watches, counted rather than timed: the
        memo reads of one streaming turn, and the CPU seconds of one such read.

        Live text on and nobody watching, a turn does nothing more than ask the tasks'
        ``watched`` memos now and then (pieces wait in memory, unpublished); the
        process's CPU per turn varies between turns by more than that costs.
        """
        checks = 0
        real = _stream_text.TurnStream._watched

        async def counted(stream: _stream_text.TurnStream) -> bool:
            nonlocal checks
            before = stream.memo_reads
            watched = await real(stream)
            checks += stream.memo_reads - before
            return watched

        _stream_text.TurnStream._watched = counted  # type: ignore[method-assign]
        try:
            self.reply(server)
            task_id = await self.client.spawn_task("explore", "go", model=model)
            await self.client.check_task(task_id, wait=True, timeout=300)
        finally:
            _stream_text.TurnStream._watched = real  # type: ignore[method-assign]
        reads = 100
        started = time.process_time()
        for _ in range(reads):
            await _stream_text._memo_and_parent(self.temporal, task_id)
        return checks, (time.process_time() - started) / reads


async def main(markers: int, gap: float, turns: int, wires: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        async with DevServer(port=free_port(), ui_port=free_port(), db=root / "t.db") as dev:
            temporal = await connect_client(dev.address)
            settings = Settings(
                address=dev.address,
                task_queue=f"stream-{uuid.uuid4().hex[:6]}",
                allow_scripted=True,
                models="*",
                data_dir=root,
                workspace=root,
            )
            bench = Bench(temporal, settings, markers, gap)
            print(f"{markers} markers {gap:g} s apart, per wire")
            for wire in wires:
                server_class, prefix, model = WIRES[wire]
                async with server_class(responder=bench.child_reply) as server:
                    os.environ[f"{prefix}_API_KEY"] = "k"
                    os.environ[f"{prefix}_BASE_URL"] = server.base_url
                    clear_provider_cache()
                    async with create_worker(temporal, settings):
                        for tree in (False, True):
                            seen, others = await bench.latency(server, model, tree)
                            what = "child in a tree" if tree else "one task"
                            print(
                                f"  {wire:<9} {what:<16} latency p50 "
                                f"{statistics.median(seen) * 1000:6.0f} ms   p95 "
                                f"{percentile(seen, 0.95) * 1000:6.0f} ms   max "
                                f"{max(seen) * 1000:6.0f} ms"
                            )
                            if others:
                                print(
                                    f"  {wire:<9} {'child, not text':<16} latency p50 "
                                    f"{statistics.median(others) * 1000:6.0f} ms   max "
                                    f"{max(others) * 1000:6.0f} ms   ({len(others)} events)"
                                )
                        if wire == "openai":
                            print("  one streaming turn's task history (events, KB):")
                            for publish, watched in ((False, False), (True, False), (True, True)):
                                events, size = await bench.turn_cost(
                                    server, model, publish, watched
                                )
                                label = ("live text on" if publish else "live text off") + (
                                    ", watched" if watched else ""
                                )
                                print(f"    {label:<24} {events:5d} events {size / 1024:7.1f} KB")
                            off, on = await bench.cpu(server, model, turns)
                            print(
                                "  CPU per streaming turn, nobody watching: "
                                f"off {off * 1000:.0f} ms, on {on * 1000:.0f} ms "
                                f"({(on / off - 1) * 100:+.0f}%)"
                            )
                            checks, each = await bench.watch_checks(server, model)
                            print(
                                f"  memo reads per streaming turn nobody watches: {checks}, "
                                f"{each * 1000:.2f} ms CPU each: {checks * each * 1000:.1f} ms "
                                f"a turn ({checks * each / off * 100:.1f}% of the turn off)"
                            )
                    await close_providers()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--markers", type=int, default=50)
    parser.add_argument("--gap", type=float, default=0.1)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--wires", default="openai,anthropic", help="comma-separated")
    args = parser.parse_args()
    asyncio.run(main(args.markers, args.gap, args.turns, args.wires.split(",")))
