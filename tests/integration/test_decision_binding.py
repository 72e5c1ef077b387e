"""A decision binds what runs: a path is judged where it resolves, and runs only there.

The scripted model attacks through a real worker, the real sandbox and a real dev
server: a turn's ``bash`` swaps a directory for a symlink (to ``.git``, or to a denied
directory) after the workflow judged the file calls that target it, but before they
run. The file tools must refuse, and nothing may be written or read through the link.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from durable_subagents import PermissionRule, SubagentClient, TaskStatus
from durable_subagents.client import SubagentTools
from durable_subagents.config import Settings
from durable_subagents.policy import PathRules
from durable_subagents.tools import (
    ToolContext,
    ToolError,
    open_in_workspace,
    read_file,
    write_file,
)
from durable_subagents.tools._decorator import DecidedPath
from durable_subagents.workflows._tool_calls import TOOL_CALLS_AT_ONCE

from ..helpers import CEILING, eventually
from ..helpers.processes import processes_matching, unique_sleep
from ..helpers.tasks import TEST_MODELS, give_to_tool_user, script

HOOK = "#!/bin/sh\ntouch {marker}\n"
SECRET = "the-secret-key-material"


def tool_call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


def swap_turn(swap: str, fill: str, *targets: dict[str, Any]) -> dict[str, Any]:
    """One turn: ``swap`` runs after the targets were judged and before they run.

    A task runs ``TOOL_CALLS_AT_ONCE`` calls at once and the rest wait, in order, for a
    free slot. The first slots go to calls that sleep (``fill``) until the test, having
    seen the swap land in the workspace, ends their sleep; the last to the swap itself:
    every target waits until one of them ends, so it runs after the swap, while the
    workflow judged it on the tree the model turn saw. (A running command sees no file
    another call writes: that lands once the other command has ended.)
    """
    wait = f"{fill}; echo waited"
    fillers = [tool_call("bash", command=wait) for _ in range(TOOL_CALLS_AT_ONCE - 1)]
    return {
        "tool_calls": [
            *fillers,
            tool_call("bash", command=f"{swap} && touch swapped && echo swapped"),
            *targets,
        ]
    }


def git(workspace: Path, *args: str) -> str:
    command = ["git", "-c", "safe.directory=*", "-C", str(workspace), *args]
    return subprocess.run(command, check=True, capture_output=True, text=True).stdout


def git_repo(workspace: Path) -> None:
    git(workspace, "init", "-q", "-b", "main")
    git(workspace, "config", "user.email", "t@example.com")
    git(workspace, "config", "user.name", "t")
    (workspace / "README.md").write_text("readme\n")
    git(workspace, "add", "README.md")
    git(workspace, "commit", "-q", "-m", "init")


async def transcript_text(client: SubagentClient, task_id: str) -> str:
    return "\n".join(m.content for m in await client.get_transcript(task_id))


async def everything_recorded(temporal_client: Client, task_id: str, settings: Settings) -> str:
    handle = temporal_client.get_workflow_handle(task_id)
    parts = [(await handle.fetch_history()).to_json(), repr(await (await handle.describe()).memo())]
    for path in settings.resolved_blob_dir.rglob("*"):
        if path.is_file():
            parts.append(path.read_bytes().decode(errors="replace"))
    return "\n".join(parts)


async def test_a_symlink_swapped_in_after_the_decision_is_never_written_or_read_through(
    client: SubagentClient,
    worker: None,
    workspace: Path,
    temporal_client: Client,
    settings: Settings,
    tmp_path: Path,
) -> None:
    git_repo(workspace)
    config = workspace / ".git" / "config"
    original = config.read_text()
    marker = tmp_path / "hook-ran"
    for name in ("cfg", "hk", "decoy", "secrets"):
        (workspace / name).mkdir()
    (workspace / "cfg" / "config").write_text("plain\n")
    (workspace / "decoy" / "key.txt").write_text("decoy\n")
    (workspace / "secrets" / "key.txt").write_text(f"{SECRET}\n")
    give_to_tool_user(workspace)  # as a user's checkout is: bash may change it
    swap = "rm -rf cfg hk decoy && ln -s .git cfg && ln -s .git/hooks hk && ln -s secrets decoy"
    fill = unique_sleep(600)
    fsmonitor = f"[core]\n\tfsmonitor = touch {marker}\n"
    task_id = await client.spawn_task(
        "general",  # dont_ask: these calls run without a pause
        "tidy up",
        model=script(
            swap_turn(
                swap,
                fill,
                tool_call("write_file", path="cfg/config", content=fsmonitor),
                tool_call(
                    "write_file", path="hk/post-checkout", content=HOOK.format(marker=marker)
                ),
                tool_call("edit_file", path="cfg/description", old="Unnamed", new="pwned"),
                tool_call("read_file", path="decoy/key.txt"),
                tool_call("grep", pattern="key-material", path="decoy"),
                tool_call("write_file", path="cfg/hooks/pre-commit", content="#!/bin/sh\n"),
            ),
            {"text": "done"},
        ),
        permissions=[{"tool": "*", "pattern": "secrets/*", "action": "deny"}],
        # A token budget: the workflow runs the reads itself, after the slots (with none,
        # the model turn would run them before it answers, on the tree it judged them on).
        token_budget=10**9,
    )
    fillers = TOOL_CALLS_AT_ONCE - 1
    await eventually(lambda: len(processes_matching(fill)) == fillers, "the fillers to run")
    await eventually((workspace / "swapped").exists, "the swap to land")
    for pid in processes_matching(fill):
        os.kill(pid, signal.SIGTERM)  # the fillers go on to their echo and free their slots
    info = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert info.status == TaskStatus.COMPLETED, info
    outputs = [m for m in await client.get_transcript(task_id) if m.role == "tool"]
    assert outputs[TOOL_CALLS_AT_ONCE - 1].content == "swapped\n"
    targets = outputs[TOOL_CALLS_AT_ONCE:]
    assert len(targets) == 6
    assert all(m.is_error for m in targets), [m.content for m in targets]
    write, hook, edit, read, search, nested = (m.content for m in targets)
    assert "cfg/config" in write and "'.git/config'" in write and "symlink" in write
    assert "'.git/hooks/post-checkout'" in hook
    assert "'.git/description'" in edit
    assert "'secrets/key.txt'" in read
    assert "'secrets'" in search
    assert "'.git/hooks/pre-commit'" in nested

    # The host outcome: git's files are as they were, and no hook or fsmonitor runs.
    assert config.read_text() == original
    assert not (workspace / ".git" / "hooks" / "post-checkout").exists()
    assert not (workspace / ".git" / "hooks" / "pre-commit").exists()
    assert "pwned" not in (workspace / ".git" / "description").read_text()
    git(workspace, "status")
    git(workspace, "checkout", "-q", "-b", "probe")
    assert not marker.exists()
    # The denied file's content reached neither the model nor anything recorded.
    assert SECRET not in await transcript_text(client, task_id)
    assert SECRET not in await everything_recorded(temporal_client, task_id, settings)


async def subagents(*args: str, settings: Settings, tmp_path: Path) -> str:
    """Run the ``subagents`` command against this test's server, queue and blob store."""
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("SUBAGENTS_", "TEMPORAL_"))},
        **TEST_MODELS,
    }
    env.update(
        CI="true",
        TEMPORAL_ADDRESS=settings.address,
        SUBAGENTS_TASK_QUEUE=settings.task_queue,
        SUBAGENTS_DATA_DIR=str(tmp_path / "cli-data"),
        SUBAGENTS_BLOB_DIR=str(settings.resolved_blob_dir),
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "durable_subagents",
        *args,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    return out.decode()


async def test_the_approver_sees_where_a_path_lands_and_the_approval_holds_only_there(
    client: SubagentClient, worker: None, workspace: Path, tmp_path: Path, settings: Settings
) -> None:
    git_repo(workspace)
    (workspace / "hk").symlink_to(".git/hooks")
    (workspace / "elsewhere").mkdir()
    marker = tmp_path / "hook-ran"
    task_id = await client.spawn_task(
        "general",
        "tidy up",
        model=script(
            {"tool_calls": [tool_call("write_file", path="hk/post-checkout", content="x\n")]},
            {"text": "done"},
        ),
    )
    paused = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert paused.status == TaskStatus.PAUSED, paused  # a protected path: a person decides
    [pending] = paused.pending_approvals
    assert pending.resolved_path == ".git/hooks/post-checkout"
    assert "hk/post-checkout" in pending.arguments_preview
    assert ".git/hooks/post-checkout" in pending.arguments_preview

    view = await SubagentTools(client, default_wait=0).call(
        "check_subagent", {"task_id": task_id, "wait": False}
    )
    assert '"resolved_path": ".git/hooks/post-checkout"' in view
    check = await subagents("check", task_id, settings=settings, tmp_path=tmp_path)
    assert "the path leads to: .git/hooks/post-checkout" in check

    # The link changes after the approver looked: the approval does not follow it.
    (workspace / "hk").unlink()
    (workspace / "hk").symlink_to("elsewhere")
    await client.approve(task_id)
    done = await client.check_task(task_id, wait=True, timeout=CEILING, after_pause=paused.pause_id)
    assert done.status == TaskStatus.COMPLETED, done
    [result] = [m for m in await client.get_transcript(task_id) if m.role == "tool"]
    assert result.is_error
    assert "'.git/hooks/post-checkout'" in result.content
    assert "'elsewhere/post-checkout'" in result.content
    assert not (workspace / "elsewhere" / "post-checkout").exists()
    assert not (workspace / ".git" / "hooks" / "post-checkout").exists()
    git(workspace, "checkout", "-q", "-b", "probe")
    assert not marker.exists()


async def test_a_search_never_follows_a_symlink_into_a_denied_path(
    client: SubagentClient,
    worker: None,
    workspace: Path,
    temporal_client: Client,
    settings: Settings,
) -> None:
    (workspace / "secrets").mkdir()
    (workspace / "secrets" / "key.txt").write_text(f"{SECRET}\n")
    (workspace / "docs").mkdir()
    (workspace / "docs" / "notes.md").write_text("key-material lives elsewhere\n")
    (workspace / "docs" / "key.txt").symlink_to("../secrets/key.txt")
    task_id = await client.spawn_task(
        "general",
        "find the key",
        model=script(
            {
                "tool_calls": [
                    tool_call("grep", pattern="key-material", path="docs"),
                    tool_call("list_files", path="docs"),
                ]
            },
            {"text": "done"},
        ),
        permissions=[{"tool": "*", "pattern": "secrets/*", "action": "deny"}],
    )
    info = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert info.status == TaskStatus.COMPLETED, info
    found, listed = (m.content for m in await client.get_transcript(task_id) if m.role == "tool")
    assert found == "docs/notes.md:1: key-material lives elsewhere"
    assert listed == "docs/notes.md"
    assert SECRET not in await everything_recorded(temporal_client, task_id, settings)


async def test_a_path_is_judged_as_written_too(
    client: SubagentClient, worker: None, workspace: Path
) -> None:
    """A rule on ``.env`` holds for a write to ``.env``, wherever the symlink leads."""
    (workspace / "settings").mkdir()
    (workspace / "settings" / "app.txt").write_text("DEBUG=0\n")
    (workspace / ".env").symlink_to("settings/app.txt")
    task_id = await client.spawn_task(
        "general",
        "configure",
        model=script(
            {"tool_calls": [tool_call("write_file", path=".env", content="DEBUG=1\n")]},
            {"text": "done"},
        ),
        permissions=[{"tool": "write_file", "pattern": ".env", "action": "deny"}],
    )
    info = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert info.status == TaskStatus.COMPLETED, info
    [result] = [m for m in await client.get_transcript(task_id) if m.role == "tool"]
    assert result.is_error and "denied by this agent's permission rules" in result.content
    assert (workspace / "settings" / "app.txt").read_text() == "DEBUG=0\n"


# ---------------------------------------------------------------- the tools themselves


def context(workspace: Path, **kwargs: Any) -> ToolContext:
    return ToolContext(workspace=workspace, task_id="t", **kwargs)


def a_git_dir(workspace: Path) -> Path:
    (workspace / ".git" / "hooks").mkdir(parents=True)
    (workspace / ".git" / "config").write_text("[core]\n")
    return workspace / ".git"


def tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


async def test_a_call_opens_its_path_only_where_it_was_judged(workspace: Path) -> None:
    gitdir = a_git_dir(workspace)
    before = tree(gitdir)
    (workspace / "cfg").symlink_to(".git")
    for path, arguments in (
        ("cfg/config", {"content": "x"}),
        ("cfg/new/deep/file", {"content": "x"}),  # not even a directory is made
        ("cfg/hooks/post-checkout", {"content": "x"}),
    ):
        ctx = context(workspace, decided=DecidedPath(path=path, resolved=path))
        with pytest.raises(ToolError, match="a symlink on the way was changed since") as err:
            await write_file.run(ctx, {"path": path, **arguments})
        assert "now leads to '.git/" in str(err.value) or "now leads into '.git'" in str(err.value)
    ctx = context(workspace, decided=DecidedPath(path="cfg/config", resolved="cfg/config"))
    with pytest.raises(ToolError, match=r"now leads to '\.git/config'"):
        await read_file.run(ctx, {"path": "cfg/config"})
    assert tree(gitdir) == before
    assert (gitdir / "config").read_text() == "[core]\n"

    # Where it was judged, it runs; so does a directory made on that way.
    decided = DecidedPath(path="cfg/config", resolved=".git/config")
    ctx = context(workspace, decided=decided, protected=())
    assert await write_file.run(ctx, {"path": "cfg/config", "content": "ok\n"}) == (
        "wrote 3 bytes to .git/config"
    )
    (workspace / "cfg").unlink()
    ctx = context(workspace, decided=DecidedPath(path="cfg/a/b", resolved="cfg/a/b"))
    assert await write_file.run(ctx, {"path": "cfg/a/b", "content": "ok\n"}) == (
        "wrote 3 bytes to cfg/a/b"
    )


async def test_what_a_call_was_not_judged_on_is_judged_by_the_rules(workspace: Path) -> None:
    gitdir = a_git_dir(workspace)
    (workspace / "secrets").mkdir()
    (workspace / "secrets" / "key.txt").write_text(SECRET)
    rules = PathRules(
        tool="reader",
        read_only=True,
        mode="dont_ask",
        restrictions=(PermissionRule(pattern="secrets/*", action="deny"),),
    )
    ctx = context(workspace, rules=rules)
    with pytest.raises(
        ToolError, match=r"'secrets/key\.txt', which this agent's permission rules denies"
    ):
        open_in_workspace(ctx, "secrets/key.txt", os.O_RDONLY)
    asks = rules.model_copy(update={"restrictions": (PermissionRule(action="ask"),)})
    with pytest.raises(ToolError, match="asks a person about"):
        open_in_workspace(context(workspace, rules=asks), "secrets/key.txt", os.O_RDONLY)

    # A write into a protected entry it was not judged on: refused before it is made.
    with pytest.raises(ToolError, match=r"inside '\.git'"):
        open_in_workspace(context(workspace), ".git/hooks/pre-push", os.O_WRONLY | os.O_CREAT)
    with pytest.raises(ToolError, match=r"inside '\.claude'"):
        open_in_workspace(
            context(workspace), ".claude/agents/x.md", os.O_WRONLY | os.O_CREAT, make_parents=True
        )
    assert not (gitdir / "hooks" / "pre-push").exists()
    assert not (workspace / ".claude").exists()
    opened = open_in_workspace(context(workspace), ".git/config", os.O_RDONLY)  # reading is fine
    os.close(opened.fd)
    opted_in = context(workspace, protected=())
    os.close(open_in_workspace(opted_in, ".git/hooks/pre-push", os.O_WRONLY | os.O_CREAT).fd)
    assert (gitdir / "hooks" / "pre-push").exists()


_libc = ctypes.CDLL(None, use_errno=True)
_RENAME_EXCHANGE = 2


def exchange(a: Path, b: Path) -> None:
    if _libc.renameat2(-100, bytes(a), -100, bytes(b), _RENAME_EXCHANGE) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


async def test_a_directory_swapped_in_a_loop_never_lets_a_judged_call_land_elsewhere(
    workspace: Path,
) -> None:
    gitdir = a_git_dir(workspace)
    before = tree(gitdir)
    (workspace / "d").mkdir()
    (workspace / "swap").symlink_to(".git")
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            exchange(workspace / "d", workspace / "swap")

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    outputs = []
    try:
        for i in range(300):
            for path in ("d/config", "d/hooks/post-checkout"):
                ctx = context(workspace, decided=DecidedPath(path=path, resolved=path))
                try:
                    outputs.append(await write_file.run(ctx, {"path": path, "content": f"{i}\n"}))
                except ToolError as err:
                    outputs.append(str(err))
    finally:
        stop.set()
        thread.join()
    assert tree(gitdir) == before
    assert (gitdir / "config").read_text() == "[core]\n"
    assert any(out.startswith("wrote") for out in outputs)  # and the tool still worked
    assert all(out.startswith(("wrote", "'d/", "cannot write")) for out in outputs), outputs
