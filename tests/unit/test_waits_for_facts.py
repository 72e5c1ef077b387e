"""No test sleeps a guessed time and then asserts that something did not happen.

``await asyncio.sleep(1.5)`` followed by ``assert not ...`` passes without testing
anything when the machine is slow: the thing had not happened yet. A test waits for a
positive sign first (a marker file, a pending activity, a process seen, a visibility
count; see ``tests/helpers``), then asserts the absence. CONTRIBUTING.md states the rule;
a sleep that is not a guess says why on its line: ``# fact-checked: <reason>``.
"""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Iterator
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
MARKER = "# fact-checked:"
WINDOW = 3
"""How many statements after a sleep, in the same block, are checked."""

EMPTY = (None, False, 0, "", b"")


def _constant_sleep(stmt: ast.stmt) -> bool:
    """``[await] asyncio.sleep(N)`` or ``time.sleep(N)`` with N a positive number."""
    if not isinstance(stmt, ast.Expr):
        return False
    call = stmt.value.value if isinstance(stmt.value, ast.Await) else stmt.value
    if not (
        isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and call.func.attr == "sleep"
        and isinstance(call.func.value, ast.Name)
        and call.func.value.id in ("asyncio", "time")
        and len(call.args) == 1
    ):
        return False
    arg = call.args[0]
    return (
        isinstance(arg, ast.Constant)
        and isinstance(arg.value, int | float)
        and not isinstance(arg.value, bool)
        and arg.value > 0
    )


def _empty(node: ast.expr) -> bool:
    if isinstance(node, ast.Constant):
        return any(
            node.value is e or (node.value == e and type(node.value) is type(e)) for e in EMPTY
        )
    if isinstance(node, ast.List | ast.Tuple | ast.Set):
        return not node.elts
    if isinstance(node, ast.Dict):
        return not node.keys
    return False


def _negative(test: ast.expr) -> bool:
    """Whether an assertion's test claims an absence: ``not x``, ``x not in y``,
    ``x is None``, ``x == 0``/``[]``/``False``..., or a conjunction holding one."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return True
    if isinstance(test, ast.BoolOp):
        return any(_negative(v) for v in test.values)
    if isinstance(test, ast.Compare):
        sides = [test.left, *test.comparators]
        for i, op in enumerate(test.ops):
            if isinstance(op, ast.NotIn):
                return True
            if isinstance(op, ast.Eq | ast.Is) and (_empty(sides[i]) or _empty(sides[i + 1])):
                return True
    return False


def _blocks(tree: ast.AST) -> Iterator[tuple[ast.AST, list[ast.stmt]]]:
    for node in ast.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            block = getattr(node, field, None)
            if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                yield node, block


def guessed_waits(source: str, name: str = "<test>") -> list[str]:
    """``name:line`` of each constant sleep followed, within ``WINDOW`` statements, by an
    assertion of an absence; neither line marked ``# fact-checked:`` (on the line or on a
    comment line just above).

    The statements that follow a sleep are those after it in its block, then, past the
    end of a ``with``, ``if`` or ``try`` block, those after that statement.
    """
    lines = source.splitlines()
    # a marker on the line, or on a comment line just above it
    marked = {n for n, line in enumerate(lines, 1) if MARKER in line}
    marked |= {n + 1 for n in marked if lines[n - 1].lstrip().startswith("#")}
    position: dict[int, tuple[list[ast.stmt], int]] = {}
    owner: dict[int, ast.AST] = {}
    blocks = list(_blocks(ast.parse(source)))
    for node, block in blocks:
        owner[id(block)] = node
        for i, stmt in enumerate(block):
            position[id(stmt)] = (block, i)

    def following(block: list[ast.stmt], i: int) -> Iterator[ast.stmt]:
        yield from block[i + 1 :]
        node = owner[id(block)]
        if isinstance(node, ast.With | ast.AsyncWith | ast.If | ast.Try) and id(node) in position:
            yield from following(*position[id(node)])

    found = []
    for _, block in blocks:
        for i, stmt in enumerate(block):
            if not _constant_sleep(stmt) or stmt.lineno in marked:
                continue
            for _, after in zip(range(WINDOW), following(block, i), strict=False):
                asserts = [n for n in ast.walk(after) if isinstance(n, ast.Assert)]
                if any(_negative(a.test) and a.lineno not in marked for a in asserts):
                    found.append(f"{name}:{stmt.lineno}")
                    break
    return found


def test_no_test_asserts_an_absence_after_a_guessed_sleep() -> None:
    found = []
    for path in sorted(TESTS.rglob("*.py")):
        found += guessed_waits(path.read_text(), str(path.relative_to(TESTS.parent)))
    assert not found, (
        "a sleep of a guessed time, then an assertion that something did not happen: wait "
        "for a positive sign first (tests/helpers: eventually, wait_for, processes_matching"
        f"), or say why the sleep is no guess with '{MARKER} <reason>' on its line: {found}"
    )


def test_the_check_finds_a_guessed_sleep_and_honours_the_marker() -> None:
    planted = textwrap.dedent(
        """
        async def test_x():
            await asyncio.sleep(1.5)  # the victim's command runs now
            outputs = attack()
            assert "sleep 20" not in outputs[0]

        def test_y():
            time.sleep(2)
            assert found == []

        async def test_z():
            if ready:
                await asyncio.sleep(0.5)
                assert not path.exists() and count == 0

        async def test_marked():
            await asyncio.sleep(1)  # fact-checked: the server's TTL is 1 s by contract
            assert cache.get(key) is None

        async def test_polls():
            while not ready():
                assert time.monotonic() < deadline
                await asyncio.sleep(0.05)
            assert not failed

        async def test_past_the_block():
            async with worker():
                await asyncio.sleep(1.0)  # nothing more comes
                results = await notify_results()
            assert len(hits) == 6 and results == []

        async def test_waits_first():
            await wait_for(lambda: started(), what="the command")
            assert not leaked()
            await asyncio.sleep(0)
            assert value == 3
        """
    )
    assert sorted(guessed_waits(planted), key=lambda f: int(f.split(":")[1])) == [
        "<test>:3",
        "<test>:8",
        "<test>:13",
        "<test>:28",
    ]
