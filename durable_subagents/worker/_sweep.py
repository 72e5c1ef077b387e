"""Removal of blobs that belong to tasks Temporal no longer keeps.

Blobs of a task live as long as its closed runs: once the namespace retention has
passed since the task closed (or Temporal no longer knows the task and nothing of
it was written for as long), everything it stored goes. This works for every store;
on S3 a lifecycle rule expiring objects under the prefix can back it up (see the
README), as long as it is longer than the longest-running task.

One worker sweeps a store per period, whatever the number of workers: each tries, at
a jittered time, to take the store's lease, and only the one that gets it sweeps. The
lease is a workflow execution that no worker ever runs: started under an id made from
the store (``lease_id``), on a task queue no worker polls, with an execution timeout
of most of a period. Temporal starts one execution per id at a time, so the start is
the atomic test-and-set, and the server's own timer ends the lease, by its clock: a
lease whose holder died expires like any other, and the next worker to try takes it.
Nothing is released; nothing needs to be.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import random
import socket
from datetime import UTC, datetime, timedelta

from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from durable_subagents.storage._blobstore import BlobStore

log = logging.getLogger(__name__)

SWEEP_EVERY = 3600.0
"""Seconds between two sweeps of a store (``SUBAGENTS_BLOB_SWEEP_EVERY``)."""
JITTER = 0.1
"""Each worker tries at a period times 1 +- this (its first try within this share of a
period after it starts), so a fleet restarted at once does not try in step."""
LEASE_WORKFLOW = "SubagentsBlobSweepLease"
"""The lease's workflow type: no worker has it, none ever runs it."""
LEASE_QUEUE = "subagents-blob-sweep-lease"
"""The lease's task queue, which no worker polls."""


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


def lease_id(store: BlobStore) -> str:
    """The workflow id of ``store``'s sweep lease in the namespace.

    An S3 store is one store wherever it is named from. A directory is named with the
    host: two hosts' ``/data/blobs`` may be two stores, and each is swept (on a shared
    filesystem, once per host and period).
    """
    where = store.url if store.url.startswith("s3://") else f"{socket.gethostname()} {store.url}"
    return "subagents-blob-sweep-" + hashlib.sha256(where.encode()).hexdigest()[:16]


async def take_lease(client: Client, store: BlobStore, holder: str, ttl: timedelta) -> bool:
    """Take ``store``'s sweep lease for ``ttl`` if no one holds it.

    Returns:
        Whether this caller holds it now (False: another worker took it this period).
    """
    what = f"it sweeps {store.url}"
    return await take_named_lease(client, lease_id(store), holder, ttl, what)


async def take_named_lease(
    client: Client, lease: str, holder: str, ttl: timedelta, what: str
) -> bool:
    """Take the lease ``lease`` (a workflow id) for ``ttl`` if no one holds it.

    Returns:
        Whether this caller holds it now (False: another worker took it this period).
    """
    try:
        await client.start_workflow(
            LEASE_WORKFLOW,
            id=lease,
            task_queue=LEASE_QUEUE,
            execution_timeout=ttl,
            id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
            id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
            memo={"holder": holder, "what": what},
            static_summary=f"lease of {holder}: {what}",
        )
    except WorkflowAlreadyStartedError:
        return False
    return True


async def sweep_forever(
    client: Client,
    store: BlobStore,
    every: float = SWEEP_EVERY,
    *,
    holder: str | None = None,
    jitter: float = JITTER,
) -> None:
    """Sweep ``store`` once per ``every`` seconds, on one worker of all that run this.

    Each try comes at a jittered time; the worker that takes the lease (``take_lease``,
    held for ``every * (1 - jitter)``) sweeps, the others wait for the next period.
    Runs until cancelled; errors are logged and the next period tries again.

    Args:
        client: Connected to the store's namespace.
        store: The blob store to sweep.
        every: Seconds between two sweeps.
        holder: Who sweeps, as the lease records it; default the client's identity
            (``pid@host``).
        jitter: The share of a period each try moves by, at random.
    """
    holder = holder or client.identity
    ttl = timedelta(seconds=every * (1 - jitter))
    delay = random.uniform(0, every * jitter)
    while True:
        await asyncio.sleep(delay)
        delay = every * random.uniform(1 - jitter, 1 + jitter)
        try:
            if not await take_lease(client, store, holder, ttl):
                log.debug("blob sweep: another worker holds the lease this period")
                continue
            removed = await sweep_blobs(client, store)
            if removed:
                log.info("removed blobs of %d expired task(s)", len(removed))
        except Exception:
            log.exception("blob sweep failed; will retry")
