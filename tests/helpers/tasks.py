"""Scripting a task's model, and readying a workspace for the tool user."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

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
