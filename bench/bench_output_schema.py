"""What checking output schemas and structured answers costs.

Run: ``.venv/bin/python bench/bench_output_schema.py [--repeats 5]``

A spawn's schema is checked where the spawn is made (the client, or workflow code for
``start_subagent``); each answer is judged by the model-turn activity, in a thread.
Rows: schemas from a pydantic model to the 32 KiB limit, then answers from one line to
the 64 KiB limit, and the answers a hostile model would send against schemas that
invite them (a backtracking pattern, ``uniqueItems`` over thousands of objects, nested
``anyOf`` over a deep answer, which the check cuts off at ``CHECK_SECONDS``). CPU is the
calling thread's (``time.thread_time``); the machine is shared, so wall time varies more.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from datetime import date
from typing import Any

from pydantic import BaseModel

from durable_subagents.context._output_schema import (
    CHECK_SECONDS,
    FINAL_ANSWER_TOOL,
    check_output_schema,
    judge_answer,
    schema_text,
)
from durable_subagents.types import ToolCall


class Finding(BaseModel):
    path: str
    line: int
    note: str


class Review(BaseModel):
    verdict: str
    findings: list[Finding]


ROWS = {
    "type": "object",
    "properties": {
        "rows": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"n": {"type": "integer"}, "s": {"type": "string"}},
                "required": ["n", "s"],
            },
        }
    },
}

INTEGERS = {
    "type": "object",
    "properties": {"xs": {"type": "array", "items": {"type": "integer", "minimum": 0}}},
}
REVIEW = {
    "verdict": "pass",
    "findings": [{"path": "a.py", "line": i, "note": "ok"} for i in range(3)],
}


def wide(properties: int) -> dict[str, Any]:
    props = {
        f"p{i}": {"type": "string", "pattern": "^[a-z]+$", "maxLength": 10}
        for i in range(properties)
    }
    return {"type": "object", "properties": props}


def exponential(levels: int) -> tuple[dict[str, Any], Any]:
    defs: dict[str, Any] = {
        f"d{i}": {"anyOf": [{"$ref": f"#/$defs/d{i + 1}"}, {"$ref": f"#/$defs/e{i + 1}"}]}
        for i in range(levels)
    }
    for i in range(1, levels + 1):
        defs[f"e{i}"] = {"type": "object", "properties": {"a": {"$ref": f"#/$defs/d{i}"}}}
    defs[f"d{levels}"] = {"type": "object", "properties": {"a": {"type": "string"}}}
    deep: Any = 1
    for _ in range(levels):
        deep = {"a": deep}
    return {"type": "object", "$defs": defs, "properties": {"a": {"$ref": "#/$defs/d0"}}}, deep


def measure(run: Callable[[], object], repeats: int) -> tuple[float, float, object]:
    cpu, wall, out = [], [], None
    for _ in range(repeats):
        c, w = time.thread_time(), time.perf_counter()
        out = run()
        cpu.append((time.thread_time() - c) * 1000)
        wall.append((time.perf_counter() - w) * 1000)
    return statistics.median(cpu), statistics.median(wall), out


def answer(schema: dict[str, Any], value: Any) -> Callable[[], object]:
    text = schema_text(check_output_schema(schema))
    call = ToolCall(id="c", name=FINAL_ANSWER_TOOL, arguments=value)
    return lambda: judge_answer(text, [call], "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(f"# output schemas and structured answers ({date.today()})\n")
    print("| what | size | CPU ms (p50) | wall ms (p50) | outcome |")
    print("|---|---|---|---|---|")
    schemas: dict[str, Any] = {
        "schema: a pydantic model": Review,
        "schema: 100 properties with patterns": wide(100),
        "schema: 520 properties (the 32 KiB limit)": wide(520),
    }
    for label, schema in schemas.items():
        cpu, wall, checked = measure(lambda s=schema: check_output_schema(s), args.repeats)
        size = len(schema_text(checked))  # type: ignore[arg-type]
        print(f"| {label} | {size / 1024:.1f} KiB | {cpu:.1f} | {wall:.1f} | accepted |")
    levels = 25
    hostile_schema, deep = exponential(levels)
    answers: dict[str, tuple[dict[str, Any], Any]] = {
        "answer: a review with 3 findings": (Review.model_json_schema(), REVIEW),
        "answer: 3,000 rows (the 64 KiB limit)": (
            ROWS,
            {"rows": [{"n": i, "s": "x"} for i in range(3_000)]},
        ),
        "answer: 12,000 integers": (INTEGERS, {"xs": list(range(12_000))}),
        "hostile: 30,000 a's then ! against ^(a+)+$": (
            {"type": "object", "properties": {"s": {"type": "string", "pattern": "^(a+)+$"}}},
            {"s": "a" * 30_000 + "!"},
        ),
        "hostile: uniqueItems over 6,000 objects": (
            {"type": "object", "properties": {"xs": {"type": "array", "uniqueItems": True}}},
            {"xs": [{"n": i} for i in range(6_000)]},
        ),
        f"hostile: anyOf nested {levels} deep (cut at {CHECK_SECONDS:g} s)": (hostile_schema, deep),
    }
    for label, (schema, value) in answers.items():
        repeats = 1 if label.startswith("hostile: anyOf") else args.repeats
        cpu, wall, judged = measure(answer(schema, value), repeats)
        size = len(json.dumps(value, separators=(",", ":")))
        error = getattr(judged, "error", None)
        outcome = "matches" if error is None else f"refused: {error[:60]}"
        print(f"| {label} | {size / 1024:.1f} KiB | {cpu:.1f} | {wall:.1f} | {outcome} |")


if __name__ == "__main__":
    main()
