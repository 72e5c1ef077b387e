"""Validation of a spawn request and the workflow input it becomes."""

from __future__ import annotations

import json
import math
import posixpath
import re
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError
from temporalio.common import SearchAttributePair, TypedSearchAttributes

from durable_subagents import _search_attributes as sa
from durable_subagents._markdown import code_span, escape, one_line
from durable_subagents._payloads import TaskInput
from durable_subagents.agents import READ_ONLY_TOOLS, AgentSpec, PermissionRule
from durable_subagents.agents._spec import MODE_RANK
from durable_subagents.errors import InvalidRequest, PayloadTooLarge
from durable_subagents.types import TaskStatus

_TASK_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")
MAX_TURNS_LIMIT = 10_000


def validate_task_id(task_id: str) -> None:
    """Task ids become workflow ids and blob directory names: keep them simple."""
    if not _TASK_ID.match(task_id):
        raise InvalidRequest(
            f"task_id {task_id!r} is not valid: use 1-200 letters, digits, '.', '_' "
            "or '-', starting with a letter or digit"
        )


def build_task_input(
    spec: AgentSpec,
    prompt: str,
    *,
    description: str,
    parent_id: str | None,
    model: str | None,
    max_turns: int | None,
    metadata: dict[str, Any] | None,
    tools: Sequence[str] | None,
    disallowed_tools: Sequence[str] | None,
    permission_mode: str | None,
    permissions: Sequence[PermissionRule | dict[str, str]] | None,
    approval_timeout: float | None,
    time_limit: float | None,
    workspace: str | None,
    max_prompt_bytes: int,
    created_at: datetime | None = None,
    check_model: bool = True,
    network: bool | None = None,
    token_budget: int | None = None,
) -> TaskInput:
    """Check a spawn request and return the workflow input with the narrowed agent.

    Raises:
        InvalidRequest: what was wrong, and what to do instead.
    """
    if not isinstance(prompt, str) or not prompt.strip():
        raise InvalidRequest("prompt is empty; give the subagent a task to do")
    size = len(prompt.encode())
    if size > max_prompt_bytes:
        raise PayloadTooLarge(
            f"prompt is {size} bytes, over the {max_prompt_bytes}-byte limit; write the "
            "material to a file in the workspace and ask the subagent to read it"
        )
    _check_size("description", description, MAX_DESCRIPTION_BYTES, "keep it to one line")
    _check_size("parent_id", parent_id, MAX_ID_BYTES, "pass the parent task's id")
    _check_size("model", model, max_prompt_bytes, "put a long script in a file the worker reads")
    if max_turns is not None and (
        isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1
    ):
        raise InvalidRequest(f"max_turns must be an integer >= 1, got {max_turns!r}")
    if max_turns is not None and max_turns > MAX_TURNS_LIMIT:
        raise InvalidRequest(f"max_turns must be at most {MAX_TURNS_LIMIT}, got {max_turns}")
    _check_seconds("time_limit", time_limit)
    if token_budget is not None and (
        isinstance(token_budget, bool)
        or not isinstance(token_budget, int)
        or not 1 <= token_budget <= MAX_TOKEN_BUDGET
    ):
        raise InvalidRequest(
            f"token_budget must be an integer from 1 to {MAX_TOKEN_BUDGET}, got {token_budget!r}"
        )
    if approval_timeout is None:
        approval_timeout = spec.approval_timeout
    _check_seconds("approval_timeout", approval_timeout)
    _check_metadata(metadata)
    _check_workspace(workspace)
    if model is not None and check_model:
        # Imported here: the provider SDKs must stay out of the workflow sandbox's imports.
        from durable_subagents.activities.providers import parse_model

        parse_model(model)
    narrowed = narrow(spec, tools, disallowed_tools, permission_mode, permissions, network)
    description = description.strip() or _first_line(prompt)
    return TaskInput(
        agent=narrowed,
        prompt=prompt,
        description=description,
        parent_id=parent_id,
        model=model or "default",
        max_turns=max_turns or spec.max_turns,
        turns_per_run=max_turns or spec.max_turns,
        metadata=metadata or {},
        workspace=workspace,
        time_limit=time_limit,
        approval_timeout=approval_timeout,
        token_budget=token_budget,
        created_at=created_at or datetime.now(UTC),
    )


def _check_workspace(workspace: str | None) -> None:
    """What a client can tell of a workspace: a path that stays inside the worker's root.

    Whether the directory exists only the worker knows (its root may be on another
    machine); a task whose workspace it cannot use fails at its first turn.
    """
    if workspace is None:
        return
    if (
        not isinstance(workspace, str)
        or not workspace.strip()
        or "\x00" in workspace
        or len(workspace.encode()) > MAX_WORKSPACE_BYTES
    ):
        raise InvalidRequest(
            f"workspace must be a directory path of 1-{MAX_WORKSPACE_BYTES} bytes, got "
            f"{workspace!r:.100}; name a directory inside the worker's workspace root"
        )
    normal = posixpath.normpath(workspace)
    if not posixpath.isabs(normal) and (normal == ".." or normal.startswith("../")):
        raise InvalidRequest(
            f"workspace {workspace!r} leaves the worker's workspace root; name a directory "
            "inside it, relative to the root (e.g. 'services/api'), or start the worker "
            "with a wider --workspace"
        )


MAX_WORKSPACE_BYTES = 4096

MAX_SECONDS = 366 * 24 * 3600
"""Longest time limit or approval timeout accepted (a year)."""
MAX_METADATA_BYTES = 16 * 1024
MAX_TOKEN_BUDGET = 10**10
MAX_DESCRIPTION_BYTES = 2_000
"""Longest description: it is the Web UI summary and a memo field."""
MAX_ID_BYTES = 1_000
"""Longest task id (Temporal's workflow id limit)."""


def _check_size(name: str, value: object, limit: int, hint: str) -> None:
    if value is None:
        return
    if not isinstance(value, str):
        raise InvalidRequest(f"{name} must be a string, got {type(value).__name__}")
    size = len(value.encode("utf-8", "surrogatepass"))
    if size > limit:
        raise PayloadTooLarge(f"{name} is {size} bytes, over the {limit}-byte limit; {hint}")


def _check_seconds(name: str, value: object) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidRequest(f"{name} must be a number of seconds, got {value!r}")
    if not math.isfinite(value) or not 0 < value <= MAX_SECONDS:
        raise InvalidRequest(
            f"{name} must be more than 0 and at most {MAX_SECONDS} seconds (a year), got {value}"
        )


def _check_metadata(metadata: object) -> None:
    if metadata is None:
        return
    if not isinstance(metadata, dict):
        raise InvalidRequest(f"metadata must be a dict, got {type(metadata).__name__}")
    try:
        size = len(json.dumps(metadata).encode())
    except (TypeError, ValueError) as err:
        raise InvalidRequest(f"metadata must be JSON-serializable: {err}") from None
    if size > MAX_METADATA_BYTES:
        raise PayloadTooLarge(
            f"metadata is {size} bytes, over the {MAX_METADATA_BYTES}-byte limit; keep "
            "metadata to ids and labels, and put large material in the workspace"
        )


def narrow(
    spec: AgentSpec,
    tools: Sequence[str] | None,
    disallowed_tools: Sequence[str] | None,
    permission_mode: str | None,
    permissions: Sequence[PermissionRule | dict[str, str]] | None,
    network: bool | None = None,
) -> AgentSpec:
    """Apply spawn options to an agent; refuse any that would widen it."""
    update: dict[str, Any] = {}
    if network is not None:
        if not isinstance(network, bool):
            raise InvalidRequest(f"network must be true or false, got {network!r}")
        if network and not spec.network:
            raise InvalidRequest(
                f"agent {spec.name!r} does not allow the network for its tools; spawn "
                "options can only narrow: give the agent `network: true` to allow it"
            )
        update["network"] = network
    if tools is not None:
        tools = list(tools)
        if spec.tools is not None:
            extra = [t for t in tools if t not in spec.tools]
            if extra:
                raise InvalidRequest(
                    f"agent {spec.name!r} does not allow {', '.join(extra)}; its tools are "
                    f"{', '.join(spec.tools)}. Spawn options can only narrow an agent: pick "
                    "another agent (e.g. 'general') for more tools"
                )
        update["tools"] = tools
    if disallowed_tools:
        update["disallowed_tools"] = sorted({*spec.disallowed_tools, *disallowed_tools})
    if permission_mode is not None:
        if permission_mode not in MODE_RANK:
            raise InvalidRequest(
                f"unknown permission_mode {permission_mode!r}; use one of {', '.join(MODE_RANK)}"
            )
        if MODE_RANK[permission_mode] > MODE_RANK[spec.permission_mode]:
            raise InvalidRequest(
                f"permission_mode {permission_mode!r} is more permissive than agent "
                f"{spec.name!r}'s {spec.permission_mode!r}; spawn options can only narrow"
            )
        update["permission_mode"] = permission_mode
    if permissions:
        try:
            rules = [PermissionRule.model_validate(r) for r in permissions]
        except ValidationError as err:
            raise InvalidRequest(f"invalid permission rule: {err}") from None
        widening = [r for r in rules if r.action == "allow"]
        if widening:
            raise InvalidRequest(
                "spawn permissions can only add 'deny' or 'ask' rules (they narrow the "
                f"agent); got {', '.join(f'{r.tool}:{r.pattern}={r.action}' for r in widening)}"
            )
        update["restrictions"] = [*spec.restrictions, *rules]
    return spec.model_copy(update=update)


def start_metadata(task_input: TaskInput) -> tuple[dict[str, Any], TypedSearchAttributes]:
    """The memo and search attributes a task starts with (readable with no worker)."""
    spec = task_input.agent
    memo: dict[str, Any] = {
        "agent": spec.name,
        "description": task_input.description,
        "parent_id": task_input.parent_id,
        "status": TaskStatus.PENDING.value,
        "created_at": task_input.created_at.isoformat() if task_input.created_at else None,
        "model": model_label(task_input.model),  # an inline script is not repeated
        "turns": 0,
        "may_pause": may_pause(spec),
        "max_turns": task_input.max_turns,
    }
    if task_input.time_limit:
        memo["time_limit"] = task_input.time_limit
    if task_input.token_budget:
        memo["token_budget"] = task_input.token_budget
    attributes: list[SearchAttributePair[Any]] = [
        SearchAttributePair(sa.STATUS, TaskStatus.PENDING.value),
        SearchAttributePair(sa.AGENT, spec.name),
        SearchAttributePair(sa.TURNS, 0),
    ]
    if task_input.parent_id:
        attributes.append(SearchAttributePair(sa.PARENT, task_input.parent_id))
    return memo, TypedSearchAttributes(attributes)


def may_pause(spec: AgentSpec) -> bool:
    """Whether any call of this agent can need a decision.

    True for a mode that asks before changes (unless every tool is read-only), for any
    ``ask`` rule, and for agents that spawn (their children's pauses surface on them).
    """
    if spec.may_spawn or any(r.action == "ask" for r in (*spec.permissions, *spec.restrictions)):
        return True
    if spec.permission_mode in ("plan", "dont_ask"):
        return False
    tools = spec.tools
    return tools is None or any(t not in READ_ONLY_TOOLS for t in tools)


def static_summary(task_input: TaskInput) -> str:
    """The task's summary in the Temporal Web UI: its description, shown literally."""
    return escape(task_input.description)


def static_details(task_input: TaskInput, workflow_id: str) -> str:
    """Markdown shown as the workflow's details in the Temporal Web UI.

    Names, ids and the prompt are code spans and other text is escaped (see
    ``_markdown``): they show literally and cannot add lines of their own.
    """
    spec = task_input.agent
    tools = escape(", ".join(spec.tools)) if spec.tools is not None else "all worker tools"
    if task_input.model == "default":
        # Resolved by the worker; the current details name it after the first turn.
        model = "the worker's default (`SUBAGENTS_MODEL`)"
    else:
        model = code_span(model_label(task_input.model))
    lines = [
        f"**Subagent** {code_span(spec.name)} · task {code_span(workflow_id)}",
        f"**Model** {model} · **max turns** {task_input.max_turns}"
        + (f" · **time limit** {task_input.time_limit:g}s" if task_input.time_limit else ""),
        f"**Tools** {tools} · **mode** {escape(spec.permission_mode)}",
    ]
    if task_input.parent_id:
        lines.append(f"**Parent** {code_span(task_input.parent_id)}")
    if task_input.workspace:
        lines.append(f"**Workspace** {code_span(task_input.workspace)}")
    lines.append(f"**Prompt** {code_span(one_line(task_input.prompt, limit=300))}")
    return "\n\n".join(lines)


def model_label(model: str) -> str:
    """A short model name for summaries: inline scripts are not repeated every turn."""
    if model.startswith("scripted:") and model[len("scripted:") :][:1] in ("[", "{"):
        return "scripted"
    return model if len(model) <= 60 else model[:59] + "…"


def _first_line(prompt: str, limit: int = 80) -> str:
    line = prompt.strip().splitlines()[0].strip()
    return line if len(line) <= limit else line[: limit - 1] + "…"
