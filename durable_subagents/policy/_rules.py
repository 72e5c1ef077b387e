"""Permission rules: which tool calls run, which are refused, which need a decision.

Pure functions, safe to call from workflow code.
"""

from __future__ import annotations

import fnmatch
import functools
import hashlib
import json
import re
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict

from durable_subagents.agents import READ_ONLY_TOOLS, AgentSpec, PermissionRule
from durable_subagents.agents._protected import PROTECTED_PATHS, path_parts, protected_entry
from durable_subagents.agents._spec import EDIT_TOOLS, Action, PermissionMode
from durable_subagents.agents._tool_names import is_mcp, rule_names
from durable_subagents.policy._shell import command_words
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


def has_rules_for(spec: AgentSpec, tool_name: str) -> bool:
    """Whether any rule could apply to this tool (so its full main argument matters)."""
    return any(rule_names(r.tool, tool_name) for r in (*spec.permissions, *spec.restrictions))


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
    path: str | None = None,
    written: str | None = None,
) -> Action:
    """The action for one call.

    The agent's mode gives the answer for a call no rule matches; the agent's rules
    (last match wins) override it, except that ``plan`` never runs a tool that is not
    read-only. The spawn's restrictions are evaluated apart (no match means allow) and
    the stricter of the two answers wins, so a restriction can never widen the agent.
    ``read_only`` says whether the tool never changes anything (default: whether it is
    one of the built-in read-only tools). ``path`` is the call's path resolved through
    symlinks; ``written`` the same path as written, where it differs (the rules judge
    both, and the stricter answer wins). A ``bash`` line is judged command by command
    (see ``_evaluate_bash``).
    """
    if read_only is None:
        read_only = tool_name in READ_ONLY_TOOLS
    mode = spec.permission_mode
    target = main_argument(arguments)
    if mode == "plan" and not read_only:
        if not is_mcp(tool_name):
            return "deny"
        # An MCP tool in plan: only where a rule allows it (read-only by the rules'
        # word; the server's own readOnlyHint is never trusted).
        agent = _evaluate(spec.permissions, tool_name, target, "deny")
        return _strictest(agent, _evaluate(spec.restrictions, tool_name, target, "allow"))
    default = mode_default(mode, tool_name, read_only)
    if path is not None:
        search = tool_name in SEARCH_TOOLS
        seen = [path] if written is None or written == path else [path, written]
        actions = [
            _path_action(spec.permissions, spec.restrictions, tool_name, p, default, search)
            for p in seen
        ]
        return max(actions, key=_ORDER.__getitem__)
    if tool_name == "bash" and isinstance(arguments.get("command"), str):
        return _strictest(
            _evaluate_bash(spec.permissions, target, default),
            _evaluate_bash(spec.restrictions, target, "allow"),
        )
    agent = _evaluate(spec.permissions, tool_name, target, default)
    return _strictest(agent, _evaluate(spec.restrictions, tool_name, target, "allow"))


def rules_for(rules: Sequence[PermissionRule], *tools: str) -> tuple[PermissionRule, ...]:
    """The rules that can judge a call of one of ``tools`` (no other rule matches one)."""
    return tuple(r for r in rules if any(rule_names(r.tool, t) for t in tools))


class PathRules(BaseModel):
    """The rules that judged one call, kept to judge the paths it reaches when it runs.

    A file tool opens the path its call was decided on, or refuses; these rules judge
    what else it opens (a symlink a search meets, a path a custom tool builds), as if
    the call had named it. Plain data: it travels with the call to wherever it runs.
    """

    model_config = ConfigDict(frozen=True)

    tool: str
    read_only: bool
    mode: PermissionMode
    permissions: tuple[PermissionRule, ...] = ()
    restrictions: tuple[PermissionRule, ...] = ()

    @classmethod
    def of(cls, spec: AgentSpec, tool_name: str, *, read_only: bool) -> PathRules:
        """The agent's and the spawn's rules for ``tool_name`` (others cannot match)."""
        return cls(
            tool=tool_name,
            read_only=read_only,
            mode=spec.permission_mode,
            permissions=rules_for(spec.permissions, tool_name),
            restrictions=rules_for(spec.restrictions, tool_name),
        )

    def action(self, path: str) -> Action:
        """What the rules say of the call reaching ``path`` (resolved, as rules see it)."""
        if self.mode == "plan" and not self.read_only:
            return "deny"
        default = mode_default(self.mode, self.tool, self.read_only)
        return _path_action(
            list(self.permissions), list(self.restrictions), self.tool, path, default, False
        )


def _path_action(
    permissions: list[PermissionRule],
    restrictions: list[PermissionRule],
    tool_name: str,
    path: str,
    default: Action,
    search: bool,
) -> Action:
    """The agent's rules over ``default``, and the spawn's over allow: the stricter wins."""
    return _strictest(
        _evaluate_path(permissions, tool_name, path, default, search=search),
        _evaluate_path(restrictions, tool_name, path, "allow", search=search),
    )


def _evaluate_bash(rules: list[PermissionRule], command: str, default: Action) -> Action:
    """Rules applied to each simple command the line runs; the strictest answer wins.

    A command that cannot be known before it runs (an expansion, a substitution,
    ``eval``, ``bash -c``) is never allowed by a rule: where an allow rule matches it,
    or where no rule matches but the agent has deny or ask rules that might have,
    it asks. Deny and ask rules also see the whole line, as written, and each command
    without its leading assignments and with its name's directory removed
    (``X=1 /bin/rm x`` meets a rule on ``rm *``).
    """
    relevant = [r for r in rules if fnmatch.fnmatchcase("bash", r.tool)]
    if not relevant:
        return default
    guarded = any(r.action != "allow" for r in relevant)
    matcher = _Matcher.of(tuple(r.pattern for r in relevant))
    stop_at = "ask" if "deny" not in {default, *(r.action for r in relevant)} else "deny"
    result: Action = "allow"
    if guarded:
        whole = matcher.last(command)
        result = relevant[whole].action if whole is not None else "allow"
    pieces = command_words(command)
    for words, known in pieces:
        index = matcher.last(" ".join(words))
        action: Action
        if index is None:
            action = "ask" if default == "allow" and guarded and not known else default
        else:
            action = relevant[index].action
            if action == "allow" and not known:
                action = "ask"
        if guarded and ("/" in words[0] or "=" in words[0]):
            for view in _views(words):
                seen = matcher.last(view)
                if seen is not None and _ORDER[relevant[seen].action] > _ORDER[action]:
                    action = relevant[seen].action
        if _ORDER[action] > _ORDER[result]:
            result = action
            if result == stop_at:
                break  # nothing later can make it stricter
    if not pieces:
        result = _strictest(result, default)
    return result


_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\[[^\]]*\])?\+?=")


def _views(words: tuple[str, ...]) -> list[str]:
    """What deny and ask rules also see of a command, besides its words.

    The command without its assignments (``X=1 rm x``: ``rm x``), and with its name's
    directory removed (``/bin/rm x``: ``rm x``). These only make a line stricter: an
    allow rule matching one does not count.
    """
    start = 0
    while start < len(words) - 1 and _ASSIGNMENT.match(words[start]):
        start += 1
    views = [" ".join(words[start:])] if start else []
    name = words[start]
    if "/" in name and name.rsplit("/", 1)[1]:
        views.append(" ".join((name.rsplit("/", 1)[1], *words[start + 1 :])))
    return views


_ANY, _EQUALS, _PREFIX, _CONTAINS, _GLOB = range(5)


class _Matcher:
    """Glob patterns ready to say which of them matched a text last.

    The shapes rules mostly have (``*``, a literal, ``git log*``, ``*rm -rf*``) are
    tested as strings; any other pattern as a regular expression.
    """

    def __init__(self, patterns: tuple[str, ...]) -> None:
        self._checks: list[tuple[int, int, str, re.Pattern[str] | None]] = []
        for index in reversed(range(len(patterns))):  # the last rule that matches wins
            pattern = patterns[index]
            inner = pattern.strip("*")
            kind = _GLOB
            if not any(c in inner for c in "*?["):
                if not inner:
                    kind = _ANY if pattern else _EQUALS
                elif pattern == inner:
                    kind = _EQUALS
                elif pattern == inner + "*" * (len(pattern) - len(inner)):
                    kind = _PREFIX
                elif pattern.startswith("*") and pattern.endswith("*"):
                    kind = _CONTAINS
            regex = re.compile(fnmatch.translate(pattern)) if kind == _GLOB else None
            self._checks.append((index, kind, inner, regex))
        self._by_first_word: dict[str, list[tuple[int, int, str, re.Pattern[str] | None]]] = {}

    @staticmethod
    @functools.lru_cache(maxsize=256)
    def of(patterns: tuple[str, ...]) -> _Matcher:
        return _Matcher(patterns)

    def last(self, text: str) -> int | None:
        """The index of the last pattern that matches all of ``text``, or None."""
        first = text.partition(" ")[0]
        checks = self._by_first_word.get(first)
        if checks is None:
            checks = [c for c in self._checks if _may_match(c[1], c[2], first)]
            if len(self._by_first_word) >= _FIRST_WORDS_KEPT:
                self._by_first_word.clear()
            self._by_first_word[first] = checks
        for index, kind, inner, regex in checks:
            if kind == _PREFIX:
                if text.startswith(inner):
                    return index
            elif kind == _CONTAINS:
                if inner in text:
                    return index
            elif kind == _ANY:
                return index
            elif kind == _EQUALS:
                if text == inner:
                    return index
            elif regex is not None and regex.match(text):
                return index
        return None


_FIRST_WORDS_KEPT = 512


def _may_match(kind: int, inner: str, first: str) -> bool:
    """Whether a pattern may match a text whose first word is ``first``.

    A literal or a prefix must start with that word; other patterns may match anything.
    """
    if kind == _EQUALS or (kind == _PREFIX and " " in inner):
        return inner.partition(" ")[0] == first
    if kind == _PREFIX:
        return first.startswith(inner)
    return True


def protected_write(
    tool_name: str,
    arguments: dict[str, Any],
    *,
    read_only: bool,
    path: str | None = None,
    protected: Sequence[str] | None = None,
) -> str | None:
    """The protected entry (``.git``, ``.mcp.json``...) a changing call's path goes through.

    Such writes ask in every permission mode (a rule's allow does not lift that; an
    agent opts in with ``write_protected_paths``). ``bash`` is left to its sandbox, which
    shows these entries read-only. Paths are normalized (``./``, ``..``, repeated ``/``)
    and every component counts, so ``a/../.git/config`` and ``/abs/.git/hooks/x`` match.

    Args:
        tool_name: The call's tool.
        arguments: The call's arguments (its ``path`` is checked as written).
        read_only: Whether the tool never changes anything.
        path: The path as the worker resolved it, through symlinks (checked too).
        protected: The list the worker that resolved the call reported, matched
            ignoring case; None: ``PROTECTED_PATHS``.
    """
    if read_only or tool_name == "bash":
        return None
    entries = PROTECTED_PATHS if protected is None else protected
    raw = arguments.get("path")
    for candidate in (raw, path):  # as written, and as resolved (through symlinks)
        if not isinstance(candidate, str):
            continue
        found = protected_entry(path_parts(candidate), entries)
        if found is not None:
            return found
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
        if not rule_names(rule.tool, tool_name):
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
        if rule_names(rule.tool, tool_name) and fnmatch.fnmatchcase(target, rule.pattern):
            action = rule.action
    return action


_ORDER: dict[Action, int] = {"allow": 0, "ask": 1, "deny": 2}


def _strictest(a: Action, b: Action) -> Action:
    return a if _ORDER[a] >= _ORDER[b] else b


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


def arguments_preview(
    tool_name: str, arguments: dict[str, Any], limit: int = 80, *, resolved: str | None = None
) -> str:
    """A one-line preview of a call, as shown in the Web UI (``bash · ls -la``).

    ``resolved``: where the call's path leads through symlinks, when that is not what it
    says (``write_file · hk/x → .git/hooks/x``). It keeps up to half of ``limit``; the
    argument is cut to make room.
    """
    text = main_argument(arguments) or json.dumps(arguments, sort_keys=True)
    text = " ".join(text.split())
    suffix = ""
    if resolved is not None:
        lands = " ".join(resolved.split())
        if len(lands) > limit // 2:
            lands = lands[: limit // 2 - 1] + "…"
        suffix = f" → {lands}"
    room = limit - len(suffix)
    if len(text) > room:
        text = text[: room - 1] + "…"
    text += suffix
    return f"{tool_name} · {text}" if text else tool_name
