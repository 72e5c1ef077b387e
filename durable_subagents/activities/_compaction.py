"""The ``compact_context`` activity's work: make a task's conversation fit its window.

``durable_subagents.context._context`` says what a compaction point does to what the model is
sent. Here the sizes are measured, the new point is planned (notes first; a summary
when notes are not enough; as a last resort notes for the latest tool results too),
the one model call a compaction may make writes the summary, and the point is appended
to the chain. A written summary is kept as a record of the task, so an attempt retried
after its worker died reuses it instead of asking the model again.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from temporalio import activity
from temporalio.exceptions import ApplicationError

from durable_subagents.context._context import (
    COMPACT_TO,
    RECENT_SHARE,
    SUMMARY_HEADER,
    SUMMARY_PROMPT,
    Sizer,
    assistant_texts,
    latest_mark,
    message_chars,
    note,
    originals,
    prompt_end,
    recent_start,
    render,
    request_chars,
    summary_tokens,
)
from durable_subagents.providers import ModelProvider
from durable_subagents.providers._errors import CONTEXT_LENGTH_ERROR
from durable_subagents.providers._windows import maker_model
from durable_subagents.storage._transcript import INLINE_LIMIT
from durable_subagents.types import Compaction, Message, ModelRequest, ToolCall, Usage
from durable_subagents.wire._payloads import CompactInput, CompactResult, ContextInput

if TYPE_CHECKING:
    from durable_subagents.activities._role import ActivityRole

__all__ = ["CONTEXT_WINDOW_EXCEEDED", "compact"]

CONTEXT_WINDOW_EXCEEDED = "ContextWindowExceeded"
"""The error of a task whose prompt (or latest turn) cannot fit its model's window."""
SUMMARY_TRIES = 3
"""Summary calls one attempt makes when the provider refuses the input as too long
(each with half the input of the one before)."""


def too_large(message: str) -> ApplicationError:
    """The task fails: compaction cannot help, and retrying cannot either."""
    return ApplicationError(message, type=CONTEXT_WINDOW_EXCEEDED, non_retryable=True)


@dataclass
class _Sizes:
    """The conversation after the summary point, measured as sent now and as notes."""

    own: list[Message]
    start: int
    """The first message after the prompt and the current summary."""
    end: int
    """Where the task's prompt ends."""
    fixed: int
    """Characters of the system prompt, the tools and the task's prompt."""
    shown: list[int] = field(default_factory=list)
    noted: list[int] = field(default_factory=list)

    def chars(self, noted: int, summarized: int, summary: int) -> int:
        """Characters of the view a compaction point with these values gives."""
        total = self.fixed + (summary + 20 if summarized > self.end and summary else 0)
        for j in range(max(summarized, self.start) - self.start, len(self.shown)):
            i = self.start + j
            tool = self.own[i].role == "tool"
            total += self.noted[j] if tool and i < noted else self.shown[j]
        return total


async def compact(acts: ActivityRole, input: CompactInput) -> CompactResult:
    """Append a compaction point that brings the context near ``COMPACT_TO`` of the window.

    Raises:
        ApplicationError: ``ContextWindowExceeded`` (non-retryable) when the task's
            prompt alone, or the prompt with its latest turn reduced to notes, does not
            fit the window, or when the model refused a context nothing can shorten.
    """
    turn = input.turn
    task_id = turn.task_id
    if turn.head is None:
        raise too_large("there is no conversation to compact")
    messages = await acts.transcript.load(task_id, turn.head)
    provider, full_name, provider_model = acts.provider(turn.model)
    context = turn.context or ContextInput()
    sizer = Sizer(context.tokens, context.chars)
    tools = [*acts.tools.specs(acts.offered_tools(turn)), *turn.extra_tools]
    own = originals(messages)
    old_message = latest_mark(messages)
    old = old_message.compaction if old_message is not None else None
    old_noted, old_summarized = (old.noted, old.summarized) if old else (0, 0)
    end = prompt_end(own)
    start = max(end, old_summarized)
    calls = {c.id: c for m in own if m.role == "assistant" for c in m.tool_calls}
    system = "\n\n".join(m.content for m in own if m.role == "system")
    prompt = await acts.transcript.expand(task_id, [m for m in own[:end] if m.role != "system"])
    sizes = _Sizes(own, start, end, request_chars(system, prompt, tools))
    shown = [
        _noted(m, calls) if m.role == "tool" and i < old_noted else m
        for i, m in enumerate(own[start:], start)
    ]
    tail = await acts.transcript.expand(task_id, shown)
    sizes.shown = [message_chars(m) for m in tail]
    sizes.noted = [
        message_chars(_noted(m, calls)) if m.role == "tool" else sizes.shown[j]
        for j, m in enumerate(tail)
    ]
    old_summary = ""
    if old_message is not None and old_summarized > end:
        old_summary = (await acts.transcript.expand(task_id, [old_message]))[0].content

    before = sizer.tokens_of(sizes.chars(old_noted, old_summarized, len(old_summary)))
    window = acts.context_window(context, full_name) or before
    alone = sizer.tokens_of(sizes.fixed)
    if alone > window:
        raise too_large(
            f"the task's prompt alone (its system prompt, tool definitions and first "
            f"message) is about {alone:,} tokens, more than the model's context window of "
            f"{window:,} tokens; shorten the prompt or the agent's system prompt, offer "
            "fewer tools, or use a model with a larger window"
        )

    recent_budget = int(RECENT_SHARE * window / sizer.ratio)
    recent = start + recent_start(own[start:], sizes.shown, 0, recent_budget)
    noted, summarized, summary = max(old_noted, recent), old_summarized, old_summary
    written: str | None = None
    usage = Usage()

    def tokens() -> int:
        return sizer.tokens_of(sizes.chars(noted, summarized, len(summary)))

    if tokens() > COMPACT_TO * window and recent > start:
        result = await _summarize(
            acts,
            provider,
            provider_model,
            input,
            old_summary,
            tail[: recent - start],
            calls,
            window,
        )
        if result is not None:
            written, usage, kept = result
            summary, summarized = SUMMARY_HEADER + written, start + kept
    if tokens() > acts.compact_at * window:
        noted = len(own)  # the last resort: the latest results as notes too
    after = tokens()
    if after > window:
        raise too_large(
            f"the task's prompt and its latest turn are about {after:,} tokens with every "
            f"tool result as a note, more than the model's context window of {window:,} "
            "tokens; use a model with a larger window, or have the task read less at once"
        )
    mark = Compaction(
        number=input.number,
        reason=input.reason,
        noted=noted,
        summarized=summarized,
        tokens_before=before,
        tokens_after=after,
        window=window,
        model_calls=1 if written is not None else 0,
    )
    if (noted, summarized) == (old_noted, old_summarized) and written is None:
        if input.reason == "context_length":
            raise too_large(
                f"the model refused the conversation as longer than its context window "
                f"({window:,} tokens), and it cannot be compacted further: the task's "
                f"prompt and its latest turn are about {before:,} tokens"
            )
        return CompactResult(head=turn.head, compaction=mark, usage=usage, changed=False)
    if written is not None:
        content, ref = await acts.transcript.store_text(task_id, summary, INLINE_LIMIT)
    elif old_message is not None:
        content, ref = old_message.content, old_message.content_ref
    else:
        content, ref = "", None
    marker = Message(role="system", content=content, content_ref=ref, compaction=mark)
    head = await acts.transcript.append(task_id, turn.head, [marker])
    activity.logger.info("task %s: %s", task_id, mark.model_dump_json())
    usage = acts.prices.priced(full_name, usage, maker_model(full_name)) if written else usage
    return CompactResult(head=head, compaction=mark, usage=usage)


def _noted(message: Message, calls: dict[str, ToolCall]) -> Message:
    return note(message, calls.get(message.tool_call_id or ""))


async def _summarize(
    acts: ActivityRole,
    provider: ModelProvider,
    model: str,
    input: CompactInput,
    previous: str,
    messages: list[Message],
    calls: dict[str, ToolCall],
    window: int,
) -> tuple[str, Usage, int] | None:
    """The summary of ``previous`` and ``messages``, its usage, and how many it covers.

    As many of ``messages`` as fit in the call's input (their tool results as notes if
    need be) are summarized, from the first. None when not even one fits.
    """
    turn = input.turn
    context = turn.context or ContextInput()
    sizer = Sizer(context.tokens, context.chars)
    longest = summary_tokens(window)
    notes = [_noted(m, calls) if m.role == "tool" else m for m in messages]
    budget = int((window * acts.compact_at - longest) / sizer.ratio) - len(SUMMARY_PROMPT) - 200
    usage = Usage()
    for _ in range(SUMMARY_TRIES):
        fitted = _fit(previous, messages, notes, max(budget, 2000))
        if fitted is None:
            return None
        text, kept = fitted
        digest = hashlib.sha256(f"{turn.head}:{kept}:{len(text)}".encode()).hexdigest()[:32]
        record = f"compaction-{digest}"
        if activity.info().attempt > 1:
            stored = await acts.store.get_record(turn.task_id, record)
            if stored is not None:
                data = json.loads(stored)
                return data["text"], Usage.model_validate(data["usage"]), kept
        request = ModelRequest(
            model=model,
            system=SUMMARY_PROMPT,
            messages=[Message(role="user", content=text)],
            max_tokens=longest,
            purpose="summary",
            cache_key=turn.task_id,
            prompt_cache=False,  # a summary's input is never sent again
        )
        try:
            async with acts.heartbeating():
                response = await acts.complete(provider, request)
        except ApplicationError as err:
            if err.type != CONTEXT_LENGTH_ERROR:
                raise
            budget //= 2
            continue
        usage = usage + response.usage
        # The call offers no tools: calls it makes anyway are dropped, never run.
        summary = response.text.strip()[: longest * 6] or _fallback(previous, text, longest * 6)
        data = {"text": summary, "usage": usage.model_dump()}
        await acts.store.put_record(turn.task_id, record, json.dumps(data).encode())
        return summary, usage, kept
    return None


def _fit(
    previous: str, messages: list[Message], notes: list[Message], budget: int
) -> tuple[str, int] | None:
    """The summary call's input for as many of ``messages`` as fit ``budget`` characters.

    Tool results go as ``notes`` when the messages do not fit whole; then the latest
    messages are left for the next compaction (never a result without its call).
    """
    head = [Message(role="user", content=previous)] if previous else []
    per_message = max(budget // 4, 1000)
    for items in (messages, notes):
        kept = len(messages)
        while kept > 0:
            text = render([*head, *items[:kept]], per_message)
            if len(text) <= budget:
                return text, kept
            if items is messages:
                break  # notes first, before leaving messages out
            kept -= 1
            while 0 < kept < len(messages) and messages[kept].role == "tool":
                kept -= 1
    return None


def _fallback(previous: str, rendered: str, limit: int) -> str:
    """A summary made of the agent's own words, when the model wrote none.

    The previous summary's points come first, then each of the agent's messages, each
    cut to an equal share (its beginning, where a model says what it found), so none
    is lost to the limit.
    """
    earlier = previous.removeprefix(SUMMARY_HEADER).strip()
    items = [line[2:] for line in earlier.splitlines() if line.startswith("- ")]
    if earlier and not items:
        items = [" ".join(earlier.split())]  # a summary the model wrote
    items += [t for t in assistant_texts(rendered) if t]
    head = "The model wrote no summary; the agent's own words from this part, in order:\n"
    share = max((limit - len(head)) // max(len(items), 1) - 3, 80)
    lines = [f"- {t if len(t) <= share else t[: share - 1] + '…'}" for t in items]
    return (head + "\n".join(lines))[:limit]
