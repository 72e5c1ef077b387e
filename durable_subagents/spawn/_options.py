"""Spawn options: declared once (``SpawnKwargs``), checked alone (``SpawnOptions``).

A spawn names an agent and may narrow it: fewer tools, a stricter mode, more rules,
less time, fewer turns and tokens, less reasoning effort. It may also ask for a
structured answer (``output_schema``), which only constrains what the task returns,
name its own id and where its events go. ``SpawnKwargs`` declares each option's name,
type and meaning for every door; every door builds one ``SpawnOptions`` from them,
and a model's options are the same model, so what it sends is checked by the same
code, with the same messages, as a person's. Checking them against the agent is
``_narrow``'s.

Pure and deterministic: workflow code calls all of it.
"""

from __future__ import annotations

import inspect
import json
import math
import posixpath
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypedDict, TypeVar, Unpack, get_type_hints

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from durable_subagents.agents import (
    REASONING_EFFORTS,
    PermissionMode,
    PermissionRule,
    ReasoningEffort,
)
from durable_subagents.agents._protected import PROTECTED_PATHS, path_parts, protected_entry
from durable_subagents.agents._spec import MAX_DEPTH_LIMIT
from durable_subagents.context._output_schema import check_output_schema
from durable_subagents.errors import InvalidRequest, PayloadTooLarge
from durable_subagents.policy._notify_url import check_notify_url
from durable_subagents.wire._ledger import MAX_BUDGET_USD

__all__ = [
    "DEFAULT_TREE_TASKS",
    "EFFORT_RANK",
    "MAX_METADATA_BYTES",
    "MAX_SECONDS",
    "MAX_TOKEN_BUDGET",
    "MAX_TREE_TASKS",
    "MAX_TURNS_LIMIT",
    "MAX_WORKSPACE_BYTES",
    "MODE_RANK",
    "SpawnKwargs",
    "SpawnOptions",
    "check_budget_usd",
    "refuse_protected_workspace",
    "takes_spawn_options",
    "validate_task_id",
]

MODE_RANK: dict[str, int] = {"plan": 0, "default": 1, "accept_edits": 2, "dont_ask": 3}
"""Permission modes from the most restrictive to the most permissive."""
EFFORT_RANK: dict[str, int] = {effort: rank for rank, effort in enumerate(REASONING_EFFORTS)}
"""Reasoning efforts from the least to the most."""

MAX_TURNS_LIMIT = 10_000
MAX_SECONDS = 366 * 24 * 3600
"""Longest time limit or approval timeout accepted (a year)."""
MAX_METADATA_BYTES = 16 * 1024
MAX_TOKEN_BUDGET = 10**10
MAX_WORKSPACE_BYTES = 4096
MAX_TREE_TASKS = 1_000
"""Most tasks a spawn's ``max_tasks`` may allow its tree."""
DEFAULT_TREE_TASKS = 50
"""Tasks a tree may hold when its spawn does not say (the root included)."""

TASK_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")
"""What a task id may be (a workflow id, and a blob directory's name)."""


def validate_task_id(task_id: str) -> None:
    """Task ids become workflow ids and blob directory names: keep them simple."""
    if not TASK_ID.fullmatch(task_id):
        raise InvalidRequest(
            f"task_id {task_id!r} is not valid: use 1-200 letters, digits, '.', '_' "
            "or '-', starting with a letter or digit"
        )


class SpawnKwargs(TypedDict, total=False):
    """The keyword options of a spawn, declared once for every door.

    ``SubagentClient.spawn_task`` and ``start_subagent`` take them as keywords
    (``**options: Unpack[SpawnKwargs]``), so editors and type checkers show and check
    each one; ``SpawnOptions`` checks exactly these, and the command line's flags and
    the orchestrator tools' schema are tested against them (``test_spawn_doors``). An
    option left out, or None, keeps the agent's value; every option that bears on what
    the task may do only narrows the agent.
    """

    model: str | None
    """``provider:model``; default: the agent's, then the spawner's default (the
    client's ``SUBAGENTS_MODEL``), then the worker's."""
    max_turns: int | None
    """Turn limit, 1 to 10,000; default: the agent's."""
    metadata: dict[str, Any] | None
    """Free-form JSON data kept with the task (at most 16 KiB)."""
    tools: Sequence[str] | None
    """Restrict the agent to these of its tools."""
    disallowed_tools: Sequence[str] | None
    """Tools to take away."""
    permission_mode: str | None
    """``plan``, ``default``, ``accept_edits`` or ``dont_ask``: at most as permissive as
    the agent's."""
    permissions: Sequence[PermissionRule | dict[str, str]] | None
    """Extra ``deny`` or ``ask`` rules, kept apart from the agent's (the stricter answer
    of the two wins); a rule that allows is refused."""
    approval_timeout: float | None
    """Seconds a pause may wait for a decision; then its calls are rejected."""
    time_limit: float | None
    """Seconds the task may run in all; then it stops as ``timed_out``."""
    workspace: str | None
    """A directory inside the worker's workspace root, neither one of the protected
    paths (``.git``, ``.vscode``...) nor inside one."""
    network: bool | None
    """``False`` takes the network from an agent that has it (its tool processes get
    loopback only); ``True`` only if the agent allows it."""
    token_budget: int | None
    """Input plus output tokens the task and the subagents it spawns may use in all;
    then it stops (``stop_reason="token_budget"``)."""
    budget_usd: float | None
    """What the task and every subagent below it may spend in all, in US dollars
    (above 0, at most 1,000,000), priced by the worker's price table. When the tree has
    spent it, no new model turn starts in it and the task pauses on a ``raise_budget``
    call: ``raise_budget`` lets the tree go on, a rejection stops it
    (``stop_reason="budget"``). Every model of the tree needs a price."""
    budget_warn_at: float | None
    """A share of ``budget_usd`` (above 0, below 1) at which the task's ``notify_url``
    hears ``task.budget_warning``, once."""
    max_depth: int | None
    """Levels of subagents that may exist below the task, 0 to 10 (its agent must
    spawn: ``may_spawn``); default: the agent's ``maxDepth``, else 3. A worker allows
    at most its ``SUBAGENTS_MAX_DEPTH`` (default 5)."""
    max_tasks: int | None
    """Tasks the whole tree may hold, the task itself included, 1 to 1,000; default 50."""
    reasoning_effort: str | None
    """``low``, ``medium`` or ``high``: how hard a reasoning model thinks; at most the
    agent's (any, if the agent sets none)."""
    output_schema: Mapping[str, Any] | type[BaseModel] | None
    """A JSON Schema for an object, or a pydantic model class: the answer must match
    it. ``TaskInfo.output`` is then the validated answer and ``result`` its JSON text;
    an answer that does not match goes back to the model with what is wrong, and the
    third such answer fails the task."""
    task_id: str | None
    """Your own id for the task (1-200 letters, digits, ``.``, ``_``, ``-``); spawning
    again with it returns the same task. Default: ``subagent-<agent>-<hex>``."""
    notify_url: str | None
    """Where the task POSTs its events (a pause for a decision, its end); default: the
    workers' ``SUBAGENTS_NOTIFY_URL``. Workers post only to URLs their allowlist holds
    (``SUBAGENTS_NOTIFY_ALLOW``)."""


_Door = TypeVar("_Door", bound=Callable[..., Any])


def takes_spawn_options(door: _Door) -> _Door:
    """Show a door's ``**options: Unpack[SpawnKwargs]`` as the options themselves.

    Type checkers read the ``Unpack``; ``help()``, ``inspect.signature`` and
    documentation tools read the runtime signature, which this spells out: each option
    of ``SpawnKwargs`` as a keyword-only parameter defaulting to None, as the door
    treats an option left out.
    """
    signature = inspect.signature(door)
    kept = [p for p in signature.parameters.values() if p.kind is not p.VAR_KEYWORD]
    options = [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=kind)
        for name, kind in get_type_hints(SpawnKwargs).items()
    ]
    door.__signature__ = signature.replace(parameters=[*kept, *options])  # type: ignore[attr-defined]
    return door


class SpawnOptions(BaseModel):
    """A spawn's options, each checked alone: the ``SpawnKwargs``, normalized.

    Construction checks each option and raises ``InvalidRequest`` saying what was wrong
    and what to do (the same messages a model gets back for its own ``spawn_subagent``
    call); ``narrow`` then checks them against the agent. Sequences become tuples,
    rules ``PermissionRule``s, a pydantic model class its JSON Schema.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str | None = None
    max_turns: int | None = None
    metadata: dict[str, Any] | None = None
    tools: tuple[str, ...] | None = None
    disallowed_tools: tuple[str, ...] = ()
    permission_mode: PermissionMode | None = None
    permissions: tuple[PermissionRule, ...] = ()
    approval_timeout: float | None = None
    time_limit: float | None = None
    workspace: str | None = None
    network: bool | None = None
    token_budget: int | None = None
    budget_usd: float | None = None
    budget_warn_at: float | None = None
    max_depth: int | None = None
    max_tasks: int | None = None
    reasoning_effort: ReasoningEffort | None = None
    output_schema: dict[str, Any] | None = None
    task_id: str | None = None
    notify_url: str | None = None

    def __init__(self, **options: Unpack[SpawnKwargs]) -> None:
        """Check the options.

        Raises:
            InvalidRequest: the first option that is wrong, and what to do instead.
        """
        try:
            super().__init__(**options)
        except ValidationError as err:
            raise _invalid_request(err) from None

    @model_validator(mode="before")
    @classmethod
    def _check(cls, data: Any) -> Any:
        """The checks whose messages people and models read, before pydantic's types."""
        if not isinstance(data, Mapping):
            return data
        data = {k: v for k, v in data.items() if v is not None}
        _check_type("model", data.get("model"), str, "a string like openai:gpt-4.1-mini")
        max_turns = data.get("max_turns")
        if max_turns is not None and (
            isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1
        ):
            raise InvalidRequest(f"max_turns must be an integer >= 1, got {max_turns!r}")
        if max_turns is not None and max_turns > MAX_TURNS_LIMIT:
            raise InvalidRequest(f"max_turns must be at most {MAX_TURNS_LIMIT}, got {max_turns}")
        _check_seconds("time_limit", data.get("time_limit"))
        token_budget = data.get("token_budget")
        if token_budget is not None and (
            isinstance(token_budget, bool)
            or not isinstance(token_budget, int)
            or not 1 <= token_budget <= MAX_TOKEN_BUDGET
        ):
            raise InvalidRequest(
                f"token_budget must be an integer from 1 to {MAX_TOKEN_BUDGET}, "
                f"got {token_budget!r}"
            )
        _check_money(data.get("budget_usd"), data.get("budget_warn_at"))
        _check_count("max_depth", data.get("max_depth"), 0, MAX_DEPTH_LIMIT)
        _check_count("max_tasks", data.get("max_tasks"), 1, MAX_TREE_TASKS)
        _check_seconds("approval_timeout", data.get("approval_timeout"))
        _check_metadata(data.get("metadata"))
        _check_workspace(data.get("workspace"))
        network = data.get("network")
        if network is not None and not isinstance(network, bool):
            raise InvalidRequest(f"network must be true or false, got {network!r}")
        for name in ("tools", "disallowed_tools"):
            names = data.get(name)
            if names is not None and (
                isinstance(names, str | bytes)
                or not isinstance(names, list | tuple)
                or not all(isinstance(n, str) for n in names)
            ):
                raise InvalidRequest(
                    f"{name} must be a list of tool names, got {names!r:.100}; "
                    'for example ["read_file", "grep"]'
                )
        mode = data.get("permission_mode")
        if mode is not None and mode not in MODE_RANK:
            raise InvalidRequest(
                f"unknown permission_mode {mode!r}; use one of {', '.join(MODE_RANK)}"
            )
        rules = data.get("permissions")
        if rules is not None:
            data["permissions"] = _rules(rules)
        effort = data.get("reasoning_effort")
        if effort is not None and effort not in EFFORT_RANK:
            raise InvalidRequest(
                f"unknown reasoning_effort {effort!r:.100}; use one of {', '.join(EFFORT_RANK)}"
            )
        if data.get("output_schema") is not None:
            data["output_schema"] = check_output_schema(data["output_schema"])
        task_id = data.get("task_id")
        if task_id is not None:
            _check_type("task_id", task_id, str, "a string")
            validate_task_id(task_id)
        if data.get("notify_url") is not None:
            data["notify_url"] = check_notify_url(data["notify_url"])
        return data


def _invalid_request(err: ValidationError) -> InvalidRequest:
    """The ``InvalidRequest`` a check raised, or one naming what pydantic refused."""
    for error in err.errors(include_url=False):
        cause = error.get("ctx", {}).get("error")
        if isinstance(cause, InvalidRequest):
            return cause
    first = err.errors(include_url=False)[0]
    where = ".".join(str(p) for p in first["loc"]) or "options"
    if first["type"] == "extra_forbidden":
        known = ", ".join(SpawnOptions.model_fields)
        return InvalidRequest(f"unknown spawn option {where!r}; the options are {known}")
    return InvalidRequest(f"spawn option {where} is not valid: {first['msg']}")


def _rules(rules: object) -> list[PermissionRule]:
    if isinstance(rules, str | bytes | Mapping) or not isinstance(rules, list | tuple):
        raise InvalidRequest(
            f"permissions must be a list of rules, got {type(rules).__name__}; for "
            'example [{"tool": "bash", "pattern": "rm *", "action": "deny"}]'
        )
    try:
        return [PermissionRule.model_validate(r) for r in rules]
    except ValidationError as err:
        raise InvalidRequest(f"invalid permission rule: {err}") from None


def _check_type(name: str, value: object, kind: type, what: str) -> None:
    if value is not None and not isinstance(value, kind):
        raise InvalidRequest(f"{name} must be {what}, got {type(value).__name__}")


def _check_count(name: str, value: object, least: int, most: int) -> None:
    if value is not None and (
        isinstance(value, bool) or not isinstance(value, int) or not least <= value <= most
    ):
        raise InvalidRequest(f"{name} must be an integer from {least} to {most}, got {value!r}")


def check_budget_usd(value: object, name: str = "budget_usd") -> None:
    """Refuse a budget in money that is not a number above 0 and at most the most.

    Raises:
        InvalidRequest: what was wrong, and what a budget is.
    """
    if value is None:
        return
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or not 0 < value <= MAX_BUDGET_USD
    ):
        raise InvalidRequest(
            f"{name} must be a number of US dollars above 0 and at most "
            f"{MAX_BUDGET_USD:,.0f}, got {value!r:.40}"
        )


def _check_money(budget: object, warn_at: object) -> None:
    check_budget_usd(budget)
    if warn_at is None:
        return
    if budget is None:
        raise InvalidRequest("budget_warn_at needs budget_usd: it is a share of the budget")
    if isinstance(warn_at, bool) or not isinstance(warn_at, int | float) or not 0 < warn_at < 1:
        raise InvalidRequest(
            f"budget_warn_at must be a share of budget_usd above 0 and below 1 (0.8: at "
            f"80%), got {warn_at!r:.40}"
        )


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


def _check_workspace(workspace: object) -> None:
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


def refuse_protected_workspace(
    workspace: str | None, protected: Sequence[str] = PROTECTED_PATHS
) -> None:
    """Refuse a workspace spelled through a protected path (``.git``, ``.vscode/x``...).

    A tool in such a workspace would write hooks and configuration that run code on the
    host. This is the spelling only, which is all a spawner can check: the worker
    checks again when the task starts, through symlinks and with its own list (a
    ``proj -> .git`` link fails the task there). An absolute path is left to the
    worker, which alone knows which part of it is its root.

    Raises:
        InvalidRequest: the workspace is, or lies inside, a protected path.
    """
    if workspace is None or posixpath.isabs(workspace):
        return
    entry = protected_entry(path_parts(workspace), protected)
    if entry is not None:
        raise InvalidRequest(
            f"workspace {workspace!r} is, or lies inside, the protected path {entry!r}, "
            "whose files run code outside the sandbox (hooks, editor and agent "
            "configuration); spawn with a directory that is not protected"
        )
