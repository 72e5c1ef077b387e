"""Run a tool's command so that nothing it starts can outlive it or the worker.

A process group and ``PR_SET_PDEATHSIG`` are not enough: a backgrounded grandchild
(``sleep 300 &``) that the worker never knew about keeps running when the worker is
SIGKILLed. A PID namespace closes that gap: when the namespace's init process dies,
the kernel kills every process in the namespace. So commands run under
``bwrap --unshare-pid`` or ``unshare --pid --fork``, whose init dies with the worker.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "SANDBOX_MODES",
    "SandboxUnavailable",
    "SandboxedProcess",
    "detect_sandbox",
    "spawn_sandboxed",
]

log = logging.getLogger(__name__)

SANDBOX_MODES = ("auto", "bwrap", "unshare", "none")
"""The values ``mode`` (and ``ToolContext.sandbox``) accept."""

# The host filesystem stays visible and writable: this sandbox bounds process lifetime,
# not file access (the file tools enforce the workspace jail; filesystem isolation for
# commands is a separate, later step).
_BWRAP_FLAGS = (
    "--dev-bind",
    "/",
    "/",
    "--proc",
    "/proc",
    "--unshare-pid",
    "--die-with-parent",
    "--new-session",
)
_UNSHARE_FLAGS = ("--user", "--map-root-user", "--pid", "--fork", "--kill-child")
_UNSHARE_FLAGS_ROOT = ("--pid", "--fork", "--kill-child")
_PR_SET_PDEATHSIG = 1

_lock = threading.Lock()
_prefixes: dict[str, tuple[str, ...] | None] = {}
_resolved: dict[str, str] = {"none": "none"}
_warned_unsandboxed = False


class SandboxUnavailable(RuntimeError):
    """The sandbox mode asked for does not work on this machine."""


def _probe(command: Sequence[str]) -> bool:
    try:
        result = subprocess.run(
            [*command, "true"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    if result.returncode != 0:
        log.debug("sandbox probe %s failed: %s", command[0], result.stderr.decode(errors="replace"))
    return result.returncode == 0


def _find_prefix(mode: str) -> tuple[str, ...] | None:
    """The argv prefix that works for ``mode`` on this machine, or None."""
    if mode == "bwrap":
        exe = shutil.which("bwrap")
        if exe and _probe([exe, *_BWRAP_FLAGS, "--"]):
            return (exe, *_BWRAP_FLAGS)
        return None
    exe = shutil.which("unshare")
    if not exe:
        return None
    candidates: list[tuple[str, ...]] = [_UNSHARE_FLAGS]
    if os.geteuid() == 0:
        # Root may create PID namespaces directly; a user namespace may be forbidden
        # (containers often block it) without that mattering.
        candidates.append(_UNSHARE_FLAGS_ROOT)
    for flags in candidates:
        if _probe([exe, *flags, "--"]):
            return (exe, *flags)
    return None


def _prefix(mode: str) -> tuple[str, ...] | None:
    with _lock:
        if mode not in _prefixes:
            _prefixes[mode] = _find_prefix(mode)
        return _prefixes[mode]


def detect_sandbox(mode: str = "auto") -> str:
    """The sandbox mode that will actually be used for ``mode``.

    Probes ``bwrap`` and ``unshare`` once per process (each probe runs ``true`` under
    them) and caches the answer.

    Args:
        mode: ``bwrap`` or ``unshare`` (required: fails if it does not work), ``none``
            (a plain process group), or ``auto`` (``bwrap``, else ``unshare``, else
            ``none`` with a warning logged once).

    Returns:
        ``bwrap``, ``unshare`` or ``none``.

    Raises:
        SandboxUnavailable: ``bwrap`` or ``unshare`` was asked for and does not work.
        ValueError: ``mode`` is not one of ``SANDBOX_MODES``.
    """
    global _warned_unsandboxed
    if mode not in SANDBOX_MODES:
        raise ValueError(f"unknown sandbox mode {mode!r}; known: {', '.join(SANDBOX_MODES)}")
    if mode == "none":
        return mode
    if mode != "auto":
        if _prefix(mode) is None:
            raise SandboxUnavailable(
                f"sandbox {mode!r} does not work on this machine (is it installed, and are "
                "PID namespaces allowed?); use sandbox 'auto' to fall back"
            )
        _resolved[mode] = mode
        return mode
    for candidate in ("bwrap", "unshare"):
        if _prefix(candidate) is not None:
            _resolved[mode] = candidate
            return candidate
    _resolved[mode] = "none"
    if not _warned_unsandboxed:
        _warned_unsandboxed = True
        log.warning(
            "neither bwrap nor unshare can create a PID namespace here: tool commands run "
            "in a plain process group, and background processes they start may outlive "
            "a crashed worker (install bubblewrap to fix this)"
        )
    return "none"


def _load_prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl: Callable[..., int] = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    return prctl


_prctl = _load_prctl()


def _death_signal_preexec(parent: int) -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child receive SIGKILL when its parent dies.

    The kernel ties the death signal to the thread that forked the child; asyncio forks
    from the event loop thread, which lives as long as the worker.
    """
    prctl = _prctl
    if prctl is None:
        return None

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(137)

    return preexec


class SandboxedProcess:
    """A command started by ``spawn_sandboxed``.

    Attributes:
        process: The asyncio process (its ``stdout`` carries the merged output).
        mode: The sandbox mode actually used.
        pid: The host pid of the direct child (also its process group id).
    """

    def __init__(self, process: asyncio.subprocess.Process, mode: str) -> None:
        self.process = process
        self.mode = mode
        self.pid = process.pid

    @property
    def returncode(self) -> int | None:
        """The exit status once the direct child has exited, else None."""
        return self.process.returncode

    def kill(self) -> None:
        """SIGKILL the process group and the sandbox process: the whole tree dies.

        With a PID namespace, killing the sandbox's init takes every process in the
        namespace with it, including ones that left the process group.
        """
        # The direct child leads the group, so killpg reaches it too. Popen.kill() is
        # avoided on purpose: it reaps an exited child itself, racing asyncio's child
        # watcher, which then reports a wrong exit status.
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    async def wait(self) -> int:
        """Wait for the direct child to exit and its output pipes to close."""
        return await self.process.wait()

    async def exited(self, poll: float = 0.05) -> int:
        """Wait for the direct child to exit, even if a straggler keeps its pipes open.

        ``asyncio.subprocess.Process.wait`` also waits for the pipes to close; without a
        PID namespace a background process may hold them open indefinitely.
        """
        while self.process.returncode is None:  # noqa: ASYNC110
            await asyncio.sleep(poll)
        return self.process.returncode


def _command(mode: str, argv: Sequence[str], cwd: Path) -> list[str]:
    prefix = _prefixes.get(mode) or ()
    if mode == "bwrap":
        return [*prefix, "--chdir", str(cwd), "--", *argv]
    if mode == "unshare":
        return [*prefix, "--", *argv]
    return list(argv)


async def spawn_sandboxed(
    argv: Sequence[str],
    *,
    cwd: str | os.PathLike[str],
    mode: str = "auto",
    env: Mapping[str, str] | None = None,
    stdin: Any = subprocess.DEVNULL,
    stdout: Any = subprocess.PIPE,
    stderr: Any = subprocess.STDOUT,
) -> SandboxedProcess:
    """Start ``argv`` in its own process group, inside a PID namespace when possible.

    Args:
        argv: The command and its arguments.
        cwd: The working directory.
        mode: ``auto``, ``bwrap``, ``unshare`` or ``none`` (see ``detect_sandbox``).
        env: The environment; default: the worker's.
        stdin: What the command reads; default: nothing (``/dev/null``).
        stdout: Where its output goes; default: a pipe.
        stderr: Where its errors go; default: merged into stdout.

    Returns:
        The started process. Call ``kill()`` to stop the whole tree.

    Raises:
        SandboxUnavailable: ``mode`` names a sandbox that does not work here.
        OSError: The command could not be started.
    """
    used = _resolved.get(mode)
    if used is None:
        used = await asyncio.to_thread(detect_sandbox, mode)
    workdir = Path(cwd)
    process = await asyncio.create_subprocess_exec(
        *_command(used, argv, workdir),
        cwd=workdir,
        env=dict(env) if env is not None else None,
        stdin=stdin,
        stdout=stdout,
        stderr=stderr,
        start_new_session=True,
        preexec_fn=_death_signal_preexec(os.getpid()),
    )
    return SandboxedProcess(process, used)
