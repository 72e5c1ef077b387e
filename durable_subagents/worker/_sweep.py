"""Removal of blobs that belong to tasks Temporal no longer keeps.

Blobs of a task live as long as its closed runs: once the namespace retention has
passed since the task closed (or Temporal no longer knows the task and nothing of
it was written for as long), everything it stored goes. This works for every store;
on S3 a lifecycle rule expiring objects under the prefix can back it up (see the
README), as long as it is longer than the longest-running task.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta

from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from durable_subagents.storage._blobstore import BlobStore

log = logging.getLogger(__name__)


async def namespace_retention(client: Client) -> timedelta:
    """The namespace's retention of closed workflow runs."""
    resp = await client.workflow_service.describe_namespace(
        DescribeNamespaceRequest(namespace=client.namespace)
    )
    return resp.config.workflow_execution_retention_ttl.ToTimedelta()


async def sweep_blobs(
    client: Client,
    store: BlobStore,
    *,
    retention: timedelta | None = None,
    now: datetime | None = None,
) -> list[str]:
    """Delete the blobs of tasks closed longer ago than the retention.

    Args:
        client: Connected to the namespace the store belongs to.
        store: The namespace's blob store.
        retention: Defaults to the namespace's own retention.
        now: The current time (for tests).

    Returns:
        The task ids whose blobs were removed.
    """
    keep = retention if retention is not None else await namespace_retention(client)
    now = now or datetime.now(UTC)
    removed = []
    for task_id in await store.task_ids():
        try:
            desc = await client.get_workflow_handle(task_id).describe()
        except RPCError as err:
            if err.status != RPCStatusCode.NOT_FOUND:
                raise
            written = await store.last_write(task_id)
            if written is None or now - written > keep:
                await store.delete_task(task_id)
                removed.append(task_id)
            continue
        if desc.close_time is not None and now - desc.close_time > keep:
            await store.delete_task(task_id)
            removed.append(task_id)
    return removed


async def sweep_forever(client: Client, store: BlobStore, every: float = 3600.0) -> None:
    """Sweep now and then every ``every`` seconds until cancelled; errors are logged."""
    while True:
        try:
            removed = await sweep_blobs(client, store)
            if removed:
                log.info("removed blobs of %d expired task(s)", len(removed))
        except Exception:
            log.exception("blob sweep failed; will retry")
        await asyncio.sleep(every)
