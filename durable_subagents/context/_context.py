"""What a model is sent of a task: a view of its transcript that fits the context window.

The transcript (the chain in the blob store) keeps every message whole. What a model
turn sends is a view of it: the messages up to the latest compaction point, shortened
as that point says, then every message after it as it is. A compaction point is a
message of its own in the chain (``Message.compaction``), so the view is a function of
the chain alone: a replayed or retried turn sends the same bytes, and from one
compaction to the next every turn's request begins with the previous turn's, which is
what providers' prompt caches need.

A compaction shortens the view in two steps, as far as the first gets it:

1. tool results before the latest turns become notes naming the call and how to read
   it again (no model call);
2. the turns between the task's prompt and the latest turns become a summary written
   by a model call that offers no tools (``SUMMARY_PROMPT``).

The task's prompt (the system prompt and the first user message) and the latest turns
stay verbatim. Sizes are estimated in characters and turned into tokens with the ratio
the provider's reported usage gives (``Sizer``).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from durable_subagents.types import Compaction, Message, ToolCall, ToolSpec

__all__ = [
    "COMPACT_AT",
    "COMPACT_TO",
    "IMAGES_LEFT_OUT",
    "RECENT_SHARE",
    "SUMMARY_HEADER",
    "SUMMARY_PROMPT",
    "Sizer",
    "assistant_texts",
    "context_view",
    "describe",
    "latest_mark",
    "message_chars",
    "note",
    "originals",
    "prompt_end",
    "recent_start",
    "render",
    "request_chars",
    "summary_tokens",
    "within_image_budget",
]

COMPACT_AT = 0.8
"""A turn whose context would pass this share of the window is compacted first."""
COMPACT_TO = 0.5
"""A compaction aims at this share of the window (room for several turns before the next)."""
RECENT_SHARE = 0.25
"""The latest turns kept verbatim: as many as fit in this share (the last one always)."""
CHARS_PER_TOKEN = 4.0
"""Characters per token before a provider has reported usage (English text and code
average 3-4.5; the ratio is learned from the first reported turn on)."""
NOTE_ARGUMENTS = 300
"""Characters of a call's arguments a note repeats."""
IMAGE_CHARS = 6400
"""What an image counts as, in characters: about 1,600 tokens, what the providers
charge for an image of about a megapixel (a larger one is scaled down to it)."""
REQUEST_IMAGES = 20
"""Images one request may carry: the latest; older ones are left out (Anthropic takes
more only of at most 2,000 pixels a side)."""
IMAGE_STEP = 10
"""Images dropped at a time past ``REQUEST_IMAGES`` (the oldest first)."""
REQUEST_IMAGE_BYTES = 16 * 1024 * 1024
"""Bytes of images one request may carry, the latest first (the API takes 32 MB a
request, and base64 adds a third)."""
IMAGES_LEFT_OUT = (
    "[the images of this result are left out of the context to keep the request "
    "within the provider's limits; call the tool again to see them]"
)

SUMMARY_PROMPT = """\
You compact the conversation of an agent that is still working on a task, so that it \
can go on in a smaller context window. The messages below are the part of its \
conversation that is being replaced; the agent keeps its task and its latest turns, \
and sees your summary in place of these messages.

Write the summary the agent needs to go on without them:
- every fact it learned or noted: names, numbers, values, identifiers, short quotes \
it will need, exactly as they appear;
- the decisions it made and why;
- the files, paths, commands and URLs it used, and what it found in each;
- errors it hit and how they were resolved;
- the work still open, and what it planned to do next.

Leave out pleasantries, repetition, and tool output that can be read again (say where \
it is instead). A previous summary, if there is one, comes first: keep what of it still \
matters. Write plain text in the third person ("The agent read..."), as short as the \
facts allow. Do not call tools and do not continue the task: only summarize."""
"""The system prompt of a compaction's summary call (which offers no tools)."""

SUMMARY_HEADER = (
    "[Summary of the earlier part of this task: the conversation was compacted to fit "
    "the model's context window. The messages it replaces are kept in the task's "
    "transcript.]\n\n"
)
"""What the summary message the model is sent begins with."""

_MESSAGE = re.compile(r'<message role="assistant">\n(.*?)\n</message>', re.DOTALL)


# ---------------------------------------------------------------------- the view


def originals(messages: Sequence[Message]) -> list[Message]:
    """The transcript's own messages, compaction points left out."""
    return [m for m in messages if m.compaction is None]


def latest_mark(messages: Sequence[Message]) -> Message | None:
    """The latest compaction point, or None."""
    return next((m for m in reversed(messages) if m.compaction is not None), None)


def prompt_end(messages: Sequence[Message]) -> int:
    """Where the task's prompt ends: just after the first user message."""
    for i, m in enumerate(messages):
        if m.role == "user":
            return i + 1
    return sum(1 for m in messages if m.role == "system")


def context_view(messages: Sequence[Message]) -> list[Message]:
    """What the model is sent of ``messages``: see the module's docstring.

    Without a compaction point that is every message; with one, the prompt, the
    summary (if any), then the rest with the tool results before ``noted`` as notes.
    """
    mark_message = latest_mark(messages)
    if mark_message is None:
        return list(messages)
    mark = mark_message.compaction
    assert mark is not None
    own = originals(messages)
    end = prompt_end(own)
    out = own[:end]
    if mark.summarized > end and (mark_message.content or mark_message.content_ref):
        out.append(
            Message(role="user", content=mark_message.content, content_ref=mark_message.content_ref)
        )
    calls = _calls(own[: mark.noted])
    for i in range(max(end, mark.summarized), len(own)):
        m = own[i]
        noted = m.role == "tool" and i < mark.noted
        out.append(note(m, calls.get(m.tool_call_id or "")) if noted else m)
    return out


def within_image_budget(messages: Sequence[Message]) -> tuple[list[Message], set[int]]:
    """``messages`` with the images one request may carry, and where some were dropped.

    At most ``REQUEST_IMAGES`` images and ``REQUEST_IMAGE_BYTES``, the latest kept. A
    message that loses any loses all of them (its index is returned, for a note:
    ``IMAGES_LEFT_OUT``). Past the count, the oldest go ``IMAGE_STEP`` at a time, so
    the request's prefix changes once in so many new images, not at every turn (a
    provider's prompt cache reads the prefix it saw).
    """
    out = list(messages)
    pictured = [i for i, m in enumerate(out) if m.images]
    total = sum(len(out[i].images) for i in pictured)
    excess = total - REQUEST_IMAGES
    drop = -(-excess // IMAGE_STEP) * IMAGE_STEP if excess > 0 else 0
    dropped: set[int] = set()
    for i in pictured:
        if drop <= 0:
            break
        drop -= len(out[i].images)
        dropped.add(i)
    size = 0
    for i in reversed(pictured):
        size += 0 if i in dropped else sum(image.size for image in out[i].images)
        if size > REQUEST_IMAGE_BYTES:
            dropped.add(i)
    for i in dropped:
        out[i] = out[i].model_copy(update={"images": []})
    return out, dropped


def note(result: Message, call: ToolCall | None) -> Message:
    """A tool result as a short note: which call it was, and how to read it again."""
    name = result.tool_name or (call.name if call else "the tool")
    arguments = ""
    if call is not None:
        arguments = json.dumps(call.arguments, ensure_ascii=False, sort_keys=True)
        if len(arguments) > NOTE_ARGUMENTS:
            arguments = arguments[: NOTE_ARGUMENTS - 1] + "…"
        arguments = f" with {arguments}"
    what = "an error" if result.is_error else "its output"
    again = (
        "run it again if you need it (mind its side effects)"
        if name == "bash"
        else f"call {name} again with the same arguments to read it"
    )
    return result.model_copy(
        update={
            "content": f"[compacted: {what} of this {name} call{arguments} was removed from "
            f"the context to save space; {again}]",
            "content_ref": None,
            "images": [],
        }
    )


def _calls(messages: Sequence[Message]) -> dict[str, ToolCall]:
    return {c.id: c for m in messages if m.role == "assistant" for c in m.tool_calls}


# ---------------------------------------------------------------------- sizes


@dataclass(frozen=True)
class Sizer:
    """Estimates tokens from characters, with the ratio the provider's usage gives.

    Args:
        tokens: The input tokens a request reported (0: none yet).
        chars: The characters of that request as ``request_chars`` counts them.
    """

    tokens: int = 0
    chars: int = 0

    @property
    def ratio(self) -> float:
        """Tokens per character, within 1/6 and 2/3 (so one odd report cannot mislead)."""
        if self.tokens <= 0 or self.chars <= 0:
            return 1 / CHARS_PER_TOKEN
        return min(max(self.tokens / self.chars, 1 / 6), 2 / 3)

    def tokens_of(self, chars: int) -> int:
        """About how many tokens ``chars`` characters are."""
        return math.ceil(chars * self.ratio)


def message_chars(message: Message) -> int:
    """Characters a message takes on the wire, about (its text, its calls and framing).

    Thinking counts too: in a tool loop the API reads the loop's thinking as input
    (only the thinking of turns before the last message a user wrote is left out).
    """
    calls = sum(
        len(c.name) + len(json.dumps(c.arguments, ensure_ascii=False)) + 40
        for c in message.tool_calls
    )
    images = IMAGE_CHARS * len(message.images)
    return len(message.content) + calls + len(message.thinking) + images + 20


def request_chars(system: str, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> int:
    """Characters of a whole request, about: system prompt, tools and messages."""
    tool_chars = sum(
        len(t.name) + len(t.description) + len(json.dumps(t.parameters)) + 40 for t in tools
    )
    return len(system) + tool_chars + sum(message_chars(m) for m in messages)


def summary_tokens(window: int) -> int:
    """The longest summary asked for: an eighth of the window, between 256 and 4,096."""
    return max(256, min(4096, window // 8))


def recent_start(messages: Sequence[Message], sizes: Sequence[int], start: int, budget: int) -> int:
    """Where the latest turns kept verbatim begin.

    As many turns as fit in ``budget`` characters, the last one (its assistant message
    and what follows) always; never at a tool result (it stays with its call).
    """
    last = max(
        (i for i in range(start, len(messages)) if messages[i].role == "assistant"),
        default=len(messages),
    )
    r, total = last, sum(sizes[last:])
    while r > start and total + sizes[r - 1] <= budget:
        r -= 1
        total += sizes[r]
    while r > start and r < len(messages) and messages[r].role == "tool":
        r -= 1
    return r


# ---------------------------------------------------------------------- the summary call


def render(messages: Sequence[Message], limit: int | None = None) -> str:
    """Messages as the text a summary call reads (each cut to ``limit`` characters)."""
    parts = []
    for m in messages:
        if m.compaction is not None:
            continue
        text = m.content
        if limit is not None and len(text) > limit:
            text = text[:limit] + f"\n[... {len(text) - limit} more characters]"
        head = f'<message role="{m.role}"'
        if m.role == "tool":
            head += f' tool="{m.tool_name or ""}"' + (' error="true"' if m.is_error else "")
        calls = "".join(
            f"\n[calls {c.name} {json.dumps(c.arguments, ensure_ascii=False, sort_keys=True)}]"
            for c in m.tool_calls
        )
        parts.append(f"{head}>\n{text}{calls}\n</message>")
    return "\n".join(parts)


def assistant_texts(rendered: str) -> list[str]:
    """The assistant messages' texts of a ``render``-ed conversation."""
    return [t.split("\n[calls ", 1)[0].strip() for t in _MESSAGE.findall(rendered)]


def describe(mark: Compaction) -> str:
    """A one-line account of a compaction (events, details, spans' status)."""
    parts = [f"compaction {mark.number}: ~{mark.tokens_before:,} -> ~{mark.tokens_after:,} tokens"]
    if mark.window:
        parts.append(f"of a {mark.window:,}-token window")
    if mark.reason == "context_length":
        parts.append("after the model refused the request as too long")
    parts.append("summary written" if mark.model_calls else "tool results turned into notes")
    return ", ".join(parts)
