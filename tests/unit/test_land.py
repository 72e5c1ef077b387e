"""Landing a command's upper layer, built by hand: the judging and applying, no sandbox."""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from durable_subagents.agents import PROTECTED_PATHS
from durable_subagents.tools._held import describe
from durable_subagents.tools._land import Held, Landing, land, link_inside
from durable_subagents.tools._land_held import apply_held
from durable_subagents.tools._land_place import place_at

from ..helpers.missing import missing

ROOT = os.geteuid() == 0


@contextmanager
def opened(*paths: Path) -> Iterator[list[int]]:
    fds = [os.open(p, os.O_RDONLY | os.O_DIRECTORY) for p in paths]
    try:
        yield fds
    finally:
        for fd in fds:
            os.close(fd)


def landed(tmp_path: Path, since: int | None = None, **kwargs: object) -> Landing:
    with opened(tmp_path / "ws", tmp_path / "up") as (ws, up):
        return land(
            ws,
            up,
            workspace=str(tmp_path / "ws"),
            protected=kwargs.pop("protected", PROTECTED_PATHS),  # type: ignore[arg-type]
            since_ns=time.time_ns() if since is None else since,
            **kwargs,  # type: ignore[arg-type]
        )


@pytest.fixture
def tmp(tmp_path: Path) -> Path:
    (tmp_path / "ws").mkdir()
    (tmp_path / "up").mkdir()
    return tmp_path


def whiteout(path: Path) -> None:
    if not ROOT:
        pytest.skip(
            missing("root: a whiteout (character device 0, 0) is made by root or overlayfs")
        )
    os.mknod(path, stat.S_IFCHR | 0o600, 0)


def test_set_id_bits_are_dropped_and_extended_attributes_never_land(tmp: Path) -> None:
    tool = tmp / "up" / "tool"
    tool.write_text("#!/bin/sh\n")
    os.chmod(tool, 0o6755)
    os.setxattr(tool, "user.overlay.origin", b"x")
    os.setxattr(tool, "user.mine", b"y")
    landing = landed(tmp)
    assert landing.applied == ["tool"]
    info = os.stat(tmp / "ws" / "tool")
    assert stat.S_IMODE(info.st_mode) == 0o755
    assert os.listxattr(tmp / "ws" / "tool") == []
    assert landing.notes == ["[tool: its set-user-ID and set-group-ID bits were dropped]"]


def test_a_hard_linked_file_lands_as_copies(tmp: Path) -> None:
    (tmp / "up" / "a").write_text("one\n")
    os.link(tmp / "up" / "a", tmp / "up" / "b")
    assert sorted(landed(tmp).applied) == ["a", "b"]
    assert os.stat(tmp / "ws" / "a").st_ino != os.stat(tmp / "ws" / "b").st_ino


def test_an_opaque_directory_replaces_what_was_there(tmp: Path) -> None:
    (tmp / "ws" / "d").mkdir()
    (tmp / "ws" / "d" / "old").write_text("old\n")
    (tmp / "up" / "d").mkdir()
    (tmp / "up" / "d" / "new").write_text("new\n")
    os.setxattr(tmp / "up" / "d", "user.overlay.opaque", b"y")
    since = time.time_ns()
    landed(tmp, since)
    assert os.listdir(tmp / "ws" / "d") == ["new"]


def test_a_deleted_tree_keeps_its_protected_entries_and_what_changed(tmp: Path) -> None:
    lib = tmp / "ws" / "vendor" / "lib"
    (lib / ".git").mkdir(parents=True)
    (lib / ".git" / "config").write_text("[core]\n")
    (lib / "a.py").write_text("a\n")
    (lib / "b.py").write_text("b\n")
    since = time.time_ns()
    (lib / "b.py").write_text("changed by a person\n")
    whiteout(tmp / "up" / "vendor")
    landing = landed(tmp, since)
    assert sorted(os.listdir(lib)) == [".git", "b.py"]
    assert [(h.path, h.kind) for h in landing.held] == [("vendor/lib/.git", "delete")]
    assert landing.conflicts == ["vendor/lib/b.py"]
    refused = landed_refusing(tmp)
    assert refused.held == [] and [p for p, _ in refused.refused] == ["vendor/lib/.git"]


def landed_refusing(tmp: Path) -> Landing:
    return landed(tmp, hold="refuse")


@pytest.mark.parametrize(
    ("parts", "target", "inside"),
    [
        (("a",), "b", True),
        (("d", "a"), "../b", True),
        (("d", "a"), "../../b", False),
        (("a",), "sub/../..", False),
        (("a",), "lib/..", False),  # a '..' after a name: lib may be a symlink itself
        (("a",), "/ws/x", True),
        (("a",), "/ws/../etc", False),
        (("a",), "/etc/passwd", False),
        (("a",), "/wsx/a", False),
        (("a",), ".", True),
        (("a",), "", False),
    ],
)
def test_a_symlink_lands_only_where_it_cannot_lead_out(
    parts: tuple[str, ...], target: str, inside: bool
) -> None:
    assert link_inside(parts, target, "/ws") is inside


def test_a_symlink_standing_in_for_a_protected_path_is_held(tmp: Path) -> None:
    (tmp / "up" / ".config").symlink_to("elsewhere")
    (tmp / "up" / "sub").mkdir()
    (tmp / "up" / "sub" / ".github").symlink_to("../x")
    (tmp / "up" / "plain").symlink_to("elsewhere")
    landing = landed(tmp)
    assert sorted(h.path for h in landing.held) == [".config", "sub/.github"]
    assert landing.applied == ["plain", "sub"]


def test_writes_through_an_existing_alias_of_a_protected_path_are_held(tmp: Path) -> None:
    (tmp / "ws" / "dots" / "nested").mkdir(parents=True)
    (tmp / "ws" / ".config").symlink_to("dots")
    (tmp / "ws" / ".github").symlink_to("dots/nested")
    (tmp / "up" / "dots" / "nested" / "hooks").mkdir(parents=True)
    (tmp / "up" / "dots" / "mise.toml").write_text("[env]\n")
    (tmp / "up" / "dots" / "nested" / "hooks" / "x.json").write_text("{}\n")
    (tmp / "up" / "dots" / "notes.txt").write_text("fine\n")
    landing = landed(tmp)
    assert sorted(h.path for h in landing.held) == [
        "dots/mise.toml",
        "dots/nested/hooks",
        "dots/nested/hooks/x.json",
    ]
    assert (tmp / "ws" / "dots" / "notes.txt").read_text() == "fine\n"
    assert not (tmp / "ws" / "dots" / "mise.toml").exists()


def test_a_change_made_after_the_call_began_is_a_conflict(tmp: Path) -> None:
    (tmp / "ws" / "a").write_text("before\n")
    (tmp / "ws" / "b").write_text("before\n")
    since = time.time_ns()
    (tmp / "ws" / "a").write_text("the person's\n")
    (tmp / "up" / "a").write_text("the command's\n")
    (tmp / "up" / "b").write_text("the command's\n")
    landing = landed(tmp, since)
    assert landing.conflicts == ["a"] and landing.applied == ["b"]
    assert (tmp / "ws" / "a").read_text() == "the person's\n"
    assert (tmp / "ws" / "b").read_text() == "the command's\n"


def test_held_changes_apply_exactly_and_only_on_what_was_shown(tmp: Path) -> None:
    git = tmp / "ws" / ".git"
    git.mkdir()
    (git / "config").write_text("[core]\n")
    (tmp / "up" / ".git").mkdir()
    (tmp / "up" / ".git" / "config").write_text("[core]\n\tbare = false\n")
    (tmp / "up" / ".git" / "hooks").mkdir()
    (tmp / "up" / ".git" / "hooks" / "pre-commit").write_text("#!/bin/sh\n")
    os.chmod(tmp / "up" / ".git" / "hooks" / "pre-commit", 0o755)
    landing = landed(tmp)
    assert [(h.path, h.kind) for h in landing.held] == [
        (".git/config", "file"),
        (".git/hooks", "dir"),
        (".git/hooks/pre-commit", "file"),
    ]
    with opened(tmp / "ws") as (ws,):
        text = describe(ws, landing.held)
    assert ".git/config: changed, 7 -> 21 bytes [git runs its hooks and configured commands]" in (
        text
    )
    assert "+\tbare = false" in text
    assert ".git/hooks/pre-commit: new file, 10 bytes, mode 755" in text
    with opened(tmp / "ws") as (ws,):
        applied = apply_held(ws, landing.held, owner=None)
    assert applied.applied == [".git/config", ".git/hooks", ".git/hooks/pre-commit"]
    assert (git / "config").read_text() == "[core]\n\tbare = false\n"
    assert stat.S_IMODE(os.stat(git / "hooks" / "pre-commit").st_mode) == 0o755
    with opened(tmp / "ws") as (ws,):
        again = apply_held(ws, landing.held, owner=None)
    assert again.applied == applied.applied and again.conflicts == []  # a retry: no change


def test_a_held_change_waits_on_the_state_it_was_shown_against(tmp: Path) -> None:
    (tmp / "ws" / ".envrc").write_text("export A=1\n")
    (tmp / "up" / ".envrc").write_text("export A=2\n")
    landing = landed(tmp)
    (tmp / "ws" / ".envrc").write_text("export A=3\n")
    with opened(tmp / "ws") as (ws,):
        applied = apply_held(ws, landing.held, owner=None)
    assert applied.conflicts == [".envrc"]
    assert (tmp / "ws" / ".envrc").read_text() == "export A=3\n"


def test_an_agent_definition_is_named_as_one(tmp: Path) -> None:
    with opened(tmp / "ws") as (ws,):
        text = describe(
            ws,
            [
                Held("src/.claude/agents/explore.md", "file", content=b"---\n"),
                Held("src/.claude/settings.json", "file", content=b"{}\n"),
            ],
        )
    assert "src/.claude/agents/explore.md: new file, 4 bytes, mode 644 [an agent definition" in text
    assert "src/.claude/settings.json: new file, 3 bytes, mode 644 [agent configuration" in text


def test_held_bytes_are_bounded(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from durable_subagents.tools import _land

    monkeypatch.setattr(_land, "HELD_BYTES", 10)
    (tmp / "up" / ".git").mkdir()
    (tmp / "up" / ".git" / "big").write_bytes(b"x" * 11)
    landing = landed(tmp)
    assert [h.path for h in landing.held] == [".git"]  # the new directory, no bytes
    assert [p for p, _ in landing.refused] == [".git/big"]
    assert "too large to keep for a decision" in landing.refused[0][1]


def test_a_new_file_never_lands_over_one_that_came_meanwhile(tmp_path: Path) -> None:
    # Between a landing's look (nothing there) and its rename, another call's file came.
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "all").write_text("the other call's\n")
    (ws / "mine.tmp").write_text("mine\n")
    fd = os.open(ws, os.O_PATH | os.O_DIRECTORY)
    try:
        with pytest.raises(FileExistsError):
            place_at(fd, "mine.tmp", fd, "all", replace=False)
        assert (ws / "all").read_text() == "the other call's\n"
        place_at(fd, "mine.tmp", fd, "new", replace=False)
        assert (ws / "new").read_text() == "mine\n" and not (ws / "mine.tmp").exists()
    finally:
        os.close(fd)
