"""MCP tools in an agent's lists, its rules and its spawns: Claude Code's names."""

from __future__ import annotations

from pathlib import Path

import pytest

from durable_subagents import InvalidRequest
from durable_subagents.agents import AgentSpec, PermissionRule, load_agent_file
from durable_subagents.agents._tool_names import covers, expand_tool_names, mcp_name
from durable_subagents.policy._rules import decide
from durable_subagents.spawn._narrow import narrow
from durable_subagents.spawn._options import SpawnOptions

AVAILABLE = ["read_file", "bash", "mcp__git__git_status", "mcp__git__git_commit", "mcp__time__now"]


def test_a_servers_name_stands_for_all_its_tools() -> None:
    assert covers("mcp__git", "mcp__git__git_status")
    assert not covers("mcp__git", "mcp__github__x")
    assert covers("mcp__git__git_status", "mcp__git__git_status")
    assert expand_tool_names(["mcp__git", "read_file"], AVAILABLE) == [
        "mcp__git__git_status",
        "mcp__git__git_commit",
        "read_file",
    ]
    assert [mcp_name(n) for n in ("mcp__git__*", "mcp__a-b__c.d", "mcp__x y", "mcp____t")] == [
        "mcp__git",
        None,
        None,
        None,
    ]


def test_an_agents_tools_and_disallowed_tools_name_servers() -> None:
    spec = AgentSpec(
        name="a", tools=["read_file", "mcp__git"], disallowed_tools=["mcp__git__git_commit"]
    )
    assert spec.allowed_tools(AVAILABLE) == ["read_file", "mcp__git__git_status"]
    every = AgentSpec(name="b", disallowed_tools=["mcp__time"])
    assert every.allowed_tools(AVAILABLE) == AVAILABLE[:4]


def test_a_spawn_narrows_to_one_of_a_servers_tools_never_another_servers() -> None:
    spec = AgentSpec(name="a", tools=["mcp__git"])
    assert narrow(spec, SpawnOptions(tools=["mcp__git__git_status"])).tools == [
        "mcp__git__git_status"
    ]
    with pytest.raises(InvalidRequest, match="does not allow mcp__time__now"):
        narrow(spec, SpawnOptions(tools=["mcp__time__now"]))


@pytest.mark.parametrize(
    ("mode", "rules", "expected"),
    [
        ("default", [], "ask"),
        ("accept_edits", [], "ask"),
        ("dont_ask", [], "allow"),
        ("default", [PermissionRule(tool="mcp__git__git_status", action="allow")], "allow"),
        ("plan", [], "deny"),
        ("plan", [PermissionRule(tool="mcp__git__*", action="allow")], "allow"),
        ("plan", [PermissionRule(tool="mcp__git__*", action="ask")], "ask"),
        # A server's name stands for all its tools, in rules as in an agent's tools.
        ("dont_ask", [PermissionRule(tool="mcp__git", action="deny")], "deny"),
        ("dont_ask", [PermissionRule(tool="mcp__github", action="deny")], "allow"),
        ("default", [PermissionRule(tool="mcp__git", action="allow")], "allow"),
        ("dont_ask", [PermissionRule(tool="mcp__git__*", action="deny")], "deny"),
    ],
)
def test_an_mcp_call_is_judged_like_any_tool_that_changes_things(
    mode: str, rules: list[PermissionRule], expected: str
) -> None:
    spec = AgentSpec(name="a", permission_mode=mode, permissions=rules)  # type: ignore[arg-type]
    assert decide(spec, "mcp__git__git_status", {"repo_path": "."}) == expected


def test_a_spawns_restriction_holds_in_plan_too() -> None:
    spec = AgentSpec(
        name="a",
        permission_mode="plan",
        permissions=[PermissionRule(tool="mcp__git__*", action="allow")],
        restrictions=[PermissionRule(tool="mcp__git__git_commit", action="deny")],
    )
    assert decide(spec, "mcp__git__git_status", {}) == "allow"
    assert decide(spec, "mcp__git__git_commit", {}) == "deny"
    assert decide(spec, "bash", {"command": "ls"}) == "deny"


def test_claude_code_agent_files_keep_their_mcp_tools(tmp_path: Path) -> None:
    path = tmp_path / "git-helper.md"
    path.write_text(
        "---\nname: git-helper\ndescription: d\n"
        "tools: Read, mcp__git__git_status, mcp__time__*, mcp__bad name\n"
        "disallowedTools: mcp__git__git_commit\n---\nprompt\n"
    )
    warnings: list[str] = []
    spec = load_agent_file(path, warnings=warnings)
    assert spec.tools == ["read_file", "mcp__git__git_status", "mcp__time"]
    assert spec.disallowed_tools == ["mcp__git__git_commit"]
    assert len(warnings) == 1 and "'mcp__bad name' is not one of ours" in warnings[0]


def _allow(tool: str, action: str = "allow") -> PermissionRule:
    return PermissionRule(tool=tool, action=action)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("tools", "rules", "expected"),
    [
        # listed, and an allow rule names it: a rule on one tool, on the whole server
        (["read_file", "mcp__git"], [_allow("mcp__git__git_status")], ["mcp__git__git_status"]),
        (["mcp__git"], [_allow("mcp__git")], ["mcp__git__git_status", "mcp__git__git_commit"]),
        (["mcp__git"], [_allow("mcp__git__*")], ["mcp__git__git_status", "mcp__git__git_commit"]),
        # not listed, every tool (tools=None), or a rule that only asks: none
        (["read_file"], [_allow("mcp__git")], []),
        (None, [_allow("mcp__git")], []),
        (["mcp__git"], [_allow("mcp__git", "ask")], []),
    ],
)
def test_a_plan_agent_has_the_mcp_tools_it_lists_where_an_allow_rule_names_them(
    tools: list[str] | None, rules: list[PermissionRule], expected: list[str]
) -> None:
    spec = AgentSpec(name="p", permission_mode="plan", tools=tools, permissions=rules)
    read = [] if tools is not None and "read_file" not in tools else ["read_file"]
    assert spec.allowed_tools(AVAILABLE) == [*read, *expected]
