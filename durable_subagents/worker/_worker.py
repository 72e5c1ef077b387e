"""Worker construction.

A worker registers ``SubagentWorkflow`` and its activities on one task queue,
with the pydantic data converter (clients use the same one).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal

from opentelemetry.trace import TracerProvider
from temporalio.client import Client
from temporalio.common import WorkerDeploymentVersion
from temporalio.service import RPCError
from temporalio.worker import Worker, WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from durable_subagents.activities import Notifier, SubagentActivities
from durable_subagents.agents import ActivityOptions, parse_activity_options
from durable_subagents.config import Settings
from durable_subagents.connection._connect import connect_temporal
from durable_subagents.errors import InvalidRequest, SearchAttributesMissing, SubagentError
from durable_subagents.pricing import price_table
from durable_subagents.providers import import_sdk
from durable_subagents.storage._blobstore import BlobStore, check_blob_store
from durable_subagents.telemetry._metrics import Labels
from durable_subagents.telemetry._telemetry import ActivityTelemetry, setup_tracing
from durable_subagents.tools import ToolRegistry
from durable_subagents.tools._decorator import _THREADS
from durable_subagents.wire import _search_attributes as sa
from durable_subagents.worker._deployment import deployment_config
from durable_subagents.worker._gc import collect_less
from durable_subagents.worker._health import OpsServer, Readiness, telemetry_runtime
from durable_subagents.worker._held import give_up_held_forever
from durable_subagents.worker._held_log import say_held_once
from durable_subagents.worker._interceptor import OperationsInterceptor
from durable_subagents.worker._lifecycle import SessionsClosed
from durable_subagents.worker._mcp import McpTools, mcp_tools
from durable_subagents.worker._model_queues import ModelQueuesPlugin
from durable_subagents.worker._models import worker_endpoints, worker_models
from durable_subagents.worker._runner import LibraryOutsideSandbox
from durable_subagents.worker._sweep import sweep_forever
from durable_subagents.worker._tool_queue import (
    ToolQueuePlugin,
    tool_queue_activities,
    tool_worker,
)
from durable_subagents.worker._workspace_secrets import warn_secrets_in_workspace
from durable_subagents.workflows import NotifyWorkflow, SubagentWorkflow

log = logging.getLogger(__name__)


async def check_search_attributes(client: Client) -> list[str]:
    """Names of the custom search attributes missing from the client's namespace."""
    try:
        return await sa.missing_search_attributes(client, client.namespace)
    except RPCError as err:
        log.warning("could not list search attributes: %s", err)
        return []


@dataclass(frozen=True)
class WorkerSetup:
    """What a subagent worker registers, and the worker options its settings ask for."""

    workflows: list[type]
    activities: list[Callable[..., Any]]
    options: dict[str, Any]
    """``temporalio.worker.Worker`` keyword arguments (limits, sandbox, versioning)."""
    mcp: McpTools | None = None
    """The worker's MCP servers, started with it (None: it has none)."""


def worker_setup(
    client: Client,
    settings: Settings,
    *,
    tools: ToolRegistry | None = None,
    tracer_provider: TracerProvider | None = None,
    deployment: WorkerDeploymentVersion | None = None,
    blob_store: BlobStore | None = None,
    extra: Sequence[object] = (),
    runs_models: bool = True,
) -> WorkerSetup:
    """The workflows, activities and worker options of a subagent worker.

    ``create_worker`` and ``SubagentsPlugin`` both build their workers from it.

    Args:
        client: The worker's client (whether it traces decides the activities' spans).
        settings: Blob store, workspace root, default model, sandbox mode, limits.
        tools: The tools to offer (default: the built-ins).
        tracer_provider: Where the ``subagent.*`` spans go when the client traces.
        deployment: The Worker Deployment Version (default: ``settings.worker_deployment()``).
        blob_store: The blob store (default: ``settings.blob_store()``).
        extra: The worker's own plugins and interceptors (they may trace too).
        runs_models: Whether the worker runs model turns (not a ``tools`` worker): then
            its default model must be one it can run (``worker_models``).

    Raises:
        InvalidRequest: The settings name only one of a deployment and a build ID, or
            a notification secret that is too short, or the worker's default model
            cannot run (missing, unknown, not allowed, or without its key).
    """
    endpoints = worker_endpoints(settings) if runs_models else {}
    models = worker_models(settings, endpoints) if runs_models else None
    version = deployment or settings.worker_deployment()
    say_held_once()  # a task held by a bug: its traceback once, not at every retry
    notifier = Notifier(
        default_url=settings.notify_url,
        allow=settings.notify_allow_list,
        secret=settings.notify_secret.get_secret_value() if settings.notify_secret else None,
        inbox_url=settings.inbox_url,
    )
    activities = SubagentActivities(
        settings.blob_store() if blob_store is None else blob_store,
        workspace_root=settings.resolved_workspace,
        tools=tools,
        default_model=settings.model,
        sandbox=settings.tool_sandbox,
        tool_env=settings.tool_env_names,
        tool_limits=settings.tool_limits,
        hidden_paths=settings.hidden_paths(),
        read_paths=settings.tool_read_path_list,
        model_idle_timeout=settings.model_idle_timeout,
        model_turn_timeout=settings.model_turn_timeout,
        script_files=settings.script_files,
        tool_user=settings.tool_user_ids,
        protected_paths=settings.protected_path_list,
        context_window=settings.context_window,
        compact_at=settings.compact_at,
        prompt_cache=settings.prompt_cache,
        tool_images=settings.tool_images,
        prompt_cache_key=settings.prompt_cache_key,
        notify=settings.notify_url is not None,
        telemetry=ActivityTelemetry.for_worker(client, tracer_provider, extra),
        rate_limited=frozenset(settings.model_rate_limit_map),
        transcript_cache_bytes=settings.transcript_cache_mb * 1024 * 1024,
        overlay_dir=settings.resolved_overlay_dir,
        activity_options=settings.activity_options,
        models=models,
        max_depth=settings.max_depth,
        prices=price_table(settings.prices),
    )
    changed = settings.activity_options.changed()
    if changed:
        log.info(
            "activity options beyond the defaults: %s",
            ", ".join(f"{name}={value}" for name, value in changed.items()),
        )
    labels = Labels(
        tools=set(activities.tools.names),
        default_model=settings.model or "",
        endpoints=frozenset(endpoints),
    )
    options: dict[str, Any] = {
        "workflow_runner": workflow_runner(),
        "max_cached_workflows": settings.max_cached_tasks,
        "max_concurrent_activities": settings.max_activities,
        "sticky_queue_schedule_to_start_timeout": timedelta(seconds=settings.sticky_queue_timeout),
        # Heartbeats carry cancellation: throttled to 0.8 x the heartbeat timeout by
        # default (8 s for tools), a cancel took that long to reach a running command.
        "max_heartbeat_throttle_interval": timedelta(seconds=1),
        "default_heartbeat_throttle_interval": timedelta(seconds=1),
        "graceful_shutdown_timeout": timedelta(seconds=settings.drain_timeout),
        "interceptors": [OperationsInterceptor(labels)],
    }
    if version is not None:
        options["deployment_config"] = deployment_config(version)
    return WorkerSetup(
        [SubagentWorkflow, NotifyWorkflow],
        [*activities.activities, notifier.send_notification],
        options,
        mcp_tools(activities, settings, labels),
    )


def create_worker(
    client: Client,
    settings: Settings,
    *,
    task_queue: str | None = None,
    tools: ToolRegistry | None = None,
    workflows: Sequence[type] = (),
    max_concurrent_activities: int | None = None,
    max_tool_calls: int | None = None,
    sticky_queue_timeout: timedelta | None = None,
    tracer_provider: TracerProvider | None = None,
    deployment: WorkerDeploymentVersion | None = None,
    role: Literal["all", "tasks", "tools"] | None = None,
    subagent_workflow_sandbox: bool | None = None,
    activity_options: ActivityOptions | Mapping[str, Any] | str | None = None,
    **worker_options: Any,
) -> Worker:
    """Build a worker for subagent tasks.

    Args:
        client: A client connected with the pydantic data converter.
        settings: Blob store, workspace root, default model and sandbox mode.
        task_queue: Overrides ``settings.task_queue``.
        tools: The tools to offer (default: the built-ins).
        workflows: Your own workflows to run on this worker too (e.g. ones that start
            subagents with ``start_subagent``).
        max_concurrent_activities: Model turns run at once (default:
            ``settings.max_activities``).
        max_tool_calls: Tool calls run at once, on the task queue's tool queue
            (``<task_queue>-tools``), which this worker serves too (default:
            ``settings.max_tool_calls``).
        sticky_queue_timeout: How long a workflow task waits on this worker's sticky
            queue before any worker may take it (default: ``settings.sticky_queue_timeout``;
            short means a replacement worker picks a crashed worker's tasks up fast).
        tracer_provider: Where the ``subagent.*`` spans go when the client traces
            (default: the global provider; Temporal's own spans always use the global).
        deployment: Run as this Worker Deployment Version (worker versioning): every
            task run, and the children it starts, stays on the version it started on;
            new tasks go to the deployment's current version. Default:
            ``settings.worker_deployment()``, unversioned when the settings name none.
        role: What it serves (default ``settings.worker_role``): ``all``, the tasks
            and, beside them, their tool queue; ``tasks``, the tasks only (their tool
            calls wait for a ``tools`` worker); ``tools``, the tool queue only (a worker
            with ``run_tool`` alone on ``<task_queue>-tools``).
        subagent_workflow_sandbox: Run the library's own workflows in Temporal's
            workflow sandbox (default ``settings.subagent_workflow_sandbox``, on).
            ``False`` runs ``SubagentWorkflow`` and the notification workflow outside
            it, which costs less CPU per turn; ``workflows`` of your own stay in the
            sandbox (or whatever ``workflow_runner`` you pass) either way.
        activity_options: The timeouts and retry policies of model turns, tool calls
            and compactions (default ``settings.activity_options``): an
            ``ActivityOptions``, a mapping such as ``{"tool_call": {"maximum_attempts":
            1}}`` or the ``SUBAGENTS_ACTIVITY_OPTIONS`` text; what it leaves out keeps
            its default. A task takes them from the worker that runs its first step.
        **worker_options: Passed to ``temporalio.worker.Worker`` (they win over the
            options the settings give).

    Returns:
        The worker; run it with ``async with worker:`` or ``await worker.run()``.

    Raises:
        InvalidRequest: The settings name only one of a deployment and a build ID,
            ``activity_options`` holds an unknown or invalid option, or (but for a
            ``tools`` worker) the default model cannot run here: none is set and the
            scripted model is not enabled, or it is unknown, not among
            ``SUBAGENTS_MODELS``, or its API key is missing. The message names the
            setting to change.
    """
    if activity_options is not None:
        settings = settings.model_copy(
            update={"activity_options": parse_activity_options(activity_options)}
        )
    role = role or settings.worker_role
    setup = worker_setup(
        client,
        settings,
        tools=tools,
        tracer_provider=tracer_provider,
        deployment=deployment,
        extra=[*worker_options.get("plugins", ()), *worker_options.get("interceptors", ())],
        runs_models=role != "tools",
    )
    options = {**setup.options, **worker_options}
    if subagent_workflow_sandbox is None:
        subagent_workflow_sandbox = settings.subagent_workflow_sandbox
    if not subagent_workflow_sandbox:
        options["workflow_runner"] = library_outside_sandbox(options["workflow_runner"])
    options["interceptors"] = [
        *setup.options["interceptors"],
        *worker_options.get("interceptors", ()),
    ]
    queue = task_queue or settings.task_queue
    tool_slots = max_tool_calls or settings.max_tool_calls
    if role == "tools":
        if workflows:
            raise InvalidRequest(
                "a worker with role 'tools' runs tool calls only: run your workflows on a "
                "worker with role 'all' or 'tasks'"
            )
        for name in (
            "workflow_runner",
            "max_cached_workflows",
            "sticky_queue_schedule_to_start_timeout",
        ):
            options.pop(name, None)
        run_tool = tool_queue_activities(setup.activities)
        assert run_tool
        options["plugins"] = [*options.get("plugins", ()), SessionsClosed()]
        if setup.mcp is not None:
            options["plugins"] = [*options["plugins"], setup.mcp]
        return tool_worker(client, queue, run_tool, tool_slots, options)
    if role not in ("all", "tasks"):
        raise InvalidRequest(f"unknown worker role {role!r}; use all, tasks or tools")
    if max_concurrent_activities:
        options["max_concurrent_activities"] = max_concurrent_activities
    if sticky_queue_timeout:
        options["sticky_queue_schedule_to_start_timeout"] = sticky_queue_timeout
    options["plugins"] = [*options.get("plugins", ()), SessionsClosed()]
    if setup.mcp is not None:
        options["plugins"] = [*options["plugins"], setup.mcp]
    if role == "all":
        options["plugins"] = [*options["plugins"], ToolQueuePlugin(tool_slots)]
    limits = settings.model_rate_limit_map
    if limits:
        slots = options.get("max_concurrent_activities", settings.max_activities)
        options["plugins"] = [*options["plugins"], ModelQueuesPlugin(limits, slots)]
    return Worker(
        client,
        task_queue=queue,
        workflows=[*setup.workflows, *workflows],
        activities=setup.activities,
        **options,
    )


_WORKFLOW_OPTIONS = (
    "workflow_runner",
    "max_cached_workflows",
    "sticky_queue_schedule_to_start_timeout",
)
"""Options of a worker that runs workflows, which a tool worker does not."""

SANDBOX_CHECKED = ("durable_subagents", "durable_subagents.workflows")
"""The library's modules the workflow sandbox imports anew for each run and checks: the
workflows and the package they sit in. The import contracts keep the workflows from
importing the roles, tools, providers, storage and settings at all."""

PASSTHROUGH_MODULES = (
    # Pure code the workflows call, deterministic at import and in use: the payloads
    # and types, the policy, agents and spawn rules, the model's context, errors.
    *(
        f"durable_subagents.{name}"
        for name in (
            "context._context",
            "context._output_schema",
            "runtime._lazy",
            "wording._markdown",
            "wire._payloads",
            "wire._task",
            "wire._notify",
            "wire._calls",
            "wire._compact",
            "wire._search_attributes",
            "connection._task_queue",
            "agents",
            "errors",
            "policy",
            "spawn",
            "types",
        )
    ),
    "pydantic",
    "pydantic_core",
    "tree_sitter",
    "tree_sitter_bash",
)
"""Modules the workflow sandbox imports once, outside it (never ``SANDBOX_CHECKED``)."""


LIBRARY_WORKFLOWS = (SubagentWorkflow, NotifyWorkflow)
"""The workflows ``subagent_workflow_sandbox=False`` runs outside the sandbox."""


def workflow_runner(subagent_workflow_sandbox: bool = True) -> WorkflowRunner:
    """The workflow sandbox, with this package passed through.

    The package is deterministic at import time; re-importing it (and pydantic,
    pydantic-settings...) inside the sandbox for every new run cost ~45 ms per run.

    Args:
        subagent_workflow_sandbox: False: the library's own workflows run outside the
            sandbox, every other workflow in it (see ``LibraryOutsideSandbox``).
    """
    runner = SandboxedWorkflowRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules(*PASSTHROUGH_MODULES)
    )
    return runner if subagent_workflow_sandbox else library_outside_sandbox(runner)


def library_outside_sandbox(runner: WorkflowRunner) -> WorkflowRunner:
    """``runner`` for every workflow but the library's own, which run unsandboxed."""
    if isinstance(runner, LibraryOutsideSandbox):
        return runner
    return LibraryOutsideSandbox(runner, LIBRARY_WORKFLOWS)


def _import_default_sdk(settings: Settings) -> None:
    """Import the SDK of the worker's default model (an endpoint's: of its wire)."""
    try:
        endpoints = worker_endpoints(settings)
    except InvalidRequest:
        endpoints = {}  # said in one line when the worker is built
    import_sdk(settings.model, endpoints)


async def run_worker(settings: Settings, *, ready: asyncio.Event | None = None) -> None:
    """Connect, check the namespace, and run a worker until cancelled.

    Tracing follows ``SUBAGENTS_OTEL`` / ``OTEL_EXPORTER_OTLP_ENDPOINT`` (see
    ``setup_tracing``).

    Raises:
        TemporalUnavailable: the server did not answer.
        TemporalAccessDenied: the server refused the TLS handshake or the credentials.
        TemporalConfigError: the Temporal profile, configuration file or a certificate
            cannot be used.
        SearchAttributesMissing: the namespace lacks the custom search attributes; the
            message has the commands that register them.
        InvalidRequest: the settings name only one of a deployment and a build ID, or
            a blob URL that is not ``s3://`` or ``file://``.
        BlobStoreUnavailable: the blob store cannot be written and read back (the
            message names it and what to check).
    """
    settings.worker_deployment()  # a half-given version fails before connecting
    # The default model's SDK is imported while the worker connects, not by its first
    # task (a tools worker runs no model).
    sdk = None
    if settings.worker_role != "tools":
        sdk = asyncio.create_task(asyncio.to_thread(_import_default_sdk, settings))
    # Said once, while the worker connects: a .env in the workspace is every task's.
    looked = asyncio.create_task(asyncio.to_thread(warn_secrets_in_workspace, settings))
    tracing = setup_tracing(settings)
    telemetry = telemetry_runtime(settings)
    extra = {"runtime": telemetry.runtime} if telemetry is not None else {}
    client = await connect_temporal(settings, tracing=tracing, **extra)
    missing = await check_search_attributes(client)
    if missing:
        raise SearchAttributesMissing(
            f"namespace {settings.namespace!r} lacks the search attributes "
            f"{', '.join(missing)}. Register them once with:\n"
            + sa.register_command(settings.namespace, settings.address)
            + "\n(`subagents dev` registers them on its own server)"
        )
    store = settings.blob_store()
    await check_blob_store(store)
    worker = create_worker(client, settings)
    readiness = Readiness.of(client, settings, identity=client.identity)
    ops = None
    if settings.metrics_port is not None:
        ops = OpsServer(
            readiness,
            telemetry,
            settings.task_queue,
            host=settings.metrics_host,
            port=settings.metrics_port,
        )
        await ops.start()
    if sdk is not None:
        await sdk
    await looked
    sweeper = (
        asyncio.create_task(sweep_forever(client, store, settings.blob_sweep_every))
        if settings.blob_sweep
        else None
    )
    giver = (
        asyncio.create_task(
            give_up_held_forever(client, settings.task_queue, settings.fail_held_after)
        )
        if settings.fail_held_after is not None
        else None
    )
    try:
        async with worker:
            collect_less(settings.gc_threshold)
            if ready is not None:
                ready.set()
            try:
                await asyncio.Future()
            finally:
                # Stopping (SIGTERM, Ctrl-C): the worker stops polling now and gives
                # what runs the drain timeout; meanwhile it is not ready.
                readiness.draining = True
                log.info(
                    "stopping: polling no more; running model turns and tool calls have "
                    "%g s to finish (SUBAGENTS_DRAIN_TIMEOUT), then go to other workers",
                    settings.drain_timeout,
                )
    finally:
        for loop in (sweeper, giver):
            if loop is not None:
                loop.cancel()
        if ops is not None:
            await ops.stop()


async def check_worker(settings: Settings) -> str:
    """Run a worker's readiness checks once, from another process of its host.

    For exec probes (``subagents worker --check``): Temporal answers, it sees a worker
    of this host poll the settings' queue, and the blob store takes a write and gives it
    back.

    Returns:
        A one-line summary of what was checked.

    Raises:
        SubagentError: A check failed; the message says which, in one line.
    """
    client = await connect_temporal(settings)
    host = socket.gethostname()
    readiness = Readiness.of(client, settings, identity=f"@{host}")
    why = await readiness.check()
    if why is not None:
        raise SubagentError(f"not ready: {why}")
    return (
        f"ready: Temporal at {settings.address} sees a worker of {host} poll task queue "
        f"{readiness.queue!r}; blob store {readiness.store.url} answers"
    )


def exit_if_tool_calls_stuck(code: int) -> None:
    """End the process at once if tool calls are still stuck in their threads.

    Call it after the worker has shut down, when the process is about to exit. A
    cancelled tool call whose thread never returns (a custom tool that hangs) would
    otherwise meet interpreter finalization, which can abort while the Temporal
    runtime's own threads are still winding down. With no stuck call it returns and
    the process exits normally.
    """
    stuck = _THREADS.running()
    if not stuck:
        return
    log.warning("%d tool call(s) still stuck in their threads; exiting without them", stuck)
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
