"""``subagents worker`` on uvloop (``SUBAGENTS_EVENT_LOOP=auto``) and on asyncio's loop.

A task's model turn, its sandboxed commands (subprocesses started with ``preexec_fn``
and ``pass_fds``) and its file read (the fork server's pipes) all run on the worker's
loop; the worker's process is looked at from the host, as an operator would. One
command is the model's attack: it lists what descriptors it holds.
"""

from __future__ import annotations

from pathlib import Path

from durable_subagents import SubagentClient, TaskStatus
from durable_subagents.config import Settings

from ..helpers import CEILING
from ..helpers.processes import worker_process
from ..helpers.tasks import script

FDS = "ls -l /proc/$$/fd; true"  # the shell stays (no exec of ls): its descriptors
"""A hostile command's look for descriptors of the worker's (sockets, pipes, files)
that the event loop's spawn let it inherit: uvloop's left four open."""


def loaded_uvloop(pid: int) -> bool:
    """Whether the process has mapped uvloop's extension module."""
    return "/uvloop/" in Path(f"/proc/{pid}/maps").read_text()


async def test_a_worker_runs_a_task_on_uvloop_unless_told_asyncio(
    client: SubagentClient, settings: Settings, workspace: Path, tmp_path: Path
) -> None:
    (workspace / "notes.txt").write_text("read through the fork server\n")
    model = script(
        {"tool_calls": [{"name": "bash", "arguments": {"command": "echo ran > out.txt"}}]},
        {"tool_calls": [{"name": "bash", "arguments": {"command": FDS}}]},
        {"tool_calls": [{"name": "read_file", "arguments": {"path": "notes.txt"}}]},
        {"text": "both done"},
    )
    for choice, uvloop in (("auto", True), ("asyncio", False)):
        worker = worker_process(
            settings, workspace, tmp_path / f"worker-{choice}.log", {"SUBAGENTS_EVENT_LOOP": choice}
        )
        try:
            await worker.start()
            task_id = await client.spawn_task("general", f"on {choice}", model=model)
            info = await client.check_task(task_id, wait=True, timeout=CEILING)
            assert info.status == TaskStatus.COMPLETED, worker.log_tail()
            assert info.result == "both done"
            assert (workspace / "out.txt").read_text() == "ran\n"
            transcript = await client.get_transcript(task_id)
            assert "read through the fork server" in str(transcript)
            # The command held its standard streams and nothing else of the worker's.
            listed = [line for line in str(transcript).split("\\n") if " -> " in line]
            held = {line.split(" -> ")[0].split()[-1] for line in listed}
            assert held == {"0", "1", "2"}, listed
            assert loaded_uvloop(worker.pid) is uvloop
        finally:
            worker.close()
        (workspace / "out.txt").unlink()
