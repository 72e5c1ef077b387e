"""Long-run benchmark: a 200-turn task whose tool returns 50 KB every turn.

Prints wall time, ms per turn, the history of every run (continue-as-new included),
the largest activity payload, and the process's peak memory.

    .venv/bin/python bench/bench_long.py [--turns 200] [--kb 50]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import tempfile
import time
import uuid
from pathlib import Path

from temporalio.api.enums.v1 import EventType

from durable_subagents import SubagentClient, TaskStatus, connect_client
from durable_subagents.config import Settings
from durable_subagents.testing import DevServer, free_port
from durable_subagents.worker import create_worker

# Its workers run the scripted model and any model of the local fake servers: a worker
# runs only the models its settings allow.
os.environ.setdefault("SUBAGENTS_ALLOW_SCRIPTED", "true")
os.environ.setdefault("SUBAGENTS_MODELS", "*")


async def main(turns: int, kb: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        workspace = root / "ws"
        workspace.mkdir()
        (workspace / "big.txt").write_text(("x" * 99 + "\n") * (kb * 10))
        async with DevServer(port=free_port(), ui_port=free_port(), db=root / "t.db") as server:
            temporal = await connect_client(server.address)
            settings = Settings(
                address=server.address,
                task_queue=f"long-{uuid.uuid4().hex[:6]}",
                data_dir=root,
                workspace=workspace,
            )
            client = SubagentClient(
                temporal, task_queue=settings.task_queue, blob_store=settings.blob_store()
            )
            script = {
                "turns": [
                    {"tool_calls": [{"name": "read_file", "arguments": {"path": "big.txt"}}]}
                ],
                "repeat": turns,
                "final": "done",
            }
            async with create_worker(temporal, settings):
                started = time.perf_counter()
                task_id = await client.spawn_task(
                    "explore", "read", model="scripted:" + json.dumps(script), max_turns=turns + 1
                )
                info = await client.check_task(task_id, wait=True, timeout=1800)
                elapsed = time.perf_counter() - started
            assert info.status == TaskStatus.COMPLETED, info
            await asyncio.sleep(1)
            runs, total, events, biggest = 0, 0, 0, 0
            async for execution in temporal.list_workflows(f"WorkflowId = '{task_id}'"):
                runs += 1
                handle = temporal.get_workflow_handle(task_id, run_id=execution.run_id)
                async for e in handle.fetch_history_events():
                    events += 1
                    total += e.ByteSize()
                    if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                        biggest = max(
                            biggest, e.activity_task_scheduled_event_attributes.input.ByteSize()
                        )
                    if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
                        biggest = max(
                            biggest, e.activity_task_completed_event_attributes.result.ByteSize()
                        )
            blobs = sum(
                p.stat().st_size for p in settings.blob_store().root.rglob("*") if p.is_file()
            )
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    rows = [
        ("turns", f"{info.turns}"),
        ("wall time (s)", f"{elapsed:.1f}"),
        ("ms per turn", f"{elapsed * 1000 / info.turns:.1f}"),
        ("runs (continue-as-new)", f"{runs}"),
        ("history, all runs (KB)", f"{total / 1024:.0f}"),
        ("history events, all runs", f"{events}"),
        ("largest activity payload (KB)", f"{biggest / 1024:.1f}"),
        ("blob store (MB)", f"{blobs / 1024 / 1024:.1f}"),
        ("peak RSS, client+worker (MB)", f"{rss_mb:.0f}"),
    ]
    print(f"{turns} turns x {kb} KB tool output")
    for name, value in rows:
        print(f"  {name:<32} {value:>10}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--kb", type=int, default=50)
    args = parser.parse_args()
    asyncio.run(main(args.turns, args.kb))
