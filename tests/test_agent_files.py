"""Custom agents from Claude Code and OpenCode agent files."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from durable_subagents import SubagentClient
from durable_subagents.agents import (
    AgentSpec,
    PermissionRule,
    discover_agents,
    find_project_root,
    load_agent_file,
    load_agents,
    resolve_agent,
    scan_agents,
)
from durable_subagents.config import Settings
from durable_subagents.errors import InvalidRequest
from durable_subagents.types import TaskStatus

from .conftest import script


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


CLAUDE_REVIEWER = """\
---
name: reviewer
description: Reviews a change for bugs. Use after editing code.
tools: Read, Grep, Glob, Bash
disallowedTools: [Bash]
model: sonnet
permissionMode: acceptEdits
maxTurns: 12
color: red
---

You are a careful code reviewer.

Cite `path:line` for every finding.
"""

OPENCODE_DOCS = """\
---
description: Writes and fixes documentation
model: openai/gpt-4.1
mode: subagent
steps: 9
tools:
  write: false
  patch: false
  webfetch: false
permission:
  edit: ask
  bash:
    "git *": allow
    "git push*": deny
    "*": ask
---
You write documentation.
"""


# ---------------------------------------------------------------- Claude Code


def test_claude_agent_maps_every_field(tmp_path: Path) -> None:
    path = write(tmp_path / ".claude/agents/reviewer.md", CLAUDE_REVIEWER)
    warnings: list[str] = []
    spec = load_agent_file(path, warnings=warnings)
    assert spec == AgentSpec(
        name="reviewer",
        description="Reviews a change for bugs. Use after editing code.",
        system_prompt="You are a careful code reviewer.\n\nCite `path:line` for every finding.",
        model="anthropic:claude-sonnet-4-5",
        tools=["read_file", "grep", "list_files", "bash"],
        disallowed_tools=["bash"],
        permission_mode="accept_edits",
        max_turns=12,
    )
    assert spec.allowed_tools(["read_file", "list_files", "grep", "bash"]) == [
        "read_file",
        "list_files",
        "grep",
    ]
    assert warnings == []  # `color` is Claude Code's UI, silently ignored


def test_claude_defaults_and_tool_list_forms(tmp_path: Path) -> None:
    minimal = write(
        tmp_path / ".claude/agents/min.md", "---\nname: min\ndescription: d\n---\nprompt\n"
    )
    spec = load_agent_file(minimal)
    assert (spec.model, spec.tools, spec.disallowed_tools) == ("inherit", None, [])
    assert (spec.permission_mode, spec.max_turns) == ("default", 50)
    listed = write(
        tmp_path / ".claude/agents/l.md",
        "---\nname: l\ndescription: d\ntools: [Write, MultiEdit, Edit]\nmodel: inherit\n---\n",
    )
    spec = load_agent_file(listed)
    assert spec.tools == ["write_file", "edit_file"] and spec.system_prompt == ""


@pytest.mark.parametrize(
    ("mode", "expected"),
    [("default", "default"), ("acceptEdits", "accept_edits"), ("plan", "plan"),
     ("dontAsk", "dont_ask"), ("bypassPermissions", "dont_ask")],
)  # fmt: skip
def test_claude_permission_modes(tmp_path: Path, mode: str, expected: str) -> None:
    path = write(
        tmp_path / ".claude/agents/a.md",
        f"---\nname: a\ndescription: d\npermissionMode: {mode}\n---\n",
    )
    assert load_agent_file(path).permission_mode == expected


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("inherit", "inherit"),
        ("sonnet", "anthropic:claude-sonnet-4-5"),
        ("opus", "anthropic:claude-opus-4-1"),
        ("haiku", "anthropic:claude-haiku-4-5"),
        ("claude-sonnet-4-5-20250929", "anthropic:claude-sonnet-4-5-20250929"),
        ("openai/gpt-4.1", "openai:gpt-4.1"),
        ("anthropic/claude-opus-4-1", "anthropic:claude-opus-4-1"),
        ("openai:gpt-4.1-mini", "openai:gpt-4.1-mini"),
        ("scripted", "scripted"),
    ],
)
def test_model_names(tmp_path: Path, model: str, expected: str) -> None:
    path = write(
        tmp_path / ".claude/agents/a.md", f"---\nname: a\ndescription: d\nmodel: {model}\n---\n"
    )
    assert load_agent_file(path).model == expected


def test_unknown_tools_are_dropped_with_warnings(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = write(
        tmp_path / ".claude/agents/web.md",
        "---\nname: web\ndescription: d\ntools: Read, WebFetch, Bash(git:*)\nskills: x\n---\n",
    )
    warnings: list[str] = []
    spec = load_agent_file(path, warnings=warnings)
    assert spec.tools == ["read_file"]  # narrower, never wider
    assert len(warnings) == 3 and all(str(path) in w for w in warnings)
    assert "field 'skills' is not used" in warnings[0]
    assert "'WebFetch'" in warnings[1] and "'Bash(git:*)'" in warnings[2]
    # without a list to put them in, warnings are logged
    with caplog.at_level(logging.WARNING, logger="durable_subagents.agents._files"):
        load_agent_file(path)
    assert [r.getMessage() for r in caplog.records] == warnings


# ---------------------------------------------------------------- OpenCode


def test_opencode_agent_maps_every_field(tmp_path: Path) -> None:
    path = write(tmp_path / ".opencode/agent/docs.md", OPENCODE_DOCS)
    warnings: list[str] = []
    spec = load_agent_file(path, warnings=warnings)
    assert spec.name == "docs"  # the file's stem
    assert spec.description == "Writes and fixes documentation"
    assert spec.system_prompt == "You write documentation."
    assert spec.model == "openai:gpt-4.1"
    assert spec.max_turns == 9
    assert spec.tools is None and spec.disallowed_tools == ["write_file", "edit_file"]
    assert spec.permission_mode == "dont_ask"  # OpenCode allows what no entry restricts
    # `*` first: our rules are last-match-wins, so the specific patterns come after
    assert spec.permissions == [
        PermissionRule(tool="write_file", pattern="*", action="ask"),
        PermissionRule(tool="edit_file", pattern="*", action="ask"),
        PermissionRule(tool="bash", pattern="*", action="ask"),
        PermissionRule(tool="bash", pattern="git *", action="allow"),
        PermissionRule(tool="bash", pattern="git push*", action="deny"),
    ]
    assert len(warnings) == 1 and "'webfetch'" in warnings[0]


def test_opencode_permission_decisions(tmp_path: Path) -> None:
    from durable_subagents import policy

    spec = load_agent_file(write(tmp_path / ".opencode/agents/docs.md", OPENCODE_DOCS))
    assert policy.decide(spec, "bash", {"command": "git status"}) == "allow"
    assert policy.decide(spec, "bash", {"command": "git push origin"}) == "deny"
    assert policy.decide(spec, "bash", {"command": "rm -rf build"}) == "ask"


def test_opencode_tool_globs_and_max_steps(tmp_path: Path) -> None:
    path = write(
        tmp_path / ".opencode/agent/ro.md",
        "---\nmaxSteps: 4\ntools:\n  '*': false\n  read: true\n  grep: true\n"
        "permission: deny\n---\nbody\n",
    )
    spec = load_agent_file(path)
    assert spec.max_turns == 4 and spec.description == ""
    assert spec.allowed_tools(["read_file", "list_files", "grep", "write_file", "bash"]) == [
        "read_file",
        "grep",
    ]
    assert spec.permissions == [PermissionRule(tool="*", pattern="*", action="deny")]


# ---------------------------------------------------------------- malformed files


@pytest.mark.parametrize(
    ("where", "text", "problem"),
    [
        (".claude/agents/x.md", "no front matter here\n", "no YAML front matter"),
        (".claude/agents/x.md", "---\nname: [x\n---\n", "not valid YAML"),
        (".claude/agents/x.md", "---\n- a\n- b\n---\n", "must be a mapping"),
        (".claude/agents/x.md", "---\nname: x\n---\nbody\n", "'description' is missing"),
        (".claude/agents/x.md", "---\nname: x\ndescription: d\npermissionMode: yolo\n---\n",
         "unknown permissionMode 'yolo'"),
        (".claude/agents/x.md", "---\nname: x y\ndescription: d\n---\n", "name 'x y'"),
        (".claude/agents/x.md", "---\nname: x\ndescription: d\nmaxTurns: 0\n---\n", "maxTurns"),
        (".claude/agents/x.md", "---\nname: x\ndescription: d\ntools: 3\n---\n", "'tools'"),
        (".opencode/agent/x.md", "---\ntools: [read]\n---\n", "'tools' must map"),
        (".opencode/agent/x.md", "---\npermission:\n  bash: maybe\n---\n", "'maybe'"),
        (".opencode/agent/x.md", "---\nmode: boss\n---\n", "unknown mode 'boss'"),
    ],
)  # fmt: skip
def test_malformed_files_name_the_file(tmp_path: Path, where: str, text: str, problem: str) -> None:
    path = write(tmp_path / where, text)
    with pytest.raises(InvalidRequest, match="agent file") as err:
        load_agent_file(path)
    assert str(path) in str(err.value) and problem in str(err.value)
    with pytest.raises(InvalidRequest, match=r"x\.md"):
        load_agents(tmp_path)


def test_missing_agents_dir_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(InvalidRequest, match="does not exist"):
        load_agents(tmp_path / "nope")


# ---------------------------------------------------------------- loading a project


def test_load_agents_scans_both_layouts_later_overrides(tmp_path: Path) -> None:
    write(tmp_path / ".claude/agents/reviewer.md", CLAUDE_REVIEWER)
    write(tmp_path / ".claude/agents/explore.md", "---\nname: explore\ndescription: mine\n---\n")
    write(tmp_path / ".claude/agents/notes.txt", "not an agent")
    write(tmp_path / ".opencode/agent/docs.md", OPENCODE_DOCS)
    write(tmp_path / ".opencode/agents/reviewer.md", "---\ndescription: the OpenCode one\n---\n")
    write(tmp_path / ".opencode/agents/off.md", "---\ndescription: unused\ndisable: true\n---\n")
    found = scan_agents(tmp_path)
    assert list(found.agents) == ["explore", "reviewer", "docs"]
    assert found.agents["reviewer"].description == "the OpenCode one"
    assert found.sources["reviewer"] == tmp_path / ".opencode/agents/reviewer.md"
    assert any("overrides" in w and "reviewer" in w for w in found.warnings)
    # given an agents directory itself, its project is read
    assert list(scan_agents(tmp_path / ".claude/agents").agents) == list(found.agents)
    # shadowing a built-in is allowed: the project's agent wins
    agents = load_agents(tmp_path, warnings=[])
    assert resolve_agent("explore", agents).description == "mine"
    assert resolve_agent("plan", agents).name == "plan"


def test_discovery_walks_up_to_the_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    write(project / ".claude/agents/reviewer.md", CLAUDE_REVIEWER)
    write(project / "README.md", "# not an agent\n")
    deep = project / "src/pkg/sub"
    deep.mkdir(parents=True)
    assert find_project_root(deep) == project
    assert list(discover_agents(deep, warnings=[])) == ["reviewer"]
    monkeypatch.chdir(deep)
    assert list(discover_agents()) == ["reviewer"]
    # the nearest marker wins: a nested repository has its own agents (here none)
    (deep / ".git").mkdir()
    write(deep / "NOTES.md", "# not an agent either\n")
    assert find_project_root(deep) == deep and discover_agents(deep) == {}


# ---------------------------------------------------------------- end to end


async def test_connect_with_agents_dir_runs_a_file_agent(
    settings: Settings, worker: None, tmp_path: Path
) -> None:
    model = script(
        {"tool_calls": [{"name": "bash", "arguments": {"command": "ls"}}]},
        {"tool_calls": [{"name": "list_files", "arguments": {"pattern": "*"}}]},
        {"tool_calls": [{"name": "grep", "arguments": {"pattern": "needle"}}]},
        {"text": "done: {last_tool_result}"},
    )
    assert settings.workspace is not None
    (settings.workspace / "hay.txt").write_text("a needle here\n")
    project = tmp_path / "project"
    write(
        project / ".claude/agents/finder.md",
        f"---\nname: finder\ndescription: Finds needles\ntools: Read, Grep\n"
        f"model: {json.dumps(model)}\n---\nYou find needles.\n",
    )
    client = await SubagentClient.connect(settings=settings, agents_dir=project)
    assert set(client.agents) == {"finder"}
    task_id = await client.spawn_task("finder", "find the needle")
    assert task_id.startswith("subagent-finder-")
    info = await client.check_task(task_id, wait=True, timeout=30)
    assert info.status == TaskStatus.COMPLETED, info.error
    assert info.agent == "finder" and info.model is not None and info.model.startswith("scripted")
    transcript = await client.get_transcript(task_id)
    assert transcript[0].role == "system" and "You find needles." in transcript[0].content
    tool_msgs = [m for m in transcript if m.role == "tool"]
    assert len(tool_msgs) == 3
    assert tool_msgs[0].is_error and "unknown tool 'bash'" in tool_msgs[0].content
    assert tool_msgs[1].is_error and "unknown tool 'list_files'" in tool_msgs[1].content
    assert not tool_msgs[2].is_error and "hay.txt" in tool_msgs[2].content
    assert info.result is not None and "hay.txt" in info.result


async def test_explicit_agents_win_over_files(settings: Settings, tmp_path: Path) -> None:
    write(tmp_path / ".claude/agents/reviewer.md", CLAUDE_REVIEWER)
    mine = AgentSpec(name="mine", description="explicit")
    client = await SubagentClient.connect(
        settings=settings, agents={"mine": mine}, agents_dir=tmp_path
    )
    assert client.agents == {"mine": mine}
    broken = tmp_path / "broken"
    write(broken / ".claude/agents/bad.md", "no front matter")
    with pytest.raises(InvalidRequest, match=r"bad\.md"):
        await SubagentClient.connect(settings=settings, agents_dir=broken)


def test_cli_agents_lists_file_agents_with_their_source(tmp_path: Path) -> None:
    write(tmp_path / ".claude/agents/reviewer.md", CLAUDE_REVIEWER)
    write(tmp_path / ".opencode/agent/docs.md", OPENCODE_DOCS)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "durable_subagents",
            "agents",
            "--json",
            "--agents-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    rows = {r["name"]: r for r in json.loads(proc.stdout)}
    assert list(rows) == ["explore", "plan", "research", "general", "reviewer", "docs"]
    assert rows["explore"]["source"] == "built-in"
    assert rows["reviewer"]["source"].endswith(".claude/agents/reviewer.md")
    assert rows["docs"]["model"] == "openai:gpt-4.1"
    assert "'webfetch'" in proc.stderr  # warnings go to stderr
    write(tmp_path / ".claude/agents/bad.md", "---\nname: [\n---\n")
    proc = subprocess.run(
        [sys.executable, "-m", "durable_subagents", "agents", "--agents-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1 and "bad.md" in proc.stderr and "not valid YAML" in proc.stderr


def test_sandbox_fields_in_front_matter(tmp_path: Path) -> None:
    path = write(
        tmp_path / ".claude/agents/fetcher.md",
        "---\nname: fetcher\ndescription: Fetches docs.\nnetwork: true\n"
        "env: [PIP_INDEX_URL, HTTPS_PROXY]\nlimits: {memory_mb: 512, processes: 32}\n---\nGo.\n",
    )
    warnings: list[str] = []
    spec = load_agent_file(path, warnings=warnings)
    assert spec.network is True
    assert spec.env == ["PIP_INDEX_URL", "HTTPS_PROXY"]
    assert (spec.limits.memory_mb, spec.limits.processes, spec.limits.cpu_seconds) == (
        512,
        32,
        None,
    )
    assert warnings == []
    bad = write(
        tmp_path / ".claude/agents/bad.md",
        "---\nname: bad\ndescription: x\nlimits: {memory_mb: 1}\n---\nGo.\n",
    )
    with pytest.raises(InvalidRequest, match=r"invalid 'limits'.*memory_mb"):
        load_agent_file(bad)
    also_bad = write(
        tmp_path / ".opencode/agent/net.md", "---\ndescription: x\nnetwork: sometimes\n---\nGo.\n"
    )
    with pytest.raises(InvalidRequest, match=r"'network' must be true or false"):
        load_agent_file(also_bad)
