"""Settings, read from the environment only at the edges (CLI, worker, dev server).

Library code takes a ``Settings`` object (or explicit arguments) and never reads the
environment itself, except the model-provider keys, which only the worker's
activities read.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AliasChoices, Field, SecretStr, field_validator, model_validator
from pydantic_settings import NoDecode, SettingsConfigDict
from temporalio.common import WorkerDeploymentVersion

from durable_subagents.agents._activity_options import (
    DEFAULT_ACTIVITY_OPTIONS,
    ActivityOptions,
    parse_activity_options,
)
from durable_subagents.agents._spec import (
    DEFAULT_WORKER_DEPTH,
    MAX_DEPTH_LIMIT,
)
from durable_subagents.connection._data_dir import default_data_dir as default_data_dir
from durable_subagents.connection._setting_values import (
    SECRET_ENV_NAME as SECRET_ENV_NAME,
)
from durable_subagents.connection._setting_values import (
    check_model_patterns,
    deployment_version,
    parse_rate_limits,
    secret_paths,
)
from durable_subagents.connection._task_queue import DEFAULT_TASK_QUEUE as DEFAULT_TASK_QUEUE
from durable_subagents.connection._temporal_config import (
    TemporalConnection,
    profile_defaults,
    resolve_connection,
)
from durable_subagents.connection._tool_settings import ToolSettings
from durable_subagents.errors import InvalidRequest
from durable_subagents.policy._notify_url import normal_notify_url
from durable_subagents.pricing import PricesFile
from durable_subagents.runtime._event_loop import EventLoopChoice
from durable_subagents.storage._blobstore import BlobStore
from durable_subagents.storage._factory import open_blob_store
from durable_subagents.storage._local import LocalBlobStore
from durable_subagents.storage._sealing import KeyRing

DEFAULT_ADDRESS = "localhost:7233"
DEFAULT_NAMESPACE = "default"
DEFAULT_DRAIN_TIMEOUT = 25.0
"""Seconds a stopping worker lets running activities finish (below Kubernetes' 30 s)."""
DEFAULT_MODEL_IDLE_TIMEOUT = 120.0
"""Seconds a model stream may go without data before the attempt is abandoned."""


class Settings(ToolSettings):
    """Connection, storage and model settings shared by client, worker and CLI."""

    model_config = SettingsConfigDict(extra="ignore", populate_by_name=True)

    address: str = Field(
        DEFAULT_ADDRESS, validation_alias=AliasChoices("TEMPORAL_ADDRESS", "address")
    )
    """Temporal frontend ``host:port``. Given explicitly (``--address``, ``address=``)
    it wins; else ``TEMPORAL_ADDRESS``, else the profile's ``address``, else
    ``localhost:7233``."""
    namespace: str = Field(
        DEFAULT_NAMESPACE, validation_alias=AliasChoices("TEMPORAL_NAMESPACE", "namespace")
    )
    """Temporal namespace the tasks live in (resolved like ``address``)."""
    profile: str | None = Field(None, validation_alias=AliasChoices("TEMPORAL_PROFILE", "profile"))
    """The profile of Temporal's TOML configuration file to connect with (``--profile``):
    its address, namespace, API key, TLS certificates and gRPC metadata, under the
    ``TEMPORAL_*`` environment. None: ``default``."""
    config_file: Path | None = Field(
        None, validation_alias=AliasChoices("TEMPORAL_CONFIG_FILE", "config_file")
    )
    """Temporal's TOML configuration file. None: the platform's default
    (``~/.config/temporalio/temporal.toml`` on Linux), which may be absent."""
    task_queue: str = Field(
        DEFAULT_TASK_QUEUE, validation_alias=AliasChoices("SUBAGENTS_TASK_QUEUE", "task_queue")
    )
    """Task queue the workers poll and tasks are started on."""
    data_dir: Path = Field(
        default_factory=default_data_dir,
        validation_alias=AliasChoices("SUBAGENTS_DATA_DIR", "data_dir"),
    )
    """Where ``subagents dev`` keeps its SQLite file and, by default, the blob store."""
    blob_dir: Path | None = Field(
        None, validation_alias=AliasChoices("SUBAGENTS_BLOB_DIR", "blob_dir")
    )
    """Blob store directory (when ``blob_url`` is unset). Workers and clients of one
    deployment must share it: one host, or a network filesystem."""
    overlay_dir: Path | None = Field(
        None, validation_alias=AliasChoices("SUBAGENTS_OVERLAY_DIR", "overlay_dir")
    )
    """Where a worker's sandboxed commands write while they run (one directory per
    call, removed once its changes landed): a local filesystem that overlayfs takes as
    an upper layer (ext4, xfs, btrfs, tmpfs). Unset: ``<data_dir>/overlays``."""
    blob_url: str | None = Field(
        None, validation_alias=AliasChoices("SUBAGENTS_BLOB_URL", "blob_url")
    )
    """The blob store as a URL: ``s3://BUCKET/PREFIX`` (S3 or an S3-compatible service,
    configured by ``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
    ``AWS_REGION``) or ``file:///PATH``. Unset: the directory ``blob_dir``."""
    blob_sweep: bool = Field(
        True, validation_alias=AliasChoices("SUBAGENTS_BLOB_SWEEP", "blob_sweep")
    )
    """Whether this worker takes part in removing expired tasks' blobs. Each sweep lists
    the store and asks Temporal about every task in it; one worker sweeps per period
    (``blob_sweep_every``), whichever takes the store's lease in Temporal first."""
    blob_sweep_every: float = Field(
        3600.0,
        ge=1,
        le=7 * 86400,
        validation_alias=AliasChoices("SUBAGENTS_BLOB_SWEEP_EVERY", "blob_sweep_every"),
    )
    """Seconds between two sweeps of the blob store, fleet-wide (each worker's try moves
    by up to 10 % at random)."""
    fail_held_after: float | None = Field(
        None,
        gt=0,
        le=366 * 86400,
        validation_alias=AliasChoices("SUBAGENTS_FAIL_HELD_AFTER", "fail_held_after"),
    )
    """Worker side, opt in: seconds a task may be held by a bug in workflow code (its
    workflow task failing again and again) before it fails with the error, instead of
    waiting for a fixed worker. Unset: held until a fix resumes it. One worker of the
    task queue at a time checks, under a lease."""
    payload_key: SecretStr | None = Field(
        None, validation_alias=AliasChoices("SUBAGENTS_PAYLOAD_KEY", "payload_key")
    )
    """Base64 of 32 random bytes (``subagents keygen``): every payload written to Temporal
    and every blob is encrypted with it (AES-256-GCM). Set the same key on every worker
    and client of a deployment. Unset: plain payloads."""
    payload_old_keys: SecretStr | None = Field(
        None, validation_alias=AliasChoices("SUBAGENTS_PAYLOAD_OLD_KEYS", "payload_old_keys")
    )
    """Comma-separated earlier keys, kept to decrypt what was written under them while
    tasks run across a rotation."""
    model: str | None = Field(None, validation_alias=AliasChoices("SUBAGENTS_MODEL", "model"))
    """Default ``provider:model`` when neither the spawn nor the agent names one. A
    worker refuses to start without one it can run (unless the scripted model is
    enabled: ``allow_scripted``)."""
    models: str = Field("", validation_alias=AliasChoices("SUBAGENTS_MODELS", "models"))
    """Worker side: the models its tasks may ask for besides ``model``, as
    ``provider:model`` glob patterns separated by commas (``openai:gpt-4.1*,anthropic:*``;
    ``*``: any model of the worker's providers). Empty: ``model`` only. A client given
    the same value refuses a spawn of any other model before it starts."""
    prices: PricesFile = Field(None, validation_alias=AliasChoices("SUBAGENTS_PRICES", "prices"))
    """Worker side: a JSON or TOML file of prices by ``provider:model`` (docs/models.md#prices)."""
    allow_scripted: bool = Field(
        False, validation_alias=AliasChoices("SUBAGENTS_ALLOW_SCRIPTED", "allow_scripted")
    )
    """Worker side: run the offline ``scripted`` model (``subagents dev`` and ``demo``
    turn it on; tests set it). Off: a task that asks for it fails, and a worker whose
    default model it is refuses to start."""
    endpoints: SecretStr | None = Field(
        None, validation_alias=AliasChoices("SUBAGENTS_ENDPOINTS", "endpoints")
    )
    """Worker side: the servers ``NAME:model`` names go to, a TOML or JSON file or the
    text inline (docs/models.md#endpoints). Clients take any well-formed ``NAME:``."""
    workspace: Path | None = Field(
        None, validation_alias=AliasChoices("SUBAGENTS_WORKSPACE", "workspace")
    )
    """Root the file tools are jailed to (worker side). Default: the current directory."""
    agents_dir: Path | None = Field(
        None, validation_alias=AliasChoices("SUBAGENTS_AGENTS_DIR", "agents_dir")
    )
    """Client side: the project whose agent files (``.claude/agents``,
    ``.opencode/agent[s]``) clients offer besides the built-ins. Unset: those of the
    project root above the current directory, the first directory with ``.git`` (else
    the current directory itself); never a ``.claude`` below that root."""
    mcp_config: str = Field("", validation_alias=AliasChoices("SUBAGENTS_MCP_CONFIG", "mcp_config"))
    """MCP configuration files (Claude Code's ``.mcp.json`` format, ``os.pathsep``-
    separated) read after the workspace root's ``.mcp.json``; a later file's server
    replaces an earlier one of its name."""
    script_files: bool = Field(
        False, validation_alias=AliasChoices("SUBAGENTS_SCRIPT_FILES", "script_files")
    )
    """Let tasks use ``scripted:@/abs/path.json`` models, read on the worker (tests and
    demos); off by default, since a spawner would choose a file the worker reads."""
    otel: bool | None = Field(None, validation_alias=AliasChoices("SUBAGENTS_OTEL", "otel"))
    """OpenTelemetry tracing at the edges: ``1`` on (installs an OTLP exporter), ``0`` off;
    unset: on when ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set or a provider is configured."""
    model_idle_timeout: float = Field(
        DEFAULT_MODEL_IDLE_TIMEOUT,
        gt=0,
        validation_alias=AliasChoices("SUBAGENTS_MODEL_IDLE_TIMEOUT", "model_idle_timeout"),
    )
    """Seconds a model's stream may go without data (the response headers, then each
    chunk) before the worker closes it and fails the attempt; Temporal retries it."""
    model_turn_timeout: float | None = Field(
        None,
        gt=0,
        le=600,
        validation_alias=AliasChoices("SUBAGENTS_MODEL_TURN_TIMEOUT", "model_turn_timeout"),
    )
    """Seconds one model-turn attempt may take on the worker, however steadily it
    streams, before it is abandoned and retried. Unset: only the workflow's limit of
    10 minutes per attempt (which is also the most this may be)."""
    context_window: int | None = Field(
        None,
        ge=1024,
        validation_alias=AliasChoices("SUBAGENTS_CONTEXT_WINDOW", "context_window"),
    )
    """The context window, in tokens, of every model this worker calls (an agent's own
    ``context_window`` wins). Unset: the table of known models; a model it does not
    know gets its window from the first request the provider refuses as too long."""
    compact_at: float = Field(
        0.8,
        gt=0.1,
        lt=1,
        validation_alias=AliasChoices("SUBAGENTS_COMPACT_AT", "compact_at"),
    )
    """The share of the context window a turn's context may reach: a turn that would
    pass it compacts the conversation first."""
    prompt_cache: bool = Field(
        True, validation_alias=AliasChoices("SUBAGENTS_PROMPT_CACHE", "prompt_cache")
    )
    """Ask providers to cache the conversation's prefix (Anthropic ``cache_control``
    breakpoints, OpenAI ``prompt_cache_key``). OpenAI's automatic caching needs nothing."""
    tool_images: bool = Field(
        True, validation_alias=AliasChoices("SUBAGENTS_TOOL_IMAGES", "tool_images")
    )
    """Send the images of tool results (an MCP server's screenshots) to the model. Off
    for a model that takes no images (a text-only model behind an OpenAI-compatible
    server refuses them): the result's text then only names each image."""
    prompt_cache_key: Literal["auto", "on", "off"] = Field(
        "auto", validation_alias=AliasChoices("SUBAGENTS_PROMPT_CACHE_KEY", "prompt_cache_key")
    )
    """Whether OpenAI requests carry ``prompt_cache_key`` (the task id): ``auto`` sends it
    to api.openai.com only (not every OpenAI-compatible server accepts it)."""

    sticky_queue_timeout: float = Field(
        3.0,
        gt=0,
        le=60,
        validation_alias=AliasChoices("SUBAGENTS_STICKY_QUEUE_TIMEOUT", "sticky_queue_timeout"),
    )
    """Seconds a workflow task waits on the worker that ran the task last before any
    worker may take it: after a worker crash, its replacement picks tasks up this soon
    (1 is fine on a quiet deployment; longer keeps more tasks on warm workers)."""

    max_activities: int = Field(
        100,
        ge=1,
        le=100_000,
        validation_alias=AliasChoices("SUBAGENTS_MAX_ACTIVITIES", "max_activities"),
    )
    """Model turns one worker runs at once. Each model turn in flight holds one, so this
    caps a worker's turns per second at this many over the model's latency. (Tool calls
    have slots of their own, ``max_tool_calls``; reads run within the model turns.)"""
    max_tool_calls: int = Field(
        100,
        ge=1,
        le=100_000,
        validation_alias=AliasChoices("SUBAGENTS_MAX_TOOL_CALLS", "max_tool_calls"),
    )
    """Tool calls one worker runs at once, on the task queue's tool queue
    (``<task queue>-tools``). Apart from ``max_activities``: tool calls that run for
    minutes, a stalled task's among them, never hold the slots model turns need."""
    worker_role: Literal["all", "tasks", "tools"] = Field(
        "all", validation_alias=AliasChoices("SUBAGENTS_WORKER_ROLE", "worker_role")
    )
    """What a worker serves: ``all`` (tasks, and their tool calls on the tool queue),
    ``tasks`` (workflows, model turns and reads, no tool queue) or ``tools`` (only
    the tool queue). Run ``tools`` workers on the machines where commands should run
    (sandbox hosts with the workspace) and ``tasks`` workers elsewhere; ``tasks``
    workers still read the workspace for ``read_file``, ``list_files`` and ``grep``."""
    subagent_workflow_sandbox: bool = Field(
        True,
        validation_alias=AliasChoices(
            "SUBAGENTS_SUBAGENT_WORKFLOW_SANDBOX", "subagent_workflow_sandbox"
        ),
    )
    """Run the library's own workflows (``SubagentWorkflow`` and the notification
    workflow) in Temporal's workflow sandbox. ``false`` runs them outside it: they are
    deterministic and replay-tested, and a turn then costs the worker 4-6 ms less CPU
    (about a fifth). Workflows of your own registered on the same worker stay in the
    sandbox either way."""
    transcript_cache_mb: int = Field(
        256,
        ge=0,
        le=1_000_000,
        validation_alias=AliasChoices("SUBAGENTS_TRANSCRIPT_CACHE_MB", "transcript_cache_mb"),
    )
    """Memory (MB) a worker keeps running tasks' conversations in, so a turn reads no
    transcript back from the blob store: the chain's nodes as stored, about 230 bytes
    per short message (3 KB for a task of six short turns). Least recently used first
    out; 0 turns it off."""
    max_cached_tasks: int = Field(
        1000,
        ge=1,
        le=1_000_000,
        validation_alias=AliasChoices("SUBAGENTS_MAX_CACHED_TASKS", "max_cached_tasks"),
    )
    """Running tasks a worker keeps in memory (Temporal's sticky cache, ~100 KB each).
    A task pushed out is replayed from its history at its next step: keep this at
    least the number of tasks one worker runs at once."""
    gc_threshold: int = Field(
        50_000,
        ge=0,
        le=100_000_000,
        validation_alias=AliasChoices("SUBAGENTS_GC_THRESHOLD", "gc_threshold"),
    )
    """New objects between two young collections of Python's cyclic garbage collector,
    in a process that runs a worker (``subagents worker``, ``subagents dev``,
    ``run_worker``); Python's own is 700. Once the worker polls, what start-up loaded is
    also frozen out of every later collection (``gc.freeze()``). Full collections then
    no longer traverse every running task's state several times a minute: 0.3 s of
    collection in a 1,000-task run where Python's thresholds spent 6 s of the worker's
    80 s of CPU, for 7-10 % more peak memory. 0 leaves the collector as Python set it."""
    metrics_port: int | None = Field(
        None,
        ge=0,
        le=65535,
        validation_alias=AliasChoices("SUBAGENTS_METRICS_PORT", "metrics_port"),
    )
    """Port of the worker's operations endpoint: ``/metrics`` (Prometheus text: Temporal's
    SDK metrics and the product's own), ``/healthz`` and ``/readyz``. None: no endpoint."""
    metrics_host: str = Field(
        "127.0.0.1", validation_alias=AliasChoices("SUBAGENTS_METRICS_HOST", "metrics_host")
    )
    """Address the operations endpoint listens on; ``0.0.0.0`` for a scraper or a
    probe on another host (Kubernetes' kubelet, a Prometheus server)."""
    drain_timeout: float = Field(
        DEFAULT_DRAIN_TIMEOUT,
        ge=0,
        le=3600,
        validation_alias=AliasChoices("SUBAGENTS_DRAIN_TIMEOUT", "drain_timeout"),
    )
    """Seconds a stopping worker (SIGTERM, Ctrl-C) lets running model turns and tool
    calls finish after it stopped polling; what still runs then is handed back to other
    workers, which start it at once. Keep it below the orchestrator's grace period
    (Kubernetes: 30 s)."""
    event_loop: EventLoopChoice = Field(
        "auto", validation_alias=AliasChoices("SUBAGENTS_EVENT_LOOP", "event_loop")
    )
    """The event loop of a process the CLI runs a worker in (``worker``, ``dev``,
    ``demo``): ``auto`` (uvloop where it is installed, which is everywhere but Windows),
    ``uvloop``, or ``asyncio``. A worker embedded in an application runs on the
    application's loop."""
    model_rate_limits: str = Field(
        "", validation_alias=AliasChoices("SUBAGENTS_MODEL_RATE_LIMITS", "model_rate_limits")
    )
    """Fleet-wide model turns per second by provider, ``openai=5,anthropic=0.5``: those
    providers' turns go to a queue of their own (``<task queue>-model-<provider>``)
    whose dispatch rate the Temporal server limits for all workers together. Give every
    worker of the task queue the same value."""
    activity_options: Annotated[ActivityOptions, NoDecode] = Field(
        DEFAULT_ACTIVITY_OPTIONS,
        validation_alias=AliasChoices("SUBAGENTS_ACTIVITY_OPTIONS", "activity_options"),
    )
    """Worker side: the timeouts and retry policies of model turns, tool calls and
    compactions, as ``kind.option=value`` pairs (``tool_call.start_to_close=5m,
    model_turn.maximum_attempts=3``) or JSON (``{"tool_call": {"start_to_close": 300}}``);
    an option not given keeps its default (``DEFAULT_ACTIVITY_OPTIONS``). A task takes
    its worker's once, at its start; an agent may only narrow them."""
    max_depth: int = Field(
        DEFAULT_WORKER_DEPTH,
        ge=0,
        le=MAX_DEPTH_LIMIT,
        validation_alias=AliasChoices("SUBAGENTS_MAX_DEPTH", "max_depth"),
    )
    """Worker side: the most levels of subagents a task this worker starts may have below
    it (0 to 10): a spawn's ``max_depth`` beyond it is kept at it. A task takes its
    worker's once, at its start."""
    deployment_name: str | None = Field(
        None, validation_alias=AliasChoices("SUBAGENTS_DEPLOYMENT_NAME", "deployment_name")
    )
    """Temporal Worker Deployment the worker belongs to (worker versioning, with
    ``build_id``; both or neither). A versioned worker pins each task run to its build:
    the run finishes on the code it started on, while new tasks go to the deployment's
    current version. Unset: an unversioned worker."""
    build_id: str | None = Field(
        None, validation_alias=AliasChoices("SUBAGENTS_BUILD_ID", "build_id")
    )
    """The worker's build within ``deployment_name`` (e.g. a release tag or a commit); one
    per code version, shared by every worker of that code."""

    notify_url: str | None = Field(
        None, validation_alias=AliasChoices("SUBAGENTS_NOTIFY_URL", "notify_url")
    )
    """Worker side: where every task POSTs its events (a pause for a decision, its
    end), signed with ``notify_secret``, unless its spawn named a ``notify_url``."""
    notify_allow: str = Field(
        "", validation_alias=AliasChoices("SUBAGENTS_NOTIFY_ALLOW", "notify_allow")
    )
    """Worker side: comma-separated URL prefixes (``https://hooks.example.com/ci/``)
    a task's ``notify_url`` may start with, besides ``notify_url`` itself. Any other
    URL a spawn names is never posted to."""
    notify_secret: SecretStr | None = Field(
        None, validation_alias=AliasChoices("SUBAGENTS_NOTIFY_SECRET", "notify_secret")
    )
    """Worker side: the HMAC-SHA256 key notifications are signed with (Standard
    Webhooks: ``whsec_`` and base64, or any text of 16 bytes or more). A worker
    without it sends none."""
    inbox_url: str | None = Field(
        None, validation_alias=AliasChoices("SUBAGENTS_INBOX_URL", "inbox_url")
    )
    """Worker side: the address people open ``subagents serve``'s page at; each
    notification links to its task there."""

    @model_validator(mode="before")
    @classmethod
    def _blank_connection_is_unset(cls, data: object) -> object:
        """An empty ``TEMPORAL_ADDRESS`` (compose's ``${TEMPORAL_ADDRESS:-}``) is unset."""
        if not isinstance(data, dict):
            return data
        blank = [
            k
            for k in ("address", "namespace", "TEMPORAL_ADDRESS", "TEMPORAL_NAMESPACE")
            if isinstance(data.get(k), str) and not data[k].strip()
        ]
        return {k: v for k, v in data.items() if k not in blank} if blank else data

    @model_validator(mode="after")
    def _address_from_profile(self) -> Settings:
        """Address and namespace from Temporal's configuration where none was given."""
        given = self.model_fields_set
        if "address" in given and "namespace" in given:
            return self
        address, namespace = profile_defaults(self.profile, self.config_file)
        if address and "address" not in given:
            self.address = address
        if namespace and "namespace" not in given:
            self.namespace = namespace
        return self

    def temporal_connection(self) -> TemporalConnection:
        """How to connect, as Temporal's own clients would.

        The address and namespace, with the profile's and the environment's API key,
        TLS certificates (read now) and gRPC metadata.

        Raises:
            TemporalConfigError: The profile or file cannot be used, or a certificate
                or key cannot be read.
        """
        return resolve_connection(
            self.address, self.namespace, profile=self.profile, config_file=self.config_file
        )

    @field_validator(
        "profile",
        "config_file",
        "agents_dir",
        "notify_url",
        "inbox_url",
        "deployment_name",
        "build_id",
        "metrics_port",
        "model_turn_timeout",
        "blob_url",
        "otel",
        mode="before",
    )
    @classmethod
    def _blank_is_unset(cls, value: object) -> object:
        """An optional setting left blank (``SUBAGENTS_OTEL=``) is unset, not empty."""
        if isinstance(value, str):
            return value.strip() or None
        return value

    @field_validator("notify_url")
    @classmethod
    def _notify_url_is_a_url(cls, value: str | None) -> str | None:
        # Refused when the worker starts, not at each event as "not allowed".
        if value is None:
            return None
        try:
            normal_notify_url(value.strip())
        except InvalidRequest as err:
            raise ValueError(f"SUBAGENTS_NOTIFY_URL: {err}") from None
        return value.strip()

    @field_validator("notify_allow")
    @classmethod
    def _notify_allow_are_urls(cls, value: str) -> str:
        # A prefix that cannot be judged as sent would allow nothing, silently.
        for prefix in value.split(","):
            if prefix.strip():
                try:
                    normal_notify_url(prefix.strip())
                except InvalidRequest as err:
                    raise ValueError(f"SUBAGENTS_NOTIFY_ALLOW: {err}") from None
        return value

    @property
    def notify_allow_list(self) -> list[str]:
        """``notify_allow``'s URL prefixes (``notify_url`` is allowed besides them)."""
        return [u.strip() for u in self.notify_allow.split(",") if u.strip()]

    def worker_deployment(self) -> WorkerDeploymentVersion | None:
        """The worker's Worker Deployment Version, or ``None`` for an unversioned worker.

        Raises:
            InvalidRequest: Only one of ``deployment_name`` and ``build_id`` is set, or
                the deployment name has a ``.`` (Temporal writes a version as
                ``<deployment>.<build ID>``).
        """
        return deployment_version(self.deployment_name, self.build_id)

    @field_validator("activity_options", mode="before")
    @classmethod
    def _valid_activity_options(cls, value: object) -> ActivityOptions:
        return parse_activity_options(value)

    @field_validator("models")
    @classmethod
    def _model_patterns(cls, value: str) -> str:
        return check_model_patterns(value)

    @field_validator("model_rate_limits")
    @classmethod
    def _valid_rate_limits(cls, value: str) -> str:
        parse_rate_limits(value)
        return value

    @property
    def model_rate_limit_map(self) -> dict[str, float]:
        """``model_rate_limits`` as provider -> turns per second."""
        return parse_rate_limits(self.model_rate_limits)

    def hidden_paths(self) -> list[Path]:
        """What no tool may read: blob store, data and config dirs, Temporal and AWS keys."""
        paths = secret_paths(self.resolved_blob_dir, self.data_dir, self.profile, self.config_file)
        paths.append(self.resolved_overlay_dir)
        store = self.blob_store()
        if isinstance(store, LocalBlobStore):
            paths.append(store.root.parent)  # a file:// URL's directory
        return [p.resolve() for p in paths]

    @property
    def resolved_overlay_dir(self) -> Path:
        """Where commands' overlays go, defaulting to ``<data_dir>/overlays``."""
        return self.overlay_dir or (self.data_dir / "overlays")

    @property
    def resolved_blob_dir(self) -> Path:
        """The blob directory, defaulting to ``<data_dir>/blobs``."""
        return self.blob_dir or (self.data_dir / "blobs")

    def payload_keys(self) -> KeyRing | None:
        """The payload keys, or None when ``payload_key`` is unset.

        Raises:
            InvalidRequest: a key is not the base64 of 32 bytes (the message names the
                setting), or old keys are set without a current one.
        """
        return KeyRing.parse(
            self.payload_key.get_secret_value() if self.payload_key else None,
            self.payload_old_keys.get_secret_value() if self.payload_old_keys else None,
        )

    def blob_store(self) -> BlobStore:
        """The namespace's blob store: ``<blob URL or dir>/<namespace>``.

        With payload keys set, what it writes is sealed with the current one.

        Raises:
            InvalidRequest: ``blob_url`` is not an ``s3://`` or ``file://`` URL, or a
                payload key is malformed.
        """
        return open_blob_store(
            self.blob_url, self.resolved_blob_dir, self.namespace, keys=self.payload_keys()
        )

    def mcp_config_files(self) -> list[Path]:
        """The workspace root's ``.mcp.json`` (where there is one), then ``mcp_config``'s."""
        root = self.resolved_workspace / ".mcp.json"
        named = [Path(p) for p in self.mcp_config.split(os.pathsep) if p.strip()]
        # Not followed if a symlink: a model never gets the worker to read a file of its choosing.
        return ([root] if root.is_file() and not root.is_symlink() else []) + named

    @property
    def resolved_workspace(self) -> Path:
        """The workspace root, defaulting to the current directory."""
        return (self.workspace or Path.cwd()).resolve()
