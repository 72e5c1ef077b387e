"""The worker's side of MCP: real servers over stdio and HTTP, and hostile ones contained.

The servers are real processes: the reference servers from PyPI (``mcp-server-git``,
``mcp-server-time``), a streamable-HTTP server built with the official SDK behind a
bearer token, and ``tests/mcp_script_server.py``, which speaks JSON-RPC by hand to
misbehave on purpose. As root (the suite's usual case) every stdio server runs as the
tool user, as on a root worker.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from durable_subagents.tools._images import image_size
from durable_subagents.tools.mcp import McpServer, load_mcp_config
from durable_subagents.tools.mcp._sessions import (
    CANCEL_GRACE,
    MAX_PAGES,
    McpResult,
    McpServers,
    McpUnavailable,
)

from ..helpers import eventually
from ..helpers.mcp_servers import (
    HttpServer,
    alive,
    git,
    held,
    peak_rss,
    processes_with,
    python_server,
    reset_peak_rss,
    run_as,
    script_server,
    uid_of,
)
from ..helpers.missing import missing
from ..helpers.tasks import TOOL_USER, give_to_tool_user

MIB = 1024  # KiB
ROOT = os.geteuid() == 0


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    return give_to_tool_user(path)


@pytest.fixture
def markers(tmp_path: Path, workspace: Path) -> Path:
    """Where the script server leaves its marks (the tool user writes there)."""
    path = tmp_path / f"marks-{uuid.uuid4().hex[:8]}"
    path.mkdir()
    path.chmod(0o777)
    return path


@asynccontextmanager
async def mcp_servers(*servers: McpServer, **options: Any) -> AsyncIterator[McpServers]:
    pool = McpServers(
        {s.name: s for s in servers}, env={"LANG": "C.UTF-8"}, run_as=run_as, **options
    )
    try:
        yield pool
    finally:
        await pool.aclose()


async def call(
    servers: McpServers, server: str, tool: str, workspace: Path, **arguments: Any
) -> McpResult:
    with held(workspace) as fd:
        return await servers.call(server, tool, arguments, workspace=workspace, workspace_fd=fd)


async def whoami(servers: McpServers, server: str, workspace: Path) -> dict[str, Any]:
    result = await call(servers, server, "whoami", workspace)
    assert not result.is_error, result.text
    answer: dict[str, Any] = json.loads(result.text)
    return answer


async def still_serves(servers: McpServers, workspace: Path) -> None:
    """The well-behaved server beside a hostile one answers."""
    result = await call(servers, "good", "echo", workspace, text="still here")
    assert result == McpResult(text="still here", is_error=False)


# ---------------------------------------------------------------- real servers


async def test_git_server_reads_and_commits_in_the_workspace(workspace: Path) -> None:
    subprocess.run(["git", "init", "-q", str(workspace)], check=True)
    (workspace / "README.md").write_text("# notes\n")
    give_to_tool_user(workspace)
    author = {
        "GIT_AUTHOR_NAME": "Ada",
        "GIT_AUTHOR_EMAIL": "ada@example.com",
        "GIT_COMMITTER_NAME": "Ada",
        "GIT_COMMITTER_EMAIL": "ada@example.com",
    }
    server = python_server("git", "-m", "mcp_server_git", "--repository", ".", env=author)
    async with mcp_servers(server) as servers:
        with held(workspace) as fd:
            tools = {t.name: t for t in await servers.list_tools("git", workspace, fd)}
        assert {"git_status", "git_add", "git_commit", "git_log"} <= set(tools)
        assert tools["git_status"].read_only_hint is True
        assert tools["git_commit"].read_only_hint is False
        assert tools["git_commit"].server == "git"
        assert "repo_path" in tools["git_commit"].input_schema["properties"]

        status = await call(servers, "git", "git_status", workspace, repo_path=".")
        assert not status.is_error, status.text
        assert "README.md" in status.text

        added = await call(servers, "git", "git_add", workspace, repo_path=".", files=["README.md"])
        assert not added.is_error, added.text
        done = await call(
            servers, "git", "git_commit", workspace, repo_path=".", message="Notes from MCP"
        )
        assert not done.is_error, done.text

    if ROOT:
        # the server ran as the tool user; looked at before this test's own git, as
        # root, may rewrite the index
        assert (workspace / ".git" / "index").stat().st_uid == TOOL_USER[0]
    assert git(workspace, "log", "--format=%s|%an").strip() == "Notes from MCP|Ada"
    assert git(workspace, "status", "--porcelain").strip() == ""


async def test_time_server_answers_for_a_timezone(workspace: Path) -> None:
    async with mcp_servers(python_server("time", "-m", "mcp_server_time")) as servers:
        result = await call(servers, "time", "get_current_time", workspace, timezone="Asia/Tokyo")
    assert not result.is_error, result.text
    answer = json.loads(result.text)
    assert answer["timezone"] == "Asia/Tokyo"
    assert answer["datetime"].endswith("+09:00")


@pytest.fixture
async def http_server(tmp_path: Path) -> AsyncIterator[HttpServer]:
    server = HttpServer(tmp_path / "http.err")
    await server.start()
    try:
        yield server
    finally:
        server.stop()


def http_config(tmp_path: Path, http_server: HttpServer) -> dict[str, McpServer]:
    """A ``.mcp.json`` naming the server twice: with the token from ``${NOTES_TOKEN}``,
    and with an old token."""
    config_file = tmp_path / ".mcp.json"
    config_file.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "notes": {
                        "type": "http",
                        "url": http_server.url,
                        "headers": {"Authorization": "Bearer ${NOTES_TOKEN}"},
                    },
                    "stale": {
                        "type": "http",
                        "url": http_server.url,
                        "headers": {"Authorization": "Bearer an-old-token"},
                    },
                }
            }
        )
    )
    config = load_mcp_config([config_file], {"NOTES_TOKEN": http_server.token})
    assert config.problems == []
    return config.servers


async def test_http_server_takes_the_bearer_token_from_the_configuration(
    tmp_path: Path, workspace: Path, http_server: HttpServer
) -> None:
    async with mcp_servers(*http_config(tmp_path, http_server).values()) as servers:
        with held(workspace) as fd:
            names = {t.name for t in await servers.list_tools("notes", workspace, fd)}
        assert names == {"add", "hello"}
        result = await call(servers, "notes", "add", workspace, a=2, b=3)
        assert result == McpResult(text="5", is_error=False)
        # a second workspace shares the server's one session
        result = await call(servers, "notes", "hello", tmp_path, name="Ada")
        assert result.text == "hello, Ada"

        with pytest.raises(McpUnavailable) as refused:
            await call(servers, "stale", "add", workspace, a=1, b=1)
    message = str(refused.value)
    assert message.startswith("MCP server 'stale' is unavailable")
    assert "401" in message
    assert "an-old-token" not in message and http_server.token not in message


async def test_http_session_is_opened_again_after_the_server_restarts(
    tmp_path: Path, workspace: Path, http_server: HttpServer
) -> None:
    async with mcp_servers(*http_config(tmp_path, http_server).values()) as servers:
        assert (await call(servers, "notes", "add", workspace, a=1, b=2)).text == "3"

        http_server.stop()
        with pytest.raises(McpUnavailable, match=r"^MCP server 'notes' is unavailable: "):
            await call(servers, "notes", "add", workspace, a=1, b=2)

        await http_server.start()
        assert (await call(servers, "notes", "add", workspace, a=2, b=2)).text == "4"

        http_server.stop()  # between two calls: the next one finds its session unknown
        await http_server.start()
        assert (await call(servers, "notes", "add", workspace, a=3, b=3)).text == "6"


# ---------------------------------------------------------------- processes


@pytest.mark.skipif(not ROOT, reason=missing("root: a root worker's tool user needs it"))
async def test_root_worker_runs_a_stdio_server_as_the_tool_user(workspace: Path) -> None:
    async with mcp_servers(script_server("good")) as servers:
        me = await whoami(servers, "good", workspace)
        assert (me["uid"], me["gid"], me["euid"]) == (*TOOL_USER, TOOL_USER[0])
        assert uid_of(me["pid"]) == TOOL_USER[0]


@pytest.mark.skipif(not ROOT, reason=missing("root: only a root worker could run a server as root"))
async def test_root_worker_never_runs_a_server_as_root(workspace: Path) -> None:
    servers = McpServers({"good": script_server("good")}, env={}, run_as=lambda fd: None)
    try:
        with pytest.raises(McpUnavailable, match="never as root"):
            await call(servers, "good", "whoami", workspace)
    finally:
        await servers.aclose()


async def test_server_works_in_the_held_workspace_even_after_a_rename(
    tmp_path: Path, workspace: Path
) -> None:
    async with mcp_servers(script_server("good")) as servers:
        with held(workspace) as fd:
            moved = workspace.rename(tmp_path / "moved")
            workspace.mkdir()  # another directory at the old path
            result = await servers.call("good", "whoami", {}, workspace=workspace, workspace_fd=fd)
            inode = os.fstat(fd).st_ino
    me = json.loads(result.text)
    assert me["cwd"] == str(moved)
    assert me["cwd_inode"] == inode != workspace.stat().st_ino


async def test_server_gets_the_tool_environment_and_its_own_only(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SUBAGENTS_TEST_SECRET", "not for servers")
    server = script_server("good")
    server = server.model_copy(update={"env": {**server.env, "SERVER_OWN": "yes"}})
    async with mcp_servers(server) as servers:
        env = (await whoami(servers, "good", workspace))["env"]
    assert env["LANG"] == "C.UTF-8"
    assert env["SERVER_OWN"] == "yes"
    assert "PATH" in env
    assert "SUBAGENTS_TEST_SECRET" not in env


async def test_servers_are_pooled_per_workspace_restarted_and_stopped(
    tmp_path: Path, workspace: Path
) -> None:
    other = tmp_path / "other"
    other.mkdir()
    give_to_tool_user(other)
    async with mcp_servers(script_server("good")) as servers:
        first = (await whoami(servers, "good", workspace))["pid"]
        assert (await whoami(servers, "good", workspace))["pid"] == first
        elsewhere = (await whoami(servers, "good", other))["pid"]
        assert elsewhere != first

        os.kill(first, 9)  # a server that died is started afresh on next use
        await eventually(lambda: not alive(first), "the server to die")
        again = (await whoami(servers, "good", workspace))["pid"]
        assert again not in (first, elsewhere)
    # closing the servers stops every process
    assert not alive(again) and not alive(elsewhere)
    with pytest.raises(McpUnavailable, match="stopping"):
        await call(servers, "good", "whoami", workspace)


async def test_idle_server_is_stopped(workspace: Path) -> None:
    async with mcp_servers(script_server("good"), idle_timeout=0.2) as servers:
        pid = (await whoami(servers, "good", workspace))["pid"]
        await eventually(lambda: not alive(pid), "the idle server to stop")
        assert (await whoami(servers, "good", workspace))["pid"] != pid


async def test_progress_reaches_the_caller(workspace: Path) -> None:
    seen: list[float] = []
    async with mcp_servers(script_server("good")) as servers:
        with held(workspace) as fd:
            result = await servers.call(
                "good",
                "progress",
                {},
                workspace=workspace,
                workspace_fd=fd,
                on_progress=lambda: seen.append(time.monotonic()),
            )
    assert result.text == "done"
    assert len(seen) >= 3


async def test_results_as_text_for_the_model(workspace: Path) -> None:
    async with mcp_servers(script_server("good")) as servers:
        media = await call(servers, "good", "media", workspace)
        structured = await call(servers, "good", "structured", workspace)
        both = await call(servers, "good", "both", workspace)
        restated = await call(servers, "good", "restated", workspace)
        failed = await call(servers, "good", "fails", workspace)
        big = await call(servers, "good", "big", workspace)
        unknown = await call(servers, "good", "no_such_tool", workspace)
    assert media.images == [] and media.left_out == 2
    assert media.text.startswith(
        "a picture:\n[image (image/png) left out: not a readable PNG image]"
    )
    assert "[audio (audio/wav) left out" in media.text
    assert "[resource link x.txt: file:///tmp/x.txt]" in media.text
    assert structured == McpResult(text='{"answer":42,"list":[1,2]}', is_error=False)
    # structured content goes beside the text, unless the text already says it
    assert both.text == (
        "2 open issues\n"
        '[structured content] {"issues":[{"id":7,"title":"flaky"},{"id":9,"title":"slow"}]}'
    )
    assert restated.text == '{"answer": 42}'
    assert failed == McpResult(text="it broke", is_error=True)
    assert len(big.text) < 30_100
    assert big.text.startswith("000000000\n")
    assert big.text.endswith("000009999\n")
    assert "[... 70000 characters truncated ...]" in big.text
    assert unknown.is_error
    assert "Unknown tool: no_such_tool" in unknown.text


async def test_images_a_model_may_be_shown_and_notes_for_the_others(workspace: Path) -> None:
    async with mcp_servers(script_server("good")) as servers:
        good = await call(servers, "good", "picture", workspace, text="7")
        bad = await call(servers, "good", "bad-pictures", workspace)
        with pytest.raises(McpUnavailable, match="longer than 4 MiB"):  # bounded before read
            await call(servers, "good", "huge-picture", workspace)
    assert [i.media_type for i in good.images] == ["image/png", "image/gif"]
    assert good.images[0].data.startswith(b"\x89PNG") and good.images[1].data[:6] == b"GIF89a"
    assert good.text == (
        "two pictures:\n"
        f"[image 1: image/png, {len(good.images[0].data):,} bytes]\n"
        f"[image 2: image/gif, {len(good.images[1].data):,} bytes]"
    )
    # the bytes decide a type, never the server's word (these PNGs say image/jpeg)
    assert [i.media_type for i in bad.images] == ["image/png"] * 4
    assert [image_size(i.data, i.media_type) for i in bad.images] == [(w, 1) for w in range(1, 5)]
    lines = bad.text.splitlines()
    assert lines[1] == (
        "[image (image/svg+xml) left out: not an image of a type models take "
        "(image/png, image/jpeg, image/gif, image/webp)]"
    )
    assert lines[2] == "[image (image/png) left out: not valid base64]"
    assert lines[3] == "[image (image/png) left out: 9000x1 pixels, over 8000 a side]"
    assert lines[8:] == ["[image (image/jpeg) left out: more than 4 images in one result]"] * 2
    assert bad.left_out == 5 and not bad.is_error


# ---------------------------------------------------------------- hostile servers


async def test_cancel_of_a_hung_call_kills_the_server_and_the_next_call_works(
    workspace: Path, markers: Path
) -> None:
    async with mcp_servers(
        script_server("good"), script_server("hung", "good", markers)
    ) as servers:
        pid = (await whoami(servers, "hung", workspace))["pid"]
        hung = asyncio.create_task(call(servers, "hung", "hang", workspace))
        await eventually(lambda: (markers / f"hang-{pid}").exists(), "the call to start")
        cancelled_at = time.monotonic()
        hung.cancel()
        with pytest.raises(asyncio.CancelledError):
            await hung
        took = time.monotonic() - cancelled_at
        # the cancel reached the server, which did not stop the call: it was killed
        # before the cancel returned, after the grace and not much later
        assert (markers / f"cancelled-{pid}").exists()
        assert CANCEL_GRACE <= took < CANCEL_GRACE + 3.0
        await eventually(lambda: not alive(pid), "the hung server to be gone")
        assert (await whoami(servers, "hung", workspace))["pid"] != pid
        await still_serves(servers, workspace)


async def test_server_that_answers_the_cancel_is_kept(workspace: Path, markers: Path) -> None:
    async with mcp_servers(script_server("polite", "answers-cancel", markers)) as servers:
        pid = (await whoami(servers, "polite", workspace))["pid"]
        hung = asyncio.create_task(call(servers, "polite", "hang", workspace))
        await eventually(lambda: (markers / f"hang-{pid}").exists(), "the call to start")
        hung.cancel()
        with pytest.raises(asyncio.CancelledError):
            await hung
        assert (await whoami(servers, "polite", workspace))["pid"] == pid


async def test_call_past_its_timeout_stops_the_server(workspace: Path, markers: Path) -> None:
    async with mcp_servers(
        script_server("good"), script_server("hung", "good", markers)
    ) as servers:
        pid = (await whoami(servers, "hung", workspace))["pid"]
        with held(workspace) as fd, pytest.raises(McpUnavailable) as late:
            await servers.call("hung", "hang", {}, workspace=workspace, workspace_fd=fd, timeout=1)
        assert str(late.value) == (
            "MCP server 'hung' is unavailable: the call of 'hang' got no answer within 1 s; "
            "its process was stopped"
        )
        await eventually(lambda: not alive(pid), "the hung server to be gone")
        await still_serves(servers, workspace)


async def test_enormous_line_ends_the_session_in_bounded_memory(
    workspace: Path, markers: Path
) -> None:
    flood = script_server("flood", "flood-line", markers)
    async with mcp_servers(script_server("good"), flood) as servers:
        await still_serves(servers, workspace)
        before = reset_peak_rss()
        with pytest.raises(McpUnavailable) as ended:
            await call(servers, "flood", "echo", workspace, text="hi")
        assert peak_rss() - before < 32 * MIB  # the server wrote 80 MiB on one line
        assert "it sent a message longer than 4 MiB" in str(ended.value)
        await eventually(lambda: not processes_with(str(markers)), "the flooding server to die")
        await still_serves(servers, workspace)


async def test_malformed_json_rpc_is_skipped(workspace: Path) -> None:
    async with mcp_servers(script_server("good"), script_server("noisy", "malformed")) as servers:
        with held(workspace) as fd:
            tools = await servers.list_tools("noisy", workspace, fd)
        assert "echo" in {t.name for t in tools}
        for _ in range(3):
            result = await call(servers, "noisy", "echo", workspace, text="through the noise")
            assert result.text == "through the noise"
        await still_serves(servers, workspace)


async def test_flood_of_requests_and_notifications_is_contained(workspace: Path) -> None:
    async with mcp_servers(script_server("good"), script_server("chatty", "chatty")) as servers:
        before = reset_peak_rss()
        result = await call(servers, "chatty", "echo", workspace, text="after the flood")
        assert result.text == "after the flood"
        assert peak_rss() - before < 64 * MIB
        await still_serves(servers, workspace)


async def test_ten_thousand_tools_are_cut_to_the_limit(
    workspace: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with mcp_servers(script_server("good"), script_server("many", "many-tools")) as servers:
        before = reset_peak_rss()
        with held(workspace) as fd, caplog.at_level(logging.WARNING):
            first = await servers.list_tools("many", workspace, fd)
            second = await servers.list_tools("many", workspace, fd)
        assert peak_rss() - before < 100 * MIB
        await still_serves(servers, workspace)
    assert len(first) == len(second) == 512
    assert [t.name for t in first[:2]] == ["t00000", "t00001"]
    warnings = [r.getMessage() for r in caplog.records if "more than 512 tools" in r.getMessage()]
    assert warnings == ["MCP server 'many' lists more than 512 tools; the first 512 are offered"]


async def test_endless_pages_of_tools_end(workspace: Path) -> None:
    async with mcp_servers(
        script_server("good"), script_server("pages", "endless-pages")
    ) as servers:
        with held(workspace) as fd:
            tools = await servers.list_tools("pages", workspace, fd)
        assert [t.name for t in tools][-1] == f"page{MAX_PAGES - 1}"
        assert len(tools) == MAX_PAGES
        await still_serves(servers, workspace)


async def test_stderr_flood_costs_bounded_memory(workspace: Path) -> None:
    async with mcp_servers(script_server("good"), script_server("loud", "stderr-flood")) as servers:
        before = reset_peak_rss()
        for _ in range(20):
            result = await call(servers, "loud", "echo", workspace, text="heard")
            assert result.text == "heard"
        assert peak_rss() - before < 32 * MIB
        await still_serves(servers, workspace)


async def test_server_that_exits_at_start_is_named_with_its_stderr(workspace: Path) -> None:
    async with mcp_servers(
        script_server("good"), script_server("broken", "exit-at-start")
    ) as servers:
        with pytest.raises(McpUnavailable) as failed:
            await call(servers, "broken", "echo", workspace, text="hi")
        await still_serves(servers, workspace)
    message = str(failed.value)
    assert message.startswith("MCP server 'broken' is unavailable: it could not be started: ")
    assert "it exited with status 3; its stderr ended with:" in message
    assert message.endswith("red configuration is wrong\nfatal: no such database: prod")
    assert "\x1b" not in message


async def test_server_that_crashes_in_a_call_is_named_logged_once_and_restarted(
    workspace: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with mcp_servers(script_server("fragile")) as servers:
        pid = (await whoami(servers, "fragile", workspace))["pid"]
        with caplog.at_level(logging.WARNING, "durable_subagents.tools.mcp"):
            with pytest.raises(McpUnavailable) as failed:
                await call(servers, "fragile", "crash", workspace)
        assert (await whoami(servers, "fragile", workspace))["pid"] != pid
    assert str(failed.value) == (
        "MCP server 'fragile' is unavailable: it exited with status 9; its stderr ended "
        "with:\nfatal: the disk is on fire"
    )
    said = [r.getMessage() for r in caplog.records if "fragile" in r.getMessage()]
    assert said == [
        "MCP server 'fragile' stopped: it exited with status 9; its stderr ended with:\n"
        "fatal: the disk is on fire"
    ]


async def test_server_that_hangs_at_start_times_out(workspace: Path, markers: Path) -> None:
    mute = script_server("mute", "hang-at-start", markers, timeout=1.0)
    async with mcp_servers(script_server("good"), mute) as servers:
        with pytest.raises(McpUnavailable, match="did not answer MCP's initialize within 1 s"):
            await call(servers, "mute", "echo", workspace, text="hi")
        await eventually(lambda: not processes_with(str(markers)), "the mute server to die")
        await still_serves(servers, workspace)
