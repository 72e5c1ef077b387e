"""No task can stall another: a blocked or endless tool call holds only its own task.

Each stall is played by an attacker task while a bystander task must finish on time.
"""

from __future__ import annotations

import asyncio
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.client import Client

from durable_subagents import AgentSpec, SubagentClient, TaskStatus
from durable_subagents.config import Settings
from durable_subagents.tools import ToolContext, ToolError, grep, read_file
from durable_subagents.tools._decorator import _THREADS, MAX_THREADS_PER_TASK
from durable_subagents.tools._processes import TASK_PARALLEL, running_calls
from durable_subagents.worker import create_worker
from durable_subagents.workflows._tool_calls import TOOL_CALLS_AT_ONCE

from .. import stall_worker
from ..helpers import CEILING
from ..helpers.tasks import script
from ..stall_worker import RELEASE, hang

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def released() -> Iterator[None]:
    RELEASE.clear()
    try:
        yield
    finally:
        RELEASE.set()


async def _until(predicate: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


async def test_a_blocked_call_holds_only_its_own_thread(tmp_path: Path, released: None) -> None:
    (tmp_path / "f.txt").write_text("hello\n")
    attacker = ToolContext(workspace=tmp_path, task_id="attacker")
    blocked = [
        asyncio.create_task(hang.run(attacker, {"label": str(i)}))
        for i in range(MAX_THREADS_PER_TASK)
    ]
    await _until(lambda: _THREADS.running("attacker") == MAX_THREADS_PER_TASK, CEILING, "the calls")

    # the attacker's next call waits for a thread of its own task, then gives up
    more = ToolContext(workspace=tmp_path, task_id="attacker", time_limit=0.3)
    with pytest.raises(ToolError, match="earlier calls of this task are still running"):
        await hang.run(more, {"label": "extra"})
    # a bystander's calls run at once
    bystander = ToolContext(workspace=tmp_path, task_id="bystander")
    await read_file.run(bystander, {"path": "f.txt"})  # the process's file-tool server starts
    started = time.monotonic()
    for _ in range(20):
        assert "hello" in await read_file.run(bystander, {"path": "f.txt"})
    assert time.monotonic() - started < 2

    for call in blocked:  # a cancel returns at once, even though the thread is stuck
        call.cancel()
    results = await asyncio.gather(*blocked, return_exceptions=True)
    assert all(isinstance(r, asyncio.CancelledError) for r in results)
    RELEASE.set()
    await _until(lambda: _THREADS.running("attacker") == 0, CEILING, "the threads to end")


async def test_an_endless_search_is_stopped_at_its_time_limit(tmp_path: Path) -> None:
    (tmp_path / "big.txt").write_text("a line of text\n" * 600_000)
    ctx = ToolContext(workspace=tmp_path, task_id="searcher", time_limit=0.2)
    started = time.monotonic()
    with pytest.raises(ToolError, match=r"grep ran over its 0\.2 s time limit and was stopped"):
        await grep.run(ctx, {"pattern": "no such text"})
    assert time.monotonic() - started < 1
    # its process is gone, not left to search the rest of the file
    await _until(lambda: not running_calls("searcher"), 1, "the search to stop")


async def test_a_stalled_task_leaves_other_tasks_on_time(
    client: SubagentClient, temporal_client: Client, settings: Settings, released: None
) -> None:
    workspace = settings.workspace
    assert workspace is not None
    (workspace / "notes.md").write_text("the bystander reads this\n")
    client.agents["attacker"] = AgentSpec(name="attacker", tools=None, permission_mode="dont_ask")
    calls = [
        {"name": "hang", "arguments": {"label": str(i)}} for i in range(3 * MAX_THREADS_PER_TASK)
    ]
    async with create_worker(temporal_client, settings, tools=stall_worker.registry()):
        attacker = await client.spawn_task("attacker", "x", model=script({"tool_calls": calls}))
        # six at least: as many threads as a default asyncio executor has on two cores
        await _until(
            lambda: len(list(workspace.glob("hang-*.started"))) >= 6,
            30,
            "the attacker's calls to block",
        )
        bystander = await _bystander_reads_on_time(client)
        outputs = [m.content for m in await client.get_transcript(bystander) if m.role == "tool"]
        assert all("the bystander reads this" in o for o in outputs)

        assert (await client.cancel_task(attacker)).status == TaskStatus.CANCELLED


async def _bystander_reads_on_time(client: SubagentClient, *, wait: float = CEILING) -> str:
    """A task of three ``read_file`` turns completes; its id.

    The attacker's calls block until it is cancelled, so a bystander that had to wait
    for them would never complete: completing at all is the outcome.
    """
    reads = [{"tool_calls": [{"name": "read_file", "arguments": {"path": "notes.md"}}]}] * 3
    bystander = await client.spawn_task("explore", "x", model=script(*reads, {"text": "ok"}))
    info = await client.check_task(bystander, wait=True, timeout=wait)
    assert info.status == TaskStatus.COMPLETED and info.result == "ok"
    return bystander


async def test_a_worker_with_stuck_calls_still_stops_on_ctrl_c(
    client: SubagentClient, settings: Settings, tmp_path: Path
) -> None:
    workspace = settings.workspace
    assert workspace is not None
    client.agents["attacker"] = AgentSpec(name="attacker", tools=None, permission_mode="dont_ask")
    argv = [sys.executable, "-m", "tests.stall_worker", settings.address, settings.task_queue]
    argv += [str(workspace), str(settings.resolved_blob_dir)]
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        calls = [{"name": "hang", "arguments": {"label": str(i)}} for i in range(6)]
        await client.spawn_task("attacker", "x", model=script({"tool_calls": calls}))
        await _until(
            lambda: len(list(workspace.glob("hang-*.started"))) == 6, CEILING, "the calls to block"
        )
        proc.send_signal(signal.SIGINT)
        # stops at all, though its calls never return (they would hold it forever)
        out, err = await asyncio.to_thread(proc.communicate, timeout=CEILING)
        assert proc.returncode == 0, err.decode()[-2000:]
        assert b"stopped" in out
        assert b"tool call(s) still stuck in their threads" in err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


async def test_many_slow_local_reads_leave_other_tasks_on_time(
    client: SubagentClient, temporal_client: Client, settings: Settings
) -> None:
    """Reads run as local activities, inside the attacker's workflow task: a turn of
    more slow searches than the worker has slots must not hold the bystander's reads."""
    workspace = settings.workspace
    assert workspace is not None
    (workspace / "notes.md").write_text("the bystander reads this\n")
    for i in range(3):  # each search takes seconds
        (workspace / f"big{i}.txt").write_text("no match on this line\n" * 270_000)
    searches = [{"name": "grep", "arguments": {"pattern": f"needle{i}"}} for i in range(150)]
    async with create_worker(temporal_client, settings):
        attacker = await client.spawn_task("explore", "x", model=script({"tool_calls": searches}))
        at_once = min(TOOL_CALLS_AT_ONCE, TASK_PARALLEL)  # the rest wait their turn
        await _until(lambda: len(running_calls(attacker)) == at_once, CEILING, "the searches")
        await _bystander_reads_on_time(client)
        assert (await client.cancel_task(attacker)).status == TaskStatus.CANCELLED


async def test_tool_calls_that_fill_their_slots_never_delay_another_tasks_model_turns(
    client: SubagentClient, temporal_client: Client, settings: Settings
) -> None:
    """A worker's tool calls have slots of their own: 600-second commands a
    prompt-injected task starts (its children's too) can fill those, but every other
    task's model turns still start at once."""
    from temporalio.api.enums.v1 import EventType, PendingActivityState

    from ..helpers.processes import processes_matching, unique_sleep

    small = settings.model_copy(update={"max_activities": 2, "max_tool_calls": 2})
    sleep = unique_sleep(3907)
    sleeps = [{"name": "bash", "arguments": {"command": sleep, "timeout": 600}}] * 4
    client.agents["attacker"] = AgentSpec(name="attacker", permission_mode="dont_ask")
    async with create_worker(temporal_client, small):
        attacker = await client.spawn_task(
            "attacker", "x", model=script({"tool_calls": sleeps}, {"text": "never"})
        )
        await _until(lambda: len(processes_matching(sleep)) >= 2, CEILING, "two sleeps")
        started = time.monotonic()
        bystanders = [
            await client.spawn_task("explore", f"b{i}", model=script({"text": f"ok {i}"}))
            for i in range(3)
        ]
        for i, task_id in enumerate(bystanders):
            info = await client.check_task(task_id, wait=True, timeout=CEILING)
            assert info.status == TaskStatus.COMPLETED and info.result == f"ok {i}"
        assert time.monotonic() - started < 10
        # the attacker's calls fill the tool slots: two run, two wait their turn
        assert len(processes_matching(sleep)) == 2
        desc = await temporal_client.get_workflow_handle(attacker).describe()
        assert sorted(p.state for p in desc.raw_description.pending_activities) == [
            PendingActivityState.PENDING_ACTIVITY_STATE_SCHEDULED,
            PendingActivityState.PENDING_ACTIVITY_STATE_SCHEDULED,
            PendingActivityState.PENDING_ACTIVITY_STATE_STARTED,
            PendingActivityState.PENDING_ACTIVITY_STATE_STARTED,
        ]
        queues = [
            e.activity_task_scheduled_event_attributes.task_queue.name
            async for e in temporal_client.get_workflow_handle(attacker).fetch_history_events()
            if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
            and e.activity_task_scheduled_event_attributes.activity_type.name == "run_tool"
        ]
        assert queues == [f"{settings.task_queue}-tools"] * 4
        assert (await client.cancel_task(attacker)).status == TaskStatus.CANCELLED
        await _until(lambda: not processes_matching(sleep), CEILING, "the sleeps to end")


STORM_DIRS = 300
STORM = (
    'python3 -c "import os\n'
    f"for d in range({STORM_DIRS}):\n"
    "    os.makedirs(f'storm/d{d}', exist_ok=True)\n"
    "    lines = ''.join(f'{16 * chr(63)}{d}x{i}\\n' for i in range(1300))\n"
    "    open(f'storm/d{d}/.gitignore', 'w').write(lines)\""
)
"""A tree whose ignore files are each ~31 KiB of distinct wildcard patterns (the
costliest to compile), written by the attacker's own ``bash``."""


async def _bystander_seconds(client: SubagentClient) -> float:
    """How long a three-step task (three ``read_file`` turns, then an answer) takes."""
    started = time.monotonic()
    reads = [{"tool_calls": [{"name": "read_file", "arguments": {"path": "notes.md"}}]}] * 3
    task_id = await client.spawn_task("explore", "x", model=script(*reads, {"text": "ok"}))
    info = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert info.status == TaskStatus.COMPLETED and info.result == "ok", info
    return time.monotonic() - started


async def _sample(task_id: str, into: list[int]) -> None:
    """Count ``task_id``'s file-tool processes every 50 ms, until cancelled."""
    while True:
        into.append(len(running_calls(task_id)))
        await asyncio.sleep(0.05)


ROUNDS = 1
"""Bystander runs beside the storm: one shows it does not wait (``bench_file_tools.py``
repeats them for the figure)."""


@pytest.mark.timeout(420)
async def test_an_ignore_file_storm_leaves_other_tasks_on_time(
    client: SubagentClient, temporal_client: Client, settings: Settings
) -> None:
    """The attacker writes hundreds of heavy ``.gitignore`` files, then asks for eight
    ``grep`` calls at once: at most ``TASK_PARALLEL`` of them run at a time, and a
    bystander's three-step task on the same worker finishes while they still run: it
    never waits behind them. How much the storm slows it is measured by
    ``bench/bench_file_tools.py`` (a ratio of times is no assertion on a shared
    machine); here it is printed."""
    workspace = settings.workspace
    assert workspace is not None
    (workspace / "notes.md").write_text("the bystander reads this\n")
    greps = {"tool_calls": [{"name": "grep", "arguments": {"pattern": f"n{i}"}} for i in range(8)]}
    storm = {"tool_calls": [{"name": "bash", "arguments": {"command": STORM}}]}
    quiet: list[float] = []
    loaded: list[float] = []
    searching: list[int] = []
    overlapped: list[int] = []
    """The attacker's searches still running when each bystander run ended."""
    async with create_worker(temporal_client, settings):
        await _bystander_seconds(client)  # warm up
        # The attacker's tree, and a search of it: it ends at the bound on what ignore
        # files may cost, and says so, instead of running for minutes.
        one = {"tool_calls": [{"name": "grep", "arguments": {"pattern": "needle"}}]}
        first = await client.spawn_task("general", "x", model=script(storm, one, {"text": "done"}))
        info = await client.check_task(first, wait=True, timeout=300)
        assert info.status == TaskStatus.COMPLETED, info
        outputs = [m.content for m in await client.get_transcript(first) if m.role == "tool"]
        assert len(list(workspace.glob("storm/d*/.gitignore"))) == STORM_DIRS
        assert outputs[1].startswith("no matches for 'needle' under '.'\n[... ignore files")

        for _ in range(ROUNDS):
            quiet.append(await _bystander_seconds(client))
            # one turn of searches lasts seconds, far longer than the bystander's run
            attacker = await client.spawn_task(
                "general", "x", model=script(greps, {"text": "done"})
            )
            await _until(lambda a=attacker: running_calls(a), CEILING, "the searches")
            sampler = asyncio.create_task(_sample(attacker, searching))
            try:
                loaded.append(await _bystander_seconds(client))
                overlapped.append(len(running_calls(attacker)))
            finally:
                sampler.cancel()
            # The attacker ends on its own, so the next quiet run is quiet.
            info = await client.check_task(attacker, wait=True, timeout=300)
            assert info.status == TaskStatus.COMPLETED, info
    # the attacker's searches ran all along, never more than its share at once
    assert statistics.mean(searching) >= 0.5 * min(8, TASK_PARALLEL), searching
    assert max(searching) <= TASK_PARALLEL, searching
    before, during = statistics.median(quiet), statistics.median(loaded)
    print(f"bystander: {during:.2f} s in the storm, {before:.2f} s quiet")
    assert all(overlapped), f"a bystander waited for the storm to end: {overlapped}"
