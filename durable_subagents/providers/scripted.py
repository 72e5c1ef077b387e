"""An offline, deterministic model that plays a script: the demo's and the tests' model.

``scripted`` plays the default script, ``scripted:<name>`` a built-in one from
``SCRIPTS``, ``scripted:@/abs/path.json`` a JSON file read on the worker, and
``scripted:[...]``/``scripted:{...}`` inline JSON.

A script is a list of turns, or ``{"turns": [...], "repeat": N, "final": "text"}``
(the turns played N times in a row, then an optional final text). A turn is
``{"text": str, "tool_calls": [{"name": str, "arguments": {...}}], "delay": float,
"stream": float, "usage": {"input_tokens": int, "output_tokens": int}}``, every key
optional; ``{"summary": turn}`` answers a compaction's summary call. The turn played is
the task's turn number (or the number of assistant messages already in the request),
so a retried turn gives the same answer. ``{last_tool_result}`` and ``{prompt}`` in a
text are replaced by the last tool message (first 2000 characters) and the first user
message.
"""

from __future__ import annotations

import asyncio
import copy
import json
import re
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from durable_subagents.context._context import assistant_texts
from durable_subagents.errors import InvalidRequest
from durable_subagents.types import ModelRequest, ModelResponse, ToolCall, Usage

from ._errors import model_request_error
from ._text import encodable, encodable_response

__all__ = ["SCRIPTS", "Script", "ScriptToolCall", "ScriptTurn", "ScriptedProvider", "load_script"]

_OFFLINE = "Offline scripted model (no LLM was called)."
_REAL_MODEL_HINT = (
    "Set SUBAGENTS_MODEL on the worker (e.g. openai:gpt-4.1-mini or "
    "anthropic:claude-haiku-4-5) to use a real model."
)


def _call(name: str, **arguments: str) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


def _step(text: str, *calls: dict[str, Any]) -> dict[str, Any]:
    return {"text": text, "tool_calls": list(calls)} if calls else {"text": text}


SCRIPTS: dict[str, Any] = {
    "default": [
        _step("Listing the workspace.", _call("list_files", pattern="**/*")),
        _step("Looking for function definitions.", _call("grep", pattern="def ")),
        _step(
            f"{_OFFLINE} It listed the workspace and searched it for function "
            f"definitions:\n\n{{last_tool_result}}\n\n{_REAL_MODEL_HINT}"
        ),
    ],
    "default-bash": [
        _step(
            "Counting the lines of the Python files with bash.",
            _call("bash", command="find . -name '*.py' -not -path '*/.*' | sort | xargs wc -l"),
        ),
        _step(
            f"{_OFFLINE} It counted the lines of the workspace's Python files with bash:"
            f"\n\n{{last_tool_result}}\n\n{_REAL_MODEL_HINT}"
        ),
    ],
    "demo-explore": [
        _step("Mapping the Python files first.", _call("list_files", pattern="**/*.py")),
        _step(
            "Now the classes and functions.",
            _call("grep", pattern="class "),
            _call("grep", pattern="def "),
        ),
        _step(
            f"{_OFFLINE} This answer comes from the `demo-explore` script, not from an "
            "LLM.\n\nTask: {prompt}\n\nFunction definitions found:\n{last_tool_result}"
        ),
        # A follow-up (send_input after the answer above) continues here.
        _step("Looking for the tests.", _call("grep", pattern="def test_", path="tests")),
        _step(
            f"{_OFFLINE} This follow-up answer comes from the `demo-explore` script, not "
            "from an LLM.\n\nTest functions found under tests/:\n{last_tool_result}"
        ),
    ],
    "demo-plan": [
        _step("Reading the README first.", _call("read_file", path="README.md")),
        _step("Checking for open TODOs.", _call("grep", pattern="TODO")),
        _step(
            f"{_OFFLINE} This plan comes from the `demo-plan` script, not from an LLM."
            "\n\nTask: {prompt}\n\nPlan:\n1. Read the modules the task touches.\n"
            "2. Make the change in the module that owns it.\n3. Add a test next to the "
            "existing ones.\n\nOpen TODOs found:\n{last_tool_result}"
        ),
    ],
    "demo-research": [
        _step("Finding the documentation.", _call("list_files", pattern="**/*.md")),
        _step("Reading the README.", _call("read_file", path="README.md")),
        _step(
            "Finding where errors are raised, caught and printed.",
            _call("grep", pattern="raise |except |stderr"),
        ),
        _step(
            f"{_OFFLINE} This summary comes from the `demo-research` script, not from an "
            "LLM.\n\nQuestion: {prompt}\n\nWhere the code raises, catches and prints "
            "errors:\n{last_tool_result}"
        ),
    ],
    "demo-general": [
        _step(
            "Counting the lines of the Python files with bash.",
            _call("bash", command="wc -l inventory/*.py tests/*.py"),
        ),
        _step(
            f"{_OFFLINE} This answer comes from the `demo-general` script, not from an "
            "LLM.\n\nTask: {prompt}\n\nWhat the bash call returned:\n{last_tool_result}"
        ),
    ],
}
"""Built-in scripts by name. Plain ``scripted`` plays ``default``, or ``default-bash`` to
an agent offered ``bash`` (as ``general`` is): a command to approve, offline."""

_FORMS = "scripted, scripted:<name>, scripted:@/abs/path.json or scripted:<inline JSON>"


class ScriptToolCall(BaseModel):
    """A tool call a scripted turn makes."""

    model_config = ConfigDict(extra="forbid")
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    id: str | None = None
    """The call id (default ``call_<turn>_<n>``), e.g. to play a provider's odd ids."""


class ScriptTurn(BaseModel):
    """One scripted model answer."""

    model_config = ConfigDict(extra="forbid")
    text: str = ""
    tool_calls: list[ScriptToolCall] = Field(default_factory=list)
    delay: float = Field(default=0.0, ge=0)
    """Seconds to wait before answering (simulated latency; cancellable)."""
    stream: float = Field(default=0.0, ge=0)
    """Seconds over which the text streams out word by word (live text; cancellable)."""
    usage: Usage | None = None
    """Reported usage; default: characters // 4 in, text // 4 + 10 per call out."""


class Script(BaseModel):
    """``turns`` played ``repeat`` times in a row, then ``final`` if set.

    ``summary`` answers a compaction's summary call; by default the summary is the
    assistant's own texts of the part compacted, in order.
    """

    model_config = ConfigDict(extra="forbid")
    turns: list[ScriptTurn]
    repeat: int = Field(default=1, ge=1)
    final: str | None = None
    summary: ScriptTurn | None = None

    @property
    def length(self) -> int:
        """How many turns the script plays before it is exhausted."""
        return len(self.turns) * self.repeat + (0 if self.final is None else 1)

    def turn(self, index: int) -> ScriptTurn | None:
        """The turn played at ``index`` (0-based), or None when the script is exhausted."""
        played = len(self.turns) * self.repeat
        if index < played:
            return self.turns[index % len(self.turns)]
        if index == played and self.final is not None:
            return ScriptTurn(text=self.final)
        return None


def _parse(data: Any, origin: str) -> Script:
    try:
        return Script.model_validate({"turns": data} if isinstance(data, list) else data)
    except ValidationError as exc:
        # Never echo the input: a script file could hold anything.
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'script'}: {e['msg']}"
            for e in exc.errors(include_input=False)
        )
        raise InvalidRequest(f"invalid script {origin}: {problems}") from None


@lru_cache(maxsize=64)
def _parse_text(text: str, origin: str) -> Script:
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise InvalidRequest(f"script {origin} is not valid JSON: {exc}") from exc
    return _parse(data, origin)


def _selector(spec: str) -> str:
    spec = spec.strip()
    if spec.startswith("scripted:"):
        spec = spec[len("scripted:") :].strip()
    return "" if spec in ("scripted", "default") else spec


def check_script(spec: str) -> None:
    """Validate a script selector without reading files (clients may call it).

    Raises:
        InvalidRequest: Unknown script name, invalid inline JSON, or a relative path.
    """
    selector = _selector(spec)
    if selector.startswith("@"):
        if not Path(selector[1:]).is_absolute():
            raise InvalidRequest(f"script file {selector[1:]!r} must be an absolute path")
        return
    load_script(selector)


def load_script(spec: str, *, files: bool = True) -> Script:
    """Load the script a ``scripted`` model selector names.

    Args:
        spec: ``""`` (default script), a name from ``SCRIPTS``, ``@/abs/path.json``
            or inline JSON starting with ``[`` or ``{``; a ``scripted:`` prefix is
            accepted.
        files: Whether ``@/abs/path.json`` may be read. Workers pass
            ``Settings.script_files`` (off by default): whoever can spawn a task must
            not make the worker read a file of its choosing.

    Returns:
        The parsed script.

    Raises:
        InvalidRequest: Unknown name, unreadable file or invalid script.
    """
    selector = _selector(spec)
    if not selector:
        selector = "default"
    if selector[0] in "[{":
        return _parse_text(selector, "(inline)")
    if selector.startswith("@"):
        if not files:
            raise InvalidRequest(
                "scripted:@FILE models are off on this worker (they make the worker read "
                "a file the spawner names); start the worker with SUBAGENTS_SCRIPT_FILES=1 "
                "to allow them, or pass the script inline as scripted:[...]"
            )
        path = Path(selector[1:])
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise InvalidRequest(f"cannot read script file {str(path)!r}: {exc}") from exc
        return _parse_text(text, repr(str(path)))
    if selector in SCRIPTS:
        return _parse(SCRIPTS[selector], repr(selector))
    raise InvalidRequest(
        f"unknown script {selector!r}; built-in scripts: {', '.join(sorted(SCRIPTS))}; "
        f"forms: {_FORMS}"
    )


def _fill(text: str, request: ModelRequest) -> str:
    if "{last_tool_result}" in text:
        last = next((m.content for m in reversed(request.messages) if m.role == "tool"), "")
        # Blank lines go, not the indent of the first line (`wc -l` aligns its counts).
        shown = last[:2000].rstrip().lstrip("\r\n") or "(no tool output)"
        text = text.replace("{last_tool_result}", shown)
    if "{prompt}" in text:
        prompt = next((m.content for m in request.messages if m.role == "user"), "")
        text = text.replace("{prompt}", prompt)
    return text


async def _stream(text: str, seconds: float, on_text: Callable[[str], None]) -> None:
    words = re.findall(r"\S+\s*|\s+", text) if seconds else [text]
    for word in words:
        on_text(word)
        if seconds:
            await asyncio.sleep(seconds / len(words))


def _default_usage(request: ModelRequest, text: str, calls: int) -> Usage:
    chars = len(request.system) + sum(
        len(m.content) + sum(len(json.dumps(c.arguments)) for c in m.tool_calls)
        for m in request.messages
    )
    return Usage(input_tokens=max(1, chars // 4), output_tokens=max(1, len(text) // 4 + 10 * calls))


def _answers(request: ModelRequest) -> int:
    return sum(1 for m in request.messages if m.role == "assistant")


def _summary(request: ModelRequest) -> str:
    """The default scripted summary: the assistant's texts of the part compacted."""
    texts = [t for m in request.messages for t in assistant_texts(m.content) if t]
    lines = [f"- {t if len(t) <= 300 else t[:299] + '…'}" for t in texts]
    return "Scripted summary of the earlier turns:\n" + "\n".join(lines)


class ScriptedProvider:
    """Plays a script instead of calling a model: offline and deterministic.

    ``request.model`` selects the script (see ``load_script``).

    Args:
        script_files: Whether ``scripted:@/abs/path.json`` may be read on this worker.
    """

    name = "scripted"

    def __init__(self, *, script_files: bool = False) -> None:
        self.script_files = script_files

    async def complete(
        self,
        request: ModelRequest,
        on_text: Callable[[str], None] | None = None,
        on_thinking: Callable[[str], None] | None = None,
    ) -> ModelResponse:
        """Answer with the scripted turn for this point of the conversation.

        Args:
            request: The neutral request; ``model`` is the script selector.
            on_text: Called with the text: at once, or word by word over the turn's
                ``stream`` seconds.
            on_thinking: Not called: scripts do not think.

        Returns:
            The turn's text and tool calls (ids ``call_<turn>_<index>``), or
            ``Script finished after N turns.`` once the script is exhausted.

        Raises:
            temporalio.exceptions.ApplicationError: The script is unknown or invalid
                (non-retryable ``ModelRequestError``).
        """
        selector = request.model
        if not _selector(selector) and any(t.name == "bash" for t in request.tools):
            selector = "default-bash"
        try:
            script = load_script(selector, files=self.script_files)
        except InvalidRequest as exc:
            raise model_request_error(str(exc)) from exc
        # The task's turn, when the request says it: a compacted conversation holds
        # fewer assistant messages than turns played.
        index = request.turn - 1 if request.turn else _answers(request)
        if request.purpose == "summary":
            turn = script.summary or ScriptTurn(text=_summary(request))
        else:
            turn = script.turn(index) or ScriptTurn(
                text=f"Script finished after {script.length} turns."
            )
        if turn.delay:
            await asyncio.sleep(turn.delay)
        # A script is JSON too: it can hold "\ud800" like any model's answer.
        text = encodable(_fill(turn.text, request))
        if on_text is not None and text:
            await _stream(text, turn.stream, on_text)
        calls = [
            ToolCall(
                id=c.id or f"call_{index}_{i}",
                name=c.name,
                arguments=copy.deepcopy(c.arguments),
            )
            for i, c in enumerate(turn.tool_calls)
        ]
        return encodable_response(
            ModelResponse(
                text=text,
                tool_calls=calls,
                usage=turn.usage or _default_usage(request, text, len(calls)),
                stop_reason="tool_use" if calls else "end_turn",
                model="scripted",
            )
        )
