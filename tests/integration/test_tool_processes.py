"""The file tools run in processes of their own: limits, crashes, cancel, users, leaks.

Each call is a child of the worker's fork server. These tests check what the worker
and the model see when a child burns CPU, runs out of memory, crashes or is cancelled,
that a child can run as another user, and that no descriptor, zombie or process is
left behind, even when the worker is killed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from temporalio.client import Client

from durable_subagents import SubagentClient, TaskStatus, ToolLimits
from durable_subagents.config import Settings
from durable_subagents.tools import ToolContext, ToolError, grep, read_file, write_file
from durable_subagents.tools import _processes as processes
from durable_subagents.tools._processes import (
    fork_server,
    running_calls,
    stop_fork_server,
)
from durable_subagents.worker import create_worker

from ..forked_tools import misbehave
from ..helpers import CEILING
from ..helpers.missing import missing
from ..helpers.tasks import script

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


def context(root: Path, task_id: str = "task-1", **kwargs: object) -> ToolContext:
    return ToolContext(workspace=root, task_id=task_id, **kwargs)  # type: ignore[arg-type]


async def _until(predicate: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


def alive(pid: int) -> bool:
    """Whether ``pid`` is a process that has not exited (a zombie has)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def children(pid: int) -> list[int]:
    """Every process whose parent is ``pid``, zombies included."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(entry.name))
    return found


def big_files(root: Path, count: int = 8) -> None:
    """Files a search needs seconds of CPU for (each under grep's 10 MB cap)."""
    for i in range(count):
        (root / f"big{i}.txt").write_text("a line of text that never matches\n" * 280_000)


# ---------------------------------------------------------------- limits


async def test_a_cpu_burning_search_is_stopped_by_its_cpu_limit(ws: Path) -> None:
    big_files(ws)
    ctx = context(ws, "burner", limits=ToolLimits(cpu_seconds=1))
    with pytest.raises(ToolError) as stopped:
        await grep.run(ctx, {"pattern": "needle"})
    assert str(stopped.value) == (
        "grep ran over its 1 s CPU-time limit and was stopped; narrow the path or pattern"
    )
    assert not running_calls("burner")
    # the next call of the task runs as usual
    (ws / "small.txt").write_text("needle\n")
    assert await grep.run(ctx, {"pattern": "needle", "path": "small.txt"}) == "small.txt:1: needle"


async def test_a_call_gets_its_limits_and_a_low_priority_once_it_burns_cpu(ws: Path) -> None:
    limits = ToolLimits(cpu_seconds=30, memory_mb=512, file_size_mb=3, open_files=64)
    ctx = context(ws, limits=limits, time_limit=7.5)
    got = json.loads(await misbehave.run(ctx, {"how": "whoami"}))
    assert got["cpu"][0] == 8  # the time limit caps the CPU limit, counted from the call
    assert got["data"] == [512 << 20, 512 << 20]
    assert got["fsize"] == [3 << 20, 3 << 20]
    assert got["nofile"] == [64, 64]
    assert (got["uid"], got["gid"]) == (os.getuid(), os.getgid())  # no user given: as is


async def test_a_call_past_its_first_cpu_runs_at_idle_priority(ws: Path) -> None:
    """A read answers at the worker's priority; a call that burns CPU drops to idle
    priority (it gives way the moment the worker or another task wakes up)."""
    quick = await misbehave.run(context(ws, "quick"), {"how": "policy"})
    assert int(quick) == os.SCHED_OTHER
    burnt = await misbehave.run(context(ws, "burner"), {"how": "burn"})
    assert int(burnt) == os.SCHED_IDLE


async def test_a_tasks_parallel_calls_buy_it_no_more_cpu(
    ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Of a task's calls running at once, one has the worker's priority and the rest
    start at idle priority; another task's call is not held back by them."""
    monkeypatch.setattr(processes, "TASK_PARALLEL", 4)
    calls = [misbehave.run(context(ws, "many"), {"how": "policy"}) for _ in range(4)]
    calls.append(misbehave.run(context(ws, "other"), {"how": "policy"}))
    *mine, other = [int(p) for p in await asyncio.gather(*calls)]
    assert sorted(mine) == [os.SCHED_OTHER, *[os.SCHED_IDLE] * 3]
    assert other == os.SCHED_OTHER


async def test_a_task_runs_at_most_its_share_of_calls_at_once(
    ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A task's calls past ``TASK_PARALLEL`` wait their turn (eight searches of one
    task take no more of the machine than its share), while another task's call runs
    at once."""
    monkeypatch.setattr(processes, "TASK_PARALLEL", 1)
    most: list[int] = []

    async def sample() -> None:
        while True:
            most.append(len(running_calls("many")))
            await asyncio.sleep(0.02)

    sampler = asyncio.create_task(sample())
    started = time.monotonic()
    try:
        mine = [misbehave.run(context(ws, "many"), {"how": "policy"}) for _ in range(3)]
        other = asyncio.ensure_future(misbehave.run(context(ws, "other"), {"how": "policy"}))
        await asyncio.gather(*mine)
        elapsed = time.monotonic() - started
        assert other.done()  # it ran beside them, not after them
        await other
    finally:
        sampler.cancel()
    assert max(most) == 1, most
    assert elapsed >= 1.5  # three half-second calls, one after another


async def test_a_call_that_never_got_its_turn_says_so(
    ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(processes, "TASK_PARALLEL", 1)
    first = asyncio.ensure_future(misbehave.run(context(ws, "queue"), {"how": "policy"}))
    await _until(lambda: running_calls("queue"), CEILING, "the first call")
    with pytest.raises(ToolError) as late:
        await read_file.run(context(ws, "queue", time_limit=0.2), {"path": "x"})
    assert str(late.value) == (
        "read_file did not start within its 0.2 s time limit: this task's other file-tool "
        "calls ran first (1 at a time); ask for fewer at once, or narrower ones"
    )
    await first


async def test_a_call_over_its_memory_limit_gets_a_tool_error(ws: Path) -> None:
    ctx = context(ws, limits=ToolLimits(memory_mb=512))
    with pytest.raises(ToolError) as failed:
        await misbehave.run(ctx, {"how": "memory"})
    assert str(failed.value) == (
        "misbehave ran out of its 512 MiB memory limit and was stopped; narrow the path or pattern"
    )


@pytest.mark.parametrize(
    ("how", "message"),
    [
        ("segv", "misbehave failed: its process was killed by SIGSEGV before it answered"),
        ("exit", "misbehave failed: its process exited with status 3 before it answered"),
        ("raise", "misbehave failed: ValueError: a bug in the tool"),
    ],
)
async def test_a_crashed_call_becomes_a_clear_tool_error(ws: Path, how: str, message: str) -> None:
    with pytest.raises(ToolError) as failed:
        await misbehave.run(context(ws), {"how": how})
    assert str(failed.value).startswith(message), failed.value
    (ws / "f.txt").write_text("still here\n")  # the server is unharmed
    assert "still here" in await read_file.run(context(ws), {"path": "f.txt"})


async def test_a_call_over_its_time_limit_is_killed(ws: Path) -> None:
    with pytest.raises(ToolError) as stopped:
        await misbehave.run(context(ws, "slow", time_limit=0.5), {"how": "sleep"})
    assert str(stopped.value) == (
        "misbehave ran over its 0.5 s time limit and was stopped; narrow the path or pattern"
    )
    pid = int((ws / "sleeping").read_text())
    assert not alive(pid) and not running_calls("slow")


# ---------------------------------------------------------------- cancel


async def test_cancelling_a_task_mid_grep_kills_its_process(
    client: SubagentClient, temporal_client: Client, settings: Settings
) -> None:
    workspace = settings.workspace
    assert workspace is not None
    big_files(workspace, count=40)
    async with create_worker(temporal_client, settings):
        task_id = await client.spawn_task(
            "explore",
            "x",
            model=script(
                {"tool_calls": [{"name": "grep", "arguments": {"pattern": "needle"}}]},
                {"text": "done"},
            ),
        )
        await _until(lambda: running_calls(task_id), CEILING, "the search to start")
        pids = running_calls(task_id)
        assert all(alive(pid) for pid in pids)
        info = await client.cancel_task(task_id, timeout=CEILING)
        assert info.status == TaskStatus.CANCELLED
        # Cancel waits for the activity, which waits for its process to be reaped.
        assert not any(alive(pid) for pid in pids)
        assert not running_calls(task_id)


async def test_a_cancelled_call_kills_its_process_at_once(ws: Path) -> None:
    call = asyncio.create_task(misbehave.run(context(ws, "cancelled"), {"how": "sleep"}))
    await _until(lambda: (ws / "sleeping").exists(), CEILING, "the call to start")
    pid = int((ws / "sleeping").read_text())
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert not alive(pid) and not running_calls("cancelled")


# ---------------------------------------------------------------- users


@pytest.fixture
def shared_ws() -> Iterator[Path]:
    """A workspace every user can reach and write (a test's tmp_path is root's alone)."""
    root = Path(tempfile.mkdtemp(prefix="subagents-users-"))
    root.chmod(0o777)
    try:
        yield root
    finally:
        shutil.rmtree(root)


@pytest.mark.skipif(os.geteuid() != 0, reason=missing("root: only a root worker can switch users"))
async def test_a_root_worker_runs_the_file_tools_as_the_user_it_is_given(shared_ws: Path) -> None:
    (shared_ws / "private.txt").write_text("root only\n")
    (shared_ws / "private.txt").chmod(0o600)
    ctx = context(shared_ws, run_as=(4321, 4322))
    assert await write_file.run(ctx, {"path": "made.txt", "content": "x"}) == (
        "wrote 1 bytes to made.txt"
    )
    made = (shared_ws / "made.txt").stat()
    assert (made.st_uid, made.st_gid) == (4321, 4322)
    with pytest.raises(ToolError, match=r"^cannot read 'private.txt': Permission denied$"):
        await read_file.run(ctx, {"path": "private.txt"})
    got = json.loads(await misbehave.run(ctx, {"how": "whoami"}))
    assert (got["uid"], got["gid"], got["groups"]) == (4321, 4322, [])
    # the switch cleared the signal that kills it with the server: it is set again
    assert got["death_signal"] == signal.SIGKILL
    # a process serves one user: other tasks' calls get the process of their own user
    for task, user in (("task-2", (4323, 4323)), ("task-3", (4321, 4322))):
        ctx = context(shared_ws, task, run_as=user)
        got = json.loads(await misbehave.run(ctx, {"how": "whoami"}))
        assert (got["uid"], got["gid"]) == user
    # without a user, calls stay the worker's
    await write_file.run(context(shared_ws), {"path": "root.txt", "content": "x"})
    assert (shared_ws / "root.txt").stat().st_uid == 0


@pytest.mark.skipif(os.geteuid() == 0, reason="root may switch users")
async def test_a_worker_that_is_not_root_refuses_to_switch_users(ws: Path) -> None:
    with pytest.raises(ToolError, match=r"only a worker running as root can switch users"):
        ctx = context(ws, run_as=(4321, 4321))
        await write_file.run(ctx, {"path": "made.txt", "content": "x"})
    assert not (ws / "made.txt").exists()


# ---------------------------------------------------------------- leaks


def open_now(held: set[int]) -> set[tuple[int, str]]:
    """This process's open descriptors but ``held``, each with what it points at."""
    found = set()
    for name in os.listdir("/proc/self/fd"):
        if int(name) not in held:
            with contextlib.suppress(OSError):  # the listing's own, closed since
                found.add((int(name), os.readlink(f"/proc/self/fd/{name}")))
    return found


async def test_calls_reuse_a_process_of_their_limits_and_nothing_is_left_behind(
    ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (ws / "f.txt").write_text("hello\n")
    await read_file.run(context(ws, "reader"), {"path": "f.txt"})  # the server runs
    server = fork_server()

    async def settled() -> set[tuple[int, str]]:
        """Descriptors open once the next spare is here, beside the children's sockets.

        Each with what it points at: other tests' connections may close meanwhile; what
        must not happen is one of this test's left open.
        """
        await _until(lambda: server.ready == 1, 10, "the next spare")
        return open_now(server.held)

    before = await settled()
    # one process serves the calls of every task with the same limits, one at a time,
    # so a turn's read forks nothing; other limits (set once per child) get their own
    # (limits of this test's own, as other tests' children may be idle in this process)
    mine = ToolLimits(open_files=77)
    earlier = set(server.idle())
    await read_file.run(context(ws, "task-0", limits=mine), {"path": "f.txt"})
    first = set(server.idle()) - earlier
    for n in range(20):
        await read_file.run(context(ws, f"task-{n % 3}", limits=mine), {"path": "f.txt"})
    assert set(server.idle()) - earlier == first and len(first) == 1
    other = context(ws, "task-0", limits=ToolLimits(open_files=78))
    await read_file.run(other, {"path": "f.txt"})
    assert len(set(server.idle()) - earlier) == 2 and first <= set(server.idle())
    # crashes, cancels and timeouts kill their process
    (pid,) = first
    for how in ("segv", "raise", "exit"):
        with pytest.raises(ToolError):
            await misbehave.run(context(ws, "reader", limits=mine), {"how": how})
    assert pid not in server.idle() and not alive(pid)
    for _ in range(3):
        call = asyncio.create_task(misbehave.run(context(ws, "reader"), {"how": "sleep"}))
        await asyncio.sleep(0.2)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
    with pytest.raises(ToolError, match="time limit"):
        await misbehave.run(context(ws, "reader", time_limit=0.2), {"how": "sleep"})
    assert not await settled() - before
    # no zombie: every child is the spare or kept idle; idle ones go after a while
    kept = children(server.pid)
    assert len(kept) == len(server.idle()) + server.ready and all(alive(p) for p in kept)
    monkeypatch.setattr(processes, "IDLE_SECONDS", 0.0)
    idle = server.idle()
    await _until(lambda: not server.idle(), 10, "the idle children to go")
    await _until(lambda: not any(alive(pid) for pid in idle), 10, "them to exit")
    assert not await settled() - before
    spare = children(server.pid)[0]

    running = asyncio.create_task(misbehave.run(context(ws, "last"), {"how": "sleep"}))
    await _until(lambda: running_calls("last"), 10, "the call to start")
    last = running_calls("last")[0]
    control = server._control.fileno()
    await asyncio.to_thread(stop_fork_server)
    with pytest.raises(ToolError, match=r"process server stopped"):
        await running
    assert not any(alive(pid) for pid in (server.pid, spare, last))
    now = {fd for fd, _ in await asyncio.to_thread(open_now, set())}
    assert control not in now and not now - {fd for fd, _ in before}  # all of it closed
    assert "hello" in await read_file.run(context(ws), {"path": "f.txt"})  # starts again


WORKER = """
import asyncio, json, sys
from pathlib import Path
from durable_subagents.tools import ToolContext
from durable_subagents.tools._processes import fork_server, running_calls
from tests.forked_tools import misbehave

async def main():
    ctx = ToolContext(workspace=Path(sys.argv[1]), task_id="t")
    call = asyncio.create_task(misbehave.run(ctx, {"how": "sleep"}))
    while not running_calls("t"):
        await asyncio.sleep(0.05)
    print(json.dumps(fork_server().pid), flush=True)
    await call

asyncio.run(main())
"""


async def test_a_killed_worker_leaves_no_file_tool_process(ws: Path) -> None:
    worker = await asyncio.create_subprocess_exec(
        sys.executable, "-c", WORKER, str(ws), cwd=REPO, stdout=subprocess.PIPE
    )
    try:
        assert worker.stdout is not None
        line = await asyncio.wait_for(worker.stdout.readline(), 60)
        server = json.loads(line)
        # the server, the call's child and the spare forked for the next call
        await _until(lambda: len(children(server)) == 2, CEILING, "the spare")
        processes = [server, *children(server)]
        os.kill(worker.pid, signal.SIGKILL)
        await worker.wait()
        await _until(lambda: not any(alive(p) for p in processes), 10, "them to end")
    finally:
        if worker.returncode is None:
            worker.kill()
            await worker.wait()


async def test_a_process_shared_across_tasks_keeps_each_call_in_its_own_workspace(
    tmp_path: Path,
) -> None:
    """A hostile model in one task, served by the process that just read another task's
    secret, asks for that secret by a relative path, an absolute one and a symlink: each
    call is confined to its own task's workspace, whatever the process served before."""
    mine, theirs = tmp_path / "mine", tmp_path / "theirs"
    mine.mkdir()
    theirs.mkdir()
    (theirs / "secret.txt").write_text("their secret\n")
    (mine / "link").symlink_to(theirs / "secret.txt")
    limits = ToolLimits(open_files=79)  # this test's own processes
    assert "their secret" in await read_file.run(
        context(theirs, "victim", limits=limits), {"path": "secret.txt"}
    )
    served = set(fork_server().idle())
    attacker = context(mine, "attacker", limits=limits)
    for path in ("../theirs/secret.txt", str(theirs / "secret.txt"), "link"):
        with pytest.raises(ToolError) as refused:
            await read_file.run(attacker, {"path": path})
        assert "their secret" not in str(refused.value)
    out = await grep.run(attacker, {"pattern": "their secret", "path": "."})
    assert out.startswith("no matches"), out  # the link's target is not searched
    assert set(fork_server().idle()) & served  # the victim's process served the attacker
