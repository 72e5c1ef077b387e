"""Permission modes and rules: which calls run, ask or are refused (pure functions)."""

from __future__ import annotations

from typing import Any

import pytest

from durable_subagents import policy
from durable_subagents.agents import AgentSpec, PermissionRule
from durable_subagents.errors import InvalidRequest
from durable_subagents.spawn import SpawnOptions, may_pause, narrow

CALLS: dict[str, dict[str, Any]] = {
    "read_file": {"path": "a.py"},
    "grep": {"pattern": "def "},
    "write_file": {"path": "a.py", "content": "x"},
    "edit_file": {"path": "a.py", "old": "x", "new": "y"},
    "bash": {"command": "make test"},
}


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("plan", {"read_file": "allow", "grep": "allow", "write_file": "deny",
                  "edit_file": "deny", "bash": "deny"}),
        ("default", {"read_file": "allow", "grep": "allow", "write_file": "ask",
                     "edit_file": "ask", "bash": "ask"}),
        ("accept_edits", {"read_file": "allow", "grep": "allow", "write_file": "allow",
                          "edit_file": "allow", "bash": "ask"}),
        ("dont_ask", {"read_file": "allow", "grep": "allow", "write_file": "allow",
                      "edit_file": "allow", "bash": "allow"}),
    ],
)  # fmt: skip
def test_each_mode_decides_calls_no_rule_matches(mode: str, expected: dict[str, str]) -> None:
    spec = AgentSpec(name="a", permission_mode=mode)  # type: ignore[arg-type]
    got = {tool: policy.decide(spec, tool, args) for tool, args in CALLS.items()}
    assert got == expected


def test_custom_tools_marked_read_only_run_in_every_mode() -> None:
    for mode in ("plan", "default", "accept_edits"):
        spec = AgentSpec(name="a", permission_mode=mode)  # type: ignore[arg-type]
        assert policy.decide(spec, "lookup", {"url": "x"}, read_only=True) == "allow"
        assert policy.decide(spec, "deploy", {}, read_only=False) == (
            "deny" if mode == "plan" else "ask"
        )


def test_rules_override_the_mode_last_match_wins() -> None:
    spec = AgentSpec(
        name="a",
        permission_mode="default",
        permissions=[
            PermissionRule(tool="bash", pattern="git *", action="allow"),
            PermissionRule(tool="bash", pattern="git push*", action="deny"),
            PermissionRule(tool="read_file", pattern="secrets/*", action="ask"),
        ],
    )
    assert policy.decide(spec, "bash", {"command": "git status"}) == "allow"
    assert policy.decide(spec, "bash", {"command": "git push origin"}) == "deny"
    assert policy.decide(spec, "bash", {"command": "rm -rf /"}) == "ask"  # the mode
    assert policy.decide(spec, "read_file", {"path": "secrets/key"}) == "ask"
    assert policy.decide(spec, "read_file", {"path": "src/a.py"}) == "allow"


def test_plan_never_runs_a_mutating_tool_whatever_the_rules_say() -> None:
    spec = AgentSpec(
        name="a", permission_mode="plan", permissions=[PermissionRule(tool="*", action="allow")]
    )
    assert policy.decide(spec, "bash", {"command": "ls"}) == "deny"


def test_restrictions_are_stricter_never_wider() -> None:
    agent = AgentSpec(
        name="a",
        permission_mode="dont_ask",
        permissions=[PermissionRule(tool="bash", pattern="rm *", action="deny")],
    )
    narrowed = narrow(
        agent, SpawnOptions(permissions=[{"tool": "bash", "pattern": "*", "action": "ask"}])
    )
    assert policy.decide(narrowed, "bash", {"command": "ls"}) == "ask"  # restriction asks
    assert policy.decide(narrowed, "bash", {"command": "rm -rf x"}) == "deny"  # agent denies
    assert policy.decide(narrowed, "write_file", CALLS["write_file"]) == "allow"


@pytest.mark.parametrize(
    ("agent_mode", "spawn_mode", "ok"),
    [("dont_ask", "accept_edits", True), ("dont_ask", "default", True),
     ("dont_ask", "plan", True), ("accept_edits", "default", True),
     ("default", "accept_edits", False), ("default", "dont_ask", False),
     ("plan", "default", False), ("accept_edits", "dont_ask", False)],
)  # fmt: skip
def test_a_spawn_may_narrow_the_mode_but_never_widen_it(
    agent_mode: str, spawn_mode: str, ok: bool
) -> None:
    agent = AgentSpec(name="a", permission_mode=agent_mode)  # type: ignore[arg-type]
    if ok:
        assert narrow(agent, SpawnOptions(permission_mode=spawn_mode)).permission_mode == spawn_mode
    else:
        with pytest.raises(InvalidRequest, match="more permissive"):
            narrow(agent, SpawnOptions(permission_mode=spawn_mode))


def test_spawn_rules_may_only_deny_or_ask() -> None:
    agent = AgentSpec(name="a", permission_mode="default")
    with pytest.raises(InvalidRequest, match="only add 'deny' or 'ask'"):
        narrow(agent, SpawnOptions(permissions=[{"tool": "bash", "action": "allow"}]))


def test_may_pause_follows_the_mode() -> None:
    assert may_pause(AgentSpec(name="a", permission_mode="default"))
    assert may_pause(AgentSpec(name="a", permission_mode="accept_edits"))
    # dont_ask still asks before a write to a protected path (.git, .vscode...)
    assert may_pause(AgentSpec(name="a", permission_mode="dont_ask"))
    assert may_pause(AgentSpec(name="a", permission_mode="dont_ask", tools=["edit_file"]))
    assert not may_pause(AgentSpec(name="a", permission_mode="dont_ask", tools=["bash", "grep"]))
    opted_in = AgentSpec(name="a", permission_mode="dont_ask", write_protected_paths=True)
    assert not may_pause(opted_in)
    assert not may_pause(AgentSpec(name="a", permission_mode="plan"))
    assert not may_pause(AgentSpec(name="a", permission_mode="default", tools=["read_file"]))
    asks = [PermissionRule(tool="bash", action="ask")]
    assert may_pause(AgentSpec(name="a", permission_mode="dont_ask", permissions=asks))


@pytest.mark.parametrize(
    ("tool", "path", "expected"),
    [
        ("write_file", ".git/config", ".git"),
        ("write_file", "./sub/../.git/hooks/pre-commit", ".git"),
        ("edit_file", "/abs/project/.claude/agents/explore.md", ".claude"),
        ("write_file", "pkg//.opencode/agent/x.md", ".opencode"),
        ("write_file", ".mcp.json", ".mcp.json"),
        ("write_file", "docs/git-notes.md", None),
        ("write_file", ".gitignore", None),
        ("read_file", ".git/config", None),  # reading is not writing
        ("bash", ".git/config", None),  # left to the sandbox's read-only bind
    ],
)
def test_protected_writes_are_found_on_normalized_paths(
    tool: str, path: str, expected: str | None
) -> None:
    read_only = tool == "read_file"
    assert policy.protected_write(tool, {"path": path}, read_only=read_only) == expected


def test_child_spec_narrows_the_sandbox_to_the_parent() -> None:
    from durable_subagents.agents import ToolLimits
    from durable_subagents.spawn import child_spec

    parent = AgentSpec(name="p", network=False, env=["A", "B"], limits=ToolLimits(memory_mb=512))
    child = AgentSpec(
        name="c",
        network=True,
        env=["B", "C"],
        limits=ToolLimits(memory_mb=4096, processes=10),
        write_protected_paths=True,
    )
    narrowed = child_spec(parent, ["bash"], child)
    assert narrowed.network is False and narrowed.write_protected_paths is False
    assert narrowed.env == ["B"]
    assert (narrowed.limits.memory_mb, narrowed.limits.processes) == (512, 10)
    assert child_spec(AgentSpec(name="p", env=None), ["bash"], child).env == ["B", "C"]


def test_a_spawn_can_take_the_network_away_but_never_grant_it() -> None:
    online = AgentSpec(name="online", network=True)
    assert narrow(online, SpawnOptions(network=False)).network is False
    assert narrow(online, SpawnOptions(network=True)).network is True
    with pytest.raises(InvalidRequest, match=r"does not allow the network.*only narrow"):
        narrow(AgentSpec(name="offline"), SpawnOptions(network=True))
