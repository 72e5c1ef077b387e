"""Processes seen from the host: a command's pid, waiting for one."""

from __future__ import annotations

import asyncio
import io
import os
import secrets
import time
from pathlib import Path

from bench.bench_faults import WorkerProcess
from durable_subagents.config import Settings

from . import CEILING


async def _wait_ready(task: asyncio.Task[None], out: io.StringIO) -> str:
    deadline = time.monotonic() + CEILING
    while "Ctrl-C to stop" not in out.getvalue():
        assert not task.done(), out.getvalue()
        assert time.monotonic() < deadline, out.getvalue()
        await asyncio.sleep(0.05)
    return out.getvalue()


def processes_matching(text: str) -> list[int]:
    """PIDs whose command line starts with ``text`` (seen from the host PID namespace).

    The command itself: not the sandbox (``bwrap ... bash -c sleep 3907``) or the shell
    whose arguments hold it, which would count each command two or three times.
    """
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if cmdline.startswith(text):
            pids.append(int(entry.name))
    return pids


def unique_sleep(seconds: int) -> str:
    """A ``sleep`` of about ``seconds`` whose command line no other test's command starts with.

    A command's writes reach the workspace only once it has ended, so a test knows it
    runs by its process: ``processes_matching(unique_sleep(...))`` counts this test's
    commands alone, beside other xdist processes and other checkouts running the same
    test on the machine.
    """
    return f"sleep {seconds}.{secrets.randbelow(10**6):06d}"


async def wait_for(predicate, timeout: float = CEILING, what: str = "condition") -> None:  # type: ignore[no-untyped-def]
    """Until ``predicate()``: an outcome, bounded only by ``CEILING`` (see ``helpers``)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


def worker_process(
    settings: Settings, workspace: Path, log: Path, env: dict[str, str]
) -> WorkerProcess:
    """A ``subagents worker`` subprocess on ``settings``' server, queue and blob store,
    giving up a task's sticky queue after a second (so another worker takes it on)."""
    assert settings.blob_dir is not None
    return WorkerProcess(
        address=settings.address,
        namespace=settings.namespace,
        task_queue=settings.task_queue,
        workspace=workspace,
        blob_dir=settings.blob_dir,
        log=log,
        env=env,
        args=["--sticky-queue-timeout", "1"],
    )


def connected_to(pid: int, port: int) -> bool:
    """Whether process ``pid`` holds an established TCP connection to local ``port``."""
    try:
        links = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
    except OSError:
        return False
    inodes = {link[8:-1] for link in links if link.startswith("socket:[")}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for row in f.read().splitlines()[1:]:
                fields = row.split()
                remote_port = int(fields[2].rsplit(":", 1)[1], 16)
                if fields[3] == "01" and remote_port == port and fields[9] in inodes:
                    return True
    return False
