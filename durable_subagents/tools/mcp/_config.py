"""MCP servers as Claude Code declares them: ``.mcp.json`` and ``--mcp-config`` files.

The format is Claude Code's project one, ``{"mcpServers": {"NAME": {...}}}``: a stdio
server has ``command``, ``args`` and ``env`` (``"type": "stdio"`` optional); a remote
one has ``"type": "http"`` (streamable HTTP) or ``"sse"``, ``url`` and ``headers``.
``${VAR}`` and ``${VAR:-default}`` in ``command``, ``args``, ``env``, ``url`` and
``headers`` expand from the worker's environment, as Claude Code expands them. Several
files merge by server name, the later one winning. A server's ``timeout`` (seconds,
default 120, at most 600) bounds each of its calls.

Servers are the worker's resources, like its tools: what they are and the secrets in
their ``env`` and ``headers`` never enter a workflow's input, history, memo, span or
log. A server that cannot be used (a variable unset, a bad field) is reported, once,
and left out; the others stay.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from durable_subagents.connection._setting_values import expand_variables as expand

__all__ = [
    "DEFAULT_TIMEOUT",
    "MAX_TIMEOUT",
    "McpConfig",
    "McpServer",
    "expand",
    "load_mcp_config",
]

DEFAULT_TIMEOUT = 120.0
"""Seconds one call of a server's tool may take unless its ``timeout`` says."""
MAX_TIMEOUT = 600.0
"""The longest ``timeout`` a server may have."""
MAX_CONFIG_BYTES = 1 << 20
"""A configuration file larger than this is not read."""

SERVER_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]|_(?!_))*")
"""A server's name: letters, digits, ``-`` and single ``_``; ``__`` separates the parts
of a tool's name (``mcp__<server>__<tool>``)."""
MAX_SERVER_NAME = 32


class McpServer(BaseModel):
    """One MCP server a worker may call.

    Attributes:
        name: The name tools are offered under (``mcp__<name>__<tool>``).
        type: ``stdio`` (a process the worker starts), ``http`` (streamable HTTP) or
            ``sse``.
        command: A stdio server's program.
        args: Its arguments.
        env: Variables it gets besides the worker's tool environment (may hold secrets).
        url: A remote server's address.
        headers: Headers sent to a remote server (may hold secrets).
        timeout: Seconds one call may take.
        source: The file that declared it.
    """

    model_config = ConfigDict(frozen=True, extra="ignore")

    name: str
    type: Literal["stdio", "http", "sse"] = "stdio"
    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = Field(default_factory=dict, repr=False)
    url: str | None = None
    headers: Mapping[str, str] = Field(default_factory=dict, repr=False)
    timeout: float = Field(DEFAULT_TIMEOUT, gt=0, le=MAX_TIMEOUT)
    source: str = ""

    @field_validator("name")
    @classmethod
    def _name(cls, name: str) -> str:
        if len(name) > MAX_SERVER_NAME or not SERVER_NAME.fullmatch(name):
            raise ValueError(
                f"server name {name[:80]!r} is not usable in a tool's name: use up to "
                f"{MAX_SERVER_NAME} letters, digits, '-' and single '_' "
                "(tools are named mcp__<server>__<tool>)"
            )
        return name

    def check(self) -> None:
        """Raise ``ValueError`` naming what a server of its type lacks."""
        if self.type == "stdio":
            if not self.command:
                raise ValueError("a stdio server needs a 'command'")
            if self.url:
                raise ValueError("a stdio server has no 'url' (give 'type': 'http' or 'sse')")
        else:
            if not self.url or not re.match(r"https?://", self.url):
                raise ValueError(f"an {self.type} server needs an http(s) 'url'")
            if self.command:
                raise ValueError(f"an {self.type} server has no 'command'")


class McpConfig(BaseModel):
    """The MCP servers of a worker, and what kept others out.

    Attributes:
        servers: The usable servers, by name.
        problems: One line per server (or file) left out: where, and why.
    """

    servers: dict[str, McpServer] = Field(default_factory=dict)
    problems: list[str] = Field(default_factory=list)


def _expanded(
    raw: Mapping[str, Any], environ: Mapping[str, str]
) -> tuple[dict[str, Any], list[str]]:
    missing: list[str] = []
    out = dict(raw)
    for key in ("command", "url"):
        if isinstance(out.get(key), str):
            out[key] = expand(out[key], environ, missing)
    if isinstance(out.get("args"), list):
        out["args"] = [
            expand(a, environ, missing) if isinstance(a, str) else a for a in out["args"]
        ]
    for key in ("env", "headers"):
        if isinstance(out.get(key), dict):
            out[key] = {
                k: expand(v, environ, missing) if isinstance(v, str) else v
                for k, v in out[key].items()
            }
    return out, missing


def _read(path: Path) -> dict[str, Any]:
    with path.open("rb") as f:
        data = f.read(MAX_CONFIG_BYTES + 1)
    if len(data) > MAX_CONFIG_BYTES:
        raise ValueError(f"larger than {MAX_CONFIG_BYTES >> 10} KiB")
    loaded = json.loads(data)
    if not isinstance(loaded, dict) or not isinstance(loaded.get("mcpServers", {}), dict):
        raise ValueError('not {"mcpServers": {"NAME": {...}}}')
    servers: dict[str, Any] = loaded.get("mcpServers", {})
    return servers


def load_mcp_config(files: Sequence[Path], environ: Mapping[str, str]) -> McpConfig:
    """The servers declared in ``files`` (later ones win), expanded from ``environ``.

    A file that does not exist is skipped quietly only if it is a workspace's
    ``.mcp.json`` the caller found absent; a named file must exist.
    """
    config = McpConfig()
    for path in files:
        try:
            declared = _read(path)
        except FileNotFoundError:
            config.problems.append(f"MCP configuration {path}: no such file")
            continue
        except (OSError, ValueError) as err:
            why = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
            config.problems.append(f"MCP configuration {path}: cannot be read ({why})")
            continue
        for name, raw in declared.items():
            config.servers.pop(name, None)  # a later file's entry replaces, even unusable
            where = f"MCP server {name!r} ({path})"
            if not isinstance(raw, dict):
                config.problems.append(f"{where}: not an object")
                continue
            values, missing = _expanded(raw, environ)
            if missing:
                names = ", ".join(sorted(set(missing)))
                config.problems.append(
                    f"{where}: left out: the worker's environment lacks {names} "
                    "(set it, or give a default: ${VAR:-default})"
                )
                continue
            try:
                server = McpServer(name=name, source=str(path), **values)
                server.check()
            except ValidationError as err:
                first = err.errors()[0]
                field = ".".join(str(p) for p in first["loc"]) or "server"
                config.problems.append(f"{where}: left out: {field}: {first['msg']}")
                continue
            except (TypeError, ValueError) as err:
                config.problems.append(f"{where}: left out: {err}")
                continue
            config.servers[name] = server
    return config
