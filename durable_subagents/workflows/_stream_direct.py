"""A child's live pieces that reach its parent's stream straight from its model turn.

A watched child's turn sends each publish to its parent (``StreamDirect``) as well as
to its own stream, which forwards it later: the parent keeps whichever copy comes
first, once (by ``StreamEvent.piece``), and keeps a direct batch back until the child's
forwarded items reach where its turn began, so a task's events keep their order.

Workflow code: deterministic, no I/O.
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow
from temporalio.api.common.v1 import Payload
from temporalio.contrib.workflow_streams import WorkflowStream

with workflow.unsafe.imports_passed_through():
    from durable_subagents.wire._stream_items import StreamDirect, StreamEvent, child_topic

__all__ = ["LIVE_KINDS", "MAX_DIRECT_EVENTS", "PIECES_KEPT", "DirectPieces", "may_be_piece"]

LIVE_KINDS = ("text", "thinking")
"""The kinds of item a child's turn sends its parent directly."""
MAX_DIRECT_EVENTS = 8
"""Pieces one direct signal carries (a turn's publish holds at most three)."""
PIECES_KEPT = 1024
"""Ids of a child's live pieces a stream remembers (to drop the second copy of each)."""
MAX_HELD = 16
"""A child's direct batches kept back at once; more are dropped (the forward brings them)."""


class DirectPieces:
    """The children's live pieces a stream took, and direct batches it keeps back.

    Args:
        log: The stream the pieces go to, under each child's topic.
    """

    def __init__(self, log: WorkflowStream) -> None:
        self._log = log
        self._pieces: dict[str, dict[str, None]] = {}
        """Per child: the ids of the live pieces the stream holds, from either path."""
        self._held: dict[str, list[StreamDirect]] = {}
        """Per child: direct batches that came before its forwarded items reached them."""

    def take(self, batch: StreamDirect, forwarded: int) -> None:
        """A direct batch of a child whose forwarded items reached ``forwarded``."""
        if forwarded >= batch.after:
            self._apply(batch.task_id, batch.events)
            return
        held = self._held.setdefault(batch.task_id, [])
        if len(held) < MAX_HELD:
            held.append(batch)

    def release(self, child: str, forwarded: int) -> None:
        """The child's forwarded items reached ``forwarded``: apply what waited for it."""
        held = self._held.get(child)
        if held:
            self._held[child] = [b for b in held if b.after > forwarded]
            for batch in (b for b in held if b.after <= forwarded):
                self._apply(child, batch.events)

    def first_copy(self, child: str, payload: Payload) -> bool:
        """Whether a forwarded item of the child's own is new here.

        A live piece its turn sent directly is here already.
        """
        if not may_be_piece(payload):
            return True
        try:
            piece = workflow.payload_converter().from_payload(payload, dict).get("piece")
        except Exception:
            return True
        if not isinstance(piece, str):
            return True
        seen = self._pieces.setdefault(child, {})
        if piece in seen:
            return False
        _remember(seen, piece)
        return True

    def _apply(self, child: str, events: list[dict[str, Any]]) -> None:
        topic = self._log.topic(child_topic(child, ""))
        seen = self._pieces.setdefault(child, {})
        for event in events[:MAX_DIRECT_EVENTS]:
            if not isinstance(event, dict) or event.get("kind") not in LIVE_KINDS:
                continue
            piece = event.get("piece")
            if not isinstance(piece, str) or piece in seen:
                continue
            try:
                item = StreamEvent.model_validate(event).item()
            except ValueError:
                continue
            _remember(seen, piece)
            topic.publish(item)


def may_be_piece(payload: Payload) -> bool:
    """Whether an item may be a live piece of a turn: a look before any parse.

    A piece has a ``piece`` id; a model's text cannot forge the key (its quotes are
    escaped in the payload).
    """
    return b'"piece"' in payload.data


def _remember(seen: dict[str, None], piece: str) -> None:
    seen[piece] = None
    while len(seen) > PIECES_KEPT:
        del seen[next(iter(seen))]
