"""Custom agents from Markdown files with front matter.

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

Each file of a project is loaded on its own: a broken one is skipped with one warning
naming the file and line, the others load, and only spawning the broken agent fails
(``UnloadableAgent``), with the same message.

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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar, get_args

from pydantic import ValidationError

from durable_subagents.agents._builtin import BUILTIN_AGENTS
from durable_subagents.agents._front_matter import (
    FrontMatter,
    FrontMatterError,
    parse_front_matter,
)
from durable_subagents.agents._spec import (
    ALL_TOOLS,
    EDIT_TOOLS,
    MAX_OUTPUT_TOKENS,
    REASONING_EFFORTS,
    Action,
    AgentSpec,
    PermissionRule,
    ToolLimits,
)
from durable_subagents.errors import InvalidRequest

__all__ = [
    "AGENT_DIRS",
    "AgentFileError",
    "AgentFiles",
    "AgentFormat",
    "UnloadableAgent",
    "discover_agents",
    "find_project_root",
    "load_agent_file",
    "load_agents",
    "scan_agents",
]

logger = logging.getLogger(__name__)
T = TypeVar("T")

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
MODEL_PROVIDERS = ("openai", "anthropic", "scripted")
"""Provider prefixes a worker runs: ``activities.providers.PROVIDERS`` (a test keeps
them equal), repeated because the provider SDKs stay out of the workflow sandbox."""
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


class AgentFileError(InvalidRequest):
    """An agent file that cannot be loaded; the message names the file and line.

    ``agent`` is the name the file would have given its agent (its ``name`` field, or
    its stem when that cannot be read).
    """

    def __init__(
        self,
        message: str,
        *,
        path: Path,
        line: int | None,
        agent: str,
        detail: str | None = None,
    ) -> None:
        super().__init__(message)
        self.path = path
        self.line = line
        self.agent = agent
        self.detail = detail or message
        """The problem without the file and line (``'maxTurns' must be ...``)."""


class UnloadableAgent(AgentSpec):
    """Stands in for an agent whose file is broken: ``resolve_agent`` refuses it.

    It keeps the name taken, so a broken ``explore.md`` is reported at spawn instead of
    silently running the built-in ``explore``.
    """

    error: str
    """What is wrong and where (``agent file <path>:<line>: ...``)."""


@dataclass
class AgentFiles:
    """What a scan found: the agents, the file each came from, what was dropped.

    ``broken`` maps the name of each agent whose file could not be loaded to the
    problem (file, line, what to fix); those agents are in neither ``agents`` nor
    ``sources``.
    """

    agents: dict[str, AgentSpec] = field(default_factory=dict)
    sources: dict[str, Path] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    broken: dict[str, str] = field(default_factory=dict)


def load_agent_file(
    path: str | os.PathLike[str],
    *,
    format: AgentFormat | None = None,
    warnings: list[str] | None = None,
) -> AgentSpec:
    """Read one agent file.

    Args:
        path: A Markdown file with front matter.
        format: ``claude`` or ``opencode``; default: from the directory it is in
            (``.claude``/``.opencode``), else from its fields.
        warnings: Receives what was dropped (unknown tools, unused fields); without
            it, they are logged.

    Returns:
        The agent, named by its ``name`` field (Claude Code; ``:`` becomes ``.``) or its
        file stem.

    Raises:
        AgentFileError: An ``InvalidRequest``: the file is unreadable, has no front
            matter, lacks a description, or has a value that cannot be mapped without
            widening the agent; the message names the file and line.

    Example:
        >>> spec = load_agent_file(".claude/agents/reviewer.md")
    """
    found: list[str] = []
    try:
        return _load(Path(path), format, found)[0]
    finally:
        _hand_over(found, warnings)  # a broken file's other problems too


def scan_agents(root: str | os.PathLike[str]) -> AgentFiles:
    """Load every agent under ``root`` and say where each came from.

    ``root`` is a project directory (agents in ``.claude/agents``, ``.opencode/agent``
    and ``.opencode/agents``, read in that order); given one of these directories, its
    project's agents are read. Other Markdown files are never read as agents, nor is a
    ``README.md`` in an agents directory. A later file with an already-seen name
    overrides the earlier one, with a warning.
    Each file is loaded on its own: a broken one adds exactly one warning (file, line,
    problem) and an entry in ``broken``, and the scan goes on.

    Raises:
        InvalidRequest: ``root`` is not a directory.
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
            if not path.is_file() or path.name.lower() == "readme.md":
                continue
            file_warnings: list[str] = []
            try:
                spec, disabled = _load(path, fmt, file_warnings)
            except AgentFileError as err:
                found.warnings += file_warnings  # what else is wrong in it
                _warn(found.warnings, f"{err} (agent {err.agent!r} skipped)")
                if err.agent not in found.agents:
                    found.broken[err.agent] = str(err)
                continue
            found.warnings += file_warnings
            if disabled:
                continue
            if spec.name in found.agents:
                _warn(
                    found.warnings,
                    f"{path}: agent {spec.name!r} overrides the one in {found.sources[spec.name]}",
                )
            elif spec.name in BUILTIN_AGENTS:
                _warn(
                    found.warnings,
                    f"{path}: agent {spec.name!r} replaces the built-in {spec.name!r} (its "
                    "tools, mode and prompt are this file's); rename it to keep both",
                )
            found.broken.pop(spec.name, None)
            found.agents[spec.name] = spec
            found.sources[spec.name] = path
    return found


def load_agents(
    root: str | os.PathLike[str], *, warnings: list[str] | None = None
) -> dict[str, AgentSpec]:
    """The agents defined under a project directory, by name (see ``scan_agents``).

    A name may shadow a built-in agent: the project's own definition wins. An agent
    whose file is broken is an ``UnloadableAgent``: resolving it (spawning it) raises
    ``InvalidRequest`` with the file's problem, while every other agent works. Warnings
    go to ``warnings`` if given, else to the log.

    Raises:
        InvalidRequest: ``root`` is not a directory.
    """
    found = scan_agents(root)
    _hand_over(found.warnings, warnings)
    agents = dict(found.agents)
    for name, error in found.broken.items():
        agents[name] = UnloadableAgent(
            name=name, description=f"(cannot be used: {error})", error=error
        )
    return agents


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

    Broken files are skipped with a warning and their agents are ``UnloadableAgent``s,
    as in ``load_agents``.
    """
    root = find_project_root(start)
    return {} if root is None else load_agents(root, warnings=warnings)


# ------------------------------------------------------------------ parsing


@dataclass
class _File:
    """One agent file being read: where problems are, and where warnings go."""

    path: Path
    front: FrontMatter
    warnings: list[str]
    agent: str
    """The agent's name as far as it is known (the stem until ``name`` is read)."""

    @property
    def meta(self) -> dict[str, Any]:
        return self.front.fields

    problems: list[AgentFileError] = field(default_factory=list)
    """What makes the file broken, every field's problem (see ``done``)."""

    def fail(self, key: str | None, message: str) -> AgentFileError:
        line = self.front.line(key) if key is not None else 1
        return AgentFileError(
            f"agent file {self.path}:{line}: {message}",
            path=self.path,
            line=line,
            agent=self.agent,
            detail=message,
        )

    def parse(self, read: Callable[[], T], default: T) -> T:
        """``read()``, or ``default`` with its problem kept, so every field is checked."""
        try:
            return read()
        except AgentFileError as err:
            self.problems.append(err)
            return default

    def done(self) -> None:
        """Raise the file's problems as one error, in line order (the first names the file).

        Raises:
            AgentFileError: A field could not be read; the message lists every such field.
        """
        if not self.problems:
            return
        first, *rest = sorted(self.problems, key=lambda err: err.line or 0)
        if not rest:
            raise first
        more = "; ".join(f"line {err.line}: {err.detail}" for err in rest)
        raise AgentFileError(
            f"{first}; {more}",
            path=self.path,
            line=first.line,
            agent=self.agent,
            detail=f"{first.detail}; {more}",
        )

    def warn(self, key: str, message: str) -> None:
        _warn(self.warnings, f"{self.path}:{self.front.line(key)}: {message}")


def _load(path: Path, fmt: AgentFormat | None, warnings: list[str]) -> tuple[AgentSpec, bool]:
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
    file = _File(path, front, warnings, path.stem)
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


def _claude(f: _File) -> AgentSpec:
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
    _warn_unused(f, known | {"maxTurns"} | _CLAUDE_IGNORED | _SANDBOX_KEYS | _MODEL_KEYS)
    fields = {
        "model": _model(f),
        "tools": f.parse(lambda: _claude_tools(f, "tools"), None),
        "disallowed_tools": f.parse(lambda: _claude_tools(f, "disallowedTools"), None) or [],
        "permission_mode": _permission_mode(f),
        "max_turns": f.parse(lambda: _turns(f, "maxTurns"), None),
        **_sandbox_fields(f),
        **_model_settings(f),
    }
    f.done()
    return _spec(name=f.agent, description=description, system_prompt=f.front.body, **fields)


def _permission_mode(f: _File) -> str:
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


def _claude_tools(f: _File, key: str) -> list[str] | None:
    """Claude Code tool names (a comma-separated string or a list) as ours.

    Returns None when the field is absent (every tool, for ``tools``); ``*`` is every
    tool we have.
    """
    value = f.meta.get(key)
    if value is None:
        return None
    if isinstance(value, str):
        names = [n.strip() for n in value.split(",")]
    elif isinstance(value, list) and all(isinstance(n, str) for n in value):
        names = [n.strip() for n in value]
    else:
        raise f.fail(
            key,
            f"{key!r} must be a comma-separated string or a list of tool names, got {value!r}",
        )
    if "*" in names:
        return list(ALL_TOOLS)
    return _map_tools(f, key, [n for n in names if n], CLAUDE_TOOLS)


def _opencode(f: _File) -> AgentSpec:
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
    _warn_unused(f, known | _OPENCODE_IGNORED | _SANDBOX_KEYS | _MODEL_KEYS)
    fields = {
        "model": _model(f),
        "tools": None,
        "disallowed_tools": f.parse(lambda: _opencode_disabled(f), list[str]()),
        "permissions": f.parse(lambda: _opencode_permissions(f), list[PermissionRule]()),
        "permission_mode": "dont_ask",
        "max_turns": f.parse(lambda: _turns(f, steps_key), None),
        **_sandbox_fields(f),
        **_model_settings(f),
    }
    f.done()
    return _spec(
        name=f.agent, description=description.strip(), system_prompt=f.front.body, **fields
    )


def _opencode_disabled(f: _File) -> list[str]:
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


def _opencode_permissions(f: _File) -> list[PermissionRule]:
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
    f: _File, key: str, names: list[str], table: Mapping[str, tuple[str, ...]]
) -> list[str]:
    out: list[str] = []
    for n in names:
        if n not in table:
            f.warn(key, f"{key}: tool {n!r} is not one of ours; dropped")
        out += [t for t in table.get(n, ()) if t not in out]
    return out


def _model(f: _File) -> str:
    """A model name as ours: ``inherit``, an alias, ``provider/model`` or ``provider:model``.

    A name no worker can run (an unknown alias, another provider) is dropped with a
    warning: the agent runs on the spawner's or the worker's model instead.
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
    f.warn(
        "model",
        f"model {value!r} is not one we run (sonnet, opus, haiku, inherit, or "
        f"{'/'.join(MODEL_PROVIDERS)}:<model>); the spawner's or the worker's model is used",
    )
    return "inherit"


def _turns(f: _File, key: str) -> int | None:
    value = f.meta.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise f.fail(key, f"{key!r} must be an integer >= 1, got {value!r}")
    return value


def _name(f: _File, value: Any) -> str:
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


_SANDBOX_KEYS = {"network", "env", "limits", "context_window"}
"""Our own front matter (neither Claude Code nor OpenCode has it): the tool sandbox's,
and the model's context window."""


def _sandbox_fields(f: _File) -> dict[str, Any]:
    """Our own keys: ``network``, ``env``, ``limits`` and ``context_window``.

    ``network: true``, ``env: [NAME, ...]``, ``limits: {memory_mb: 512, ...}``,
    ``context_window: 32000``. A value that cannot be read is kept among the file's
    problems (see ``_File.done``).
    """
    meta = f.meta
    fields: dict[str, Any] = {}
    if "context_window" in meta:
        window = meta["context_window"]
        if isinstance(window, bool) or not isinstance(window, int) or window < 1024:
            f.problems.append(
                f.fail(
                    "context_window",
                    f"'context_window' must be a number of tokens (at least 1024), got {window!r}",
                )
            )
        else:
            fields["context_window"] = window
    if "network" in meta:
        if isinstance(meta["network"], bool):
            fields["network"] = meta["network"]
        else:
            f.problems.append(
                f.fail("network", f"'network' must be true or false, got {meta['network']!r}")
            )
    if "env" in meta:
        env = meta["env"]
        if isinstance(env, str):
            env = [n.strip() for n in env.split(",") if n.strip()]
        if isinstance(env, list) and all(isinstance(n, str) for n in env):
            fields["env"] = env
        else:
            f.problems.append(f.fail("env", f"'env' must be a list of variable names, got {env!r}"))
    if "limits" in meta:
        try:
            fields["limits"] = ToolLimits.model_validate(meta["limits"])
        except ValidationError as err:
            f.problems.append(
                f.fail(
                    "limits",
                    f"invalid 'limits' ({err.errors()[0]['msg']}); use processes, memory_mb, "
                    "file_size_mb, cpu_seconds, open_files",
                )
            )
    return fields


_MODEL_KEYS = {"reasoning_effort", "reasoningEffort", "temperature", "max_output_tokens"}
"""Model settings: ``reasoning_effort`` (OpenCode's ``reasoningEffort``), ``temperature``
and ``max_output_tokens``, in either format."""


def _model_settings(f: _File) -> dict[str, Any]:
    """The model settings a file gives; a value we cannot use is dropped with a warning."""
    meta = f.meta
    fields: dict[str, Any] = {}
    key = "reasoning_effort" if "reasoning_effort" in meta else "reasoningEffort"
    effort = meta.get(key)
    if isinstance(effort, str) and effort.strip().lower() in REASONING_EFFORTS:
        fields["reasoning_effort"] = effort.strip().lower()
    elif effort is not None:
        f.warn(
            key,
            f"{key} {effort!r} is not one of {', '.join(REASONING_EFFORTS)}; ignored (the "
            "model's default effort is used)",
        )
    temperature = meta.get("temperature")
    if temperature is not None:
        if (
            isinstance(temperature, int | float)
            and not isinstance(temperature, bool)
            and (0 <= temperature <= 2)
        ):
            fields["temperature"] = float(temperature)
        else:
            f.warn(
                "temperature",
                f"temperature {temperature!r} is not a number from 0 to 2; ignored",
            )
    tokens = meta.get("max_output_tokens")
    if tokens is not None:
        if (
            isinstance(tokens, int)
            and not isinstance(tokens, bool)
            and (1 <= tokens <= MAX_OUTPUT_TOKENS)
        ):
            fields["max_output_tokens"] = tokens
        else:
            f.warn(
                "max_output_tokens",
                f"max_output_tokens {tokens!r} is not an integer from 1 to "
                f"{MAX_OUTPUT_TOKENS}; ignored",
            )
    return fields


def _spec(*, max_turns: int | None, **fields: Any) -> AgentSpec:
    if max_turns is not None:
        fields["max_turns"] = max_turns
    return AgentSpec(**fields)


def _warn_unused(f: _File, known: set[str]) -> None:
    for key in f.meta:
        if key not in known:
            f.warn(key, f"field {key!r} is not used; ignored")


def _warn(warnings: list[str], message: str) -> None:
    warnings.append(message)


def _hand_over(found: list[str], warnings: list[str] | None) -> None:
    """Warnings go to the caller's list if it gave one, else to the log: never lost."""
    if warnings is not None:
        warnings.extend(found)
    else:
        for message in found:
            logger.warning("%s", message)
