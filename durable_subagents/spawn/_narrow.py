"""Narrowing: how an agent becomes what one task of it may do.

A spawn's options (``narrow``) and a parent task (``child_spec``) may only take away:
fewer tools, a stricter mode, more rules, less effort. This module alone decides what
"narrower" means. Pure and deterministic: workflow code calls it.
"""

from __future__ import annotations

from typing import Any

from durable_subagents.agents import AgentSpec, ReasoningEffort
from durable_subagents.agents._spec import SPAWN_TOOLS
from durable_subagents.agents._tool_names import covers
from durable_subagents.errors import InvalidRequest
from durable_subagents.spawn._options import EFFORT_RANK, MODE_RANK, SpawnOptions

__all__ = ["child_spec", "narrow", "stricter_mode"]


def stricter_mode(a: str, b: str) -> str:
    """The more restrictive of two permission modes."""
    return min(a, b, key=MODE_RANK.__getitem__)


def narrow(spec: AgentSpec, options: SpawnOptions) -> AgentSpec:
    """Apply spawn options to an agent; refuse any that would widen it.

    Raises:
        InvalidRequest: an option asks for more than the agent allows.
    """
    update: dict[str, Any] = {}
    if options.network is not None:
        if options.network and not spec.network:
            raise InvalidRequest(
                f"agent {spec.name!r} does not allow the network for its tools; spawn "
                "options can only narrow: give the agent `network: true` to allow it"
            )
        update["network"] = options.network
    if options.tools is not None:
        tools = list(options.tools)
        if spec.tools is not None:
            extra = [t for t in tools if not any(covers(s, t) for s in spec.tools)]
            if extra:
                raise InvalidRequest(
                    f"agent {spec.name!r} does not allow {', '.join(extra)}; its tools are "
                    f"{', '.join(spec.tools)}. Spawn options can only narrow an agent: pick "
                    "another agent (e.g. 'general') for more tools"
                )
        update["tools"] = tools
    if options.disallowed_tools:
        update["disallowed_tools"] = sorted({*spec.disallowed_tools, *options.disallowed_tools})
    mode = options.permission_mode
    if mode is not None:
        if MODE_RANK[mode] > MODE_RANK[spec.permission_mode]:
            raise InvalidRequest(
                f"permission_mode {mode!r} is more permissive than agent "
                f"{spec.name!r}'s {spec.permission_mode!r}; spawn options can only narrow"
            )
        update["permission_mode"] = mode
    if options.permissions:
        widening = [r for r in options.permissions if r.action == "allow"]
        if widening:
            raise InvalidRequest(
                "spawn permissions can only add 'deny' or 'ask' rules (they narrow the "
                f"agent); got {', '.join(f'{r.tool}:{r.pattern}={r.action}' for r in widening)}"
            )
        update["restrictions"] = [*spec.restrictions, *options.permissions]
    effort = options.reasoning_effort
    if effort is not None:
        most = spec.reasoning_effort
        if most is not None and EFFORT_RANK[effort] > EFFORT_RANK[most]:
            raise InvalidRequest(
                f"reasoning_effort {effort!r} is more than agent {spec.name!r}'s {most!r}; "
                "spawn options can only lower it"
            )
        update["reasoning_effort"] = effort
    return spec.model_copy(update=update)


def child_spec(parent: AgentSpec, parent_tools: list[str], agent: AgentSpec) -> AgentSpec:
    """What a subagent's child may be: its agent narrowed to what the parent may do.

    Its tools are those of its agent that the parent was offered, the parent's rules
    apply to it as restrictions, its mode is the stricter of the two, its sandbox is no
    wider than the parent's, its reasoning effort no more than the parent's, and it
    spawns in turn only if its agent does (and its tree has depth left for it).
    """
    own = agent.tools if agent.tools is not None else parent_tools
    tools = [t for t in own if t in parent_tools and t not in SPAWN_TOOLS]
    return agent.model_copy(
        update={
            "tools": tools,
            "disallowed_tools": sorted({*agent.disallowed_tools, *parent.disallowed_tools}),
            "restrictions": [*agent.restrictions, *parent.permissions, *parent.restrictions],
            "permission_mode": stricter_mode(agent.permission_mode, parent.permission_mode),
            "may_spawn": agent.may_spawn,
            "network": agent.network and parent.network,
            "env": _narrower_env(agent.env, parent.env),
            "limits": agent.limits.capped_by(parent.limits),
            "write_protected_paths": agent.write_protected_paths and parent.write_protected_paths,
            "reasoning_effort": _lower_effort(agent.reasoning_effort, parent.reasoning_effort),
        }
    )


def _lower_effort(
    child: ReasoningEffort | None, parent: ReasoningEffort | None
) -> ReasoningEffort | None:
    """The lower of two efforts; None (the model's default) bounds nothing."""
    if child is None or parent is None:
        return child or parent
    return min(child, parent, key=EFFORT_RANK.__getitem__)


def _narrower_env(child: list[str] | None, parent: list[str] | None) -> list[str] | None:
    if parent is None:
        return child
    return list(parent) if child is None else [n for n in child if n in parent]
