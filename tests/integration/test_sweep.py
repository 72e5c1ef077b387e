"""Blobs live as long as Temporal keeps the task's closed runs, and no longer."""

from __future__ import annotations

import os
import time
from datetime import timedelta

from temporalio.client import Client

from durable_subagents import SubagentClient, TaskStatus
from durable_subagents.config import Settings
from durable_subagents.storage._local import LocalBlobStore
from durable_subagents.worker import sweep_blobs

from ..helpers import CEILING
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
