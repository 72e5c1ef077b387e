"""What the workflow sandbox lets through unchecked holds nothing nondeterministic unseen.

``PASSTHROUGH_MODULES`` are imported once, outside the sandbox, and their calls are not
checked. Every module of the library they bring in (and what those import) is scanned
for the calls a workflow must never make (the clock, randomness, the environment,
files, processes, sockets). A module that has one must be named below, with why
workflow code never reaches it: a new such call fails here until someone looked.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import grimp

from durable_subagents.worker._worker import PASSTHROUGH_MODULES, SANDBOX_CHECKED

REVIEWED = {
    "durable_subagents.agents._file_formats": "reads agent files: clients only",
    "durable_subagents.agents._files": "finds agent files: clients only",
    "durable_subagents.providers._errors": (
        "dates a provider's Retry-After: the worker's model calls only (spawn._task_input "
        "imports providers._names inside build_task_input's check_model, which workflow "
        "code turns off)"
    ),
    "durable_subagents.providers.scripted": "reads a script file: the worker's provider only",
}
"""Passed-through modules with such calls, and why no workflow calls them."""

UNSAFE = {
    "datetime": {"now", "utcnow", "today"},
    "time": {"time", "monotonic", "perf_counter", "sleep", "time_ns"},
    "os": {"environ", "getenv", "urandom", "listdir", "scandir", "walk"},
    "uuid": {"uuid1", "uuid4"},
    "random": None,
    "secrets": None,
    "subprocess": None,
    "socket": None,
}
FILE_METHODS = {"read_text", "read_bytes", "write_text", "write_bytes", "iterdir", "glob", "rglob"}


def unsafe_calls(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute):
            # ``datetime.now`` and ``datetime.datetime.now`` alike: the name before it
            base = node.value
            name = base.id if isinstance(base, ast.Name) else getattr(base, "attr", "")
            names = UNSAFE.get(name, set())
            if names is None or node.attr in names:
                found.add(f"{name}.{node.attr}")
        if isinstance(node, ast.Attribute) and node.attr in FILE_METHODS:
            found.add(f".{node.attr}()")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id == "open":
                found.add("open()")
    return found


def passed_through() -> set[str]:
    graph = grimp.build_graph("durable_subagents")
    roots = [m for m in PASSTHROUGH_MODULES if m.startswith("durable_subagents.")]
    modules = {m for m in graph.modules for r in roots if m == r or m.startswith(r + ".")}
    for module in list(modules):
        modules |= graph.find_upstream_modules(module)
    return {m for m in modules if m.startswith("durable_subagents.")}


def test_passed_through_modules_make_no_nondeterministic_call_unreviewed() -> None:
    modules = passed_through()
    assert "durable_subagents.wire._payloads" in modules  # the scan sees what it should
    found = {}
    for module in sorted(modules):
        spec = importlib.util.find_spec(module)
        assert spec is not None and spec.origin is not None
        calls = unsafe_calls(Path(spec.origin))
        if calls:
            found[module] = sorted(calls)
    assert set(found) == set(REVIEWED), found


def test_the_workflows_are_never_passed_through() -> None:
    modules = passed_through()
    assert not {m for m in modules if m.startswith("durable_subagents.workflows")}
    assert not set(SANDBOX_CHECKED) & set(PASSTHROUGH_MODULES)


def test_the_scan_finds_a_planted_clock(tmp_path: Path) -> None:
    planted = tmp_path / "m.py"
    for code in ("from datetime import datetime\nx = datetime.now()\n",
                 "import datetime\nx = datetime.datetime.now()\n"):  # fmt: skip
        planted.write_text(code)
        assert unsafe_calls(planted) == {"datetime.now"}
    planted.write_text("import os\nx = os.environ['HOME']\ny = open('f')\n")
    assert unsafe_calls(planted) == {"os.environ", "open()"}
