"""Scripting a task's model, readying a workspace for the tool user, seeing a turn run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import PendingActivityState
from temporalio.client import Client

from durable_subagents.testing import workspace_for_tools

TEST_MODELS = {"SUBAGENTS_ALLOW_SCRIPTED": "true", "SUBAGENTS_MODELS": "*"}
"""What the suite's workers run: the scripted model (its tasks' models are scripts) and
any model of the fake providers. The suite's process has them (conftest); an
environment built apart from it for a worker adds them."""

TOOL_USER = (10001, 10001)
"""Owner of the tests' workspaces when the suite runs as root: a root worker runs tool
commands as the workspace's owner, as it would for a user's checkout."""


def give_to_tool_user(path: Path) -> Path:
    """Make ``path`` and what it holds the tool user's (no-op when not root).

    A test writes its fixture files as root; in a real checkout their owner wrote them.
    """
    return workspace_for_tools(path, TOOL_USER)


def script(*turns: dict[str, Any], repeat: int | None = None, final: str | None = None) -> str:
    """A ``scripted:`` model string with an inline script."""
    body: Any = list(turns)
    if repeat is not None:
        body = {"turns": list(turns), "repeat": repeat}
        if final is not None:
            body["final"] = final
    return "scripted:" + json.dumps(body)


async def model_turn_started(temporal: Client, task_id: str) -> bool:
    """Whether a worker has started a model turn of ``task_id`` that has not ended."""
    desc = await temporal.get_workflow_handle(task_id).describe()
    return any(
        a.activity_type.name == "model_turn"
        and a.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
        for a in desc.raw_description.pending_activities
    )
