"""Agent files read into ``AgentSpec``: Claude Code's and OpenCode's formats.

Two layouts are read, so a project's existing agents work unchanged:

- Claude Code: ``.claude/agents/*.md`` with ``name``, ``description``, ``tools``,
  ``disallowedTools``, ``model``, ``permissionMode`` and ``maxTurns``.
- OpenCode: ``.opencode/agent/*.md`` or ``.opencode/agents/*.md`` with ``description``,
  ``model``, ``tools`` (``{tool: true/false}``), ``permission``, ``steps``/``maxSteps``,
  ``mode``, ``temperature`` and ``reasoningEffort``; the agent's name is the file's stem.

Both also take our own model settings (``reasoning_effort``, ``temperature``,
``max_output_tokens``) and sandbox fields (``network``, ``env``, ``limits``).

In both the Markdown body is the system prompt. Files are read as leniently as Claude
Code reads them (see ``_front_matter``: front matter YAML rejects, such as an unquoted
description with ``Examples: <example>Context: ...``, is read field by field). What
cannot be honoured is dropped with a warning rather than refused, so one foreign value
does not make a whole agent unusable: a tool we do not have, a field we do not use, an
unknown ``permissionMode`` (``default`` is used), a model we cannot run (the spawner's
or the worker's is used). A name with ``:`` (a plugin namespace, ``plugin:agent``) is
addressed as ``plugin.agent``. Only what would widen an agent or cannot be guessed
(tools of the wrong type, an invalid permission action or limit) makes a file broken.

Modes map to ours: ``default``, ``acceptEdits`` and ``plan`` as named; ``dontAsk``
and ``bypassPermissions`` both become ``dont_ask`` (every tool the agent lists runs).
An OpenCode agent runs in ``dont_ask`` mode, as OpenCode allows what no ``permission``
entry restricts; its ``permission`` entries become rules. A worker never offers a tool
it does not have.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, get_args

from durable_subagents.agents._agent_file import (
    MODEL_KEYS,
    SANDBOX_KEYS,
    AgentFile,
    AgentFileError,
    model_settings,
    sandbox_fields,
    warn_unused,
)
from durable_subagents.agents._front_matter import (
    FrontMatterError,
    parse_front_matter,
)
from durable_subagents.agents._spec import (
    ALL_TOOLS,
    EDIT_TOOLS,
    MAX_DEPTH_LIMIT,
    Action,
    AgentSpec,
    PermissionRule,
)
from durable_subagents.agents._tool_names import mcp_name

__all__ = ["ENDPOINT_NAME", "MODEL_PROVIDERS", "AgentFormat", "read_agent_file"]


AgentFormat = Literal["claude", "opencode"]

CLAUDE_TOOLS: dict[str, tuple[str, ...]] = {
    "Read": ("read_file",),
    "Glob": ("list_files",),
    "LS": ("list_files",),
    "Grep": ("grep",),
    "Write": ("write_file",),
    "Edit": ("edit_file",),
    "MultiEdit": ("edit_file",),
    "Bash": ("bash",),
}
OPENCODE_TOOLS: dict[str, tuple[str, ...]] = {
    "read": ("read_file",),
    "glob": ("list_files",),
    "list": ("list_files",),
    "grep": ("grep",),
    "write": ("write_file",),
    "edit": ("edit_file",),
    "patch": ("edit_file",),
    "bash": ("bash",),
}
# OpenCode's `edit` permission covers every tool that changes a file.
_OPENCODE_PERMISSION_TOOLS = {**OPENCODE_TOOLS, "edit": EDIT_TOOLS, "*": ("*",)}

MODEL_ALIASES = {
    "sonnet": "anthropic:claude-sonnet-4-5",
    "opus": "anthropic:claude-opus-4-1",
    "haiku": "anthropic:claude-haiku-4-5",
}
MODEL_PROVIDERS = ("openai", "openai-responses", "anthropic", "bedrock", "vertex", "scripted")
"""Provider prefixes a worker runs: ``providers.PROVIDERS`` (a test keeps
them equal), repeated because the provider SDKs stay out of the workflow sandbox."""
ENDPOINT_NAME = re.compile(r"[a-z][a-z0-9_-]{0,31}")
"""An endpoint's name (``providers.ENDPOINT_NAME``, kept equal by the same test): an
agent may name ``ollama:llama3.1``, whose endpoint only the worker knows."""
_PERMISSION_MODES = {
    "default": "default",
    "acceptEdits": "accept_edits",
    "plan": "plan",
    "dontAsk": "dont_ask",
    "bypassPermissions": "dont_ask",
}
_OPENCODE_MODES = ("primary", "subagent", "all")
_CLAUDE_IGNORED = {"color"}
_OPENCODE_IGNORED = {"color", "top_p", "hidden", "prompt", "disable"}
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_SPAWN_TOOL = re.compile(r"(Agent|Task)(?:\((.*)\))?", re.DOTALL)
"""Claude Code's tool that spawns subagents, and the agents it may spawn."""


def read_agent_file(
    path: Path, fmt: AgentFormat | None, warnings: list[str]
) -> tuple[AgentSpec, bool]:
    """The agent in ``path`` and whether it is disabled (OpenCode's ``disable: true``)."""
    try:
        data = path.read_bytes()
    except OSError as err:
        raise AgentFileError(
            f"agent file {path}: cannot be read: {err.strerror or err}",
            path=path,
            line=None,
            agent=path.stem,
        ) from None
    try:
        front = parse_front_matter(data)
    except FrontMatterError as err:
        raise AgentFileError(
            f"agent file {path}:{err.line}: {err.message}",
            path=path,
            line=err.line,
            agent=path.stem,
        ) from None
    fmt = fmt or _guess_format(path, front.fields)
    file = AgentFile(path, front, warnings, path.stem)
    if fmt == "claude":
        return _claude(file), False
    return _opencode(file), front.fields.get("disable") is True


def _guess_format(path: Path, meta: Mapping[str, Any]) -> AgentFormat:
    parts = set(path.resolve().parent.parts)
    if ".claude" in parts:
        return "claude"
    if ".opencode" in parts:
        return "opencode"
    opencode_only = {"permission", "mode", "steps", "maxSteps"}
    if isinstance(meta.get("tools"), dict) or opencode_only & set(meta):
        return "opencode"
    return "claude"


def _claude(f: AgentFile) -> AgentSpec:
    f.agent = _name(f, f.meta.get("name"))
    description = _text(f.meta.get("description"))
    if not description:
        f.problems.append(
            f.fail(
                "description",
                "'description' is missing or empty; Claude Code agents need one saying when "
                "to use the agent (add a 'description: ...' line to the front matter)",
            )
        )
    known = {"name", "description", "tools", "disallowedTools", "model", "permissionMode"}
    warn_unused(f, known | {"maxTurns", "maxDepth"} | _CLAUDE_IGNORED | SANDBOX_KEYS | MODEL_KEYS)
    nothing: tuple[bool, list[str] | None] = (False, None)
    spawns = f.parse(lambda: _claude_spawns(f), nothing)
    fields = {
        "model": _model(f),
        "tools": f.parse(lambda: _claude_tools(f, "tools"), None),
        "disallowed_tools": f.parse(lambda: _claude_tools(f, "disallowedTools"), None) or [],
        "permission_mode": _permission_mode(f),
        "max_turns": f.parse(lambda: _turns(f, "maxTurns"), None),
        "may_spawn": spawns[0],
        "spawnable": spawns[1],
        "max_depth": f.parse(lambda: _depth(f, "maxDepth"), None),
        **sandbox_fields(f),
        **model_settings(f),
    }
    f.done()
    return _spec(name=f.agent, description=description, system_prompt=f.front.body, **fields)


def _permission_mode(f: AgentFile) -> str:
    mode = f.meta.get("permissionMode")
    if mode is None:
        return "default"
    if isinstance(mode, str) and mode.strip() in _PERMISSION_MODES:
        return _PERMISSION_MODES[mode.strip()]
    f.warn(
        "permissionMode",
        f"permissionMode {mode!r} is not one we know ({', '.join(_PERMISSION_MODES)}); "
        "using default (edits and commands ask first)",
    )
    return "default"


def _claude_tools(f: AgentFile, key: str) -> list[str] | None:
    """Claude Code tool names (a comma-separated string or a list) as ours.

    Returns None when the field is absent (every tool, for ``tools``); ``*`` is every
    tool we have.
    """
    names = _claude_names(f, key)
    if names is None:
        return None
    if "*" in names:
        return list(ALL_TOOLS)
    names = [n for n in names if not _SPAWN_TOOL.fullmatch(n)]  # see _claude_spawns
    return _map_tools(f, key, names, CLAUDE_TOOLS)


def _claude_names(f: AgentFile, key: str) -> list[str] | None:
    """A Claude Code tool list's names; None when the field is absent.

    A comma-separated string (the commas inside ``Agent(a, b)`` kept) or a list.
    """
    value = f.meta.get(key)
    if value is None:
        return None
    if isinstance(value, str):
        names, depth, start = [], 0, 0
        for i, char in enumerate(value):
            depth += {"(": 1, ")": -1}.get(char, 0)
            if char == "," and depth <= 0:
                names.append(value[start:i])
                start, depth = i + 1, 0
        names.append(value[start:])
    elif isinstance(value, list) and all(isinstance(n, str) for n in value):
        names = list(value)
    else:
        raise f.fail(
            key,
            f"{key!r} must be a comma-separated string or a list of tool names, got {value!r}",
        )
    return [n.strip() for n in names if n.strip()]


def _claude_spawns(f: AgentFile) -> tuple[bool, list[str] | None]:
    """Whether the agent may spawn subagents, and which (None: any its spawner knew).

    Claude Code's ``Agent`` tool (``Task`` before it was renamed) in ``tools``; written
    ``Agent(explore, reviewer)`` it names the agents it may spawn. Only a ``tools`` that
    lists it grants it (an agent with every tool does not spawn), and ``Agent`` in
    ``disallowedTools`` takes it away.
    """
    try:
        listed = _claude_names(f, "tools") or []
        denied = _claude_names(f, "disallowedTools") or []
    except AgentFileError:
        return False, None  # a list that cannot be read is reported as the tools
    spawns = [m for n in listed if (m := _SPAWN_TOOL.fullmatch(n))]
    if not spawns or any(_SPAWN_TOOL.fullmatch(n) for n in denied):
        return False, None
    if any(m.group(2) is None for m in spawns):
        return True, None  # a bare Agent: any agent
    names: list[str] = []
    for m in spawns:
        for name in m.group(2).split(","):
            name = name.strip().replace(":", ".")
            if not _NAME.match(name):
                raise f.fail("tools", f"{m.group(0)!r} names {name!r}, which is no agent name")
            if name not in names:
                names.append(name)
    return True, names


def _opencode(f: AgentFile) -> AgentSpec:
    f.agent = _name(f, None)
    description = f.meta.get("description", "")
    if isinstance(description, (int, float)) and not isinstance(description, bool):
        description = str(description)
    if not isinstance(description, str):
        f.problems.append(
            f.fail(
                "description",
                f"'description' must be text, got {description!r}; quote it if YAML read it "
                "as another type",
            )
        )
        description = ""
    mode = f.meta.get("mode", "all")
    if mode not in _OPENCODE_MODES:
        f.warn("mode", f"mode {mode!r} is not one of {', '.join(_OPENCODE_MODES)}; ignored")
    steps_key = "steps" if "steps" in f.meta else "maxSteps"
    known = {"description", "model", "tools", "permission", "mode", "steps", "maxSteps"}
    warn_unused(f, known | _OPENCODE_IGNORED | SANDBOX_KEYS | MODEL_KEYS)
    fields = {
        "model": _model(f),
        "tools": None,
        "disallowed_tools": f.parse(lambda: _opencode_disabled(f), list[str]()),
        "permissions": f.parse(lambda: _opencode_permissions(f), list[PermissionRule]()),
        "permission_mode": "dont_ask",
        "max_turns": f.parse(lambda: _turns(f, steps_key), None),
        **sandbox_fields(f),
        **model_settings(f),
    }
    f.done()
    return _spec(
        name=f.agent, description=description.strip(), system_prompt=f.front.body, **fields
    )


def _opencode_disabled(f: AgentFile) -> list[str]:
    """Our tools an OpenCode ``tools`` map turns off.

    Every tool starts enabled; keys are globs over OpenCode's names, applied in order,
    the last key that matches one of a tool's names deciding (so ``{"*": false, read:
    true}`` leaves only read_file).
    """
    value = f.meta.get("tools")
    if value is None:
        return []
    if not isinstance(value, dict) or not all(isinstance(v, bool) for v in value.values()):
        raise f.fail("tools", f"'tools' must map tool names to true or false, got {value!r}")
    enabled: dict[str, bool] = {}
    for key, on in value.items():
        names = [n for n in OPENCODE_TOOLS if fnmatch.fnmatchcase(n, str(key))]
        if not names:
            f.warn("tools", f"tool {key!r} is not one of ours; dropped")
        for n in names:
            for ours in OPENCODE_TOOLS[n]:
                enabled[ours] = on
    return [t for t, on in enabled.items() if not on]


def _opencode_permissions(f: AgentFile) -> list[PermissionRule]:
    """OpenCode's ``permission`` map as our rules.

    Our rules are evaluated last-match-wins, so each ``*`` (the catch-all) comes first
    and the specific patterns after it, in the file's order.
    """
    value = f.meta.get("permission")
    if value is None:
        return []
    if isinstance(value, str):
        value = {"*": value}
    if not isinstance(value, dict):
        raise f.fail("permission", f"'permission' must map tools to allow/ask/deny, got {value!r}")
    rules: list[PermissionRule] = []
    for key, setting in sorted(value.items(), key=lambda kv: kv[0] != "*"):
        tools = _OPENCODE_PERMISSION_TOOLS.get(str(key))
        if tools is None:
            f.warn("permission", f"permission for {key!r} is not for one of our tools; dropped")
            continue
        patterns = setting if isinstance(setting, dict) else {"*": setting}
        for pattern, action in sorted(patterns.items(), key=lambda kv: kv[0] != "*"):
            if action not in get_args(Action):
                raise f.fail(
                    "permission",
                    f"permission {key}: {pattern!r} is {action!r}; use allow, ask or deny",
                )
            rules += [PermissionRule(tool=t, pattern=str(pattern), action=action) for t in tools]
    return rules


def _map_tools(
    f: AgentFile, key: str, names: list[str], table: Mapping[str, tuple[str, ...]]
) -> list[str]:
    out: list[str] = []
    for n in names:
        mcp = mcp_name(n)
        if mcp is not None:
            # A tool of an MCP server (or all of a server's): kept as Claude Code names
            # it; a worker whose servers lack it says so when the agent runs.
            if mcp not in out:
                out.append(mcp)
            continue
        if n not in table:
            f.warn(key, f"{key}: tool {n!r} is not one of ours; dropped")
        out += [t for t in table.get(n, ()) if t not in out]
    return out


def _model(f: AgentFile) -> str:
    """A model name as ours: ``inherit``, an alias, ``provider/model`` or ``provider:model``.

    A name no worker can run (an unknown alias, another provider) is dropped with a
    warning: the agent runs on the spawner's or the worker's model instead. An
    endpoint's name (``NAME:model``, the colon form only) is kept: the worker knows its
    endpoints, and refuses a model of one it lacks.
    """
    value = f.meta.get("model")
    if value is None:
        return "inherit"
    name = value.strip() if isinstance(value, str) else ""
    if name in ("", "inherit") and isinstance(value, str):
        return "inherit"
    if name.lower() in MODEL_ALIASES:
        return MODEL_ALIASES[name.lower()]
    slash, colon = name.find("/"), name.find(":")
    if slash > 0 and (colon < 0 or slash < colon):
        provider, _, model = name.partition("/")
        name = f"{provider}:{model}"
    elif colon < 0 and name.startswith("claude-"):
        name = f"anthropic:{name}"
    elif colon < 0 and name.startswith(("gpt-", "o1", "o3", "o4")):
        name = f"openai:{name}"
    if name == "scripted" or (":" in name and name.partition(":")[0] in MODEL_PROVIDERS):
        return name
    prefix, sep, rest = (value.strip() if isinstance(value, str) else "").partition(":")
    if sep and rest.strip() and ENDPOINT_NAME.fullmatch(prefix):
        return value.strip()
    f.warn(
        "model",
        f"model {value!r} is not one we run (sonnet, opus, haiku, inherit, or "
        f"{'/'.join(MODEL_PROVIDERS)}:<model>, or an endpoint's NAME:<model>); the "
        "spawner's or the worker's model is used",
    )
    return "inherit"


def _turns(f: AgentFile, key: str) -> int | None:
    value = f.meta.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise f.fail(key, f"{key!r} must be an integer >= 1, got {value!r}")
    return value


def _depth(f: AgentFile, key: str) -> int | None:
    value = f.meta.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_DEPTH_LIMIT:
        raise f.fail(key, f"{key!r} must be an integer from 0 to {MAX_DEPTH_LIMIT}, got {value!r}")
    return value


def _name(f: AgentFile, value: Any) -> str:
    """The agent's name: ``value`` (or the stem when None), with ``:`` as ``.``.

    A name we cannot use as written (spaces, other punctuation) gives way to the file's
    stem, with a warning; the file is broken only when neither works.
    """
    written = _text(value) if value is not None else f.path.stem
    name = written.replace(":", ".")
    if _NAME.match(name):
        return name
    if value is not None and _NAME.match(f.path.stem):
        f.warn(
            "name",
            f"agent name {written!r} is not valid (1-64 letters, digits, '.', '_' or '-', "
            f"starting with a letter or digit); named {f.path.stem!r} after the file",
        )
        return f.path.stem
    raise f.fail(
        "name" if value is not None else None,
        f"agent name {written!r} is not valid: use 1-64 letters, digits, '.', '_' or '-', "
        "starting with a letter or digit",
    )


def _text(value: Any) -> str:
    """A scalar field as text (YAML reads ``description: 2024`` as a number)."""
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    return ""


def _spec(*, max_turns: int | None, **fields: Any) -> AgentSpec:
    if max_turns is not None:
        fields["max_turns"] = max_turns
    return AgentSpec(**fields)
