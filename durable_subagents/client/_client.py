"""``SubagentClient``: spawn, check, wait on, cancel and list subagent tasks.

Talks to Temporal only through ``temporalio.client``. Everything it reports comes
from Temporal itself (describe, memo, search attributes, history), so it answers while
no worker runs.
"""

from __future__ import annotations

import asyncio
import math
import uuid
from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel
from temporalio.api.common.v1 import WorkflowExecution as RunRef
from temporalio.api.enums.v1 import EventType, PendingActivityState
from temporalio.api.failure.v1 import Failure
from temporalio.api.history.v1 import HistoryEvent
from temporalio.api.workflowservice.v1 import GetWorkflowExecutionHistoryReverseRequest
from temporalio.client import (
    Client,
    WorkflowExecution,
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowHistoryEventFilterType,
)
from temporalio.common import (
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from durable_subagents import _search_attributes as sa
from durable_subagents._notify_url import check_notify_url
from durable_subagents._payloads import DECIDE_SIGNAL, RUN_TOOL_ACTIVITY, WORKFLOW, Decisions
from durable_subagents._spawn_options import SpawnOptions, refuse_protected_workspace
from durable_subagents._spawn_request import (
    MAX_PROMPT_BYTES,
    build_task_input,
    fairness,
    refuse_unencodable,
    start_metadata,
    static_details,
    static_summary,
    validate_task_id,
)
from durable_subagents._temporal_config import connect_temporal
from durable_subagents.agents import (
    PROTECTED_PATHS,
    AgentSpec,
    PermissionRule,
    discover_agents,
    load_agents,
    resolve_agent,
)
from durable_subagents.client._events import CLOSE_STATUS, history_events
from durable_subagents.client._followup import DecisionMemory, decisions_for, start_follow_up
from durable_subagents.client._task_state import (
    InternalInfo,
    decoded,
    failure_message,
    info_from,
    quote,
    settled,
)
from durable_subagents.errors import (
    InvalidRequest,
    PayloadEncryptionError,
    SubagentError,
    TaskNotFound,
    UnknownCallId,
    WrongTaskState,
)
from durable_subagents.storage._blobstore import BlobError, BlobStore
from durable_subagents.storage._transcript import Transcript
from durable_subagents.types import Message, TaskEvent, TaskInfo, TaskResult, TaskStatus
from durable_subagents.workflows import SubagentWorkflow

if TYPE_CHECKING:
    from durable_subagents.config import Settings

MAX_REASON_BYTES = 4096
"""Longest rejection reason (it is the rejected call's result the model reads)."""

_CLOSE_EVENTS = {*CLOSE_STATUS, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW}


class SubagentClient:
    """The parent's handle on subagent tasks.

    Example:
        >>> client = await SubagentClient.connect("localhost:7233")
        >>> task_id = await client.spawn_task("explore", "Where is the retry logic?")
        >>> info = await client.check_task(task_id, wait=True, timeout=300)
        >>> print(info.status, info.result)
    """

    def __init__(
        self,
        client: Client,
        *,
        task_queue: str = "subagents",
        blob_store: BlobStore | None = None,
        agents: Mapping[str, AgentSpec] | None = None,
        default_model: str | None = None,
        max_prompt_bytes: int = MAX_PROMPT_BYTES,
        protected_paths: Sequence[str] = PROTECTED_PATHS,
    ) -> None:
        self.temporal = client
        self.task_queue = task_queue
        self.transcript = Transcript(blob_store) if blob_store is not None else None
        self.decisions = DecisionMemory()
        """The decisions this client sent (internal: its waits skip a decided pause)."""
        self.agents = dict(agents or {})
        self.default_model = default_model
        self.max_prompt_bytes = max_prompt_bytes
        self.protected_paths = tuple(protected_paths)
        """Checked against a spawn's workspace as spelled (the worker checks again)."""

    @classmethod
    async def connect(
        cls,
        address: str | None = None,
        namespace: str | None = None,
        task_queue: str | None = None,
        *,
        settings: Settings | None = None,
        agents: Mapping[str, AgentSpec] | None = None,
        agents_dir: str | Path | None = None,
        profile: str | None = None,
    ) -> SubagentClient:
        """Connect to Temporal, configured as Temporal's own clients are.

        The connection follows ``temporalio.envconfig``: ``TEMPORAL_ADDRESS``,
        ``TEMPORAL_NAMESPACE``, ``TEMPORAL_API_KEY`` (which turns TLS on), the
        ``TEMPORAL_TLS*`` certificates, ``TEMPORAL_GRPC_META_*``, and a profile of
        Temporal's TOML file, with the ``temporal`` CLI's precedence.

        Args:
            address: ``host:port``; it wins over the environment and the profile.
                Default ``TEMPORAL_ADDRESS``, the profile's, or ``localhost:7233``.
            namespace: Likewise; default ``TEMPORAL_NAMESPACE``, the profile's, or
                ``default``.
            task_queue: Default ``SUBAGENTS_TASK_QUEUE`` or ``subagents``.
            settings: Explicit settings instead of the environment.
            agents: Extra agents (by name) besides the built-ins; when given, no agent
                files are read.
            agents_dir: A project directory whose agent files (``.claude/agents``,
                ``.opencode/agent[s]``) to load; default: the project the current
                directory is in (see ``discover_agents``). A broken agent file is
                skipped with a warning; only a spawn of its agent fails.
            profile: The profile of Temporal's configuration file (when ``settings``
                is not given); default ``TEMPORAL_PROFILE``, else ``default``.

        Raises:
            TemporalUnavailable: nothing answers on the address.
            TemporalAccessDenied: the server refused the TLS handshake or the credentials
                (the message names the setting).
            TemporalConfigError: the profile, the configuration file, or a certificate
                or key it names cannot be used.
        """
        # The settings (pydantic-settings) are loaded by a client that reads them.
        from durable_subagents.config import Settings

        given: dict[str, Any] = {"address": address, "namespace": namespace}
        if settings is None:
            chosen = {**given, "profile": profile}
            settings = Settings(**{k: v for k, v in chosen.items() if v is not None})
        elif address or namespace:
            settings = settings.model_copy(update={k: v for k, v in given.items() if v})
        if agents is None:
            agents = load_agents(agents_dir) if agents_dir is not None else discover_agents()
        client = await connect_temporal(settings)
        return cls(
            client,
            task_queue=task_queue or settings.task_queue,
            blob_store=settings.blob_store(),
            agents=agents,
            default_model=settings.model,
            protected_paths=settings.protected_path_list,
        )

    # ------------------------------------------------------------------ spawn

    async def spawn_task(
        self,
        agent: str,
        prompt: str,
        description: str = "",
        parent_id: str | None = None,
        model: str | None = None,
        max_turns: int | None = None,
        metadata: dict[str, Any] | None = None,
        *,
        tools: Sequence[str] | None = None,
        disallowed_tools: Sequence[str] | None = None,
        permission_mode: str | None = None,
        permissions: Sequence[PermissionRule | dict[str, str]] | None = None,
        approval_timeout: float | None = None,
        time_limit: float | None = None,
        workspace: str | None = None,
        task_id: str | None = None,
        network: bool | None = None,
        token_budget: int | None = None,
        reasoning_effort: str | None = None,
        output_schema: Mapping[str, Any] | type[BaseModel] | None = None,
        notify_url: str | None = None,
    ) -> str:
        """Start a subagent task and return its id at once.

        Keyword options may only narrow what the agent allows. Spawning needs no
        running worker: the task waits in Temporal until one polls.

        Args:
            agent: Agent name (``explore``, ``plan``, ``research``, ``general``, or a
                custom one passed to ``connect``).
            prompt: The task for the subagent.
            description: A short label (shown in the Web UI and in ``ls``).
            parent_id: The spawning task's id, if any. When it names a running task,
                the new task registers with it (by signal) and is cancelled when that
                task is cancelled, fails or times out; any other id is recorded only.
            model: ``provider:model``; default: the agent's, then ``SUBAGENTS_MODEL``,
                then the worker's default.
            max_turns: Turn limit (default: the agent's).
            metadata: Free-form JSON data kept with the task.
            tools: Restrict the agent to these of its tools.
            disallowed_tools: Tools to take away.
            permission_mode: A mode at most as permissive as the agent's.
            permissions: Extra rules; they can deny, never allow more.
            approval_timeout: Seconds a pause may wait for a decision.
            time_limit: Seconds the task may run in all; then it stops as ``timed_out``.
            workspace: A directory inside the worker's workspace root, neither one of
                the protected paths nor inside one.
            task_id: Your own id; spawning again with it returns the same task.
            network: ``False`` takes the network from an agent that has it (its tool
                processes get loopback only); ``True`` only if the agent allows it.
            token_budget: Input plus output tokens the task and the subagents it
                spawns may use in all; then it stops (``stop_reason="token_budget"``).
            reasoning_effort: ``low``, ``medium`` or ``high``: how hard a reasoning model
                thinks; at most the agent's (any, if the agent sets none).
            output_schema: A JSON Schema for an object, or a pydantic model class: the
                answer must match it. ``TaskInfo.output`` is then the validated answer
                and ``result`` its JSON text; an answer that does not match goes back
                to the model with what is wrong, and the third such answer fails the
                task.
            notify_url: Where the task POSTs its events (a pause for a decision, its
                end); default: the workers' ``SUBAGENTS_NOTIFY_URL``. Workers post only
                to URLs their allowlist holds (``SUBAGENTS_NOTIFY_ALLOW``).

        Returns:
            The task id (also the workflow id: ``subagent-<agent>-<hex>``).

        Raises:
            InvalidRequest: unknown agent, empty or oversized prompt, bad limits, an
                option that would widen the agent, a workspace spelled through a
                protected path (``.git``, ``.vscode``...), or an output schema that is
                not a JSON Schema for an object, is over 32 KiB, or has a ``$ref`` that
                does not resolve within it, or a ``notify_url`` that is not an http(s)
                URL (or holds credentials).
            WrongTaskState: the parent task is being cancelled.
        """
        spec = resolve_agent(agent, self.agents)
        options = SpawnOptions(
            model=model,
            max_turns=max_turns,
            metadata=metadata,
            tools=tools,
            disallowed_tools=disallowed_tools,
            permission_mode=permission_mode,
            permissions=permissions,
            approval_timeout=approval_timeout,
            time_limit=time_limit,
            workspace=workspace,
            network=network,
            token_budget=token_budget,
            reasoning_effort=reasoning_effort,
            output_schema=output_schema,
        )
        refuse_protected_workspace(options.workspace, self.protected_paths)
        task_input = build_task_input(
            spec,
            prompt,
            options,
            description=description,
            parent_id=parent_id,
            default_model=self.default_model,
            max_prompt_bytes=self.max_prompt_bytes,
        )
        if notify_url is not None:
            task_input.notify_url = check_notify_url(notify_url)
        if task_id is not None:
            validate_task_id(task_id)
        workflow_id = task_id or f"subagent-{spec.name}-{uuid.uuid4().hex[:12]}"
        registers = parent_id is not None and await self._live_parent(parent_id)
        memo, attributes = start_metadata(task_input)
        try:
            await self.temporal.start_workflow(
                SubagentWorkflow.run,
                task_input,
                id=workflow_id,
                task_queue=self.task_queue,
                memo=memo,
                search_attributes=attributes,
                static_summary=static_summary(task_input),
                static_details=static_details(task_input, workflow_id),
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                priority=fairness(task_input, workflow_id),
            )
        except WorkflowAlreadyStartedError:
            if task_id is None:
                raise
        if registers:
            assert parent_id is not None
            await self._register_with_parent(parent_id, workflow_id)
        return workflow_id

    async def _live_parent(self, parent_id: str) -> bool:
        """Whether ``parent_id`` is a task the new one must register with.

        A parent outside this namespace (an orchestrator's own id) is recorded only; a
        finished parent too. A parent being cancelled takes no new tasks.
        """
        try:
            parent = await self._info(parent_id)
        except TaskNotFound:
            return False
        if parent.status in (TaskStatus.CANCELLING, TaskStatus.CANCELLED):
            raise WrongTaskState(
                f"parent task {parent_id!r} is {parent.status.value}; its tasks are being "
                "cancelled, so it takes no new ones",
                parent.status.value,
            )
        return not parent.status.terminal

    async def _register_with_parent(self, parent_id: str, task_id: str) -> None:
        """Signal the parent so its cancellation cancels this task (durably)."""
        try:
            await self.temporal.get_workflow_handle(parent_id).signal(
                SubagentWorkflow.register_child, task_id
            )
            return
        except RPCError as err:
            if err.status != RPCStatusCode.NOT_FOUND:
                raise
        parent = await self._info(parent_id)  # it closed between the check and the signal
        if parent.status in (TaskStatus.CANCELLED, TaskStatus.FAILED, TaskStatus.TIMED_OUT):
            await self.temporal.get_workflow_handle(task_id).cancel()
            raise WrongTaskState(
                f"parent task {parent_id!r} ended {parent.status.value} while task "
                f"{task_id!r} was starting; the new task was cancelled with it",
                parent.status.value,
            )

    # ------------------------------------------------------------------ check / wait

    async def check_task(
        self,
        task_id: str,
        wait: bool = False,
        timeout: float = 300.0,
        after_pause: str | None = None,
    ) -> TaskInfo:
        """The task's current state; with ``wait``, block until it needs the caller.

        With ``wait=True`` this returns as soon as the task is terminal or paused
        (with a ``pause_id`` other than ``after_pause``), or at ``timeout`` with the
        current state. It waits by long-polling the run's history, so it costs a few
        calls per minute and works while no worker runs. A pause whose every call this
        client decided (``approve``/``reject``) is skipped without ``after_pause``.

        Raises:
            TaskNotFound: no task has this id.
        """
        _check_timeout(timeout)
        if after_pause is None:
            after_pause = self.decisions.skip(task_id)
        info = await self._info(task_id)
        if wait and after_pause is None and await self._decided_already(info):
            after_pause = info.pause_id
        if not wait or settled(info, after_pause):
            return info.public()
        try:
            info = await asyncio.wait_for(self._wait(task_id, info, after_pause), timeout)
        except TimeoutError:
            info = await self._info(task_id)
        return info.public()

    async def wait_tasks(
        self,
        task_ids: Sequence[str],
        mode: Literal["all", "any"] = "all",
        timeout: float = 300.0,
        after_pause: Mapping[str, str | None] | None = None,
    ) -> list[TaskInfo]:
        """Wait for several tasks: all of them, or the first that needs the caller.

        A task needs the caller when it finished or paused, as in ``check_task(wait=True)``.
        Each wait long-polls its task's history (no sleep loop). ``mode="all"`` returns
        when every task does (or at ``timeout``), ``"any"`` when the first one does.

        Args:
            task_ids: The tasks.
            mode: ``"all"`` or ``"any"``.
            timeout: Seconds to wait at most; then the current states are returned.
            after_pause: Per task id, a pause the caller already decided (skipped, as
                ``check_task``'s ``after_pause``).

        Returns:
            The current ``TaskInfo`` of every task, in the order given.

        Raises:
            InvalidRequest: no ids, or an unknown ``mode``.
            TaskNotFound: a task id is unknown.
        """
        _check_timeout(timeout)
        if mode not in ("all", "any"):
            raise InvalidRequest(f"mode must be 'all' or 'any', not {mode!r}")
        task_ids = list(dict.fromkeys([task_ids] if isinstance(task_ids, str) else task_ids))
        if not task_ids:
            raise InvalidRequest("wait_tasks needs at least one task id")
        skip = dict(after_pause or {})
        waits = [
            asyncio.ensure_future(self.check_task(t, True, timeout, skip.get(t))) for t in task_ids
        ]
        try:
            when = asyncio.FIRST_COMPLETED if mode == "any" else asyncio.ALL_COMPLETED
            await asyncio.wait(waits, return_when=when)
        finally:
            for w in waits:
                w.cancel()
        finished = [w.done() and not w.cancelled() for w in waits]
        for w, done in zip(waits, finished, strict=True):
            if done and w.exception() is not None:  # an unknown id raises, not "done"
                raise w.exception()  # type: ignore[misc]

        async def current(wait: asyncio.Future[TaskInfo], done: bool, task_id: str) -> TaskInfo:
            return wait.result() if done else (await self._info(task_id)).public()

        return list(await asyncio.gather(*map(current, waits, finished, task_ids)))

    async def _wait(
        self, task_id: str, info: InternalInfo, after_pause: str | None
    ) -> InternalInfo:
        while True:
            run_id = info.run_id
            seen = info.history_length
            handle = self.temporal.get_workflow_handle(task_id, run_id=run_id)
            # A task with no 'ask' rule can only settle by closing: long-poll for that
            # alone instead of waking on every memo write.
            only_close = not info.may_pause
            events = handle.fetch_history_events(
                wait_new_event=True,
                skip_archival=True,
                event_filter_type=WorkflowHistoryEventFilterType.CLOSE_EVENT
                if only_close
                else WorkflowHistoryEventFilterType.ALL_EVENT,
            )
            async for event in events:
                if event.event_id <= seen or not await self._may_settle(event):
                    continue
                info = await self._info(task_id)
                if settled(info, after_pause) or info.run_id != run_id:
                    break
            else:
                info = await self._info(task_id)
            if settled(info, after_pause):
                return info

    async def _decided_already(self, info: InternalInfo) -> bool:
        """Whether a paused task received decisions on every pending call, from anyone.

        Such a pause needs no caller: the task goes on once a worker reads them. (A
        client that decided remembers it; this finds decisions sent by another
        process, such as ``subagents approve`` before ``subagents check --wait``.)
        """
        if info.status != TaskStatus.PAUSED or not info.pause_id:
            return False
        pending = {p.call_id: p.arguments_hash for p in info.pending_approvals}
        handle = self.temporal.get_workflow_handle(info.id, run_id=info.run_id)
        converter = self.temporal.data_converter
        async for event in handle.fetch_history_events(skip_archival=True):
            if event.event_type != EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
                continue
            attrs = event.workflow_execution_signaled_event_attributes
            if attrs.signal_name != DECIDE_SIGNAL or not attrs.input.payloads:
                continue
            try:
                [sent] = await converter.decode(attrs.input.payloads[:1], [Decisions])
            except Exception:  # a malformed signal decides nothing
                continue
            if sent.pause_id != info.pause_id:
                continue
            for d in sent.decisions:
                # one bound to other arguments was ignored by the task: it decided nothing
                if d.call_id in pending and d.arguments_hash == pending[d.call_id]:
                    del pending[d.call_id]
        return not pending

    async def _may_settle(self, event: HistoryEvent) -> bool:
        """Whether an event can make a wait return (so not every memo write costs a call)."""
        if event.event_type in _CLOSE_EVENTS:
            return True
        if event.event_type != EventType.EVENT_TYPE_WORKFLOW_PROPERTIES_MODIFIED:
            return False
        fields = event.workflow_properties_modified_event_attributes.upserted_memo.fields
        if "status" not in fields and "pause_id" not in fields:
            return False
        if "status" in fields:
            status = TaskStatus(await decoded(self.temporal.data_converter, fields["status"], str))
            return status.terminal or status == TaskStatus.PAUSED
        return True

    # ------------------------------------------------------------------ cancel

    async def cancel_task(self, task_id: str, wait: bool = True, timeout: float = 30.0) -> TaskInfo:
        """Cancel a task: its running model call and tool processes are stopped.

        The request is durable: with no worker running, the task is cancelled when one
        returns. Cancelling a finished task changes nothing.

        Returns:
            The task's state: ``cancelled`` when the cancel completed within
            ``timeout`` (with ``wait``), else ``cancelling`` with ``settling`` naming
            what it still waits for (activities being stopped, child tasks, or a
            worker to process the cancel).

        Raises:
            TaskNotFound: no task has this id.
        """
        _check_timeout(timeout)
        info: TaskInfo = await self._info(task_id)
        if info.status.terminal:
            return info.public()  # type: ignore[attr-defined]
        try:
            await self.temporal.get_workflow_handle(task_id).cancel()
        except RPCError as err:
            if err.status != RPCStatusCode.NOT_FOUND:
                raise
            return (await self._info(task_id)).public()  # it closed just now
        if wait:
            deadline = asyncio.get_running_loop().time() + timeout
            while not info.status.terminal:
                left = deadline - asyncio.get_running_loop().time()
                if left <= 0:
                    break
                info = await self.check_task(task_id, wait=True, timeout=left)
        else:
            info = (await self._info(task_id)).public()
        if not info.status.terminal:
            info.status = TaskStatus.CANCELLING
            if wait:
                info.settling = await self._settling(task_id)
        return info

    async def _settling(self, task_id: str) -> list[str]:
        """What a cancelling task still waits for: its open activities and children."""
        desc = await self.temporal.get_workflow_handle(task_id).describe()
        raw = desc.raw_description
        out = []
        for activity in raw.pending_activities:
            state = PendingActivityState.Name(activity.state).removeprefix(
                "PENDING_ACTIVITY_STATE_"
            )
            line = f"activity {activity.activity_type.name} ({state.lower()}"
            line += f", attempt {activity.attempt})"
            if activity.last_worker_identity:
                line += f" on {activity.last_worker_identity}"
            out.append(line)
        out += [f"child task {c.workflow_id}" for c in raw.pending_children]
        if not out:
            out.append("the workflow itself: no worker has processed the cancel yet")
        return out

    # ------------------------------------------------------------------ list / transcript

    async def list_tasks(
        self,
        parent_id: str | None = None,
        status: TaskStatus | str | None = None,
        *,
        limit: int | None = None,
    ) -> list[TaskInfo]:
        """Tasks in the namespace, newest first; one entry per task id (its latest run).

        Args:
            parent_id: Only tasks spawned with this parent id.
            status: Only tasks in this status.
            limit: At most this many (the newest); only theirs are decoded.
        """
        if limit is not None and limit < 1:
            raise InvalidRequest(f"limit must be at least 1, got {limit}")
        query = f"WorkflowType = '{WORKFLOW}'"
        if parent_id is not None:
            query += f" AND {sa.PARENT.name} = {quote(parent_id)}"
        try:
            wanted = TaskStatus(status) if status is not None else None
        except ValueError:
            raise InvalidRequest(
                f"unknown status {status!r}; use one of {', '.join(s.value for s in TaskStatus)}"
            ) from None
        latest: dict[str, Any] = {}
        async for execution in self.temporal.list_workflows(query):
            seen = latest.get(execution.id)
            if seen is None or execution.start_time > seen.start_time:
                latest[execution.id] = execution
        infos = []
        for execution in sorted(latest.values(), key=lambda e: e.start_time, reverse=True):
            try:
                memo = await execution.memo()
            except PayloadEncryptionError as err:
                memo = _visible_memo(execution, err)
            info = info_from(execution.id, execution.run_id, execution.status, memo)
            info.finished_at = execution.close_time
            if wanted is None or info.status == wanted:
                infos.append(info.public())
                if len(infos) == limit:
                    break
        return infos

    async def approve(
        self,
        task_id: str,
        call_ids: Sequence[str] | None = None,
        *,
        pause_id: str | None = None,
        shown: Collection[tuple[str, str, str]] | None = None,
    ) -> TaskInfo:
        """Approve tool calls of the task's current pause.

        Args:
            task_id: The paused task.
            call_ids: The calls to approve; ``None`` means every call of the current
                pause (never those of a later pause: the decision names the pause and
                each call's argument hash).
            pause_id: The pause you read (``TaskInfo.pause_id``): if the task paused
                again since, under the same call ids perhaps, nothing is approved and
                ``WrongTaskState`` says so.
            shown: ``(call id, tool name, argument hash)`` of each call the approver
                read: only those are decided. ``call_ids=None`` then means every call
                read that is still pending (calls added to the pause since stay
                pending), and a call named that was not read, or was read with other
                arguments, is refused with ``UnknownCallId``.

        Returns:
            The task's state when the decision was sent (``check_task(wait=True,
            after_pause=info.pause_id)`` waits for what comes next).

        Raises:
            TaskNotFound: no task has this id.
            InvalidRequest: the task is not paused, or a call id is not pending.
            WrongTaskState: the task is not paused, or not on ``pause_id``.
            UnknownCallId: with ``shown``, a call named was not read as it is now.
        """
        return await self._decide(
            task_id, call_ids, approved=True, reason=None, pause_id=pause_id, shown=shown
        )

    async def reject(
        self,
        task_id: str,
        call_ids: Sequence[str] | None = None,
        reason: str | None = None,
        *,
        pause_id: str | None = None,
        shown: Collection[tuple[str, str, str]] | None = None,
    ) -> TaskInfo:
        """Reject tool calls of the current pause; the model gets ``reason`` as the result.

        ``pause_id`` and ``shown`` work as for ``approve``.

        Raises:
            TaskNotFound: no task has this id.
            InvalidRequest: the task is not paused, or a call id is not pending.
            WrongTaskState: the task is not paused, or not on ``pause_id``.
            UnknownCallId: with ``shown``, a call named was not read as it is now.
        """
        return await self._decide(
            task_id, call_ids, approved=False, reason=reason, pause_id=pause_id, shown=shown
        )

    async def _decide(
        self,
        task_id: str,
        call_ids: Sequence[str] | None,
        *,
        approved: bool,
        reason: str | None,
        shown: Collection[tuple[str, str, str]] | None = None,
        pause_id: str | None = None,
    ) -> TaskInfo:
        """Send decisions on calls of the current pause.

        With ``shown`` (``(call id, tool, argument hash)`` of the calls the decider has
        read), only those are decided: ``None`` means every one of them still pending,
        and a call named that is not among them is refused. A pause can end and another
        ask again under the same call id, or a second child pause beside the first,
        between the read and the decision.
        """
        if isinstance(reason, str):
            refuse_unencodable("reason", reason)
        if reason is not None and (
            not isinstance(reason, str) or len(reason.encode()) > MAX_REASON_BYTES
        ):
            raise InvalidRequest(
                f"reason must be text of at most {MAX_REASON_BYTES} bytes; the model reads "
                "it as the rejected call's result, so keep it short"
            )
        info = await self._info(task_id)
        if info.status != TaskStatus.PAUSED or not info.pause_id:
            raise WrongTaskState(
                f"task {task_id!r} is {info.status.value}, not paused; there is nothing to "
                "decide (check_task shows pending approvals while it is paused)",
                info.status.value,
            )
        if pause_id is not None and info.pause_id != pause_id:
            raise WrongTaskState(
                f"task {task_id!r} is on pause {info.pause_id}, not {pause_id}: it paused "
                "again since you read it, so nothing was decided. Read the new pause "
                "(check_task) and decide that one",
                info.status.value,
            )
        if shown is not None:
            call_ids = _shown_only(info, call_ids, shown)
        decisions = decisions_for(info, call_ids, approved=approved, reason=reason)
        if self.decisions.repeats(info, decisions):
            return info.public()  # sent already: the task reads it when it resumes
        try:
            await self.temporal.get_workflow_handle(task_id).signal(
                SubagentWorkflow.decide, decisions
            )
        except RPCError as err:
            if err.status != RPCStatusCode.NOT_FOUND:
                raise
            now = await self._info(task_id)
            raise WrongTaskState(
                f"task {task_id!r} is {now.status.value}: it ended before the decision arrived",
                now.status.value,
            ) from None
        self.decisions.record(info, decisions)
        return info.public()

    async def send_input(self, task_id: str, text: str) -> TaskInfo:
        """Send steering or follow-up input to a task.

        A running or paused task takes it in at its next turn (or before it would
        finish). A completed task continues the same conversation in a new run under
        the same id, with a fresh turn budget.

        Raises:
            TaskNotFound: no task has this id.
            InvalidRequest: the text is empty or too large, or the task was cancelled,
                failed or timed out (spawn a new task instead).
        """
        if not isinstance(text, str) or not text.strip():
            raise InvalidRequest("input is empty; send the text the subagent should read")
        refuse_unencodable("input", text)
        if len(text.encode()) > self.max_prompt_bytes:
            raise InvalidRequest(
                f"input is over the {self.max_prompt_bytes}-byte limit; write it to a file "
                "in the workspace and tell the subagent to read it"
            )
        info = await self._info(task_id)
        if info.status == TaskStatus.CANCELLING:
            raise WrongTaskState(
                f"task {task_id!r} is being cancelled; it will not read more input. Spawn "
                "a new task instead",
                info.status.value,
            )
        if not info.status.terminal:
            # The latest run: one that continued-as-new since the describe takes it too.
            handle = self.temporal.get_workflow_handle(task_id)
            try:
                await handle.signal(SubagentWorkflow.send_input, text)
                return info.public()
            except RPCError as err:
                if err.status != RPCStatusCode.NOT_FOUND:
                    raise
            info = await self._info(task_id)  # it closed just now
            if not info.status.terminal:
                raise InvalidRequest(f"task {task_id!r} changed while sending; send again")
        if info.status != TaskStatus.COMPLETED:
            raise WrongTaskState(
                f"task {task_id!r} is {info.status.value}; only a completed task can be "
                "continued. Spawn a new task instead",
                info.status.value,
            )
        await start_follow_up(self.temporal, self.task_queue, task_id, info, text)
        return (await self._info(task_id)).public()

    async def get_transcript(self, task_id: str) -> list[Message]:
        """The task's conversation so far, with large contents loaded in full.

        Every message is there whole, also after the conversation was compacted to fit
        the model's context window: each compaction point is a message of its own
        (``Message.compaction`` set, role ``system``) whose content is the summary the
        model was sent from there on in place of the earlier turns.

        Raises:
            TaskNotFound: no task has this id.
            InvalidRequest: this client has no access to the blob store.
        """
        if self.transcript is None:
            raise InvalidRequest("this client has no blob store; connect with settings")
        info = await self._info(task_id)
        head = info.head
        messages = await self.transcript.load(task_id, head)
        return await self.transcript.expand(task_id, messages)

    async def get_result(self, task_id: str) -> str:
        """A finished task's final answer, whole, however long.

        ``check_task`` carries answers up to 64 KiB whole and needs no blob store; a
        longer one (``TaskInfo.result_truncated``) is read here from the store.

        Raises:
            TaskNotFound: no task has this id.
            WrongTaskState: the task has not finished.
            InvalidRequest: this client has no blob store.
            BlobNotFound, BlobStoreUnavailable: the store does not have the answer, or
                does not answer (the message names the store and the key).
        """
        info = await self._info(task_id)
        if not info.status.terminal:
            raise WrongTaskState(
                f"task {task_id!r} is {info.status.value}; it has no result yet. "
                "check_task(task_id, wait=True) waits for it",
                info.status.value,
            )
        if info.result_ref is None:
            return info.result or ""
        if self.transcript is None:
            raise InvalidRequest("this client has no blob store; connect with settings")
        data = await self.transcript.store.get(task_id, info.result_ref)
        return data.decode("utf-8", "replace")

    async def pending_arguments(self, info: TaskInfo) -> dict[str, dict[str, Any] | None]:
        """The full arguments of each pending call of a paused task, by call id.

        ``PendingApproval.arguments_preview`` is at most 200 characters: approve what
        you have read in full. The arguments come from the transcript (large ones
        expanded from the blob store); a child's call (``<child>/<pause>/<call>``) from
        the child's. None for a call whose transcript this client cannot read (no
        access to the workers' blob store).
        """
        transcripts: dict[str, list[Message] | None] = {}

        async def find(task_id: str, call_id: str) -> dict[str, Any] | None:
            if "/" in call_id:  # a child's call: <child task id>/<child pause id>/<call id>
                child, _, rest = call_id.partition("/")
                return await find(child, rest.partition("/")[2])
            if task_id not in transcripts:
                try:
                    transcripts[task_id] = await self.get_transcript(task_id)
                except (SubagentError, OSError, ValueError):
                    transcripts[task_id] = None
            for message in reversed(transcripts[task_id] or []):
                for call in message.tool_calls if message.role == "assistant" else []:
                    if call.id == call_id and not call.arguments_ref:
                        return call.arguments
            return None

        return {p.call_id: await find(info.id, p.call_id) for p in info.pending_approvals}

    async def watch(self, task_id: str) -> AsyncIterator[TaskEvent]:
        """Events of a task as they happen until it closes.

        Each model turn's answer streams as ``text`` events (new pieces, read from the
        turn's heartbeats while it runs, completed from its recorded result), then a
        ``turn`` event; then tool calls, input and decisions received, status changes
        and, last, ``closed``. A finished task's events replay the same way.

        Raises:
            TaskNotFound: no task has this id.
        """
        info = await self._info(task_id)

        async def resolve(ref: str) -> str | None:
            if self.transcript is None:
                return None
            try:
                return (await self.transcript.store.get(task_id, ref)).decode("utf-8", "replace")
            except BlobError:
                return None

        async for event in history_events(self.temporal, task_id, info.run_id, resolve):
            yield event

    # ------------------------------------------------------------------ internals

    async def _info(self, task_id: str) -> InternalInfo:
        handle = self.temporal.get_workflow_handle(task_id)
        try:
            desc = await handle.describe()
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                raise TaskNotFound(
                    f"no task {task_id!r} in namespace {self.temporal.namespace!r}; "
                    "list_tasks() lists the tasks"
                ) from None
            raise
        if desc.workflow_type != WORKFLOW:
            raise TaskNotFound(
                f"{task_id!r} is a {desc.workflow_type} workflow, not a subagent task"
            )
        memo = await desc.memo()
        info = info_from(task_id, desc.run_id, desc.status, memo)
        info.history_length = desc.history_length
        info.finished_at = desc.close_time
        extended = desc.raw_description.workflow_extended_info
        if desc.status == WorkflowExecutionStatus.RUNNING and extended.cancel_requested:
            info.status = TaskStatus.CANCELLING
        if desc.status == WorkflowExecutionStatus.RUNNING:
            info.retrying = await self._retrying(desc)
            info.waiting = _waiting(desc)
        if desc.status == WorkflowExecutionStatus.COMPLETED:
            await self._fill_result(info, desc)
        elif desc.status == WorkflowExecutionStatus.FAILED and not info.error:
            info.error = await self._failure(task_id, desc.run_id)
        elif desc.status == WorkflowExecutionStatus.TERMINATED:
            info.stop_reason, info.error = "terminated", info.error or "terminated"
        elif desc.status == WorkflowExecutionStatus.TIMED_OUT:
            info.stop_reason = "execution_timeout"
            info.error = info.error or "the workflow's execution timeout was reached"
        return info

    async def _fill_result(self, info: InternalInfo, desc: WorkflowExecutionDescription) -> None:
        handle: WorkflowHandle[Any, TaskResult] = self.temporal.get_workflow_handle(
            desc.id, run_id=desc.run_id, result_type=TaskResult
        )
        result = await handle.result(follow_runs=False)
        info.status = result.status
        info.result = result.result
        info.stop_reason = result.stop_reason
        info.error = result.error
        info.turns = result.turns
        info.usage = result.usage
        info.tree_usage = result.tree_usage or info.tree_usage
        info.compactions = max(result.compactions, info.compactions)
        info.model = result.model
        info.head = result.head
        info.output = result.output
        # A longer answer stays in the store until asked for (get_result).
        info.result_ref = result.result_ref
        info.result_truncated = result.result_ref is not None

    async def _retrying(self, desc: WorkflowExecutionDescription) -> str | None:
        """What a running task's step is being retried after, if it is.

        A pending activity on its second attempt or later gives its last failure. A
        workflow task failing again and again (a worker that cannot decrypt the task, a
        bug) gives the failure its history recorded: the task is not stuck in silence.
        """
        converter = self.temporal.data_converter
        raw = desc.raw_description
        for pending in raw.pending_activities:
            if pending.attempt > 1 and pending.HasField("last_failure"):
                name = pending.activity_type.name.replace("_", " ")
                message = await failure_message(converter, pending.last_failure)
                return f"{name}, attempt {pending.attempt}: {message}"
        if raw.HasField("pending_workflow_task") and raw.pending_workflow_task.attempt > 1:
            attempt = raw.pending_workflow_task.attempt
            failure = await self._last_workflow_task_failure(desc.id, desc.run_id)
            message = await failure_message(converter, failure) if failure else "no failure shown"
            return f"workflow task, attempt {attempt}: {message}"
        return None

    async def _last_workflow_task_failure(self, task_id: str, run_id: str | None) -> Failure | None:
        """The newest workflow task failure in a run's history (read from its end)."""
        response = await self.temporal.workflow_service.get_workflow_execution_history_reverse(
            GetWorkflowExecutionHistoryReverseRequest(
                namespace=self.temporal.namespace,
                execution=RunRef(workflow_id=task_id, run_id=run_id or ""),
                maximum_page_size=50,
            )
        )
        for event in response.history.events:
            if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
                attrs = event.workflow_task_failed_event_attributes
                return attrs.failure if attrs.HasField("failure") else None
        return None

    async def _failure(self, task_id: str, run_id: str | None) -> str:
        handle = self.temporal.get_workflow_handle(task_id, run_id=run_id)
        try:
            await handle.result(follow_runs=False)
        except WorkflowFailureError as err:
            cause = err.cause
            return getattr(cause, "message", None) or str(cause)
        return "failed"


def _visible_memo(execution: WorkflowExecution, err: PayloadEncryptionError) -> dict[str, Any]:
    """What a task's plain search attributes say, for a memo this client cannot decrypt.

    One task under a key this client lacks (an old key dropped while its tasks are
    still kept, another team's key) must not hide the rest of the list.
    """
    attrs = execution.typed_search_attributes
    return {
        "status": attrs.get(sa.STATUS),
        "agent": attrs.get(sa.AGENT),
        "parent_id": attrs.get(sa.PARENT),
        "turns": attrs.get(sa.TURNS),
        "description": f"(encrypted with key {err.key_id}, which this client does not hold)",
    }


def _shown_only(
    info: InternalInfo, call_ids: Sequence[str] | None, shown: Collection[tuple[str, str, str]]
) -> list[str]:
    """The calls to decide among ``call_ids`` (None: all pending) that were shown as pending.

    Raises:
        UnknownCallId: a call named was not shown, or none of the pending calls was.
    """
    pending = {p.call_id: p for p in info.pending_approvals}
    named = list(pending) if call_ids is None else list(call_ids)
    unseen = [
        c
        for c in named
        if c in pending and (c, pending[c].tool_name, pending[c].arguments_hash) not in shown
    ]
    chosen = [c for c in named if c not in unseen]
    if unseen and (call_ids is not None or not chosen):
        raise UnknownCallId(
            f"call(s) {', '.join(unseen)} of pause {info.pause_id} were not shown to you, "
            "or have changed since: call check_task to read them, then decide"
        )
    return chosen


def _check_timeout(timeout: object) -> None:
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not math.isfinite(timeout)
        or timeout < 0
    ):
        raise InvalidRequest(f"timeout must be a finite number of seconds >= 0, got {timeout!r}")


WAITING_AFTER = 10.0
"""Seconds a model turn or tool call may wait for a worker before ``TaskInfo.waiting``
says so."""


def _waiting(desc: WorkflowExecutionDescription) -> str | None:
    """A step of a running task that no worker has started for ``WAITING_AFTER`` s."""
    now = datetime.now(UTC)
    for pending in desc.raw_description.pending_activities:
        if pending.state != PendingActivityState.PENDING_ACTIVITY_STATE_SCHEDULED:
            continue
        if not pending.HasField("scheduled_time"):
            continue
        waited = (now - pending.scheduled_time.ToDatetime(tzinfo=UTC)).total_seconds()
        if waited < WAITING_AFTER:  # a retry's next attempt lies in the future
            continue
        queue = pending.activity_options.task_queue.name or desc.task_queue
        what = "tool call" if pending.activity_type.name == RUN_TOOL_ACTIVITY else "model turn"
        return (
            f"a {what} has waited {waited:.0f} s for a worker on task queue {queue!r}: no "
            "worker polls it (start one: subagents worker), or all its slots are taken"
        )
    return None
