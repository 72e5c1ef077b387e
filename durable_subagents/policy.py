"""Permission rules: which tool calls run, which are refused, which need a decision.

Pure functions, safe to call from workflow code.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import posixpath
import re
from typing import Any

from durable_subagents._shell import split_commands
from durable_subagents.agents import READ_ONLY_TOOLS, AgentSpec, PermissionRule
from durable_subagents.agents._spec import EDIT_TOOLS, PROTECTED_PATHS, Action
from durable_subagents.types import ToolCall

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


def has_rules_for(spec: AgentSpec, tool_name: str, *, include_allow: bool = True) -> bool:
    """Whether any rule could apply to this tool (so its full main argument matters)."""
    return any(
        (include_allow or r.action != "allow") and fnmatch.fnmatchcase(tool_name, r.tool)
        for r in (*spec.permissions, *spec.restrictions)
    )


def mode_default(mode: str, tool_name: str, read_only: bool) -> Action:
    """What a permission mode does with a call that no rule matches.

    ``plan``: read-only tools only. ``default``: tools that change something ask.
    ``accept_edits``: file edits run, other tools that change something (bash) ask.
    ``dont_ask``: every tool the agent has runs.
    """
    if read_only or mode == "dont_ask":
        return "allow"
    if mode == "plan":
        return "deny"
    if mode == "accept_edits" and tool_name in EDIT_TOOLS:
        return "allow"
    return "ask"


def decide(
    spec: AgentSpec,
    tool_name: str,
    arguments: dict[str, Any],
    *,
    read_only: bool | None = None,
    parse_bash: bool = False,
    path: str | None = None,
) -> Action:
    """The action for one call.

    The agent's mode gives the answer for a call no rule matches; the agent's rules
    (last match wins) override it, except that ``plan`` never runs a tool that is not
    read-only. The spawn's restrictions are evaluated apart (no match means allow) and
    the stricter of the two answers wins, so a restriction can never widen the agent.
    ``read_only`` says whether the tool never changes anything (default: whether it is
    one of the built-in read-only tools).
    """
    if read_only is None:
        read_only = tool_name in READ_ONLY_TOOLS
    mode = spec.permission_mode
    if mode == "plan" and not read_only:
        return "deny"
    target = main_argument(arguments)
    default = mode_default(mode, tool_name, read_only)
    if path is not None:
        search = tool_name in SEARCH_TOOLS
        return _strictest(
            _evaluate_path(spec.permissions, tool_name, path, default, search=search),
            _evaluate_path(spec.restrictions, tool_name, path, "allow", search=search),
        )
    if parse_bash and tool_name == "bash" and isinstance(arguments.get("command"), str):
        return _strictest(
            _evaluate_bash(spec.permissions, target, default),
            _evaluate_bash(spec.restrictions, target, "allow"),
        )
    agent = _evaluate(spec.permissions, tool_name, target, default)
    return _strictest(agent, _evaluate(spec.restrictions, tool_name, target, "allow"))


def _evaluate_bash(rules: list[PermissionRule], command: str, default: Action) -> Action:
    """Rules applied to each simple command the line runs; the strictest answer wins.

    A command that cannot be known before it runs (an expansion, a substitution,
    ``eval``, ``bash -c``) is never allowed by a rule: where an allow rule matches it,
    or where no rule matches but the agent has deny or ask rules that might have,
    it asks. Deny and ask rules also see the whole line, as written.
    """
    relevant = [r for r in rules if fnmatch.fnmatchcase("bash", r.tool)]
    if not relevant:
        return default
    guarded = any(r.action != "allow" for r in relevant)
    whole = _evaluate(relevant, "bash", command, "allow")
    actions: list[Action] = [whole] if whole != "allow" else []
    pieces = split_commands(command)
    for piece in pieces:
        action: Action | None = None
        for rule in relevant:
            if fnmatch.fnmatchcase(piece.text, rule.pattern):
                action = rule.action
        if action is None:
            action = "ask" if default == "allow" and guarded and not piece.known else default
        elif action == "allow" and not piece.known:
            action = "ask"
        actions.append(action)
    if not pieces:
        actions.append(default)
    result = actions[0]
    for action in actions[1:]:
        result = _strictest(result, action)
    return result


def decide_v1(spec: AgentSpec, tool_name: str, arguments: dict[str, Any]) -> Action:
    """The rules of tasks started before modes had defaults (replay only).

    No rule match meant allow; ``accept_edits`` turned ``ask`` into ``allow`` for edits
    and ``dont_ask`` turned ``ask`` into ``deny``.
    """
    if spec.permission_mode == "plan" and tool_name not in READ_ONLY_TOOLS:
        return "deny"
    target = main_argument(arguments)
    action = _strictest(
        _evaluate(spec.permissions, tool_name, target, "allow"),
        _evaluate(spec.restrictions, tool_name, target, "allow"),
    )
    if action == "ask" and spec.permission_mode == "accept_edits" and tool_name in EDIT_TOOLS:
        return "allow"
    if action == "ask" and spec.permission_mode == "dont_ask":
        return "deny"
    return action


def protected_write(
    tool_name: str, arguments: dict[str, Any], *, read_only: bool, path: str | None = None
) -> str | None:
    """The protected entry (``.git``, ``.claude``...) a changing call's path goes through.

    Such writes ask in every permission mode (a rule's allow does not lift that; an
    agent opts in with ``write_protected_paths``). ``bash`` is left to its sandbox, which
    shows these entries read-only. Paths are normalized (``./``, ``..``, repeated ``/``)
    and every component counts, so ``a/../.git/config`` and ``/abs/.git/hooks/x`` match.
    """
    if read_only or tool_name == "bash":
        return None
    raw = arguments.get("path")
    for candidate in (raw, path):  # as written, and as resolved (through symlinks)
        if not isinstance(candidate, str):
            continue
        normalized = posixpath.normpath(candidate.replace("\\", "/"))
        for part in normalized.split("/"):
            if part in PROTECTED_PATHS:
                return part
    return None


SEARCH_TOOLS = ("grep", "list_files")
"""Tools whose path is a directory they search: rules on paths below it apply too."""


def _may_cover(directory: str, pattern: str) -> bool:
    """Whether a search of ``directory`` may reach a path ``pattern`` matches."""
    literal = re.split(r"[*?\[]", pattern, maxsplit=1)[0]
    if directory == ".":
        return not literal.startswith(("/", "../"))
    prefix = directory.rstrip("/") + "/"
    return literal.startswith(prefix) or prefix.startswith(literal)


def _evaluate_path(
    rules: list[PermissionRule], tool_name: str, path: str, action: Action, *, search: bool
) -> Action:
    """Rules over a resolved path; a search also meets deny/ask rules on paths below it.

    An absolute path (outside the workspace) is never allowed by a rule.
    """
    covered: list[Action] = []
    for rule in rules:
        if not fnmatch.fnmatchcase(tool_name, rule.tool):
            continue
        if fnmatch.fnmatchcase(path, rule.pattern):
            if rule.action == "allow" and path.startswith("/") and rule.pattern != "*":
                continue
            action = rule.action
        elif search and rule.action != "allow" and _may_cover(path, rule.pattern):
            covered.append(rule.action)
    for extra in covered:
        action = _strictest(action, extra)
    return action


def _evaluate(rules: list[PermissionRule], tool_name: str, target: str, action: Action) -> Action:
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


def call_hash(call: ToolCall) -> str:
    """A call's argument hash; arguments kept as a blob count by their reference."""
    arguments = dict(call.arguments)
    if call.arguments_ref:
        arguments["__ref__"] = call.arguments_ref
    return arguments_hash(arguments)


def result_record_name(call: ToolCall) -> str:
    """Where a finished call's result is kept in the blob store: by id and argument hash.

    ``run_tool`` writes it (a retried attempt answers from it); ``model_turn`` reads it
    for results the workflow passes by name, not inline (see ``ModelTurnInput``).
    """
    return f"call-{call.id}-{call_hash(call)}"


def arguments_preview(tool_name: str, arguments: dict[str, Any], limit: int = 80) -> str:
    """A one-line preview of a call, as shown in the Web UI (``bash · ls -la``)."""
    text = main_argument(arguments) or json.dumps(arguments, sort_keys=True)
    text = " ".join(text.split())
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return f"{tool_name} · {text}" if text else tool_name
