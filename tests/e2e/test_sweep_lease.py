"""Two workers on one blob store: one sweeps per period, and the other takes over when
the first is SIGKILLed (its lease expires on the server's clock; nothing releases it)."""

from __future__ import annotations

import asyncio
import itertools
import os
import socket
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
from temporalio.client import Client

from durable_subagents.config import Settings
from durable_subagents.storage._local import LocalBlobStore
from durable_subagents.worker._sweep import lease_id

from ..helpers import CEILING, eventually
from ..helpers.processes import worker_process

pytestmark = pytest.mark.timeout(600)

EVERY = 4
"""Seconds per sweep period in this test (the default is an hour)."""


@dataclass
class Lease:
    holder: str
    start: datetime
    close: datetime | None


async def leases(temporal: Client, store: LocalBlobStore) -> list[Lease]:
    """The store's leases so far, oldest first, as the namespace's visibility lists them."""
    found = [
        Lease((await w.memo())["holder"], w.start_time, w.close_time)
        async for w in temporal.list_workflows(f"WorkflowId = '{lease_id(store)}'")
    ]
    return sorted(found, key=lambda lease: lease.start)


async def plant_orphan(store: LocalBlobStore, name: str) -> Path:
    """Blobs of a task Temporal never knew, written three days ago: a sweep removes them."""
    await store.put(name, b"left behind")
    old = time.time() - 3 * 86400
    for path in (store.task_dir(name), *store.task_dir(name).iterdir()):
        os.utime(path, (old, old))
    return store.task_dir(name)


async def test_one_worker_sweeps_per_period_and_another_takes_over_when_it_dies(
    temporal_client: Client, settings: Settings, workspace: Path, tmp_path: Path
) -> None:
    store = settings.blob_store()
    assert isinstance(store, LocalBlobStore)
    env = {"SUBAGENTS_BLOB_SWEEP_EVERY": str(EVERY), "SUBAGENTS_DATA_DIR": str(tmp_path / "d")}
    workers = [worker_process(settings, workspace, tmp_path / f"w{i}.log", env) for i in (1, 2)]
    try:
        await asyncio.gather(*(w.start() for w in workers))
        by_holder = {f"{w.pid}@{socket.gethostname()}": w for w in workers}
        orphan = await plant_orphan(store, "subagent-gone-before")

        async def three_periods_and_a_holder() -> list[Lease]:
            """Three leases that ended, and one held now."""
            found = await leases(temporal_client, store)
            ended = [lease for lease in found if lease.close is not None]
            return found if len(ended) >= 3 and found[-1].close is None else []

        before = await eventually(three_periods_and_a_holder, "three sweep periods")
        assert not orphan.exists()  # a worker swept
        assert {lease.holder for lease in before} <= set(by_holder), before
        # one lease at a time: each began after the one before it had ended
        for earlier, later in itertools.pairwise(before):
            assert earlier.close is not None and later.start >= earlier.close, before

        dead = by_holder[before[-1].holder]  # the worker that holds the lease now
        survivor = next(w for w in workers if w is not dead)
        dead.kill()
        killed = datetime.now(UTC)
        orphan = await plant_orphan(store, "subagent-gone-after")

        async def taken_over() -> list[Lease]:
            after = [
                lease for lease in await leases(temporal_client, store) if lease.start > killed
            ]
            return after if len(after) >= 2 else []

        after = await eventually(taken_over, "the survivor's sweeps", ceiling=CEILING)
        assert {by_holder[lease.holder] for lease in after} == {survivor}, after
        await eventually(lambda: not orphan.exists(), "the survivor to sweep")
    finally:
        for w in workers:
            w.close()
    for w in workers:
        assert "Traceback" not in w.log.read_text(errors="replace"), w.log_tail()
