"""Activity options on a real worker and dev server: what a task's activities run with.

The options a task's activities are scheduled with are in its history: each test reads
them there, and sees the outcome they cause (an attempt cut off, a retry, none).
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType, TimeoutType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client
from temporalio.worker import Replayer

from durable_subagents import (
    ActivityConfig,
    ActivityOptions,
    AgentSpec,
    InvalidRequest,
    SubagentClient,
    TaskStatus,
)
from durable_subagents.config import Settings
from durable_subagents.worker import create_worker
from durable_subagents.worker._worker import workflow_runner
from durable_subagents.workflows import SubagentWorkflow

from ..helpers import CEILING
from ..helpers.processes import processes_matching, unique_sleep, wait_for
from ..helpers.tasks import script


async def history(temporal: Client, task_id: str) -> list[HistoryEvent]:
    return [e async for e in temporal.get_workflow_handle(task_id).fetch_history_events()]


def scheduled(events: list[HistoryEvent], activity: str) -> list[Any]:
    """The scheduled-event attributes of every ``activity`` the run scheduled."""
    return [
        e.activity_task_scheduled_event_attributes
        for e in events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == activity
    ]


def local_activities(events: list[HistoryEvent], activity: str) -> list[HistoryEvent]:
    """The markers of every ``activity`` the run ran as a local activity."""
    return [
        e
        for e in events
        if e.marker_recorded_event_attributes.marker_name == "core_local_activity"
        and json.loads(e.marker_recorded_event_attributes.details["data"].payloads[0].data)[
            "activity_type"
        ]
        == activity
    ]


def of_type(events: list[HistoryEvent], kind: EventType.ValueType) -> list[HistoryEvent]:
    return [e for e in events if e.event_type == kind]


def sleeper_agent(sleep: str, **options: Any) -> tuple[AgentSpec, str]:
    """An agent that runs ``sleep`` once, rerunning it if cut off, and its model."""
    agent = AgentSpec(
        name="sleeper",
        description="Runs one command.",
        tools=["bash"],
        permission_mode="dont_ask",
        on_interrupted="rerun",
        activity_options=ActivityOptions(tool_call=ActivityConfig(**options)),
    )
    model = script(
        {"tool_calls": [{"name": "bash", "arguments": {"command": sleep}}]},
        {"text": "slept"},
    )
    return agent, model


async def test_an_agents_short_start_to_close_cuts_each_attempt_and_retries_as_it_says(
    client: SubagentClient, temporal_client: Client, settings: Settings
) -> None:
    sleep = unique_sleep(3401)
    agent, model = sleeper_agent(sleep, start_to_close=2, maximum_attempts=2)
    client.agents["sleeper"] = agent
    async with create_worker(temporal_client, settings):
        began = time.monotonic()
        task_id = await client.spawn_task("sleeper", "sleep", model=model)
        info = await client.check_task(task_id, wait=True, timeout=CEILING)
        took = time.monotonic() - began
        await wait_for(lambda: not processes_matching(sleep), what="the cut-off sleeps gone")
    assert info.status == TaskStatus.FAILED, info
    assert "timeout" in (info.error or "").lower(), info.error
    assert took < 3401, took  # each attempt cut at 2 s, not at the default 660 s
    events = await history(temporal_client, task_id)
    [tool] = scheduled(events, "run_tool")
    assert tool.start_to_close_timeout.ToSeconds() == 2
    assert tool.heartbeat_timeout.ToSeconds() == 2  # the worker's 10 s fits in 2 s
    assert tool.retry_policy.maximum_attempts == 2
    [started] = of_type(events, EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED)[-1:]
    assert started.activity_task_started_event_attributes.attempt == 2
    [timed_out] = of_type(events, EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT)
    failure = timed_out.activity_task_timed_out_event_attributes.failure
    assert failure.timeout_failure_info.timeout_type in (
        TimeoutType.TIMEOUT_TYPE_START_TO_CLOSE,
        TimeoutType.TIMEOUT_TYPE_HEARTBEAT,
    )
    # The model turns keep the worker's options: the agent narrowed tool calls only.
    for turn in scheduled(events, "model_turn"):
        assert turn.start_to_close_timeout.ToSeconds() == 600
        assert turn.retry_policy.maximum_attempts == 10


async def test_a_workers_options_bind_its_tasks_and_an_agent_cannot_widen_them(
    client: SubagentClient, temporal_client: Client, settings: Settings
) -> None:
    sleep = unique_sleep(3402)
    agent, model = sleeper_agent(sleep, start_to_close=2, maximum_attempts=5)
    client.agents["sleeper"] = agent
    worker_options = {"tool_call": {"maximum_attempts": 1}, "model_turn": {"start_to_close": "5m"}}
    async with create_worker(temporal_client, settings, activity_options=worker_options):
        task_id = await client.spawn_task("sleeper", "sleep", model=model)
        info = await client.check_task(task_id, wait=True, timeout=CEILING)
        await wait_for(lambda: not processes_matching(sleep), what="the cut-off sleep gone")
    assert info.status == TaskStatus.FAILED, info
    events = await history(temporal_client, task_id)
    [tool] = scheduled(events, "run_tool")
    assert tool.retry_policy.maximum_attempts == 1  # the agent's 5 is kept at the worker's 1
    assert tool.start_to_close_timeout.ToSeconds() == 2
    [started] = of_type(events, EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED)[-1:]
    assert started.activity_task_started_event_attributes.attempt == 1
    [turn] = scheduled(events, "model_turn")
    assert turn.start_to_close_timeout.ToSeconds() == 300
    assert turn.heartbeat_timeout.ToSeconds() == 15
    [asked] = local_activities(events, "activity_options")  # asked once, recorded
    # in the workflow task that scheduled the first turn: no round trip of its own
    assert (
        asked.marker_recorded_event_attributes.workflow_task_completed_event_id
        == turn.workflow_task_completed_event_id
    )


async def test_a_task_keeps_the_options_it_started_with_on_a_worker_with_others(
    client: SubagentClient, temporal_client: Client, settings: Settings
) -> None:
    model = script(
        {"tool_calls": [{"name": "bash", "arguments": {"command": "echo hi > hi.txt"}}]},
        {"text": "said hi"},
    )
    first = {"tool_call": {"start_to_close": "100s", "maximum_attempts": 2}}
    async with create_worker(temporal_client, settings, activity_options=first):
        task_id = await client.spawn_task(
            "general", "say hi", model=model, permission_mode="default"
        )
        paused = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert paused.status == TaskStatus.PAUSED, paused  # a write asks in the default mode
    second = {"tool_call": {"start_to_close": "150s", "maximum_attempts": 4}}
    async with create_worker(temporal_client, settings, activity_options=second):
        await client.approve(task_id)
        info = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert info.status == TaskStatus.COMPLETED, info.error
    [tool] = scheduled(await history(temporal_client, task_id), "run_tool")
    assert tool.start_to_close_timeout.ToSeconds() == 100  # under the call's own 180 s
    assert tool.retry_policy.maximum_attempts == 2


async def test_a_subagents_child_is_bound_by_its_parents_narrowed_options(
    client: SubagentClient, temporal_client: Client, settings: Settings
) -> None:
    client.agents["lead"] = AgentSpec(
        name="lead",
        description="Splits the work.",
        tools=["read_file"],
        may_spawn=True,
        activity_options=ActivityOptions(model_turn=ActivityConfig(maximum_attempts=4)),
    )
    child = script({"text": "child done"})
    spawn = {"agent": "explore", "prompt": "part", "model": child}
    lead = script(
        {"tool_calls": [{"name": "spawn_subagent", "arguments": spawn}]},
        {"tool_calls": [{"name": "wait_subagents", "arguments": {}}]},
        {"text": "lead done"},
    )
    worker_options = "model_turn.start_to_close=4m"
    async with create_worker(temporal_client, settings, activity_options=worker_options):
        task_id = await client.spawn_task("lead", "split", model=lead)
        info = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert info.status == TaskStatus.COMPLETED, info.error
    [kid] = await client.list_tasks(parent_id=task_id)
    events = await history(temporal_client, kid.id)
    [turn] = scheduled(events, "model_turn")
    assert turn.retry_policy.maximum_attempts == 4  # its parent's agent's
    assert turn.start_to_close_timeout.ToSeconds() == 240  # its parent's worker's
    assert local_activities(events, "activity_options") == []  # given, not asked


async def test_a_history_with_recorded_options_replays_without_asking_a_worker(
    client: SubagentClient, temporal_client: Client, settings: Settings
) -> None:
    model = script(
        {"tool_calls": [{"name": "bash", "arguments": {"command": "echo hi"}}]},
        {"text": "said hi"},
    )
    options = "tool_call.start_to_close=100s,model_turn.maximum_attempts=4"
    async with create_worker(temporal_client, settings, activity_options=options):
        task_id = await client.spawn_task("general", "say hi", model=model)
        info = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert info.status == TaskStatus.COMPLETED, info.error
    history = await temporal_client.get_workflow_handle(task_id).fetch_history()
    replayer = Replayer(
        workflows=[SubagentWorkflow],
        data_converter=temporal_client.data_converter,
        workflow_runner=workflow_runner(True),
    )
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None, result.replay_failure


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ("tool_call.heartbeat=0", "tool_call.heartbeat: '0' is not a duration above 0"),
        ({"compaction": {"attempts": 2}}, "unknown activity option compaction.attempts"),
        ({"model_turns": {}}, "unknown activity model_turns"),
    ],
)
async def test_a_worker_with_a_bad_option_is_refused_before_it_starts(
    temporal_client: Client, settings: Settings, options: object, message: str
) -> None:
    with pytest.raises(InvalidRequest, match=message):
        create_worker(temporal_client, settings, activity_options=options)  # type: ignore[arg-type]
