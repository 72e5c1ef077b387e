"""A call's changes to protected paths: kept for a person, then applied or dropped.

When a command changed a protected path and its agent asks before such changes, the
tool call keeps them in the blob store (``keep``): each file's bytes, the list of
changes (``changes_ref``), and the decision's arguments (``arguments_ref``: the call,
the changes as a person reads them, and ``changes_ref``). The workflow pauses on
them; an approval binds ``arguments_ref``, so exactly the bytes shown land. Then
``settle`` (the ``settle_changes`` activity) applies them through the workspace's
descriptor, each only where the workspace is still as it was shown, or drops them,
and the model reads the call's result with what became of them.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from temporalio import activity

from durable_subagents.activities._workspaces import HeldWorkspace
from durable_subagents.tools._held import describe
from durable_subagents.tools._land import Before, Held
from durable_subagents.tools._land_held import apply_held
from durable_subagents.tools._sandbox_host import tool_user
from durable_subagents.types import ToolCall
from durable_subagents.wire._payloads import (
    HELD_PATHS_SHOWN,
    HeldChanges,
    SettleInput,
    ToolCallResult,
)

if TYPE_CHECKING:
    from durable_subagents.activities._role import ActivityRole

__all__ = ["keep", "settle"]

_PREVIEW_CHARS = 400


async def keep(
    acts: ActivityRole,
    task_id: str,
    call: ToolCall,
    workspace: HeldWorkspace,
    held: list[Held],
) -> HeldChanges:
    """Keep ``held`` in the blob store for a decision; what the pause shows and binds."""
    entries: list[dict[str, Any]] = []
    for change in held:
        entry = asdict(change)
        content = entry.pop("content")
        if content is not None:
            entry["content_ref"] = await acts.store.put(task_id, content)
        entries.append(entry)
    changes_ref = await acts.store.put(task_id, json.dumps(entries).encode())
    text = await asyncio.to_thread(describe, workspace.fd, held)
    arguments = {
        "call_id": call.id,
        "tool": call.name,
        "changes": text,
        "changes_ref": changes_ref,
    }
    arguments_ref = await acts.store.put(task_id, json.dumps(arguments).encode())
    paths = [h.path for h in held]
    return HeldChanges(
        arguments_ref=arguments_ref,
        changes_ref=changes_ref,
        paths=paths[:HELD_PATHS_SHOWN],
        count=len(paths),
        preview=text[:_PREVIEW_CHARS],
    )


async def _load(acts: ActivityRole, task_id: str, held: HeldChanges) -> list[Held]:
    """The held changes an approval names, bytes and all, checked against each other."""
    arguments = json.loads(await acts.store.get(task_id, held.arguments_ref))
    if arguments.get("changes_ref") != held.changes_ref:
        raise ValueError("the held changes do not match what was shown for the decision")
    out = []
    for entry in json.loads(await acts.store.get(task_id, held.changes_ref)):
        ref = entry.pop("content_ref", None)
        before = entry.pop("before", None)
        content = await acts.store.get(task_id, ref) if ref is not None else None
        out.append(Held(**entry, content=content, before=Before(**before) if before else None))
    return out


def _listed(paths: list[str]) -> str:
    shown = ", ".join(paths[:HELD_PATHS_SHOWN])
    more = len(paths) - HELD_PATHS_SHOWN
    return shown + (f" and {more} more" if more > 0 else "")


async def settle(acts: ActivityRole, input: SettleInput) -> ToolCallResult:
    """Apply the held changes a person approved, or drop them; the call's final result.

    A retried attempt answers from the record an earlier one wrote; one that died
    before writing it applies again, where each change that is there already counts as
    applied.
    """
    task_id = input.task_id
    if activity.info().attempt > 1:
        done = await acts.store.get_record(task_id, input.record)
        if done is not None:
            return ToolCallResult.model_validate_json(done)
    held = input.result.held
    assert held is not None
    if input.approved:
        changes = await _load(acts, task_id, held)
        with acts.workspace(input.workspace) as workspace:
            owner = tool_user(workspace.fd, acts.tool_user)
            landing = await asyncio.to_thread(apply_held, workspace.fd, changes, owner=owner)
        note = f"[a person approved the held changes: {len(landing.applied)} applied"
        if landing.conflicts:
            note += (
                "; not applied, as the workspace changed there since the decision was "
                f"asked for: {_listed(landing.conflicts)}"
            )
        for path, why in landing.refused:
            note += f"; {path} {why}"
        note += "]"
    else:
        why = input.reason or "not approved"
        note = f"[the held changes were not applied: {why}]"
    text = input.result.content
    if input.result.content_ref is not None:
        text = (await acts.store.get(task_id, input.result.content_ref)).decode()
    separator = "" if not text or text.endswith("\n") else "\n"
    output = f"{text}{separator}{note}"
    content, ref = await acts.transcript.store_text(task_id, output)
    result = input.result.model_copy(
        update={
            "content": content,
            "content_ref": ref,
            "size": len(output),
            "held": None,
            "recorded": True,
        }
    )
    await acts.store.put_record(task_id, input.record, result.model_dump_json().encode())
    return result
