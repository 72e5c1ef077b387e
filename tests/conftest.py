"""Shared fixtures: one real Temporal dev server per session, a fresh queue per test."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from durable_subagents import SubagentClient, connect_client
from durable_subagents.config import Settings
from durable_subagents.dev import DevServer, free_port
from durable_subagents.worker import create_worker


@pytest.fixture(scope="session")
async def dev_server(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[DevServer]:
    db = tmp_path_factory.mktemp("temporal") / "temporal.db"
    # A low continue-as-new threshold makes long tests exercise continue-as-new.
    server = DevServer(
        port=free_port(),
        ui_port=free_port(),
        db=db,
        dynamic_config={"limit.historyCount.suggestContinueAsNew": "600"},
    )
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture(scope="session")
async def temporal_client(dev_server: DevServer) -> Client:
    return await connect_client(dev_server.address, dev_server.namespace)


@pytest.fixture
def settings(tmp_path: Path, dev_server: DevServer) -> Settings:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    return Settings(
        address=dev_server.address,
        namespace=dev_server.namespace,
        task_queue=f"test-{uuid.uuid4().hex[:10]}",
        data_dir=tmp_path / "data",
        blob_dir=tmp_path / "blobs",
        workspace=workspace,
    )


@pytest.fixture
def workspace(settings: Settings) -> Path:
    assert settings.workspace is not None
    return settings.workspace


@pytest.fixture
def client(temporal_client: Client, settings: Settings) -> SubagentClient:
    return SubagentClient(
        temporal_client,
        task_queue=settings.task_queue,
        blob_store=settings.blob_store(),
    )


@pytest.fixture
async def worker(temporal_client: Client, settings: Settings) -> AsyncIterator[None]:
    async with create_worker(temporal_client, settings):
        yield


def script(*turns: dict[str, Any], repeat: int | None = None, final: str | None = None) -> str:
    """A ``scripted:`` model string with an inline script."""
    body: Any = list(turns)
    if repeat is not None:
        body = {"turns": list(turns), "repeat": repeat}
        if final is not None:
            body["final"] = final
    return "scripted:" + json.dumps(body)
