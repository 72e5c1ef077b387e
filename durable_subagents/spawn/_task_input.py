"""A spawn request's own checks and the workflow input it becomes.

``build_task_input`` takes the options (checked alone, see ``_options``), narrows the
agent with them (``_narrow``) and checks the rest of the request: prompt, label, ids,
model. ``start_metadata`` and the static details are what the task starts with,
readable with no worker.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from temporalio.common import Priority, SearchAttributePair, TypedSearchAttributes

from durable_subagents.agents import BUILTIN_AGENTS, READ_ONLY_TOOLS, AgentSpec, UnloadableAgent
from durable_subagents.agents._spec import DEFAULT_MAX_DEPTH
from durable_subagents.errors import InvalidRequest, PayloadTooLarge
from durable_subagents.spawn._narrow import narrow
from durable_subagents.spawn._options import DEFAULT_TREE_TASKS, SpawnOptions
from durable_subagents.types import TaskStatus
from durable_subagents.wire import _search_attributes as sa
from durable_subagents.wire._payloads import TaskInput
from durable_subagents.wording._markdown import code_span, escape, one_line

__all__ = [
    "MAX_DESCRIPTION_BYTES",
    "MAX_ID_BYTES",
    "MAX_PROMPT_BYTES",
    "build_task_input",
    "fairness",
    "may_pause",
    "model_label",
    "refuse_unencodable",
    "spawnable_agents",
    "start_metadata",
    "static_details",
    "static_summary",
]

MAX_PROMPT_BYTES = 128 * 1024
"""Longest prompt a spawn takes by default; longer material goes in the workspace."""
MAX_DESCRIPTION_BYTES = 2_000
"""Longest description: it is the Web UI summary and a memo field."""
MAX_ID_BYTES = 1_000
"""Longest task id (Temporal's workflow id limit)."""


def build_task_input(
    spec: AgentSpec,
    prompt: str,
    options: SpawnOptions,
    *,
    description: str,
    parent_id: str | None,
    default_model: str | None,
    created_at: datetime,
    max_prompt_bytes: int = MAX_PROMPT_BYTES,
    check_model: bool = True,
    agents: Mapping[str, AgentSpec] | None = None,
    spawnable: Mapping[str, AgentSpec] | None = None,
) -> TaskInput:
    """Check a spawn request and return the workflow input with the narrowed agent.

    Args:
        spec: The agent, as the spawner resolved it.
        prompt: The task.
        options: What the spawn narrows (already checked alone).
        description: A label; empty: the prompt's first line.
        parent_id: The spawning task's id, if any.
        default_model: The model when neither the options nor the agent name one
            (an agent's ``inherit`` means this); None: the worker's default.
        max_prompt_bytes: The prompt's size limit (and an inline script's).
        created_at: The task's creation time: ``workflow.now()`` in workflow code, the
            clock at the client (no wall clock is read here: workflows call this).
        check_model: Parse the model name here (not in workflow code: the parser's
            module imports the provider SDKs).
        agents: The agents the spawner knows besides the built-ins (its agent files,
            a client's ``agents``): those the task may spawn go with it
            (``spawnable_agents``).
        spawnable: A child's: the agents it may spawn, chosen from its parent's copy
            (none are looked up).

    Raises:
        InvalidRequest: what was wrong, and what to do instead.
    """
    if not isinstance(prompt, str) or not prompt.strip():
        raise InvalidRequest("prompt is empty; give the subagent a task to do")
    refuse_unencodable("prompt", prompt)
    size = len(prompt.encode())
    if size > max_prompt_bytes:
        raise PayloadTooLarge(
            f"prompt is {size} bytes, over the {max_prompt_bytes}-byte limit; write the "
            "material to a file in the workspace and ask the subagent to read it"
        )
    _check_size("description", description, MAX_DESCRIPTION_BYTES, "keep it to one line")
    _check_size("parent_id", parent_id, MAX_ID_BYTES, "pass the parent task's id")
    model, origin = _model(options, spec, default_model)
    _check_size("model", model, max_prompt_bytes, "put a long script in a file the worker reads")
    approval_timeout = options.approval_timeout
    if approval_timeout is None:
        approval_timeout = spec.approval_timeout
    if model is not None and check_model:
        # Imported here: the provider SDKs must stay out of the workflow sandbox's imports.
        from durable_subagents.providers._names import parse_model

        parse_model(model, origin=origin)
    narrowed = narrow(spec, options)
    description = description.strip() or _first_line(prompt)
    task_input = TaskInput(
        agent=narrowed,
        prompt=prompt,
        description=description,
        parent_id=parent_id,
        model=model or "default",
        max_turns=options.max_turns or spec.max_turns,
        turns_per_run=options.max_turns or spec.max_turns,
        metadata=options.metadata or {},
        workspace=options.workspace,
        time_limit=options.time_limit,
        approval_timeout=approval_timeout,
        token_budget=options.token_budget,
        budget_usd=options.budget_usd,
        budget_warn_at=options.budget_warn_at,
        output_schema=options.output_schema,
        notify_url=options.notify_url,
        created_at=created_at,
    )
    if narrowed.may_spawn:
        task_input.max_depth = _depth(options, narrowed)
        task_input.max_tasks = options.max_tasks or DEFAULT_TREE_TASKS
        task_input.agents = (
            dict(spawnable) if spawnable is not None else spawnable_agents(narrowed, agents)
        )
    elif options.max_depth or options.max_tasks:
        raise InvalidRequest(
            f"agent {spec.name!r} spawns no subagents, so max_depth and max_tasks mean "
            "nothing for it; give it the Agent tool (may_spawn) or leave them out"
        )
    refuse_unencodable("the spawn", task_input.model_dump(mode="python"))
    return task_input


MAX_SPAWNABLE_AGENTS = 32
"""Most agents a task may spawn from (its copy of them travels in its input)."""
MAX_SPAWNABLE_BYTES = 128 * 1024
"""Most bytes those agents may take, as JSON, in a task's input."""


def spawnable_agents(
    spec: AgentSpec, known: Mapping[str, AgentSpec] | None
) -> dict[str, AgentSpec]:
    """The agents a task of ``spec`` may spawn, as its spawner knows them.

    The built-ins and ``known`` (which win on a name), those ``spec.spawnable`` names
    if it names any; an agent whose file is broken is left out. They travel in the
    task's input and down its tree: a child resolves its own children from its copy.

    Raises:
        InvalidRequest: ``spawnable`` names an agent nobody knows, or the agents are
            more than ``MAX_SPAWNABLE_AGENTS`` or ``MAX_SPAWNABLE_BYTES``.
    """
    everyone = {**BUILTIN_AGENTS, **(known or {})}
    usable = {n: a for n, a in everyone.items() if not isinstance(a, UnloadableAgent)}
    if spec.spawnable is None:
        chosen = usable
    else:
        missing = [n for n in spec.spawnable if n not in usable]
        if missing:
            raise InvalidRequest(
                f"agent {spec.name!r} may spawn {', '.join(missing)}, which "
                f"{'is' if len(missing) == 1 else 'are'} not known here (or cannot be "
                f"loaded); known: {', '.join(usable)}"
            )
        chosen = {n: usable[n] for n in spec.spawnable}
    if len(chosen) > MAX_SPAWNABLE_AGENTS:
        raise InvalidRequest(
            f"agent {spec.name!r} may spawn {len(chosen)} agents, over the "
            f"{MAX_SPAWNABLE_AGENTS} a task carries; name those it needs in its tools, "
            "as Agent(explore, reviewer)"
        )
    size = sum(len(a.model_dump_json()) for a in chosen.values())
    if size > MAX_SPAWNABLE_BYTES:
        raise PayloadTooLarge(
            f"the {len(chosen)} agents {spec.name!r} may spawn take {size} bytes, over the "
            f"{MAX_SPAWNABLE_BYTES} a task carries; name those it needs in its tools, as "
            "Agent(explore, reviewer)"
        )
    return chosen


def _depth(options: SpawnOptions, spec: AgentSpec) -> int:
    """A task's ``max_depth``: the spawn's, else its agent's, else the default."""
    for depth in (options.max_depth, spec.max_depth):
        if depth is not None:
            return depth
    return DEFAULT_MAX_DEPTH


def refuse_unencodable(name: str, value: object) -> None:
    """Refuse text no payload can carry: a lone surrogate (half a UTF-16 pair).

    JSON and Python strings can hold one; UTF-8, and so every Temporal payload, cannot.
    Caller input (a prompt, a reason, a rule's pattern from an orchestrating model)
    gets a typed error here rather than an encoder's traceback at the server call.

    Raises:
        InvalidRequest: where the surrogate is, and what to do.
    """
    stack: list[tuple[str, object]] = [(name, value)]
    while stack:
        where, item = stack.pop()
        if isinstance(item, str):
            if item.isascii():
                continue
            try:
                item.encode()
            except UnicodeEncodeError as err:
                raise InvalidRequest(
                    f"{where} holds a lone surrogate ({item[err.start]!r}) at character "
                    f"{err.start}: half of a UTF-16 pair, which no payload can carry; "
                    "remove it or replace it with U+FFFD"
                ) from None
        elif isinstance(item, dict):
            for key, sub in item.items():
                stack.append((f"{where} key", key))
                stack.append((f"{where}.{key}" if isinstance(key, str) else where, sub))
        elif isinstance(item, list | tuple):
            stack.extend((f"{where}[{i}]", sub) for i, sub in enumerate(item))


def _check_size(name: str, value: object, limit: int, hint: str) -> None:
    if value is None:
        return
    if not isinstance(value, str):
        raise InvalidRequest(f"{name} must be a string, got {type(value).__name__}")
    size = len(value.encode("utf-8", "surrogatepass"))
    if size > limit:
        raise PayloadTooLarge(f"{name} is {size} bytes, over the {limit}-byte limit; {hint}")


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
        # a budget's top task pauses when the tree has spent it
        "may_pause": may_pause(spec)
        or (task_input.budget_usd is not None and task_input.tree_root is None),
        "max_turns": task_input.max_turns,
    }
    if task_input.time_limit:
        memo["time_limit"] = task_input.time_limit
    if task_input.token_budget:
        memo["token_budget"] = task_input.token_budget
    top_budget = task_input.budget_usd if task_input.tree_root is None else None
    if top_budget is not None:
        memo["budget_usd"] = top_budget
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
    ``ask`` rule, for agents that spawn (their children's pauses surface on them), and
    in ``dont_ask`` for a tool that writes by path: a write to a protected path asks in
    every mode (unless the agent opted in with ``write_protected_paths``).
    """
    if spec.may_spawn or any(r.action == "ask" for r in (*spec.permissions, *spec.restrictions)):
        return True
    if spec.permission_mode == "plan":
        return False
    tools = spec.tools
    if spec.permission_mode == "dont_ask":
        if spec.write_protected_paths:
            return False
        # bash is left to its sandbox; any other tool that changes things takes a path.
        writers = (
            None if tools is None else [t for t in tools if t not in (*READ_ONLY_TOOLS, "bash")]
        )
        return writers is None or any(t not in spec.disallowed_tools for t in writers)
    return tools is None or any(t not in READ_ONLY_TOOLS for t in tools)


def _model(
    options: SpawnOptions, spec: AgentSpec, default_model: str | None
) -> tuple[str | None, str | None]:
    """The task's model and where it came from, for an error about it (None: the spawn)."""
    if options.model:
        return options.model, None
    if spec.model and spec.model != "inherit":
        return spec.model, f"the agent {spec.name!r}"
    return default_model, "SUBAGENTS_MODEL"


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
        *_rule_lines(spec),
    ]
    if task_input.parent_id:
        lines.append(f"**Parent** {code_span(task_input.parent_id)}")
    if task_input.workspace:
        lines.append(f"**Workspace** {code_span(task_input.workspace)} (in the worker's root)")
    else:
        lines.append("**Workspace** the worker's root (its `--workspace`)")
    if task_input.output_schema is not None:
        lines.append("**Answer** structured: validated against the spawn's output schema")
    lines.append(f"**Prompt** {code_span(one_line(task_input.prompt, limit=300))}")
    return "\n\n".join(lines)


_LISTED_RULES = 20
"""Most rules of a set listed one by one in the details (the rest are counted)."""


def _rule_lines(spec: AgentSpec) -> list[str]:
    """The permission rules that decide which calls run, ask (and pause) or are denied.

    The agent's rules and the spawn's restrictions are two sets; the stricter answer of
    the two wins, and the mode decides what no rule matches.
    """
    if not spec.permissions and not spec.restrictions:
        return ["**Rules** none: the mode decides every call"]
    lines = []
    for title, rules in (("**Rules**", spec.permissions), ("**Spawn rules**", spec.restrictions)):
        if not rules:
            continue
        shown = [
            code_span(
                f"{r.tool}: {r.action}" if r.pattern == "*" else f"{r.tool} {r.pattern}: {r.action}"
            )
            for r in rules[:_LISTED_RULES]
        ]
        more = f" and {len(rules) - _LISTED_RULES} more" if len(rules) > _LISTED_RULES else ""
        lines.append(f"{title} {', '.join(shown)}{more}")
    return lines


def model_label(model: str) -> str:
    """A short model name for summaries: inline scripts are not repeated every turn."""
    if model.startswith("scripted:") and model[len("scripted:") :][:1] in ("[", "{"):
        return "scripted"
    return model if len(model) <= 60 else model[:59] + "…"


def _first_line(prompt: str, limit: int = 80) -> str:
    line = prompt.strip().splitlines()[0].strip()
    return line if len(line) <= limit else line[: limit - 1] + "…"


MAX_FAIRNESS_KEY = 64
"""Bytes Temporal allows in a fairness key."""


def fairness(task_input: TaskInput, task_id: str) -> Priority:
    """The task's share of its queues: one fairness key per orchestrator.

    Tasks spawned under one parent (an orchestrator's ``parent_id``) share a key, and
    a task with no parent has one of its own; a task's children and all its model turns
    and tool calls inherit it. On a server with task-queue fairness the queues then
    dispatch in turn between keys, so one orchestrator's swarm cannot starve another's
    tasks; a server without it ignores the key.
    """
    key = task_input.parent_id or task_id
    if len(key.encode()) > MAX_FAIRNESS_KEY:
        key = "sha256:" + hashlib.sha256(key.encode()).hexdigest()[:32]
    return Priority(fairness_key=key)
