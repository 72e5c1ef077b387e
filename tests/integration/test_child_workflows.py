"""Subagents as child workflows of a user's own workflows: results, listing, cascade."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError

from durable_subagents import SubagentClient, TaskStatus
from durable_subagents.config import Settings
from durable_subagents.worker import create_worker

from ..helpers.processes import processes_matching, unique_sleep, wait_for
from ..helpers.tasks import script
from ..parent_workflows import BadRequestWorkflow, FanOutWorkflow, LongChildWorkflow

SLEEP_3801 = unique_sleep(3801)

WORKFLOWS = [FanOutWorkflow, BadRequestWorkflow, LongChildWorkflow]


async def test_a_workflow_fans_out_to_subagents(
    client: SubagentClient, temporal_client: Client, settings: Settings
) -> None:
    model = script({"text": "answer for {prompt}"})
    parent_id = f"fan-out-{uuid.uuid4().hex[:6]}"
    async with create_worker(temporal_client, settings, workflows=WORKFLOWS):
        results = await temporal_client.execute_workflow(
            FanOutWorkflow.run,
            [model, "alpha", "beta"],
            id=parent_id,
            task_queue=settings.task_queue,
        )
    assert [r.split("=", 1)[1] for r in results] == [
        "completed:answer for alpha",
        "completed:answer for beta",
    ]
    child_ids = [r.split("=", 1)[0] for r in results]
    assert all(c.startswith("subagent-explore-") for c in child_ids)
    info = await client.check_task(child_ids[0])
    assert info.status == TaskStatus.COMPLETED and info.parent_id == parent_id
    assert info.description == "part 0"
    for _ in range(50):
        listed = await client.list_tasks(parent_id=parent_id)
        if len(listed) == 2:
            break
        await asyncio.sleep(0.2)
    assert sorted(t.id for t in listed) == sorted(child_ids)


async def test_a_bad_request_is_a_catchable_error(
    temporal_client: Client, settings: Settings
) -> None:
    async with create_worker(temporal_client, settings, workflows=WORKFLOWS):
        message = await temporal_client.execute_workflow(
            BadRequestWorkflow.run, id=f"bad-{uuid.uuid4().hex[:6]}", task_queue=settings.task_queue
        )
    assert message.startswith("InvalidRequest: unknown agent 'explor'; known: explore")


async def test_cancelling_the_parent_cancels_the_subagent_and_its_processes(
    client: SubagentClient, temporal_client: Client, settings: Settings
) -> None:
    model = script({"tool_calls": [{"name": "bash", "arguments": {"command": SLEEP_3801}}]})
    parent_id = f"long-{uuid.uuid4().hex[:6]}"
    async with create_worker(temporal_client, settings, workflows=WORKFLOWS):
        handle = await temporal_client.start_workflow(
            LongChildWorkflow.run, model, id=parent_id, task_queue=settings.task_queue
        )
        await wait_for(lambda: bool(processes_matching(SLEEP_3801)), what="the child's command")
        await handle.cancel()
        with pytest.raises(WorkflowFailureError):
            await handle.result()
        await wait_for(lambda: not processes_matching(SLEEP_3801), what="the command to die")
    children = [
        e.start_child_workflow_execution_initiated_event_attributes.workflow_id
        async for e in handle.fetch_history_events()
        if e.event_type == EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED
    ]
    assert len(children) == 1
    child = children[0]
    info = await client.check_task(child)
    assert info.status == TaskStatus.CANCELLED
    desc = await temporal_client.get_workflow_handle(child).describe()
    assert desc.status == WorkflowExecutionStatus.CANCELED
