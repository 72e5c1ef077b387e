"""Work a signal handler sets going is finished before the run closes or continues as new.

A handler returns at once: a decision on a child's call is sent on to the child, and a
registration is checked, by tasks of their own (``workflows/_background.py``). Each test
makes the handler's signal and the step that ends the run arrive in one workflow task:
with no worker running the task's workflows, the step ends (a model turn on a worker
with only the activities, or a tool call on the ``tools`` worker) and the signal comes;
then a workflow worker starts, and the run closes, or continues as new, in the very
activation that set the handler's work going.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType, PendingActivityState, WorkflowTaskFailedCause
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.worker import Worker, WorkerConfig

from durable_subagents import AgentSpec, PermissionRule, SubagentClient, TaskStatus
from durable_subagents.config import Settings
from durable_subagents.tools import BUILTIN_TOOLS, Tool, ToolRegistry, tool
from durable_subagents.wire._payloads import (
    CHILD_STATE_SIGNAL,
    DECIDE_SIGNAL,
    MODEL_TURN_ACTIVITY,
    OWN_TASKS_ACTIVITY,
    REGISTER_CHILD_SIGNAL,
    RUN_TOOL_ACTIVITY,
    ChildState,
)
from durable_subagents.worker import create_worker
from durable_subagents.worker._lifecycle import RunOnlyPlugin

from ..helpers import CEILING, eventually
from ..helpers.tasks import script

E = EventType


def holding(released: defaultdict[str, threading.Event], started: set[str]) -> Tool:
    """A tool whose call ``label`` runs until the test sets ``released[label]``."""

    @tool
    def hold(label: str) -> str:
        """Hold until the test lets this call end.

        Args:
            label: Which of the test's events ends it.
        """
        started.add(label)
        released[label].wait(CEILING)
        return f"held {label}"

    return hold


@pytest.fixture
def held() -> tuple[defaultdict[str, threading.Event], set[str]]:
    return defaultdict(threading.Event), set()


@pytest.fixture
def registry(held: tuple[defaultdict[str, threading.Event], set[str]]) -> ToolRegistry:
    tools = ToolRegistry(dict(BUILTIN_TOOLS))
    tools.register(holding(*held))
    return tools


@pytest.fixture
async def tools_worker(
    temporal_client: Client,
    settings: Settings,
    registry: ToolRegistry,
    held: tuple[defaultdict[str, threading.Event], set[str]],
) -> AsyncIterator[None]:
    """The tool queue's worker, up for the whole test; no call is left holding after it."""
    try:
        async with create_worker(temporal_client, settings, tools=registry, role="tools"):
            yield
            for event in held[0].values():
                event.set()
    finally:
        for event in held[0].values():
            event.set()


class Only(RunOnlyPlugin):
    """Keeps only the workflows (and their local activities) or only the activities of
    the worker it configures."""

    def __init__(self, part: str) -> None:
        self.part = part

    def configure_worker(self, config: WorkerConfig) -> WorkerConfig:
        """The worker's configuration without the other part."""
        if self.part == "workflows":
            return {**config, "no_remote_activities": True}
        return {**config, "workflows": []}

    async def run_worker(self, worker: Worker, next: Callable[[Worker], Awaitable[None]]) -> None:
        """Run the worker as it is."""
        await next(worker)


@pytest.fixture
def tasks_worker(
    temporal_client: Client, settings: Settings, registry: ToolRegistry
) -> Callable[..., Worker]:
    """A new worker for the tasks (workflows and model turns), without their tool queue.

    ``only``: ``workflows`` or ``activities``, for a worker with only those. It gives up
    a task's sticky queue after a second, so a task whose worker stopped goes to the
    next one.
    """

    def make(only: str | None = None) -> Worker:
        return create_worker(
            temporal_client,
            settings,
            tools=registry,
            role="tasks",
            sticky_queue_timeout=timedelta(seconds=1),
            plugins=[Only(only)] if only else [],
        )

    return make


@pytest.fixture
def lead(client: SubagentClient) -> SubagentClient:
    client.agents["holder"] = AgentSpec(
        name="holder",
        tools=["hold", "bash"],
        permissions=[
            PermissionRule(tool="hold", action="allow"),
            PermissionRule(tool="bash", action="ask"),
        ],
        may_spawn=True,
    )
    return client


def hold(label: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "hold", "arguments": {"label": label}}]}


async def events(temporal: Client, task_id: str, run_id: str | None = None) -> list[HistoryEvent]:
    handle = temporal.get_workflow_handle(task_id, run_id=run_id)
    return [e async for e in handle.fetch_history_events()]


def completed(history: list[HistoryEvent], activity: str) -> list[int]:
    """The indexes of the events that recorded the end of the run's ``activity`` calls."""
    ids = {
        e.event_id
        for e in history
        if e.event_type == E.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == activity
    }
    return [
        i
        for i, e in enumerate(history)
        if e.event_type == E.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
        and e.activity_task_completed_event_attributes.scheduled_event_id in ids
    ]


def hold_ended(history: list[HistoryEvent]) -> int | None:
    """The index of the event that recorded the end of the run's ``hold`` call."""
    ended = completed(history, RUN_TOOL_ACTIVITY)
    return ended[0] if ended else None


def signalled(history: list[HistoryEvent], name: str) -> list[int]:
    return [
        i
        for i, e in enumerate(history)
        if e.event_type == E.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
        and e.workflow_execution_signaled_event_attributes.signal_name == name
    ]


def index(history: list[HistoryEvent], event_type: EventType.ValueType) -> int:
    """The index of the run's one event of ``event_type``."""
    found = [i for i, e in enumerate(history) if e.event_type == event_type]
    assert len(found) == 1, (EventType.Name(event_type), found)
    return found[0]


def one(found: list[int], what: str) -> int:
    assert len(found) == 1, f"{what}: {len(found)} events"
    return found[0]


def in_one_workflow_task(history: list[HistoryEvent], a: int, b: int) -> bool:
    """Whether events ``a`` and ``b`` reached the workflow in the same workflow task."""
    low, high = sorted((a, b))
    return not any(
        e.event_type == E.EVENT_TYPE_WORKFLOW_TASK_STARTED for e in history[low : high + 1]
    )


def failed_workflow_tasks(history: list[HistoryEvent]) -> list[str]:
    """The causes of failed workflow tasks but for the server's refusal of a completion
    that new events overtook (``UNHANDLED_COMMAND``: the task is simply run again)."""
    unhandled = WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_UNHANDLED_COMMAND
    return [
        WorkflowTaskFailedCause.Name(e.workflow_task_failed_event_attributes.cause)
        + ": "
        + e.workflow_task_failed_event_attributes.failure.message
        for e in history
        if e.event_type == E.EVENT_TYPE_WORKFLOW_TASK_FAILED
        and e.workflow_task_failed_event_attributes.cause != unhandled
    ]


@asynccontextmanager
async def running(worker: Worker) -> AsyncIterator[None]:
    async with worker:
        yield


async def test_a_decision_routed_to_a_child_as_the_parent_ends_reaches_the_child(
    lead: SubagentClient,
    temporal_client: Client,
    tools_worker: None,
    tasks_worker: Callable[..., Worker],
    held: tuple[defaultdict[str, threading.Event], set[str]],
) -> None:
    """The parent's last model turn answers and the decision on its child's call comes
    in the same workflow task: the parent ends its run there, and sends the decision on
    before it closes."""
    released, started = held
    child_model = script(
        {"tool_calls": [{"name": "bash", "arguments": {"command": "echo child > c.txt"}}]},
        {"text": "child done"},
    )
    spawn = {"agent": "general", "prompt": "write c.txt", "model": child_model}
    model = script(
        {"tool_calls": [{"name": "spawn_subagent", "arguments": spawn}]},
        hold("last"),  # until the child has paused
        {"text": "lead done"},
    )
    async with running(tasks_worker("workflows")):
        async with running(tasks_worker("activities")):
            task_id = await lead.spawn_task("holder", "delegate", model=model)

            async def child_paused() -> bool:
                info = await lead.check_task(task_id)
                return bool(info.pending_approvals) and "last" in started

            await eventually(child_paused, "the child paused while the parent's call runs")
        # No worker takes model turns now: the parent's last one waits, scheduled.
        released["last"].set()
        await eventually(
            lambda: model_turn_waits(temporal_client, task_id), "the last turn to be scheduled"
        )
    paused = await lead.check_task(task_id)
    [call] = paused.pending_approvals
    child_id = call.call_id.split("/")[0]

    # No workflow worker: the turn's answer and the decision wait for the next one together.
    async with running(tasks_worker("activities")):

        async def answered() -> bool:
            ended = completed(await events(temporal_client, task_id), MODEL_TURN_ACTIVITY)
            return len(ended) == 3

        await eventually(answered, "the parent's last turn to answer")
        await lead.approve(task_id)
        async with running(tasks_worker("workflows")):
            info = await lead.check_task(task_id, wait=True, timeout=CEILING)
            child_history: list[HistoryEvent] = []

            async def child_closed() -> bool:
                child_history[:] = await events(temporal_client, child_id)
                return child_history[-1].event_type in CLOSED

            await eventually(child_closed, "the child to close")

    assert info.status == TaskStatus.COMPLETED and info.result == "lead done", info
    history = await events(temporal_client, task_id)
    ended = completed(history, MODEL_TURN_ACTIVITY)[-1]
    decided = one(signalled(history, DECIDE_SIGNAL), "the decision")
    assert in_one_workflow_task(history, ended, decided), "the race was not set up"
    sent = index(history, E.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED)
    attrs = history[sent].signal_external_workflow_execution_initiated_event_attributes
    assert (attrs.signal_name, attrs.workflow_execution.workflow_id) == (DECIDE_SIGNAL, child_id)
    delivered = index(history, E.EVENT_TYPE_EXTERNAL_WORKFLOW_EXECUTION_SIGNALED)
    closed = index(history, E.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED)
    assert decided < sent < delivered < closed
    assert failed_workflow_tasks(history) == []

    # The child had the decision before its parent's close cancelled it, and acted on it.
    got = one(signalled(child_history, DECIDE_SIGNAL), "the decision the child got")
    cancels = [
        i
        for i, e in enumerate(child_history)
        if e.event_type == E.EVENT_TYPE_WORKFLOW_EXECUTION_CANCEL_REQUESTED
    ]
    assert all(got < i for i in cancels), (got, cancels)
    ran = [
        i
        for i, e in enumerate(child_history)
        if e.event_type == E.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == RUN_TOOL_ACTIVITY
    ]
    assert ran and got < ran[0], "the child never ran the approved call"
    assert failed_workflow_tasks(child_history) == []


CLOSED = {
    E.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED,
    E.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED,
    E.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED,
    E.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED,
    E.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT,
}


async def model_turn_waits(temporal: Client, task_id: str) -> bool:
    """Whether a model turn of ``task_id`` is scheduled and no worker has started it."""
    desc = await temporal.get_workflow_handle(task_id).describe()
    return any(
        a.activity_type.name == MODEL_TURN_ACTIVITY
        and a.state == PendingActivityState.PENDING_ACTIVITY_STATE_SCHEDULED
        for a in desc.raw_description.pending_activities
    )


async def hold_ended_in(temporal: Client, task_id: str) -> bool:
    return hold_ended(await events(temporal, task_id)) is not None


async def test_continue_as_new_waits_for_the_check_a_registration_started(
    lead: SubagentClient,
    temporal_client: Client,
    tools_worker: None,
    tasks_worker: Callable[..., Worker],
    held: tuple[defaultdict[str, threading.Event], set[str]],
) -> None:
    """A registration comes in the workflow task that continues the run as new: the
    run waits for its check (an activity) before it goes on as new, and the new run
    still has the registered task (cancelling it cancels that task too)."""
    released, started = held
    bash = {"tool_calls": [{"name": "bash", "arguments": {"command": "echo later"}}]}
    model = script(hold("first"), bash, {"text": "done"})
    async with running(tasks_worker()):
        task_id = await lead.spawn_task("holder", "hold", model=model)
        await eventually(lambda: "first" in started, "the call to run")
        first_run = (await temporal_client.get_workflow_handle(task_id).describe()).run_id
    handle = temporal_client.get_workflow_handle(task_id)

    # With no workflow worker, the run's history passes the length at which the server
    # suggests continuing as new (600 events, conftest): signals it ignores, from no child.
    stranger = ChildState(task_id="not-a-child-of-it", status=TaskStatus.RUNNING)

    while (await handle.describe()).raw_description.workflow_execution_info.history_length < 620:
        for _ in range(50):
            await handle.signal(CHILD_STATE_SIGNAL, stranger)
    released["first"].set()
    await eventually(lambda: hold_ended_in(temporal_client, task_id), "the call to end")
    registered = await lead.spawn_task(
        "holder", "wait", parent_id=task_id, model=script(bash, {"text": "done"})
    )

    async with running(tasks_worker()):

        async def continued() -> bool:
            desc = await temporal_client.get_workflow_handle(task_id, run_id=first_run).describe()
            return desc.status == WorkflowExecutionStatus.CONTINUED_AS_NEW

        await eventually(continued, "the run to continue as new")
        history = await events(temporal_client, task_id, first_run)
        ended = hold_ended(history)
        registration = one(signalled(history, REGISTER_CHILD_SIGNAL), "the registration")
        assert ended is not None
        assert in_one_workflow_task(history, ended, registration), "the race was not set up"
        check = one(completed(history, OWN_TASKS_ACTIVITY), "the check, ended in this run")
        continued_at = index(history, E.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW)
        assert registration < check < continued_at
        assert failed_workflow_tasks(history) == []

        # The new run knows the registered task: cancelling it cancels that one too.
        async def both_paused() -> bool:
            infos = [await lead.check_task(t) for t in (task_id, registered)]
            return all(i.status == TaskStatus.PAUSED for i in infos)

        await eventually(both_paused, "the new run and the registered task to pause")
        await lead.cancel_task(task_id, timeout=CEILING)
        info = await lead.check_task(registered, wait=True, timeout=CEILING)
    assert info.status == TaskStatus.CANCELLED, info
