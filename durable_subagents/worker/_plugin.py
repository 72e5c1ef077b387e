"""``SubagentsPlugin``: subagents on your own Temporal clients and workers."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from opentelemetry.trace import TracerProvider
from temporalio.converter import (
    DataConverter,
    DefaultFailureConverter,
    DefaultPayloadConverter,
)
from temporalio.plugin import SimplePlugin
from temporalio.worker import Worker, WorkerConfig, WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from durable_subagents.agents import ActivityOptions, parse_activity_options
from durable_subagents.config import Settings
from durable_subagents.connection._connect import release_runtime_at_exit
from durable_subagents.errors import InvalidRequest
from durable_subagents.storage._factory import open_blob_store
from durable_subagents.storage._sealing import KeyRing
from durable_subagents.tools import ToolRegistry
from durable_subagents.wire._codec import (
    EncryptionCodec,
    SharedPydanticPayloadConverter,
    data_converter,
)
from durable_subagents.wire._payloads import MODEL_TURN_ACTIVITY
from durable_subagents.worker._lifecycle import sessions_closed_after
from durable_subagents.worker._model_queues import model_queues_served
from durable_subagents.worker._tool_queue import (
    activity_named,
    building_tool_worker,
    tool_calls_served,
)
from durable_subagents.worker._worker import (
    PASSTHROUGH_MODULES,
    library_outside_sandbox,
    worker_setup,
)
from durable_subagents.workflows import NotifyWorkflow, SubagentWorkflow

_WORKER_DEFAULTS = {
    name: p.default
    for name, p in inspect.signature(Worker.__init__).parameters.items()
    if p.default is not inspect.Parameter.empty
}


class SubagentsPlugin(SimplePlugin):
    """Runs subagents on your own Temporal clients and workers.

    On a client (``Client.connect(..., plugins=[SubagentsPlugin()])``) it sets the
    project's data converter: pydantic payloads, encrypted when the settings have a
    ``payload_key``. Workers built from that client inherit it, and it registers
    ``SubagentWorkflow`` and the model-turn and tool activities on them next to your
    own workflows and activities, with the worker options the settings give (activity
    slots, sticky queue timeout, cached workflows, heartbeat throttling, worker
    versioning, the workflow sandbox's pass-through modules, and whether the library's
    own workflows run in it: ``subagent_workflow_sandbox``). Options you pass to
    ``Worker`` yourself win over the settings'.

    Example::

        client = await Client.connect(
            "localhost:7233", plugins=[SubagentsPlugin(Settings())]
        )
        worker = Worker(client, task_queue="subagents", workflows=[ReviewWorkflow])

    Args:
        settings: Blob store, workspace root, default model, sandbox mode, limits and
            payload keys (default: ``Settings()``, from the environment).
        keys: Payload keys for payloads and blobs (default: ``settings.payload_keys()``);
            every client and worker of a deployment needs the same ones.
        tools: The tools to offer (default: the built-ins).
        tracer_provider: Where the ``subagent.*`` spans go when the client traces.
        activity_options: The timeouts and retry policies of model turns, tool calls
            and compactions (default ``settings.activity_options``; see
            ``create_worker``).

    Raises:
        InvalidRequest: A payload key in the settings is malformed, the settings
            name only one of a worker deployment and a build ID, or an activity
            option is unknown or invalid.
    """

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        keys: KeyRing | None = None,
        tools: ToolRegistry | None = None,
        tracer_provider: TracerProvider | None = None,
        activity_options: ActivityOptions | Mapping[str, Any] | str | None = None,
    ) -> None:
        release_runtime_at_exit()  # a plain Client.connect gets connect_client's exit fix
        self.settings = settings or Settings()
        if activity_options is not None:
            self.settings = self.settings.model_copy(
                update={"activity_options": parse_activity_options(activity_options)}
            )
        self.keys = keys or self.settings.payload_keys()
        self._converter = data_converter(self.keys)
        self.settings.worker_deployment()  # a half-given version fails here, not later
        self._tools = tools
        self._tracer_provider = tracer_provider
        super().__init__(
            "durable_subagents.SubagentsPlugin",
            data_converter=self._data_converter,
            workflows=_with_subagent_workflow,
            workflow_runner=self._workflow_runner,
        )

    def _data_converter(self, existing: DataConverter | None) -> DataConverter:
        if existing is None or _is_default(existing):
            return self._converter
        if self._is_ours(existing):
            return existing
        if _is_projects(existing):
            raise InvalidRequest(
                f"this client was given {_describe(existing)}, but SubagentsPlugin has "
                f"payload keys {_key_ids(self.keys) or 'none'}: give both the same keys "
                "(SUBAGENTS_PAYLOAD_KEY / payload_key in the settings), or connect "
                "without data_converter= and let the plugin set it"
            )
        raise InvalidRequest(
            "SubagentsPlugin sets the client's data converter (pydantic payloads, "
            "encrypted with the settings' payload_key), but this client was given "
            f"another one ({_describe(existing)}) that it would replace. Connect without "
            "data_converter=; to encrypt payloads, set SUBAGENTS_PAYLOAD_KEY (or "
            "payload_key in the settings) for every client and worker"
        )

    def _is_ours(self, converter: DataConverter) -> bool:
        codec = converter.payload_codec
        return (
            _is_projects(converter)
            and isinstance(codec, EncryptionCodec)
            and _key_ids(codec.keys) == _key_ids(self.keys)
            and converter.failure_converter_class is self._converter.failure_converter_class
        )

    def configure_worker(self, config: WorkerConfig) -> WorkerConfig:
        """Register the subagent workflow and activities, with the settings' options.

        Raises:
            InvalidRequest: The worker's client does not have the project's data
                converter with the same keys (the plugin was given to the worker only).
        """
        if building_tool_worker():
            return config  # the tool worker of a worker this plugin configured
        client = config["client"]
        if not self._is_ours(client.data_converter):
            raise InvalidRequest(
                "SubagentsPlugin needs the worker's client to use the project's data "
                f"converter with keys {_key_ids(self.keys) or 'none'}, and this one has "
                f"{_describe(client.data_converter)}: give "
                "the plugin to Client.connect(..., plugins=[SubagentsPlugin(...)]) "
                "(workers built from that client inherit it), not only to the Worker"
            )
        registered = activity_named(config.get("activities", ()), MODEL_TURN_ACTIVITY) is not None
        config = super().configure_worker(config)
        if registered:  # built by create_worker, or the plugin is on client and worker
            return config
        setup = worker_setup(
            client,
            self.settings,
            tools=self._tools,
            tracer_provider=self._tracer_provider,
            blob_store=open_blob_store(
                self.settings.blob_url,
                self.settings.resolved_blob_dir,
                self.settings.namespace,
                keys=self.keys,
            ),
            extra=[*config.get("plugins", ()), *config.get("interceptors", ())],
        )
        config["activities"] = [*config.get("activities", ()), *setup.activities]
        self._mcp = setup.mcp
        for name, value in setup.options.items():
            if name == "workflow_runner":  # see _with_passthrough
                continue
            if name == "interceptors":  # the worker's own run inside ours
                config["interceptors"] = [*value, *config.get("interceptors", ())]
                continue
            if name == "deployment_config" and config.get("use_worker_versioning"):
                continue  # the worker's own (legacy) versioning
            if name not in config or config.get(name) == _WORKER_DEFAULTS.get(name):
                config[name] = value  # type: ignore[literal-required]
        return config

    def _workflow_runner(self, runner: WorkflowRunner | None) -> WorkflowRunner:
        """The worker's sandbox; the library's workflows outside it if the settings say so."""
        runner = _with_passthrough(runner)
        if self.settings.subagent_workflow_sandbox:
            return runner
        return library_outside_sandbox(runner)

    async def run_worker(self, worker: Worker, next: Callable[[Worker], Awaitable[None]]) -> None:
        """Run the worker, and beside it the worker of its tool queue (``max_tool_calls``).

        The worker's MCP servers list their tools first, and stop with it.
        """
        mcp = getattr(self, "_mcp", None)
        if mcp is not None:
            inner = next

            async def next(worker: Worker) -> None:
                await mcp.run_worker(worker, inner)

        async with (
            sessions_closed_after(),
            tool_calls_served(worker, self.settings.max_tool_calls),
            model_queues_served(
                worker, self.settings.model_rate_limit_map, self.settings.max_activities
            ),
        ):
            await super().run_worker(worker, next)


def _with_subagent_workflow(workflows: Sequence[type] | None) -> Sequence[type]:
    workflows = list(workflows or ())
    ours = [w for w in (SubagentWorkflow, NotifyWorkflow) if w not in workflows]
    return [*ours, *workflows]


def _with_passthrough(runner: WorkflowRunner | None) -> WorkflowRunner:
    """The worker's sandbox, importing this package (and pydantic...) once, outside it."""
    if runner is None:
        runner = SandboxedWorkflowRunner()
    if isinstance(runner, SandboxedWorkflowRunner):
        return dataclasses.replace(
            runner,
            restrictions=runner.restrictions.with_passthrough_modules(*PASSTHROUGH_MODULES),
        )
    return runner


def _is_default(converter: DataConverter) -> bool:
    return converter is DataConverter.default or (
        converter.payload_converter_class is DefaultPayloadConverter
        and converter.payload_codec is None
        and converter.failure_converter_class is DefaultFailureConverter
        and getattr(converter, "external_storage", None) is None
    )


def _is_projects(converter: DataConverter) -> bool:
    """Whether ``converter`` is one ``data_converter()`` built, whatever its keys."""
    return converter.payload_converter_class is SharedPydanticPayloadConverter and isinstance(
        converter.payload_codec, EncryptionCodec
    )


def _key_ids(keys: KeyRing | None) -> list[str]:
    return keys.ids if keys is not None else []


def _describe(converter: DataConverter) -> str:
    if _is_default(converter):
        return "Temporal's default data converter"
    codec = converter.payload_codec
    if _is_projects(converter):
        assert isinstance(codec, EncryptionCodec)
        return f"the project's converter with payload keys {_key_ids(codec.keys) or 'none'}"
    parts: list[Any] = [converter.payload_converter_class.__name__]
    if codec is not None:
        parts.append(f"codec {type(codec).__name__}")
    return "a data converter with " + ", ".join(parts)
