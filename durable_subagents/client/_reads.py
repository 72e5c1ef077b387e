"""What a client reads of a task: its transcript, its whole answer, its stream.

Part of ``SubagentClient`` (its base): reads only, from Temporal and the blob store.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any

from temporalio.client import Client

from durable_subagents.client._decisions import full_arguments
from durable_subagents.client._events import history_events
from durable_subagents.client._stream_watch import (
    StreamUnreadable,
    check_after,
    stream_events,
    stream_page,
)
from durable_subagents.client._task_state import InternalInfo, describe_task
from durable_subagents.client._tree_usage import add_running_subagents
from durable_subagents.errors import InvalidRequest, WrongTaskState
from durable_subagents.storage._blobstore import BlobError
from durable_subagents.storage._transcript import Transcript
from durable_subagents.types import Message, TaskEvent, TaskInfo

__all__ = ["TaskReads"]


class TaskReads:
    """The reading half of ``SubagentClient``."""

    temporal: Client
    transcript: Transcript | None

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
        store = self.transcript.store if self.transcript is not None else None
        return await full_arguments(info, self.get_transcript, store.get if store else None)

    async def watch(
        self, task_id: str, *, tree: bool = False, after: int | None = None
    ) -> AsyncGenerator[TaskEvent, None]:
        """Events of a task as they happen, until it closes.

        Each model turn's answer streams as ``text`` (and ``thinking``) pieces while the
        model writes, then a ``turn`` event; then tool calls and their results' first
        lines, input and decisions received, compactions, status changes and, last,
        ``closed``. Every event has an ``offset``, increasing strictly: a watcher that
        drops resumes with ``after=`` the last offset it got, and gets exactly the
        events after it. A finished task's events read the same way (a worker replays
        it to answer).

        Args:
            task_id: The task to watch.
            tree: Also the events of every task below it (``TaskEvent.task_id`` and
                ``depth`` say whose), those that finished before the watch included.
            after: Yield only the events after this offset. An offset past the end
                waits for events to reach it.

        Raises:
            TaskNotFound: no task has this id.
            InvalidRequest: ``after`` is negative or not an integer.

        Example:
            >>> async for event in client.watch(task_id, after=41):
            ...     print(event.offset, event.kind, event.text or event.summary)
        """
        start = check_after(after)
        info = await self._info(task_id)
        yielded = False
        try:
            async for event in stream_events(self.temporal, task_id, tree=tree, after=start):
                yielded = True
                yield event
            return
        except StreamUnreadable:
            if start is not None or tree or yielded:
                raise InvalidRequest(
                    f"task {task_id!r} has closed and no worker answers for its stream: "
                    "start a worker (subagents worker) to read it by offset"
                ) from None

        async def resolve(ref: str) -> str | None:
            if self.transcript is None:
                return None
            try:
                return (await self.transcript.store.get(task_id, ref)).decode("utf-8", "replace")
            except BlobError:
                return None

        # No worker: the closed task's events as its history shows them (no offsets).
        async for event in history_events(self.temporal, task_id, info.run_id, resolve):
            yield event

    async def events_since(
        self, task_id: str, after: int | None = None, *, tree: bool = False, limit: int = 100
    ) -> list[TaskEvent]:
        """The events a task's stream holds after an offset, now, without waiting.

        For polling progress cheaply: pass the last event's ``offset`` back as ``after``.
        Consecutive text pieces of a turn come as one event (the offset of the last).
        A running task whose worker does not answer in time gives what was read (maybe
        nothing): the next call brings the rest, from the same ``after``.

        Args:
            task_id: The task.
            after: Only events after this offset (None: from the start).
            tree: Also the events of every task below it.
            limit: At most this many events.

        Raises:
            TaskNotFound: no task has this id.
            InvalidRequest: ``after`` is negative or not an integer, no worker polls the
                task's queue, or none answers for a closed task's stream.
        """
        start = check_after(after)
        try:
            return await stream_page(self.temporal, task_id, tree=tree, after=start, limit=limit)
        except StreamUnreadable as err:
            raise InvalidRequest(
                f"task {task_id!r}: no worker answers for its stream ({err}); start a worker"
            ) from None

    async def _info(self, task_id: str) -> InternalInfo:
        info = await describe_task(self.temporal, task_id)
        await add_running_subagents(self.temporal, info)
        return info
