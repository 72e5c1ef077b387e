"""Fleet-wide model rate limits: a provider's turns on a queue the server rate-limits.

Two workers share a limit of 5 model turns a second; the fake OpenAI server counts
what reaches it. Each worker has its own client, as separate hosts would.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import pytest
from temporalio.api.enums.v1 import TaskQueueKind, TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client

from durable_subagents import SubagentClient, TaskStatus, connect_client
from durable_subagents.config import Settings
from durable_subagents.testing import DevServer, FakeOpenAIServer
from durable_subagents.wire._payloads import model_queue
from durable_subagents.worker import create_worker

RATE = 5.0
TASKS = 30


@contextlib.asynccontextmanager
async def workers(dev_server: DevServer, settings: Settings, count: int) -> AsyncIterator[None]:
    async with contextlib.AsyncExitStack() as stack:
        for i in range(count):
            temporal = await connect_client(
                dev_server.address, dev_server.namespace, identity=f"rate-worker-{i}"
            )
            await stack.enter_async_context(create_worker(temporal, settings))
        yield


def most_in_a_second(times: list[float]) -> int:
    """The most requests any one-second window holds."""
    times = sorted(times)
    return max(sum(1 for t in times[i:] if t < start + 1.0) for i, start in enumerate(times))


async def test_two_workers_stay_under_the_fleet_wide_rate(
    dev_server: DevServer,
    settings: Settings,
    client: SubagentClient,
    temporal_client: Client,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    limited = settings.model_copy(update={"model_rate_limits": f"openai={RATE:g}"})
    async with FakeOpenAIServer() as srv, workers(dev_server, limited, 2):
        monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-fake-rate")
        ids = [
            await client.spawn_task("explore", f"question {i}", model="openai:gpt-rate")
            for i in range(TASKS)
        ]
        done = await client.wait_tasks(ids, timeout=120)
        described = await temporal_client.workflow_service.describe_task_queue(
            DescribeTaskQueueRequest(
                namespace=temporal_client.namespace,
                task_queue=TaskQueue(
                    name=model_queue(settings.task_queue, "openai"),
                    kind=TaskQueueKind.TASK_QUEUE_KIND_NORMAL,
                ),
                task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY,
            )
        )
    assert all(info.status == TaskStatus.COMPLETED for info in done)
    times = sorted(srv.request_times)
    assert len(times) == TASKS
    span = times[-1] - times[0]
    assert len({p.identity for p in described.pollers}) == 2  # both workers serve the queue
    # The server's limiter is a token bucket: no stretch of time gets more than the rate
    # over it plus a burst, which measured at most twice the rate (after an idle spell,
    # the first one too).
    burst = max(
        (j - i + 1) - RATE * (times[j] - times[i])
        for i in range(len(times))
        for j in range(i, len(times))
    )
    assert burst <= 2 * RATE, burst
    assert span >= (TASKS - 2 * RATE) / RATE
