"""How the fake Chat Completions server plays an OpenAI-compatible server's quirks.

Each quirk is one that has broken a tool loop against a real server (docs/models.md
gives the sources): usage only when asked for, always, or never; tool calls without an
id, or with the id of the call before; a call's arguments in one chunk; a reasoning
model's thinking streamed as ``reasoning_content`` beside ``content``; a 400 for a
parameter the server does not know.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["SERVER_QUIRKS", "ServerQuirks", "unknown_parameter"]


@dataclass(frozen=True)
class ServerQuirks:
    """What a fake Chat Completions server does unlike OpenAI's API.

    Attributes:
        usage: ``stream_options``: a usage chunk when the request asks for one (as
            OpenAI); ``always``: whether asked or not; ``never``: none.
        call_ids: ``sent``: a fresh id per call; ``missing``: none; ``reused``: every
            call of every reply has the same id.
        whole_arguments: Send each call whole (name, id and arguments) in one chunk.
        reasoning_field: The delta field that carries ``thinking`` (None: not sent).
        thinking: The thinking streamed before each answer, word by word.
        refuse: Request parameters answered with a 400, as a server that does not know
            them answers.
    """

    usage: Literal["stream_options", "always", "never"] = "stream_options"
    call_ids: Literal["sent", "missing", "reused"] = "sent"
    whole_arguments: bool = False
    reasoning_field: str | None = None
    thinking: str = ""
    refuse: tuple[str, ...] = ()


SERVER_QUIRKS: dict[str, ServerQuirks] = {
    "openai": ServerQuirks(),
    "ollama": ServerQuirks(
        call_ids="missing",
        whole_arguments=True,
        reasoning_field="reasoning_content",
        thinking="Ollama thinks first.",
        refuse=("max_completion_tokens",),
    ),
    "vllm": ServerQuirks(
        reasoning_field="reasoning_content",
        thinking="vLLM reasons beside the answer.",
        refuse=("max_completion_tokens", "parallel_tool_calls"),
    ),
    "llamacpp": ServerQuirks(
        usage="never",
        call_ids="reused",
        whole_arguments=True,
        reasoning_field="reasoning_content",
        thinking="llama.cpp thinks too.",
        refuse=("max_completion_tokens",),
    ),
    "litellm": ServerQuirks(call_ids="reused", refuse=("parallel_tool_calls",)),
    "openrouter": ServerQuirks(
        usage="always", reasoning_field="reasoning", thinking="OpenRouter's reasoning."
    ),
}
"""One set of quirks per profile, chosen so that every quirk meets a profile: a test's
mix, not a portrait of that server's current release (docs/models.md gives the facts)."""


def unknown_parameter(body: dict[str, Any], refused: tuple[str, ...]) -> tuple[int, Any] | None:
    """The 400 a server that does not know a parameter of ``body`` answers, or None.

    The body is vLLM's before it took unknown fields (its request model forbade them):
    a pydantic ``extra_forbidden`` error as the message.
    """
    for name in refused:
        if name in body:
            problem = {
                "type": "extra_forbidden",
                "loc": ("body", name),
                "msg": "Extra inputs are not permitted",
                "input": body[name],
            }
            error = {"message": str([problem]), "type": "BadRequestError", "param": None}
            return 400, {"object": "error", **error, "code": 400}
    return None
