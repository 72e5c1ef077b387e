"""How a reasoning effort becomes Anthropic's extended thinking, per Claude model.

Claude models think in one of two ways (as the Messages API documents them):

- **Manual** (``thinking: {"type": "enabled", "budget_tokens": N}``): Claude 3.7
  Sonnet and the Claude 4 models before 4.6 (and other models behind a
  Messages-compatible server). The budget is at least 1,024 tokens and less than
  ``max_tokens``; the effort picks it (``THINKING_BUDGETS``). Claude 4 models also get
  the ``interleaved-thinking`` beta, so they think between tool calls and not only
  before the first.
- **Adaptive** (``thinking: {"type": "adaptive"}`` with ``output_config.effort``):
  Claude Opus and Sonnet 4.6 and every later model, where manual thinking is
  deprecated or refused. The model decides how much to think; the effort guides it.
- **None**: models before Claude 3.7, which cannot think; the effort is not sent.

Either way thinking tokens are output tokens counted against ``max_tokens``, so the
request's ``max_tokens`` is the agent's ``max_output_tokens`` plus the effort's
budget: the answer keeps the room it was given. ``temperature`` is not sent with
thinking (the API takes only 1), and ``tool_choice`` is never set (the API refuses
thinking with a forced tool; the structured answer's tool is offered, not forced).

Thinking blocks go back unchanged (``to_anthropic_messages``). One case cannot be
sent with manual thinking: a tool loop whose first answer has no thinking block (it
was recorded before thinking was turned on, or a compaction summarized the answer
that had it); the API requires that answer to start with thinking. Such a request
goes without thinking, and with no thinking blocks at all, as the API requires then.
"""

from __future__ import annotations

from typing import Any, Literal

from durable_subagents.agents._spec import ReasoningEffort

__all__ = [
    "INTERLEAVED_BETA",
    "MIN_BUDGET",
    "THINKING_BUDGETS",
    "ThinkingMode",
    "thinking_mode",
    "thinking_params",
    "without_reasoning",
]

THINKING_BUDGETS: dict[str, int] = {"low": 2_048, "medium": 8_192, "high": 16_384}
"""Thinking tokens per effort: manual thinking's ``budget_tokens``, and the room added
to ``max_tokens`` for thinking in either mode."""
MIN_BUDGET = 1_024
"""The least ``budget_tokens`` the API takes."""
INTERLEAVED_BETA = "interleaved-thinking-2025-05-14"
"""The beta that lets Claude 4 models think between tool calls in manual mode."""

ThinkingMode = Literal["manual", "adaptive", "none"]


def _version(model: str) -> tuple[int, int] | None:
    """The Claude version a model name says, or None when it says none.

    ``claude-3-7-sonnet-latest`` is 3.7, ``claude-opus-4-1-20250805`` 4.1,
    ``claude-sonnet-4-20250514`` 4.0 (the date is no minor version), ``claude-opus-4-6``
    4.6, ``claude-3-haiku-20240307`` 3.0.
    """
    parts = model.lower().split("-")
    if not parts or parts[0] != "claude":
        return None
    numbers: list[int] = []
    for part in parts[1:]:
        if part.isdecimal() and len(part) <= 2:
            numbers.append(int(part))
        elif numbers and not part.isdecimal():
            break  # claude-3-5-haiku: the version came before the family
    if not numbers:
        return None
    return numbers[0], numbers[1] if len(numbers) > 1 else 0


def thinking_mode(model: str) -> ThinkingMode:
    """How a model takes an effort: manual budgets, adaptive, or not at all.

    Models before Claude 3.7 have no extended thinking (``none``); 3.7 up to 4.5 take a
    budget (``manual``); 4.6 and later, and Claude names without a version the parser
    reads, think adaptively. Other models behind a Messages-compatible server
    (``ANTHROPIC_BASE_URL``) get the manual form, the one such servers implement.
    """
    if not model.lower().startswith("claude"):
        return "manual"
    version = _version(model)
    if version is None:
        return "adaptive"
    if version < (3, 7):
        return "none"
    if version < (4, 6):
        return "manual"
    return "adaptive"


def thinking_params(
    model: str,
    effort: ReasoningEffort | None,
    max_tokens: int,
    messages: list[dict[str, Any]],
) -> dict[str, Any]:
    """The request parameters that turn thinking on for ``effort``; {} for none.

    Args:
        model: The provider's model name (``claude-sonnet-4-5``).
        effort: The task's reasoning effort; None sends nothing.
        max_tokens: The agent's ``max_output_tokens``.
        messages: The request's Messages API turns (to check what the API requires
            of them with manual thinking).

    Returns:
        ``thinking``, ``max_tokens`` and ``output_config`` or ``extra_headers`` as the
        model takes them; {} when thinking stays off.
    """
    if effort is None:
        return {}
    mode = thinking_mode(model)
    budget = THINKING_BUDGETS[effort]
    if mode == "adaptive":
        return {
            "thinking": {"type": "adaptive"},
            "output_config": {"effort": effort},
            "max_tokens": max_tokens + budget,
        }
    if mode == "none" or not _may_think(messages):
        return {}
    params: dict[str, Any] = {
        "thinking": {"type": "enabled", "budget_tokens": budget},
        "max_tokens": max_tokens + budget,
    }
    version = _version(model)
    if version is not None and version >= (4, 0):
        params["extra_headers"] = {"anthropic-beta": INTERLEAVED_BETA}
    return params


def _may_think(messages: list[dict[str, Any]]) -> bool:
    """Whether manual thinking may be on for this conversation.

    The API's rule: in a tool loop (the conversation ends with tool results), the
    loop's first answer (the first assistant message after the last message a user
    wrote) must start with a thinking block.
    """
    if not messages or not _only_results(messages[-1]):
        return True
    first = None
    for i in range(len(messages) - 1, -1, -1):
        message = messages[i]
        if message["role"] == "assistant":
            first = message
        elif not _only_results(message):
            break
    if first is None:
        return True
    blocks = first["content"]
    return bool(blocks) and blocks[0].get("type") in ("thinking", "redacted_thinking")


def _only_results(message: dict[str, Any]) -> bool:
    """Whether a message is a user message that holds tool results and nothing else."""
    content = message["content"]
    return (
        message["role"] == "user"
        and isinstance(content, list)
        and bool(content)
        and all(b.get("type") == "tool_result" for b in content)
    )


def without_reasoning(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The turns with no thinking blocks: what a request without thinking may carry."""
    out = []
    for message in messages:
        blocks = [
            b for b in message["content"] if b.get("type") not in ("thinking", "redacted_thinking")
        ]
        if blocks:
            out.append({**message, "content": blocks})
    return out
