"""Custom agents from Markdown files with YAML front matter.

Two layouts are read, so a project's existing agents work unchanged:

- Claude Code: ``.claude/agents/*.md`` with ``name``, ``description``, ``tools``,
  ``disallowedTools``, ``model``, ``permissionMode`` and ``maxTurns``.
- OpenCode: ``.opencode/agent/*.md`` or ``.opencode/agents/*.md`` with ``description``,
  ``model``, ``tools`` (``{tool: true/false}``), ``permission``, ``steps``/``maxSteps``
  and ``mode``; the agent's name is the file's stem.

In both the Markdown body is the system prompt. What cannot be honoured (a tool we do
not have, a field we do not use) is dropped with a warning rather than refused, so one
foreign tool name does not make a whole agent unusable; a file that cannot be read as
an agent at all is an ``InvalidRequest`` naming the file.

Modes map to ours: ``default``, ``acceptEdits`` and ``plan`` as named; ``dontAsk``
and ``bypassPermissions`` both become ``dont_ask`` (every tool the agent lists runs).
An OpenCode agent runs in ``dont_ask`` mode, as OpenCode allows what no ``permission``
entry restricts; its ``permission`` entries become rules. A worker never offers a tool
it does not have.
"""

from __future__ import annotations

import fnmatch
import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast, get_args

import yaml
from pydantic import ValidationError

from durable_subagents.agents._spec import (
    ALL_TOOLS,
    EDIT_TOOLS,
    Action,
    AgentSpec,
    PermissionRule,
    ToolLimits,
)
from durable_subagents.errors import InvalidRequest

__all__ = [
    "AGENT_DIRS",
    "AgentFiles",
    "AgentFormat",
    "discover_agents",
    "find_project_root",
    "load_agent_file",
    "load_agents",
    "scan_agents",
]

logger = logging.getLogger(__name__)

AgentFormat = Literal["claude", "opencode"]

AGENT_DIRS: tuple[tuple[str, AgentFormat], ...] = (
    (".claude/agents", "claude"),
    (".opencode/agent", "opencode"),
    (".opencode/agents", "opencode"),
)
"""Where agents live under a project root, in load order (later files override)."""

PROJECT_MARKERS = (".claude", ".opencode", ".git")

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
_PERMISSION_MODES = {
    "default": "default",
    "acceptEdits": "accept_edits",
    "plan": "plan",
    "dontAsk": "dont_ask",
    "bypassPermissions": "dont_ask",
}
_OPENCODE_MODES = ("primary", "subagent", "all")
_CLAUDE_IGNORED = {"color"}
_OPENCODE_IGNORED = {"color", "temperature", "top_p", "hidden", "prompt", "disable"}
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_FRONT_MATTER = re.compile(r"\A\ufeff?---[ \t]*\r?\n(.*?)^---[ \t]*$\r?\n?", re.S | re.M)


@dataclass
class AgentFiles:
    """What a scan found: the agents, the file each came from, and what was dropped."""

    agents: dict[str, AgentSpec] = field(default_factory=dict)
    sources: dict[str, Path] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def load_agent_file(
    path: str | os.PathLike[str],
    *,
    format: AgentFormat | None = None,
    warnings: list[str] | None = None,
) -> AgentSpec:
    """Read one agent file.

    Args:
        path: A Markdown file with YAML front matter.
        format: ``claude`` or ``opencode``; default: from the directory it is in
            (``.claude``/``.opencode``), else from its fields.
        warnings: Receives what was dropped (unknown tools, unused fields); without
            it, they are logged.

    Returns:
        The agent, named by its ``name`` field (Claude Code) or its file stem.

    Raises:
        InvalidRequest: The file is unreadable, has no front matter or bad YAML, lacks a
            required field, or has a value we cannot map; the message names the file.

    Example:
        >>> spec = load_agent_file(".claude/agents/reviewer.md")
    """
    found: list[str] = []
    spec = _load(Path(path), format, found)[0]
    _hand_over(found, warnings)
    return spec


def scan_agents(root: str | os.PathLike[str]) -> AgentFiles:
    """Load every agent under ``root`` and say where each came from.

    ``root`` is a project directory (agents in ``.claude/agents``, ``.opencode/agent``
    and ``.opencode/agents``, read in that order); given one of these directories, its
    project's agents are read. Other Markdown files (a README) are never read as agents.
    A later file with an already-seen name overrides the earlier one, with a warning.

    Raises:
        InvalidRequest: ``root`` is not a directory, or a file in it is malformed.
    """
    root = Path(root)
    if not root.is_dir():
        raise InvalidRequest(f"agents directory {str(root)!r} does not exist or is not a directory")
    if root.name in ("agent", "agents") and root.parent.name in (".claude", ".opencode"):
        root = root.parent.parent  # given the agents directory itself: its project
    found = AgentFiles()
    for sub, fmt in AGENT_DIRS:
        directory = root / sub
        for path in sorted(directory.glob("*.md")):
            if not path.is_file():
                continue
            spec, disabled = _load(path, fmt, found.warnings)
            if disabled:
                continue
            if spec.name in found.agents:
                _warn(
                    found.warnings,
                    f"{path}: agent {spec.name!r} overrides the one in {found.sources[spec.name]}",
                )
            found.agents[spec.name] = spec
            found.sources[spec.name] = path
    return found


def load_agents(
    root: str | os.PathLike[str], *, warnings: list[str] | None = None
) -> dict[str, AgentSpec]:
    """The agents defined under a project directory, by name (see ``scan_agents``).

    A name may shadow a built-in agent: the project's own definition wins. Warnings go
    to ``warnings`` if given, else to the log.

    Raises:
        InvalidRequest: ``root`` is not a directory, or a file in it is malformed.
    """
    found = scan_agents(root)
    _hand_over(found.warnings, warnings)
    return found.agents


def find_project_root(start: str | os.PathLike[str] | None = None) -> Path | None:
    """The project ``start`` (default: cwd) is in, or None.

    That is the first directory from ``start`` upwards holding ``.claude``, ``.opencode``
    or ``.git``: agents belong to the nearest project, not to every directory above it.
    """
    here = Path(start if start is not None else Path.cwd()).resolve()
    for directory in (here, *here.parents):
        if any((directory / marker).exists() for marker in PROJECT_MARKERS):
            return directory
    return None


def discover_agents(
    start: str | os.PathLike[str] | None = None, *, warnings: list[str] | None = None
) -> dict[str, AgentSpec]:
    """The agents of the project ``start`` (default: cwd) is in; see ``find_project_root``.

    Raises:
        InvalidRequest: An agent file in the project is malformed.
    """
    root = find_project_root(start)
    return {} if root is None else load_agents(root, warnings=warnings)


# ------------------------------------------------------------------ parsing


def _load(path: Path, fmt: AgentFormat | None, warnings: list[str]) -> tuple[AgentSpec, bool]:
    """The agent in ``path`` and whether it is disabled (OpenCode's ``disable: true``)."""
    meta, body = _read(path)
    fmt = fmt or _guess_format(path, meta)
    if fmt == "claude":
        return _claude(path, meta, body, warnings), False
    return _opencode(path, meta, body, warnings), meta.get("disable") is True


def _read(path: Path) -> tuple[dict[str, Any], str]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise InvalidRequest(f"agent file {path}: cannot be read: {err}") from None
    match = _FRONT_MATTER.match(text)
    if match is None:
        raise InvalidRequest(
            f"agent file {path}: no YAML front matter; start the file with a '---' line, "
            "the fields (name, description, ...), then another '---' line"
        )
    try:
        meta = yaml.safe_load(match.group(1))
    except yaml.YAMLError as err:
        raise InvalidRequest(f"agent file {path}: front matter is not valid YAML: {err}") from None
    if meta is None:
        meta = {}
    if not isinstance(meta, dict):
        raise InvalidRequest(
            f"agent file {path}: front matter must be a mapping of fields, "
            f"got {type(meta).__name__}"
        )
    return cast(dict[str, Any], meta), text[match.end() :].strip()


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


def _claude(path: Path, meta: dict[str, Any], body: str, warnings: list[str]) -> AgentSpec:
    name = _name(path, meta.get("name", path.stem))
    description = meta.get("description")
    if not isinstance(description, str) or not description.strip():
        raise InvalidRequest(
            f"agent file {path}: 'description' is missing or empty; Claude Code agents "
            "need one saying when to use the agent"
        )
    mode = meta.get("permissionMode", "default")
    if mode not in _PERMISSION_MODES:
        raise InvalidRequest(
            f"agent file {path}: unknown permissionMode {mode!r}; use one of: "
            + ", ".join(_PERMISSION_MODES)
        )
    known = {"name", "description", "tools", "disallowedTools", "model", "permissionMode"}
    _warn_unused(path, meta, known | {"maxTurns"} | _CLAUDE_IGNORED | _SANDBOX_KEYS, warnings)
    tools = _claude_tools(path, "tools", meta.get("tools"), warnings)
    disallowed = _claude_tools(path, "disallowedTools", meta.get("disallowedTools"), warnings)
    return _spec(
        name=name,
        description=description.strip(),
        system_prompt=body,
        model=_model(path, meta.get("model")),
        tools=tools,
        disallowed_tools=disallowed or [],
        permission_mode=_PERMISSION_MODES[mode],
        max_turns=_turns(path, "maxTurns", meta.get("maxTurns")),
        **_sandbox_fields(path, meta),
    )


def _claude_tools(path: Path, key: str, value: Any, warnings: list[str]) -> list[str] | None:
    """Claude Code tool names (a comma-separated string or a list) as ours.

    Returns None when the field is absent (every tool, for ``tools``); ``*`` is every
    tool we have.
    """
    if value is None:
        return None
    if isinstance(value, str):
        names = [n.strip() for n in value.split(",")]
    elif isinstance(value, list) and all(isinstance(n, str) for n in value):
        names = [n.strip() for n in value]
    else:
        raise InvalidRequest(
            f"agent file {path}: {key!r} must be a comma-separated string or a list of tool "
            f"names, got {value!r}"
        )
    if "*" in names:
        return list(ALL_TOOLS)
    return _map_tools(path, key, [n for n in names if n], CLAUDE_TOOLS, warnings)


def _opencode(path: Path, meta: dict[str, Any], body: str, warnings: list[str]) -> AgentSpec:
    description = meta.get("description", "")
    if not isinstance(description, str):
        raise InvalidRequest(
            f"agent file {path}: 'description' must be text, got {description!r}; "
            "quote it if YAML read it as another type"
        )
    mode = meta.get("mode", "all")
    if mode not in _OPENCODE_MODES:
        raise InvalidRequest(
            f"agent file {path}: unknown mode {mode!r}; use one of: " + ", ".join(_OPENCODE_MODES)
        )
    steps_key = "steps" if "steps" in meta else "maxSteps"
    known = {"description", "model", "tools", "permission", "mode", "steps", "maxSteps"}
    _warn_unused(path, meta, known | _OPENCODE_IGNORED | _SANDBOX_KEYS, warnings)
    return _spec(
        name=_name(path, path.stem),
        description=description.strip(),
        system_prompt=body,
        model=_model(path, meta.get("model")),
        tools=None,
        disallowed_tools=_opencode_disabled(path, meta.get("tools"), warnings),
        permissions=_opencode_permissions(path, meta.get("permission"), warnings),
        permission_mode="dont_ask",
        max_turns=_turns(path, steps_key, meta.get(steps_key)),
        **_sandbox_fields(path, meta),
    )


def _opencode_disabled(path: Path, value: Any, warnings: list[str]) -> list[str]:
    """Our tools an OpenCode ``tools`` map turns off.

    Every tool starts enabled; keys are globs over OpenCode's names, applied in order,
    the last key that matches one of a tool's names deciding (so ``{"*": false, read:
    true}`` leaves only read_file).
    """
    if value is None:
        return []
    if not isinstance(value, dict) or not all(isinstance(v, bool) for v in value.values()):
        raise InvalidRequest(
            f"agent file {path}: 'tools' must map tool names to true or false, got {value!r}"
        )
    enabled: dict[str, bool] = {}
    for key, on in value.items():
        names = [n for n in OPENCODE_TOOLS if fnmatch.fnmatchcase(n, str(key))]
        if not names:
            _warn(warnings, f"{path}: tool {key!r} is not one of ours; dropped")
        for n in names:
            for ours in OPENCODE_TOOLS[n]:
                enabled[ours] = on
    return [t for t, on in enabled.items() if not on]


def _opencode_permissions(path: Path, value: Any, warnings: list[str]) -> list[PermissionRule]:
    """OpenCode's ``permission`` map as our rules.

    Our rules are evaluated last-match-wins, so each ``*`` (the catch-all) comes first
    and the specific patterns after it, in the file's order.
    """
    if value is None:
        return []
    if isinstance(value, str):
        value = {"*": value}
    if not isinstance(value, dict):
        raise InvalidRequest(
            f"agent file {path}: 'permission' must map tools to allow/ask/deny, got {value!r}"
        )
    rules: list[PermissionRule] = []
    for key, setting in sorted(value.items(), key=lambda kv: kv[0] != "*"):
        tools = _OPENCODE_PERMISSION_TOOLS.get(str(key))
        if tools is None:
            _warn(warnings, f"{path}: permission for {key!r} is not for one of our tools; dropped")
            continue
        patterns = setting if isinstance(setting, dict) else {"*": setting}
        for pattern, action in sorted(patterns.items(), key=lambda kv: kv[0] != "*"):
            if action not in get_args(Action):
                raise InvalidRequest(
                    f"agent file {path}: permission {key}: {pattern!r} is {action!r}; "
                    "use allow, ask or deny"
                )
            rules += [PermissionRule(tool=t, pattern=str(pattern), action=action) for t in tools]
    return rules


def _map_tools(
    path: Path,
    key: str,
    names: list[str],
    table: Mapping[str, tuple[str, ...]],
    warnings: list[str],
) -> list[str]:
    out: list[str] = []
    for n in names:
        if n not in table:
            _warn(warnings, f"{path}: {key}: tool {n!r} is not one of ours; dropped")
        out += [t for t in table.get(n, ()) if t not in out]
    return out


def _model(path: Path, value: Any) -> str:
    """A model name as ours: ``inherit``, an alias, ``provider/model`` or ``provider:model``."""
    if value is None:
        return "inherit"
    if not isinstance(value, str):
        raise InvalidRequest(f"agent file {path}: 'model' must be text, got {value!r}")
    name = value.strip()
    if name in ("", "inherit"):
        return "inherit"
    if name.lower() in MODEL_ALIASES:
        return MODEL_ALIASES[name.lower()]
    slash, colon = name.find("/"), name.find(":")
    if slash > 0 and (colon < 0 or slash < colon):
        provider, _, model = name.partition("/")
        return f"{provider}:{model}"
    if colon < 0 and name.startswith("claude-"):
        return f"anthropic:{name}"
    if colon < 0 and name.startswith(("gpt-", "o1", "o3", "o4")):
        return f"openai:{name}"
    return name  # an unknown provider is reported, with the valid forms, at spawn


def _turns(path: Path, key: str, value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidRequest(f"agent file {path}: {key!r} must be an integer >= 1, got {value!r}")
    return value


def _name(path: Path, value: Any) -> str:
    if not isinstance(value, str) or not _NAME.match(value):
        raise InvalidRequest(
            f"agent file {path}: agent name {value!r} is not valid: use 1-64 letters, digits, "
            "'.', '_' or '-', starting with a letter or digit"
        )
    return value


_SANDBOX_KEYS = {"network", "env", "limits"}
"""Our own front matter for the tool sandbox (neither Claude Code nor OpenCode has it)."""


def _sandbox_fields(path: Path, meta: Mapping[str, Any]) -> dict[str, Any]:
    """``network: true``, ``env: [NAME, ...]`` and ``limits: {memory_mb: 512, ...}``."""
    fields: dict[str, Any] = {}
    if "network" in meta:
        if not isinstance(meta["network"], bool):
            raise InvalidRequest(
                f"agent file {path}: 'network' must be true or false, got {meta['network']!r}"
            )
        fields["network"] = meta["network"]
    if "env" in meta:
        env = meta["env"]
        if isinstance(env, str):
            env = [n.strip() for n in env.split(",") if n.strip()]
        if not isinstance(env, list) or not all(isinstance(n, str) for n in env):
            raise InvalidRequest(
                f"agent file {path}: 'env' must be a list of variable names, got {env!r}"
            )
        fields["env"] = env
    if "limits" in meta:
        try:
            fields["limits"] = ToolLimits.model_validate(meta["limits"])
        except ValidationError as err:
            raise InvalidRequest(
                f"agent file {path}: invalid 'limits' ({err.errors()[0]['msg']}); use "
                "processes, memory_mb, file_size_mb, cpu_seconds, open_files"
            ) from None
    return fields


def _spec(*, max_turns: int | None, **fields: Any) -> AgentSpec:
    if max_turns is not None:
        fields["max_turns"] = max_turns
    return AgentSpec(**fields)


def _warn_unused(path: Path, meta: Mapping[str, Any], known: set[str], warnings: list[str]) -> None:
    for key in meta:
        if key not in known:
            _warn(warnings, f"{path}: field {key!r} is not used; ignored")


def _warn(warnings: list[str], message: str) -> None:
    warnings.append(message)


def _hand_over(found: list[str], warnings: list[str] | None) -> None:
    """Warnings go to the caller's list if it gave one, else to the log: never lost."""
    if warnings is not None:
        warnings.extend(found)
    else:
        for message in found:
            logger.warning("%s", message)
