"""Structured answers: the output schema a spawn gives, and checking an answer against it.

A spawn's ``output_schema`` is a JSON Schema for an object. The model is offered one
more tool, ``final_answer``, whose parameters are that schema: its arguments are the
answer (both wires take a tool's parameters as JSON Schema). A reply in plain text is
taken as the answer only when it is a JSON object that matches.

The schema is the spawner's input, and it may be a model's (an orchestrating model's
``spawn_subagent``): it is at most ``MAX_SCHEMA_BYTES``, every ``$ref`` must resolve
inside it (nothing is ever fetched), and its patterns must be RE2 patterns. The answer
is the model's, so hostile: it is checked for size, depth and finite numbers before
the schema sees it, patterns are matched in linear time (RE2), ``uniqueItems`` in
linear time, and a check stops after ``CHECK_SECONDS`` of CPU time however the schema
and the answer combine (nested ``anyOf`` over a deep answer can take exponential time).

Pure: the client checks a schema before spawning (and ``start_subagent``, in workflow
code, before starting a child), and the model-turn activity checks each answer.
"""

from __future__ import annotations

import contextvars
import functools
import json
import math
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

from pydantic import BaseModel

from durable_subagents.errors import InvalidRequest, PayloadTooLarge
from durable_subagents.runtime._lazy import imported
from durable_subagents.types import ToolCall, ToolSpec

if TYPE_CHECKING:
    from jsonschema.exceptions import ValidationError

# jsonschema, referencing and re2 are imported by the first schema or answer checked
# (see ``_lazy``): a client that never passes an output schema never loads them.

__all__ = [
    "ANSWER_RETRIES",
    "CHECK_SECONDS",
    "FINAL_ANSWER_TOOL",
    "MAX_ANSWER_BYTES",
    "MAX_ANSWER_DEPTH",
    "MAX_SCHEMA_BYTES",
    "Judgement",
    "answer_json",
    "answer_tool",
    "check_output_schema",
    "json_depth",
    "judge_answer",
    "schema_text",
]

FINAL_ANSWER_TOOL = "final_answer"
"""The tool a model gives its structured answer with."""
MAX_SCHEMA_BYTES = 32 * 1024
"""Largest output schema (compact JSON): it is sent to the model every turn."""
MAX_SCHEMA_DEPTH = 64
"""Deepest nesting of an output schema's JSON."""
MAX_ANSWER_BYTES = 64 * 1024
"""Largest structured answer (compact JSON): the task's result carries it whole."""
MAX_ANSWER_DEPTH = 32
"""Deepest nesting of a structured answer (as of any tool call's arguments)."""
ANSWER_RETRIES = 2
"""Times an answer that does not match goes back to the model with what was wrong;
the next one that does not match fails the task."""
CHECK_SECONDS = 1.0
"""CPU seconds one answer's check may take (a 64 KiB answer of 12,000 values takes
about 0.1 s); an answer and a schema that need more fail the check."""

_DATA_KEYWORDS = frozenset({"const", "enum", "default", "examples"})
"""Keywords whose values are data, not subschemas (a ``$ref`` in them is no reference)."""

_DIALECTS = {
    "https://json-schema.org/draft/2020-12/schema": "Draft202012Validator",
    "https://json-schema.org/draft/2019-09/schema": "Draft201909Validator",
    "http://json-schema.org/draft-07/schema": "Draft7Validator",
}
"""Dialects answers are checked with, and their validators in ``jsonschema``."""


# ---------------------------------------------------------------------- the schema


def check_output_schema(value: object) -> dict[str, Any]:
    """Check an output schema as a spawn gives it, and return it as plain JSON data.

    Args:
        value: A JSON Schema (a mapping) or a pydantic model class.

    Returns:
        The schema (its ``model_json_schema()`` for a pydantic class).

    Raises:
        PayloadTooLarge: it is over ``MAX_SCHEMA_BYTES``.
        InvalidRequest: it is not a valid JSON Schema, does not describe an object, has
            a ``$ref`` that does not resolve within it, or a pattern RE2 cannot run.
    """
    if isinstance(value, type) and issubclass(value, BaseModel):
        value = value.model_json_schema()
    if not isinstance(value, Mapping):
        raise InvalidRequest(
            "output_schema must be a JSON Schema (a dict) or a pydantic model class, got "
            f"{type(value).__name__}"
        )
    if json_depth(value, MAX_SCHEMA_DEPTH) > MAX_SCHEMA_DEPTH:
        raise InvalidRequest(f"output_schema is nested over {MAX_SCHEMA_DEPTH} levels")
    try:
        text = json.dumps(value, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as err:
        raise InvalidRequest(f"output_schema must be JSON data: {err}") from None
    size = len(text.encode())
    if size > MAX_SCHEMA_BYTES:
        raise PayloadTooLarge(
            f"output_schema is {size} bytes, over the {MAX_SCHEMA_BYTES}-byte limit; the "
            "model reads it every turn: keep it to the fields the answer needs"
        )
    schema: dict[str, Any] = json.loads(text)
    if schema.get("type") != "object":
        raise InvalidRequest(
            'output_schema must describe a JSON object ("type": "object" at its root): '
            "the answer is given as a tool call's arguments, which are an object; put a "
            'list or a single value in a property, e.g. {"type": "object", "properties": '
            '{"items": {"type": "array"}}}'
        )
    cls = _dialect(schema)
    try:
        cls.check_schema(schema)
    except imported("jsonschema.exceptions").SchemaError as err:
        raise InvalidRequest(
            f"output_schema is not a valid JSON Schema: at {err.json_path}: {_cut(err.message)}"
        ) from None
    _check_patterns(schema)
    _check_refs(schema, cls)
    return schema


def schema_text(schema: Mapping[str, Any]) -> str:
    """A checked schema as compact JSON: what activities receive and cache by."""
    return json.dumps(schema, separators=(",", ":"))


def answer_tool(schema: Mapping[str, Any]) -> ToolSpec:
    """The ``final_answer`` tool a model with an output schema is offered."""
    description = (
        "Give your final answer: call this tool once you are done, with the answer as its "
        "arguments. The task ends when the answer matches these parameters; a reply in "
        "plain text is not taken as the answer unless it is such a JSON object."
    )
    about = schema.get("description")
    if isinstance(about, str) and about.strip():
        description += " The answer: " + about.strip()
    parameters = {k: v for k, v in schema.items() if k != "$schema"}
    return ToolSpec(name=FINAL_ANSWER_TOOL, description=description, parameters=parameters)


def _dialect(schema: Mapping[str, Any]) -> Any:
    jsonschema = imported("jsonschema")
    uri = schema.get("$schema")
    if uri is None:
        return jsonschema.Draft202012Validator
    name = _DIALECTS.get(uri.rstrip("#")) if isinstance(uri, str) else None
    if name is None:
        raise InvalidRequest(
            f"output_schema: $schema {uri!r:.100} is not a dialect answers are checked with; "
            "use draft 2020-12 (leave $schema out), 2019-09 or draft-07"
        )
    return getattr(jsonschema, name)


def _nodes(schema: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every object of a schema with its JSON path, data keywords' values left out."""
    stack: list[tuple[str, Any]] = [("$", schema)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, dict):
            yield path, node
            stack += [(f"{path}.{k}", v) for k, v in node.items() if k not in _DATA_KEYWORDS]
        elif isinstance(node, list):
            stack += [(f"{path}[{i}]", v) for i, v in enumerate(node)]


def _check_patterns(schema: dict[str, Any]) -> None:
    """Patterns must compile with RE2, which matches in time linear in the answer."""
    re2 = imported("re2")
    pattern_properties = unevaluated = False
    for path, node in _nodes(schema):
        patterns = []
        if isinstance(node.get("pattern"), str):
            patterns.append(node["pattern"])
        if isinstance(node.get("patternProperties"), dict):
            pattern_properties = True
            patterns += list(node["patternProperties"])
        unevaluated = unevaluated or "unevaluatedProperties" in node
        for pattern in patterns:
            try:
                _regex(pattern)
            except re2.error:
                raise InvalidRequest(
                    f"output_schema: pattern {pattern!r:.100} at {path} cannot be used: "
                    "patterns are matched with RE2 (in linear time), which has no "
                    "lookaround and no backreferences"
                ) from None
    if pattern_properties and unevaluated:
        raise InvalidRequest(
            "output_schema uses both patternProperties and unevaluatedProperties, which "
            "answers cannot be checked with in bounded time; use additionalProperties"
        )


def _check_refs(schema: dict[str, Any], cls: Any) -> None:
    """Every ``$ref`` must resolve within the schema: nothing is ever fetched."""
    referencing = imported("referencing")
    imported("referencing.jsonschema")
    imported("referencing.exceptions")
    spec = referencing.jsonschema.specification_with(cls.META_SCHEMA["$id"])
    root = spec.create_resource(schema)
    registry = referencing.Registry().with_resource(root.id() or "", root).crawl()
    stack: list[tuple[str, Any, Any]] = [("$", schema, registry.resolver_with_root(root))]
    while stack:
        path, node, resolver = stack.pop()
        if isinstance(node, list):
            stack += [(f"{path}[{i}]", v, resolver) for i, v in enumerate(node)]
            continue
        if not isinstance(node, dict):
            continue
        if path != "$" and isinstance(node.get("$id"), str):
            resolver = resolver.in_subresource(spec.create_resource(node))
        ref = node.get("$ref")
        if isinstance(ref, str):
            try:
                resolver.lookup(ref)
            except (referencing.exceptions.Unresolvable, LookupError) as err:
                raise InvalidRequest(
                    f"output_schema: $ref {ref!r:.200} at {path} does not resolve "
                    f"({type(err).__name__}); define what it names in the schema (under "
                    "$defs): references are never fetched"
                ) from None
        stack += [(f"{path}.{k}", v, resolver) for k, v in node.items() if k not in _DATA_KEYWORDS]


# ---------------------------------------------------------------------- the answer


@dataclass(frozen=True)
class Judgement:
    """What one model answer was, against the output schema.

    Attributes:
        output: The answer, when it matches.
        error: What is wrong with it, when it does not (bounded, for the model to read).
        call_id: The ``final_answer`` call it came with; None for a plain-text reply.
    """

    output: dict[str, Any] | None = None
    error: str | None = None
    call_id: str | None = None


def judge_answer(schema: str, calls: list[ToolCall], text: str) -> Judgement | None:
    """Judge a model's turn as an answer, or None when it is no answer (it called tools).

    Args:
        schema: The checked schema as ``schema_text`` gave it.
        calls: The turn's tool calls, with their whole arguments.
        text: The turn's text.
    """
    answers = [c for c in calls if c.name == FINAL_ANSWER_TOOL]
    if answers:
        call = answers[0]
        if set(call.arguments) == {"_raw"}:
            return Judgement(error="the arguments were not a JSON object", call_id=call.id)
        errors = _answer_errors(schema, call.arguments)
        if errors:
            return Judgement(error=errors, call_id=call.id)
        return Judgement(output=call.arguments, call_id=call.id)
    if calls:
        return None
    value, error = _parse_text(text)
    if error is None:
        error = _answer_errors(schema, value)
    if error:
        return Judgement(error=error)
    return Judgement(output=value)


def answer_json(value: Any) -> str:
    """An answer as the task's result: compact JSON, non-ASCII kept."""
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def _parse_text(text: str) -> tuple[Any, str | None]:
    """A text reply as JSON: itself, or inside one fenced code block."""
    body = text.strip()
    if body.startswith("```") and body.endswith("```") and len(body) > 6:
        body = body[3:-3]
        first, _, rest = body.partition("\n")
        body = rest if not first.strip().startswith(("{", "[")) else body
    if len(body.encode()) > 2 * MAX_ANSWER_BYTES:
        return None, (
            f"the reply is over {MAX_ANSWER_BYTES} bytes, the limit of an answer; give a "
            "shorter one"
        )
    if not body.lstrip().startswith("{"):
        return None, "the reply was text, not a JSON object"
    try:
        return json.loads(body, parse_constant=_no_constant, parse_float=_finite), None
    except (ValueError, RecursionError):
        return None, "the reply was not valid JSON"


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError("numbers must be finite")
    return value


def _answer_errors(schema: str, value: Any) -> str | None:
    """What is wrong with an answer, or None when it matches the schema."""
    if not isinstance(value, dict):
        return f"the answer must be a JSON object, not {_json_type(value)}"
    if json_depth(value, MAX_ANSWER_DEPTH) > MAX_ANSWER_DEPTH:
        return f"the answer is nested over {MAX_ANSWER_DEPTH} levels"
    if not _all_finite(value):
        return "the answer has a number that is not finite (NaN or infinity)"
    size = len(answer_json(value).encode())
    if size > MAX_ANSWER_BYTES:
        return (
            f"the answer is {size} bytes, over the {MAX_ANSWER_BYTES}-byte limit of a "
            "structured answer; give a shorter one"
        )
    return _schema_errors(schema, value)


def _schema_errors(schema: str, value: dict[str, Any]) -> str | None:
    validator = _validator(schema)
    token = _BUDGET.set(_Budget(time.thread_time() + CHECK_SECONDS))
    found: list[ValidationError] = []
    try:
        for error in validator.iter_errors(value):
            found.append(error)
            if len(found) >= 10:
                break
    except _TooCostly:
        return (
            f"checking the answer against the schema took over {CHECK_SECONDS:g} s; give "
            "a smaller answer"
        )
    except RecursionError:
        return "the schema refers to itself without end for this answer"
    except Exception as err:  # a schema no spawn check refused, which jsonschema cannot apply
        return (
            f"the schema cannot be applied to this answer: {type(err).__name__}: {_cut(str(err))}"
        )
    finally:
        _BUDGET.reset(token)
    if not found:
        return None
    found.sort(key=lambda e: e.json_path)
    # A message starts with the value (its repr): the middle is cut, so a long value
    # leaves what is wrong with it ("... is too long") in view.
    lines = [f"{e.json_path}: {_cut_middle(e.message)}" for e in found]
    return "; ".join(lines)[:2000]


def _json_type(value: Any) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    return "a number"


def json_depth(value: Any, limit: int) -> int:
    """Nesting depth of JSON-like data, counting no further than ``limit + 1``."""
    depth, level = 0, [value]
    while level and depth <= limit:
        depth += 1
        nxt: list[Any] = []
        for item in level:
            if isinstance(item, Mapping):
                nxt.extend(item.values())
            elif isinstance(item, list | tuple):
                nxt.extend(item)
        level = nxt
    return depth if not level else limit + 1


def _all_finite(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return False
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return True


def _cut(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _cut_middle(text: str, limit: int = 240) -> str:
    if len(text) <= limit:
        return text
    tail = limit * 2 // 3
    return text[: limit - tail - 1] + "…" + text[-tail:]


# ---------------------------------------------------------------------- the checker


class _TooCostly(Exception):
    """A check spent its ``CHECK_SECONDS``."""


@dataclass
class _Budget:
    """When the check running in this thread must stop (``time.thread_time()``)."""

    deadline: float
    steps: int = 0


_BUDGET: contextvars.ContextVar[_Budget | None] = contextvars.ContextVar(
    "output_schema_budget", default=None
)
_CLOCK_EVERY = 16
"""Keyword evaluations between two looks at the clock (each look is a system call)."""

_Keyword: TypeAlias = "Callable[[Any, Any, Any, Any], Iterator[ValidationError]]"


def _counted(keyword: _Keyword) -> _Keyword:
    """A keyword that stops the check once its time is spent."""

    def counted(validator: Any, value: Any, instance: Any, schema: Any) -> Iterator[Any]:
        budget = _BUDGET.get()
        if budget is not None:
            budget.steps += 1
            if budget.steps % _CLOCK_EVERY == 0 and time.thread_time() > budget.deadline:
                raise _TooCostly
        yield from keyword(validator, value, instance, schema)

    return counted


@functools.lru_cache(maxsize=1024)
def _regex(pattern: str) -> Any:
    re2 = imported("re2")
    options = re2.Options()
    options.max_mem = 8 << 20
    options.log_errors = False
    return re2.compile(pattern, options)


def _matches(pattern: str, text: str) -> bool:
    return _regex(pattern).search(text) is not None


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[Any]:
    if validator.is_type(instance, "string") and not _matches(pattern, instance):
        yield imported("jsonschema.exceptions").ValidationError(
            f"{_cut(repr(instance), 80)} does not match {_cut(repr(pattern))}"
        )


def _pattern_properties(
    validator: Any, patterns: dict[str, Any], instance: Any, schema: Any
) -> Iterator[Any]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if _matches(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(
    validator: Any, additional: Any, instance: Any, schema: Any
) -> Iterator[Any]:
    if not validator.is_type(instance, "object"):
        return
    properties = schema.get("properties", {})
    patterns = list(schema.get("patternProperties", {}))
    extras = [
        k for k in instance if k not in properties and not any(_matches(p, k) for p in patterns)
    ]
    if validator.is_type(additional, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], additional, path=extra)
    elif not additional and extras:
        named = ", ".join(_cut(repr(k), 60) for k in sorted(extras)[:10])
        more = f" and {len(extras) - 10} more" if len(extras) > 10 else ""
        yield imported("jsonschema.exceptions").ValidationError(
            f"additional properties are not allowed ({named}{more})"
        )


def _unique_items(validator: Any, unique: Any, instance: Any, schema: Any) -> Iterator[Any]:
    if not unique or not validator.is_type(instance, "array"):
        return
    seen: set[str] = set()
    for index, item in enumerate(instance):
        key = json.dumps(_canonical(item), sort_keys=True)
        if key in seen:
            yield imported("jsonschema.exceptions").ValidationError(
                f"has non-unique elements (item {index} repeats an earlier one)"
            )
            return
        seen.add(key)


def _canonical(value: Any) -> Any:
    """JSON Schema's equality as Python's: 1 and 1.0 are one number, true is no number."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _canonical(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_canonical(v) for v in value]
    return value


_LINEAR = {
    "pattern": _pattern,
    "patternProperties": _pattern_properties,
    "additionalProperties": _additional_properties,
    "uniqueItems": _unique_items,
}


@functools.cache
def _checking(base: Any) -> Any:
    """``base`` with linear-time keywords, each evaluation within the check's time."""
    keywords = {**base.VALIDATORS, **_LINEAR}
    return imported("jsonschema.validators").extend(
        base, {name: _counted(keyword) for name, keyword in keywords.items()}
    )


@functools.lru_cache(maxsize=64)
def _validator(text: str) -> Any:
    schema = json.loads(text)
    # An empty registry: a reference is looked up in the schema alone, never fetched.
    return _checking(_dialect(schema))(schema, registry=imported("referencing").Registry())
