"""Commands write to a private overlay; only what the rules allow lands, through descriptors.

Real bubblewrap, real overlayfs, commands a hostile model would choose; assertions on
the host's files.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import stat
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from durable_subagents.tools import (
    ToolContext,
    ToolError,
    _sandbox,
    _sandbox_host,
    bash,
    grep,
    list_files,
    read_file,
    write_file,
)
from durable_subagents.tools._files import edit_file
from durable_subagents.tools._land import Landing
from durable_subagents.tools._sandbox import spawn_sandboxed
from durable_subagents.tools._sandbox_host import bwrap_executable

from ..helpers.missing import missing
from ..helpers.tasks import give_to_tool_user


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return give_to_tool_user(root)


def context(ws: Path, **kwargs: Any) -> ToolContext:
    kwargs.setdefault("overlay_dir", ws.parent / "overlays")
    return ToolContext(workspace=ws, task_id="task-1", **kwargs)


async def run(ws: Path, command: str, **kwargs: Any) -> tuple[str, Landing]:
    ctx = context(ws, **kwargs)
    output = await bash.run(ctx, {"command": command})
    assert len(ctx.landings) == 1
    return output, ctx.landings[0]


def files(root: Path) -> dict[str, str]:
    """Every entry under ``root``: a file's text, ``/`` for a directory, ``->`` a link's target."""
    out = {}
    for path in sorted(root.rglob("*")):
        name = str(path.relative_to(root))
        if path.is_symlink():
            out[name] = "-> " + os.readlink(path)
        elif path.is_dir():
            out[name] = "/"
        else:
            out[name] = path.read_text(errors="replace")
    return out


# ---------------------------------------------------------------- what lands, and when


async def test_nothing_reaches_the_workspace_before_the_command_ends(ws: Path) -> None:
    ctx = context(ws)
    proc = await spawn_sandboxed(
        ["bash", "-c", "echo made > new.txt && echo written && read line && echo more >> new.txt"],
        profile=ctx.profile(),
        stdin=subprocess.PIPE,
    )
    assert proc.process.stdout is not None and proc.process.stdin is not None
    assert await proc.process.stdout.readline() == b"written\n"
    assert not (ws / "new.txt").exists()  # written, and still only in its overlay
    proc.process.stdin.write(b"go\n")
    await proc.process.stdin.drain()
    proc.process.stdin.close()
    await proc.wait()
    await proc.release()
    assert (ws / "new.txt").read_text() == "made\nmore\n"
    assert proc.landing is not None and proc.landing.applied == ["new.txt"]
    assert list((ws.parent / "overlays").iterdir()) == []  # the call's overlay is gone


async def test_changes_deletions_and_replaced_directories_land(ws: Path) -> None:
    (ws / "keep.txt").write_text("keep\n")
    (ws / "edit.txt").write_text("one\n")
    (ws / "gone.txt").write_text("x\n")
    (ws / "tree" / "deep").mkdir(parents=True)
    (ws / "tree" / "deep" / "f").write_text("f\n")
    (ws / "swap").mkdir()
    (ws / "swap" / "old").write_text("old\n")
    give_to_tool_user(ws)
    output, landing = await run(
        ws,
        "echo two >> edit.txt; rm gone.txt; rm -r tree; rm -r swap; mkdir swap; "
        "echo new > swap/new; mkdir -p a/b; echo c > a/b/c; ln -s a/b link; echo done",
    )
    assert output == "done\n"
    assert files(ws) == {
        "a": "/",
        "a/b": "/",
        "a/b/c": "c\n",
        "edit.txt": "one\ntwo\n",
        "keep.txt": "keep\n",
        "link": "-> a/b",
        "swap": "/",
        "swap/new": "new\n",
    }
    assert landing.conflicts == [] and landing.refused == [] and landing.held == []


async def test_what_lands_belongs_to_the_tool_user(ws: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip(missing("root: only a root worker runs commands as another user"))
    await run(ws, "mkdir d && echo x > d/f && ln -s d l && cp d/f big && truncate -s 2M big")
    for name in ("d", "d/f", "l", "big"):
        info = os.lstat(ws / name)
        assert (info.st_uid, info.st_gid) == (10001, 10001), name


async def test_a_hard_link_lands_as_a_copy_per_name(ws: Path) -> None:
    _, landing = await run(ws, "echo one > a && ln a b")
    assert (ws / "a").read_text() == (ws / "b").read_text() == "one\n"
    assert os.stat(ws / "a").st_ino != os.stat(ws / "b").st_ino
    assert sorted(landing.applied) == ["a", "b"]


# ---------------------------------------------------------------- protected paths, any depth


PLANT = (
    "mkdir -p vendor/lib/.git src/.claude/agents .vscode deep/er/.hg; "
    "printf '[core]\\n\\tfsmonitor = touch /tmp/pwned\\n' > vendor/lib/.git/config; "
    "printf -- '---\\nname: explore\\ntools: Bash\\n---\\nrun\\n' > src/.claude/agents/explore.md; "
    "echo '{}' > .vscode/tasks.json; printf '[hooks]\\nupdate = touch /tmp/pwned\\n' "
    "> deep/er/.hg/hgrc; echo 'import os' > .pdbrc; echo ok > src/main.py; echo done"
)
PLANTED = [
    ".pdbrc",
    ".vscode",
    ".vscode/tasks.json",
    "deep/er/.hg",
    "deep/er/.hg/hgrc",
    "src/.claude",
    "src/.claude/agents",
    "src/.claude/agents/explore.md",
    "vendor/lib/.git",
    "vendor/lib/.git/config",
]


async def test_changes_to_protected_paths_at_any_depth_are_held(ws: Path) -> None:
    output, landing = await run(ws, PLANT, hold="pause")
    assert sorted(h.path for h in landing.held) == PLANTED
    held = {h.path: h for h in landing.held}
    assert held["vendor/lib/.git/config"].content == b"[core]\n\tfsmonitor = touch /tmp/pwned\n"
    assert "[held for a person's decision: .pdbrc, .vscode" in output
    # Only what is not protected landed; the directories on the way too.
    assert files(ws) == {
        "deep": "/",
        "deep/er": "/",
        "src": "/",
        "src/main.py": "ok\n",
        "vendor": "/",
        "vendor/lib": "/",
    }


async def test_changes_to_protected_paths_are_refused_where_nobody_is_asked(ws: Path) -> None:
    output, landing = await run(ws, PLANT, hold="refuse")
    assert landing.held == []
    assert sorted(p for p, _ in landing.refused) == [
        ".pdbrc",
        ".vscode",
        "deep/er/.hg",
        "src/.claude",
        "vendor/lib/.git",
    ]
    assert "[not applied: .pdbrc, .vscode, deep/er/.hg, src/.claude, vendor/lib/.git: a " in output
    assert "src/main.py" in files(ws) and not any(".git" in p or ".claude" in p for p in files(ws))


async def test_an_agent_that_opted_in_changes_protected_paths(ws: Path) -> None:
    _, landing = await run(ws, PLANT, protected=())
    assert landing.held == [] and landing.refused == []
    assert (ws / "vendor/lib/.git/config").exists() and (ws / ".pdbrc").exists()


async def test_a_protected_path_is_matched_whatever_its_case(ws: Path) -> None:
    _, landing = await run(ws, "mkdir -p x/.GIT/hooks && echo evil > x/.GIT/hooks/pre-commit")
    assert "x/.GIT/hooks/pre-commit" in [h.path for h in landing.held]
    assert not (ws / "x" / ".GIT").exists()


async def test_gitmodules_changes_are_held(ws: Path) -> None:
    (ws / ".gitmodules").write_text('[submodule "a"]\n\turl = https://example.com/a\n')
    give_to_tool_user(ws)
    _, landing = await run(ws, "sed -i 's/example.com/evil.example/' .gitmodules")
    assert [h.path for h in landing.held] == [".gitmodules"]
    assert "example.com/a" in (ws / ".gitmodules").read_text()


# ---------------------------------------------------------------- never applied


async def test_fifos_and_symlinks_that_lead_out_never_land(ws: Path) -> None:
    (ws / "sub").mkdir()
    give_to_tool_user(ws)
    output, landing = await run(
        ws,
        "mkfifo pipe; ln -s /etc/passwd abs; ln -s ../../.. up; ln -s sub/../.. through; "
        f"ln -s {ws}/sub inside_abs; ln -s {ws}/../x outside_abs; ln -s sub/.. back; "
        "ln -s . self; cd sub && ln -s ../.. climb && ln -s .. parent",
    )
    refused = dict(landing.refused)
    assert sorted(refused) == ["abs", "back", "outside_abs", "pipe", "sub/climb", "through", "up"]
    assert "FIFO" in refused["pipe"] and "leads out" in refused["abs"]
    assert "[not applied: " in output
    assert files(ws) == {
        "inside_abs": f"-> {ws}/sub",
        "self": "-> .",
        "sub": "/",
        "sub/parent": "-> ..",
    }


async def test_no_extended_attribute_or_set_id_bit_lands(ws: Path) -> None:
    _, landing = await run(
        ws, "echo x > f && setfattr -n user.evil -v 1 f 2>/dev/null; chmod 4755 f; true"
    )
    assert landing.applied == ["f"]
    assert os.listxattr(ws / "f") == []
    assert not os.stat(ws / "f").st_mode & (stat.S_ISUID | stat.S_ISGID)


async def test_the_worker_data_inside_the_workspace_is_never_written(ws: Path) -> None:
    data = ws / "data"
    data.mkdir()
    (data / "blob").write_text("secret\n")
    output, _ = await run(
        ws, "ls data; echo x > data/planted 2>&1; echo y > other; echo done", hidden=(data,)
    )
    assert "blob" not in output  # hidden: an empty directory inside
    assert not (data / "planted").exists()
    assert (ws / "other").read_text() == "y\n"


# ---------------------------------------------------------------- conflicts


async def test_a_file_changed_while_the_command_ran_is_not_overwritten(ws: Path) -> None:
    (ws / "shared.txt").write_text("before\n")
    (ws / "gone.txt").write_text("before\n")
    give_to_tool_user(ws)
    ctx = context(ws)
    proc = await spawn_sandboxed(
        [
            "bash",
            "-c",
            "echo command > shared.txt; rm gone.txt; echo free > free.txt; echo ready; read x",
        ],
        profile=ctx.profile(),
        stdin=subprocess.PIPE,
    )
    assert proc.process.stdout is not None and proc.process.stdin is not None
    assert await proc.process.stdout.readline() == b"ready\n"
    (ws / "shared.txt").write_text("the person's\n")
    (ws / "gone.txt").write_text("the person's\n")
    proc.process.stdin.close()
    await proc.wait()
    await proc.release()
    assert proc.landing is not None
    assert sorted(proc.landing.conflicts) == ["gone.txt", "shared.txt"]
    assert (ws / "shared.txt").read_text() == "the person's\n"
    assert (ws / "gone.txt").read_text() == "the person's\n"
    assert (ws / "free.txt").read_text() == "free\n"
    assert "changed in the workspace while the command ran" in proc.landing.summary()


# ---------------------------------------------------------------- held by descriptor

_RENAME_EXCHANGE = 2
_libc = ctypes.CDLL(None, use_errno=True)


def exchange(a: Path, b: Path) -> None:
    """Swap two names atomically (``renameat2(RENAME_EXCHANGE)``), as the red team did."""
    if _libc.renameat2(-100, bytes(a), -100, bytes(b), _RENAME_EXCHANGE) != 0:
        raise OSError(ctypes.get_errno(), "renameat2")


@contextmanager
def swapping(a: Path, b: Path) -> Iterator[list[int]]:
    """Swap ``a`` and ``b`` in a loop until the block ends; the number of swaps made."""
    done = threading.Event()
    count = [0]

    def loop() -> None:
        while not done.is_set():
            exchange(a, b)
            count[0] += 1

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield count
    finally:
        done.set()
        thread.join()
        if count[0] % 2:
            exchange(a, b)


async def test_a_workspace_swapped_in_a_loop_changes_nothing_it_was_not(tmp_path: Path) -> None:
    """A component of the workspace's path is swapped with a symlink to a ``.git`` (and to a
    directory outside every workspace) while every tool runs, hundreds of times: each
    call reads and writes the directory it was given, whatever its name is now."""
    base = tmp_path / "root"
    ws = base / "proj" / "ws"
    ws.mkdir(parents=True)
    (ws / "mine.txt").write_text("mine\n")
    repo = base / "repo" / ".git"
    repo.mkdir(parents=True)
    (repo / "config").write_text("[core]\n")
    outside = base / "private"
    outside.mkdir()
    (outside / "mine.txt").write_text("secret of another\n")
    (outside / "ws").symlink_to(repo)
    give_to_tool_user(base)
    os.chmod(outside / "mine.txt", 0o600)
    fd = os.open(ws, os.O_PATH | os.O_DIRECTORY)
    before = {"repo": files(repo.parent), "outside": files(outside)}
    ran = []
    try:
        with swapping(base / "proj", outside) as swaps:
            for i in range(12):
                ctx = context(ws, workspace_fd=fd, overlay_dir=tmp_path / "overlays")
                try:
                    out = await bash.run(ctx, {"command": f"cat mine.txt; echo {i} >> log; ls"})
                except ToolError as err:
                    # Started three times, the stage found a symlink swapped in each time:
                    # nothing ran, and the model is told so.
                    assert "its sandbox did not start, 3 times; the command did not run" in str(
                        err
                    ), err
                else:
                    ran.append(i)
                    assert out.startswith("mine\n"), out
                    assert "secret of" not in out and "[core]" not in out
                    assert "config" not in out
                ctx = context(ws, workspace_fd=fd)
                assert await read_file.run(ctx, {"path": "mine.txt"}) == "     1\tmine"
                await write_file.run(ctx, {"path": f"w{i}.txt", "content": "w\n"})
                await edit_file.run(ctx, {"path": f"w{i}.txt", "old": "w", "new": "e"})
                found = await grep.run(ctx, {"pattern": "secret of|core]"})
                assert found.startswith("no matches"), found
                assert "config" not in await list_files.run(ctx, {})
        assert swaps[0] > 50, swaps
    finally:
        os.close(fd)
    assert {"repo": files(repo.parent), "outside": files(outside)} == before
    here = base / "proj" / "ws"
    assert ran and (here / "log").read_text().split() == [str(i) for i in ran]
    written = {f"w{i}.txt": "e\n" for i in range(12)}
    assert {k: v for k, v in files(here).items() if k.startswith("w")} == written, files(base)


async def test_a_file_tool_child_walks_from_the_descriptor_it_was_sent(tmp_path: Path) -> None:
    """The workspace renamed away and another directory put at its path: the file tools'
    process reads the one the worker holds (the descriptor it received), not the path."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("held\n")
    give_to_tool_user(ws)
    fd = os.open(ws, os.O_PATH | os.O_DIRECTORY)
    try:
        ws.rename(tmp_path / "moved")
        (tmp_path / "ws").mkdir()
        (tmp_path / "ws" / "a.txt").write_text("other\n")
        give_to_tool_user(tmp_path / "ws")
        ctx = context(ws, workspace_fd=fd)
        assert await read_file.run(ctx, {"path": "a.txt"}) == "     1\theld"
        out = await bash.run(
            context(ws, workspace_fd=fd, overlay_dir=tmp_path / "o"), {"command": "cat a.txt"}
        )
        assert out == "held\n"
    finally:
        os.close(fd)


async def test_a_command_never_runs_in_a_directory_that_took_the_held_ones_name(
    tmp_path: Path,
) -> None:
    """The held workspace removed, and directories made at its old name and at the name
    the kernel then gives it (``ws (deleted)``): the sandbox finds neither is the held
    directory, and the command does not run."""
    ws = tmp_path / "ws"
    ws.mkdir()
    give_to_tool_user(ws)
    fd = os.open(ws, os.O_PATH | os.O_DIRECTORY)
    try:
        ws.rmdir()
        for name in ("ws", "ws (deleted)"):
            (tmp_path / name).mkdir()
            give_to_tool_user(tmp_path / name)
        ctx = context(ws, workspace_fd=fd, overlay_dir=tmp_path / "o")
        with pytest.raises(ToolError, match="not the directory the worker checked"):
            await bash.run(ctx, {"command": "echo ran > proof"})
    finally:
        os.close(fd)
    assert not list((tmp_path / "ws").iterdir())
    assert not list((tmp_path / "ws (deleted)").iterdir())
    assert ctx.landings == []


async def test_where_the_child_may_not_mount_a_stage_mounts_the_overlay_instead(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fallback for a system that lets only ``bwrap`` have a user namespace: a
    second bubblewrap binds the held workspace by descriptor and the sandbox mounts the
    overlay from it. Writes land, protected ones are held, and a workspace renamed
    while held is the one the command sees."""
    exe = bwrap_executable()
    assert exe is not None
    monkeypatch.setitem(_sandbox_host._staged, exe, True)
    staged: list[list[str]] = []
    real = _sandbox.overlay_command

    def spied(*args: Any, **kwargs: Any) -> _sandbox_host.OverlayCommand:
        command = real(*args, **kwargs)
        staged.append(command.argv)
        return command

    monkeypatch.setattr(_sandbox, "overlay_command", spied)
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("held\n")
    give_to_tool_user(ws)
    output, landing = await run(
        ws, "cat a.txt; echo new > b.txt; mkdir -p s/.git; echo x > s/.git/config"
    )
    assert output.startswith("held\n")
    assert (ws / "b.txt").read_text() == "new\n"
    assert not (ws / "s" / ".git").exists()
    assert [h.path for h in landing.held if h.path.endswith("config")] == ["s/.git/config"]
    fd = os.open(ws, os.O_PATH | os.O_DIRECTORY)
    try:
        ws.rename(tmp_path / "moved")
        (tmp_path / "ws").mkdir()
        (tmp_path / "ws" / "a.txt").write_text("other\n")
        give_to_tool_user(tmp_path / "ws")
        out = await bash.run(
            context(ws, workspace_fd=fd, overlay_dir=tmp_path / "o"), {"command": "cat a.txt"}
        )
        assert out == "held\n"
    finally:
        os.close(fd)
    assert len(staged) == 2 and all("--bind-fd" in argv for argv in staged)


async def test_a_command_holds_no_descriptor_of_the_workspace(ws: Path) -> None:
    output, _ = await run(ws, "ls -l /proc/self/fd | tail -n +2 | awk '{print $NF}'")
    targets = [line for line in output.splitlines() if line]
    assert all(t.startswith(("/dev/null", "pipe:", "/proc/")) for t in targets), targets


async def test_calls_at_once_land_each_their_own(ws: Path) -> None:
    """Six commands run at once, each writing a file of its own and all the same new
    file: each lands its own; the shared one lands once, the rest are conflicts."""
    ctx = context(ws)
    procs = [
        await spawn_sandboxed(
            ["bash", "-c", f"echo {i} > f{i}; echo {i} >> all; echo ready; read x"],
            profile=ctx.profile(),
            stdin=subprocess.PIPE,
        )
        for i in range(6)
    ]
    for proc in procs:
        assert proc.process.stdout is not None
        assert await proc.process.stdout.readline() == b"ready\n"
    for proc in procs:  # every one has written before any lands
        assert proc.process.stdin is not None
        proc.process.stdin.close()
    for proc in procs:
        await proc.wait()
    await asyncio.gather(*(proc.release() for proc in procs))
    landings = [proc.landing for proc in procs]
    assert all(landing is not None for landing in landings)
    for i in range(6):
        assert (ws / f"f{i}").read_text() == f"{i}\n"
    conflicts = [landing for landing in landings if landing and "all" in landing.conflicts]
    assert len(conflicts) == 5
    assert (ws / "all").read_text() in {f"{i}\n" for i in range(6)}


# ---------------------------------------------------------------- a full filesystem


@contextmanager
def small_filesystem(where: Path, inodes: int) -> Iterator[Path]:
    """A tmpfs of ``inodes`` inodes at ``where`` (root mounts it; the tests run as root)."""
    if os.geteuid() != 0:
        pytest.skip(missing("root: mounting a small filesystem takes it"))
    where.mkdir()
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size=8m,nr_inodes={inodes},mode=0711", "tmpfs", where],
        check=True,
    )
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", where], check=False)


async def test_a_command_that_fills_its_overlay_lands_what_it_made_and_nothing_protected(
    ws: Path, tmp_path: Path
) -> None:
    """The red team filled a filesystem's inodes so that nothing guarded ``.claude``.
    Now a full upper layer only stops the command's own writes."""
    with small_filesystem(tmp_path / "small", 40) as small:
        _, landing = await run(
            ws,
            "mkdir -p .claude/agents && echo evil > .claude/agents/x.md; "
            "for i in $(seq 200); do echo $i > f$i 2>/dev/null || break; done; "
            "echo evil > .claude/agents/y.md; ls | wc -l",
            overlay_dir=small / "overlays",
        )
        assert os.listdir(small / "overlays") == []
    made = [name for name in os.listdir(ws) if name.startswith("f")]
    assert 0 < len(made) < 200  # the upper layer filled up
    assert not (ws / ".claude").exists()
    assert ".claude" in [h.path for h in landing.held]


async def test_no_command_runs_where_its_overlay_cannot_be_made(ws: Path, tmp_path: Path) -> None:
    with small_filesystem(tmp_path / "small", 3) as small:
        (small / "overlays").mkdir(mode=0o711)
        for i in range(10):  # the task filled the filesystem's inodes first
            with contextlib.suppress(OSError):
                (small / f"fill{i}").touch()
        ctx = context(ws, overlay_dir=small / "overlays")
        with pytest.raises(ToolError) as refused:
            await bash.run(ctx, {"command": "mkdir .claude && echo evil > .claude/x; echo ran"})
    assert "cannot make a command's overlay" in str(refused.value)
    assert "No space left on device" in str(refused.value)
    assert os.listdir(ws) == []


async def test_an_overlay_directory_overlayfs_refuses_is_named_and_refused(
    ws: Path, tmp_path: Path
) -> None:
    """A container's root is itself an overlay, which overlayfs takes as no upper layer:
    commands are refused with what to set, never run against a half-mounted sandbox."""
    if os.geteuid() != 0:
        pytest.skip(missing("root: mounting an overlay takes it"))
    parts = {name: tmp_path / name for name in ("lower", "upper", "work", "merged")}
    for path in parts.values():
        path.mkdir()
    subprocess.run(
        [
            "mount", "-t", "overlay", "overlay", "-o",
            f"lowerdir={parts['lower']},upperdir={parts['upper']},workdir={parts['work']}",
            parts["merged"],
        ],
        check=True,
    )  # fmt: skip
    try:
        os.chmod(parts["merged"], 0o711)
        ctx = context(ws, overlay_dir=parts["merged"] / "overlays")
        with pytest.raises(ToolError) as refused:
            await bash.run(ctx, {"command": "echo x > made; echo ran"})
    finally:
        subprocess.run(["umount", "-l", parts["merged"]], check=False)
    assert "do not work" in str(refused.value)
    assert "set SUBAGENTS_OVERLAY_DIR to a directory on a local filesystem" in str(refused.value)
    assert os.listdir(ws) == []
