"""``SubagentClient``: spawn, check, wait on, cancel and list subagent tasks.

Talks to Temporal only through ``temporalio.client``. Everything it reports comes
from Temporal itself (describe, memo, search attributes, history), so it answers while
no worker runs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Unpack

from temporalio.client import (
    Client,
)
from temporalio.service import RPCError, RPCStatusCode

from durable_subagents.agents import (
    PROTECTED_PATHS,
    AgentSpec,
    discover_agents,
    load_agents,
    resolve_agent,
)
from durable_subagents.client._decisions import DecisionMemory, send_decisions
from durable_subagents.client._followup import deliver_input
from durable_subagents.client._reads import TaskReads
from durable_subagents.client._spawning import start_task
from durable_subagents.client._task_state import (
    list_task_infos,
    settled,
    settling,
)
from durable_subagents.client._waiting import check_timeout, decided_already, wait_until_settled
from durable_subagents.connection._connect import connect_temporal
from durable_subagents.errors import (
    InvalidRequest,
    ModelNotAllowed,
)
from durable_subagents.spawn import (
    MAX_PROMPT_BYTES,
    SpawnKwargs,
    SpawnOptions,
    build_task_input,
    check_budget_usd,
    refuse_protected_workspace,
    takes_spawn_options,
)
from durable_subagents.storage._blobstore import BlobStore
from durable_subagents.storage._transcript import Transcript
from durable_subagents.types import TaskInfo, TaskStatus

if TYPE_CHECKING:
    from durable_subagents.config import Settings
    from durable_subagents.providers._allowlist import ModelAllowlist


def client_models(settings: Settings) -> ModelAllowlist | None:
    """The models the workers run, if the settings say (``SUBAGENTS_MODELS``)."""
    if not settings.models.strip():
        return None
    # Imported here: the providers' package is not every command's to import.
    from durable_subagents.providers._allowlist import ModelAllowlist, parse_model_patterns

    return ModelAllowlist(
        parse_model_patterns(settings.models), settings.model, settings.allow_scripted
    )


class SubagentClient(TaskReads):
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
        models: ModelAllowlist | None = None,
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
        self.models = models
        """The models the workers run, when this client was told (``SUBAGENTS_MODELS``):
        a spawn of another fails here; None: the worker is the one to refuse it."""

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
                ``.opencode/agent[s]``) to load. Default: the settings' ``agents_dir``
                (``SUBAGENTS_AGENTS_DIR``), else the project root above the current
                directory, the first directory with ``.git`` (else the current
                directory itself; see ``find_project_root``); a ``.claude`` below the
                root is never read. A broken agent file is skipped with a warning;
                only a spawn of its agent fails.
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
            agents_dir = agents_dir if agents_dir is not None else settings.agents_dir
            agents = load_agents(agents_dir) if agents_dir is not None else discover_agents()
        client = await connect_temporal(settings)
        return cls(
            client,
            task_queue=task_queue or settings.task_queue,
            blob_store=settings.blob_store(),
            agents=agents,
            default_model=settings.model,
            protected_paths=settings.protected_path_list,
            models=client_models(settings),
        )

    # ------------------------------------------------------------------ spawn

    @takes_spawn_options
    async def spawn_task(
        self,
        agent: str,
        prompt: str,
        description: str = "",
        parent_id: str | None = None,
        **options: Unpack[SpawnKwargs],
    ) -> str:
        """Start a subagent task and return its id at once.

        Keyword options may only narrow what the agent allows. Spawning needs no
        running worker: the task waits in Temporal until one polls.

        Example:
            >>> task_id = await client.spawn_task(
            ...     "explore", "Where is the retry logic?", max_turns=10, tools=["grep"]
            ... )

        Args:
            agent: Agent name (``explore``, ``plan``, ``research``, ``general``, or a
                custom one passed to ``connect``).
            prompt: The task for the subagent.
            description: A short label (shown in the Web UI and in ``ls``).
            parent_id: The spawning task's id, if any. When it names a running task,
                the new task registers with it (by signal) and is cancelled when that
                task is cancelled, fails or times out; any other id is recorded only.
            **options: The spawn options, as keywords: ``model``, ``max_turns``,
                ``tools``, ``permission_mode``, ``time_limit``, ``task_id``... Each is
                described in ``SpawnKwargs``, which declares them for every door.

        Returns:
            The task id (also the workflow id: ``subagent-<agent>-<hex>``).

        Raises:
            InvalidRequest: unknown agent or option, empty or oversized prompt, bad
                limits, an option that would widen the agent, a workspace spelled
                through a protected path (``.git``, ``.vscode``...), or an output
                schema that is not a JSON Schema for an object, is over 32 KiB, or has a
                ``$ref`` that does not resolve within it, or a ``notify_url`` that is
                not an http(s) URL (or holds credentials).
            ModelNotAllowed: the model is not one ``SUBAGENTS_MODELS`` (as this client
                was given it) allows, or is the scripted model where it is not enabled.
            WrongTaskState: the parent task is being cancelled.
        """
        spec = resolve_agent(agent, self.agents)
        checked = SpawnOptions(**options)
        refuse_protected_workspace(checked.workspace, self.protected_paths)
        task_input = build_task_input(
            spec,
            prompt,
            checked,
            description=description,
            parent_id=parent_id,
            default_model=self.default_model,
            max_prompt_bytes=self.max_prompt_bytes,
            created_at=datetime.now(UTC),
            agents=self.agents,
        )
        if self.models is not None and task_input.model != "default":
            refusal = self.models.refusal(task_input.model)
            if refusal is not None:
                raise ModelNotAllowed(refusal)
        return await start_task(
            self.temporal,
            self.task_queue,
            spec.name,
            task_input,
            task_id=checked.task_id,
            parent_id=parent_id,
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
        check_timeout(timeout)
        if after_pause is None:
            after_pause = self.decisions.skip(task_id)
        info = await self._info(task_id)
        if wait and after_pause is None and await decided_already(self.temporal, info):
            after_pause = info.pause_id
        if not wait or settled(info, after_pause):
            return info.public()
        try:
            info = await asyncio.wait_for(
                wait_until_settled(self.temporal, self._info, task_id, info, after_pause), timeout
            )
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
        check_timeout(timeout)
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
        check_timeout(timeout)
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
                info.settling = await settling(self.temporal, task_id)
        return info

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
        return await list_task_infos(self.temporal, parent_id, status, limit=limit)

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
        return await send_decisions(
            self.temporal,
            self.decisions,
            task_id,
            call_ids,
            approved=True,
            reason=None,
            pause_id=pause_id,
            shown=shown,
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
        return await send_decisions(
            self.temporal,
            self.decisions,
            task_id,
            call_ids,
            approved=False,
            reason=reason,
            pause_id=pause_id,
            shown=shown,
        )

    async def raise_budget(
        self, task_id: str, budget_usd: float, *, pause_id: str | None = None
    ) -> TaskInfo:
        """Raise the budget of a tree that has spent it: the tree goes on.

        The tree's top task (spawned with ``budget_usd``) pauses on a ``raise_budget``
        call once the tree has spent its budget; this approves that call with the new
        budget. ``reject(task_id)`` instead stops the tree (``stop_reason="budget"``);
        ``approve(task_id)`` raises it by the budget it was spawned with.

        Args:
            task_id: The tree's top task.
            budget_usd: The tree's new budget in USD (in all, not more): above what it
                has spent (``TaskInfo.spent_usd``), at most 1,000,000.
            pause_id: The pause you read, as for ``approve``.

        Raises:
            TaskNotFound: no task has this id.
            InvalidRequest: the budget is not a number above what the tree spent.
            WrongTaskState: the task does not wait for its budget to be raised.
        """
        check_budget_usd(budget_usd)
        info = await self.check_task(task_id)
        if info.spent_usd is not None and budget_usd <= info.spent_usd:
            raise InvalidRequest(
                f"budget_usd {budget_usd:g} does not pass what the tree has spent, "
                f"{info.spent_usd:.6f} USD: give a larger budget, or reject to stop the tree"
            )
        return await send_decisions(
            self.temporal,
            self.decisions,
            task_id,
            None,
            approved=True,
            reason=None,
            pause_id=pause_id,
            budget_usd=float(budget_usd),
        )

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
        return await deliver_input(
            self.temporal, self.task_queue, task_id, text, max_prompt_bytes=self.max_prompt_bytes
        )
