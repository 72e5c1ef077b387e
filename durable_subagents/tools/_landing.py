"""Where a file tool may land: where its call was judged, and nowhere the rules forbid.

A call is judged (allowed, or shown to a person who approves it) on where its path
resolved when the model asked for it. Between that decision and the tool's run, the
task's other calls (a ``bash`` of the same turn), another task or a person may swap a
directory on the way for a symlink. The walk that opens the path (``open_beneath``)
asks the check built here before it creates a directory or opens its last entry, with
where that lies now, so a refusal leaves nothing behind:

- The call's own path must lead where it was judged, and a directory may be made only
  on that way. Anywhere else is refused with both places named.
- Any other path a tool opens (a symlink a search meets, a path a custom tool builds)
  is judged as if the call had named it. A path the task's rules deny or ask about is
  refused, and so is a write into a protected entry (``.git``, ``.claude``...).
"""

from __future__ import annotations

import os

from durable_subagents.agents._protected import protected_entry
from durable_subagents.tools._confined_open import Landing
from durable_subagents.tools._decorator import DecidedPath, ToolContext, ToolError

__all__ = ["WRITE_FLAGS", "landing_check"]

WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
"""Open flags that can change what is opened (protected entries refuse them)."""


def landing_check(ctx: ToolContext, path: str, *, writing: bool) -> Landing:
    """The check ``open_in_workspace`` walks ``path`` with (see the module's docstring)."""
    decided = ctx.decided if ctx.decided is not None and ctx.decided.path == path else None
    route = _route(decided) if decided is not None else None

    def check(parts: tuple[str, ...], final: bool) -> None:
        if decided is not None and route is not None:
            if parts == (route if final else route[: len(parts)]):
                return  # where the decision saw it lead
            if final or parts[:-1] != route[: len(parts) - 1]:
                raise _moved(path, decided, parts, final)
            # A directory made off the way and left again (``new/../x``): judged below.
        where = "/".join(parts) or "."
        entry = protected_entry(parts, ctx.protected) if writing else None
        if entry is not None:
            raise ToolError(
                f"'{path}' leads to '{where}', inside '{entry}', which holds hooks, "
                "configuration or agent definitions other programs run; this call was not "
                "judged for it, so nothing was written. Call the tool with that path itself: "
                "a write there waits for a person's decision"
            )
        if final and ctx.rules is not None:
            action = ctx.rules.action(where)
            if action != "allow":
                verdict = "denies" if action == "deny" else "asks a person about"
                raise ToolError(
                    f"'{path}' leads to '{where}', which this agent's permission rules "
                    f"{verdict}; it was not opened. Call the tool with that path itself "
                    "to have it judged"
                )

    return check


def _route(decided: DecidedPath) -> tuple[str, ...]:
    """The components of the decided path; one that matches no walk when it was outside."""
    if decided.resolved.startswith("/"):
        return (decided.resolved,)  # no component holds a '/': nothing matches it
    return () if decided.resolved == "." else tuple(decided.resolved.split("/"))


def _moved(path: str, decided: DecidedPath, parts: tuple[str, ...], final: bool) -> ToolError:
    if final:
        where = "/".join(parts) or "."
        now = f"it now leads to '{where}'"
        retry = f"If '{where}' is meant, call the tool again with that path, so it is judged itself"
    else:  # about to make a directory: the rest of the path is not walked yet
        now = f"it now leads into '{'/'.join(parts[:-1]) or '.'}'"
        retry = "Check where the path leads now, and call the tool with that path if it is meant"
    return ToolError(
        f"'{path}' led to '{decided.resolved}' when this call was judged (what the "
        f"permission rules saw and any approver was shown), but {now}: a symlink on the way "
        f"was changed since. Nothing was read or written. {retry}"
    )
