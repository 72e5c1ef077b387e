"""What the tool queue costs a tool call: remote tool calls on ``<queue>-tools``.

Run: ``.venv/bin/python bench/bench_tool_queue.py [--turns 10] [--rounds 8]``

Tool calls that run as activities (``bash``, ``write_file``, ``edit_file``) go to the
task queue's tool queue, whose slots are apart from the model turns' (see the README,
"Tool calls have slots of their own"). An activity scheduled on the workflow's own
queue, with a free slot on the worker that ran the workflow task, is started eagerly:
the server hands it back in the answer to the workflow task's completion. One on
another queue goes through matching to a poller. This measures the difference on one
dev server (``DevServer``: SQLite file, the low-latency dynamic config), in one worker
(``create_worker``), with two variants interleaved task by task:

- **tool queue**: as shipped;
- **same queue**: the workflow's ``tool_queue`` replaced by the identity, as before the
  tool queue existed (one pool of slots, eager starts).

A task is ``--turns`` turns of the offline ``scripted:`` model, each one ``bash`` call
(``true``, in the sandbox), then a final answer. Measured per tool call, from the
histories: scheduled -> started (the wait for a worker) and scheduled -> completed; and
per turn, the task's wall time (spawn -> ``check_task(wait=True)``) over its turns.
Medians over ``--rounds`` rounds, after a warm-up task per variant.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from temporalio.api.enums.v1 import EventType

import durable_subagents.workflows._tool_calls as tool_calls_module
from durable_subagents import SubagentClient, TaskStatus, connect_client
from durable_subagents.config import Settings
from durable_subagents.testing import DevServer, free_port, workspace_for_tools
from durable_subagents.wire._payloads import tool_queue
from durable_subagents.worker import create_worker

# Its workers run the scripted model and any model of the local fake servers: a worker
# runs only the models its settings allow.
os.environ.setdefault("SUBAGENTS_ALLOW_SCRIPTED", "true")
os.environ.setdefault("SUBAGENTS_MODELS", "*")

VARIANTS = ("tool queue", "same queue")


def script(turns: int) -> str:
    call = {"tool_calls": [{"name": "bash", "arguments": {"command": "true"}}]}
    return "scripted:" + json.dumps([call] * turns + [{"text": "done"}])


async def run_task(client: SubagentClient, variant: str, turns: int) -> tuple[str, float]:
    tool_calls_module.tool_queue = tool_queue if variant == "tool queue" else (lambda q: q)  # type: ignore[attr-defined]
    started = time.perf_counter()
    task_id = await client.spawn_task(
        "general", "bench", model=script(turns), max_turns=turns + 1, permission_mode="dont_ask"
    )
    info = await client.check_task(task_id, wait=True, timeout=300)
    seconds = time.perf_counter() - started
    if info.status != TaskStatus.COMPLETED or info.result != "done":
        raise RuntimeError(f"{variant}: task {task_id} ended {info.status}: {info.error}")
    return task_id, seconds


async def tool_call_times(client: SubagentClient, task_id: str) -> list[tuple[float, float]]:
    """``(scheduled -> started, scheduled -> completed)`` in ms, per tool call."""
    scheduled: dict[int, float] = {}
    started: dict[int, float] = {}
    times = []
    async for e in client.temporal.get_workflow_handle(task_id).fetch_history_events():
        at = e.event_time.ToNanoseconds() / 1e6
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            if e.activity_task_scheduled_event_attributes.activity_type.name == "run_tool":
                scheduled[e.event_id] = at
        elif e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            started[e.activity_task_started_event_attributes.scheduled_event_id] = at
        elif e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            sid = e.activity_task_completed_event_attributes.scheduled_event_id
            if sid in scheduled:
                times.append((started[sid] - scheduled[sid], at - scheduled[sid]))
    return times


async def main(args: argparse.Namespace) -> None:
    print(
        f"machine       {platform.machine()}, {os.cpu_count()} cores, {platform.python_version()}"
    )
    print(f"settings      turns={args.turns} rounds={args.rounds}")
    results: dict[str, dict[str, list[float]]] = {v: {} for v in VARIANTS}
    original = tool_calls_module.tool_queue  # type: ignore[attr-defined]
    with tempfile.TemporaryDirectory(prefix="bench-toolq-") as tmp_name:
        tmp = Path(tmp_name)
        (tmp / "ws").mkdir()
        workspace_for_tools(tmp / "ws")  # a root worker's commands run as its owner
        server = DevServer(port=free_port(), ui_port=free_port(), db=tmp / "temporal.db", ui=False)
        await server.start()
        try:
            settings = Settings(
                address=server.address,
                namespace=server.namespace,
                task_queue=f"bench-toolq-{uuid.uuid4().hex[:6]}",
                data_dir=tmp / "data",
                blob_dir=tmp / "blobs",
                workspace=tmp / "ws",
            )
            temporal = await connect_client(server.address, server.namespace)
            client = SubagentClient(
                temporal, task_queue=settings.task_queue, blob_store=settings.blob_store()
            )
            async with create_worker(temporal, settings):
                for variant in VARIANTS:  # warm-up: the sandbox, caches, connections
                    await run_task(client, variant, 2)
                for round_ in range(args.rounds):
                    order = VARIANTS if round_ % 2 == 0 else VARIANTS[::-1]
                    for variant in order:
                        task_id, seconds = await run_task(client, variant, args.turns)
                        calls = await tool_call_times(client, task_id)
                        measures = results[variant]
                        measures.setdefault("wall per turn", []).append(
                            seconds * 1000 / (args.turns + 1)
                        )
                        measures.setdefault("scheduled -> started", []).extend(c[0] for c in calls)
                        measures.setdefault("scheduled -> completed", []).extend(
                            c[1] for c in calls
                        )
        finally:
            tool_calls_module.tool_queue = original  # type: ignore[attr-defined]
            await server.stop()
    print()
    print(f"{'median, ms':26}{VARIANTS[0]:>14}{VARIANTS[1]:>14}{'difference':>14}")
    for measure in ("scheduled -> started", "scheduled -> completed", "wall per turn"):
        a, b = (statistics.median(results[v][measure]) for v in VARIANTS)
        print(f"{measure:26}{a:14.1f}{b:14.1f}{a - b:+14.1f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=8)
    asyncio.run(main(parser.parse_args()))
