"""Protected paths: workspace entries that make code run without anyone asking for it.

A git hook runs at the next ``git commit``, ``core.fsmonitor`` at the next ``git
status``, an ``.envrc`` when a shell enters the directory, an editor's task or file
watcher when the folder is opened, an agent's hook or MCP server when that agent
starts. A hostile model that writes one of these has its command run later, on the
host, by whoever comes next, outside any sandbox and after any approval. So a change
to one of them asks a person, in every permission mode, and a command's changes there
are held back for a person's decision, or refused where nobody is asked (unless the
agent opts in with ``write_protected_paths``).

An entry is a name (``.git``, ``.mcp.json``) or a short relative path (``.github/hooks``)
and protects itself and everything under it, whether it exists yet or not. It matches
anywhere under the workspace, as a run of whole path components: each of these tools
looks in the directory it runs in, or at a repository's root, and any directory of a
workspace can be one (a nested repository, a submodule, a project someone opens on its
own). Matching ignores case, since on a case-insensitive filesystem ``.GIT/config`` is
``.git/config``.

The list is fixed in the code and a worker may add to it (``SUBAGENTS_PROTECTED_PATHS``),
never take from it.

Pure and deterministic: workflow code decides with it.
"""

from __future__ import annotations

import functools
import posixpath
from collections.abc import Iterable, Sequence

__all__ = [
    "PROTECTED_PATHS",
    "aliases",
    "extended_protected_paths",
    "holds_protected",
    "parse_protected_paths",
    "path_parts",
    "protected_entry",
]


def _lefthook() -> tuple[str, ...]:
    """Every name lefthook reads a configuration under (it merges a ``-local`` one)."""
    names: list[str] = []
    for base in ("lefthook", "lefthook-local"):
        for ext in ("yml", "yaml", "toml", "json", "jsonc"):
            names += [f"{base}.{ext}", f".{base}.{ext}", f".config/{base}.{ext}"]
    return tuple(names)


_GIT = (
    # hooks, and config whose core.fsmonitor, core.hooksPath, filters and aliases run
    # commands; also a .git file that points a worktree elsewhere
    ".git",
    # the usual core.hooksPath of repositories that keep their hooks in the tree
    ".githooks",
    # submodules: a changed url or path makes the next `git submodule update` fetch
    # and check out what it names (and run its configuration's commands there)
    ".gitmodules",
)
_OTHER_VCS = (
    # Mercurial: hgrc [hooks] run at the owner's next `hg status`, commit, pull
    ".hg",
    # Jujutsu: repo config (pager, diff formatter, fix tools) runs at every `jj` command
    ".jj",
    # Sapling: like Mercurial's, hooks and config in .sl/config
    ".sl",
)
_HOOK_MANAGERS = (
    # husky: core.hooksPath is .husky/_, the hooks are .husky/<hook>
    ".husky",
    # pre-commit reads the first, prek all three, at every commit once installed
    ".pre-commit-config.yaml",
    ".pre-commit-config.yml",
    "prek.toml",
    # lefthook: its configuration in every name and format it reads, and the
    # directories of its script hooks
    *_lefthook(),
    ".lefthook",
    ".lefthook-local",
)
_SHELL_ENVIRONMENT = (
    # direnv runs it when a shell enters the directory, and keeps its layouts and
    # cached environments (with their PATH) in .direnv
    ".envrc",
    ".direnv",
    # pdb runs its commands at every `python -m pdb` and `breakpoint()` in the directory
    ".pdbrc",
    # mise: env, hooks.enter and templates run when a shell enters the directory
    # (trust is given by path, so a trusted file that changes runs the change)
    "mise.toml",
    ".mise.toml",
    "mise.local.toml",
    ".mise.local.toml",
    ".mise",
    "mise/config.toml",
    ".config/mise.toml",
    ".config/mise",
)
_CI = (
    # CI pipelines: pushed, they run with the repository's secrets
    ".github/workflows",
    ".github/actions",
    ".gitlab-ci.yml",
    ".gitlab",
    ".circleci",
    ".travis.yml",
    ".buildkite",
    "azure-pipelines.yml",
    "bitbucket-pipelines.yml",
    "Jenkinsfile",
    ".drone.yml",
    ".woodpecker",
    ".woodpecker.yml",
)
_EDITORS = (
    # tasks run when the folder opens, settings that name programs, mcp.json
    ".vscode",
    # JetBrains: file watchers run on save; run configurations and startup tasks
    ".idea",
    # language servers and MCP servers of the project's settings
    ".zed",
    # initializeCommand runs on the host before the container is built
    ".devcontainer",
    ".devcontainer.json",
)
_AGENTS = (
    # Claude Code: agents, commands, hooks and permissions; project MCP servers
    ".claude",
    ".mcp.json",
    # OpenCode: agents, plugins, MCP servers
    ".opencode",
    "opencode.json",
    "opencode.jsonc",
    # Cursor: hooks.json, mcp.json, rules
    ".cursor",
    # Gemini CLI: settings.json (MCP servers, hooks, tool discovery command)
    ".gemini",
    # Codex: config.toml (MCP servers, approval policy, sandbox mode)
    ".codex",
    # Windsurf: hooks.json, workflows, rules
    ".windsurf",
    # Continue: mcpServers/, config
    ".continue",
    # aider: lint-cmd and test-cmd, run after every edit with auto-lint and auto-test
    ".aider.conf.yml",
    # GitHub Copilot's agents: hooks that run commands around each tool call
    ".github/hooks",
    # Cline: hooks under .clinerules/hooks, project configuration
    ".clinerules",
    ".cline",
    # Kiro: hooks that run a command when a file is saved; MCP servers
    ".kiro",
    # Roo Code, Kilo Code, Amazon Q: the project's MCP servers
    ".roo",
    ".kilocode",
    ".amazonq",
)

PROTECTED_PATHS: tuple[str, ...] = (
    *_GIT,
    *_OTHER_VCS,
    *_HOOK_MANAGERS,
    *_SHELL_ENVIRONMENT,
    *_CI,
    *_EDITORS,
    *_AGENTS,
)
"""Workspace entries that run code, or configure a program that runs code, without
being asked: a changing file tool call through one asks a person in every mode, and a
command's changes there are held for a person (or refused), unless the agent opts in
with ``write_protected_paths``.
Matched anywhere under the workspace, ignoring case (see the module's docstring)."""


def path_parts(path: str) -> list[str]:
    """``path``'s components, with backslashes, ``./``, ``..`` and repeated ``/`` normalized."""
    return posixpath.normpath(path.replace("\\", "/")).split("/")


@functools.lru_cache(maxsize=32)
def _index(entries: tuple[str, ...]) -> dict[str, list[tuple[str, ...]]]:
    """The entries' components, by their first component."""
    index: dict[str, list[tuple[str, ...]]] = {}
    for entry in entries:
        parts = tuple(p.casefold() for p in entry.split("/"))
        index.setdefault(parts[0], []).append(parts)
    return index


def protected_entry(parts: Sequence[str], entries: Sequence[str]) -> str | None:
    """The entry ``parts`` (a path's components) is, or lies inside; None if none.

    Args:
        parts: The path's components (``path_parts``, or a walk's resolved parts).
        entries: The protected paths (``PROTECTED_PATHS``, or a worker's extended list).
    """
    index = _index(tuple(entries))
    folded = [p.casefold() for p in parts]
    for i, part in enumerate(folded):
        for entry in index.get(part, ()):
            if tuple(folded[i : i + len(entry)]) == entry:
                return "/".join(entry)
    return None


def holds_protected(parts: Sequence[str], entries: Sequence[str]) -> str | None:
    """The entry a symlink at ``parts`` would stand in for, or None.

    ``.config`` is not protected, but ``.config/mise.toml`` is: a symlink named
    ``.config`` makes whatever it leads to be read as ``.config``, so it is judged as
    the protected entry it would hold.
    """
    folded = tuple(p.casefold() for p in parts)
    for entries_of_first in _index(tuple(entries)).values():
        for entry in entries_of_first:
            for k in range(1, len(entry)):
                if folded[-k:] == entry[:k]:
                    return "/".join(entry)
    return None


def aliases(entries: Sequence[str]) -> list[tuple[str, tuple[str, ...]]]:
    """The protected entries of more than one component, as ``(first, rest)``.

    A directory reached through a symlink named ``first`` holds ``rest`` as if it were
    the protected entry.
    """
    return [
        (entry[0], entry[1:])
        for entries_of_first in _index(tuple(entries)).values()
        for entry in entries_of_first
        if len(entry) > 1
    ]


def parse_protected_paths(text: str) -> tuple[str, ...]:
    """Comma-separated entries (``SUBAGENTS_PROTECTED_PATHS``), normalized.

    Raises:
        ValueError: an entry that is absolute, empty, climbs with ``..``, holds a glob
            or a NUL; the message names it and says what an entry may be.
    """
    out: list[str] = []
    for raw in text.split(","):
        item = raw.strip()
        if not item:
            continue
        entry = item.replace("\\", "/").rstrip("/")
        while entry.startswith("./"):
            entry = entry[2:]
        parts = entry.split("/")
        if (
            entry.startswith("/")
            or "\0" in entry
            or any(c in entry for c in "*?[")
            or any(p in ("", ".", "..") for p in parts)
        ):
            raise ValueError(
                f"SUBAGENTS_PROTECTED_PATHS entry {item!r} is not a relative path of plain "
                "names; give names like '.tool-config' or paths like 'deploy/hooks' "
                "(matched anywhere under the workspace, no globs, no '..')"
            )
        if entry not in out:
            out.append(entry)
    return tuple(out)


def extended_protected_paths(extra: Iterable[str]) -> tuple[str, ...]:
    """``PROTECTED_PATHS`` with a worker's own entries after it (each once)."""
    out = list(PROTECTED_PATHS)
    out += [e for e in extra if e not in out]
    return tuple(out)
