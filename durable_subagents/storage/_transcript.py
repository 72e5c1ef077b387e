"""The transcript as an append-only hash chain in the blob store.

Each node is ``{"parent": <ref or null>, "messages": [...]}``; the head reference
names the whole conversation. The workflow holds only the head, so its history does
not grow with the conversation.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections import OrderedDict

from pydantic import TypeAdapter
from typing_extensions import TypedDict

from durable_subagents.policy import rule_target_key
from durable_subagents.storage._blobstore import BlobStore
from durable_subagents.types import Message, ToolCall, ToolImage

PREVIEW_CHARS = 1000
"""Characters of a large text kept inline as its preview."""
INLINE_LIMIT = 8 * 1024
"""Texts longer than this (in UTF-8 bytes) go to the blob store; the workflow sees a preview."""
RESULT_INLINE_LIMIT = 64 * 1024
"""A final answer up to this size (in UTF-8 bytes) stays inline whole: the task's result
carries it, so a parent needs no blob store access to read it. (An answer within the
default ``max_tokens`` of 8,192 is about 32 KB.)"""
READ_CONCURRENCY = 16
"""Blobs one ``expand`` reads at once."""
TRANSCRIPT_CACHE_BYTES = 256 * 1024 * 1024
"""What a worker keeps of running tasks' conversations by default (``Transcript``)."""
RULE_TARGET_LIMIT = 64 * 1024
"""A command or path up to this size stays inline in full, so permission rules see it."""


class Transcript:
    """Reads and appends transcript chains, caching each task's latest conversation.

    The cache keeps, per task, the chain's nodes up to its newest head (what the next
    turn extends) as the bytes the store holds, up to ``cache_bytes`` of them over all
    tasks, least recently used first out: a worker running ten thousand short tasks
    reads no chain back from the store while they fit. Bytes, not parsed messages: a
    short message parsed takes about 1.3 KB, its JSON a tenth of that, and parsing a
    turn's conversation costs less than sending it to the model. A task's entry goes
    when it answers without a tool call (most such turns end the task).
    """

    def __init__(self, store: BlobStore, cache_bytes: int = TRANSCRIPT_CACHE_BYTES) -> None:
        self.store = store
        self._cache: OrderedDict[str, tuple[str, list[bytes], int]] = OrderedDict()
        self._cache_bytes = cache_bytes
        self._cached = 0

    async def append(self, task_id: str, head: str | None, messages: list[Message]) -> str:
        """Append ``messages`` after ``head``; return the new head."""
        node = {"parent": head, "messages": [m.model_dump(exclude_defaults=True) for m in messages]}
        data = json.dumps(node, sort_keys=True).encode()
        ref = await self.store.put(task_id, data)
        if head is None:
            self._remember(task_id, ref, [data])
        else:
            entry = self._cache.get(task_id)
            if entry is not None and entry[0] == head:
                self._remember(task_id, ref, [*entry[1], data])
        return ref

    def forget(self, task_id: str) -> None:
        """Drop the task's conversation from the cache (a later turn reads it back)."""
        old = self._cache.pop(task_id, None)
        if old is not None:
            self._cached -= old[2]

    async def load(self, task_id: str, head: str | None) -> list[Message]:
        """The whole conversation up to ``head`` (blob references not expanded)."""
        if head is None:
            return []
        nodes: list[bytes] = []  # newest first, as the chain is walked
        chunks: list[list[Message]] = []
        ref: str | None = head
        while ref is not None:
            cached = self._cached_at(task_id, ref)
            if cached is not None:
                nodes.extend(reversed(cached))
                chunks.append([m for data in cached for m in _NODE.validate_json(data)["messages"]])
                break
            data = await self.store.get(task_id, ref)
            node = _NODE.validate_json(data)
            nodes.append(data)
            chunks.append(node["messages"])
            ref = node["parent"]
        self._remember(task_id, head, nodes[::-1])
        return [m for chunk in reversed(chunks) for m in chunk]

    async def expand(
        self, task_id: str, messages: list[Message], images: bool = False
    ) -> list[Message]:
        """Copies of ``messages`` with every ``content_ref`` replaced by the full text.

        With ``images``, every image's bytes are read too, base64-encoded
        (``ToolImage.data``: what a model is sent); else images stay names. The blobs
        are read ``READ_CONCURRENCY`` at a time: a worker taking a long task over from
        another reads them from a remote store in a few round trips.
        """
        limit = asyncio.Semaphore(READ_CONCURRENCY)

        async def full(m: Message) -> Message:
            async with limit:
                if m.content_ref:
                    data = await self.store.get(task_id, m.content_ref)
                    m = m.model_copy(
                        update={"content": data.decode("utf-8", "replace"), "content_ref": None}
                    )
                if _has_call_refs(m):
                    calls = [await self.full_call(task_id, c) for c in m.tool_calls]
                    m = m.model_copy(update={"tool_calls": calls})
                if images and _has_image_refs(m):
                    loaded = [await self._with_data(task_id, i) for i in m.images]
                    m = m.model_copy(update={"images": loaded})
                return m

        out = list(messages)
        todo = [
            i for i, m in enumerate(out) if m.content_ref or _has_call_refs(m) or _has_image_refs(m)
        ]
        for i, m in zip(todo, await asyncio.gather(*(full(out[i]) for i in todo)), strict=True):
            out[i] = m
        return out

    async def _with_data(self, task_id: str, image: ToolImage) -> ToolImage:
        if image.data:
            return image
        data = await self.store.get(task_id, image.ref)
        return image.model_copy(update={"data": base64.b64encode(data).decode()})

    async def full_call(self, task_id: str, call: ToolCall) -> ToolCall:
        """A tool call with its full arguments loaded from the store."""
        if not call.arguments_ref:
            return call
        arguments = json.loads(await self.store.get(task_id, call.arguments_ref))
        return call.model_copy(update={"arguments": arguments, "arguments_ref": None})

    async def store_call(self, task_id: str, call: ToolCall) -> ToolCall:
        """Move large arguments to the store, keeping short previews inline.

        The previews keep the workflow's policy checks and summaries meaningful.
        """
        data = json.dumps(call.arguments, sort_keys=True).encode()
        if len(data) <= INLINE_LIMIT:
            return call
        target = rule_target_key(call.arguments)
        previews = {
            k: v if k == target or not isinstance(v, str) else preview(v, 200)
            for k, v in call.arguments.items()
        }
        truncated = False
        if target is not None and len(call.arguments[target]) > RULE_TARGET_LIMIT:
            # Too long to carry inline: the workflow refuses it where a rule could apply.
            previews[target] = preview(call.arguments[target], 200)
            truncated = True
        ref = await self.store.put(task_id, data)
        return call.model_copy(
            update={"arguments": previews, "arguments_ref": ref, "rule_target_truncated": truncated}
        )

    async def store_text(
        self, task_id: str, text: str, limit: int = INLINE_LIMIT
    ) -> tuple[str, str | None]:
        """Keep a text of up to ``limit`` bytes inline; put a longer one in the store.

        Returns:
            ``(inline text or preview, blob reference or None)``.
        """
        data = text.encode()
        if len(data) <= limit:
            return text, None
        ref = await self.store.put(task_id, data)
        return preview(text), ref

    def _cached_at(self, task_id: str, head: str) -> list[bytes] | None:
        entry = self._cache.get(task_id)
        return entry[1] if entry is not None and entry[0] == head else None

    def _remember(self, task_id: str, head: str, nodes: list[bytes]) -> None:
        size = sum(len(n) + _NODE_BYTES for n in nodes)
        old = self._cache.pop(task_id, None)
        if old is not None:
            self._cached -= old[2]
        if size > self._cache_bytes:
            return
        self._cache[task_id] = (head, nodes, size)
        self._cached += size
        while self._cached > self._cache_bytes:
            _, (_, _, dropped) = self._cache.popitem(last=False)
            self._cached -= dropped


class _Node(TypedDict):
    parent: str | None
    messages: list[Message]


_NODE = TypeAdapter(_Node)
"""A chain node as stored, parsed and checked in one pass."""
_NODE_BYTES = 100
"""What a cached node takes in memory beside its bytes: the ``bytes`` object and its
slot in the task's list."""


def _has_call_refs(message: Message) -> bool:
    return any(c.arguments_ref for c in message.tool_calls)


def _has_image_refs(message: Message) -> bool:
    return any(not i.data for i in message.images)


def preview(text: str, limit: int = PREVIEW_CHARS) -> str:
    """The head of a long text with a visible marker saying how much is left out."""
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[... {len(text) - limit} more characters in the blob store]"
