"""A task's workspace on this worker, and who its tool commands run as there.

The workspace is resolved race-free under the worker's root at every step of a task,
so one swapped for a symlink after the spawn fails the next step instead of running it
elsewhere, and held by descriptor until the step is done: the file tools walk from
that descriptor, the sandbox binds it, and a command's changes land through it. Its
path is never resolved again within the step.
"""

from __future__ import annotations

import logging
import os
import posixpath
from dataclasses import dataclass
from pathlib import Path

from durable_subagents.activities._failures import workspace_error
from durable_subagents.agents._protected import protected_entry
from durable_subagents.tools._confined_open import Escape, open_beneath
from durable_subagents.tools._sandbox_host import NOBODY, tool_user, unreachable

__all__ = ["HeldWorkspace", "log_tool_user", "task_workspace"]

log = logging.getLogger("durable_subagents.activities._activities")


@dataclass
class HeldWorkspace:
    """A task's workspace for one step: where it is, and a descriptor of it.

    Attributes:
        path: Where it was when checked (for messages, and the path commands see).
        fd: An ``O_PATH`` descriptor of it, what every use goes through; closed with
            the step (``close``, or the ``with`` block).
    """

    path: Path
    fd: int

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> HeldWorkspace:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


_DIR = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC


def task_workspace(
    root: Path, requested: str | None, protected_paths: tuple[str, ...]
) -> HeldWorkspace:
    """The task's workspace, held: the worker's root, or a directory inside it.

    Resolved race-free, one component at a time from a descriptor of the root
    (``open_beneath``), so a symlink planted on the way (``proj -> .git``) is
    followed where it really leads: a workspace that is, or lies inside, a
    protected path is refused, like one that leads out of the root. Checked at
    every step of a task, so a workspace swapped for a symlink after the spawn
    fails the task's next step instead of running it there. The descriptor the
    walk ended on is what the step uses.
    """
    if not requested:
        try:
            return HeldWorkspace(root, os.open(root, _DIR))
        except OSError as err:
            raise workspace_error(
                f"this worker's workspace root {root} cannot be opened "
                f"({err.strerror or err}); restart the worker with --workspace naming a "
                "directory"
            ) from None
    try:
        opened = open_beneath(root, requested, _DIR)
    except Escape as err:
        raise workspace_error(
            f"workspace {requested!r} is outside this worker's workspace root {root}"
            f"{' (through a symlink)' if err.through_link else ''}; spawn with a "
            "directory inside it, or start the worker with --workspace"
        ) from None
    except (OSError, ValueError) as err:
        why = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
        raise workspace_error(
            f"workspace {requested!r} is not a directory under {root} ({why}); create "
            "it, or spawn with an existing one"
        ) from None
    entry = protected_entry(opened.parts, protected_paths)
    if entry is not None:
        os.close(opened.fd)
        resolved = opened.relative
        moved = resolved != posixpath.normpath(requested)
        via = f" (it resolves to {resolved!r})" if moved else ""
        raise workspace_error(
            f"workspace {requested!r}{via} is, or lies inside, the protected path "
            f"{entry!r}, whose files run code outside the sandbox; spawn with a "
            "directory that is not protected"
        )
    return HeldWorkspace(root.joinpath(*opened.parts), opened.fd)


def log_tool_user(root: Path, configured: tuple[int, int] | None) -> None:
    """Say who a root worker's commands run as, and when they cannot change the workspace."""
    try:
        run_as = tool_user(root, configured)
    except OSError:
        return
    if run_as is None:
        return
    log.info("this worker runs as root: tool commands run as uid %d, gid %d", *run_as)
    closed = unreachable(root, run_as)
    if closed is not None:
        log.warning(
            "tool commands run as uid %d, who may not enter %s on the way to the workspace "
            "root %s: every command will be refused. Put the workspace where that user can "
            "reach it, set SUBAGENTS_TOOL_USER, or run the worker as the workspace's owner",
            run_as[0],
            closed,
            root,
        )
    elif configured is None and run_as == NOBODY and root.stat().st_uid == 0:
        log.warning(
            "the workspace root %s belongs to root, so tool commands run as nobody "
            "(uid %d) and cannot change it: give it to the user the tools should act as "
            "(chown -R USER %s), set SUBAGENTS_TOOL_USER to a user that may write it, or "
            "run the worker as that user",
            root,
            run_as[0],
            root,
        )
