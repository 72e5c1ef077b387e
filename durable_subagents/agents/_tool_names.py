"""Tool names an agent lists: a tool's own, or ``mcp__<server>`` for all of a server's.

MCP tools are named as Claude Code names them, ``mcp__<server>__<tool>``; an agent, a
spawn or a ``disallowedTools`` list may name one, or ``mcp__<server>`` (also written
``mcp__<server>__*``) for every tool of that server. Pure: workflow code decides with it.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Sequence

__all__ = [
    "MCP_PREFIX",
    "covers",
    "expand_tool_names",
    "is_mcp",
    "mcp_name",
    "rule_names",
    "server_of",
]

MCP_PREFIX = "mcp__"
_MCP_NAME = re.compile(r"mcp__[A-Za-z0-9](?:[A-Za-z0-9-]|_(?!_))*(?:__[A-Za-z0-9_-]+)?")


def is_mcp(name: str) -> bool:
    """Whether ``name`` is an MCP tool's name or a server's (``mcp__git``)."""
    return name.startswith(MCP_PREFIX)


def mcp_name(name: str) -> str | None:
    """``name`` as an agent's MCP tool entry (``mcp__s__*`` is ``mcp__s``); None if it is none."""
    if name.endswith("__*"):
        name = name[:-3]
    return name if _MCP_NAME.fullmatch(name) else None


def server_of(name: str) -> str | None:
    """The server of ``mcp__<server>`` or ``mcp__<server>__<tool>``; None for other names."""
    if not is_mcp(name):
        return None
    return name[len(MCP_PREFIX) :].split("__", 1)[0] or None


def _whole_server(name: str) -> bool:
    return is_mcp(name) and "__" not in name[len(MCP_PREFIX) :]


def covers(listed: str, name: str) -> bool:
    """Whether an agent's entry ``listed`` allows (or disallows) tool ``name``."""
    return listed == name or (_whole_server(listed) and name.startswith(f"{listed}__"))


def rule_names(rule_tool: str, name: str) -> bool:
    """Whether a permission rule's ``tool`` names tool ``name``.

    A glob (``mcp__git__*``, ``*``), or an MCP server's name (``mcp__git``) for every
    tool of that server, as in an agent's ``tools`` and ``disallowed_tools``.
    """
    return fnmatch.fnmatchcase(name, rule_tool) or covers(rule_tool, name)


def expand_tool_names(names: Iterable[str], available: Sequence[str]) -> list[str]:
    """``names`` with each ``mcp__<server>`` replaced by that server's tools in ``available``.

    Other names stay as given (a name the worker lacks is the caller's to report).
    """
    out: list[str] = []
    for name in names:
        if _whole_server(name):
            out += [a for a in available if covers(name, a) and a not in out]
        elif name not in out:
            out.append(name)
    return out
