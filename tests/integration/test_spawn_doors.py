"""Every door of a spawn takes every spawn option, or says why it does not.

``SpawnKwargs`` declares the options once, each with its type and meaning.
``SubagentClient.spawn_task`` and ``start_subagent`` take it through ``Unpack``,
``SpawnOptions`` checks exactly its options, and the command line, an orchestrating
model's ``spawn_subagent`` tool and the MCP server that publishes it each take them. A
new option that one door forgets fails here, naming the door.
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import itertools
import textwrap
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Unpack, get_type_hints

import pytest
import typer.main
from temporalio.client import Client

from durable_subagents import InvalidRequest, SubagentClient
from durable_subagents.agents import resolve_agent
from durable_subagents.cli import app
from durable_subagents.client._tools import SpawnSubagent
from durable_subagents.config import Settings
from durable_subagents.spawn import SpawnKwargs, SpawnOptions, build_task_input
from durable_subagents.worker import create_worker
from durable_subagents.workflows import start_subagent
from durable_subagents.workflows._tree import SPAWN_TOOL_SPECS

from ..helpers.cli import _env
from ..helpers.mcp import mcp_session
from ..parent_workflows import OptionsWorkflow

OPTIONS = set(SpawnKwargs.__optional_keys__) | set(SpawnKwargs.__required_keys__)

CLI_NAMES = {
    "tools": "tool",
    "disallowed_tools": "disallow",
    "permissions": "ask",  # and --deny
    "network": "no_network",  # only narrows: the flag takes the network away
}
"""Options the command line spells its own way."""

NOT_FOR_MODELS = {
    "approval_timeout": "how long a person has is the spawner's person's choice",
    "budget_warn_at": "when a person hears of a tree's spend is the application's, never a model's",
    "disallowed_tools": "a model narrows with tools, the allowlist",
    "max_depth": "how deep a tree grows is the application's, never a model's",
    "max_tasks": "how many tasks a tree holds is the application's, never a model's",
    "metadata": "metadata is the application's, never a model's",
    "network": "the agent's own setting, not a model's to change",
    "notify_url": "where a task's events go is the application's, never a model's",
    "permission_mode": "a model cannot choose how its child is supervised",
    "permissions": "rules are the application's",
    "task_id": "ids are the application's; a model gets a fresh one per spawn",
    "time_limit": "a model's child inherits what its parent has left",
    "token_budget": "a model's child gets a share of its parent's budget",
    "workspace": "a model's child works in its parent's workspace",
}
"""Options a model's spawn_subagent tool leaves out on purpose, and why."""

PYTHON_DOORS: dict[str, Callable[..., Any]] = {
    "SubagentClient.spawn_task": SubagentClient.spawn_task,
    "start_subagent": start_subagent,
}


def _lacks(door: str, offered: set[str], wanted: set[str]) -> str:
    return f"{door} lacks {', '.join(sorted(wanted - offered))}"


def test_each_option_is_declared_with_its_meaning() -> None:
    """Every key of SpawnKwargs has a docstring under it: editors show it on hover."""
    [declaration] = ast.parse(textwrap.dedent(inspect.getsource(SpawnKwargs))).body
    assert isinstance(declaration, ast.ClassDef)
    body = declaration.body
    documented = {
        field.target.id
        for field, after in itertools.pairwise(body)
        if isinstance(field, ast.AnnAssign)
        and isinstance(field.target, ast.Name)
        and isinstance(after, ast.Expr)
        and isinstance(after.value, ast.Constant)
        and isinstance(after.value.value, str)
        and after.value.value.strip()
    }
    assert documented == OPTIONS, f"undocumented: {sorted(OPTIONS - documented)}"


def test_spawn_options_check_exactly_the_declared_options() -> None:
    checked = set(SpawnOptions.model_fields)
    assert checked >= OPTIONS, _lacks("SpawnOptions", checked, OPTIONS)
    assert checked <= OPTIONS, f"SpawnKwargs does not declare {sorted(checked - OPTIONS)}"


@pytest.mark.parametrize("name", PYTHON_DOORS)
def test_the_python_doors_take_the_declaration_itself(name: str) -> None:
    """Type checkers read ``**options: Unpack[SpawnKwargs]``; ``help()`` and ``inspect``
    read each option as a keyword-only parameter defaulting to None."""
    door = PYTHON_DOORS[name]
    assert get_type_hints(door)["options"] == Unpack[SpawnKwargs], name
    shown = inspect.signature(door).parameters
    keywords = {n for n, p in shown.items() if p.kind is p.KEYWORD_ONLY and p.default is None}
    assert keywords >= OPTIONS, _lacks(name, keywords, OPTIONS)
    assert not [p for p in shown.values() if p.kind is p.VAR_KEYWORD], name


def test_positional_use_of_the_python_doors_stays() -> None:
    positional = ["agent", "prompt", "description"]
    for name, door in PYTHON_DOORS.items():
        shown = [
            n
            for n, p in inspect.signature(door).parameters.items()
            if p.kind is p.POSITIONAL_OR_KEYWORD and n != "self"
        ]
        assert shown[:3] == positional, name
    spawn = inspect.signature(SubagentClient.spawn_task).parameters
    assert list(spawn)[:5] == ["self", *positional, "parent_id"]


def test_the_command_line_takes_every_option() -> None:
    spawn = typer.main.get_command(app).commands["spawn"]  # type: ignore[attr-defined]
    names = {p.name for p in spawn.params}
    wanted = {CLI_NAMES.get(o, o) for o in OPTIONS}
    assert wanted <= names, _lacks("subagents spawn", names, wanted)


def test_a_models_spawn_tool_takes_every_option_it_is_meant_to() -> None:
    fields = set(SpawnSubagent.model_fields)
    assert set(NOT_FOR_MODELS) <= OPTIONS, "a reason for an option that does not exist"
    wanted = OPTIONS - set(NOT_FOR_MODELS)
    assert wanted <= fields, _lacks("the orchestrator's spawn_subagent tool", fields, wanted)
    assert not set(NOT_FOR_MODELS) & fields, "an option left out on purpose is offered"


def test_a_subagents_own_spawn_tool_offers_only_declared_options() -> None:
    """A subagent spawning in turn sets only the model: its child's other options come
    from what the parent has left (``ParentLeft``), never from the model's arguments."""
    [spawn] = [s for s in SPAWN_TOOL_SPECS if s.name == "spawn_subagent"]
    offered = set(spawn.parameters["properties"]) - {"agent", "prompt", "description"}
    assert offered == {"model"}, f"a subagent's spawn_subagent offers {sorted(offered)}"


async def test_the_mcp_servers_spawn_tool_takes_every_option_it_is_meant_to(
    tmp_path: Path,
) -> None:
    """What `subagents mcp` lists, read by a real MCP client (Temporal need not be up)."""
    env = _env(tmp_path)
    async with asyncio.timeout(20), mcp_session(tmp_path, env, "--address", "127.0.0.1:1") as s:
        listed = {t.name: t for t in (await s.list_tools()).tools}
    offered = set(listed["spawn_subagent"].input_schema["properties"])
    wanted = OPTIONS - set(NOT_FOR_MODELS)
    assert wanted <= offered, _lacks("the MCP server's spawn_subagent tool", offered, wanted)
    assert not set(NOT_FOR_MODELS) & offered, "an option left out on purpose is offered"


async def test_the_client_refuses_an_unknown_option_by_name(client: SubagentClient) -> None:
    with pytest.raises(InvalidRequest, match=r"unknown spawn option 'max_turn'; the options are"):
        await client.spawn_task("explore", "x", max_turn=3)  # type: ignore[call-arg]


def test_the_notify_url_is_checked_and_carried_like_any_option() -> None:
    url = "https://hooks.example.com/subagents"
    options = SpawnOptions(notify_url=f" {url} ", task_id="mine-1")
    task_input = build_task_input(
        resolve_agent("explore"),
        "x",
        options,
        description="",
        parent_id=None,
        default_model=None,
        created_at=datetime.now(UTC),
    )
    assert task_input.notify_url == url
    with pytest.raises(InvalidRequest, match="notify_url holds credentials"):
        SpawnOptions(notify_url="https://user:secret@hooks.example.com/")
    with pytest.raises(InvalidRequest, match=r"task_id '\.\./x' is not valid"):
        SpawnOptions(task_id="../x")
    with pytest.raises(InvalidRequest, match="task_id must be a string, got int"):
        SpawnOptions(task_id=7)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"max_turn": 3}, "InvalidRequest: unknown spawn option 'max_turn'; the options are"),
        ({"notify_url": "ftp://x"}, "InvalidRequest: notify_url 'ftp://x' is not an http(s) URL"),
        ({"task_id": "../x"}, "InvalidRequest: task_id '../x' is not valid"),
    ],
)
async def test_start_subagent_refuses_a_bad_option_as_a_catchable_error(
    temporal_client: Client, settings: Settings, options: dict[str, Any], error: str
) -> None:
    """In a user's workflow a bad option is a non-retryable ApplicationError the workflow
    catches, never a workflow task that fails over and over."""
    async with (
        asyncio.timeout(30),
        create_worker(temporal_client, settings, workflows=[OptionsWorkflow]),
    ):
        message = await temporal_client.execute_workflow(
            OptionsWorkflow.run,
            options,
            id=f"options-{uuid.uuid4().hex[:6]}",
            task_queue=settings.task_queue,
        )
    assert message.startswith(error), message
