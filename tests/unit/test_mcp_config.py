"""MCP servers as Claude Code declares them, and their tools as a model is offered them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from durable_subagents.tools.mcp import load_mcp_config
from durable_subagents.tools.mcp._names import (
    expand_tool_names,
    offerable_schema,
    offered_name,
    server_of,
)


def write(path: Path, servers: dict[str, object]) -> Path:
    path.write_text(json.dumps({"mcpServers": servers}))
    return path


def test_claude_codes_format_with_variables_expanded(tmp_path: Path) -> None:
    project = write(
        tmp_path / ".mcp.json",
        {
            "git": {"command": "uvx", "args": ["mcp-server-git", "--repository", "${REPO:-.}"]},
            "api": {
                "type": "http",
                "url": "https://${HOST}/mcp",
                "headers": {"Authorization": "Bearer ${TOKEN}"},
            },
            "old": {"type": "sse", "url": "http://localhost:9/sse", "timeout": 30},
        },
    )
    config = load_mcp_config([project], {"HOST": "mcp.example.com", "TOKEN": "s3cret"})
    assert config.problems == []
    git, api, old = config.servers["git"], config.servers["api"], config.servers["old"]
    assert (git.type, git.command, git.args) == (
        "stdio",
        "uvx",
        ("mcp-server-git", "--repository", "."),
    )
    assert (api.url, dict(api.headers)) == (
        "https://mcp.example.com/mcp",
        {"Authorization": "Bearer s3cret"},
    )
    assert "s3cret" not in repr(api)  # secrets stay out of logs
    assert (old.type, old.timeout, git.timeout) == ("sse", 30, 120)


def test_later_files_win_and_unusable_servers_are_said_once(tmp_path: Path) -> None:
    first = write(tmp_path / "a.json", {"git": {"command": "a"}, "time": {"command": "t"}})
    second = write(
        tmp_path / "b.json",
        {
            "git": {"command": "b", "env": {"KEY": "${MISSING}"}},
            "bad name": {"command": "x"},
            "web": {"type": "http"},
            "slow": {"command": "s", "timeout": 601},
            "mcp__x": {"command": "y"},
        },
    )
    config = load_mcp_config([first, second, tmp_path / "none.json"], {})
    assert sorted(config.servers) == ["time"]  # git's later entry replaced it, unusable
    problems = "\n".join(config.problems)
    assert "MCP server 'git'" in problems and "lacks MISSING" in problems
    assert "'bad name'" in problems and "is not usable in a tool's name" in problems
    assert "'web'" in problems and "needs an http(s) 'url'" in problems
    assert "'slow'" in problems and "timeout" in problems
    assert "'mcp__x'" in problems  # '__' would split a tool's name
    assert f"{tmp_path / 'none.json'}: no such file" in problems


def test_a_file_that_is_no_configuration_is_said(tmp_path: Path) -> None:
    (tmp_path / "x.json").write_text("[1, 2]")
    (tmp_path / "y.json").write_text("{not json")
    config = load_mcp_config([tmp_path / "x.json", tmp_path / "y.json"], {})
    assert len(config.problems) == 2 and config.servers == {}


def test_names_as_claude_code_gives_them() -> None:
    assert offered_name("git", "git_status") == "mcp__git__git_status"
    assert offered_name("db", "run.query") == "mcp__db__run_query"
    assert offered_name("db", "x" * 60) is None
    assert server_of("mcp__git__git_status") == server_of("mcp__git") == "git"
    assert server_of("bash") is None
    available = ["bash", "mcp__git__git_status", "mcp__git__git_log", "mcp__time__now"]
    assert expand_tool_names(["read_file", "mcp__git", "mcp__time__now"], available) == [
        "read_file",
        "mcp__git__git_status",
        "mcp__git__git_log",
        "mcp__time__now",
    ]


def test_schemas_are_resolved_for_both_wires() -> None:
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {"item": {"$ref": "#/$defs/Item"}, "tree": {"$ref": "#/$defs/Node"}},
        "$defs": {
            "Item": {"type": "object", "properties": {"n": {"type": "integer"}}},
            "Node": {"type": "object", "properties": {"child": {"$ref": "#/$defs/Node"}}},
        },
    }
    offered = offerable_schema(schema)
    text = json.dumps(offered)
    assert "$ref" not in text and "$defs" not in text and "$schema" not in text
    assert offered["properties"]["item"]["properties"]["n"] == {"type": "integer"}
    assert offerable_schema({}) == {"type": "object", "properties": {}}
    with pytest.raises(ValueError, match="of type 'string'"):
        offerable_schema({"type": "string"})
    with pytest.raises(ValueError, match="bytes once resolved"):
        offerable_schema(
            {
                "type": "object",
                "properties": {f"p{i}": {"description": "x" * 100} for i in range(400)},
            }
        )
