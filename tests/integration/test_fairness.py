"""Task-queue fairness: one orchestrator's swarm does not starve another's task.

Every task spawned under one parent id shares a fairness key (its children and
activities inherit it). On a server with fairness (``matching.enableFairness``, which
``subagents dev`` sets), the queue dispatches in turn between keys.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from durable_subagents import SubagentClient, TaskStatus, connect_client
from durable_subagents.config import Settings
from durable_subagents.devserver._dev_server import FAIRNESS_DYNAMIC_CONFIG
from durable_subagents.testing import DevServer, free_port
from durable_subagents.worker import create_worker

from ..helpers.tasks import script

SWARM = 16
TURN = 0.25
"""Seconds each model turn takes; the worker runs one at a time."""


async def b_waits(server: DevServer, settings: Settings) -> int:
    """How many of orchestrator A's tasks finished before B's one task."""
    temporal = await connect_client(server.address, server.namespace)
    local = settings.model_copy(update={"address": server.address})
    client = SubagentClient(temporal, task_queue=local.task_queue, blob_store=local.blob_store())
    turn = script({"text": "done", "delay": TURN})
    async with create_worker(temporal, local, max_concurrent_activities=1):
        swarm = [
            await client.spawn_task("explore", f"part {i}", parent_id="orchestrator-a", model=turn)
            for i in range(SWARM)
        ]
        lone = await client.spawn_task("explore", "mine", parent_id="orchestrator-b", model=turn)
        info = await client.check_task(lone, wait=True, timeout=120)
        described = await temporal.get_workflow_handle(lone).describe()
        key = described.raw_description.workflow_execution_info.priority.fairness_key
        assert key == "orchestrator-b"
        before = sum(
            1
            for t in await client.wait_tasks(swarm, mode="all", timeout=0.01)
            if t.status == TaskStatus.COMPLETED
            and t.finished_at
            and info.finished_at
            and t.finished_at < info.finished_at
        )
        await client.wait_tasks(swarm, timeout=120)
    assert info.status == TaskStatus.COMPLETED
    return before


@pytest.mark.parametrize("fair", [True, False], ids=["fairness", "fifo"])
async def test_a_swarm_does_not_starve_another_orchestrators_task(
    tmp_path: Path, settings: Settings, fair: bool
) -> None:
    config = {**FAIRNESS_DYNAMIC_CONFIG} if fair else {"matching.enableFairness": "false"}
    # One partition: with several, a queue's order is only approximate either way.
    config["matching.numTaskqueueReadPartitions"] = "1"
    config["matching.numTaskqueueWritePartitions"] = "1"
    async with DevServer(
        port=free_port(), ui=False, db=tmp_path / "t.db", dynamic_config=config
    ) as server:
        before = await b_waits(server, settings)
    if fair:
        # B's turn is dispatched among A's, not after them all (measured: 6 of 16).
        assert before < SWARM / 2, before
    else:
        # The control: first in, first out, B waits behind the swarm (nearly all of it:
        # a swarm task whose first step asks its worker's settings may start after B).
        assert before > SWARM * 3 / 4, before
