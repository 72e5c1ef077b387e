"""What a command changed, judged and applied: only what the rules allow reaches the workspace.

A command's writes wait in its overlay's upper layer (``_overlay``). When it has ended,
``land`` walks that layer and decides each entry by what it is and where it lands, at
any depth:

- under a protected path (every ``.git``, ``.claude``, ``.vscode``... and
  ``.gitmodules``; see ``agents._protected``): **held**. Depending on the agent it waits
  for a person's decision (``hold="pause"``: the entries and their bytes go back to the
  caller, which shows the change and applies it once approved), is refused
  (``hold="refuse"``), or lands like the rest (``hold="apply"``: the agent opted in);
- never: FIFOs, sockets and devices, symlinks that lead out of the workspace, anything
  in the worker's own data; set-user-ID and set-group-ID bits are dropped, and no
  extended attribute (file capabilities included) is carried over;
- the rest lands one file at a time, each in one step (renamed into place), so a
  reader never sees half a file; a hard-linked file lands as a copy per name.

An entry of the workspace whose status changed since the call began (another call, a
person) is not overwritten or removed: it is a **conflict**, named in the result.

Everything is done through descriptors: the workspace's, held since the task's step
was checked, and one per directory on the way, each opened without following a
symlink. No path is resolved by name, so a symlink swapped in anywhere cannot redirect
a write.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from durable_subagents.agents._protected import aliases, holds_protected, protected_entry
from durable_subagents.tools._land_place import (
    _DIR,
    Before,
    _lstat,
    _Place,
    _Tree,
    before_of,
    place_at,
)
from durable_subagents.tools._overlay import Entry, changes

__all__ = [
    "HELD_BYTES",
    "MAX_ENTRIES",
    "Before",
    "Held",
    "Hold",
    "Landing",
    "before_of",
    "land",
]

Hold = Literal["pause", "refuse", "apply"]
"""What becomes of changes to protected paths (see the module's docstring)."""

MAX_ENTRIES = 200_000
"""Entries of one command's upper layer that are judged; past this nothing lands."""
HELD_BYTES = 32 << 20
"""Bytes of held files one call may keep for a decision; the rest is refused."""
_LISTED = 20
"""Paths named per kind of outcome in the model's result; the rest are counted."""
_SPECIAL_BITS = stat.S_ISUID | stat.S_ISGID


@dataclass
class Held:
    """A change to a protected path, kept for a person's decision.

    Attributes:
        path: Where it lands, relative to the workspace.
        kind: ``file``, ``dir``, ``symlink`` or ``delete``.
        mode: Its permission bits (set-ID bits already dropped).
        content: A file's bytes.
        target: A symlink's target.
        before: The workspace's entry at ``path`` when it was held (None: none).
    """

    path: str
    kind: str
    mode: int = 0o644
    content: bytes | None = None
    target: str | None = None
    before: Before | None = None


@dataclass
class Landing:
    """What became of one command's changes.

    Attributes:
        applied: Paths that landed in the workspace (created, changed or removed).
        held: Changes to protected paths, kept for a decision (``hold="pause"``).
        refused: Paths that did not land, with why.
        conflicts: Paths left as they are because they changed since the call began.
        notes: What was dropped from a change that landed (set-ID bits).
        reported: Whether the tool put ``summary()`` in its result already.
    """

    applied: list[str] = field(default_factory=list)
    held: list[Held] = field(default_factory=list)
    refused: list[tuple[str, str]] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    reported: bool = False

    def summary(self) -> str:
        """Lines for the model's result about what did not land as written; "" if all did."""
        lines = []
        if self.held:
            held = _listed(sorted({h.path for h in self.held}))
            lines.append(
                f"[held for a person's decision: {held}: protected paths, whose files "
                "git, editors, shells or agents run. They are not in the workspace; the "
                "decision follows in this call's result]"
            )
        reasons: dict[str, list[str]] = {}
        for path, why in self.refused:
            reasons.setdefault(why, []).append(path)
        for why, paths in reasons.items():
            lines.append(f"[not applied: {_listed(paths)}: {why}]")
        if self.conflicts:
            lines.append(
                f"[not applied: {_listed(self.conflicts)}: changed in the workspace while "
                "the command ran (by a person or another call); kept as it is now. Look at "
                "it again, then change it with edit_file or run the command again]"
            )
        lines += self.notes[:_LISTED]
        return "\n".join(lines)


def _listed(paths: Sequence[str]) -> str:
    shown = ", ".join(paths[:_LISTED])
    rest = len(paths) - _LISTED
    return f"{shown} and {rest} more" if rest > 0 else shown


# ---------------------------------------------------------------- judging


def link_inside(parts: tuple[str, ...], target: str, workspace: str) -> bool:
    """Whether symlink ``parts`` -> ``target`` stays inside the workspace, whatever follows.

    A relative target may climb with ``..`` (never above the workspace's top), then go
    down by names only; an absolute one must name a path inside the workspace, down by
    names only. Every symlink that lands obeys this, so one followed from inside, through
    any others, stays inside: a ``..`` after a name (``lib/..``) could climb out of where
    a symlink named ``lib`` leads, and is refused.
    """
    if not target or "\0" in target:
        return False
    if target.startswith("/"):
        root = workspace.rstrip("/") + "/"
        if target != workspace and not target.startswith(root):
            return False
        rest = target[len(root) :].split("/") if target != workspace else []
        return ".." not in rest
    depth = len(parts) - 1
    names = False
    for part in target.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if names:
                return False
            depth -= 1
            if depth < 0:
                return False
        else:
            names = True
    return True


def _hidden(parts: tuple[str, ...], hidden: Sequence[tuple[str, ...]]) -> bool:
    return any(parts[: len(h)] == h for h in hidden)


# ---------------------------------------------------------------- landing a command's changes


class _Stack:
    """Descriptors of the workspace directories on the way to the current entry."""

    def __init__(self, root_fd: int) -> None:
        self.items: list[tuple[tuple[str, ...], int]] = [((), os.dup(root_fd))]

    def parent_of(self, parts: tuple[str, ...]) -> int | None:
        """The open directory that holds ``parts``; None if it was not entered.

        The upper layer is walked depth first, so what is not on the way to ``parts``
        is done with and closed.
        """
        want = parts[:-1]
        while len(self.items) > 1 and self.items[-1][0] != want[: len(self.items[-1][0])]:
            os.close(self.items.pop()[1])
        top, fd = self.items[-1]
        return fd if top == want else None

    def push(self, parts: tuple[str, ...], fd: int) -> None:
        self.items.append((parts, fd))

    def fd_of(self, parts: tuple[str, ...]) -> int | None:
        """The open directory ``parts``, if it is on the way to the current entry."""
        for held, fd in self.items:
            if held == parts:
                return fd
        return None

    def close(self) -> None:
        for _, fd in self.items:
            os.close(fd)
        self.items = []


def land(
    workspace_fd: int,
    upper_fd: int,
    *,
    workspace: str,
    protected: Sequence[str],
    hidden: Sequence[tuple[str, ...]] = (),
    hold: Hold = "pause",
    since_ns: int,
    owner: tuple[int, int] | None = None,
    stop: Callable[[], None] = lambda: None,
) -> Landing:
    """Judge a command's upper layer and apply what may land (see the module's docstring).

    Args:
        workspace_fd: A descriptor of the task's workspace (held since the step's check).
        upper_fd: A descriptor of the call's upper layer.
        workspace: The workspace's path, as the command saw it (for absolute symlinks).
        protected: The protected paths (empty: the agent may change them).
        hidden: Workspace paths (as components) of the worker's own data.
        hold: What becomes of changes to protected paths.
        since_ns: When the call began (``CallOverlay.started_ns``).
        owner: Set on what lands as its upper entry's owner (a root worker's tool user);
            None: leave it (the worker's own user made it).
        stop: Raises to abandon the landing (the call is stopped); what landed stays.

    Returns:
        What landed, what is held, refused or in conflict.
    """
    landing = Landing()
    place = _Place(owner, stop)
    judge = _Judge(protected if hold != "apply" else (), workspace)

    def keep(parts: tuple[str, ...], info: os.stat_result) -> bool:
        """A protected entry in a tree being removed: held or refused, not removed."""
        if not judge.protected_path(parts):
            return False
        path = "/".join(parts)
        if hold == "refuse":
            landing.refused.append((path, _REFUSED_PROTECTED))
        else:
            landing.held.append(Held(path, "delete", before=before_of(info)))
        return True

    tree = _Tree(since_ns, stop, keep)
    skipped: list[tuple[str, ...]] = []
    held_bytes = 0
    stack = _Stack(workspace_fd)
    try:
        try:
            for entry, upper_dir in changes(upper_fd, limit=MAX_ENTRIES):
                stop()
                parts = entry.parts
                if any(parts[: len(s)] == s for s in skipped):
                    continue
                parent = stack.parent_of(parts)
                why = _refusal(entry, workspace, hidden)
                if why is not None:
                    landing.refused.append((entry.path, why))
                    skipped.append(parts)
                    continue
                if judge.protected(entry, stack):
                    if hold == "refuse":
                        landing.refused.append((entry.path, _REFUSED_PROTECTED))
                        skipped.append(parts)
                        continue
                    kept, size = _hold(entry, upper_dir, parent, HELD_BYTES - held_bytes)
                    if isinstance(kept, str):
                        landing.refused.append((entry.path, kept))
                        skipped.append(parts)
                        continue
                    held_bytes += size
                    landing.held += kept
                    if entry.kind == "dir":
                        _descend(stack, parent, entry)
                    continue
                if parent is None:
                    skipped.append(parts)
                    continue
                try:
                    _land_one(entry, upper_dir, parent, stack, landing, place, tree, skipped)
                except OSError as err:
                    why = err.strerror or str(err)
                    landing.refused.append((entry.path, f"could not be applied ({why})"))
                    skipped.append(parts)
        except RuntimeError as err:
            landing.refused.append(
                (
                    "(the rest)",
                    f"the command changed {err} in the workspace; only what was judged "
                    "before that landed",
                )
            )
    finally:
        stack.close()
    landing.conflicts += tree.changed_kept
    return landing


class _Judge:
    """Whether a change lands under a protected path, by name or through a symlink.

    By name: the entry is, or lies inside, a protected path (``protected_entry``), or
    it is a symlink named as a protected path's first components (``holds_protected``:
    ``.config`` pointing elsewhere makes that place read as ``.config/mise.toml``).
    Through a symlink already in the workspace: the change lies in a directory that
    such a symlink, in a directory on its way, leads to (``elsewhere/mise.toml`` with
    ``.config -> elsewhere`` beside it).
    """

    def __init__(self, protected: Sequence[str], workspace: str) -> None:
        self.entries = tuple(protected)
        self.workspace = workspace
        self.aliases = aliases(self.entries)
        self.rest_names = {rest[0] for _, rest in self.aliases}

    def protected_path(self, parts: tuple[str, ...]) -> bool:
        return bool(self.entries) and protected_entry(parts, self.entries) is not None

    def protected(self, entry: Entry, stack: _Stack) -> bool:
        if not self.entries:
            return False
        parts = entry.parts
        if protected_entry(parts, self.entries) is not None:
            return True
        if entry.kind == "symlink" and holds_protected(parts, self.entries) is not None:
            return True
        return self._through_symlink(parts, stack)

    def _through_symlink(self, parts: tuple[str, ...], stack: _Stack) -> bool:
        folded = tuple(p.casefold() for p in parts)
        if not any(p in self.rest_names for p in folded[1:]):
            return False
        for first, rest in self.aliases:
            k = len(rest)
            for i in range(1, len(parts) - k + 1):
                if folded[i : i + k] != rest:
                    continue
                aliased = parts[:i]
                for j in range(i):
                    if self._leads_to(stack.fd_of(parts[:j]), parts[:j], first, aliased):
                        return True
        return False

    def _leads_to(
        self, fd: int | None, where: tuple[str, ...], name: str, aliased: tuple[str, ...]
    ) -> bool:
        """Whether a symlink ``name`` in directory ``where`` leads to ``aliased``."""
        if fd is None:
            return False
        try:
            target = os.readlink(name, dir_fd=fd)
        except OSError:
            return False
        if target.startswith("/"):
            root = self.workspace.rstrip("/") + "/"
            if not target.startswith(root):
                return False
            joined = target[len(root) :].split("/")
        else:
            joined = [*where, *target.split("/")]
        out: list[str] = []
        for part in joined:
            if part in ("", "."):
                continue
            if part == "..":
                if not out:
                    return False
                out.pop()
            else:
                out.append(part)
        return tuple(out) == aliased


_REFUSED_PROTECTED = (
    "a protected path (git, editors, shells and agents run what it holds); this agent "
    "runs without asking, so changes there are refused. Ask a person to make the change, "
    "or spawn with an agent that may ask"
)


def _refusal(entry: Entry, workspace: str, hidden: Sequence[tuple[str, ...]]) -> str | None:
    """Why ``entry`` never lands, whatever the agent; None if it may."""
    if _hidden(entry.parts, hidden):
        return "in this worker's own data (blob store, configuration)"
    if entry.kind == "other":
        return "a FIFO, socket or device file: only files, directories and symlinks land"
    if entry.kind == "symlink" and not link_inside(entry.parts, entry.target or "", workspace):
        return "a symlink that leads out of the workspace (or may, through '..' after a name)"
    return None


def _descend(stack: _Stack, parent: int | None, entry: Entry) -> None:
    """Enter a held directory's workspace counterpart, where there is one.

    What it holds is held too; each held change notes what is at its path now.
    """
    if parent is None or entry.opaque:
        return
    try:
        fd = os.open(entry.parts[-1], _DIR, dir_fd=parent)
    except OSError:
        return
    stack.push(entry.parts, fd)


def _hold(
    entry: Entry, upper_dir: int, parent: int | None, room: int
) -> tuple[list[Held] | str, int]:
    """The held changes of one protected entry and their bytes, or why it cannot be held.

    A directory that is there already, with the same mode, holds changes but is none.
    """
    name = entry.parts[-1]
    now = _lstat(parent, name) if parent is not None else None
    before = before_of(now)
    mode = entry.mode & ~_SPECIAL_BITS
    if entry.kind == "whiteout":
        return ([Held(entry.path, "delete", before=before)] if now is not None else []), 0
    if entry.kind == "dir":
        if not entry.opaque and now is not None and stat.S_ISDIR(now.st_mode):
            if stat.S_IMODE(now.st_mode) == mode:
                return [], 0
        out = [Held(entry.path, "delete", before=before)] if entry.opaque and now else []
        out.append(Held(entry.path, "dir", mode=mode, before=None if entry.opaque else before))
        return out, 0
    if entry.kind == "symlink":
        return [Held(entry.path, "symlink", target=entry.target, before=before)], 0
    if entry.size > room:
        return (
            f"too large to keep for a decision (held changes of one call are kept up to "
            f"{HELD_BYTES >> 20} MiB)",
            0,
        )
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=upper_dir)
    try:
        content = _read_all(fd, entry.size)
    finally:
        os.close(fd)
    return [Held(entry.path, "file", mode=mode, content=content, before=before)], len(content)


def _read_all(fd: int, size: int) -> bytes:
    chunks = []
    got = 0
    while got <= size:
        chunk = os.read(fd, max(size - got, 1 << 16) + 1)
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _land_one(
    entry: Entry,
    upper_dir: int,
    parent: int,
    stack: _Stack,
    landing: Landing,
    place: _Place,
    tree: _Tree,
    skipped: list[tuple[str, ...]],
) -> None:
    """Apply one entry that may land, into the open workspace directory ``parent``."""
    name = entry.parts[-1]
    now = _lstat(parent, name)
    path = entry.path
    if entry.kind == "whiteout":
        if now is not None and tree.remove(parent, name, now, entry.parts):
            landing.applied.append(path)
        return
    if entry.kind == "dir":
        fd = _enter_dir(entry, parent, now, landing, place, tree)
        if fd is None:
            skipped.append(entry.parts)
        else:
            stack.push(entry.parts, fd)
        return
    # A file or a symlink: what is there now goes, unless it changed meanwhile.
    if now is not None:
        if tree.changed(now) and not stat.S_ISDIR(now.st_mode):
            landing.conflicts.append(path)
            return
        if stat.S_ISDIR(now.st_mode) and not tree.remove(parent, name, now, entry.parts):
            return  # what it kept is named (changed meanwhile, or protected)
    mode = entry.mode & ~_SPECIAL_BITS
    # Where nothing was, nothing is replaced: another call's landing meanwhile is a conflict.
    replace = now is not None and not stat.S_ISDIR(now.st_mode)
    try:
        if entry.kind == "symlink":
            assert entry.target is not None
            place.symlink(parent, name, entry.target, entry.uid, entry.gid, replace=replace)
        else:
            _land_file(entry, upper_dir, parent, place, mode, replace)
    except FileExistsError:
        landing.conflicts.append(path)
        return
    if entry.kind != "symlink" and entry.mode & _SPECIAL_BITS:
        landing.notes.append(f"[{path}: its set-user-ID and set-group-ID bits were dropped]")
    landing.applied.append(path)


def _land_file(
    entry: Entry, upper_dir: int, parent: int, place: _Place, mode: int, replace: bool
) -> None:
    name = entry.parts[-1]
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=upper_dir)
    try:
        if entry.links == 1 and place.movable(fd, upper_dir, parent, mode):
            # The command's own file, on the workspace's filesystem: moved, not copied.
            place_at(upper_dir, name, parent, name, replace=replace)
        else:
            place.file_from(parent, name, fd, mode, entry.uid, entry.gid, replace=replace)
    finally:
        os.close(fd)


def _enter_dir(
    entry: Entry,
    parent: int,
    now: os.stat_result | None,
    landing: Landing,
    place: _Place,
    tree: _Tree,
) -> int | None:
    """The workspace directory for an upper one: entered, made, or replacing what was there."""
    name = entry.parts[-1]
    mode = entry.mode & ~_SPECIAL_BITS
    if now is not None and stat.S_ISDIR(now.st_mode) and not entry.opaque:
        fd = os.open(name, _DIR, dir_fd=parent)
        if stat.S_IMODE(now.st_mode) != mode and not tree.changed(now):
            with contextlib.suppress(OSError):
                os.chmod(f"/proc/self/fd/{fd}", mode)
        return fd
    if now is not None:
        # The command replaced it (an opaque directory), or it is no directory now.
        if not entry.opaque:
            landing.conflicts.append(entry.path)
            return None
        if not tree.remove(parent, name, now, entry.parts):
            if stat.S_ISDIR(now.st_mode):
                # What it kept stays, and the command's entries join it.
                return os.open(name, _DIR, dir_fd=parent)
            return None
    fd = place.directory(parent, name, mode, entry.uid, entry.gid)
    landing.applied.append(entry.path)
    return fd
