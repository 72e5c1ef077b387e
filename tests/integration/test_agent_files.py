"""Agent files on a running worker, and ``subagents agents`` listing them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from durable_subagents import SubagentClient
from durable_subagents.agents import (
    AgentSpec,
    load_agents,
    resolve_agent,
    scan_agents,
)
from durable_subagents.config import Settings
from durable_subagents.errors import InvalidRequest
from durable_subagents.types import TaskStatus

from ..helpers import CEILING
from ..helpers.agent_files import CLAUDE_REVIEWER, OPENCODE_DOCS, PLANTED_EXPLORE, write
from ..helpers.tasks import script


def test_a_file_that_replaces_a_built_in_says_so(tmp_path: Path) -> None:
    path = write(
        tmp_path / ".claude/agents/explore.md", "---\nname: explore\ndescription: mine\n---\n"
    )
    found = scan_agents(tmp_path)
    assert found.warnings == [
        f"{path}: agent 'explore' replaces the built-in 'explore' (its tools, mode and prompt "
        "are this file's); rename it to keep both"
    ]
    assert resolve_agent("explore", load_agents(tmp_path, warnings=[])).description == "mine"
    proc = subprocess.run(
        [sys.executable, "-m", "durable_subagents", "agents", "--agents-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=60, env={**os.environ, "COLUMNS": "300"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == f"warning: {found.warnings[0]}\n"


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
    info = await client.check_task(task_id, wait=True, timeout=CEILING)
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


async def test_connect_below_the_root_never_runs_a_planted_agent(
    settings: Settings, worker: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model planted ``src/.claude/agents/explore.md`` (bash, dontAsk); a spawn from
    ``src/`` runs the built-in read-only ``explore``, where bash is no tool at all."""
    project = settings.workspace
    assert project is not None
    (project / ".git").mkdir()
    write(project / ".claude/agents/reviewer.md", CLAUDE_REVIEWER)
    write(project / "src/.claude/agents/explore.md", PLANTED_EXPLORE)
    monkeypatch.chdir(project / "src")
    client = await SubagentClient.connect(settings=settings)
    assert set(client.agents) == {"reviewer"}
    model = script(
        {"tool_calls": [{"name": "bash", "arguments": {"command": "touch pwned src/pwned"}}]},
        {"text": "done"},
    )
    task_id = await client.spawn_task("explore", "look around", model=model)
    info = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert info.status == TaskStatus.COMPLETED, info.error
    assert info.pending_approvals == [] and info.result == "done"
    transcript = await client.get_transcript(task_id)
    system = transcript[0].content
    assert system.startswith("You are an exploration agent") and "without asking" not in system
    [tool_msg] = [m for m in transcript if m.role == "tool"]
    assert tool_msg.is_error and "unknown tool 'bash'" in tool_msg.content
    assert not (project / "pwned").exists() and not (project / "src/pwned").exists()


async def test_connect_with_agents_dir_reads_the_directory_named(
    settings: Settings, tmp_path: Path
) -> None:
    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    write(project / ".claude/agents/reviewer.md", CLAUDE_REVIEWER)
    write(project / "src/.claude/agents/explore.md", PLANTED_EXPLORE)
    client = await SubagentClient.connect(settings=settings, agents_dir=project / "src")
    assert set(client.agents) == {"explore"}
    assert client.agents["explore"].permission_mode == "dont_ask"
    # SUBAGENTS_AGENTS_DIR, read into the settings, names it too; the keyword wins
    named = settings.model_copy(update={"agents_dir": project / "src"})
    assert set((await SubagentClient.connect(settings=named)).agents) == {"explore"}
    client = await SubagentClient.connect(settings=named, agents_dir=project)
    assert set(client.agents) == {"reviewer"}


async def test_explicit_agents_win_over_files(settings: Settings, tmp_path: Path) -> None:
    write(tmp_path / ".claude/agents/reviewer.md", CLAUDE_REVIEWER)
    mine = AgentSpec(name="mine", description="explicit")
    client = await SubagentClient.connect(
        settings=settings, agents={"mine": mine}, agents_dir=tmp_path
    )
    assert client.agents == {"mine": mine}


async def test_a_broken_file_fails_only_its_own_spawn(
    settings: Settings, worker: None, tmp_path: Path
) -> None:
    project = tmp_path / "project"
    write(
        project / ".claude/agents/runner.md",
        f"---\nname: acme:runner\ndescription: Runs. Use for: anything\n"
        f"model: {json.dumps(script({'text': 'ran'}))}\n---\nYou run.\n",
    )
    bad = write(
        project / ".claude/agents/bad.md", "---\nname: bad\ndescription: d\ntools: 3\n---\n"
    )
    client = await SubagentClient.connect(settings=settings, agents_dir=project)
    with pytest.raises(InvalidRequest) as err:
        await client.spawn_task("bad", "do it")
    assert str(err.value) == (
        f"agent 'bad' cannot be used: agent file {bad}:4: 'tools' must be a comma-separated "
        "string or a list of tool names, got 3"
    )
    task_id = await client.spawn_task("acme:runner", "run")
    assert task_id.startswith("subagent-acme.runner-")
    info = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert info.status == TaskStatus.COMPLETED, info.error
    assert (info.agent, info.result) == ("acme.runner", "ran")


def test_cli_agents_lists_file_agents_with_their_source(tmp_path: Path) -> None:
    write(tmp_path / ".claude/agents/reviewer.md", CLAUDE_REVIEWER)
    write(tmp_path / ".opencode/agent/docs.md", OPENCODE_DOCS)

    def agents_cli() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "durable_subagents", "agents", "--json", "--agents-dir",
             str(tmp_path)],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip

    proc = agents_cli()
    assert proc.returncode == 0, proc.stderr
    rows = {r["name"]: r for r in json.loads(proc.stdout)}
    assert list(rows) == ["explore", "plan", "research", "general", "reviewer", "docs"]
    assert rows["explore"]["source"] == "built-in"
    assert rows["reviewer"]["source"].endswith(".claude/agents/reviewer.md")
    assert rows["docs"]["model"] == "openai:gpt-4.1"
    assert "'webfetch'" in proc.stderr  # warnings go to stderr
    # a broken file: the others are still listed, and one warning says where it broke
    bad = write(
        tmp_path / ".claude/agents/bad.md", "---\nname: bad\ndescription: d\nmaxTurns: 0\n---\n"
    )
    proc = agents_cli()
    assert proc.returncode == 0, proc.stderr
    assert [r["name"] for r in json.loads(proc.stdout)] == list(rows)
    warnings = [line for line in proc.stderr.splitlines() if str(bad) in line]
    assert warnings == [
        f"warning: agent file {bad}:4: 'maxTurns' must be an integer >= 1, got 0 (agent "
        "'bad' skipped)"
    ]
