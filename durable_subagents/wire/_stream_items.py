"""What a task's event stream holds: its items, their topics, and how a child forwards them.

Each task hosts a Workflow Stream (``temporalio.contrib.workflow_streams``): an
offset-addressed log in the workflow, read by ``watch`` through the stream's poll
Update (long-poll, while the run is open) and Query (a closed run). An item is a
``StreamEvent`` (JSON) under a **topic** that says whose event it is:

- ``""``: the task's own event;
- ``"child"``, ``"child/grandchild"``: an event of a task below it, forwarded up by
  that task's parent (``FORWARD_SIGNAL``). So a task's stream holds its whole
  subtree's events, in the order they reached it, and a child that finished before a
  watcher came is still in its parent's stream.

Task ids never hold ``/`` (``spawn._options.TASK_ID``). Shared by the workflow, the
model-turn activity and the client: pure, no I/O.

Compatibility rule: recorded histories (as ``_payloads``): fields are only added, with
defaults; names never change.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from durable_subagents.types import TaskStatus, Usage

__all__ = [
    "CARRY_BYTES",
    "DIRECT_SIGNAL",
    "FORWARD_SIGNAL",
    "MAX_DEPTH",
    "MAX_FORWARD_BYTES",
    "RETAIN_BYTES",
    "RETAIN_ITEMS",
    "STREAM_BOUNDS_QUERY",
    "ForwardedItem",
    "StreamCarry",
    "StreamDirect",
    "StreamEvent",
    "StreamForward",
    "child_topic",
    "topic_task",
]

FORWARD_SIGNAL = "stream_forward"
"""A child sends its stream's new items to its parent's stream (``StreamForward``)."""
DIRECT_SIGNAL = "stream_direct"
"""A child's model turn sends its live pieces to its parent's stream (``StreamDirect``)."""
STREAM_BOUNDS_QUERY = "stream_bounds"
"""The offsets a stream retains: ``[first, end)`` (a watcher asking for less is told)."""

RETAIN_BYTES = 256 * 1024
"""Bytes of items a stream keeps in the workflow; older items are truncated."""
RETAIN_ITEMS = 4096
"""Items a stream keeps in the workflow; older items are truncated."""
CARRY_BYTES = 64 * 1024
"""Bytes of the latest items a continue-as-new carries to the next run."""
MAX_FORWARD_BYTES = 256 * 1024
"""Bytes of items one forward signal carries (more go in the next)."""
MAX_DEPTH = 8
"""Levels below a task its stream takes forwarded items from."""


class StreamEvent(BaseModel):
    """One item of a task's stream: a ``TaskEvent`` without its task id and offset.

    Those two come from where the item sits: its topic and its place in the log.
    """

    kind: str
    time: datetime | None = None
    status: TaskStatus | None = None
    turn: int | None = None
    tool: str | None = None
    summary: str | None = None
    error: str | None = None
    text: str | None = None
    result: str | None = None
    usage: Usage | None = None
    piece: str | None = None
    """A live piece of a turn's text or thinking: its id in its task
    (``<turn>.<attempt>.<publish>.<kind>``). The turn sends it to its parent's stream
    directly too; the parent keeps whichever copy comes first, once."""

    def item(self) -> dict[str, Any]:
        """The JSON the stream holds (fields left at None are left out)."""
        return self.model_dump(mode="json", exclude_none=True)


class ForwardedItem(BaseModel):
    """An item of a child's stream, as its parent's stream takes it."""

    offset: int
    """Its offset in the child's stream (the parent drops what it has already)."""
    topic: str
    """Its topic in the child's stream."""
    data: str
    """Its payload: base64 of the serialized ``Payload``."""


class StreamForward(BaseModel):
    """A forward signal: a child's new items, in order."""

    task_id: str
    items: list[ForwardedItem] = Field(default_factory=list)
    after: int | None = None
    """Where the child's batch before this one ended (its next offset then): a child
    sends its next batch before the last one landed, and a parent that has not taken
    that one yet keeps this one until it has (None: apply at once)."""


class StreamDirect(BaseModel):
    """A direct signal: a child's live turn pieces, sent by its model turn to its parent.

    They skip the child's own workflow (one hop less than a forward); the parent keeps
    them until the items the child forwarded reach ``after``, so a task's events stay in
    its order, and drops the forwarded copy of each (by ``StreamEvent.piece``).
    """

    task_id: str
    after: int = 0
    """The child's stream end when the turn was scheduled."""
    events: list[dict[str, Any]] = Field(default_factory=list)
    """The pieces, as ``StreamEvent.item()`` makes them."""


class StreamCarry(BaseModel):
    """What a run hands its stream's next run (continue-as-new, or a follow-up run)."""

    base: int = 0
    """The offset of the first item carried (the end of the last run's, when none is)."""
    items: list[ForwardedItem] = Field(default_factory=list)
    """The latest items (offsets from ``base``), at most ``CARRY_BYTES``."""
    publishers: dict[str, int] = Field(default_factory=dict)
    """The model-turn publishers' last sequence numbers (so a retried publish is dropped)."""
    forwarded: dict[str, int] = Field(default_factory=dict)
    """The next offset expected from each child that forwards (so a repeat is dropped)."""
    cursor: int = 0
    """The next offset of this stream to forward to the parent."""
    early: list[StreamForward] = Field(default_factory=list)
    """Children's batches that came before the one they follow (see ``after``)."""


def child_topic(child_id: str, topic: str) -> str:
    """The topic in a parent's stream of an item under ``topic`` in its child's."""
    return f"{child_id}/{topic}" if topic else child_id


def topic_task(owner: str, topic: str) -> tuple[str, int]:
    """Whose event an item of ``owner``'s stream is, and how many levels below it."""
    if not topic:
        return owner, 0
    parts = topic.split("/")
    return parts[-1], len(parts)
