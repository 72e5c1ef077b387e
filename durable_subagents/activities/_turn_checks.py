"""A model turn's answer, made safe for every later step before the workflow sees it.

Call ids become parts of a pause's call id, and arguments are carried through every
payload after: both are bounded here, and the model hears of what was wrong.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from durable_subagents.context._output_schema import FINAL_ANSWER_TOOL, json_depth
from durable_subagents.types import ToolCall
from durable_subagents.wire._payloads import ModelTurnInput

__all__ = ["ANSWER_INSTRUCTION", "MAX_ARGUMENT_DEPTH", "has_schema", "well_formed"]

ANSWER_INSTRUCTION = (
    f"When you are done, call the {FINAL_ANSWER_TOOL} tool with your answer as its "
    "arguments: the task ends when the answer matches its parameters."
)


def has_schema(input: ModelTurnInput) -> bool:
    return input.output_schema is not None or input.output_schema_ref is not None


_CALL_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
MAX_ARGUMENT_DEPTH = 32
"""Deeper tool arguments go back to the model as an error (no schema needs more)."""


def well_formed(calls: list[ToolCall], turn: int) -> list[ToolCall]:
    """Calls every later step can carry: safe unique ids, bounded argument depth.

    A provider's call id becomes part of a pause's call id (``child/pause/call``), so
    an id with a ``/`` or odd characters could make a pause impossible to decide; such
    ids are replaced consistently (the transcript keeps the new one, for both the call
    and its result), and never to an id another call of the turn has: calls sharing an
    id would share a verdict, and one approval. Arguments nested deeper than any schema
    needs would fail to serialize further on; they become ``_raw``, which the workflow
    answers with a tool error, so the model hears of it instead of the turn being
    retried.
    """
    out: list[ToolCall] = []
    seen: set[str] = set()
    for index, call in enumerate(calls):
        update: dict[str, Any] = {}
        if not _CALL_ID.match(call.id) or call.id in seen:
            digest = hashlib.sha256(call.id.encode(errors="replace")).hexdigest()[:8]
            new_id, n = f"call_{turn}_{index}_{digest}", 0
            while new_id in seen:  # the model may have sent that id itself
                n += 1
                new_id = f"call_{turn}_{index}_{digest}_{n}"
            update["id"] = new_id
        if json_depth(call.arguments, MAX_ARGUMENT_DEPTH) > MAX_ARGUMENT_DEPTH:
            update["arguments"] = {"_raw": f"arguments nested over {MAX_ARGUMENT_DEPTH} levels"}
        fixed = call.model_copy(update=update) if update else call
        seen.add(fixed.id)
        out.append(fixed)
    return out
