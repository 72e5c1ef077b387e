"""Blobs live as long as Temporal keeps the task's closed runs, and no longer."""

from __future__ import annotations

import os
import time
from datetime import timedelta
from pathlib import Path

from temporalio.client import Client

from durable_subagents import SubagentClient, TaskStatus
from durable_subagents.config import Settings
from durable_subagents.storage._local import LocalBlobStore
from durable_subagents.worker import sweep_blobs
from durable_subagents.worker._sweep import lease_id, take_lease

from ..helpers import CEILING, eventually
from ..helpers.tasks import script


async def test_sweep_removes_only_expired_tasks(
    client: SubagentClient, temporal_client: Client, settings: Settings, worker: None
) -> None:
    store = settings.blob_store()
    assert isinstance(store, LocalBlobStore)
    done = await client.spawn_task("explore", "quick", model="scripted")
    assert (
        await client.check_task(done, wait=True, timeout=CEILING)
    ).status == TaskStatus.COMPLETED
    slow = await client.spawn_task(
        "explore",
        "slow",
        model=script(
            {"tool_calls": [{"name": "list_files", "arguments": {}}]}, {"text": "z", "delay": 30}
        ),
    )
    await _until(lambda: store.task_dir(slow).exists())
    orphan_old = store.task_dir("subagent-gone-old")
    orphan_new = store.task_dir("subagent-gone-new")
    for orphan in (orphan_old, orphan_new):
        await store.put(orphan.name, b"left behind")
    old = time.time() - 3 * 86400
    for path in (orphan_old, *orphan_old.iterdir()):
        os.utime(path, (old, old))

    kept_by_retention = await sweep_blobs(temporal_client, store, retention=timedelta(days=1))
    assert kept_by_retention == ["subagent-gone-old"]

    removed = await sweep_blobs(temporal_client, store, retention=timedelta(0))
    assert done in removed and slow not in removed
    assert not store.task_dir(done).exists()
    assert store.task_dir(slow).exists()
    await client.cancel_task(slow)


async def _until(predicate, timeout: float = 15.0) -> None:  # type: ignore[no-untyped-def]
    import asyncio

    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.05)


async def test_a_stores_lease_is_held_by_one_at_a_time_and_expires_on_the_servers_clock(
    temporal_client: Client, settings: Settings, tmp_path: Path
) -> None:
    store = settings.blob_store()
    ttl = timedelta(seconds=3)
    assert await take_lease(temporal_client, store, "worker-1", ttl)
    assert not await take_lease(temporal_client, store, "worker-2", ttl)
    other = LocalBlobStore(tmp_path / "other-blobs")
    assert lease_id(other) != lease_id(store)  # another store: a lease of its own
    assert await take_lease(temporal_client, other, "worker-2", ttl)
    # worker-1 never gives it back (it may be dead): the server's timer ends it
    await eventually(
        lambda: take_lease(temporal_client, store, "worker-2", ttl), "the lease to expire"
    )

    async def both_listed() -> bool:
        """Each lease is a run of its own, naming who held it."""
        query = f"WorkflowId = '{lease_id(store)}'"
        runs = [w async for w in temporal_client.list_workflows(query)]
        return sorted([(await w.memo())["holder"] for w in runs]) == ["worker-1", "worker-2"]

    await eventually(both_listed, "both leases in the namespace's visibility")
