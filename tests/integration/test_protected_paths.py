"""Protected paths: files that run code unasked, and workspaces planted on them.

The scripted model attacks through a real worker, the real sandbox and a real dev
server; the assertions are on the host: the file is unchanged, the hook never ran.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import PendingActivityState
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from durable_subagents import (
    AgentSpec,
    InvalidRequest,
    SubagentClient,
    TaskNotFound,
    TaskStatus,
)
from durable_subagents.activities import SubagentActivities
from durable_subagents.agents import PROTECTED_PATHS
from durable_subagents.agents import _protected as protected_module
from durable_subagents.agents._protected import protected_entry
from durable_subagents.config import Settings
from durable_subagents.policy import _rules as policy_rules
from durable_subagents.types import ToolCall
from durable_subagents.wire._payloads import ToolCallInput
from durable_subagents.worker import create_worker
from durable_subagents.worker._worker import workflow_runner
from durable_subagents.workflows import SubagentWorkflow

from ..helpers import CEILING
from ..helpers.tasks import give_to_tool_user, script
from ..parent_workflows import WorkspaceWorkflow

FILES_WITHOUT_SUFFIX = {".envrc"}


def is_directory(entry: str) -> bool:
    name = entry.rsplit("/", 1)[-1]
    return "." not in name.lstrip(".") and entry not in FILES_WITHOUT_SUFFIX


def target(entry: str) -> str:
    """A file a model would write to plant something in ``entry``."""
    return f"{entry}/settings.json" if is_directory(entry) else entry


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


def bash(command: str) -> dict[str, Any]:
    return {"tool_calls": [call("bash", command=command)]}


def snapshot(root: Path) -> dict[str, bytes | None]:
    """Every path under ``root`` and its content (None for directories)."""
    return {
        str(p.relative_to(root)): (None if p.is_dir() else p.read_bytes())
        for p in sorted(root.rglob("*"))
    }


async def until(check: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (result := await check()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.1)
    return result


def writes(path: str) -> list[dict[str, Any]]:
    return [
        call("write_file", path=path, content="#!/bin/sh\ntouch /tmp/pwned\n"),
        call("edit_file", path=path, old="original", new="touch /tmp/pwned"),
    ]


async def test_parallel_commands_of_parallel_tasks_all_start(
    client: SubagentClient, worker: None, workspace: Path
) -> None:
    """Calls that start and end at staggered times, in three tasks on one workspace
    without ``.claude`` or ``.opencode``: every sandbox starts and every command runs."""
    calls = [call("bash", command=f"sleep 0.{i % 4}; echo ran {i}") for i in range(8)]
    model = script({"tool_calls": calls}, {"text": "ok"})
    ids = [await client.spawn_task("general", "x", model=model) for _ in range(3)]
    for info in await client.wait_tasks(ids, timeout=CEILING):
        assert info.status == TaskStatus.COMPLETED, info
        outputs = [m.content for m in await client.get_transcript(info.id) if m.role == "tool"]
        assert sorted(o.strip() for o in outputs) == sorted(f"ran {i}" for i in range(8))
    assert not os.path.lexists(workspace / ".opencode")
    assert not os.path.lexists(workspace / ".claude")


# ---------------------------------------------------------------- file tools


async def test_a_dont_ask_task_pauses_before_changing_any_entry_existing_or_missing(
    client: SubagentClient, worker: None, workspace: Path
) -> None:
    old, new = workspace / "old", workspace / "new"
    new.mkdir()
    for entry in PROTECTED_PATHS:
        path = old / target(entry)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("original\n")
    before = snapshot(workspace)
    calls = [c for entry in PROTECTED_PATHS for c in writes(target(entry))]
    turns = [{"tool_calls": calls[i : i + 48]} for i in range(0, len(calls), 48)]
    for where in ("old", "new"):
        task_id = await client.spawn_task(
            "general", "tidy up", model=script(*turns, {"text": "done"}), workspace=where
        )
        after = None
        for turn in turns:
            info = await client.check_task(task_id, wait=True, timeout=CEILING, after_pause=after)
            assert info.status == TaskStatus.PAUSED, (where, info)
            assert len(info.pending_approvals) == len(turn["tool_calls"]), where
            await client.reject(task_id, reason="protected")
            after = info.pause_id
        done = await client.check_task(task_id, wait=True, timeout=CEILING, after_pause=after)
        assert done.status == TaskStatus.COMPLETED, done
    assert snapshot(workspace) == before


async def test_the_worker_setting_protects_more_for_file_tools_and_bash(
    client: SubagentClient, temporal_client: Client, settings: Settings, workspace: Path
) -> None:
    (workspace / "release.cfg").write_text("original\n")
    give_to_tool_user(workspace / "release.cfg")
    extended = settings.model_copy(update={"protected_paths": "deploy/hooks,release.cfg"})
    async with create_worker(temporal_client, extended):
        task_id = await client.spawn_task(
            "general",
            "tidy up",
            model=script(
                {
                    "tool_calls": [
                        call("bash", command="echo pwned >> release.cfg 2>&1; echo rc=$?"),
                        call("write_file", path="deploy/hooks/post.sh", content="touch x\n"),
                        call("write_file", path="Release.cfg", content="pwned\n"),
                        call("write_file", path="deploy/notes.txt", content="fine\n"),
                    ]
                },
                {"text": "done"},
            ),
        )
        paused = await client.check_task(task_id, wait=True, timeout=CEILING)
        assert paused.status == TaskStatus.PAUSED
        assert sorted(p.arguments_preview for p in paused.pending_approvals) == [
            "write_file · Release.cfg",
            "write_file · deploy/hooks/post.sh",
        ]
        await client.reject(task_id)
        done = await client.check_task(
            task_id, wait=True, timeout=CEILING, after_pause=paused.pause_id
        )
    assert done.status == TaskStatus.COMPLETED
    outputs = [m.content for m in await client.get_transcript(task_id) if m.role == "tool"]
    assert outputs[0].startswith("rc=0\n[not applied: release.cfg: a protected path"), outputs[0]
    assert (workspace / "release.cfg").read_text() == "original\n"
    assert not (workspace / "deploy" / "hooks").exists()
    assert (workspace / "deploy" / "notes.txt").read_text() == "fine\n"


async def test_no_change_of_bash_to_a_protected_path_lands_at_any_depth(
    client: SubagentClient, worker: None, workspace: Path
) -> None:
    """A dont_ask task's bash plants every protected entry at the top, in a nested
    directory and through the person's own symlinked ``.config``: none lands; the
    result names them; the rest of what the command wrote lands."""
    (workspace / ".github").mkdir()
    (workspace / "dots").mkdir()
    (workspace / ".config").symlink_to("dots")  # a dotfiles checkout: .config is elsewhere
    give_to_tool_user(workspace)
    before = snapshot(workspace)
    entries = [e for e in PROTECTED_PATHS if e != ".git" and not e.startswith(".git/")]
    plant = "; ".join(
        f"mkdir -p {shlex.quote(str(Path(where, target(e)).parent))} 2>/dev/null; "
        f"echo planted > {shlex.quote(str(Path(where, target(e))))} 2>/dev/null"
        for e in entries
        for where in (".", "nested/repo")
    )
    linked = "mkdir -p nested/other && ln -s ../elsewhere nested/other/.config; " + (
        "echo planted > dots/lefthook.yml"
    )
    outputs = await run_bash(client, f"{plant}; {linked}; echo ok > nested/fine.txt; echo done")
    assert outputs[0].startswith("done\n[not applied: "), outputs[0][:300]
    landed = {p: c for p, c in snapshot(workspace).items() if p not in before}
    # What landed: the directories on the way to protected entries (empty), a file
    # of no protected path, and the symlink's own directory; never a protected file.
    assert landed["nested/fine.txt"] == b"ok\n"
    assert {p for p, c in landed.items() if c is not None} == {"nested/fine.txt"}, landed
    assert all(protected_entry(Path(p).parts, PROTECTED_PATHS) is None for p in landed)
    for entry in entries:
        for where in (workspace, workspace / "nested" / "repo"):
            assert not os.path.lexists(where / entry), entry
    # Written through the person's .config symlink: dots/ is read as .config/.
    assert not (workspace / "dots" / "mise.toml").exists()
    assert not (workspace / "dots" / "lefthook.yml").exists()
    # A symlink named .config would make where it leads read as .config.
    assert not os.path.lexists(workspace / "nested" / "other" / ".config")


async def run_bash(client: SubagentClient, *commands: str) -> list[str]:
    model = script({"tool_calls": [call("bash", command=c) for c in commands]}, {"text": "ok"})
    task_id = await client.spawn_task("general", "tidy up", model=model)
    info = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert info.status == TaskStatus.COMPLETED, info
    return [m.content for m in await client.get_transcript(task_id) if m.role == "tool"]


async def test_a_run_replays_with_the_list_its_worker_reported(
    client: SubagentClient,
    temporal_client: Client,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    extended = settings.model_copy(update={"protected_paths": "release.cfg"})
    model = script({"tool_calls": [call("write_file", path="release.cfg", content="x")]})
    async with create_worker(temporal_client, extended):
        task_id = await client.spawn_task("general", "x", model=model)
        paused = await client.check_task(task_id, wait=True, timeout=CEILING)
        assert paused.status == TaskStatus.PAUSED
        await client.reject(task_id)
        done = await client.check_task(
            task_id, wait=True, timeout=CEILING, after_pause=paused.pause_id
        )
    assert done.status == TaskStatus.COMPLETED
    history = await temporal_client.get_workflow_handle(task_id).fetch_history()
    # The decision comes from the history, not from this process's lists.
    for module in (protected_module, policy_rules):
        monkeypatch.setattr(module, "PROTECTED_PATHS", ())
    replayer = Replayer(
        workflows=[SubagentWorkflow],
        data_converter=pydantic_data_converter,
        workflow_runner=workflow_runner(),
    )
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None, result.replay_failure


# ---------------------------------------------------------------- a hook manager


def git_env(repo: Path) -> dict[str, str]:
    """The user's environment: their own pre-commit cache; the tree is theirs (trusted
    even when the suite runs as root and the workspace belongs to the tool user)."""
    return {
        **os.environ,
        "PRE_COMMIT_HOME": str(repo.parent / "pre-commit-home"),
        "GIT_CONFIG_COUNT": "1",
        "GIT_CONFIG_KEY_0": "safe.directory",
        "GIT_CONFIG_VALUE_0": "*",
    }


def git(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", "-c", "user.name=u", "-c", "user.email=u@example.com", *args],
        cwd=repo,
        env=git_env(repo),
        capture_output=True,
        text=True,
        check=False,
    )


async def test_a_planted_pre_commit_hook_never_runs_at_the_users_next_commit(
    client: SubagentClient, worker: None, workspace: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "hook-ran"
    config = workspace / ".pre-commit-config.yaml"
    hook = "repos:\n- repo: local\n  hooks:\n  - id: {id}\n    name: {id}\n"
    hook += "    entry: {entry}\n    language: system\n    pass_filenames: false\n"
    config.write_text(hook.format(id="check", entry="'true'"))
    original = config.read_text()
    assert git(workspace, "init", "-q").returncode == 0
    pre_commit = Path(sys.executable).parent / "pre-commit"
    installed = subprocess.run(
        [str(pre_commit), "install"],
        cwd=workspace,
        env=git_env(workspace),
        capture_output=True,
        check=False,
    )
    assert installed.returncode == 0, installed.stderr
    give_to_tool_user(workspace)  # the user's checkout: theirs, and their tool user's
    original = config.read_text()
    evil = hook.format(id="evil", entry=f"touch {marker}")
    attack = [
        call("bash", command=f"printf %s {shlex.quote(evil)} > .pre-commit-config.yaml"),
        call("write_file", path=".pre-commit-config.yaml", content=evil),
        call("edit_file", path="./.pre-commit-config.yaml", old="'true'", new=f"touch {marker}"),
    ]
    task_id = await client.spawn_task(
        "general", "tidy up", model=script({"tool_calls": attack}, {"text": "done"})
    )
    paused = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert paused.status == TaskStatus.PAUSED, paused
    assert [p.tool_name for p in paused.pending_approvals] == ["write_file", "edit_file"]
    await client.reject(task_id, reason="no hooks")
    done = await client.check_task(task_id, wait=True, timeout=CEILING, after_pause=paused.pause_id)
    assert done.status == TaskStatus.COMPLETED
    outputs = [m.content for m in await client.get_transcript(task_id) if m.role == "tool"]
    assert "[not applied: .pre-commit-config.yaml: a protected path" in outputs[0], outputs[0]
    assert config.read_text() == original
    (workspace / "work.txt").write_text("the user's change\n")
    assert git(workspace, "add", "-A").returncode == 0
    committed = git(workspace, "commit", "-qm", "work")
    assert committed.returncode == 0, committed.stdout + committed.stderr
    assert "check" in committed.stdout + committed.stderr  # the user's own hook ran
    assert not marker.exists()


# ---------------------------------------------------------------- workspaces


@pytest.mark.parametrize(
    "workspace", [".git", "svc/.vscode/x", ".GitHub/hooks", "x/../.git/hooks", "a/.envrc"]
)
async def test_a_workspace_spelled_through_a_protected_path_is_refused_at_spawn(
    client: SubagentClient, workspace: str
) -> None:
    task_id = f"ws-{uuid.uuid4().hex[:8]}"
    with pytest.raises(InvalidRequest, match="protected path") as err:
        await client.spawn_task("explore", "x", workspace=workspace, task_id=task_id)
    assert "spawn with a directory that is not protected" in str(err.value)
    with pytest.raises(TaskNotFound):
        await client.check_task(task_id)


async def test_a_client_that_shares_the_worker_setting_checks_its_entries_too(
    temporal_client: Client, settings: Settings
) -> None:
    extended = settings.model_copy(update={"protected_paths": "deploy/hooks"})
    client = SubagentClient(
        temporal_client,
        task_queue=settings.task_queue,
        protected_paths=extended.protected_path_list,
    )
    with pytest.raises(InvalidRequest, match="protected path 'deploy/hooks'"):
        await client.spawn_task("explore", "x", workspace="deploy/hooks/pre")


def git_dir(workspace: Path) -> Path:
    repo = workspace / ".git"
    (repo / "hooks").mkdir(parents=True)
    (repo / "config").write_text("[core]\n\trepositoryformatversion = 0\n")
    return repo


APPEND_FSMONITOR = bash(
    "printf '[core]\\n\\tfsmonitor = touch /tmp/pwned\\n' >> config; "
    "printf '#!/bin/sh\\ntouch /tmp/pwned\\n' > post-checkout; ls"
)


async def test_a_symlink_one_task_planted_is_no_workspace_for_the_next(
    client: SubagentClient, worker: None, workspace: Path
) -> None:
    repo = git_dir(workspace)
    before = snapshot(repo)
    planter = await client.spawn_task(
        "general",
        "x",
        model=script(
            bash("ln -s .git proj2 && ln -s .git/hooks hk && mkdir deep && ln -s ../.git deep/r"),
            bash("ln -s / out"),
            {"text": "done"},
        ),
    )
    assert (await client.check_task(planter, wait=True, timeout=CEILING)).status == "completed"
    assert (workspace / "proj2").is_symlink() and (workspace / "deep" / "r").is_symlink()
    assert not os.path.lexists(workspace / "out")
    for requested, problem in [
        ("proj2", "workspace 'proj2' (it resolves to '.git') is, or lies inside, the protected"),
        ("hk", "workspace 'hk' (it resolves to '.git/hooks') is, or lies inside, the protected"),
        ("deep/r/hooks", "(it resolves to '.git/hooks') is, or lies inside, the protected path"),
        ("out/tmp", "is not a directory under"),  # the symlink out never landed
    ]:
        task_id = await client.spawn_task(
            "general", "x", model=script(APPEND_FSMONITOR, {"text": "d"}), workspace=requested
        )
        info = await client.check_task(task_id, wait=True, timeout=CEILING)
        assert info.status == TaskStatus.FAILED, info
        assert info.error is not None and problem in info.error, info.error
    assert snapshot(repo) == before


async def test_a_workspace_swapped_for_a_symlink_after_the_spawn_stops_the_task(
    client: SubagentClient, worker: None, workspace: Path
) -> None:
    repo = git_dir(workspace)
    before = snapshot(repo)
    (workspace / "proj2").mkdir()
    task_id = await client.spawn_task(
        "general",
        "x",
        model=script(APPEND_FSMONITOR, {"text": "d"}),
        workspace="proj2",
        permissions=[{"tool": "bash", "action": "ask"}],
    )
    paused = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert paused.status == TaskStatus.PAUSED
    (workspace / "proj2").rmdir()
    (workspace / "proj2").symlink_to(".git")
    await client.approve(task_id)
    done = await client.check_task(task_id, wait=True, timeout=CEILING, after_pause=paused.pause_id)
    assert done.status == TaskStatus.FAILED
    assert done.error is not None and "protected path '.git'" in done.error
    assert snapshot(repo) == before


async def test_a_child_a_model_spawns_gets_the_same_check(
    client: SubagentClient, worker: None, workspace: Path, temporal_client: Client
) -> None:
    repo = git_dir(workspace)
    before = snapshot(repo)
    (workspace / "proj2").mkdir()
    client.agents["lead"] = AgentSpec(name="lead", permission_mode="dont_ask", may_spawn=True)
    spawn = call("spawn_subagent", agent="general", prompt="append to config")
    model = script(
        {"delay": 6, "tool_calls": [spawn, call("wait_subagents")]},
        APPEND_FSMONITOR,
        {"text": "d"},
    )
    lead = await client.spawn_task("lead", "x", model=model, workspace="proj2")

    async def first_turn_heartbeating() -> bool:
        # A turn heartbeats only while it calls the model, after it took its workspace.
        desc = await temporal_client.get_workflow_handle(lead).describe()
        return any(
            a.activity_type.name == "model_turn"
            and a.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
            and a.HasField("last_heartbeat_time")
            for a in desc.raw_description.pending_activities
        )

    await until(first_turn_heartbeating, "the lead's first turn to call its model")
    (workspace / "proj2").rmdir()
    (workspace / "proj2").symlink_to(".git")
    # The swap came while the lead's own turn held its workspace, before the spawn.
    assert await first_turn_heartbeating(), "the lead's turn ended before the swap"
    assert not await client.list_tasks(parent_id=lead)
    done = await client.check_task(lead, wait=True, timeout=CEILING)
    assert done.status == TaskStatus.FAILED
    children = await until(lambda: client.list_tasks(parent_id=lead), "the child listed")
    child = await client.check_task(children[0].id)
    assert child.status == TaskStatus.FAILED
    assert child.error is not None and "protected path '.git'" in child.error
    assert snapshot(repo) == before


async def test_a_workflow_starting_a_subagent_in_a_protected_path_gets_invalid_request(
    temporal_client: Client, settings: Settings
) -> None:
    async with create_worker(temporal_client, settings, workflows=[WorkspaceWorkflow]):
        message = await temporal_client.execute_workflow(
            WorkspaceWorkflow.run,
            ".git/hooks",
            id=f"ws-{uuid.uuid4().hex[:6]}",
            task_queue=settings.task_queue,
        )
    assert message.startswith("InvalidRequest: workspace '.git/hooks' is, or lies inside")


def test_the_extended_list_reaches_the_tools_and_the_sandbox(tmp_path: Path) -> None:
    settings = Settings(
        workspace=tmp_path, blob_dir=tmp_path / "blobs", protected_paths="deploy/hooks"
    )
    activities = SubagentActivities(
        settings.blob_store(),
        workspace_root=tmp_path,
        protected_paths=settings.protected_path_list,
    )
    tool_input = ToolCallInput(task_id="t", call=ToolCall(id="c", name="bash", arguments={}))
    with activities.workspace(None) as workspace:
        profile = activities.tool_context(tool_input, workspace).profile()
        assert profile.protected == (*PROTECTED_PATHS, "deploy/hooks")
        opted_in = tool_input.model_copy(
            update={"write_protected_paths": True, "protected_changes": "apply"}
        )
        assert activities.tool_context(opted_in, workspace).protected == ()
        assert activities.tool_context(opted_in, workspace).profile().hold == "apply"


# ---------------------------------------------------------------- held changes, decided


def builder(client: SubagentClient) -> None:
    """An agent whose commands run unasked and whose protected changes wait for a person."""
    client.agents["builder"] = AgentSpec(
        name="builder",
        permission_mode="accept_edits",
        permissions=[{"tool": "bash", "action": "allow"}],
    )


CONFIGURE = (
    "git -C lib config user.name agent && printf 'build/\\n' > lib/.git/info/exclude && "
    "echo notes > lib/NOTES && echo configured"
)


def nested_repo(workspace: Path) -> Path:
    lib = workspace / "lib"
    lib.mkdir()
    assert git(lib, "init", "-q").returncode == 0
    give_to_tool_user(workspace)
    return lib


async def test_held_changes_land_exactly_as_shown_once_approved(
    client: SubagentClient, worker: None, workspace: Path
) -> None:
    lib = nested_repo(workspace)
    builder(client)
    before = (lib / ".git" / "config").read_text()
    task_id = await client.spawn_task(
        "builder", "configure", model=script(bash(CONFIGURE), {"text": "done"})
    )
    paused = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert paused.status == TaskStatus.PAUSED, paused
    [pending] = paused.pending_approvals
    assert pending.tool_name == "apply_changes"
    assert pending.arguments_preview == "apply_changes · lib/.git/config, lib/.git/info/exclude"
    # The rest landed when the command ended; the protected changes wait.
    assert (lib / "NOTES").read_text() == "notes\n"
    assert (lib / ".git" / "config").read_text() == before
    arguments = (await client.pending_arguments(paused))[pending.call_id]
    assert arguments is not None
    diff = arguments["changes"]
    assert "lib/.git/config: changed" in diff and "+\tname = agent" in diff
    assert "lib/.git/info/exclude: changed" in diff and "+build/" in diff
    await client.approve(task_id)
    done = await client.check_task(task_id, wait=True, timeout=CEILING, after_pause=paused.pause_id)
    assert done.status == TaskStatus.COMPLETED, done
    after = (lib / ".git" / "config").read_text()
    assert after == before.rstrip("\n") + "\n[user]\n\tname = agent\n"
    assert (lib / ".git" / "info" / "exclude").read_text() == "build/\n"
    assert os.stat(lib / ".git" / "config").st_uid == os.stat(workspace).st_uid
    [output] = [m.content for m in await client.get_transcript(task_id) if m.role == "tool"]
    assert output.startswith("configured\n[held for a person's decision: lib/.git/config, ")
    assert output.endswith("[a person approved the held changes: 2 applied]")


async def test_a_held_change_is_not_applied_over_what_changed_since_it_was_shown(
    client: SubagentClient, worker: None, workspace: Path
) -> None:
    lib = nested_repo(workspace)
    builder(client)
    task_id = await client.spawn_task(
        "builder", "configure", model=script(bash(CONFIGURE), {"text": "done"})
    )
    paused = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert paused.status == TaskStatus.PAUSED, paused
    assert git(lib, "config", "user.email", "person@example.com").returncode == 0
    mine = (lib / ".git" / "config").read_text()
    await client.approve(task_id)
    done = await client.check_task(task_id, wait=True, timeout=CEILING, after_pause=paused.pause_id)
    assert done.status == TaskStatus.COMPLETED, done
    assert (lib / ".git" / "config").read_text() == mine  # the person's change stands
    assert (lib / ".git" / "info" / "exclude").read_text() == "build/\n"
    [output] = [m.content for m in await client.get_transcript(task_id) if m.role == "tool"]
    assert output.endswith(
        "[a person approved the held changes: 1 applied; not applied, as the workspace "
        "changed there since the decision was asked for: lib/.git/config]"
    )


async def test_a_rejected_submodule_fsmonitor_never_runs_at_the_owners_git_status(
    client: SubagentClient, worker: None, workspace: Path, tmp_path: Path
) -> None:
    """The red team's second break: bash replaced a nested repository's config with a
    ``core.fsmonitor`` (any depth), and the owner's ``git status`` ran it."""
    marker = tmp_path / "fsmonitor-ran"
    assert git(workspace, "init", "-q").returncode == 0
    lib = nested_repo(workspace)
    assert git(lib, "commit", "-q", "--allow-empty", "-m", "x").returncode == 0
    give_to_tool_user(workspace)
    builder(client)
    plant = f"git -C lib config core.fsmonitor 'touch {marker}; false' && echo planted"
    task_id = await client.spawn_task("builder", "x", model=script(bash(plant), {"text": "d"}))
    paused = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert [p.tool_name for p in paused.pending_approvals] == ["apply_changes"]
    arguments = (await client.pending_arguments(paused))[paused.pending_approvals[0].call_id]
    assert arguments is not None and f'+\tfsmonitor = "touch {marker}' in arguments["changes"]
    await client.reject(task_id, reason="no fsmonitor")
    done = await client.check_task(task_id, wait=True, timeout=CEILING, after_pause=paused.pause_id)
    assert done.status == TaskStatus.COMPLETED
    for repo in (workspace, lib):
        assert git(repo, "status").returncode == 0
    assert not marker.exists()
    assert "fsmonitor" not in (lib / ".git" / "config").read_text()
