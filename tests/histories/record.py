"""Record the histories that tests/unit/test_replay.py replays.

Run when a release changes what the workflow records (see "Upgrading workers" in
docs/durability.md), after bumping ``VERSION``:
    .venv/bin/python -m tests.histories.record [NAME ...]
Never re-record to make a replay failure go away: that failure means running tasks
would break on upgrade.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import tempfile
import uuid
from pathlib import Path

from aiohttp import web
from pydantic import SecretStr

from durable_subagents import AgentSpec, SubagentClient, connect_client
from durable_subagents.config import Settings
from durable_subagents.testing import DevServer, free_port, workspace_for_tools
from durable_subagents.wire._payloads import Decisions
from durable_subagents.worker import create_worker

HERE = Path(__file__).parent
os.environ.setdefault("SUBAGENTS_ALLOW_SCRIPTED", "true")  # the scenarios' model
VERSION = "0.2.0"
"""The release the histories were recorded from (files ``<scenario>-<VERSION>.json``).

Bump when a release changes what the workflow records, and record every scenario
anew. Keep the older files for as long as the code replays them: while an in-place
``workflow.patched`` branch still reads them. The release that removes that branch
(``workflow.deprecate_patch``) deletes them.
"""
SCENARIOS = (
    "completed",
    "cancelled",
    "timed_out",
    "spawning",
    "compacted",
    "approvals",
    "registered",
    "structured",
    "rate_limited",
    "notified",
    "streamed",
    "streamed_child",
)
"""What ``record`` records, each a task of one shape (names of the files)."""

TOOLS_SCRIPT = "scripted:" + json.dumps(
    [
        {
            "text": "looking",
            "tool_calls": [
                {"name": "list_files", "arguments": {"pattern": "*.txt"}},
                {"name": "read_file", "arguments": {"path": "a.txt"}},
                {"name": "bash", "arguments": {"command": "echo hi"}},
            ],
        },
        {"text": "done: {last_tool_result}"},
    ]
)
CHILD_SCRIPT = "scripted:" + json.dumps(
    [{"tool_calls": [{"name": "read_file", "arguments": {"path": "a.txt"}}]}, {"text": "child"}]
)
LEAD_SCRIPT = "scripted:" + json.dumps(
    [
        {
            "tool_calls": [
                {
                    "name": "spawn_subagent",
                    "arguments": {
                        "agent": "explore",
                        "prompt": "read a.txt",
                        "model": CHILD_SCRIPT,
                    },
                }
            ]
        },
        {"tool_calls": [{"name": "wait_subagents", "arguments": {}}]},
        {"text": "lead: {last_tool_result}"},
    ]
)
STREAMING_CHILD_SCRIPT = "scripted:" + json.dumps(
    [{"text": "the child writes its answer word by word", "stream": 1.0}]
)
STREAMING_LEAD_SCRIPT = "scripted:" + json.dumps(
    [
        {
            "text": "handing it over, word by word",
            "stream": 1.0,
            "tool_calls": [
                {
                    "name": "spawn_subagent",
                    "arguments": {
                        "agent": "explore",
                        "prompt": "write",
                        "model": STREAMING_CHILD_SCRIPT,
                    },
                }
            ],
        },
        {"tool_calls": [{"name": "wait_subagents", "arguments": {}}]},
        {"text": "lead: {last_tool_result}"},
    ]
)
SLOW_SCRIPT = "scripted:" + json.dumps(
    [{"tool_calls": [{"name": "bash", "arguments": {"command": "sleep 60"}}]}]
)
COMPACT_SCRIPT = "scripted:" + json.dumps(
    {
        "turns": [
            {
                "text": "NOTE: big.txt read again. " + "thinking " * 60,
                "tool_calls": [{"name": "read_file", "arguments": {"path": "big.txt"}}],
            }
        ],
        "repeat": 6,
        "final": "done",
    }
)
"""Turns that outgrow the 2,048-token window of the agent ``small``: compactions."""
ASK_SCRIPT = "scripted:" + json.dumps(
    [
        {
            "tool_calls": [
                {"name": "write_file", "arguments": {"path": "b.txt", "content": "beta"}},
                {"name": "bash", "arguments": {"command": "cat b.txt"}},
            ]
        },
        {"text": "draft", "delay": 1},
        {"text": "done: {last_tool_result}"},
    ]
)

VERDICT = {
    "type": "object",
    "properties": {"verdict": {"type": "string", "enum": ["pass", "fail"]}},
    "required": ["verdict"],
}
STRUCTURED_SCRIPT = "scripted:" + json.dumps(
    [
        {"text": "it passes"},
        {
            "tool_calls": [
                {"name": "final_answer", "arguments": {"verdict": "maybe"}},
                {"name": "read_file", "arguments": {"path": "a.txt"}},
            ]
        },
        {"tool_calls": [{"name": "final_answer", "arguments": {"verdict": "pass"}}]},
    ]
)


async def receiver(stack: contextlib.AsyncExitStack) -> str:
    """A webhook receiver that takes every POST, for the tasks that notify."""
    app = web.Application()
    app.router.add_post("/hook", lambda _: web.Response(text="ok"))
    runner = web.AppRunner(app)
    await runner.setup()
    stack.push_async_callback(runner.cleanup)
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return f"http://127.0.0.1:{port}/hook"


async def main() -> None:
    async with contextlib.AsyncExitStack() as stack:
        await record(stack)


async def record(stack: contextlib.AsyncExitStack) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "ws").mkdir()
        (root / "ws" / "a.txt").write_text("alpha\n")
        (root / "ws" / "big.txt").write_text("a line of the notes file\n" * 50)
        # a root worker runs commands as the workspace's owner (not root, not nobody)
        workspace_for_tools(root / "ws", (10001, 10001))
        async with DevServer(port=free_port(), ui_port=free_port(), db=root / "t.db") as server:
            temporal = await connect_client(server.address)
            settings = Settings(
                address=server.address,
                task_queue=f"record-{uuid.uuid4().hex[:6]}",
                data_dir=root,
                workspace=root / "ws",
            )
            client = SubagentClient(
                temporal,
                task_queue=settings.task_queue,
                blob_store=settings.blob_store(),
                agents={
                    "lead": AgentSpec(name="lead", tools=["read_file"], may_spawn=True),
                    "small": AgentSpec(name="small", tools=["read_file"], context_window=2048),
                },
            )
            async with create_worker(temporal, settings):
                done = await client.spawn_task("general", "look around", model=TOOLS_SCRIPT)
                await client.check_task(done, wait=True, timeout=60)
                slow = await client.spawn_task("general", "sleep", model=SLOW_SCRIPT)
                await asyncio.sleep(1.5)
                await client.cancel_task(slow, wait=True)
                timed = await client.spawn_task("general", "sleep", model=SLOW_SCRIPT, time_limit=1)
                await client.check_task(timed, wait=True, timeout=60)
                lead = await client.spawn_task("lead", "delegate", model=LEAD_SCRIPT)
                await client.check_task(lead, wait=True, timeout=60)
                compacted = await client.spawn_task("small", "read", model=COMPACT_SCRIPT)
                await client.check_task(compacted, wait=True, timeout=60)
                # a pause, a stale decision, a partial and a full decision, input while
                # the final answer is written
                asks = await client.spawn_task(
                    "general", "ask first", model=ASK_SCRIPT, permission_mode="default"
                )
                paused = await client.check_task(asks, wait=True, timeout=60)
                stale = Decisions(pause_id="pause-0-stale", decisions=[])
                await temporal.get_workflow_handle(asks).signal("decide", stale)
                first, second = (p.call_id for p in paused.pending_approvals)
                await client.approve(asks, [first])
                await client.reject(asks, [second], reason="not now")
                while (await client.check_task(asks)).turns < 2:
                    await asyncio.sleep(0.1)
                await client.send_input(asks, "one more thing")
                await client.check_task(asks, wait=True, timeout=60, after_pause=paused.pause_id)
                # a task registered under a parent, cancelled with it
                parent = await client.spawn_task("general", "parent", model=SLOW_SCRIPT)
                await client.spawn_task("general", "child", parent_id=parent, model=SLOW_SCRIPT)
                await asyncio.sleep(1.5)
                await client.cancel_task(parent, wait=True)
                # a structured answer: a text reply, an invalid answer beside a read, a valid one
                structured = await client.spawn_task(
                    "explore", "review", model=STRUCTURED_SCRIPT, output_schema=VERDICT
                )
                await client.check_task(structured, wait=True, timeout=60)
                # watched as a tree while both stream: publish signals, poll Updates,
                # the child's items forwarded to the lead
                streamed = await client.spawn_task("lead", "stream", model=STREAMING_LEAD_SCRIPT)
                below = {e.task_id async for e in client.watch(streamed, tree=True) if e.depth}
                [streamed_child] = below
            # model turns sent on to a provider's rate-limited queue (the first, by the
            # worker of the task's own queue; the later ones scheduled there)
            limited = settings.model_copy(
                update={
                    "task_queue": f"{settings.task_queue}-limited",
                    "model_rate_limits": "scripted=20",
                }
            )
            limited_client = SubagentClient(
                temporal, task_queue=limited.task_queue, blob_store=limited.blob_store()
            )
            async with create_worker(temporal, limited):
                rated = await limited_client.spawn_task("general", "look", model=TOOLS_SCRIPT)
                await limited_client.check_task(rated, wait=True, timeout=60)
            # a task on workers that notify (their own URL): a pause, a decision, the
            # end, each event a SubagentNotify child
            notify_settings = settings.model_copy(
                update={
                    "task_queue": f"{settings.task_queue}-notify",
                    "notify_url": await receiver(stack),
                    "notify_secret": SecretStr("a secret of sixteen bytes or more"),
                }
            )
            notify_client = SubagentClient(
                temporal, task_queue=notify_settings.task_queue, blob_store=settings.blob_store()
            )
            async with create_worker(temporal, notify_settings):
                notified = await notify_client.spawn_task(
                    "general", "ask first", model=ASK_SCRIPT, permission_mode="default"
                )
                paused = await notify_client.check_task(notified, wait=True, timeout=60)
                await notify_client.approve(notified, pause_id=paused.pause_id)
                await notify_client.check_task(
                    notified, wait=True, timeout=60, after_pause=paused.pause_id
                )
            recorded = {
                "completed": done,
                "cancelled": slow,
                "timed_out": timed,
                "spawning": lead,
                "compacted": compacted,
                "approvals": asks,
                "registered": parent,
                "structured": structured,
                "rate_limited": rated,
                "notified": notified,
                "streamed": streamed,
                "streamed_child": streamed_child,
            }
            assert tuple(recorded) == SCENARIOS
            wanted = sys.argv[1:] or list(recorded)
            for name, task_id in recorded.items():
                if name not in wanted:
                    continue
                history = await temporal.get_workflow_handle(task_id).fetch_history()
                (HERE / f"{name}-{VERSION}.json").write_text(history.to_json())
                print("recorded", name)


if __name__ == "__main__":
    asyncio.run(main())
