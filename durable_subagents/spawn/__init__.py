"""A spawn: its options, how they narrow an agent, and the task input it becomes.

Every door of a spawn (``SubagentClient.spawn_task``, ``start_subagent`` in a user's
workflow, ``subagents spawn``, an orchestrating model's ``spawn_subagent`` tool and a
subagent's own ``spawn_subagent`` call) goes the same way: ``SpawnOptions`` checks each
option alone, ``build_task_input`` narrows the agent with them (``narrow``; a
subagent's child is first narrowed to its parent by ``child_spec``) and checks the rest
of the request, and ``start_metadata`` and the static details are what the task starts
with. One path, with the same messages whoever spawned.

Pure and deterministic: workflow code calls all of it.
"""

from __future__ import annotations

from durable_subagents.spawn._narrow import child_spec, narrow, stricter_mode
from durable_subagents.spawn._options import (
    EFFORT_RANK,
    MAX_METADATA_BYTES,
    MAX_SECONDS,
    MAX_TOKEN_BUDGET,
    MAX_TURNS_LIMIT,
    MAX_WORKSPACE_BYTES,
    MODE_RANK,
    SpawnKwargs,
    SpawnOptions,
    check_budget_usd,
    refuse_protected_workspace,
    takes_spawn_options,
    validate_task_id,
)
from durable_subagents.spawn._task_input import (
    MAX_DESCRIPTION_BYTES,
    MAX_ID_BYTES,
    MAX_PROMPT_BYTES,
    build_task_input,
    fairness,
    may_pause,
    model_label,
    refuse_unencodable,
    start_metadata,
    static_details,
    static_summary,
)

__all__ = [
    "EFFORT_RANK",
    "MAX_DESCRIPTION_BYTES",
    "MAX_ID_BYTES",
    "MAX_METADATA_BYTES",
    "MAX_PROMPT_BYTES",
    "MAX_SECONDS",
    "MAX_TOKEN_BUDGET",
    "MAX_TURNS_LIMIT",
    "MAX_WORKSPACE_BYTES",
    "MODE_RANK",
    "SpawnKwargs",
    "SpawnOptions",
    "build_task_input",
    "check_budget_usd",
    "child_spec",
    "fairness",
    "may_pause",
    "model_label",
    "narrow",
    "refuse_protected_workspace",
    "refuse_unencodable",
    "start_metadata",
    "static_details",
    "static_summary",
    "stricter_mode",
    "takes_spawn_options",
    "validate_task_id",
]
