"""The package's house rules: no import circles, and modules a reader can hold."""

from __future__ import annotations

from pathlib import Path

import grimp

PACKAGE = Path(__file__).resolve().parents[2] / "durable_subagents"
MAX_LINES = 600
OVERSIZE: dict[str, int] = {}
"""Modules over ``MAX_LINES`` today, each at most its present size: they may only shrink
(each is to be split along what it holds)."""


def circles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The import graph's strongly connected parts of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for other in graph.find_modules_directly_imported_by(module):
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in on_stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            part = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                part.append(top)
                if top == module:
                    break
            if len(part) > 1:
                found.append(sorted(part))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return found


def test_no_module_imports_itself_through_others() -> None:
    # Imports under TYPE_CHECKING and inside functions count: a circle of types is one.
    graph = grimp.build_graph("durable_subagents")
    assert circles(graph) == []


def test_the_circle_finder_finds_a_circle() -> None:
    graph = grimp.ImportGraph()
    for a, b in (("p.a", "p.b"), ("p.b", "p.c"), ("p.c", "p.a"), ("p.c", "p.d")):
        graph.add_import(importer=a, imported=b)
    assert circles(graph) == [["p.a", "p.b", "p.c"]]


def test_no_module_grows_past_the_line_limit() -> None:
    over = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        name = path.relative_to(PACKAGE).as_posix()
        lines = len(path.read_text().splitlines())
        if lines > OVERSIZE.get(name, MAX_LINES):
            over[name] = lines
    assert not over, f"over {MAX_LINES} lines (split them along what they hold): {over}"


def test_no_production_module_imports_the_testing_package() -> None:
    """``subagents dev`` and ``demo`` run the dev server from ``devserver``: nothing a
    worker, a client or the CLI runs imports ``testing`` (its fakes, its helpers)."""
    graph = grimp.build_graph("durable_subagents")
    testing = "durable_subagents.testing"
    importers = {
        m
        for m in graph.find_modules_that_directly_import(testing)
        | {
            m
            for t in graph.find_descendants(testing)
            for m in graph.find_modules_that_directly_import(t)
        }
        if m != testing and not m.startswith(testing + ".")
    }
    assert not importers, importers


def test_the_package_root_holds_only_its_public_face_and_packages() -> None:
    """Private modules live in packages named for what they hold, not loose at the root."""
    loose = sorted(
        p.name
        for p in PACKAGE.glob("*.py")
        if p.name not in ("__init__.py", "__main__.py", "config.py", "errors.py", "types.py")
    )
    assert not loose, f"modules loose at the package root (put them in a package): {loose}"
