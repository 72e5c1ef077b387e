"""``SubagentsPlugin`` on plain Temporal clients and workers, on the session's dev server."""

from __future__ import annotations

import gc
import uuid
from datetime import timedelta
from typing import Any

import pytest
import temporalio.activity
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory
from temporalio.contrib.pydantic import PydanticPayloadConverter
from temporalio.converter import DataConverter
from temporalio.worker import Replayer, Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from durable_subagents import InvalidRequest, SubagentClient, TaskStatus
from durable_subagents.config import Settings
from durable_subagents.storage._sealing import new_key
from durable_subagents.testing import DevServer
from durable_subagents.wire._codec import ENCODING, EncryptionCodec
from durable_subagents.worker import SubagentsPlugin, connect_client, create_worker
from durable_subagents.workflows import NotifyWorkflow, SubagentWorkflow

from ..helpers import CEILING
from ..helpers.tasks import script
from ..histories import HISTORIES
from ..parent_workflows import FanOutWorkflow


def keyed(settings: Settings) -> Settings:
    return Settings.model_validate({**settings.model_dump(), "payload_key": new_key()})


async def plugin_client(dev_server: DevServer, plugin: SubagentsPlugin) -> Client:
    return await Client.connect(
        dev_server.address, namespace=dev_server.namespace, plugins=[plugin]
    )


def subagents(temporal: Client, settings: Settings) -> SubagentClient:
    return SubagentClient(
        temporal, task_queue=settings.task_queue, blob_store=settings.blob_store()
    )


async def run_task(client: SubagentClient) -> str:
    task_id = await client.spawn_task(
        "explore", "What is the answer?", model=script({"text": "the answer is 42"})
    )
    info = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert info.status == TaskStatus.COMPLETED, info
    assert info.result == "the answer is 42"
    return task_id


async def test_a_worker_inherits_the_plugin_from_its_client_and_runs_a_task(
    dev_server: DevServer, settings: Settings
) -> None:
    temporal = await plugin_client(dev_server, SubagentsPlugin(settings))
    assert issubclass(temporal.data_converter.payload_converter_class, PydanticPayloadConverter)
    async with Worker(temporal, task_queue=settings.task_queue):
        await run_task(subagents(temporal, settings))


async def test_the_plugin_given_to_the_worker_too_registers_once(
    dev_server: DevServer, settings: Settings
) -> None:
    plugin = SubagentsPlugin(settings)
    temporal = await plugin_client(dev_server, plugin)
    with pytest.warns(UserWarning, match="same plugin type"):
        worker = Worker(
            temporal, task_queue=settings.task_queue, plugins=[SubagentsPlugin(settings)]
        )
    config = worker.config(active_config=True)
    assert config["workflows"].count(SubagentWorkflow) == 1
    assert config["workflows"].count(NotifyWorkflow) == 1
    assert activity_names(config) == ALL_ACTIVITIES
    # The workflow named by hand: the plugin still adds the activities.
    config = Worker(
        temporal, task_queue=f"{settings.task_queue}-3", workflows=[SubagentWorkflow]
    ).config(active_config=True)
    assert config["workflows"] == [NotifyWorkflow, SubagentWorkflow]
    assert activity_names(config) == ALL_ACTIVITIES
    # create_worker on a client with the plugin: the plugin finds it registered.
    # (Each worker built here has a queue of its own: one client may not poll a queue twice.)
    config = create_worker(temporal, settings, task_queue=f"{settings.task_queue}-2").config(
        active_config=True
    )
    assert config["workflows"].count(SubagentWorkflow) == 1
    assert activity_names(config) == ALL_ACTIVITIES


ALL_ACTIVITIES = [
    "activity_options",
    "compact_context",
    "model_turn",
    "own_registered_tasks",
    "report_tree_spend",
    "reserve_tree_task",
    "run_tool",
    "send_notification",
    "settle_changes",
]
TOOL_ACTIVITIES = ["run_tool", "settle_changes"]
"""What a tool queue serves: the calls, and applying the changes a person approved."""


def activity_names(config: Any) -> list[str]:
    return sorted(
        temporalio.activity._Definition.must_from_callable(a).name for a in config["activities"]
    )


async def run_bash_task(client: SubagentClient, temporal: Client, queue: str) -> None:
    """A task whose bash call must run on the queue's tool queue."""
    model = script(
        {"tool_calls": [{"name": "bash", "arguments": {"command": "echo from-the-tools"}}]},
        {"text": "{last_tool_result}"},
    )
    task_id = await client.spawn_task("general", "x", model=model)
    info = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert info.status == TaskStatus.COMPLETED, info
    assert "from-the-tools" in (info.result or "")
    queues = [
        e.activity_task_scheduled_event_attributes.task_queue.name
        async for e in temporal.get_workflow_handle(task_id).fetch_history_events()
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == "run_tool"
    ]
    assert queues == [f"{queue}-tools"]


async def test_the_plugins_worker_serves_the_tool_queue_once(
    dev_server: DevServer, settings: Settings
) -> None:
    """Tool calls go to ``<queue>-tools``; a worker built with the plugin serves it, and
    so does create_worker's on the plugin's client, with one tool worker, not two."""
    temporal = await plugin_client(dev_server, SubagentsPlugin(settings))
    client = subagents(temporal, settings)
    assert tool_queue_pollers(settings.task_queue) == 0
    async with Worker(temporal, task_queue=settings.task_queue):
        await run_bash_task(client, temporal, settings.task_queue)
        assert tool_queue_pollers(settings.task_queue) == 1
    assert tool_queue_pollers(settings.task_queue) == 0
    async with create_worker(temporal, settings):
        await run_bash_task(client, temporal, settings.task_queue)
        assert tool_queue_pollers(settings.task_queue) == 1


def tool_queue_pollers(queue: str) -> int:
    """Running workers of this process that poll ``queue``'s tool queue.

    Counted in the process: the server names a poller by its identity, the same for
    every worker of one process.
    """
    tools = f"{queue}-tools"
    return sum(
        1
        for o in gc.get_objects()
        if isinstance(o, Worker) and o.task_queue == tools and o.is_running
    )


async def test_worker_options_come_from_the_settings_unless_given(
    dev_server: DevServer, settings: Settings
) -> None:
    own = Settings.model_validate(
        {**settings.model_dump(), "max_activities": 7, "sticky_queue_timeout": 3}
    )
    temporal = await plugin_client(dev_server, SubagentsPlugin(own))
    config = Worker(temporal, task_queue=own.task_queue).config(active_config=True)
    assert config["max_concurrent_activities"] == 7
    assert config["sticky_queue_schedule_to_start_timeout"] == timedelta(seconds=3)
    assert config["max_cached_workflows"] == own.max_cached_tasks
    assert config["graceful_shutdown_timeout"] == timedelta(seconds=own.drain_timeout)
    assert config["max_heartbeat_throttle_interval"] == timedelta(seconds=1)
    runner = config["workflow_runner"]
    assert isinstance(runner, SandboxedWorkflowRunner)
    # The library's pure modules pass through; its workflow code never does.
    assert "durable_subagents.wire._payloads" in runner.restrictions.passthrough_modules
    assert not any(
        name.startswith("durable_subagents.workflows")
        for name in runner.restrictions.passthrough_modules
    )
    # The same options create_worker gives.
    expected = create_worker(temporal, own, task_queue=f"{own.task_queue}-2").config(
        active_config=True
    )
    for name in (
        "max_concurrent_activities",
        "sticky_queue_schedule_to_start_timeout",
        "max_cached_workflows",
        "graceful_shutdown_timeout",
        "max_heartbeat_throttle_interval",
        "default_heartbeat_throttle_interval",
        "deployment_config",
    ):
        assert config[name] == expected[name], name

    mine = Worker(
        temporal,
        task_queue=f"{own.task_queue}-3",
        max_concurrent_activities=2,
        max_cached_workflows=5,
    ).config(active_config=True)
    assert mine["max_concurrent_activities"] == 2
    assert mine["max_cached_workflows"] == 5


async def test_with_a_payload_key_the_history_is_encrypted(
    dev_server: DevServer, settings: Settings
) -> None:
    own = keyed(settings)
    temporal = await plugin_client(dev_server, SubagentsPlugin(own))
    codec = temporal.data_converter.payload_codec
    assert isinstance(codec, EncryptionCodec) and codec.keys is not None
    async with Worker(temporal, task_queue=own.task_queue):
        task_id = await run_task(subagents(temporal, own))
    events = temporal.get_workflow_handle(task_id).fetch_history_events()
    started = [
        e.workflow_execution_started_event_attributes
        async for e in events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED
    ]
    assert started and started[0].input.payloads
    for payload in started[0].input.payloads:
        assert payload.metadata["encoding"] == ENCODING
        assert b"What is the answer" not in payload.data
    # The replayer takes the plugin too: the subagent workflow, with the key.
    history = await temporal.get_workflow_handle(task_id).fetch_history()
    replayed = await Replayer(workflows=[], plugins=[SubagentsPlugin(own)]).replay_workflow(
        history, raise_on_replay_failure=False
    )
    assert replayed.replay_failure is None, replayed.replay_failure
    # A client connected the project's usual way, with the same key, reads the task.
    same = await connect_client(own.address, own.namespace, keys=own.payload_keys())
    info = await subagents(same, own).check_task(task_id)
    assert info.result == "the answer is 42"


async def test_a_workflow_of_yours_starts_subagents_on_the_plugins_worker(
    dev_server: DevServer, settings: Settings
) -> None:
    temporal = await plugin_client(dev_server, SubagentsPlugin(settings))
    async with Worker(temporal, task_queue=settings.task_queue, workflows=[FanOutWorkflow]):
        results = await temporal.execute_workflow(
            FanOutWorkflow.run,
            [script({"text": "answer for {prompt}"}), "alpha", "beta"],
            id=f"fan-out-{uuid.uuid4().hex[:6]}",
            task_queue=settings.task_queue,
        )
    assert [r.split("=", 1)[1] for r in results] == [
        "completed:answer for alpha",
        "completed:answer for beta",
    ]


async def test_another_data_converter_is_refused(dev_server: DevServer, settings: Settings) -> None:
    plugin = SubagentsPlugin(settings)
    other = DataConverter(payload_codec=EncryptionCodec(None))
    with pytest.raises(InvalidRequest, match=r"another one .* Connect without data_converter="):
        await Client.connect(
            dev_server.address,
            namespace=dev_server.namespace,
            data_converter=other,
            plugins=[plugin],
        )
    # The project's own converter with other keys: refused, naming the keys.
    keyed_client = await connect_client(
        settings.address, settings.namespace, keys=keyed(settings).payload_keys()
    )
    with pytest.raises(InvalidRequest, match="give both the same keys"):
        await Client.connect(
            dev_server.address,
            namespace=dev_server.namespace,
            data_converter=keyed_client.data_converter,
            plugins=[plugin],
        )
    # Temporal's default converter stated explicitly is replaced, not refused.
    explicit = await Client.connect(
        dev_server.address,
        namespace=dev_server.namespace,
        data_converter=DataConverter.default,
        plugins=[plugin],
    )
    assert isinstance(explicit.data_converter.payload_codec, EncryptionCodec)


async def test_the_plugin_on_the_worker_only_needs_the_projects_client(
    dev_server: DevServer, settings: Settings
) -> None:
    plain = await Client.connect(dev_server.address, namespace=dev_server.namespace)
    with pytest.raises(InvalidRequest, match=r"give the plugin to Client.connect"):
        Worker(plain, task_queue=settings.task_queue, plugins=[SubagentsPlugin(settings)])
    # A client connected with the project's converter (connect_client) is enough.
    temporal = await connect_client(settings.address, settings.namespace)
    async with Worker(
        temporal, task_queue=settings.task_queue, plugins=[SubagentsPlugin(settings)]
    ):
        await run_task(subagents(temporal, settings))


async def test_the_replayer_replays_recorded_histories_with_the_plugin(settings: Settings) -> None:
    replayer = Replayer(workflows=[], plugins=[SubagentsPlugin(settings)])
    for path in (HISTORIES[0], HISTORIES[-1]):
        history = WorkflowHistory.from_json(f"replay-{path.stem}", path.read_text())
        result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
        assert result.replay_failure is None, (path.name, result.replay_failure)


async def test_create_worker_roles(dev_server: DevServer, settings: Settings) -> None:
    temporal = await connect_client(dev_server.address, dev_server.namespace)
    tools = create_worker(temporal, settings, role="tools", max_tool_calls=7)
    config = tools.config(active_config=True)
    assert tools.task_queue == f"{settings.task_queue}-tools"
    assert config["workflows"] == [] and activity_names(config) == TOOL_ACTIVITIES
    assert config["max_concurrent_activities"] == 7
    with pytest.raises(InvalidRequest, match="role 'tools' runs tool calls only"):
        create_worker(temporal, settings, role="tools", workflows=[FanOutWorkflow])
    with pytest.raises(InvalidRequest, match="unknown worker role 'some'"):
        create_worker(temporal, settings, role="some")  # type: ignore[arg-type]
    # a tools worker built from a client with the plugin stays a tools worker
    plugged = await plugin_client(dev_server, SubagentsPlugin(settings))
    config = create_worker(plugged, settings, role="tools").config(active_config=True)
    assert config["workflows"] == [] and activity_names(config) == TOOL_ACTIVITIES
