"""Permission rules: which tool calls run, which are refused, which need a decision.

Pure functions, safe to call from workflow code.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
from typing import Any

from durable_subagents.agents import READ_ONLY_TOOLS, AgentSpec, PermissionRule
from durable_subagents.agents._spec import EDIT_TOOLS, Action

_MAIN_ARGUMENT = ("command", "path", "pattern", "url")


def rule_target_key(arguments: dict[str, Any]) -> str | None:
    """Which argument rules match against: the command, path, pattern or URL."""
    for key in _MAIN_ARGUMENT:
        if isinstance(arguments.get(key), str):
            return key
    return None


def main_argument(arguments: dict[str, Any]) -> str:
    """The argument rules match against: a command, a path or a pattern."""
    key = rule_target_key(arguments)
    return str(arguments[key]) if key is not None else ""


def has_rules_for(spec: AgentSpec, tool_name: str) -> bool:
    """Whether any deny or ask rule could apply to this tool."""
    return any(
        r.action != "allow" and fnmatch.fnmatchcase(tool_name, r.tool)
        for r in (*spec.permissions, *spec.restrictions)
    )


def decide(spec: AgentSpec, tool_name: str, arguments: dict[str, Any]) -> Action:
    """The action for one call.

    Within a rule set the last matching rule wins, and no match means allow. The
    agent's rules and the spawn's restrictions are evaluated apart and the stricter
    result wins, so a restriction can never widen the agent. ``plan`` mode denies every
    tool that is not read-only; ``accept_edits`` turns ``ask`` into ``allow`` for file
    edits; ``dont_ask`` turns ``ask`` into ``deny``.
    """
    if spec.permission_mode == "plan" and tool_name not in READ_ONLY_TOOLS:
        return "deny"
    target = main_argument(arguments)
    action = _strictest(
        _evaluate(spec.permissions, tool_name, target),
        _evaluate(spec.restrictions, tool_name, target),
    )
    if action == "ask" and spec.permission_mode == "accept_edits" and tool_name in EDIT_TOOLS:
        return "allow"
    if action == "ask" and spec.permission_mode == "dont_ask":
        return "deny"
    return action


def _evaluate(rules: list[PermissionRule], tool_name: str, target: str) -> Action:
    action: Action = "allow"
    for rule in rules:
        if fnmatch.fnmatchcase(tool_name, rule.tool) and fnmatch.fnmatchcase(target, rule.pattern):
            action = rule.action
    return action


def _strictest(a: Action, b: Action) -> Action:
    order = {"allow": 0, "ask": 1, "deny": 2}
    return a if order[a] >= order[b] else b


def arguments_hash(arguments: dict[str, Any]) -> str:
    """A stable hash of a call's arguments (approvals are bound to it)."""
    data = json.dumps(arguments, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(data).hexdigest()[:16]


def arguments_preview(tool_name: str, arguments: dict[str, Any], limit: int = 80) -> str:
    """A one-line preview of a call, as shown in the Web UI (``bash · ls -la``)."""
    text = main_argument(arguments) or json.dumps(arguments, sort_keys=True)
    text = " ".join(text.split())
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return f"{tool_name} · {text}" if text else tool_name
