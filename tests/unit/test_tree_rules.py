"""How deep a tree may grow and what it may spawn: agent files, spawns, the workflow's rules."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from durable_subagents.agents import AgentSpec, load_agent_file
from durable_subagents.agents._agent_file import AgentFileError
from durable_subagents.errors import InvalidRequest, PayloadTooLarge
from durable_subagents.spawn import SpawnOptions, build_task_input
from durable_subagents.spawn._task_input import MAX_SPAWNABLE_AGENTS
from durable_subagents.wire._payloads import TaskInput
from durable_subagents.workflows._tool_calls import tool_slots_at
from durable_subagents.workflows._tree import (
    TreeCount,
    agents_below,
    depth_left,
    spawn_tool_specs,
    spawns,
)

from ..helpers.agent_files import write

NOW = datetime(2026, 12, 4, tzinfo=UTC)
LEAD = AgentSpec(name="lead", description="Leads", tools=["read_file"], may_spawn=True)


def agent_file(tmp_path: Path, front: str) -> AgentSpec:
    path = write(tmp_path / ".claude/agents/a.md", f"---\nname: a\ndescription: d\n{front}---\n")
    return load_agent_file(path)


def test_claude_codes_agent_tool_lets_an_agent_spawn(tmp_path: Path) -> None:
    spec = agent_file(tmp_path, "tools: Read, Agent(explore, code-reviewer), Grep\nmaxDepth: 2\n")
    assert spec.tools == ["read_file", "grep"]  # the spawn tools are the workflow's
    assert (spec.may_spawn, spec.spawnable, spec.max_depth) == (
        True,
        ["explore", "code-reviewer"],
        2,
    )
    # Task is the tool's earlier name; bare, it spawns any agent its spawner knew.
    spec = agent_file(tmp_path, "tools: [Read, Task]\n")
    assert (spec.may_spawn, spec.spawnable) == (True, None)
    # Every tool (no list) does not spawn; nor does Agent taken away.
    assert not agent_file(tmp_path, "model: inherit\n").may_spawn
    assert not agent_file(tmp_path, "tools: Read, Agent\ndisallowedTools: Agent\n").may_spawn


@pytest.mark.parametrize("front", ["maxDepth: 11\n", "maxDepth: two\n", "tools: Agent(a b)\n"])
def test_a_bad_depth_or_agent_list_names_the_field(tmp_path: Path, front: str) -> None:
    with pytest.raises(AgentFileError, match=r"maxDepth|no agent name"):
        agent_file(tmp_path, front)


def spawned(spec: AgentSpec, **options: object) -> TaskInput:
    return build_task_input(
        spec,
        "go",
        SpawnOptions(**options),  # type: ignore[arg-type]
        description="",
        parent_id=None,
        default_model=None,
        created_at=NOW,
        check_model=False,
        agents={"reviewer": AgentSpec(name="reviewer", description="Reviews")},
    )


def test_a_spawn_carries_the_agents_its_task_may_spawn_and_its_limits() -> None:
    task = spawned(LEAD)
    assert (task.max_depth, task.max_tasks) == (3, 50)
    assert task.agents is not None and {"explore", "general", "reviewer"} <= set(task.agents)
    narrowed = spawned(LEAD.model_copy(update={"spawnable": ["reviewer"], "max_depth": 1}))
    assert narrowed.agents is not None and list(narrowed.agents) == ["reviewer"]
    assert narrowed.max_depth == 1
    assert spawned(LEAD, max_depth=0, max_tasks=5).max_tasks == 5
    # A task that spawns nothing carries nothing.
    plain = spawned(AgentSpec(name="p"))
    assert (plain.agents, plain.max_depth, plain.max_tasks) == (None, None, None)


def test_a_spawn_refuses_agents_it_cannot_carry() -> None:
    with pytest.raises(InvalidRequest, match="may spawn ghost, which is not known"):
        spawned(LEAD.model_copy(update={"spawnable": ["ghost"]}))
    many = {f"a{i}": AgentSpec(name=f"a{i}") for i in range(MAX_SPAWNABLE_AGENTS)}
    with pytest.raises(InvalidRequest, match="name those it needs in its tools"):
        build_task_input(
            LEAD, "go", SpawnOptions(), description="", parent_id=None,
            default_model=None, created_at=NOW, check_model=False, agents=many,
        )  # fmt: skip
    huge = {"big": AgentSpec(name="big", system_prompt="x" * 200_000)}
    with pytest.raises(PayloadTooLarge, match="bytes, over the"):
        build_task_input(
            LEAD.model_copy(update={"spawnable": ["big"]}), "go", SpawnOptions(),
            description="", parent_id=None, default_model=None, created_at=NOW,
            check_model=False, agents=huge,
        )  # fmt: skip


def test_only_a_task_with_depth_left_is_offered_the_spawn_tools() -> None:
    task = spawned(LEAD)
    assert spawns(task) and depth_left(task) == 3
    spawn_tool, _ = spawn_tool_specs(task)
    assert spawn_tool.parameters["properties"]["agent"]["enum"] == sorted(task.agents or {})
    assert "reviewer: Reviews" in spawn_tool.description
    at_limit = task.model_copy(update={"max_depth": 0})
    assert not spawns(at_limit) and spawn_tool_specs(at_limit) == []
    # Runs recorded before depths: a client's task spawns, a child does not.
    legacy = TaskInput(agent=LEAD, prompt="x")
    assert depth_left(legacy) == 1 and len(spawn_tool_specs(legacy)) == 2
    assert depth_left(legacy.model_copy(update={"parent_is_subagent": True})) == 0


def test_a_childs_agents_are_its_parents_narrowed_to_those_it_names() -> None:
    known = {"explore": AgentSpec(name="explore"), "plan": AgentSpec(name="plan")}
    assert agents_below(known, LEAD) == known
    picky = LEAD.model_copy(update={"spawnable": ["plan", "unheard-of"]})
    assert list(agents_below(known, picky)) == ["plan"]  # never wider than the parent's


def test_the_tree_count_refuses_past_its_limit_and_counts_an_id_once() -> None:
    tree = TreeCount()
    assert tree.refusal("a") is not None  # not the top of a counted tree
    tree.limit = 3
    for task_id in ("a", "b", "b"):
        assert tree.refusal(task_id) is None
        tree.take(task_id)
    assert tree.ids == ["a", "b"]
    assert "holds 3 tasks" in (tree.refusal("c") or "")
    assert tree.refusal("a") is None  # a retried reservation
    with pytest.raises(ValueError, match="no task id"):
        tree.check("../x")


def test_a_tree_of_fifty_tasks_holds_fewer_tool_slots_than_a_worker_has() -> None:
    # The top task, its 16 children, and 33 more below them.
    slots = tool_slots_at(0) + 16 * tool_slots_at(1) + 33 * tool_slots_at(2)
    assert slots == 73 and slots < 100
