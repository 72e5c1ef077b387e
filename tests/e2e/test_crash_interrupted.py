"""A call with a side effect, cut off by its worker's death, is not run again unseen.

``charge`` appends to a ledger on the host and hangs; the worker is SIGKILLed. What the
retry does is the agent's ``on_interrupted``: ``report`` (the model reads that it was
cut off: one charge), ``rerun`` (it runs again: two), ``ask`` (a person decides: two if
approved, one if rejected). The built-in ``bash`` is cut off the same way, writing its
ledger in the workspace, where a cut-off command's writes never land; ``write_file`` is
held in flight by stopping the fork server whose child would run it.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client

from durable_subagents import AgentSpec, SubagentClient, TaskStatus
from durable_subagents.config import Settings

from ..helpers import CEILING, eventually
from ..helpers.processes import processes_matching, unique_sleep, worker_process
from ..helpers.tasks import script

ROOT = Path(__file__).resolve().parents[2]


def start(settings: Settings, workspace: Path, ledger: Path, log: Path) -> subprocess.Popen[bytes]:
    assert settings.blob_dir is not None
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.side_effect_worker",
            settings.address,
            settings.task_queue,
            str(workspace),
            str(settings.blob_dir),
            str(ledger),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=log.open("ab"),
        env={**os.environ, "SUBAGENTS_DATA_DIR": str(log.parent / "data")},
    )
    assert worker.stdout is not None and worker.stdout.readline() == b"ready\n"
    # Temporal's core writes warnings to stdout: a full pipe would stop the worker.
    threading.Thread(target=worker.stdout.read, daemon=True).start()
    return worker


async def heartbeated(temporal: Client, task_id: str, text: str) -> bool:
    """Whether a running activity of ``task_id`` has sent ``text`` in a heartbeat."""
    desc = await temporal.get_workflow_handle(task_id).describe()
    for pending in desc.raw_description.pending_activities:
        if pending.heartbeat_details.payloads:
            details = await temporal.data_converter.decode(pending.heartbeat_details.payloads)
            if text in str(details):
                return True
    return False


@pytest.mark.parametrize(
    ("mode", "decision", "charges", "told"),
    [
        ("report", None, 1, "charge was interrupted: the worker running it stopped"),
        ("rerun", None, 2, "charged 7"),
        ("ask", "approve", 2, "charged 7"),
        ("ask", "reject", 1, "charge was interrupted: the worker running it stopped"),
    ],
)
async def test_a_cut_off_side_effect_is_reported_not_silently_repeated(
    client: SubagentClient,
    settings: Settings,
    workspace: Path,
    tmp_path: Path,
    mode: str,
    decision: str | None,
    charges: int,
    told: str,
) -> None:
    ledger = tmp_path / "ledger.txt"
    client.agents["payer"] = AgentSpec(
        name="payer",
        tools=["charge"],
        permission_mode="dont_ask",
        on_interrupted=mode,  # type: ignore[arg-type]
    )
    model = script(
        {"tool_calls": [{"name": "charge", "arguments": {"amount": 7}}]}, {"text": "done"}
    )
    first = start(settings, workspace, ledger, tmp_path / "worker.log")
    second: subprocess.Popen[bytes] | None = None
    try:
        task_id = await client.spawn_task("payer", "pay", model=model)
        await eventually(lambda: ledger.exists(), "the first charge")
        first.kill()
        first.wait(30)
        second = start(settings, workspace, ledger, tmp_path / "worker.log")
        info = await client.check_task(task_id, wait=True, timeout=CEILING)
        if mode == "ask":
            assert info.status == TaskStatus.PAUSED, info
            [pending] = info.pending_approvals
            assert pending.tool_name == "run_again"
            assert pending.arguments_preview.startswith("run_again · "), pending
            if decision == "approve":
                await client.approve(task_id)
            else:
                await client.reject(task_id, reason="check the ledger first")
            info = await client.check_task(
                task_id, wait=True, timeout=CEILING, after_pause=info.pause_id
            )
    finally:
        for worker in (first, second):
            if worker is not None and worker.poll() is None:
                worker.kill()
                worker.wait(30)
    assert info.status == TaskStatus.COMPLETED, info
    assert ledger.read_text().splitlines() == ["charged 7"] * charges
    [result] = [m for m in await client.get_transcript(task_id) if m.role == "tool"]
    assert told in result.content, result.content


@pytest.mark.parametrize(("mode", "lines"), [("report", []), ("rerun", ["charged"])])
async def test_a_cut_off_command_that_writes_a_ledger_in_the_workspace(
    client: SubagentClient,
    temporal_client: Client,
    settings: Settings,
    workspace: Path,
    tmp_path: Path,
    mode: str,
    lines: list[str],
) -> None:
    """``bash`` appends to a ledger in the workspace, prints, then sleeps until its worker
    is SIGKILLed. ``report``: the command never runs again, the model reads what it
    printed, and what it wrote is dropped, as the model is told (no line); ``rerun``: it
    runs again, and its one line lands."""
    signals = tmp_path / "signals"  # a tool read path: a run after the cut does not sleep
    signals.mkdir()
    signals.chmod(0o755)
    marker = f"charged-{uuid.uuid4().hex[:8]}"
    sleeper = unique_sleep(3915)
    command = f"echo charged >> ledger.txt; echo {marker}; [ -e {signals}/go ] || {sleeper}"
    client.agents["payer"] = AgentSpec(
        name="payer",
        tools=["bash"],
        permission_mode="dont_ask",
        on_interrupted=mode,  # type: ignore[arg-type]
    )
    model = script(
        {"tool_calls": [{"name": "bash", "arguments": {"command": command}}]},
        {"text": "told: {last_tool_result}"},
    )
    env = {"SUBAGENTS_TOOL_READ_PATHS": str(signals)}
    first = worker_process(settings, workspace, tmp_path / "first.log", env)
    second = worker_process(settings, workspace, tmp_path / "second.log", env)
    try:
        await first.start()
        task_id = await client.spawn_task("payer", "pay", model=model)
        await eventually(
            lambda: heartbeated(temporal_client, task_id, marker),
            "the command's output in a heartbeat",
        )
        assert len(processes_matching(sleeper)) == 1
        first.kill()
        await eventually(lambda: not processes_matching(sleeper), "the command to die")
        (signals / "go").touch()
        await second.start()
        info = await client.check_task(task_id, wait=True, timeout=CEILING)
    finally:
        first.close()
        second.close()
    assert info.status == TaskStatus.COMPLETED, info
    ledger = workspace / "ledger.txt"
    assert (ledger.read_text().splitlines() if ledger.exists() else []) == lines
    [result] = [m for m in await client.get_transcript(task_id) if m.role == "tool"]
    if mode == "report":
        assert result.is_error, result.content
        assert "bash was interrupted" in result.content, result.content
        assert re.search(r"about \d+ s after the call began", result.content), result.content
        assert "What it changed in the workspace was dropped" in result.content, result.content
        assert f"Its output until then:\n{marker}" in result.content, result.content
    else:
        assert not result.is_error and marker in result.content, result.content


def descendants(pid: int) -> list[int]:
    """The processes below ``pid``, parents before their children."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        parent = int(stat.rpartition(")")[2].split()[1])
        children.setdefault(parent, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(0), []):
            out.append(child)
            todo.append(child)
    return out


def fork_server(pid: int) -> bool:
    """Whether ``pid`` is a worker's fork server (``tools/_forkserver.py``)."""
    try:
        return b"_forkserver import serve" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


@pytest.mark.parametrize(("mode", "content"), [("report", None), ("rerun", "charged\n")])
async def test_a_cut_off_file_write_is_reported_not_silently_repeated(
    client: SubagentClient,
    temporal_client: Client,
    settings: Settings,
    workspace: Path,
    tmp_path: Path,
    mode: str,
    content: str | None,
) -> None:
    """``write_file`` runs in a child of the worker's fork server: with the server and its
    spare child stopped (SIGSTOP), the call is sent and never answered, so it is in
    flight, heartbeating, when the worker is SIGKILLed. ``report``: it is not run again
    and the model reads that it was cut off; ``rerun``: it runs again, once."""
    client.agents["writer"] = AgentSpec(
        name="writer",
        tools=["write_file"],
        permission_mode="dont_ask",
        on_interrupted=mode,  # type: ignore[arg-type]
    )
    write = {"path": "ledger.txt", "content": "charged\n"}
    model = script(
        {"tool_calls": [{"name": "write_file", "arguments": write}]},
        {"text": "told: {last_tool_result}"},
    )
    first = worker_process(settings, workspace, tmp_path / "first.log", {})
    second = worker_process(settings, workspace, tmp_path / "second.log", {})
    stopped: list[int] = []
    try:
        await first.start()
        # The fork server starts with the worker and forks a spare child ahead.
        [server] = await eventually(
            lambda: [p for p in descendants(first.pid) if fork_server(p) and descendants(p)],
            "the fork server and its spare child",
        )
        for pid in [server, *descendants(server)]:
            os.kill(pid, signal.SIGSTOP)
            stopped.append(pid)
        task_id = await client.spawn_task("writer", "write it", model=model)
        await eventually(
            lambda: heartbeated(temporal_client, task_id, "started"),
            "the call's first heartbeat",
        )
        first.kill()
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        await second.start()
        info = await client.check_task(task_id, wait=True, timeout=CEILING)
    finally:
        first.close()
        second.close()
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    assert info.status == TaskStatus.COMPLETED, info
    ledger = workspace / "ledger.txt"
    assert (ledger.read_text() if ledger.exists() else None) == content
    [result] = [m for m in await client.get_transcript(task_id) if m.role == "tool"]
    if mode == "report":
        assert result.is_error, result.content
        assert "write_file was interrupted" in result.content, result.content
        assert re.search(r"about \d+ s after the call began", result.content), result.content
    else:
        assert not result.is_error, result.content
