"""Recorded histories must keep replaying: running tasks survive worker upgrades."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer
from temporalio.workflow import NondeterminismError

from durable_subagents.worker._worker import workflow_runner
from durable_subagents.workflows import SubagentWorkflow

from ..histories import HISTORIES
from ..histories.record import SCENARIOS, VERSION


def test_histories_are_committed() -> None:
    """Every scenario ``record`` knows, recorded from the current baseline."""
    stems = {p.stem for p in HISTORIES}
    assert {f"{name}-{VERSION}" for name in SCENARIOS} <= stems


def workflow_id(text: str, stem: str) -> str:
    """The id a history replays under: the recorded task's own where its commands name it.

    A notification's workflow id is the task's id and a suffix, so a history with
    notifications replays only under the id it was recorded with.
    """
    found = re.search(r'"workflowId": *"([^"]+)-notify-[0-9a-f]{16}"', text)
    return found.group(1) if found else f"replay-{stem}"


@pytest.mark.parametrize("sandboxed", [True, False], ids=["sandboxed", "unsandboxed"])
@pytest.mark.parametrize("path", HISTORIES, ids=lambda p: p.stem)
async def test_replays(path: Path, sandboxed: bool) -> None:
    """In the workflow sandbox and, as ``subagent_workflow_sandbox=False`` runs it, outside."""
    text = path.read_text()
    history = WorkflowHistory.from_json(workflow_id(text, path.stem), text)
    replayer = Replayer(
        workflows=[SubagentWorkflow],
        data_converter=pydantic_data_converter,
        workflow_runner=workflow_runner(sandboxed),
    )
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None, result.replay_failure


@pytest.mark.parametrize("sandboxed", [True, False], ids=["sandboxed", "unsandboxed"])
async def test_a_changed_workflow_is_caught(
    monkeypatch: pytest.MonkeyPatch, sandboxed: bool
) -> None:
    """The replay test can fail: a workflow that schedules differently is detected.

    The name is changed where the workflow code gets it: in the module already imported
    (outside the sandbox), and in the payloads module the sandbox's fresh import of the
    workflow code takes it from (passed through).
    """
    import durable_subagents.wire._payloads as payloads
    import durable_subagents.workflows._model_turns as module

    monkeypatch.setattr(module, "MODEL_TURN_ACTIVITY", "renamed_model_turn")
    monkeypatch.setattr(payloads, "MODEL_TURN_ACTIVITY", "renamed_model_turn")
    history = WorkflowHistory.from_json("replay-x", (HISTORIES[0]).read_text())
    replayer = Replayer(
        workflows=[SubagentWorkflow],
        data_converter=pydantic_data_converter,
        workflow_runner=workflow_runner(sandboxed),
    )
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    # Caught as nondeterminism, naming the activity the history has and the one the
    # changed code asked for; not some other failure of the replay.
    assert isinstance(result.replay_failure, NondeterminismError), result.replay_failure
    message = str(result.replay_failure)
    assert "renamed_model_turn" in message, message
    assert "model_turn" in message.replace("renamed_model_turn", ""), message
