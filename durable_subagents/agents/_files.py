"""Custom agents from a project's Markdown files: found, loaded, and kept apart if broken.

A project's agents live in ``.claude/agents``, ``.opencode/agent`` and
``.opencode/agents`` of its root, the repository (``find_project_root``), never of a
directory below it (see ``_file_formats`` for what each file may say). Each file is
loaded on its own: a broken one is skipped with one warning naming the file and line,
the others load, and only spawning the broken agent fails (``UnloadableAgent``), with
the same message.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from durable_subagents.agents._agent_file import AgentFileError, hand_over_warnings, warn
from durable_subagents.agents._builtin import BUILTIN_AGENTS
from durable_subagents.agents._file_formats import AgentFormat, read_agent_file
from durable_subagents.agents._spec import (
    AgentSpec,
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
AGENT_DIRS: tuple[tuple[str, AgentFormat], ...] = (
    (".claude/agents", "claude"),
    (".opencode/agent", "opencode"),
    (".opencode/agents", "opencode"),
)
"""Where agents live under a project root, in load order (later files override)."""

ROOT_MARKER = ".git"
"""What marks a project root: a repository's ``.git`` directory, or the ``.git`` file of a
worktree or a submodule. ``.claude`` and ``.opencode`` mark nothing: a model that can
write files can make them anywhere below the root."""


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
        return read_agent_file(Path(path), format, found)[0]
    finally:
        hand_over_warnings(found, warnings)  # a broken file's other problems too


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
                spec, disabled = read_agent_file(path, fmt, file_warnings)
            except AgentFileError as err:
                found.warnings += file_warnings  # what else is wrong in it
                warn(found.warnings, f"{err} (agent {err.agent!r} skipped)")
                if err.agent not in found.agents:
                    found.broken[err.agent] = str(err)
                continue
            found.warnings += file_warnings
            if disabled:
                continue
            if spec.name in found.agents:
                warn(
                    found.warnings,
                    f"{path}: agent {spec.name!r} overrides the one in {found.sources[spec.name]}",
                )
            elif spec.name in BUILTIN_AGENTS:
                warn(
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
    hand_over_warnings(found.warnings, warnings)
    agents = dict(found.agents)
    for name, error in found.broken.items():
        agents[name] = UnloadableAgent(
            name=name, description=f"(cannot be used: {error})", error=error
        )
    return agents


def find_project_root(start: str | os.PathLike[str] | None = None) -> Path:
    """The project root of ``start`` (default: cwd): where its agent files are read.

    That is the first directory from ``start`` upwards holding ``.git`` (a directory, or
    the file of a worktree or a submodule), as Claude Code reads the ``.claude`` of the
    repository it runs in. With no ``.git`` above, it is ``start`` itself, never a
    directory in between. A ``.claude`` or ``.opencode`` below the root is not a root:
    it shadows nothing, and its files are never read.
    """
    here = Path(start if start is not None else Path.cwd()).resolve()
    for directory in (here, *here.parents):
        if (directory / ROOT_MARKER).exists():
            return directory
    return here


def discover_agents(
    start: str | os.PathLike[str] | None = None, *, warnings: list[str] | None = None
) -> dict[str, AgentSpec]:
    """The agents of the project root of ``start`` (default: cwd); see ``find_project_root``.

    Broken files are skipped with a warning and their agents are ``UnloadableAgent``s,
    as in ``load_agents``. A start directory that does not exist has no agents.
    """
    root = find_project_root(start)
    return load_agents(root, warnings=warnings) if root.is_dir() else {}
