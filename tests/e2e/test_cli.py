"""The ``subagents`` command, run for real as a subprocess against real dev servers."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import time
import uuid
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.operatorservice.v1 import RemoveSearchAttributesRequest
from temporalio.client import Client

from durable_subagents import SubagentClient, connect_client
from durable_subagents.config import Settings
from durable_subagents.devserver._dev_server import missing_search_attributes, server_answers
from durable_subagents.testing import DevServer, free_port
from durable_subagents.wire import _search_attributes
from durable_subagents.worker import create_worker

from ..helpers import CEILING, eventually
from ..helpers.agent_files import CLAUDE_REVIEWER, PLANTED_EXPLORE, write
from ..helpers.cli import CLI, _env, arun, failed, ok, run
from ..helpers.processes import connected_to, wait_for
from ..helpers.tasks import give_to_tool_user, script


def _pids_with(marker: str) -> list[int]:
    """Processes whose command line contains ``marker``."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            if marker.encode() in (entry / "cmdline").read_bytes():
                pids.append(int(entry.name))
    return pids


# ---------------------------------------------------------------- tasks, with a worker


async def test_spawn_check_and_ls(env: dict[str, str], worker: None) -> None:
    model = script({"text": "the answer is 42"})
    spawned = ok(
        await arun("spawn", "explore", "find the answer", "--model", model, "--json", env=env)
    )
    task_id = spawned.json()["id"]
    assert set(spawned.json()) == {"id"}
    assert task_id.startswith("subagent-explore-")

    info = ok(await arun("check", task_id, "--wait", "--timeout", "30", "--json", env=env)).json()
    assert info["id"] == task_id
    assert info["status"] == "completed"
    assert info["result"] == "the answer is 42"
    assert info["agent"] == "explore" and info["description"] == "find the answer"
    assert info["turns"] == 1 and info["stop_reason"] == "end_turn"

    human = ok(await arun("check", task_id, env=env)).out
    assert task_id in human and "completed" in human
    assert "agent explore" in human and "the answer is 42" in human

    async def listed(*extra: str) -> list[dict[str, Any]]:
        tasks = ok(await arun("ls", *extra, "--json", env=env)).json()
        assert isinstance(tasks, list)
        return [t for t in tasks if t["id"] == task_id]

    everything = await eventually(listed, "the task in the list")
    assert [t["status"] for t in everything] == ["completed"]
    completed = await eventually(lambda: listed("--status", "completed"), "it completed")
    assert [t["id"] for t in completed] == [task_id]
    assert await listed("--status", "running") == []
    table = ok(await arun("ls", env=env)).out
    row = [line for line in table.splitlines() if task_id in line]  # the id is never shortened
    assert len(row) == 1 and "completed" in row[0] and "explore" in row[0], table


async def test_ls_fits_80_columns_by_cutting_descriptions_never_ids_or_names(
    env: dict[str, str], tmp_path: Path
) -> None:
    project = tmp_path / "project"
    (project / ".claude" / "agents").mkdir(parents=True)
    (project / ".claude" / "agents" / "code-rev.md").write_text(
        "---\nname: code-rev\ndescription: Reviews code\ntools: Read, Grep\n---\nReview.\n"
    )
    parent = f"ls-{uuid.uuid4().hex[:8]}"
    spawned = [
        ok(
            await arun(
                "spawn",
                agent,
                "look",
                "--description",
                description,
                "--parent",
                parent,
                "--agents-dir",
                str(project),
                "--json",
                env=env,
            )
        ).json()["id"]
        for agent, description in (
            ("code-rev", "review the retry logic of the payment module " * 3),
            ("explore", "a short one"),
        )
    ]  # fmt: skip  (no worker: both stay pending)

    async def table() -> list[str]:
        lines = ok(await arun("ls", "--parent", parent, env=env)).out.splitlines()
        return lines if len(lines) == 3 else []

    lines = await eventually(table, "both tasks in the table")
    header = ["id", "agent", "status", "turns", "cost", "age", "description"]
    assert lines[0].split() == header, lines
    assert all(len(line) <= 80 for line in lines), lines  # a pipe: 80 columns
    newest, oldest = (line.split(maxsplit=6) for line in lines[1:])
    assert newest[:5] == [spawned[1], "explore", "pending", "0", "-"]
    assert newest[6] == "a short one"
    assert oldest[:5] == [spawned[0], "code-rev", "pending", "0", "-"]
    assert re.fullmatch(r"\d+[smh]", oldest[5]) and re.fullmatch(r"\d+[smh]", newest[5])
    assert oldest[6].startswith("review the") and oldest[6].endswith("…")
    assert len(lines[2]) == 80, lines  # cut to the width, not wrapped
    limited = ok(await arun("ls", "--parent", parent, "--limit", "1", env=env)).out.splitlines()
    assert [line.split()[0] for line in limited] == ["id", spawned[1]]


async def test_spawn_reads_the_prompt_from_stdin_and_waits(
    env: dict[str, str], worker: None
) -> None:
    model = script({"text": "echo: {prompt}"})
    result = ok(
        await arun(
            "spawn", "plan", "-", "--model", model, "--description", "from stdin",
            "--wait", "--json", env=env, stdin="plan the release\n",
        )
    )  # fmt: skip
    info = result.json()
    assert info["status"] == "completed"
    assert info["result"].rstrip() == "echo: plan the release"
    assert info["agent"] == "plan" and info["description"] == "from stdin"
    assert info["id"].startswith("subagent-plan-")


async def test_cancel_stops_a_long_bash(env: dict[str, str], worker: None) -> None:
    marker = f"3601.{uuid.uuid4().int % 10**6:06d}"  # a sleep only this test runs
    model = script({"tool_calls": [{"name": "bash", "arguments": {"command": f"sleep {marker}"}}]})
    spawned = ok(await arun("spawn", "general", "sleep a lot", "--model", model, "--json", env=env))
    task_id = spawned.json()["id"]

    async def sleeping() -> list[int]:
        return _pids_with(f"sleep {marker}")

    await eventually(sleeping, "the bash tool to start")
    info = ok(await arun("check", task_id, "--json", env=env)).json()
    assert info["status"] == "running"

    started = time.monotonic()
    cancelled = ok(await arun("cancel", task_id, "--json", env=env)).json()
    assert cancelled["id"] == task_id
    assert cancelled["status"] == "cancelled"
    assert time.monotonic() - started < 20

    async def gone() -> bool:
        return not await sleeping()

    await eventually(gone, "cancel to end the sleep")
    again = ok(await arun("check", task_id, "--json", env=env)).json()
    assert again["status"] == "cancelled"


async def test_cancel_of_a_finished_task_says_it_had_already_finished(
    env: dict[str, str], worker: None
) -> None:
    model = script({"text": "done"})
    spawned = ok(await arun("spawn", "explore", "x", "--model", model, "--wait", "--json", env=env))
    task_id = spawned.json()["id"]
    human = ok(await arun("cancel", task_id, env=env))
    assert "completed" in human.out
    assert f"task {task_id} had already finished (completed): nothing was cancelled" in " ".join(
        human.out.split()
    )
    as_json = ok(await arun("cancel", task_id, "--json", env=env)).json()
    assert as_json["status"] == "completed" and as_json["already_finished"] is True
    # a task the cancel stopped is not said to have finished before it
    long = script({"tool_calls": [{"name": "bash", "arguments": {"command": "sleep 600"}}]})
    running = ok(await arun("spawn", "general", "x", "--model", long, "--json", env=env)).json()
    cancelled = ok(await arun("cancel", running["id"], "--json", env=env)).json()
    assert cancelled["status"] == "cancelled" and cancelled["already_finished"] is False
    again = ok(await arun("cancel", running["id"], env=env))
    assert "had already finished (cancelled)" in " ".join(again.out.split())


async def test_watch_prints_turns_tools_and_close(
    env: dict[str, str], worker: None, workspace: Path
) -> None:
    (workspace / "a.txt").write_text("hello\n")
    model = script(
        {"tool_calls": [{"name": "read_file", "arguments": {"path": "a.txt"}}]}, {"text": "bye"}
    )
    task_id = ok(await arun("spawn", "explore", "watch me", "--model", model, "--json", env=env))
    watched = ok(await arun("watch", task_id.json()["id"], env=env))
    lines = [line.split(maxsplit=2) for line in watched.out.splitlines() if line.strip()]
    kinds = [parts[1] for parts in lines]
    assert all(len(parts[0]) == 8 and parts[0].count(":") == 2 for parts in lines), watched.out
    assert kinds.count("turn") == 2
    assert "tool_started" in kinds and "tool_finished" in kinds
    assert any(p[1] == "tool_started" and "read_file" in p[2] for p in lines), watched.out
    assert lines[-1][1:] == ["closed", "completed"]


async def test_check_of_a_task_running_a_command_shows_the_usage_of_its_turns(
    env: dict[str, str], worker: None
) -> None:
    marker = f"3603.{uuid.uuid4().int % 10**6:06d}"  # a sleep only this test runs
    model = script(
        {
            "tool_calls": [{"name": "bash", "arguments": {"command": f"sleep {marker}"}}],
            "usage": {"input_tokens": 1234, "output_tokens": 56},
        },
    )
    spawned = ok(await arun("spawn", "general", "sleep", "--model", model, "--json", env=env))
    task_id = spawned.json()["id"]

    async def sleeping() -> list[int]:
        return _pids_with(f"sleep {marker}")

    await eventually(sleeping, "the bash tool to start")
    shown = ok(await arun("check", task_id, env=env)).out
    assert shown.splitlines()[:3] == [
        f"{task_id}  running",
        "  agent general · turns 1 · model scripted",
        "  tokens in 1,234 / out 56",
    ], shown
    ok(await arun("cancel", task_id, env=env))


async def test_watch_json_of_a_finished_task_keeps_each_events_recorded_time(
    env: dict[str, str], worker: None, workspace: Path
) -> None:
    (workspace / "a.txt").write_text("hello\n")
    model = script(
        {"text": "reading", "tool_calls": [{"name": "read_file", "arguments": {"path": "a.txt"}}]},
        {"text": "it says hello"},
    )
    task_id = ok(await arun("spawn", "explore", "read", "--model", model, "--json", env=env))
    task_id = task_id.json()["id"]
    checked = ok(await arun("check", task_id, "--wait", "--json", env=env)).json()
    await asyncio.sleep(1.5)  # a replay now is later than any event
    events = [
        json.loads(line)
        for line in ok(await arun("watch", task_id, "--json", env=env)).out.splitlines()
    ]
    kinds = [e["kind"] for e in events]
    assert kinds == [
        "status", "text", "turn", "tool_started", "tool_finished", "text", "turn", "status",
        "closed",
    ], kinds  # fmt: skip
    times = [e["time"] for e in events]
    assert times == sorted(times), events  # replayed text is not stamped with the replay time
    # UTC, said as check --json says it: the times compare across both
    assert all(t.endswith("Z") for t in [*times, checked["created_at"]]), events
    created = datetime.fromisoformat(checked["created_at"])
    assert all(created - timedelta(seconds=5) < datetime.fromisoformat(t) for t in times)
    for i, event in enumerate(events):
        if event["kind"] == "text":  # the text is the turn's, recorded when the turn ended
            assert event["time"] == events[i + 1]["time"] and events[i + 1]["kind"] == "turn"


async def test_watch_and_check_wait_say_in_one_line_that_the_server_went_away(
    tmp_path: Path,
) -> None:
    """The server dies under `watch` and `check --wait`: each says so in one line, that
    the task goes on, and exits 1; the task finishes once the server is back."""
    (tmp_path / "ws").mkdir()
    workspace = give_to_tool_user(tmp_path / "ws")
    async with DevServer(
        port=free_port(), ui_port=free_port(), db=tmp_path / "own.db", ui=False
    ) as server:
        settings = Settings(
            address=server.address,
            task_queue=f"lost-{uuid.uuid4().hex[:8]}",
            data_dir=tmp_path / "data",
            blob_dir=tmp_path / "blobs",
            workspace=workspace,
        )
        env = _env(tmp_path, TEMPORAL_ADDRESS=server.address)
        temporal = await connect_client(server.address)
        client = SubagentClient(
            temporal, task_queue=settings.task_queue, blob_store=settings.blob_store()
        )
        async with create_worker(temporal, settings):
            model = script(
                {"tool_calls": [{"name": "bash", "arguments": {"command": "sleep 15"}}]},
                {"text": "slept through it"},
            )
            task_id = await client.spawn_task("general", "sleep", model=model)
            watcher = await asyncio.create_subprocess_exec(
                *CLI, "watch", task_id, env=env,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            )  # fmt: skip
            # given as an option, the address is kept in the command it says to run again
            waiter = await asyncio.create_subprocess_exec(
                *CLI, "check", task_id, "--wait", "--timeout", "600",
                "--address", server.address, env=_env(tmp_path),
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            )  # fmt: skip
            assert watcher.stdout is not None and watcher.stderr is not None
            seen = b""
            while b"tool_started" not in seen:  # watching, and the command runs
                line = await asyncio.wait_for(watcher.stdout.readline(), CEILING)
                assert line, (seen, await watcher.stderr.read())
                seen += line
            port = int(server.address.rsplit(":", 1)[1])
            await wait_for(lambda: connected_to(waiter.pid, port), what="check --wait to connect")
            assert server.pid is not None
            os.killpg(server.pid, signal.SIGKILL)
            await server.stop()  # reaps it

            out, err = await asyncio.wait_for(watcher.communicate(), 240)
            waited_out, waited_err = await asyncio.wait_for(waiter.communicate(), 240)
            await server.start()  # the same database: the task goes on
            done = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert done.status == "completed" and done.result == "slept through it", done
    lost = f"error: lost the connection to Temporal at {server.address}: the server does not answer"
    assert watcher.returncode == 1, (seen, out, err)
    assert err.decode() == (
        f"{lost}; the task goes on (it runs on the workers, and Temporal keeps it); run "
        f"`subagents watch {task_id} --after 2` again once the server answers\n"
    ), err.decode()  # where it stopped: after the tool_started event, offset 2
    kinds = [line.split()[1] for line in (seen + out).decode().splitlines()]
    assert kinds == ["status", "turn", "tool_started"], (seen + out).decode()
    assert waiter.returncode == 1 and waited_out == b""
    assert waited_err.decode() == (
        f"{lost}; the task goes on (it runs on the workers, and Temporal keeps it); run "
        f"`subagents check {task_id} --wait --address {server.address}` again once the server "
        "answers\n"
    ), waited_err.decode()


# ---------------------------------------------------------------- no worker needed


def test_agents_lists_the_builtins() -> None:
    env = _env(Path("/nonexistent"))
    table = ok(run("agents", env=env)).out
    for name in ("explore", "plan", "research", "general"):
        assert name in table
    agents = ok(run("agents", "--json", env=env)).json()
    assert [a["name"] for a in agents] == ["explore", "plan", "research", "general"]
    assert all(a["description"] and a["max_turns"] >= 1 for a in agents)


def test_agents_from_a_subdirectory_lists_the_roots_not_a_planted_one(tmp_path: Path) -> None:
    """`subagents agents` in `src/` reads the repository's agents, never `src/.claude`."""
    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    write(project / ".claude/agents/reviewer.md", CLAUDE_REVIEWER)
    planted = write(project / "src/.claude/agents/explore.md", PLANTED_EXPLORE)
    src = project / "src"
    listed = ok(run("agents", "--json", env=_env(tmp_path), cwd=src))
    rows = {a["name"]: a for a in listed.json()}
    assert list(rows) == ["explore", "plan", "research", "general", "reviewer"]
    assert rows["explore"]["source"] == "built-in"
    assert rows["explore"]["tools"] == ["read_file", "list_files", "grep"]
    assert rows["reviewer"]["source"] == str(project.resolve() / ".claude/agents/reviewer.md")
    assert listed.err == ""  # the planted file was not read: it would warn it replaces explore
    # naming the directory is how to read it: --agents-dir, or SUBAGENTS_AGENTS_DIR
    for named in (["--agents-dir", str(src)], []):
        env = _env(tmp_path, **({} if named else {"SUBAGENTS_AGENTS_DIR": str(src)}))
        chosen = ok(run("agents", "--json", *named, env=env, cwd=project))
        rows = {a["name"]: a for a in chosen.json()}
        assert rows["explore"]["permission_mode"] == "dont_ask" and "reviewer" not in rows
        assert f"{planted}: agent 'explore' replaces the built-in" in chosen.err


def test_agents_in_a_pipe_keep_every_name_and_source_whole(tmp_path: Path) -> None:
    """A script that reads `subagents agents` line by line finds each agent by name."""
    agents = tmp_path / ".claude" / "agents"
    agents.mkdir(parents=True)
    name = "code-reviewer-for-the-payment-service"
    (agents / f"{name}.md").write_text(
        f"---\nname: {name}\ndescription: {'Reviews payment code for retries. ' * 6}\n"
        "tools: Read, Grep, Bash\n---\nReview.\n"
    )
    lines = ok(run("agents", "--agents-dir", str(tmp_path), env=_env(tmp_path))).out.splitlines()
    assert lines[0].split() == ["name", "tools", "mode", "turns", "source", "description"]
    rows = {line.split()[0]: line.split(maxsplit=5) for line in lines[1:]}
    assert list(rows) == ["explore", "plan", "research", "general", name], lines
    _, tools, mode, turns, source, description = rows[name]
    assert (tools, mode) == ("read_file,grep,bash", "default") and turns.isdigit()
    assert source.endswith(f".claude/agents/{name}.md")
    # the free text is cut to the width: one line per agent, however long
    assert description.startswith("Reviews pa") and description.endswith("…")
    assert len(lines) == 6


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["spawn", "nope", "do it"],
            ["unknown agent 'nope'", "known: explore, plan, research, general"],
        ),
        (["spawn", "explore", "   "], ["prompt is empty"]),
        (["check", "no-such-task"], ["no task 'no-such-task'", "subagents ls"]),
        (["cancel", "no-such-task"], ["no task 'no-such-task'"]),
        (["watch", "no-such-task"], ["no task 'no-such-task'"]),
        (["check", "[/bold]x"], ["no task '[/bold]x'"]),  # not read as rich markup
        (["approve", "no-such-task", "--all"], ["no task 'no-such-task'"]),
        (["reject", "no-such-task", "c1", "--reason", "no"], ["no task 'no-such-task'"]),
        (["send", "no-such-task", "more"], ["no task 'no-such-task'"]),
        (["spawn", "plan", "x", "--permission-mode", "dont_ask"], ["more permissive"]),
    ],
    ids=["unknown-agent", "empty-prompt", "check-unknown", "cancel-unknown",
         "watch-unknown", "markup-in-message", "approve-unknown", "reject-unknown",
         "send-unknown", "widening-mode"],
)  # fmt: skip
def test_bad_requests_fail_cleanly(
    env: dict[str, str], args: list[str], expected: list[str]
) -> None:
    result = failed(run(*args, env=env))
    for text in expected:
        assert text in result.flat_err
    assert result.err.count("error:") == 1


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["spawn", "explore", "x", "--metadata", "{nope"], ["--metadata is not JSON"]),
        (["spawn", "explore", "x", "--metadata", "[1]"], ["metadata must be a dict"]),
        (["spawn", "explore", "x", "--max-turns", "-1"], ["--max-turns must be", "got -1"]),
        (["spawn", "explore", "x", "--max-turns", "0"], ["--max-turns must be", "got 0"]),
        (["spawn", "explore", "x", "--max-turns", "100000000"], ["--max-turns must be at most"]),
        (["spawn", "explore", "x", "--time-limit", "0"], ["--time-limit must be more than 0"]),
        (["spawn", "explore", "x", "--time-limit", "inf"], ["--time-limit must be more than 0"]),
        (["spawn", "explore", "x", "--approval-timeout", "-5"], ["--approval-timeout must be"]),
        (["spawn", "explore", "x", "--token-budget", "0"], ["--token-budget must be"]),
        (["spawn", "explore", "x", "--permission-mode", "yolo"], ["unknown --permission-mode"]),
        (["spawn", "explore", "x", "--reasoning-effort", "max"], ["unknown reasoning_effort"]),
        (["spawn", "explore", "x", "--workspace", "../.."], ["leaves the worker's workspace"]),
        (["spawn", "explore", "x", "--task-id", "a b"], ["task"]),
        (["spawn", "explore", "x", "--model", "gpt-4"], ["openai:<model>"]),
        (["spawn", "explore", "x", "--output-schema", "/nonexistent.json"], ["cannot read"]),
        (["check", "x", "--timeout", "-1"], ["--timeout", "finite number of seconds >= 0"]),
        (["check", "x", "--wait", "--timeout", "nan"], ["--timeout"]),
        (["cancel", "x", "--timeout", "-1"], ["--timeout"]),
        (["reject", "x", "--all", "--reason", "r" * 5000], ["--reason", "4096 bytes"]),
        (["ls", "--status", "bogus"], ["--status", "unknown status 'bogus'"]),
        (["dev", "--port", "70000"], ["--port"]),
        (["demo", "--ui-port", "0"], ["--ui-port"]),
    ],
    ids=["metadata-not-json", "metadata-not-object", "max-turns-negative", "max-turns-0",
         "max-turns-huge", "time-limit-0", "time-limit-inf", "approval-timeout-negative",
         "token-budget-0", "unknown-mode", "unknown-effort", "workspace-outside", "bad-task-id",
         "bad-model", "unreadable-schema", "check-timeout", "check-timeout-nan",
         "cancel-timeout", "long-reason", "unknown-status", "dev-port", "demo-ui-port"],
)  # fmt: skip
def test_usage_errors_exit_2_before_anything_connects(
    tmp_path: Path, args: list[str], expected: list[str]
) -> None:
    """A value that is wrong in itself is a usage error, told before any server is asked
    (none answers on this address)."""
    command = args if args[0] in ("dev", "demo") else [*args, "--address", "127.0.0.1:1"]
    result = run(*command, env=_env(tmp_path))
    assert result.code == 2, result
    assert "Traceback" not in result.err and result.out == ""
    assert "cannot reach" not in result.err
    flat = result.flat_err
    assert flat.startswith(f"Usage: subagents {args[0]} ") and "Error: Invalid value" in flat
    for text in expected:
        assert text in flat, flat


@pytest.mark.parametrize(
    ("model", "said"),
    [("gpt-4", "unknown model 'gpt-4' (from SUBAGENTS_MODEL); use one of"),
     ("openai:", "model 'openai:' (from SUBAGENTS_MODEL) names no model")],
)  # fmt: skip
def test_a_bad_model_from_the_environment_is_named_as_such(
    env: dict[str, str], model: str, said: str
) -> None:
    result = failed(run("spawn", "explore", "x", env={**env, "SUBAGENTS_MODEL": model}))
    assert said in result.flat_err, result.err
    given = run("spawn", "explore", "x", "--model", model, env=env)  # a usage error
    assert given.code == 2 and "SUBAGENTS_MODEL" not in given.flat_err, given.err


async def test_an_oversized_prompt_is_refused_before_anything_starts(
    env: dict[str, str], client: SubagentClient
) -> None:
    result = failed(await arun("spawn", "explore", "-", env=env, stdin="z" * 300_000))
    assert "over the" in result.flat_err and "write the material to a file" in result.flat_err
    assert not [t for t in await client.list_tasks() if t.description.startswith("zzzzzzzz")]


def test_unreachable_server_names_the_address_and_subagents_dev(tmp_path: Path) -> None:
    started = time.monotonic()
    result = failed(run("ls", "--address", "127.0.0.1:1", env=_env(tmp_path)))
    assert time.monotonic() - started < 30
    assert "cannot reach Temporal at 127.0.0.1:1" in result.flat_err
    assert "`subagents dev`" in result.flat_err
    spawn = failed(
        run("spawn", "explore", "x", "--address", "127.0.0.1:1", env=_env(tmp_path), timeout=30)
    )
    assert "127.0.0.1:1" in spawn.flat_err and "subagents dev" in spawn.flat_err


def test_help_keeps_bracketed_text(tmp_path: Path) -> None:
    out = " ".join(ok(run("ls", "--help", env=_env(tmp_path))).out.split())
    assert "[env TEMPORAL_ADDRESS; localhost:7233]" in out
    assert "[env SUBAGENTS_TASK_QUEUE; subagents]" in out
    dev = " ".join(ok(run("dev", "--help", env=_env(tmp_path))).out.split())
    assert "[default: per-user data dir]" in dev


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("localhost:abc", "'localhost:abc' has no valid port ('abc'); give host:port, e.g. "
         "localhost:7233 (--address or TEMPORAL_ADDRESS)"),
        ("not a host", "'not a host' has no port; give host:port, e.g. not a host:7233"),
        ("localhost", "'localhost' has no port; give host:port, e.g. localhost:7233 "
         "(--address or TEMPORAL_ADDRESS)"),
        ("http://localhost:7233", "'http://localhost:7233' is a URL; give the Temporal address "
         "as host:port without http://, e.g. localhost:7233 (--address or TEMPORAL_ADDRESS)"),
        ("[::1]", "'[::1]' has no port; give host:port, e.g. [::1]:7233"),
    ],
    ids=["bad-port", "spaces", "no-port", "url", "ipv6-no-port"],
)  # fmt: skip
def test_a_malformed_address_is_one_line(tmp_path: Path, address: str, expected: str) -> None:
    result = failed(run("ls", "--address", address, env=_env(tmp_path)))
    assert result.err.count("\n") == 1, result.err  # no UserWarning, no source line
    assert result.err.startswith(f"error: {expected}"), result.err


@pytest.mark.parametrize(
    ("address", "reason", "transport"),
    [
        ("127.0.0.1:1", "connection refused", "Os { code: 111"),
        ("no-such-host.invalid:7233", "no such host", "dns error"),
    ],
    ids=["refused", "no-such-host"],
)
def test_an_unreachable_address_says_why_in_words_and_v_shows_the_detail(
    tmp_path: Path, address: str, reason: str, transport: str
) -> None:
    result = failed(run("check", "some-task", "--address", address, env=_env(tmp_path)))
    assert result.err == (
        f"error: cannot reach Temporal at {address} (namespace 'default'): {reason}. Start a "
        "local server with `subagents dev`, or point TEMPORAL_ADDRESS / --address at a running "
        "one (`subagents -v ...` shows the transport's error)\n"
    ), result.err
    verbose = run("-v", "check", "some-task", "--address", address, env=_env(tmp_path))
    assert verbose.code == 1 and verbose.out == ""
    first, detail = verbose.err.splitlines()
    assert first.startswith(f"error: cannot reach Temporal at {address}") and reason in first
    assert detail.startswith("  detail: ") and "tonic::transport" in detail
    assert transport in detail


def test_the_web_uis_port_is_named_as_not_a_temporal_frontend(
    tmp_path: Path, dev_server: DevServer
) -> None:
    """The Web UI's port (8233 beside 7233) answers HTTP/1, not gRPC: said in words."""
    address = f"127.0.0.1:{dev_server.ui_port}"
    # The transport's own error differs from one try to the next (the Web UI's answer
    # read as an HTTP/2 frame, or a broken pipe): each says the same.
    for command in (["check", "some-task"], ["ls"], ["cancel", "some-task"]):
        result = failed(run(*command, "--address", address, env=_env(tmp_path)))
        assert result.flat_err.startswith(
            f"error: cannot reach Temporal at {address} (namespace 'default'): something "
            "answers there, but it is not a Temporal frontend (it answers HTTP/1, as a web "
            "server does"
        ), result.err
        assert result.err.count("\n") == 1, result.err


def test_version(tmp_path: Path) -> None:
    from importlib.metadata import version

    import durable_subagents

    installed = version("durable-subagents")
    assert durable_subagents.__version__ == installed
    result = ok(run("--version", env=_env(tmp_path)))
    assert result.out == f"subagents (durable-subagents) {installed}\n" and result.err == ""


_COMMANDS = [
    "dev", "worker", "codec-server", "keygen", "spawn", "check", "cancel", "approve", "reject",
    "send", "ls", "watch", "agents", "mcp", "demo",
]  # fmt: skip


def test_usage_and_help_name_arguments_and_values_conventionally(tmp_path: Path) -> None:
    usages = {}
    for command in _COMMANDS:
        out = ok(run(command, "--help", env=_env(tmp_path))).out
        usages[command] = out.splitlines()[0]
        # no Python types, no {required} or [lowercase] argument forms
        assert not re.search(r"<(str|int|float|bool|path|list)", out), out
        assert not re.search(r"\{\w+\}|\[[a-z_]+\]", usages[command]), usages[command]
    assert usages["spawn"] == "Usage: subagents spawn [OPTIONS] AGENT PROMPT"
    assert usages["approve"] == "Usage: subagents approve [OPTIONS] ID [CALL_ID]..."
    assert usages["send"] == "Usage: subagents send [OPTIONS] ID TEXT"
    assert usages["check"] == "Usage: subagents check [OPTIONS] ID"
    spawn = ok(run("spawn", "--help", env=_env(tmp_path))).out
    for option in ("--tool TOOL", "--ask TOOL[:GLOB]", "--time-limit SECONDS", "--max-turns N",
                   "--address HOST:PORT", "--workspace DIR", "--token-budget N"):  # fmt: skip
        assert f"  {option} " in spawn, (option, spawn)
    assert "  AGENT " in spawn and "  PROMPT " in spawn
    worker = " ".join(ok(run("worker", "--help", env=_env(tmp_path))).out.split())
    assert "--role all|tasks|tools" in worker
    # the errors name arguments as the usage line does
    missing = run("spawn", "explore", env=_env(tmp_path))
    assert missing.code == 2 and "Missing argument 'PROMPT'" in missing.err, missing.err
    undecided = run("approve", "some-task", "--address", "127.0.0.1:1", env=_env(tmp_path))
    assert undecided.code == 2
    assert "[CALL_ID]..." in undecided.err and "Invalid value for CALL_ID:" in undecided.err


def test_bad_status_is_a_usage_error(env: dict[str, str]) -> None:
    result = run("ls", "--status", "bogus", env=env)
    assert result.code == 2
    assert "Traceback" not in result.err
    assert "bogus" in result.err and "--status" in result.err


# ---------------------------------------------------------------- worker command


async def test_worker_command_runs_tasks_and_stops_on_sigterm(
    env: dict[str, str], settings: Settings
) -> None:
    assert settings.workspace is not None
    proc = await asyncio.create_subprocess_exec(
        *CLI, "worker", "--workspace", str(settings.workspace),
        env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    try:
        banner = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode()
        assert banner.startswith(f"worker on {settings.address}"), banner
        result = ok(
            await arun(
                "spawn", "explore", "hi", "--model", script({"text": "from the cli worker"}),
                "--wait", "--json", env=env,
            )
        )  # fmt: skip
        assert result.json()["status"] == "completed"
        assert result.json()["result"] == "from the cli worker"
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
    code = await asyncio.wait_for(proc.wait(), 15)
    err = (await proc.stderr.read()).decode()
    assert code == 128 + signal.SIGTERM, err
    assert "Traceback" not in err


async def test_tasks_and_tools_workers_split_a_deployment(
    env: dict[str, str], settings: Settings, tmp_path: Path
) -> None:
    """``--role tasks`` on one host, ``--role tools`` on another: the commands run on
    the tools host, and wait for it while it is down."""
    hosts = {role: tmp_path / f"{role}-host" for role in ("tasks", "tools")}
    procs: list[asyncio.subprocess.Process] = []

    async def start(role: str) -> str:
        hosts[role].mkdir()
        give_to_tool_user(hosts[role])
        proc = await asyncio.create_subprocess_exec(
            *CLI, "worker", "--role", role, "--workspace", str(hosts[role]),
            env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        procs.append(proc)
        assert proc.stdout is not None
        return (await asyncio.wait_for(proc.stdout.readline(), 30)).decode()

    try:
        assert "no tool calls" in await start("tasks")
        model = script(
            {"tool_calls": [{"name": "bash", "arguments": {"command": "echo ran > where.txt"}}]},
            {"text": "done"},
        )
        spawned = ok(await arun("spawn", "general", "x", "--model", model, "--json", env=env))
        task_id = spawned.json()["id"]
        for _ in range(60):  # the command waits, and the task says for what
            checked = ok(await arun("check", task_id, "--json", env=env)).json()
            if checked.get("waiting"):
                break
            await asyncio.sleep(0.5)
        assert checked["status"] == "running"
        assert checked["waiting"].startswith("a tool call has waited")
        assert f"for a worker on task queue '{settings.task_queue}-tools'" in checked["waiting"]
        human = ok(await arun("check", task_id, env=env)).out
        assert "waiting: a tool call has waited" in human
        assert not any((host / "where.txt").exists() for host in hosts.values() if host.exists())

        assert f"tool calls only, on {settings.task_queue}-tools" in await start("tools")
        done = ok(await arun("check", task_id, "--wait", "--json", env=env))
        assert done.json()["status"] == "completed"
        assert (hosts["tools"] / "where.txt").read_text() == "ran\n"
        assert not (hosts["tasks"] / "where.txt").exists()
    finally:
        for proc in procs:
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            await asyncio.wait_for(proc.wait(), 15)


async def test_worker_refuses_a_namespace_without_the_search_attributes(tmp_path: Path) -> None:
    names = [key.name for key in _search_attributes.ALL]
    async with DevServer(
        port=free_port(), ui_port=free_port(), db=tmp_path / "bare.db", ui=False
    ) as server:
        admin = await Client.connect(server.address)
        await admin.operator_service.remove_search_attributes(
            RemoveSearchAttributesRequest(namespace="default", search_attributes=names)
        )
        assert sorted(await missing_search_attributes(admin, "default")) == sorted(names)

        started = time.monotonic()
        result = failed(
            await arun(
                "worker", "--address", server.address, "--workspace", str(tmp_path),
                env=_env(tmp_path), timeout=20,
            )
        )  # fmt: skip
        assert time.monotonic() - started < 10
        assert "lacks the search attributes" in result.flat_err
        # one command per line, unwrapped, ready to copy
        lines = result.err.splitlines()
        for name in names:
            assert name in lines[0] + lines[1]
            kind = "Int" if name == "SubagentTurns" else "Keyword"
            # pasted as shown, it goes to the server the worker was given
            command = (
                f"temporal operator search-attribute create --address {server.address} "
                f"--namespace default --name {name} --type {kind}"
            )
            assert command in lines
        # and it did not register them behind the operator's back
        assert sorted(await missing_search_attributes(admin, "default")) == sorted(names)


# ---------------------------------------------------------------- demo and dev


@pytest.mark.parametrize(
    ("args", "env_model", "said"),
    [(["--model", "gpt-4"], None, "unknown model 'gpt-4' (from --model)"),
     ([], "gpt-4", "unknown model 'gpt-4' (from SUBAGENTS_MODEL)"),
     ([], "openai:gpt-4.1-mini",
      "(from SUBAGENTS_MODEL) needs OPENAI_API_KEY, and OPENAI_API_KEY is not set"),
     (["--model", "anthropic:claude-haiku-4-5"], None, "ANTHROPIC_API_KEY is not set")],
    ids=["bad-option", "bad-env", "no-openai-key", "no-anthropic-key"],
)  # fmt: skip
def test_demo_checks_its_model_before_it_starts_anything(
    tmp_path: Path, args: list[str], env_model: str | None, said: str
) -> None:
    port, ui_port = free_port(), free_port()
    db = tmp_path / "demo.db"
    env = _env(tmp_path, **({"SUBAGENTS_MODEL": env_model} if env_model else {}))
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"):
        env.pop(name, None)
    command = ["demo", "--port", str(port), "--ui-port", str(ui_port), "--db", str(db), *args]
    result = failed(run(*command, env=env))
    assert said in result.flat_err and result.err.count("\n") == 1, result.err
    assert not db.exists()  # no server was started
    assert not (tmp_path / "cli-data" / "demo-workspace").exists()


async def test_demo_runs_offline_and_cleans_up(tmp_path: Path) -> None:
    port, ui_port = free_port(), free_port()
    db = tmp_path / "demo.db"
    env = _env(tmp_path)
    result = ok(
        await arun(
            "demo", "--port", str(port), "--ui-port", str(ui_port), "--db", str(db),
            env=env,
        )
    )  # fmt: skip
    out = result.out
    flat = " ".join(out.split())
    assert "Model: the offline scripted model" in flat
    assert "no LLM is called" in flat
    for agent, turns in (("explore", 3), ("plan", 3), ("research", 4), ("general", 2)):
        assert f"{agent} · completed · {turns} turns" in out
    # general (narrowed to mode `default`) paused on bash; the demo showed and approved it
    assert "general paused for approval" in flat
    assert '"command": "wc -l inventory/*.py tests/*.py"' in out
    assert "The demo approves call_0_0" in out
    # ... and the task answered with the command's real output
    workspace = Path(__file__).parents[2] / "durable_subagents" / "cli" / "demo_workspace"
    for name in ("inventory/models.py", "inventory/store.py", "tests/test_models.py"):
        lines = len((workspace / name).read_text().splitlines())
        assert re.search(rf"│ +{lines} {re.escape(name)} ", out), (name, out)
    # as wc -l printed it: its counts right-aligned, the first line's too
    general = out[out.index("general · completed") :]
    counts = re.findall(r"^│( +\d+) (?:\S+\.py|total) ", general, re.M)
    assert len(counts) == 6 and len({len(c) for c in counts}) == 1, general
    # where the tasks are kept, and the exact command that serves them
    assert (
        f"The tasks are kept in {db.resolve()}. To browse them in the Web UI at the links "
        f"above, run:\n  subagents dev --port {port} --ui-port {ui_port} --db {db}\n"
    ) in out, out
    # a follow-up to the finished explore task: a new run with a different answer
    assert "> Which of these functions have tests?" in out
    follow_up = out[out.index("Follow-up:") :]
    assert "explore · completed · 5 turns in all · follow-up run" in follow_up
    assert "This follow-up answer comes from" in " ".join(follow_up.split())
    assert "def test_remove_more_than_stock_fails" in follow_up
    assert "inventory/store.py" not in follow_up  # not the first answer again
    assert out.count("· completed ·") == 5
    links = [line.strip() for line in out.splitlines() if "Web UI:" in line]
    assert len(links) == 4
    for link in links:
        assert link.startswith(f"Web UI: http://127.0.0.1:{ui_port}/namespaces/default/workflows/")
        assert "/workflows/subagent-" in link
    assert "┘╭" not in out, "the progress table and the first result share a line"
    assert db.is_file()
    # the demo's own server is gone with it
    assert not await server_answers(f"127.0.0.1:{port}", timeout=0.5)
    assert _pids_with(str(db.resolve())) == []


@pytest.mark.parametrize("stop_signal", [signal.SIGINT, signal.SIGTERM], ids=["INT", "TERM"])
async def test_dev_serves_runs_tasks_and_stops(tmp_path: Path, stop_signal: signal.Signals) -> None:
    port, ui_port = free_port(), free_port()
    db = tmp_path / "dev.db"
    workspace = tmp_path / "ws"
    workspace.mkdir()
    env = _env(tmp_path, SUBAGENTS_TASK_QUEUE=f"cli-dev-{uuid.uuid4().hex[:8]}")
    args = ["dev", "--port", str(port), "--ui-port", str(ui_port), "--db", str(db)]
    proc = await asyncio.create_subprocess_exec(
        *CLI, *args, "--workspace", str(workspace),
        env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    banner = ""
    try:
        deadline = time.monotonic() + CEILING
        while "Ctrl-C to stop" not in banner:
            line = await asyncio.wait_for(proc.stdout.readline(), deadline - time.monotonic())
            assert line, f"dev exited early:\n{banner}\n{(await proc.stderr.read()).decode()}"
            banner += line.decode()
        assert "ready" in banner
        assert f"gRPC address: 127.0.0.1:{port}" in banner
        assert env["SUBAGENTS_TASK_QUEUE"] in banner
        assert str(db.resolve()) in banner
        assert (
            f"  Workspace:    {workspace.resolve()} (the root the file tools and commands are "
            "jailed to: what a general task may edit)\n"
        ) in banner, banner
        address = f"127.0.0.1:{port}"
        assert await server_answers(address)

        client_env = {**env, "TEMPORAL_ADDRESS": address}
        (workspace / "note.txt").write_text("dev worker was here\n")
        give_to_tool_user(workspace)  # as a user's checkout is theirs
        model = script(
            {"tool_calls": [{"name": "read_file", "arguments": {"path": "note.txt"}}]},
            {"text": "read: {last_tool_result}"},
        )
        result = ok(
            await arun(
                "spawn", "explore", "read the note", "--model", model, "--wait", "--json",
                env=client_env,
            )
        )  # fmt: skip
        info = result.json()
        assert info["status"] == "completed"
        assert "dev worker was here" in info["result"]
    finally:
        if proc.returncode is None:
            proc.send_signal(stop_signal)
    started = time.monotonic()
    code = await asyncio.wait_for(proc.wait(), 15)
    assert time.monotonic() - started < 10
    rest = (await proc.stdout.read()).decode()
    err = (await proc.stderr.read()).decode()
    assert "Traceback" not in err, err
    assert code == 0, err
    assert "Stopped." in rest
    assert not await server_answers(f"127.0.0.1:{port}", timeout=0.5)
    assert _pids_with(str(db.resolve())) == []
    assert db.is_file()


async def _start_dev(env: dict[str, str], *args: str) -> tuple[asyncio.subprocess.Process, str]:
    """A `subagents dev` process and its banner, once it says it is ready."""
    proc = await asyncio.create_subprocess_exec(
        *CLI, "dev", *args, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    banner = ""
    while "Ctrl-C to stop" not in banner:
        line = await asyncio.wait_for(proc.stdout.readline(), CEILING)
        assert line, f"dev exited early:\n{banner}\n{(await proc.stderr.read()).decode()}"
        banner += line.decode()
    return proc, banner


def _server_of(port: int) -> int:
    """The pid of the `temporal server start-dev` serving ``port``."""
    [pid] = [
        pid for pid in _pids_with("start-dev") if f"\0--port\0{port}\0".encode()
        in Path(f"/proc/{pid}/cmdline").read_bytes()
    ]  # fmt: skip
    return pid


async def test_dev_stops_in_one_line_when_its_server_dies(tmp_path: Path) -> None:
    port = free_port()
    workspace = tmp_path / "ws"
    workspace.mkdir()
    give_to_tool_user(workspace)
    env = _env(tmp_path, SUBAGENTS_TASK_QUEUE=f"cli-dies-{uuid.uuid4().hex[:8]}")
    proc, _ = await _start_dev(
        env, "--port", str(port), "--ui-port", str(free_port()), "--workspace", str(workspace)
    )
    try:
        marker = f"3602.{uuid.uuid4().int % 10**6:06d}"  # a sleep only this test runs
        model = script(
            {"tool_calls": [{"name": "bash", "arguments": {"command": f"sleep {marker}"}}]}
        )
        client_env = {**env, "TEMPORAL_ADDRESS": f"127.0.0.1:{port}"}
        ok(await arun("spawn", "general", "sleep", "--model", model, env=client_env))

        async def sleeping() -> list[int]:
            return _pids_with(f"sleep {marker}")

        await eventually(sleeping, "the dev worker to run the command")
        os.kill(_server_of(port), signal.SIGKILL)
        code = await asyncio.wait_for(proc.wait(), 60)  # before: it ran on, retrying
    finally:
        if proc.returncode is None:
            proc.kill()
    assert proc.stdout is not None and proc.stderr is not None
    rest, err = (await proc.stdout.read()).decode(), (await proc.stderr.read()).decode()
    assert code == 1, (rest, err)
    db = (tmp_path / "cli-data" / "temporal.db").resolve()
    assert err == (
        f"error: the Temporal dev server on 127.0.0.1:{port} exited (killed by SIGKILL), so "
        f"subagents dev stopped its worker. The tasks are kept in {db}: run subagents dev "
        f"again to go on with them (server log: {db}.log)\n"
    ), err
    assert rest == ""

    async def gone() -> bool:
        return not await sleeping()

    await eventually(gone, "the worker's command to end with it")


async def test_two_dev_servers_never_share_a_database_file(tmp_path: Path) -> None:
    """`subagents dev`, then `dev` or `demo` on another port: both would open the data
    directory's temporal.db; they refuse, naming the file and the running server's port."""
    port, other = free_port(), free_port()
    env = _env(tmp_path)
    proc, banner = await _start_dev(
        env, "--port", str(port), "--ui-port", str(free_port()), "--workspace", str(tmp_path)
    )
    db = (tmp_path / "cli-data" / "temporal.db").resolve()
    assert f"Database:     {db}" in banner
    try:
        for command in ("dev", "demo"):
            second = failed(
                await arun(
                    command, "--port", str(other), "--ui-port", str(free_port()),
                    env=env, timeout=120,
                )
            )  # fmt: skip
            assert second.err == (
                f"error: the database {db} is in use by the Temporal dev server on port {port}: "
                "two servers on one SQLite file overwrite each other's tasks. Use that server "
                f"(--port {port}), or give this one a database of its own (--db FILE)\n"
            ), (command, second.err)
            assert not await server_answers(f"127.0.0.1:{other}", timeout=0.5)
        assert await server_answers(f"127.0.0.1:{port}")  # the first one serves on
    finally:
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 60) == 0


async def test_ask_pause_and_approve_from_the_shell(
    env: dict[str, str], worker: None, workspace: Path
) -> None:
    model = script(
        {"tool_calls": [{"name": "bash", "arguments": {"command": "echo yes > approved.txt"}}]},
        {"text": "done"},
    )
    spawned = ok(
        await arun(
            "spawn", "general", "write", "--model", model, "--ask", "bash:echo *", "--json", env=env
        )
    )
    task_id = spawned.json()["id"]
    paused = ok(await arun("check", task_id, "--wait", "--timeout", "30", "--json", env=env))
    info = paused.json()
    assert info["status"] == "paused"
    assert info["pending_approvals"][0]["arguments_preview"].startswith("bash · echo yes")
    human = ok(await arun("check", task_id, env=env))
    assert "waiting for approval" in human.out and f"subagents approve {task_id}" in human.out
    for wrong in ("pause-1-wrong", "pause-9-0123abcd", "pause-0-0123abcd"):
        unknown = failed(await arun("approve", task_id, "--all", "--pause", wrong, env=env))
        assert f"has no pause '{wrong}'" in unknown.flat_err, unknown.err
        assert f"it is on pause {info['pause_id']}" in unknown.flat_err
        assert "paused again" not in unknown.err
    assert not (workspace / "approved.txt").exists()
    address = env["TEMPORAL_ADDRESS"]
    approved = ok(
        await arun(
            "approve", task_id, "--all", "--pause", info["pause_id"], "--address", address,
            env=env,
        )
    )  # fmt: skip
    assert f"next: subagents check {task_id} --wait --address {address}\n" in approved.out
    # no --after-pause: check finds the decision in the history and waits past the pause
    done = ok(await arun("check", task_id, "--wait", "--json", env=env))
    assert done.json()["status"] == "completed"
    assert (workspace / "approved.txt").read_text() == "yes\n"


# ---------------------------------------------------------------- approvals, input


def _bash(command: str) -> dict[str, Any]:
    return {"name": "bash", "arguments": {"command": command}}


async def _paused(task_id: str, env: dict[str, str]) -> dict[str, Any]:
    info = ok(await arun("check", task_id, "--wait", "--timeout", "30", "--json", env=env)).json()
    assert info["status"] == "paused", info
    return info


async def _spawn_asking(model: str, env: dict[str, str]) -> str:
    """A `general` task narrowed to mode `default`: its bash and file edits ask."""
    spawned = await arun(
        "spawn", "general", "work", "--model", model, "--permission-mode", "default", "--json",
        env=env,
    )  # fmt: skip
    return str(ok(spawned).json()["id"])


async def test_approve_named_calls_then_the_rest_with_all(
    env: dict[str, str], worker: None, workspace: Path
) -> None:
    model = script(
        {"tool_calls": [_bash("echo a > a.txt"), _bash("echo b > b.txt")]}, {"text": "done"}
    )
    task_id = await _spawn_asking(model, env)
    paused = await _paused(task_id, env)
    assert [p["call_id"] for p in paused["pending_approvals"]] == ["call_0_0", "call_0_1"]

    unknown = failed(await arun("approve", task_id, "call_9_9", env=env))
    assert "call_9_9 are not pending" in unknown.flat_err
    assert "pending: call_0_0, call_0_1" in unknown.flat_err

    first = ok(await arun("approve", task_id, "call_0_0", env=env)).out
    assert f"approved call_0_0 of {task_id}" in first
    assert "still waiting for a decision" in first and "call_0_1  bash · echo b > b.txt" in first

    async def only_the_other_pending() -> dict[str, Any] | None:
        info = ok(await arun("check", task_id, "--json", env=env)).json()
        pending = [p["call_id"] for p in info["pending_approvals"]]
        return info if pending == ["call_0_1"] else None

    still = await eventually(only_the_other_pending, "only the other call pending")
    assert still, "the partial approval did not leave call_0_1 pending"
    assert still["status"] == "paused" and still["pause_id"] == paused["pause_id"]
    assert not (workspace / "a.txt").exists()  # nothing runs before every call is decided

    rest = ok(await arun("approve", task_id, "--all", "--json", env=env)).json()
    assert rest["decision"] == {"approved": True, "call_ids": ["call_0_1"], "reason": None}
    done = ok(
        await arun(
            "check", task_id, "--wait", "--after-pause", paused["pause_id"], "--json", env=env
        )
    ).json()
    assert done["status"] == "completed" and done["result"] == "done"
    assert (workspace / "a.txt").read_text() == "a\n"
    assert (workspace / "b.txt").read_text() == "b\n"

    late = failed(await arun("approve", task_id, "--all", env=env))
    assert "is completed, not paused" in late.flat_err


async def test_reject_with_a_reason_tells_the_model(
    env: dict[str, str], worker: None, workspace: Path
) -> None:
    model = script(
        {"tool_calls": [_bash("touch rejected.txt")]}, {"text": "model saw: {last_tool_result}"}
    )
    task_id = await _spawn_asking(model, env)
    paused = await _paused(task_id, env)
    rejected = ok(
        await arun(
            "reject", task_id, "--all", "--reason", "not on Fridays", "--json", env=env
        )
    ).json()  # fmt: skip
    assert rejected["decision"] == {
        "approved": False,
        "call_ids": ["call_0_0"],
        "reason": "not on Fridays",
    }
    done = ok(
        await arun(
            "check", task_id, "--wait", "--after-pause", paused["pause_id"], "--json", env=env
        )
    ).json()
    assert done["status"] == "completed"
    assert done["result"] == "model saw: the parent rejected this call: not on Fridays"
    assert not (workspace / "rejected.txt").exists()


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["approve", "some-task"], "name the call ids to approve, or pass --all"),
        (["reject", "some-task", "--reason", "no"], "name the call ids to reject, or pass --all"),
        (["approve", "some-task", "call_0_0", "--all"], "not both"),
        (["reject", "some-task", "call_0_0", "--all"], "not both"),
    ],
    ids=["approve-nothing", "reject-nothing", "approve-both", "reject-both"],
)
def test_a_decision_must_name_its_calls_or_say_all(
    args: list[str], expected: str, tmp_path: Path
) -> None:
    # a usage error: refused before connecting (nothing answers on this address)
    result = run(*args, "--address", "127.0.0.1:1", env=_env(tmp_path))
    assert result.code == 2, result
    assert "Traceback" not in result.err and result.out == ""
    assert expected in " ".join(result.err.replace("│", " ").split())


async def test_send_steers_a_paused_task_then_continues_it_when_completed(
    env: dict[str, str], worker: None, client: SubagentClient
) -> None:
    model = script(
        {"text": "checking", "tool_calls": [_bash("echo hi")]},
        {"text": "first: {last_tool_result}"},
        {"text": "second answer, after {last_tool_result}"},
    )
    task_id = await _spawn_asking(model, env)
    paused = await _paused(task_id, env)
    namespace = ["--namespace", "default"]  # given: kept in the command it says to run
    steered = ok(await arun("send", task_id, "prefer short flags", *namespace, env=env)).out
    assert "reads this input once the calls above are decided" in " ".join(steered.split())
    assert f"subagents check {task_id} --wait --namespace default\n" in steered
    assert '"command": "echo hi"' in steered  # the pending call in full, not a preview
    assert f"subagents approve {task_id} --all" in steered
    ok(await arun("approve", task_id, "--all", env=env))
    first = ok(
        await arun(
            "check", task_id, "--wait", "--after-pause", paused["pause_id"], "--json", env=env
        )
    ).json()
    assert first["status"] == "completed" and first["result"] == "first: hi"
    # the steering text reached the model right after the tool result
    roles = [(m.role, m.content) for m in await client.get_transcript(task_id)]
    assert ("user", "prefer short flags") in roles
    steer = roles.index(("user", "prefer short flags"))
    assert roles[steer - 1][0] == "tool" and roles[steer + 1][0] == "assistant"

    sent = ok(await arun("send", task_id, "and the second?", "--json", env=env)).json()
    assert sent["follow_up"] is True and sent["id"] == task_id
    assert sent["run_id"] != first["run_id"]
    second = ok(await arun("check", task_id, "--wait", "--timeout", "30", "--json", env=env)).json()
    assert second["status"] == "completed"
    assert second["result"] == "second answer, after hi"
    assert second["turns"] == first["turns"] + 1 and second["run_id"] == sent["run_id"]
    last = (await client.get_transcript(task_id))[-2]
    assert (last.role, last.content) == ("user", "and the second?")


async def test_wait_exits_1_for_a_failed_task(env: dict[str, str], worker: None) -> None:
    """A task whose model fails for good: ``spawn --wait`` and ``check --wait`` print it
    and exit 1, so a script sees the failure."""
    bad = "scripted:@/no/such/script.json"  # the worker refuses it: the task fails
    spawned = await arun("spawn", "explore", "fail", "--model", bad, "--wait", "--json", env=env)
    assert spawned.code == 1, spawned
    info = spawned.json()
    assert info["status"] == "failed" and info["error"]
    checked = await arun("check", info["id"], "--wait", "--json", env=env)
    assert checked.code == 1 and checked.json()["status"] == "failed"
    assert ok(await arun("check", info["id"], "--json", env=env)).json()["status"] == "failed"


async def test_send_to_a_cancelled_task_is_refused(env: dict[str, str], worker: None) -> None:
    spawned = ok(
        await arun(
            "spawn", "explore", "slow", "--model", script({"text": "x", "delay": 60}), "--json",
            env=env,
        )
    )  # fmt: skip
    task_id = spawned.json()["id"]
    assert ok(await arun("cancel", task_id, "--json", env=env)).json()["status"] == "cancelled"
    refused = failed(await arun("send", task_id, "go on", env=env))
    assert f"task '{task_id}' is cancelled" in refused.flat_err
    assert "only a completed task can be continued" in refused.flat_err
    assert ok(await arun("check", task_id, "--json", env=env)).json()["status"] == "cancelled"


async def test_cancel_no_wait_of_a_paused_task_offers_no_decision(
    env: dict[str, str], worker: None
) -> None:
    task_id = await _spawn_asking(script({"tool_calls": [_bash("echo hi")]}, {"text": "x"}), env)
    await _paused(task_id, env)
    out = ok(await arun("cancel", task_id, "--no-wait", env=env)).out
    assert "cancelling" in out or "cancelled" in out, out
    assert "decide with one of" not in out and "subagents approve" not in out, out


async def test_check_shows_the_full_arguments_of_pending_calls(
    env: dict[str, str], worker: None, tmp_path: Path
) -> None:
    command = "echo " + " ".join(f"word{i}" for i in range(60)) + " END-OF-COMMAND"
    content = "x" * 10_000 + "END-OF-CONTENT"  # large: it travels through the blob store
    assert len(command) > 300
    turns = [
        {
            "tool_calls": [
                _bash(command),
                {"name": "write_file", "arguments": {"path": "big.txt", "content": content}},
            ]
        },
        {"text": "done"},
    ]
    task_id = await _spawn_asking(script(*turns), env)
    info = await _paused(task_id, env)
    shell, write = info["pending_approvals"]
    assert "END-OF-COMMAND" not in shell["arguments_preview"]  # the preview is cut
    assert shell["arguments"] == {"command": command}
    assert write["arguments_ref"] and write["arguments"] == {"path": "big.txt", "content": content}

    human = ok(await arun("check", task_id, env=env)).out
    assert f'"command": "{command}"' in human  # on one line, not cut
    assert f'"content": "{content}"' in human
    pause = info["pause_id"]
    for line in (  # --pause: a decision typed late never reaches a newer pause
        f"subagents approve {task_id} call_0_0 --pause {pause}",
        f"subagents approve {task_id} --all --pause {pause}",
        f"subagents reject {task_id} call_0_0 --pause {pause} --reason TEXT",
        f"subagents reject {task_id} --all --pause {pause} --reason TEXT",
    ):
        assert line in [text.strip() for text in human.splitlines()], human[-1000:]

    # where the workers' blob store is out of reach: the preview, and a note saying so
    elsewhere = {**env, "SUBAGENTS_BLOB_DIR": str(tmp_path / "no-blobs")}
    blind = ok(await arun("check", task_id, "--json", env=elsewhere)).json()
    assert [p["arguments"] for p in blind["pending_approvals"]] == [None, None]
    human = ok(await arun("check", task_id, env=elsewhere)).out
    assert f"call_0_0  {shell['arguments_preview']}" in human
    assert "not readable here" in " ".join(human.split())
    ok(await arun("reject", task_id, "--all", env=env))


async def test_what_a_model_writes_cannot_rewrite_the_terminal(
    env: dict[str, str], worker: None
) -> None:
    """Escape sequences and bidi overrides in a model's answer, live text and pending
    arguments are printed as visible escapes (``--json`` keeps the exact strings)."""
    trick = "ls\u202e ~ fr- mr\u202c\x1b[2J\x1b]52;c;cGF3bmVk\x07"
    answer = f"done\x1b[1A\x1b[2Kcompleted {trick}"
    task_id = await _spawn_asking(script({"tool_calls": [_bash(trick)]}, {"text": answer}), env)
    info = await _paused(task_id, env)
    assert info["pending_approvals"][0]["arguments"] == {"command": trick}  # exact in JSON
    raw = ok(await arun("check", task_id, "--json", env=env)).out
    human = ok(await arun("check", task_id, env=env)).out
    for out in (raw, human):
        assert not set(out) & {"\x1b", "\x07", "\u202e", "\u202c"}, repr(out)
    assert "\\u202e" in human and "\\x1b[2J" in human.replace("\\u001b", "\\x1b")
    ok(await arun("approve", task_id, "--all", env=env))
    done = ok(await arun("check", task_id, "--wait", "--after-pause", info["pause_id"], env=env))
    watched = ok(await arun("watch", task_id, env=env)).out
    for out in (done.out, watched):
        assert not set(out) & {"\x1b", "\x07", "\u202e", "\u202c"}, repr(out)
        assert "\\x1b[1A" in out and "\\u202e" in out
    events = ok(await arun("watch", task_id, "--json", env=env)).out
    texts = [json.loads(line) for line in events.splitlines()]
    assert "".join(e.get("text", "") for e in texts if e.get("turn") == 2) == answer
