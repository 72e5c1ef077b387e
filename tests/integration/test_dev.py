"""The embedded dev server, against real ``temporal server start-dev`` processes."""

from __future__ import annotations

import asyncio
import io
import os
import socket
import time
import urllib.request
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from rich.console import Console
from temporalio.api.operatorservice.v1 import (
    ListSearchAttributesRequest,
    RemoveSearchAttributesRequest,
)
from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
from temporalio.client import Client

from durable_subagents import SubagentClient, TaskStatus
from durable_subagents.cli._dev_run import (
    DEV_RECORD,
    run_dev,
    write_dev_record,
)
from durable_subagents.config import Settings
from durable_subagents.devserver._dev_server import (
    ensure_search_attributes,
    missing_search_attributes,
    server_answers,
    set_retention,
)
from durable_subagents.errors import SubagentError
from durable_subagents.testing import DevServer, free_port
from durable_subagents.wire import _search_attributes

from ..helpers import CEILING
from ..helpers.processes import _wait_ready


def _server(tmp_path: Path, **kwargs: object) -> DevServer:
    return DevServer(port=free_port(), ui_port=free_port(), db=tmp_path / "t.db", **kwargs)  # type: ignore[arg-type]


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


async def _http_status(url: str, within: float = 15.0) -> int:
    deadline = time.monotonic() + within
    while True:
        try:
            with await asyncio.to_thread(urllib.request.urlopen, url, timeout=2) as resp:
                return int(resp.status)
        except OSError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


async def test_server_lifecycle(tmp_path: Path) -> None:
    server = _server(tmp_path, retention=timedelta(days=3))
    await server.start()
    pgid = server.pid
    assert pgid is not None
    try:
        assert server.address == f"127.0.0.1:{server.port}"
        assert server.ui_url == f"http://127.0.0.1:{server.ui_port}"
        assert server.namespace == "default"
        assert await server_answers(server.address)
        client = await Client.connect(server.address)

        listed = await client.operator_service.list_search_attributes(
            ListSearchAttributesRequest(namespace="default")
        )
        for key in _search_attributes.ALL:
            assert listed.custom_attributes[key.name] == key.indexed_value_type
        assert await missing_search_attributes(client, "default") == []

        ns = await client.workflow_service.describe_namespace(
            DescribeNamespaceRequest(namespace="default")
        )
        assert ns.config.workflow_execution_retention_ttl.ToTimedelta() == timedelta(days=3)
        await set_retention(client, "default", timedelta(hours=12))
        ns = await client.workflow_service.describe_namespace(
            DescribeNamespaceRequest(namespace="default")
        )
        assert ns.config.workflow_execution_retention_ttl.ToTimedelta() == timedelta(hours=12)

        assert await _http_status(server.ui_url) == 200
        with await asyncio.to_thread(urllib.request.urlopen, server.metrics_url, timeout=5) as resp:
            assert "persistence_requests{" in resp.read().decode()  # what bench_scale counts
        assert server.db.is_file()
        assert server.log_path == tmp_path / "t.db.log"
        assert server.log_path.is_file()

        handle = await client.start_workflow("SomeType", id="persisted-wf", task_queue="nowhere")
    finally:
        await server.stop()
    assert not _group_alive(pgid)
    assert not await server_answers(server.address)

    await server.start()
    try:
        client = await Client.connect(server.address)
        described = await client.get_workflow_handle("persisted-wf").describe()
        assert described.run_id == handle.result_run_id
        assert described.workflow_type == "SomeType"
    finally:
        await server.stop()


async def test_context_manager_and_headless(tmp_path: Path) -> None:
    async with _server(tmp_path, ui=False, namespace="other") as server:
        pgid = server.pid
        assert pgid is not None
        assert "--headless" in server.command()
        assert await server_answers(server.address, "other")
        client = await Client.connect(server.address, namespace="other")
        assert await missing_search_attributes(client, "other") == []
    assert not _group_alive(pgid)


async def test_ensure_search_attributes_adds_missing_and_is_idempotent(tmp_path: Path) -> None:
    async with _server(tmp_path, ui=False) as server:
        client = await Client.connect(server.address)
        await client.operator_service.remove_search_attributes(
            RemoveSearchAttributesRequest(namespace="default", search_attributes=["SubagentAgent"])
        )
        assert await missing_search_attributes(client, "default") == ["SubagentAgent"]
        await ensure_search_attributes(client, "default")
        await ensure_search_attributes(client, "default")
        assert await missing_search_attributes(client, "default") == []


async def test_start_on_a_busy_port_fails_fast(tmp_path: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        server = DevServer(
            port=busy.getsockname()[1], ui_port=free_port(), db=tmp_path / "t.db", ui=False
        )
        with pytest.raises(SubagentError, match="already in use"):
            await server.start()
        assert server.pid is None  # refused before any server process started


async def test_a_port_the_server_picks_for_itself_taken_meanwhile_is_picked_again(
    tmp_path: Path,
) -> None:
    server = _server(tmp_path, ui=False)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as squatter:
        # Another program binds the server's HTTP API port between the pick and the bind.
        squatter.bind(("127.0.0.1", server._http_port))
        squatter.listen()
        taken = server._http_port
        async with server:
            assert server._http_port != taken
            assert await server_answers(server.address)
    log = server.log_path.read_text()
    assert f"127.0.0.1:{taken}: bind: address already in use" in log


async def test_process_exit_reports_the_log_tail(tmp_path: Path) -> None:
    server = _server(tmp_path, ui=False, log_level="not-a-level")
    with pytest.raises(SubagentError, match="exited with code") as info:
        await server.start()
    assert "not-a-level" in str(info.value)


async def test_run_dev_reuses_a_running_server(tmp_path: Path) -> None:
    pytest.importorskip("durable_subagents.worker", exc_type=ImportError)
    async with _server(tmp_path, ui=False) as server:
        out = io.StringIO()
        console = Console(file=out, width=200, force_terminal=False)
        settings = Settings(data_dir=tmp_path / "data", task_queue="dev-test-queue")
        task = asyncio.create_task(
            run_dev(
                settings=settings,
                port=server.port,
                ui_port=free_port(),
                db=None,
                retention=timedelta(days=2),
                workspace=tmp_path,
                console=console,
            )
        )
        text = await _wait_ready(task, out)
        assert "already answers" in text
        assert server.address in text
        assert "dev-test-queue" in text
        assert not (tmp_path / "data" / "temporal.db").exists()
        # not started by subagents dev: no port is claimed for its Web UI
        assert "Web UI:       the running server's own" in text

        task.cancel()
        await asyncio.wait_for(task, 15)
        assert "Stopped." in out.getvalue()
        assert server.pid is not None and _group_alive(server.pid)
        assert await server_answers(server.address)
        client = await Client.connect(server.address)
        ns = await client.workflow_service.describe_namespace(
            DescribeNamespaceRequest(namespace="default")
        )
        assert ns.config.workflow_execution_retention_ttl.ToTimedelta() == timedelta(days=2)


async def test_run_dev_starts_and_stops_its_own_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = io.StringIO()
    port, ui_port = free_port(), free_port()
    settings = Settings(
        data_dir=tmp_path / "data",
        task_queue=f"dev-{uuid.uuid4()}",
        workspace=tmp_path,
    )
    task = asyncio.create_task(
        run_dev(
            settings=settings,
            port=port,
            ui_port=ui_port,
            db=None,
            retention=None,
            workspace=None,
            console=Console(file=out, width=200),
        )
    )
    text = await _wait_ready(task, out)
    db = (tmp_path / "data" / "temporal.db").resolve()
    assert str(db) in text
    assert f"http://127.0.0.1:{ui_port}" in text
    assert "already answers" not in text
    assert db.is_file()

    client = await SubagentClient.connect(
        f"127.0.0.1:{port}", settings=settings.model_copy(update={"address": f"127.0.0.1:{port}"})
    )
    task_id = await client.spawn_task("explore", "look", model="scripted")
    info = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert info.status == TaskStatus.COMPLETED  # run by the dev command's own worker

    task.cancel()
    await asyncio.wait_for(task, 15)
    assert "Stopped." in out.getvalue()
    assert not await server_answers(f"127.0.0.1:{port}")


async def test_a_second_dev_names_the_running_servers_web_ui(tmp_path: Path) -> None:
    """A second ``subagents dev`` on the port of a first one shows the first's Web UI
    port, not the ``--ui-port`` it was given (and says so)."""
    pytest.importorskip("durable_subagents.worker", exc_type=ImportError)
    data = tmp_path / "data"
    async with _server(tmp_path, ui=False) as server:
        write_dev_record(data / DEV_RECORD, port=server.port, ui_port=18234, db=tmp_path / "x.db")
        out = io.StringIO()
        task = asyncio.create_task(
            run_dev(
                settings=Settings(data_dir=data, task_queue="dev-second-queue"),
                port=server.port,
                ui_port=18999,
                db=None,
                retention=None,
                workspace=tmp_path,
                console=Console(file=out, width=300, force_terminal=False),
            )
        )
        text = await _wait_ready(task, out)
        task.cancel()
        await asyncio.wait_for(task, 15)
    assert "Web UI:       http://127.0.0.1:18234" in text
    assert "--ui-port 18999 is not used" in text and "18999" not in text.split("not used")[1]
    assert "Paused tasks: http://127.0.0.1:18234/" in text
    assert (data / DEV_RECORD).exists()  # the first one's record stays while it runs
