"""Encrypted payloads and blobs (``SUBAGENTS_PAYLOAD_KEY``): nothing of a task in plain text.

Tasks run on the session's real dev server; what Temporal stored is read back raw, as
someone with the database or the Web UI but without the key would see it, through the
``temporal`` CLI's JSON with every base64 field decoded.
"""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from durable_subagents import (
    AgentSpec,
    PermissionRule,
    SubagentClient,
    TaskStatus,
    connect_client,
)
from durable_subagents.config import Settings
from durable_subagents.errors import PayloadKeyMissing
from durable_subagents.storage._sealing import KeyRing, new_key
from durable_subagents.testing import DevServer
from durable_subagents.worker import create_worker

from ..helpers import CEILING
from ..helpers.cli import decoded_strings, temporal_cli
from ..helpers.tasks import script

PROMPT = "Summarize the ledger of ACCOUNT-PROMPT-7f3a for the audit"
OUTPUT = "TOOL-OUTPUT-c0ffee-secret-ledger-line"
ANSWER = "ANSWER-e5f6: the ledger balances"
INPUT = "FOLLOW-UP-INPUT-9b1d please also check March"
DESCRIPTION = "DESCRIPTION-audit-4c2e"
# The last two are fragments, for a partial leak: never hex, which run IDs and digests
# are full of.
SECRETS = (
    PROMPT,
    OUTPUT,
    ANSWER,
    INPUT,
    DESCRIPTION,
    "ACCOUNT-PROMPT",
    "secret-ledger",
    "ledger balances",
)

CAREFUL = AgentSpec(
    name="careful",
    system_prompt="SYSTEM-PROMPT-d00d: you ask before running commands.",
    tools=["bash"],
    permissions=[PermissionRule(tool="bash", action="ask")],
)


def with_keys(settings: Settings, key: str | None, old: str | None = None) -> Settings:
    return Settings.model_validate(
        {**settings.model_dump(), "payload_key": key, "payload_old_keys": old}
    )


async def keyed_client(own: Settings) -> tuple[Client, SubagentClient]:
    """A Temporal client and a SubagentClient with ``own``'s keys."""
    temporal = await connect_client(own.address, own.namespace, keys=own.payload_keys())
    client = SubagentClient(
        temporal,
        task_queue=own.task_queue,
        blob_store=own.blob_store(),
        agents={"careful": CAREFUL},
    )
    return temporal, client


async def raw_texts(dev_server: DevServer, task_id: str) -> str:
    """What ``temporal workflow show`` and ``describe`` print, every payload decoded."""
    texts = []
    for command in ("show", "describe"):
        out = await temporal_cli(
            "workflow",
            command,
            "--address",
            dev_server.address,
            "--namespace",
            dev_server.namespace,
            "--workflow-id",
            task_id,
            "--output",
            "json",
        )
        texts.extend(decoded_strings(json.loads(out)))
    return "\n".join(texts)


def stored_bytes(root: Path) -> bytes:
    return b"\n".join(p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file())


# ---------------------------------------------------------------- tasks, end to end


@pytest.fixture
def key() -> str:
    return new_key()


async def test_history_memo_and_metadata_hold_none_of_the_task_in_plain_text(
    settings: Settings, dev_server: DevServer, key: str
) -> None:
    own = with_keys(settings, key)
    temporal, client = await keyed_client(own)
    model = script(
        {"tool_calls": [{"name": "bash", "arguments": {"command": f"echo {OUTPUT}"}}]},
        {"text": ANSWER},
        {"text": ANSWER + " and March"},
    )
    async with create_worker(temporal, own):
        task_id = await client.spawn_task("careful", PROMPT, description=DESCRIPTION, model=model)
        paused = await client.check_task(task_id, wait=True, timeout=CEILING)
        assert paused.status == TaskStatus.PAUSED, paused
        assert paused.description == DESCRIPTION
        assert OUTPUT in paused.pending_approvals[0].arguments_preview
        await client.approve(task_id)
        done = await client.check_task(task_id, wait=True, timeout=CEILING)
        assert done.status == TaskStatus.COMPLETED and done.result == ANSWER, done
        events = [e async for e in client.watch(task_id)]
        assert any(e.kind == "tool_finished" and OUTPUT in (e.summary or "") for e in events)
        assert any(e.kind == "decision" and "approve" in (e.summary or "") for e in events)
        await client.send_input(task_id, INPUT)
        again = await client.check_task(task_id, wait=True, timeout=CEILING)
        assert again.result == ANSWER + " and March", again
        transcript = await client.get_transcript(task_id)
        assert any(OUTPUT in m.content for m in transcript if m.role == "tool")
        assert any(INPUT in m.content for m in transcript if m.role == "user")
        events = [e async for e in client.watch(task_id)]
        assert any(e.kind == "input" and INPUT in (e.summary or "") for e in events)

    raw = await raw_texts(dev_server, task_id)
    assert "SubagentWorkflow" in raw and "careful" in raw  # the plain parts are there
    assert KeyRing.parse(key).current_id in raw  # type: ignore[union-attr]
    for secret in (*SECRETS, "SYSTEM-PROMPT-d00d"):
        assert secret not in raw, secret
    blobs = stored_bytes(settings.resolved_blob_dir)
    assert blobs, "the transcript went to the blob store"
    for secret in (*SECRETS, "SYSTEM-PROMPT-d00d"):
        assert secret.encode() not in blobs, secret

    # A client without the key is told which key it needs.
    keyless = SubagentClient(
        await connect_client(own.address, own.namespace),
        task_queue=own.task_queue,
        blob_store=settings.blob_store(),
    )
    with pytest.raises(PayloadKeyMissing, match=KeyRing.parse(key).current_id):  # type: ignore[union-attr]
        await keyless.check_task(task_id)


async def test_a_worker_without_the_key_or_with_another_names_the_key_it_needs(
    settings: Settings, key: str
) -> None:
    """Misconfiguration is loud and loses nothing: the task waits, saying which key it
    needs (``retrying``), and finishes once a worker with that key takes it."""
    own = with_keys(settings, key)
    kid = KeyRing.parse(key).current_id  # type: ignore[union-attr]
    other_key = new_key()
    other_id = KeyRing.parse(other_key).current_id  # type: ignore[union-attr]
    temporal, client = await keyed_client(own)
    for wrong, held in (
        (settings, "this process has no SUBAGENTS_PAYLOAD_KEY"),
        (with_keys(settings, other_key), f"this process holds key(s) {other_id}"),
    ):
        task_id = await client.spawn_task("general", PROMPT, model=script({"text": ANSWER}))
        wrong_temporal = await connect_client(
            wrong.address, wrong.namespace, keys=wrong.payload_keys()
        )
        async with create_worker(wrong_temporal, wrong):
            info = await until(client, task_id, lambda i: bool(i.retrying))
        assert info.status == TaskStatus.PENDING, info
        assert info.retrying is not None and "workflow task" in info.retrying, info
        assert f"encrypted with key {kid}, and {held}" in info.retrying, info.retrying
    # The last task waited through both; a worker with the key finishes it.
    async with create_worker(temporal, own):
        done = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert done.status == TaskStatus.COMPLETED and done.result == ANSWER, done


async def until(client: SubagentClient, task_id: str, test: Any, timeout: float = 30) -> Any:
    """The task's info once ``test(info)`` holds (polled)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        info = await client.check_task(task_id)
        if test(info) or asyncio.get_running_loop().time() > deadline:
            return info
        await asyncio.sleep(0.2)


async def test_a_key_rotates_while_a_task_runs_across_the_change(
    settings: Settings, dev_server: DevServer
) -> None:
    """Paused under key A; workers and clients move to key B keeping A as an old key; the
    task is approved, runs its tool, answers, and its whole transcript reads back."""
    key_a, key_b = new_key(), new_key()
    id_a = KeyRing.parse(key_a).current_id  # type: ignore[union-attr]
    id_b = KeyRing.parse(key_b).current_id  # type: ignore[union-attr]
    before = with_keys(settings, key_a)
    after = with_keys(settings, key_b, key_a)
    model = script(
        {"tool_calls": [{"name": "bash", "arguments": {"command": f"echo {OUTPUT}"}}]},
        {"text": ANSWER},
    )
    temporal_a, client_a = await keyed_client(before)
    async with create_worker(temporal_a, before):
        task_id = await client_a.spawn_task("careful", PROMPT, model=model)
        paused = await client_a.check_task(task_id, wait=True, timeout=CEILING)
        assert paused.status == TaskStatus.PAUSED, paused

    temporal_b, client_b = await keyed_client(after)
    async with create_worker(temporal_b, after):
        assert (await client_b.check_task(task_id)).pause_id == paused.pause_id
        await client_b.approve(task_id)
        done = await client_b.check_task(task_id, wait=True, timeout=CEILING)
    assert done.status == TaskStatus.COMPLETED and done.result == ANSWER, done
    transcript = await client_b.get_transcript(task_id)
    assert [m.role for m in transcript][:2] == ["system", "user"] and PROMPT in transcript[
        1
    ].content
    assert any(OUTPUT in m.content for m in transcript if m.role == "tool")

    raw = await raw_texts(dev_server, task_id)
    assert id_a in raw and id_b in raw  # written under both keys
    for secret in SECRETS:
        assert secret not in raw, secret
    # Dropping the old key too early is named, not silent.
    _, only_b = await keyed_client(with_keys(settings, key_b))
    with pytest.raises(PayloadKeyMissing, match=f"key {id_a}.*SUBAGENTS_PAYLOAD_OLD_KEYS"):
        await only_b.check_task(task_id)


async def test_the_cli_and_the_mcp_server_work_unchanged_with_the_key(
    tmp_path: Path, settings: Settings, dev_server: DevServer, key: str
) -> None:
    """``subagents spawn/check/watch/ls`` and ``subagents mcp``, configured only by the
    environment, against an encrypted worker; a CLI without the key names the one it needs."""
    from ..helpers.cli import _env, arun, failed, ok
    from ..helpers.mcp import call, mcp_session

    own = with_keys(settings, key)
    temporal = await connect_client(own.address, own.namespace, keys=own.payload_keys())
    env = _env(
        tmp_path,
        TEMPORAL_ADDRESS=settings.address,
        SUBAGENTS_TASK_QUEUE=settings.task_queue,
        SUBAGENTS_BLOB_DIR=str(settings.resolved_blob_dir),
        SUBAGENTS_PAYLOAD_KEY=key,
    )
    model = script(
        {"tool_calls": [{"name": "bash", "arguments": {"command": f"echo {OUTPUT}"}}]},
        {"text": ANSWER},
    )
    async with create_worker(temporal, own):
        spawned = ok(await arun("spawn", "general", PROMPT, "--model", model, "--json", env=env))
        task_id = json.loads(spawned.out)["id"]
        checked = ok(await arun("check", task_id, "--wait", "--json", env=env))
        assert json.loads(checked.out)["result"] == ANSWER
        watched = ok(await arun("watch", task_id, env=env))
        assert OUTPUT in watched.out and "closed" in watched.out.lower()
        listed = ok(await arun("ls", "--json", env=env))
        assert task_id in listed.out

        async with asyncio.timeout(30), mcp_session(tmp_path, env) as session:
            is_error, started = await call(
                session, "spawn_subagent", agent="general", prompt=PROMPT, model=model
            )
            assert not is_error, started
            is_error, answer = await call(
                session, "check_subagent", task_id=started["task_id"], timeout=20
            )
            assert not is_error and answer["result"] == ANSWER, answer

    kid = KeyRing.parse(key).current_id  # type: ignore[union-attr]
    keyless = {k: v for k, v in env.items() if k != "SUBAGENTS_PAYLOAD_KEY"}
    refused = failed(await arun("check", task_id, env=keyless))
    assert f"key {kid}" in refused.flat_err and "SUBAGENTS_PAYLOAD_KEY" in refused.flat_err
    # A listing shows what the plain search attributes say, and which key the rest needs.
    [mine] = [t for t in ok(await arun("ls", "--json", env=keyless)).json() if t["id"] == task_id]
    assert mine["agent"] == "general" and mine["status"] == "completed", mine
    assert mine["turns"] == 2 and f"key {kid}" in mine["description"], mine


async def test_a_hostile_model_cannot_read_the_payload_key(
    settings: Settings, key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The key is in the worker's environment; the attacker tries every way to it."""
    from ..helpers.attacks import bash, call, run_attack

    monkeypatch.setenv("SUBAGENTS_PAYLOAD_KEY", key)
    own = with_keys(settings, key)
    temporal, client = await keyed_client(own)
    raw_key = base64.b64decode(key)
    async with create_worker(temporal, own):
        _, outputs = await run_attack(
            client,
            bash(
                'echo "key=$SUBAGENTS_PAYLOAD_KEY"; env; cat /proc/1/environ /proc/self/environ',
                "for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < $f; done 2>/dev/null",
                'python3 -c "import os; print(dict(os.environ))"',
            ),
            call("read_file", path="/proc/1/environ"),
            call("grep", pattern="SUBAGENTS_PAYLOAD", path="/proc/self"),
        )
    text = "\n".join(outputs)
    assert "PATH=" in text and "HOME" in text  # the commands ran
    assert key not in text and raw_key.hex() not in text
    assert "key=" in [line.strip() for line in text.splitlines()]  # the variable is unset
    # Nor can an operator hand it to tools by mistake.
    with pytest.raises(ValueError, match=r"SUBAGENTS_PAYLOAD_KEY.*never reach a tool"):
        Settings(tool_env="HOME, SUBAGENTS_PAYLOAD_KEY")
