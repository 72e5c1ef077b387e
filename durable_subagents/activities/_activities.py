"""The activities every subagent uses: one model turn, one tool call, and a compaction.

All I/O of a task happens here: the blob store (transcript and large outputs), the
model providers (API keys are read here, on the worker, and nowhere else) and the
tool processes.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from durable_subagents.activities._compaction import compact
from durable_subagents.activities._failures import (
    blob_failure,
    configuration_error,
    log_configuration_error,
)
from durable_subagents.activities._heartbeats import (
    cancel_requested,
    heartbeat,
    heartbeating,
    may_be_stale,
)
from durable_subagents.activities._held_changes import settle as settle_held
from durable_subagents.activities._model_turn import run_turn
from durable_subagents.activities._tool_call import run_call, run_once
from durable_subagents.activities._tree import (
    own_registered_tasks,
    report_tree_spend,
    reserve_tree_task,
)
from durable_subagents.activities._turn_checks import has_schema
from durable_subagents.activities._workspaces import (
    HeldWorkspace,
    log_tool_user,
    task_workspace,
)
from durable_subagents.agents import DEFAULT_ACTIVITY_OPTIONS, READ_ONLY_TOOLS, ActivityOptions
from durable_subagents.agents._protected import PROTECTED_PATHS
from durable_subagents.agents._spec import DEFAULT_LIMITS, DEFAULT_WORKER_DEPTH, ToolLimits
from durable_subagents.agents._tool_names import covers, expand_tool_names, is_mcp
from durable_subagents.config import DEFAULT_MODEL_IDLE_TIMEOUT
from durable_subagents.context._context import (
    COMPACT_AT,
    IMAGES_LEFT_OUT,
    context_view,
    within_image_budget,
)
from durable_subagents.context._live_text import LiveText
from durable_subagents.context._output_schema import (
    FINAL_ANSWER_TOOL,
)
from durable_subagents.errors import InvalidRequest, PayloadEncryptionError
from durable_subagents.pricing import PriceTable, price_table
from durable_subagents.providers import (
    ModelProvider,
    TextSink,
    model_unavailable,
    parse_model,
    resolve_provider,
)
from durable_subagents.providers._allowlist import ModelAllowlist
from durable_subagents.providers._stream import within
from durable_subagents.providers._windows import known_window
from durable_subagents.storage._blobstore import BlobError, BlobNotFound, BlobStore
from durable_subagents.storage._transcript import (
    TRANSCRIPT_CACHE_BYTES,
    Transcript,
)
from durable_subagents.telemetry._telemetry import (
    ActivityTelemetry,
    traced_compaction,
    traced_model_turn,
    traced_tool,
)
from durable_subagents.tools import ToolContext, ToolRegistry
from durable_subagents.tools import _sandbox_host as sandbox_host
from durable_subagents.tools._decorator import DecidedPath
from durable_subagents.tools._limits import log_limit_mechanisms
from durable_subagents.tools._overlay import sweep_at_start
from durable_subagents.tools._processes import prestart_fork_server
from durable_subagents.tools._sandbox import BASE_ENV, overlay_dir_for
from durable_subagents.tools._sandbox_host import overlay_problem, sandbox_state, tool_user
from durable_subagents.tools._workspace_paths import rule_path, written_path
from durable_subagents.tools.mcp._names import matches
from durable_subagents.types import Message, ModelRequest, ModelResponse, ToolCall, ToolSpec
from durable_subagents.wire._payloads import (
    ACTIVITY_OPTIONS_ACTIVITY,
    COMPACT_ACTIVITY,
    MODEL_TURN_ACTIVITY,
    RUN_TOOL_ACTIVITY,
    SETTLE_CHANGES_ACTIVITY,
    CompactInput,
    CompactResult,
    ContextInput,
    ModelTurnInput,
    ModelTurnResult,
    SettleInput,
    ToolCallInput,
    ToolCallResult,
    WorkerBounds,
    model_queue,
    tools_digest,
)

log = logging.getLogger(__name__)


class SubagentActivities:
    """Activity implementations, holding the worker's blob store, tools and defaults.

    Args:
        store: The blob store shared with clients.
        workspace_root: The root the file tools are jailed to.
        tools: The tools this worker offers (default: the built-ins).
        default_model: ``provider:model`` used for tasks spawned with the ``default`` model.
        sandbox: Tool process isolation mode (``auto``, ``bwrap``, ``none``).
        tool_env: Worker environment variables tool processes may see (an allowlist).
        tool_limits: The ceiling of every tool call's resources (default: ``DEFAULT_LIMITS``).
        hidden_paths: Host paths no tool may read (blob store, data and config directories).
        read_paths: Extra host directories tool processes see read-only.
        telemetry: Where the ``subagent.model_turn`` / ``subagent.tool`` spans go
            (default: nowhere; ``create_worker`` turns them on for traced clients).
        model_idle_timeout: Seconds a model stream may go without data (headers, then
            each chunk) before the attempt fails, retryably (``Settings.model_idle_timeout``).
        model_turn_timeout: Seconds one model-turn attempt may take before it fails,
            retryably (``Settings.model_turn_timeout``); None: no limit of its own.
        script_files: Whether tasks may use ``scripted:@FILE`` models, which read a
            file the spawner names on this worker (``Settings.script_files``).
        tool_user: Who commands run as when the worker is root (uid, gid); None: the
            owner of the task's workspace (see ``tool_user``).
        protected_paths: The protected paths: ``PROTECTED_PATHS`` and the worker's own
            additions (``Settings.protected_path_list``). Tasks decide with them, tools
            and the sandbox keep them read-only, and no workspace may be or lie in one.
        context_window: The context window of every model, in tokens
            (``Settings.context_window``; an agent's own wins); None: the table of
            known models.
        compact_at: The share of the window a turn may fill before the conversation
            is compacted (``Settings.compact_at``).
        prompt_cache: Ask providers to cache prompt prefixes (``Settings.prompt_cache``).
        tool_images: Send the images of tool results to the model
            (``Settings.tool_images``); else their results' text only names them.
        prompt_cache_key: OpenAI's ``prompt_cache_key``: ``auto``, ``on`` or ``off``
            (``Settings.prompt_cache_key``).
        rate_limited: Providers whose model turns this worker sends on to their own
            queue (``model_queue``), where the server enforces a rate limit.
        overlay_dir: Where commands' overlays are made (default: the data directory's
            ``overlays``; see ``SandboxProfile.overlay_dir``).
        transcript_cache_bytes: Memory the running tasks' conversations are kept in
            (``Settings.transcript_cache_mb``).
        activity_options: The timeouts and retry policies of model turns, tool calls
            and compactions (``Settings.activity_options``, every option set), which a
            task asks once, at its start, and keeps for its whole life.
        models: The models this worker runs and its endpoints (``worker_models``); a
            turn of any other fails its task with ``ModelNotAllowed``. None: any model.
        max_depth: The deepest tree a task this worker starts may have below it
            (``Settings.max_depth``), which the task records and keeps.
        prices: What models cost (``pricing.price_table``); None: the built-in prices.
    """

    def __init__(
        self,
        store: BlobStore,
        *,
        workspace_root: Path,
        tools: ToolRegistry | None = None,
        default_model: str | None = None,
        sandbox: str = "auto",
        tool_env: list[str] | None = None,
        tool_limits: ToolLimits | None = None,
        hidden_paths: list[Path] | None = None,
        read_paths: list[Path] | None = None,
        telemetry: ActivityTelemetry | None = None,
        model_idle_timeout: float | None = DEFAULT_MODEL_IDLE_TIMEOUT,
        model_turn_timeout: float | None = None,
        script_files: bool = False,
        tool_user: tuple[int, int] | None = None,
        protected_paths: tuple[str, ...] = PROTECTED_PATHS,
        context_window: int | None = None,
        compact_at: float = COMPACT_AT,
        prompt_cache: bool = True,
        tool_images: bool = True,
        prompt_cache_key: str = "auto",
        notify: bool = False,
        rate_limited: frozenset[str] = frozenset(),
        transcript_cache_bytes: int = TRANSCRIPT_CACHE_BYTES,
        overlay_dir: Path | None = None,
        activity_options: ActivityOptions = DEFAULT_ACTIVITY_OPTIONS,
        models: ModelAllowlist | None = None,
        max_depth: int = DEFAULT_WORKER_DEPTH,
        prices: PriceTable | None = None,
    ) -> None:
        self.store = store
        self.transcript = Transcript(store, transcript_cache_bytes)
        self.workspace_root = workspace_root.resolve()
        self.tools = tools if tools is not None else ToolRegistry()
        if any(t.forked for t in self.tools):
            prestart_fork_server()
        self.default_model = default_model
        self.sandbox = sandbox
        self.sandbox_state = sandbox_state(sandbox)
        log_limit_mechanisms(log)
        self.tool_env = list(tool_env or [])
        self.tool_limits = tool_limits or DEFAULT_LIMITS
        self.hidden_paths = tuple(p.resolve() for p in hidden_paths or [])
        self.read_paths = tuple(p.resolve() for p in read_paths or [])
        self.telemetry = telemetry or ActivityTelemetry.off()
        self.model_idle_timeout = model_idle_timeout
        self.model_turn_timeout = model_turn_timeout
        self.script_files = script_files
        self.tool_user = tool_user
        log_tool_user(self.workspace_root, tool_user)
        self.protected_paths = protected_paths
        self.context_window_tokens = context_window
        self.compact_at = compact_at
        self.prompt_cache = prompt_cache
        self.tool_images = tool_images
        self.prompt_cache_key = prompt_cache_key
        self.notify = notify
        self.rate_limited = rate_limited
        self.overlay_dir = overlay_dir
        self.activity_options = activity_options.with_defaults()
        self.models = models
        self.max_depth = max_depth
        self.prices = prices or price_table()
        if overlay_dir is not None:
            # What a worker that died mid-call left on this host: never applied.
            sweep_at_start(overlay_dir)
        if self.sandbox_state == "bwrap":
            # Said once at start (and refused at every command) if it cannot work.
            run_as = sandbox_host.tool_user(self.workspace_root, self.tool_user)
            overlay_problem(overlay_dir_for(overlay_dir, run_as), run_as)

    # ------------------------------------------------------------------ options

    @activity.defn(name=ACTIVITY_OPTIONS_ACTIVITY)
    async def worker_activity_options(self) -> WorkerBounds:
        """This worker's activity options and depth, which the asking task records and keeps."""
        options = self.activity_options
        return WorkerBounds(
            model_turn=options.model_turn,
            tool_call=options.tool_call,
            compaction=options.compaction,
            max_depth=self.max_depth,
        )

    # ------------------------------------------------------------------ model turn

    @activity.defn(name=MODEL_TURN_ACTIVITY)
    @traced_model_turn
    async def model_turn(self, input: ModelTurnInput) -> ModelTurnResult:
        """Append the new messages, call the model once, append its answer."""
        try:
            return await self._model_turn(input)
        except (BlobError, PayloadEncryptionError) as err:
            raise blob_failure(err) from None  # the server keeps a last failure only while small
        except InvalidRequest as err:  # a model name the worker cannot resolve
            raise configuration_error(str(err), "InvalidRequest") from None
        except ApplicationError as err:
            if err.type == "ModelRequestError" and err.non_retryable:
                log_configuration_error(err.message)
            raise

    async def _model_turn(self, input: ModelTurnInput) -> ModelTurnResult:
        queue = self.provider_queue(input)
        if queue is not None:
            return ModelTurnResult(head=input.head or "", model_queue=queue)
        if may_be_stale(activity.info()) and await cancel_requested():
            raise ApplicationError(
                "the task was cancelled; not calling the model",
                type="TaskCancelled",
                non_retryable=True,
            )
        with self.workspace(input.workspace) as workspace:
            return await run_turn(self, input, workspace)

    def provider_queue(self, input: ModelTurnInput) -> str | None:
        """The queue to send the turn on to, or None to answer it here.

        A queue when this worker rate-limits the turn's provider on a queue of its own
        (``SUBAGENTS_MODEL_RATE_LIMITS``) and this is not that queue.
        """
        if not input.may_redirect or not self.rate_limited:
            return None
        try:
            provider = parse_model(input.model, default_model=self.default_model)[0]
        except InvalidRequest:
            return None  # the turn itself says what is wrong with the name
        here = activity.info().task_queue
        if provider not in self.rate_limited or here.endswith(model_queue("", provider)):
            return None
        return model_queue(here, provider)

    # ------------------------------------------------------------------ compaction

    @activity.defn(name=COMPACT_ACTIVITY)
    @traced_compaction
    async def compact_context(self, input: CompactInput) -> CompactResult:
        """Compact the conversation: notes for old tool results, then a summary."""
        try:
            return await compact(self, input)
        except (BlobError, PayloadEncryptionError) as err:
            raise blob_failure(err) from None  # the server keeps a last failure only while small

    def provider(self, model: str) -> tuple[ModelProvider, str, str]:
        """``resolve_provider`` with this worker's settings, for a model it allows.

        Raises:
            ApplicationError: ``ModelNotAllowed`` (non-retryable): not a model this
                worker runs.
        """
        refusal = None
        with contextlib.suppress(InvalidRequest):  # a malformed name: resolve says
            refusal = self.models.refusal(model) if self.models is not None else None
        if refusal is not None:
            raise ApplicationError(refusal, type="ModelNotAllowed", non_retryable=True)
        return resolve_provider(
            model,
            default_model=self.default_model,
            idle_timeout=self.model_idle_timeout,
            script_files=self.script_files,
            prompt_cache_key=self.prompt_cache_key,
            endpoints=self.models.endpoints if self.models is not None else None,
        )

    async def model_request(
        self, task_id: str, messages: list[Message], tools: list[ToolSpec], model: str
    ) -> ModelRequest:
        """The request for ``messages``: their context view, blob references expanded."""
        view = context_view(messages)
        system = "\n\n".join(m.content for m in view if m.role == "system")
        shown, dropped = within_image_budget([m for m in view if m.role != "system"])
        if not self.tool_images:  # the results' texts name the images
            shown = [m.model_copy(update={"images": []}) if m.images else m for m in shown]
            dropped = set()
        conversation = await self.transcript.expand(task_id, shown, images=True)
        for i in dropped:
            m = conversation[i]
            conversation[i] = m.model_copy(update={"content": f"{m.content}\n{IMAGES_LEFT_OUT}"})
        return ModelRequest(
            model=model,
            system=system,
            messages=conversation,
            tools=tools,
            cache_key=task_id,
            prompt_cache=self.prompt_cache,
        )

    async def complete(
        self,
        provider: ModelProvider,
        request: ModelRequest,
        on_text: TextSink | None = None,
        on_thinking: TextSink | None = None,
    ) -> ModelResponse:
        """One model call, abandoned (retryably) after ``model_turn_timeout`` seconds."""
        # The provider's idle watchdog catches a stalled stream; this limit catches
        # one that trickles on forever.
        return await within(
            provider.complete(request, on_text=on_text, on_thinking=on_thinking),
            self.model_turn_timeout,
            lambda: model_unavailable(
                f"the model turn took longer than {self.model_turn_timeout:g}s "
                "(SUBAGENTS_MODEL_TURN_TIMEOUT); abandoned it (will retry)"
            ),
        )

    def heartbeating(self) -> contextlib.AbstractAsyncContextManager[None]:
        """Heartbeat in the background meanwhile (a cancel reaches a long call)."""
        return heartbeating()

    def context_window(self, context: ContextInput, model: str) -> int | None:
        """The window a task's turns must fit (None: unknown).

        The agent's, else the worker's, else the table's; never more than a
        provider's refusal named.
        """
        configured = context.window or self.context_window_tokens or known_window(model)
        windows = [w for w in (configured, context.learned) if w]
        return min(windows) if windows else None

    def tools_offered(self, input: ModelTurnInput, offered: list[str]) -> dict[str, Any]:
        """The turn result's tool fields, or ``same_tools`` if the workflow has them."""
        names = [*offered, *(t.name for t in input.extra_tools)]
        if has_schema(input):
            names.append(FINAL_ANSWER_TOOL)
        read_only = [t for t in offered if self.read_only(t)]
        protected = list(self.protected_paths)
        digest = tools_digest(names, read_only, self.sandbox_state, protected, self.notify)
        if input.known_tools == digest:
            return {"same_tools": True}
        return {
            "offered_tools": names,
            "read_only_tools": read_only,
            "sandbox": self.sandbox_state,
            "protected_paths": protected,
            "notify": self.notify,
        }

    def offered_tools(self, input: ModelTurnInput) -> list[str]:
        """The tools the agent may use on this worker; refuses tools the worker lacks.

        ``mcp__<server>`` in the agent's tools stands for all of that server's tools.
        """
        available = self.tools.names
        listed = None if input.tools is None else expand_tool_names(input.tools, available)
        if input.tools is not None and listed is not None:
            missing = [t for t in listed if t not in available]
            missing += [
                t for t in input.tools if is_mcp(t) and not any(covers(t, a) for a in available)
            ]
            if missing:
                raise ApplicationError(
                    f"agent {input.agent_name!r} allows tools this worker does not have: "
                    f"{', '.join(dict.fromkeys(missing))}; this worker has: "
                    f"{', '.join(available)}. Register them on the worker (MCP tools: its "
                    "MCP servers, .mcp.json or --mcp-config) or remove them from the agent",
                    type="InvalidRequest",
                    non_retryable=True,
                )
        allowed = set(available if listed is None else listed)
        allowed = {t for t in allowed if not any(covers(d, t) for d in input.disallowed_tools)}
        if has_schema(input):
            allowed.discard(FINAL_ANSWER_TOOL)  # the answer's tool takes the name
        if input.read_only:
            # A plan agent reads; an MCP tool it lists runs where its rules allow it.
            allowed = {
                n
                for n in allowed
                if self.read_only(n)
                or (listed is not None and is_mcp(n) and matches(n, input.plan_tools))
            }
        return [t for t in available if t in allowed]

    def with_path(self, call: ToolCall, workspace: HeldWorkspace) -> ToolCall:
        """The call with its path resolved for the rules (tools that take a ``path``).

        Also the path as written, where a symlink makes it differ: the rules judge both,
        and an approver is shown where it leads.
        """
        raw = self.path_argument(call)
        if raw is None:
            return call
        resolved = rule_path(workspace.path, raw, workspace.fd)
        written = written_path(workspace.path, raw)
        return call.model_copy(
            update={"path": resolved, "written_path": written if written != resolved else None}
        )

    def with_hint(self, call: ToolCall) -> ToolCall:
        """The call with what an MCP tool's server says of it, for a person deciding."""
        hint = getattr(self.tools.get(call.name), "read_only_hint", None)
        if not isinstance(hint, bool):
            return call
        return call.model_copy(update={"read_only_hint": hint})

    def path_argument(self, call: ToolCall) -> str | None:
        """The call's ``path`` argument (or its default), for tools that take one."""
        tool = self.tools.get(call.name)
        if tool is None:
            return None
        spec = tool.parameters.get("properties", {}).get("path")
        if not isinstance(spec, dict):
            return None
        raw = call.arguments.get("path", spec.get("default"))
        return raw if isinstance(raw, str) else None

    def read_only(self, name: str) -> bool:
        """Whether a tool never changes anything (built-in read-only or marked so)."""
        if name in READ_ONLY_TOOLS:
            return True
        tool = self.tools.get(name)
        return tool is not None and tool.read_only

    # ------------------------------------------------------------------ tool call

    @activity.defn(name=RUN_TOOL_ACTIVITY)
    @traced_tool
    async def run_tool(self, input: ToolCallInput) -> ToolCallResult:
        """Run one tool call; large output goes to the blob store, a preview comes back."""
        try:
            return await run_call(self, input)
        except (BlobError, PayloadEncryptionError) as err:
            raise blob_failure(err) from None  # the server keeps a last failure only while small

    @activity.defn(name=SETTLE_CHANGES_ACTIVITY)
    async def settle_changes(self, input: SettleInput) -> ToolCallResult:
        """Apply a call's held changes a person approved, or drop them (see ``settle``)."""
        try:
            return await settle_held(self, input)
        except (BlobError, PayloadEncryptionError) as err:
            raise blob_failure(err) from None

    async def read_in_turn(self, input: ToolCallInput, live: LiveText) -> ToolCallResult:
        """Run a read within the model turn that asked for it (see ``run_reads``)."""
        return await traced_tool(functools.partial(run_once, live=live))(self, input)

    # ------------------------------------------------------------------ helpers

    async def with_stored_results(self, input: ModelTurnInput) -> list[Message]:
        """The turn's new messages, with results passed by record name read back in full."""
        if not input.result_records:
            return input.new_messages
        out = []
        for message in input.new_messages:
            record = input.result_records.get(message.tool_call_id or "")
            if record is None:
                out.append(message)
                continue
            data = await self.store.get_record(input.task_id, record)
            if data is None:
                raise BlobNotFound(
                    f"the result of tool call {message.tool_call_id} (record {record}) is "
                    f"not in the blob store {self.store.url}; every worker of a deployment "
                    "must use the same store (SUBAGENTS_BLOB_URL)",
                    store=self.store.url,
                    key=record,
                )
            out.append(ToolCallResult.model_validate_json(data).to_message())
        return out

    def tool_context(
        self, input: ToolCallInput, workspace: HeldWorkspace, call: ToolCall | None = None
    ) -> ToolContext:
        """What a call's tool may see and use: the agent's choices within the worker's.

        ``workspace`` is the step's, held. ``call`` (with its arguments in full) binds
        the file tools to the path it was judged on; ``input.rules`` judge what else
        they open.
        """
        env = self.tool_environment(input.env)
        decided = None
        raw = self.path_argument(call) if call is not None else None
        if call is not None and call.path is not None and raw is not None:
            decided = DecidedPath(path=raw, resolved=call.path)
        return ToolContext(
            workspace=workspace.path,
            task_id=input.task_id,
            sandbox=self.sandbox,
            on_output=heartbeat,
            network=input.network,
            env=env,
            limits=input.limits.capped_by(self.tool_limits),
            protected=() if input.write_protected_paths else self.protected_paths,
            hidden=self.hidden_paths,
            read_paths=self.read_paths,
            run_as=tool_user(workspace.fd, self.tool_user),
            decided=decided,
            rules=input.rules,
            workspace_fd=workspace.fd,
            overlay_dir=self.overlay_dir,
            hold=input.protected_changes,
            handing_back=activity.is_worker_shutdown,
            tree_id=input.tree_id,
        )

    def tool_environment(self, names: list[str] | None) -> dict[str, str]:
        """What a tool's processes see of the worker's environment: an allowlist.

        ``BASE_ENV`` and the worker's ``SUBAGENTS_TOOL_ENV`` names (``names``: an agent's
        pick among those; None: all of them).
        """
        allowed = [*BASE_ENV, *(n for n in self.tool_env if names is None or n in names)]
        return {n: os.environ[n] for n in allowed if n in os.environ}

    def workspace(self, requested: str | None) -> HeldWorkspace:
        """The task's workspace for one step, checked race-free and held (``task_workspace``)."""
        return task_workspace(self.workspace_root, requested, self.protected_paths)

    @property
    def activities(self) -> list[Callable[..., Any]]:
        """The activity callables to register on a worker."""
        return [
            self.model_turn,
            self.run_tool,
            self.compact_context,
            self.settle_changes,
            own_registered_tasks,
            reserve_tree_task,
            report_tree_spend,
            self.worker_activity_options,
        ]
