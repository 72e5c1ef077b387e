"""A bug in workflow code holds the task, visibly, until a fixed worker resumes it.

A worker whose workflow code raises when it judges a bash call (the bug) takes the
task: its model turn has run, the workflow task fails and Temporal retries it. The
task is reported running and retrying with the error, to ``check_task`` and ``watch``.
The faulty worker is stopped, a fixed one started: the task goes on from its last
recorded step, and its command's side effect happens once.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from durable_subagents import SubagentClient, TaskStatus
from durable_subagents.cli.inbox._access import Grant, Role
from durable_subagents.cli.inbox._inbox import HeldTask, Inbox
from durable_subagents.config import Settings

from ..helpers import CEILING, eventually
from ..helpers.processes import worker_process
from ..helpers.tasks import script

ROOT = Path(__file__).resolve().parents[2]


async def test_a_bug_holds_the_task_until_a_fix_resumes_it(
    client: SubagentClient,
    temporal_client: Client,
    settings: Settings,
    workspace: Path,
    tmp_path: Path,
) -> None:
    assert settings.blob_dir is not None
    faulty = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.faulty_worker",
            settings.address,
            settings.task_queue,
            str(workspace),
            str(settings.blob_dir),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=open(tmp_path / "faulty.log", "wb"),
        env={**os.environ, "SUBAGENTS_DATA_DIR": str(tmp_path / "faulty-data")},
    )
    fixed = worker_process(settings, workspace, tmp_path / "fixed.log", {})
    try:
        assert faulty.stdout is not None and faulty.stdout.readline() == b"ready\n"
        model = script(
            {"tool_calls": [{"name": "bash", "arguments": {"command": "echo one >> side.txt"}}]},
            {"text": "done"},
        )
        task_id = await client.spawn_task("general", "x", model=model)

        async def held() -> bool:
            info = await client.check_task(task_id)
            return bool(info.retrying) and "attempt" in (info.retrying or "")

        await eventually(held, "the task to be held")
        info = await client.check_task(task_id)
        assert info.status == TaskStatus.RUNNING
        assert info.retrying is not None
        assert "planted bug: the verdict of a bash call cannot be taken" in info.retrying
        assert info.retrying.startswith("workflow task, attempt ")
        events = client.watch(task_id)
        async with asyncio.timeout(CEILING):
            async for event in events:
                if event.kind == "retrying":
                    assert event.error is not None and "planted bug" in event.error
                    break
        await events.aclose()
        # The inbox lists it as held, with the error, where the server flags it.
        inbox = Inbox(client, task_queue=settings.task_queue, poll=0)

        async def listed() -> list[HeldTask]:
            return (await inbox.view(Grant("ops", Role.VIEWER))).held

        [shown] = await eventually(listed, "the inbox to list the held task")
        assert shown.task.id == task_id and shown.task.retrying is not None
        assert "planted bug" in shown.task.retrying
        assert not (workspace / "side.txt").exists()  # the command has not run
        faulty.kill()
        faulty.wait(30)
        await fixed.start()
        done = await client.check_task(task_id, wait=True, timeout=CEILING)
    finally:
        if faulty.poll() is None:
            faulty.kill()
            faulty.wait(30)
        fixed.close()
    assert done.status == TaskStatus.COMPLETED, done
    assert done.result == "done" and done.retrying is None
    await eventually(lambda: listed_none(inbox), "the inbox to drop the task it held")
    assert (workspace / "side.txt").read_text() == "one\n"
    # Nothing recorded ran again: one model turn before the fix, one after.
    turns = 0
    async for event in temporal_client.get_workflow_handle(task_id).fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attrs = event.activity_task_scheduled_event_attributes
            turns += attrs.activity_type.name == "model_turn"
    assert turns == 2
    # The faulty worker said it once, not at every retry.
    log = (tmp_path / "faulty.log").read_text(errors="replace")
    assert log.count("planted bug: the verdict of a bash call cannot be taken") >= 1
    assert log.count("Failed activation on workflow SubagentWorkflow") == 1, log[-3000:]


async def listed_none(inbox: Inbox) -> bool:
    return not (await inbox.view(Grant("ops", Role.VIEWER))).held
