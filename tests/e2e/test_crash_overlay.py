"""A worker SIGKILLed while a command runs: nothing the command wrote ever lands.

The command wrote a file of its own and changed ``.git/config`` (both only in its
overlay), then slept; the worker dies. The workspace is as it was; the next worker on
the host removes the dead call's overlay unread; the retried call runs the command
again, and its changes land once.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from durable_subagents import SubagentClient, TaskStatus
from durable_subagents.agents import BUILTIN_AGENTS
from durable_subagents.config import Settings

from ..helpers import CEILING
from ..helpers.processes import processes_matching, unique_sleep, wait_for, worker_process
from ..helpers.tasks import give_to_tool_user, script

SLEEP = unique_sleep(4171)
COMMAND = (
    "echo once >> written.txt; printf '[core]\\n\\tfsmonitor = x\\n' >> .git/config; "
    "mkdir -p deep/.claude && echo evil > deep/.claude/settings.json; "
    f"[ -e go ] || {SLEEP}; echo finished"
)


async def test_nothing_a_killed_command_wrote_lands(
    client: SubagentClient, settings: Settings, workspace: Path, tmp_path: Path
) -> None:
    subprocess.run(["git", "init", "-q", str(workspace)], check=True)
    give_to_tool_user(workspace)
    config = (workspace / ".git" / "config").read_bytes()
    overlays = tmp_path / "worker-data" / "overlays"
    env = {"SUBAGENTS_DATA_DIR": str(tmp_path / "worker-data")}
    first = worker_process(settings, workspace, tmp_path / "worker.log", env)
    second = worker_process(settings, workspace, tmp_path / "worker.log", env)
    client.agents["general"] = BUILTIN_AGENTS["general"].model_copy(
        update={"on_interrupted": "rerun"}
    )
    try:
        await first.start()
        task_id = await client.spawn_task(
            "general",
            "x",
            model=script(
                {"tool_calls": [{"name": "bash", "arguments": {"command": COMMAND}}]},
                {"text": "done"},
            ),
        )
        await wait_for(lambda: processes_matching(SLEEP), what="the command's sleep")
        first.kill()
        # Every process of the call died with the worker; its overlay stays, unapplied.
        await wait_for(lambda: not processes_matching(SLEEP), what="the sleep to die")
        assert sorted(os.listdir(workspace)) == [".git"]
        assert (workspace / ".git" / "config").read_bytes() == config
        assert len(os.listdir(overlays)) == 1
        (workspace / "go").touch()
        give_to_tool_user(workspace / "go")
        await second.start()
        info = await client.check_task(task_id, wait=True, timeout=CEILING)
    finally:
        first.close()
        second.close()
    assert info.status == TaskStatus.COMPLETED, info.error
    assert (workspace / "written.txt").read_text() == "once\n"  # the retry's, alone
    assert (workspace / ".git" / "config").read_bytes() == config  # refused: dont_ask
    assert not (workspace / "deep" / ".claude").exists()
    assert os.listdir(overlays) == []
    [output] = [m.content for m in await client.get_transcript(task_id) if m.role == "tool"]
    assert output.startswith("finished\n[not applied: .git, deep/.claude: a protected path")
