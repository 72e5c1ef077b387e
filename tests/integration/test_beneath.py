"""Paths resolve beneath the workspace for any symlink layout, even one that changes."""

from __future__ import annotations

import asyncio
import ctypes
import os
import shutil
import stat
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from durable_subagents.tools import ToolContext, ToolError
from durable_subagents.tools._confined_open import Escape, open_beneath, resolve_beneath
from durable_subagents.tools._files import edit_file, read_file, write_file
from durable_subagents.tools._search import grep, list_files

SECRET = "SECRET-OUTSIDE"
NAMES = ["a", "b", "l1", "l2", "l3", "f"]
COMPONENTS = [*NAMES, "..", ".", "", "outside", "secret"]
TARGETS = st.sampled_from(
    [
        ".",
        "..",
        "../..",
        "../outside",
        "../outside/secret",
        "/",
        "/etc",
        "a",
        "a/b",
        "b/..",
        "../ws/a",
        "l1",
        "l2/f",
        "a/../../outside",
        "WS",  # replaced by the workspace's absolute path
        "WS/a",
        "WS/../outside/secret",
    ]
)
LAYOUT = st.lists(
    st.tuples(
        st.lists(st.sampled_from(["a", "b"]), max_size=2),
        st.sampled_from(NAMES),
        st.one_of(st.just("dir"), st.just("file"), TARGETS),
    ),
    max_size=8,
)
PATHS = st.lists(st.sampled_from(COMPONENTS), min_size=1, max_size=8).map("/".join)


@contextmanager
def _tree(layout: list[tuple[list[str], str, str]]) -> Iterator[Path]:
    top = Path(tempfile.mkdtemp())
    try:
        ws = top / "ws"
        ws.mkdir()
        (top / "outside").mkdir()
        (top / "outside" / "secret").write_text(SECRET)
        for parents, name, kind in layout:
            where = ws.joinpath(*parents)
            if not where.is_dir() or where.is_symlink():
                continue
            entry = where / name
            if entry.exists() or entry.is_symlink():
                continue
            if kind == "dir":
                entry.mkdir()
            elif kind == "file":
                entry.write_text("inside")
            else:
                entry.symlink_to(kind.replace("WS", str(ws)))
        yield ws
    finally:
        shutil.rmtree(top)


def _where(fd: int) -> Path:
    return Path(os.readlink(f"/proc/self/fd/{fd}"))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layout=LAYOUT, paths=st.lists(PATHS, min_size=1, max_size=6))
def test_no_layout_or_path_resolves_outside(
    layout: list[tuple[list[str], str, str]], paths: list[str]
) -> None:
    with _tree(layout) as ws:
        for path in [*paths, *(str(ws) + "/" + p for p in paths)]:
            try:
                opened = open_beneath(ws, path, os.O_RDONLY | os.O_NONBLOCK)
            except (Escape, OSError):
                pass
            else:
                try:
                    real = _where(opened.fd)
                    assert real == ws or real.is_relative_to(ws), (path, real)
                    assert ws.joinpath(*opened.parts) == real  # the walk knows where it is
                    if stat.S_ISREG(os.fstat(opened.fd).st_mode):
                        assert os.read(opened.fd, 100) != SECRET.encode()
                finally:
                    os.close(opened.fd)
            try:
                parts = resolve_beneath(ws, path)
            except (Escape, OSError):
                continue
            assert ".." not in parts and "" not in parts
            resolved = ws.joinpath(*parts)
            if resolved.exists():
                assert resolved.resolve().is_relative_to(ws), (path, resolved)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layout=LAYOUT, path=PATHS, content=st.text(max_size=20))
def test_writes_never_land_outside(
    layout: list[tuple[list[str], str, str]], path: str, content: str
) -> None:
    with _tree(layout) as ws:
        ctx = ToolContext(workspace=ws, task_id="t")
        before = sorted(p.name for p in (ws.parent / "outside").iterdir())
        try:
            asyncio.run(write_file.run(ctx, {"path": path, "content": content}))
        except ToolError:
            pass
        assert (ws.parent / "outside" / "secret").read_text() == SECRET
        assert sorted(p.name for p in (ws.parent / "outside").iterdir()) == before
        assert not any(p.name in NAMES for p in ws.parent.iterdir() if p.name != "ws")


_libc = ctypes.CDLL(None, use_errno=True)
_RENAME_EXCHANGE = 2


def _exchange(a: Path, b: Path) -> None:
    if _libc.renameat2(-100, bytes(a), -100, bytes(b), _RENAME_EXCHANGE) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


@contextmanager
def _swapping(ws: Path) -> Iterator[None]:
    """Swap ``ws/d`` (a directory) with a symlink to the outside, as fast as possible."""
    (ws / "d").mkdir()
    (ws / "d" / "x").write_text("inside\n")
    (ws / "swap").symlink_to(ws.parent / "outside")
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            _exchange(ws / "d", ws / "swap")

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


@pytest.fixture
def race_ws(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "x").write_text(SECRET + "\n")
    return ws


async def test_a_symlink_swapped_in_a_loop_never_leads_a_tool_out(race_ws: Path) -> None:
    ws = race_ws
    ctx = ToolContext(workspace=ws, task_id="t")
    outside = ws.parent / "outside" / "x"
    outputs: list[str] = []
    with _swapping(ws):
        for i in range(300):
            for tool, args in (
                (read_file, {"path": "d/x"}),
                (grep, {"pattern": "SECRET|inside"}),
                (list_files, {"pattern": "**/*"}),
                (write_file, {"path": "d/x", "content": f"inside {i}\n"}),
                (edit_file, {"path": "d/x", "old": "inside", "new": "inside!"}),
            ):
                try:
                    outputs.append(await tool.run(ctx, args))
                except ToolError as err:
                    outputs.append(str(err))
    assert outside.read_text() == SECRET + "\n"  # never written
    assert not any(SECRET in out for out in outputs)  # never read
    assert sum("inside" in out for out in outputs) > 100  # and the tools still worked


def test_a_missing_name_and_its_dotdot_do_not_hide_a_symlink_out(tmp_path: Path) -> None:
    """``missing/../b`` is ``b``: when ``b`` is a symlink out of the workspace, the path
    escapes like ``b`` itself (found by the property test above; the part after a missing
    name used to be taken as written, ``..`` included)."""
    ws = tmp_path / "ws"
    (ws / "d").mkdir(parents=True)
    (ws / "b").symlink_to("..")
    for path in ("b", "a/../b", "a/x/../../b/y", "d/a/../../b"):
        with pytest.raises(Escape):
            resolve_beneath(ws, path)
    assert resolve_beneath(ws, "a/../d/new") == ("d", "new")
    assert resolve_beneath(ws, "d/a/b/../c") == ("d", "a", "c")
    with pytest.raises(Escape):
        resolve_beneath(ws, "a/../../x")
