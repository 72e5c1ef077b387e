"""Every door of a spawn takes every spawn option, or says why it does not.

``SpawnOptions`` declares the options once; the client, ``start_subagent``, the command
line and a model's ``spawn_subagent`` tool each take them. A new option that one door
forgets fails here, naming the door.
"""

from __future__ import annotations

import inspect

import typer.main

from durable_subagents import SubagentClient
from durable_subagents._spawn_options import SpawnOptions
from durable_subagents.cli import app
from durable_subagents.client._tools import SpawnSubagent
from durable_subagents.workflows import start_subagent

OPTIONS = set(SpawnOptions.model_fields)

CLI_NAMES = {
    "tools": "tool",
    "disallowed_tools": "disallow",
    "permissions": "ask",  # and --deny
    "network": "no_network",  # only narrows: the flag takes the network away
}
"""Options the command line spells its own way."""

NOT_FOR_MODELS = {
    "approval_timeout": "how long a person has is the spawner's person's choice",
    "disallowed_tools": "a model narrows with tools, the allowlist",
    "metadata": "metadata is the application's, never a model's",
    "network": "the agent's own setting, not a model's to change",
    "permission_mode": "a model cannot choose how its child is supervised",
    "permissions": "rules are the application's",
    "time_limit": "a model's child inherits what its parent has left",
    "token_budget": "a model's child gets a share of its parent's budget",
    "workspace": "a model's child works in its parent's workspace",
}
"""Options a model's spawn_subagent tool leaves out on purpose, and why."""


def _parameters(fn: object) -> set[str]:
    return set(inspect.signature(fn).parameters) - {"self"}  # type: ignore[arg-type]


def test_spawn_task_takes_every_option() -> None:
    assert OPTIONS <= _parameters(SubagentClient.spawn_task)


def test_start_subagent_takes_every_option() -> None:
    assert OPTIONS <= _parameters(start_subagent)


def test_the_command_line_takes_every_option() -> None:
    spawn = typer.main.get_command(app).commands["spawn"]  # type: ignore[attr-defined]
    names = {p.name for p in spawn.params}
    assert {CLI_NAMES.get(o, o) for o in OPTIONS} <= names


def test_a_models_spawn_tool_takes_every_option_it_is_meant_to() -> None:
    fields = set(SpawnSubagent.model_fields)
    assert OPTIONS - set(NOT_FOR_MODELS) <= fields
    assert not set(NOT_FOR_MODELS) & fields, "an option left out on purpose is offered"
