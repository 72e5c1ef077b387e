"""The built-in tools in the process sandbox, and their budgets under heavy ignore files."""

from __future__ import annotations

import asyncio
import gc
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from durable_subagents.tools import (
    SandboxUnavailable,
    ToolContext,
    ToolError,
    bash,
    detect_sandbox,
    grep,
    list_files,
    spawn_sandboxed,
    tool,
)
from durable_subagents.tools import _sandbox_host as sandbox_host
from durable_subagents.tools._bash import truncate_middle

from ..helpers import CEILING
from ..helpers.tasks import give_to_tool_user

REPO = Path(__file__).resolve().parents[2]
MODES = ["bwrap", "none"]


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return give_to_tool_user(root)


def context(root: Path, sandbox: str = "auto", **kwargs: Any) -> ToolContext:
    return ToolContext(workspace=root, task_id="task-1", sandbox=sandbox, **kwargs)


def require(mode: str) -> None:
    try:
        detect_sandbox(mode)
    except SandboxUnavailable:
        pytest.skip(f"sandbox {mode} is not available here")


def test_detect_sandbox() -> None:
    assert detect_sandbox("auto") == "bwrap"  # the bundled bwrap works on Linux
    assert detect_sandbox("none") == "none"
    with pytest.raises(ValueError, match=r"unknown sandbox mode 'docker'"):
        detect_sandbox("docker")
    with pytest.raises(ValueError, match=r"unshare sandbox was removed"):
        detect_sandbox("unshare")


async def test_an_abandoned_call_that_fails_later_logs_nothing(tmp_path: Path) -> None:
    """The awaiter is cancelled; the thread then raises: nobody reads that error, and
    asyncio must not log "Future exception was never retrieved" for it."""
    release = threading.Event()

    @tool
    def slow(ctx: ToolContext) -> str:
        """Wait, then fail."""
        release.wait(10)
        raise ToolError("failed after its caller left")

    loop = asyncio.get_running_loop()
    logged: list[dict[str, Any]] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: logged.append(context))
    try:
        call = asyncio.create_task(slow.run(context(tmp_path), {}))
        await asyncio.sleep(0.2)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        release.set()
        for _ in range(50):  # the thread settles the future through the loop
            await asyncio.sleep(0.02)
        del call
        gc.collect()
        await asyncio.sleep(0.05)
    finally:
        loop.set_exception_handler(previous)
    # Only this call's error counts: the gc may also finalize what earlier tests of the
    # process left behind (an aiohttp session says "Unclosed client session").
    ours = [c for c in logged if "never retrieved" in str(c.get("message"))]
    assert ours == [] and not any(isinstance(c.get("exception"), ToolError) for c in logged)


# ---------------------------------------------------------------- ignored paths


def write_tree(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


async def test_huge_and_pathological_ignore_files_stay_bounded(ws: Path) -> None:
    from durable_subagents.tools import _ignore

    padding = "# padding line\n" * (_ignore.MAX_IGNORE_FILE_BYTES // 15 + 1000)
    many = "".join(f"f{i}.txt\n" for i in range(_ignore.MAX_IGNORE_PATTERNS + 500))
    wildcards = "*a*a*a*a*a*a*a*a*a*a*a*a*b\n" * 500
    write_tree(
        ws,
        {
            "big/.gitignore": f"*.early\n{padding}*.late\n",  # only the first MiB is read
            "big/x.early": "",
            "big/x.late": "",
            "many/.gitignore": many,
            "many/f0.txt": "",
            "many/f1999.txt": "",
            "many/f2000.txt": "",
            "odd/.gitignore": "!\n[\n\\\n[z-a]\n" + wildcards + "*.tmp\n",
            "odd/x.tmp": "",
            **{f"odd/{'a' * 200}{i}": "" for i in range(50)},
        },
    )
    ctx = context(ws)
    start = time.monotonic()
    listed = (await list_files.run(ctx, {})).splitlines()
    assert time.monotonic() - start < 10
    assert "big/x.late" in listed and "big/x.early" not in listed
    assert "many/f2000.txt" in listed and "many/f1999.txt" not in listed
    assert "many/f0.txt" not in listed
    assert f"odd/{'a' * 200}0" in listed and "odd/x.tmp" not in listed
    # what was left out is named, not silently dropped
    assert listed[-1] == (
        "[... ignore files not fully applied (over the bounds on their size, patterns or "
        "compile time): big/.gitignore, many/.gitignore; results may include what they "
        "ignore ...]"
    )


async def test_a_search_compiles_ignore_files_within_its_budget_and_says_what_it_left(
    ws: Path,
) -> None:
    from durable_subagents.tools import _ignore

    # Distinct wildcard patterns: the costliest to compile, and no two files alike.
    for i in range(60):
        heavy = "".join(f"{'?' * 16}{i}x{j}\n" for j in range(1300))
        write_tree(ws, {f"d{i:02}/.gitignore": f"hidden.txt\n{heavy}", f"d{i:02}/hidden.txt": ""})
    write_tree(ws, {"d00/needle.txt": "needle\n", "d59/needle.txt": "needle\n"})
    ctx = context(ws)
    found = (await grep.run(ctx, {"pattern": "needle"})).splitlines()
    assert found[:2] == ["d00/needle.txt:1: needle", "d59/needle.txt:1: needle"]
    note = found[2]
    assert note.startswith("[... ignore files not fully applied") and len(found) == 3
    # the first directories' files applied (as many as a CPU second compiles); the
    # others are named (three, and a count)
    left = int(note.split(" and ")[1].split(" more")[0]) + 3
    assert 0 < left < 60 and "d00/" not in note
    listed = (await list_files.run(ctx, {"pattern": "**/hidden.txt"})).splitlines()
    assert "d00/hidden.txt" not in listed and "d59/hidden.txt" in listed
    assert listed[-1].startswith("[... ignore files not fully applied")
    # a search of one of them has the budget for it: its rules apply, with no note
    assert (await list_files.run(ctx, {"path": "d59"})).splitlines() == [
        "d59/.gitignore",
        "d59/needle.txt",
    ]
    assert _ignore.MAX_SEARCH_COMPILE_SECONDS == 1.0


async def test_heavy_ignore_files_neither_stall_the_worker_nor_pile_up(ws: Path) -> None:
    from durable_subagents.tools import _ignore

    heavy = "".join(f"{'?' * 16}{i}\n" for i in range(_ignore.MAX_IGNORE_PATTERNS))
    level = ws
    for depth in range(30):
        level = level / f"d{depth}"
        level.mkdir()
        # A pattern past the budget of patterns in force at once is not used.
        (level / ".gitignore").write_text(f"hidden{depth}.txt\n{heavy}")
        (level / f"hidden{depth}.txt").write_text("")
    ctx = context(ws)
    lags: list[float] = []
    listing = asyncio.create_task(list_files.run(ctx, {"pattern": "**/hidden*"}))
    while not listing.done():
        before = time.monotonic()
        await asyncio.sleep(0.005)
        lags.append(time.monotonic() - before - 0.005)
    listed = (await listing).splitlines()
    assert "d0/hidden0.txt" not in listed  # the first levels' rules apply...
    assert any(p.endswith("/d29/hidden29.txt") for p in listed)  # ...deeper ones fit no budget
    assert max(lags) < 0.2, max(lags)  # the event loop kept running throughout


# ---------------------------------------------------------------- bash


async def test_bash_output_and_exit_code(ws: Path) -> None:
    ctx = context(ws)
    assert await bash.run(ctx, {"command": "pwd; cat; echo err >&2"}) == f"{ws}\nerr\n"
    assert await bash.run(ctx, {"command": "echo -n out; exit 3"}) == "out\n[exit code 3]"
    assert await bash.run(ctx, {"command": "exit 1"}) == "[exit code 1]"


async def test_bash_truncates_long_output(ws: Path) -> None:
    out = await bash.run(context(ws), {"command": "printf 'a%.0s' $(seq 20000); seq 5000"})
    assert out.startswith("a" * 15_000 + "\n[... ")
    assert out.endswith("4999\n5000\n")
    cut = len("a" * 20000) + sum(len(f"{i}\n") for i in range(1, 5001)) - 30_000
    assert f"\n[... {cut} characters truncated ...]\n" in out
    assert truncate_middle("abcdef", 4) == "ab\n[... 2 characters truncated ...]\nef"


async def test_bash_timeout_keeps_partial_output(ws: Path) -> None:
    start = time.monotonic()
    with pytest.raises(ToolError) as err:
        await bash.run(context(ws), {"command": "echo started; sleep 30", "timeout": 0.5})
    assert str(err.value) == "command timed out after 0.5s\nstarted\n"
    assert time.monotonic() - start < 3
    with pytest.raises(ToolError, match=r"timeout must be a positive"):
        await bash.run(context(ws), {"command": "true", "timeout": 0})


async def test_bash_reports_liveness_and_sees_only_its_environment(
    ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-hidden")
    monkeypatch.setenv("HARMLESS_SETTING", "worker-only")
    calls: list[int] = []
    ctx = context(ws, on_output=lambda: calls.append(1), env={"GIVEN": "visible"})
    out = await bash.run(
        ctx, {"command": 'echo "[$OPENAI_API_KEY][$HARMLESS_SETTING][$GIVEN][$HOME]"'}
    )
    assert out == "[][][visible][/tmp/home]\n"
    assert calls


@pytest.mark.parametrize("mode", MODES)
async def test_bash_in_each_mode_stops_background_jobs(ws: Path, mode: str) -> None:
    require(mode)
    sleeper = ["sleep", unique(2001)]
    out = await bash.run(context(ws, mode), {"command": f"{' '.join(sleeper)} & echo done"})
    assert out == "done\n"
    await wait_gone([sleeper])


# ---------------------------------------------------------------- the sandbox


def unique(seconds: int) -> str:
    """A sleep duration no other test (or run) uses, to find exactly our processes."""
    return f"{seconds}.{secrets.randbelow(10**6):06d}"


def running(argvs: list[list[str]]) -> list[list[str]]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            raw = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        argv = [part.decode(errors="replace") for part in raw.split(b"\0")[:-1]]
        if argv in argvs:
            found.append(argv)
    return found


async def wait_present(argvs: list[list[str]], within: float = CEILING) -> None:
    deadline = time.monotonic() + within
    while len(running(argvs)) < len(argvs):
        assert time.monotonic() < deadline, f"never started: {argvs}"
        await asyncio.sleep(0.02)


async def wait_gone(argvs: list[list[str]], within: float = CEILING) -> None:
    deadline = time.monotonic() + within
    while left := running(argvs):
        assert time.monotonic() < deadline, f"still running: {left}"
        await asyncio.sleep(0.02)


async def test_no_sandbox_refuses_commands_instead_of_running_on_the_host(
    ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sandbox_host, "_bwrap", {"exe": None})
    monkeypatch.setattr(
        sandbox_host, "_problems", ["bwrap: No permissions to create new namespace"]
    )
    with pytest.raises(SandboxUnavailable, match=r"SUBAGENTS_TOOL_SANDBOX=none"):
        detect_sandbox("auto")
    marker = ws / "ran"
    for mode in ("auto", "bwrap"):
        with pytest.raises(ToolError, match=r"bash: this worker cannot run commands: no sandbox"):
            await bash.run(context(ws, mode), {"command": f"touch {marker}"})
    assert not marker.exists()
    # Only the explicit choice runs on the host.
    assert await bash.run(context(ws, "none"), {"command": "echo host"}) == "host\n"


@pytest.mark.parametrize("mode", MODES)
async def test_cancel_kills_the_process_tree(ws: Path, mode: str) -> None:
    require(mode)
    sleepers = [["sleep", unique(3001)], ["sleep", unique(3002)]]
    command = f"{' '.join(sleepers[0])} & {' '.join(sleepers[1])}; wait"
    task = asyncio.create_task(bash.run(context(ws, mode), {"command": command}))
    await wait_present(sleepers)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await wait_gone(sleepers)


@pytest.mark.parametrize("mode", ["bwrap"])
async def test_cancel_kills_processes_that_left_the_group(ws: Path, mode: str) -> None:
    require(mode)
    sleepers = [["sleep", unique(3003)], ["sleep", unique(3004)]]
    command = f"setsid {' '.join(sleepers[0])} & {' '.join(sleepers[1])}; wait"
    task = asyncio.create_task(bash.run(context(ws, mode), {"command": command}))
    await wait_present(sleepers)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await wait_gone(sleepers)


WORKER = """
import asyncio, sys
from durable_subagents.tools import spawn_sandboxed

async def main():
    proc = await spawn_sandboxed(["bash", "-c", sys.argv[2]], cwd=sys.argv[3], mode=sys.argv[1])
    print(proc.mode, flush=True)
    await proc.wait()

asyncio.run(main())
"""


@pytest.mark.parametrize("mode", ["bwrap"])
async def test_worker_death_kills_the_process_tree(ws: Path, mode: str) -> None:
    require(mode)
    sleepers = [["sleep", unique(4001)], ["sleep", unique(4002)]]
    command = f"{' '.join(sleepers[0])} & {' '.join(sleepers[1])}; wait"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    worker = await asyncio.create_subprocess_exec(
        sys.executable, "-c", WORKER, mode, command, str(ws), stdout=subprocess.PIPE, env=env
    )
    try:
        # a fresh interpreter importing the library: slow on a busy machine
        await wait_present(sleepers)
        os.kill(worker.pid, signal.SIGKILL)
        assert await asyncio.wait_for(worker.wait(), CEILING) == -signal.SIGKILL
        assert worker.stdout is not None
        assert (await worker.stdout.read()).decode().strip() == mode
        await wait_gone(sleepers)
    finally:
        if worker.returncode is None:
            worker.kill()
            await worker.wait()


async def test_spawn_sandboxed_kill(ws: Path) -> None:
    mode = detect_sandbox("auto")
    proc = await spawn_sandboxed(["sleep", "30"], cwd=ws, mode="auto")
    assert proc.mode == mode
    proc.kill()
    assert await asyncio.wait_for(proc.wait(), CEILING) != 0
    await proc.release()


@pytest.mark.parametrize("mode", MODES)
async def test_a_cancel_while_the_command_starts_still_kills_everything(
    ws: Path, mode: str
) -> None:
    require(mode)
    for delay in (0, 0.001, 0.003, 0.01, 0.03):
        sleepers = [["sleep", unique(3005)], ["sleep", unique(3006)]]
        command = f"{' '.join(sleepers[0])} & {' '.join(sleepers[1])}; wait"
        task = asyncio.create_task(bash.run(context(ws, mode), {"command": command}))
        await asyncio.sleep(delay)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0.3)  # anything that did start has had time to show
        await wait_gone(sleepers)
        # What was prepared for it is undone too: no placeholder (.claude...) is left.
        assert not list(ws.iterdir()), sorted(p.name for p in ws.iterdir())
