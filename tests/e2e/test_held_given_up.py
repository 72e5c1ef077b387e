"""A task a bug holds fails after the grace period its operator set, as it said it would.

A real ``subagents worker`` whose workflow code has a bug (``tests.faulty_cli_worker``),
with ``SUBAGENTS_FAIL_HELD_AFTER``: the task is held and shown so (``subagents check``'s
``retrying:`` line, the ``subagents_tasks_held`` metric), then given up: it fails with
the bug's error, and its command never ran.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

from durable_subagents import SubagentClient, TaskStatus
from durable_subagents.config import Settings
from durable_subagents.testing import free_port

from ..helpers import CEILING, eventually
from ..helpers.cli import _env, arun, ok
from ..helpers.tasks import script

ROOT = Path(__file__).resolve().parents[2]


async def test_a_held_task_fails_once_its_grace_period_is_over(
    client: SubagentClient, settings: Settings, workspace: Path, tmp_path: Path
) -> None:
    assert settings.blob_dir is not None
    port = free_port()
    log = tmp_path / "faulty.log"
    with log.open("wb") as out:
        faulty = subprocess.Popen(
            [sys.executable, "-m", "tests.faulty_cli_worker", "--address", settings.address,
             "--task-queue", settings.task_queue, "--workspace", str(workspace),
             "--metrics-port", str(port), "--sticky-queue-timeout", "1"],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={
                **os.environ,
                "SUBAGENTS_BLOB_DIR": str(settings.blob_dir),
                "SUBAGENTS_DATA_DIR": str(tmp_path / "faulty-data"),
                "SUBAGENTS_FAIL_HELD_AFTER": "4",
            },
        )  # fmt: skip
    try:
        model = script(
            {"tool_calls": [{"name": "bash", "arguments": {"command": "echo one >> side.txt"}}]},
            {"text": "done"},
        )
        task_id = await client.spawn_task("general", "x", model=model)

        async def held() -> bool:
            return "planted bug" in ((await client.check_task(task_id)).retrying or "")

        await eventually(held, "the task to be held")
        env = _env(
            tmp_path, TEMPORAL_ADDRESS=settings.address, SUBAGENTS_TASK_QUEUE=settings.task_queue
        )
        shown = ok(await arun("check", task_id, env=env)).out
        assert "retrying: workflow task, attempt" in shown and "planted bug" in shown, shown

        def held_count() -> float:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                text = r.read().decode()
            rows = [line for line in text.splitlines() if line.startswith("subagents_tasks_held")]
            return sum(float(row.rsplit(" ", 1)[1]) for row in rows)

        async def counted() -> bool:
            return await asyncio.to_thread(held_count) >= 1

        await eventually(counted, "the held metric to count the task")
        info = await client.check_task(task_id, wait=True, timeout=CEILING)
    finally:
        faulty.kill()
        faulty.wait(30)
    assert info.status == TaskStatus.FAILED, info
    assert info.error is not None
    assert "SUBAGENTS_FAIL_HELD_AFTER (4 s)" in info.error, info.error
    assert "planted bug: the verdict of a bash call cannot be taken" in info.error
    assert not (workspace / "side.txt").exists()
    assert "it fails at its next attempt" in log.read_text(errors="replace")
