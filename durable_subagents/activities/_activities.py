"""The activities every subagent uses: one model turn, one tool call, and a compaction.

All I/O of a task happens here: the blob store (transcript and large outputs), the
model providers (API keys are read here, on the worker, and nowhere else) and the
tool processes.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import re
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from temporalio import activity
from temporalio.client import WorkflowExecutionStatus
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from durable_subagents import policy
from durable_subagents._blobstore import (
    BlobCorrupt,
    BlobError,
    BlobNotFound,
    BlobStore,
)
from durable_subagents._context import COMPACT_AT, Sizer, context_view, request_chars
from durable_subagents._live import LiveText
from durable_subagents._payloads import (
    COMPACT_ACTIVITY,
    MAX_CALLS_KEPT,
    MODEL_TURN_ACTIVITY,
    RUN_TOOL_ACTIVITY,
    CompactInput,
    CompactResult,
    ContextInput,
    ModelTurnInput,
    ModelTurnResult,
    ToolCallInput,
    ToolCallResult,
    tools_digest,
)
from durable_subagents._telemetry import (
    ActivityTelemetry,
    traced_compaction,
    traced_model_turn,
    traced_tool,
)
from durable_subagents._transcript import INLINE_LIMIT, RESULT_INLINE_LIMIT, Transcript
from durable_subagents.activities._compaction import compact
from durable_subagents.activities.providers import (
    ModelProvider,
    TextSink,
    model_unavailable,
    resolve_provider,
)
from durable_subagents.activities.providers._errors import CONTEXT_LENGTH_ERROR
from durable_subagents.activities.providers._stream import within
from durable_subagents.activities.providers._windows import known_window
from durable_subagents.activities.tools import (
    ToolContext,
    ToolError,
    ToolRegistry,
)
from durable_subagents.activities.tools._files import rule_path
from durable_subagents.activities.tools._limits import limit_mechanisms
from durable_subagents.activities.tools._sandbox import BASE_ENV, sandbox_state
from durable_subagents.agents import READ_ONLY_TOOLS
from durable_subagents.agents._spec import PROTECTED_PATHS, ToolLimits
from durable_subagents.config import DEFAULT_LIMITS, DEFAULT_MODEL_IDLE_TIMEOUT
from durable_subagents.errors import PayloadCorrupt, PayloadEncryptionError
from durable_subagents.types import (
    Message,
    ModelRequest,
    ModelResponse,
    ToolCall,
    ToolSpec,
)

log = logging.getLogger(__name__)

HEARTBEAT_EVERY = 1.0
"""Seconds between heartbeats of a running activity (cancellation arrives with them)."""


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
        context_window: The context window of every model, in tokens
            (``Settings.context_window``; an agent's own wins); None: the table of
            known models.
        compact_at: The share of the window a turn may fill before the conversation
            is compacted (``Settings.compact_at``).
        prompt_cache: Ask providers to cache prompt prefixes (``Settings.prompt_cache``).
        prompt_cache_key: OpenAI's ``prompt_cache_key``: ``auto``, ``on`` or ``off``
            (``Settings.prompt_cache_key``).
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
        context_window: int | None = None,
        compact_at: float = COMPACT_AT,
        prompt_cache: bool = True,
        prompt_cache_key: str = "auto",
    ) -> None:
        self.store = store
        self.transcript = Transcript(store)
        self.workspace_root = workspace_root.resolve()
        self.tools = tools if tools is not None else ToolRegistry()
        self.default_model = default_model
        self.sandbox = sandbox
        self.sandbox_state = sandbox_state(sandbox)
        mechanisms = limit_mechanisms()
        log.info("tool limits enforced by: %s", mechanisms)
        if mechanisms["processes"].startswith("not enforced"):
            log.warning(
                "the tool process limit is not enforced: this worker runs as root and "
                "cannot create a pids cgroup; run the worker as another user"
            )
        self.tool_env = list(tool_env or [])
        self.tool_limits = tool_limits or DEFAULT_LIMITS
        self.hidden_paths = tuple(p.resolve() for p in hidden_paths or [])
        self.read_paths = tuple(p.resolve() for p in read_paths or [])
        self.telemetry = telemetry or ActivityTelemetry.off()
        self.model_idle_timeout = model_idle_timeout
        self.model_turn_timeout = model_turn_timeout
        self.script_files = script_files
        self.context_window_tokens = context_window
        self.compact_at = compact_at
        self.prompt_cache = prompt_cache
        self.prompt_cache_key = prompt_cache_key

    # ------------------------------------------------------------------ model turn

    @activity.defn(name=MODEL_TURN_ACTIVITY)
    @traced_model_turn
    async def model_turn(self, input: ModelTurnInput) -> ModelTurnResult:
        """Append the new messages, call the model once, append its answer."""
        try:
            return await self._model_turn(input)
        except (BlobError, PayloadEncryptionError) as err:
            raise _blob_failure(err) from None  # the server keeps a last failure only while small

    async def _model_turn(self, input: ModelTurnInput) -> ModelTurnResult:
        task_id = input.task_id
        if _may_be_stale(activity.info()) and await _cancel_requested():
            raise ApplicationError(
                "the task was cancelled; not calling the model",
                type="TaskCancelled",
                non_retryable=True,
            )
        workspace = self.workspace(input.workspace)
        offered = self.offered_tools(input)
        new_messages = await self.with_stored_results(input)
        messages = await self.transcript.load(task_id, input.head) + new_messages
        provider, full_name, provider_model = self.provider(input.model)
        request = await self.model_request(
            task_id, messages, [*self.tools.specs(offered), *input.extra_tools], provider_model
        )
        request.max_tokens, request.turn = input.max_tokens, input.turn
        chars = request_chars(request.system, request.messages, request.tools)
        context = input.context
        if context is not None and not context.compacted:
            window = self.context_window(context, full_name)
            tokens = Sizer(context.tokens, context.chars).tokens_of(chars)
            if window and tokens > self.compact_at * window:
                return await self._compact_first(input, new_messages, offered, "threshold", chars)
        live = LiveText(input.turn, activity.info().attempt)
        try:
            async with _heartbeating(live):
                response = await self.complete(provider, request, live.add)
        except ApplicationError as err:
            if err.type == CONTEXT_LENGTH_ERROR and context is not None:
                activity.logger.info("turn %d: %s; compacting", input.turn, err.message)
                sizes = err.details[0] if err.details and isinstance(err.details[0], dict) else {}
                return await self._compact_first(
                    input, new_messages, offered, "context_length", chars, sizes
                )
            if err.type == "ModelUnavailable":
                activity.logger.warning(
                    "turn %d, attempt %d: %s", input.turn, activity.info().attempt, err.message
                )
            raise
        calls = [
            await self.transcript.store_call(task_id, self.with_path(c, workspace))
            for c in _well_formed(response.tool_calls[:MAX_CALLS_KEPT], input.turn)
        ]
        if len(response.tool_calls) > MAX_CALLS_KEPT:
            activity.logger.warning(
                "turn %d: kept %d of the model's %d tool calls",
                input.turn,
                MAX_CALLS_KEPT,
                len(response.tool_calls),
            )
        # A final answer comes back whole up to RESULT_INLINE_LIMIT: a parent reads it
        # from the task's result with no access to the blob store.
        limit = INLINE_LIMIT if calls else RESULT_INLINE_LIMIT
        text, text_ref = await self.transcript.store_text(task_id, response.text, limit)
        answer = Message(role="assistant", content=text, content_ref=text_ref, tool_calls=calls)
        return ModelTurnResult(
            # one node per turn: what was new, and the answer
            head=await self.transcript.append(task_id, input.head, [*new_messages, answer]),
            text=text,
            text_ref=text_ref,
            tool_calls=calls,
            usage=response.usage,
            stop_reason=response.stop_reason,
            model=full_name,
            chars=chars,
            **self.tools_offered(input, offered),
        )

    async def _compact_first(
        self,
        input: ModelTurnInput,
        new_messages: list[Message],
        offered: list[str],
        reason: str,
        chars: int,
        sizes: dict[str, Any] | None = None,
    ) -> ModelTurnResult:
        """The turn's answer when the context must be compacted before the model is asked.

        The turn's new messages are appended (the compaction reads them from the
        chain), and the workflow runs ``compact_context``, then this turn again.
        """
        head = input.head
        if new_messages:
            head = await self.transcript.append(input.task_id, head, new_messages)
        assert head is not None, "a turn without messages"
        _, full_name, _ = self.provider(input.model)
        tokens, maximum = (sizes or {}).get("tokens"), (sizes or {}).get("maximum")
        return ModelTurnResult(
            head=head,
            model=full_name,
            compact=reason,
            chars=chars,
            context_tokens=tokens if isinstance(tokens, int) and tokens > 0 else None,
            window=maximum if isinstance(maximum, int) and maximum > 0 else None,
            **self.tools_offered(input, offered),
        )

    # ------------------------------------------------------------------ compaction

    @activity.defn(name=COMPACT_ACTIVITY)
    @traced_compaction
    async def compact_context(self, input: CompactInput) -> CompactResult:
        """Compact the conversation: notes for old tool results, then a summary."""
        try:
            return await compact(self, input)
        except (BlobError, PayloadEncryptionError) as err:
            raise _blob_failure(err) from None  # the server keeps a last failure only while small

    def provider(self, model: str) -> tuple[ModelProvider, str, str]:
        """``resolve_provider`` with this worker's settings."""
        return resolve_provider(
            model,
            default_model=self.default_model,
            idle_timeout=self.model_idle_timeout,
            script_files=self.script_files,
            prompt_cache_key=self.prompt_cache_key,
        )

    async def model_request(
        self, task_id: str, messages: list[Message], tools: list[ToolSpec], model: str
    ) -> ModelRequest:
        """The request for ``messages``: their context view, blob references expanded."""
        view = context_view(messages)
        system = "\n\n".join(m.content for m in view if m.role == "system")
        conversation = await self.transcript.expand(
            task_id, [m for m in view if m.role != "system"]
        )
        return ModelRequest(
            model=model,
            system=system,
            messages=conversation,
            tools=tools,
            cache_key=task_id,
            prompt_cache=self.prompt_cache,
        )

    async def complete(
        self, provider: ModelProvider, request: ModelRequest, on_text: TextSink | None = None
    ) -> ModelResponse:
        """One model call, abandoned (retryably) after ``model_turn_timeout`` seconds."""
        # The provider's idle watchdog catches a stalled stream; this limit catches
        # one that trickles on forever.
        return await within(
            provider.complete(request, on_text=on_text),
            self.model_turn_timeout,
            lambda: model_unavailable(
                f"the model turn took longer than {self.model_turn_timeout:g}s "
                "(SUBAGENTS_MODEL_TURN_TIMEOUT); abandoned it (will retry)"
            ),
        )

    def heartbeating(self) -> contextlib.AbstractAsyncContextManager[None]:
        """Heartbeat in the background meanwhile (a cancel reaches a long call)."""
        return _heartbeating()

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
        read_only = [t for t in offered if self.read_only(t)]
        if input.known_tools == tools_digest(names, read_only, self.sandbox_state):
            return {"same_tools": True}
        return {"offered_tools": names, "read_only_tools": read_only, "sandbox": self.sandbox_state}

    def offered_tools(self, input: ModelTurnInput) -> list[str]:
        """The tools the agent may use on this worker; refuses tools the worker lacks."""
        available = self.tools.names
        if input.tools is not None:
            missing = [t for t in input.tools if t not in available]
            if missing:
                raise ApplicationError(
                    f"agent {input.agent_name!r} allows tools this worker does not have: "
                    f"{', '.join(missing)}; this worker has: {', '.join(available)}. Register "
                    "them on the worker or remove them from the agent",
                    type="InvalidRequest",
                    non_retryable=True,
                )
        allowed = set(available if input.tools is None else input.tools)
        allowed -= set(input.disallowed_tools)
        if input.read_only:
            allowed &= {n for n in available if self.read_only(n)}
        return [t for t in available if t in allowed]

    def with_path(self, call: ToolCall, workspace: Path) -> ToolCall:
        """The call with its path resolved for the rules (tools that take a ``path``)."""
        tool = self.tools.get(call.name)
        if tool is None:
            return call
        spec = tool.parameters.get("properties", {}).get("path")
        if not isinstance(spec, dict):
            return call
        raw = call.arguments.get("path", spec.get("default"))
        if not isinstance(raw, str):
            return call
        return call.model_copy(update={"path": rule_path(workspace, raw)})

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
            return await self._run_tool(input)
        except (BlobError, PayloadEncryptionError) as err:
            raise _blob_failure(err) from None  # the server keeps a last failure only while small

    async def _run_tool(self, input: ToolCallInput) -> ToolCallResult:
        info = activity.info()
        record = policy.result_record_name(input.call)
        if _may_be_stale(info) and await _cancel_requested():
            raise ApplicationError(
                "the task was cancelled; not running the tool call",
                type="TaskCancelled",
                non_retryable=True,
            )
        if info.attempt > 1:
            # An earlier attempt ran the call but its result never reached the server
            # (the worker died, or the server was down): answer with that result instead
            # of running the command again.
            done = await self.store.get_record(input.task_id, record)
            if done is not None:
                activity.logger.info("call %s ran already; returning its result", input.call.id)
                return ToolCallResult.model_validate_json(done)
        call = await self.transcript.full_call(input.task_id, input.call)
        tool = self.tools.get(call.name)
        if tool is None:
            output, is_error = f"unknown tool {call.name!r}", True
        else:
            ctx = self.tool_context(input)
            async with _heartbeating():
                try:
                    output, is_error = await tool.run(ctx, call.arguments), False
                except ToolError as err:
                    output, is_error = str(err), True
                except Exception as err:
                    # A tool's own bug: the model hears of it; the worker log has the trace.
                    activity.logger.exception("tool %s raised", call.name)
                    output = f"{call.name} failed: {type(err).__name__}: {err}"
                    is_error = True
        content, ref = await self.transcript.store_text(input.task_id, output)
        result = ToolCallResult(
            call_id=call.id,
            tool_name=call.name,
            content=content,
            content_ref=ref,
            is_error=is_error,
            size=len(output),
        )
        await self.store.put_record(input.task_id, record, result.model_dump_json().encode())
        return result

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

    def tool_context(self, input: ToolCallInput) -> ToolContext:
        """What a call's tool may see and use: the agent's choices within the worker's."""
        names = [*BASE_ENV, *(n for n in self.tool_env if input.env is None or n in input.env)]
        env = {n: os.environ[n] for n in names if n in os.environ}
        return ToolContext(
            workspace=self.workspace(input.workspace),
            task_id=input.task_id,
            sandbox=self.sandbox,
            on_output=_heartbeat,
            network=input.network,
            env=env,
            limits=input.limits.capped_by(self.tool_limits),
            protected=() if input.write_protected_paths else PROTECTED_PATHS,
            hidden=self.hidden_paths,
            read_paths=self.read_paths,
        )

    def workspace(self, requested: str | None) -> Path:
        """The task's workspace: the worker's root or a directory inside it."""
        root = self.workspace_root
        if not requested:
            return root
        path = Path(requested)
        path = (path if path.is_absolute() else root / path).resolve()
        if not path.is_relative_to(root):
            raise _workspace_error(
                f"workspace {requested!r} is outside this worker's workspace root {root}; "
                "spawn with a directory inside it, or start the worker with --workspace"
            )
        if not path.is_dir():
            raise _workspace_error(
                f"workspace {requested!r} is not a directory under {root}; create it, or "
                "spawn with an existing one"
            )
        return path

    @property
    def activities(self) -> list[Callable[..., Any]]:
        """The activity callables to register on a worker."""
        return [self.model_turn, self.run_tool, self.compact_context]


_CALL_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
MAX_ARGUMENT_DEPTH = 32
"""Deeper tool arguments go back to the model as an error (no schema needs more)."""


def _depth(value: Any, limit: int) -> int:
    """Nesting depth of JSON-like data, counting no further than ``limit + 1``."""
    depth, level = 0, [value]
    while level and depth <= limit:
        depth += 1
        nxt: list[Any] = []
        for item in level:
            if isinstance(item, dict):
                nxt.extend(item.values())
            elif isinstance(item, list):
                nxt.extend(item)
        level = nxt
    return depth if not level else limit + 1


def _well_formed(calls: list[ToolCall], turn: int) -> list[ToolCall]:
    """Calls every later step can carry: safe unique ids, bounded argument depth.

    A provider's call id becomes part of a pause's call id (``child/pause/call``), so
    an id with a ``/`` or odd characters could make a pause impossible to decide; such
    ids are replaced consistently (the transcript keeps the new one, for both the call
    and its result), and never to an id another call of the turn has: calls sharing an
    id would share a verdict, and one approval. Arguments nested deeper than any schema
    needs would fail to serialize further on; they become ``_raw``, which the workflow
    answers with a tool error, so the model hears of it instead of the turn being
    retried.
    """
    out: list[ToolCall] = []
    seen: set[str] = set()
    for index, call in enumerate(calls):
        update: dict[str, Any] = {}
        if not _CALL_ID.match(call.id) or call.id in seen:
            digest = hashlib.sha256(call.id.encode(errors="replace")).hexdigest()[:8]
            new_id, n = f"call_{turn}_{index}_{digest}", 0
            while new_id in seen:  # the model may have sent that id itself
                n += 1
                new_id = f"call_{turn}_{index}_{digest}_{n}"
            update["id"] = new_id
        if _depth(call.arguments, MAX_ARGUMENT_DEPTH) > MAX_ARGUMENT_DEPTH:
            update["arguments"] = {"_raw": f"arguments nested over {MAX_ARGUMENT_DEPTH} levels"}
        fixed = call.model_copy(update=update) if update else call
        seen.add(fixed.id)
        out.append(fixed)
    return out


def _workspace_error(message: str) -> ApplicationError:
    """A spawner's mistake, not the worker's: one log line, and the task fails with it."""
    info = activity.info()
    log.warning("task %s: %s", info.workflow_id, message)
    return ApplicationError(
        message,
        type="WorkspaceError",
        non_retryable=True,
        category=ApplicationErrorCategory.BENIGN,  # no traceback: it says it all
    )


MISSING_BLOB_ATTEMPTS = 3
"""Attempts of an activity that finds a blob missing before the task fails (a shared
network filesystem may show a new file late; S3 never does)."""


def _blob_failure(err: BlobError | PayloadEncryptionError) -> ApplicationError:
    """The activity's failure for a blob that cannot be read or written.

    A corrupt blob fails the task at once; a missing one after ``MISSING_BLOB_ATTEMPTS``
    attempts; an unreachable store is retried like any outage (the message, naming the
    store and the key, is the activity's last failure meanwhile), and so is a blob sealed
    with a key this worker lacks (another worker may hold it; the message names it).
    """
    attempt = activity.info().attempt
    if isinstance(err, PayloadEncryptionError):
        log.warning("task %s, attempt %d: %s", activity.info().workflow_id, attempt, err)
        return ApplicationError(
            str(err),
            {"key_id": err.key_id},
            type=type(err).__name__,
            non_retryable=isinstance(err, PayloadCorrupt),
            category=ApplicationErrorCategory.BENIGN,
        )
    if isinstance(err, BlobCorrupt):
        kind, final = "BlobCorrupt", True
    elif isinstance(err, BlobNotFound):
        kind, final = "BlobNotFound", attempt >= MISSING_BLOB_ATTEMPTS
    else:
        kind, final = "BlobStoreUnavailable", False
    log.warning("task %s, attempt %d: %s", activity.info().workflow_id, attempt, err)
    return ApplicationError(
        str(err),
        {"store": err.store, "key": err.key},
        type=kind,
        non_retryable=final,
        category=ApplicationErrorCategory.BENIGN,  # the message says it all
    )


def _heartbeat(*details: Any) -> None:
    with contextlib.suppress(RuntimeError):
        if not activity.info().is_local:  # a local activity's workflow task beats for it
            activity.heartbeat(*details)


LIVE_EVERY = 0.25
"""Seconds between looks for new live text (the worker sends at most one heartbeat a
second and keeps the latest details for the next)."""


@contextlib.asynccontextmanager
async def _heartbeating(live: LiveText | None = None) -> AsyncIterator[None]:
    """Heartbeat in the background so a stalled call still notices cancellation.

    With ``live``, every heartbeat carries the model's text so far (see ``_live``).
    """

    async def beat() -> None:
        # Sleep first: a call that ends within a second costs no heartbeat round trip.
        await asyncio.sleep(HEARTBEAT_EVERY)
        since = HEARTBEAT_EVERY
        while True:
            if live is not None and (live.changed or since >= HEARTBEAT_EVERY):
                _heartbeat(live.details())
                since = 0.0
            elif live is None:
                _heartbeat()
                since = 0.0
            step = LIVE_EVERY if live is not None else HEARTBEAT_EVERY
            await asyncio.sleep(step)
            since += step

    task = asyncio.create_task(beat())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


STALE_AFTER = timedelta(seconds=2)
"""An attempt that waited this long to start may belong to a task cancelled meanwhile."""


def _may_be_stale(info: activity.Info) -> bool:
    """Whether to ask the server for a cancel before any side effect.

    A retried attempt, or one that waited in the queue (every worker was down), can
    start on a worker before the workflow has seen a cancel request. A fresh attempt
    that started at once costs nothing extra.
    """
    if info.attempt > 1:
        return True
    scheduled = info.current_attempt_scheduled_time
    return datetime.now(UTC) - scheduled > STALE_AFTER


async def _cancel_requested() -> bool:
    """Whether the activity's task was asked to cancel, or has closed already.

    The server retries activities by itself: a retry can start on a new worker before
    the workflow has processed a cancel request, so a retried attempt checks first.
    """
    info = activity.info()
    if not info.workflow_id:
        return False
    handle = activity.client().get_workflow_handle(info.workflow_id, run_id=info.workflow_run_id)
    desc = await handle.describe()
    if desc.status != WorkflowExecutionStatus.RUNNING:
        return True
    return bool(desc.raw_description.workflow_extended_info.cancel_requested)
