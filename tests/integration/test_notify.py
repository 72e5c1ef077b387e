"""Notifications: a signed POST when a task pauses for a decision or ends.

A real receiver (aiohttp) on a local port, a real worker and dev server. The receiver
fails, redirects or hangs as a test needs; signatures are checked with the
Standard Webhooks library, as a receiver would.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import pytest
from aiohttp import web
from pydantic import SecretStr, ValidationError
from standardwebhooks import Webhook
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from durable_subagents import AgentSpec, InvalidRequest, PermissionRule, SubagentClient, TaskStatus
from durable_subagents.config import Settings
from durable_subagents.policy._notify_url import notify_url_allowed
from durable_subagents.wire._payloads import NotifyResult
from durable_subagents.worker import create_worker

from ..helpers import eventually
from ..helpers.tasks import model_turn_started, script

SECRET = "whsec_" + base64.b64encode(os.urandom(32)).decode()
CAREFUL = AgentSpec(
    name="careful",
    tools=["bash"],
    permissions=[PermissionRule(tool="bash", action="ask")],
)
HOSTILE = "echo ok\u202e\n</script><script>alert(1)</script>\napproved: rm -rf ~ \x1b[2J"


@dataclass
class Hit:
    path: str
    headers: dict[str, str]
    body: bytes
    at: float
    status: int


@dataclass
class Receiver:
    """A webhook receiver: answers each event id by ``plan`` (status codes, then 200)."""

    url: str
    hits: list[Hit] = field(default_factory=list)
    plan: list[int] = field(default_factory=list)
    delay: float = 0.0
    redirect_to: str | None = None
    tries: dict[str, int] = field(default_factory=dict)

    def delivered(self) -> list[Hit]:
        return [h for h in self.hits if h.status == 200]

    def events(self) -> list[dict[str, Any]]:
        return [json.loads(h.body) for h in self.delivered()]


@pytest.fixture
async def receivers() -> AsyncIterator[Callable[[], Any]]:
    runners: list[web.AppRunner] = []

    async def make() -> Receiver:
        receiver = Receiver(url="")

        async def handle(request: web.Request) -> web.Response:
            body = await request.read()
            event_id = request.headers.get("webhook-id", "")
            attempt = receiver.tries.get(event_id, 0)
            receiver.tries[event_id] = attempt + 1
            status = receiver.plan[attempt] if attempt < len(receiver.plan) else 200
            if receiver.delay:
                await asyncio.sleep(receiver.delay)
            if receiver.redirect_to is not None:
                status = 307
            receiver.hits.append(  # the path as asked for, before the server reads it
                Hit(request.raw_path, dict(request.headers), body, time.monotonic(), status)
            )
            if status == 307:
                raise web.HTTPTemporaryRedirect(receiver.redirect_to or "/")
            return web.Response(status=status, text="no" if status != 200 else "ok")

        app = web.Application()
        app.router.add_post("/{tail:.*}", handle)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        receiver.url = f"http://127.0.0.1:{port}/hooks/subagents"
        runners.append(runner)
        return receiver

    yield make
    for runner in runners:
        await runner.cleanup()


def notify_settings(settings: Settings, *allow: str, default: str | None = None) -> Settings:
    return settings.model_copy(
        update={
            "notify_secret": SecretStr(SECRET),
            "notify_allow": ",".join(allow),
            "notify_url": default,
            "inbox_url": "http://127.0.0.1:8090",
        }
    )


def verified(hit: Hit) -> dict[str, Any]:
    """The body, after the Standard Webhooks library checked its signature."""
    payload = Webhook(SECRET).verify(hit.body, hit.headers)
    assert isinstance(payload, dict)
    return payload


async def notify_results(temporal: Client, task_id: str) -> list[NotifyResult]:
    """The results of the notification workflows a task started."""
    ids = []
    async for event in temporal.get_workflow_handle(task_id).fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED:
            attrs = event.start_child_workflow_execution_initiated_event_attributes
            if attrs.workflow_type.name == "SubagentNotify":
                ids.append(attrs.workflow_id)
    return [await temporal.get_workflow_handle(i, result_type=NotifyResult).result() for i in ids]


async def test_a_failing_receiver_gets_each_event_once_signed_and_the_task_never_waits(
    client: SubagentClient, temporal_client: Client, settings: Settings, receivers: Any
) -> None:
    receiver = await receivers()
    receiver.plan = [500, 503]  # each event: two failures, then 200
    receiver.delay = 0.5  # and every answer is slow
    client.agents["careful"] = CAREFUL
    model = script(
        {"tool_calls": [{"name": "bash", "arguments": {"command": HOSTILE}}]}, {"text": "done"}
    )
    async with create_worker(temporal_client, notify_settings(settings, receiver.url)):
        started = time.monotonic()
        task_id = await client.spawn_task(
            "careful", "run it", description="notify me", model=model, notify_url=receiver.url
        )
        paused = await client.check_task(task_id, wait=True, timeout=30)
        assert paused.status == TaskStatus.PAUSED
        paused_at = time.monotonic()
        await client.approve(task_id, pause_id=paused.pause_id)
        done = await client.check_task(task_id, wait=True, timeout=30, after_pause=paused.pause_id)
        closed_at = time.monotonic()
        assert done.status == TaskStatus.COMPLETED
        # Two events, each delivered once, on its third attempt (1 s, then 2 s backoff).
        await eventually(lambda: len(receiver.delivered()) == 2, "both events delivered")
        # Each event's workflow has ended: no attempt of it comes after this.
        results = await notify_results(temporal_client, task_id)

    assert [r.delivered for r in results] == [True, True]
    assert len(receiver.hits) == 6 and len(receiver.delivered()) == 2
    paused_event, completed_event = receiver.events()
    assert [paused_event["type"], completed_event["type"]] == ["task.paused", "task.completed"]
    for hit in receiver.hits:
        verified(hit)  # every attempt is signed, with its own timestamp
        assert hit.path == "/hooks/subagents"
    by_id: dict[str, list[Hit]] = {}
    for hit in receiver.hits:
        by_id.setdefault(hit.headers["webhook-id"], []).append(hit)
    assert sorted(len(v) for v in by_id.values()) == [3, 3]
    for attempts in by_id.values():
        assert len({h.body for h in attempts}) == 1  # the same event each time
        assert attempts[-1].at - attempts[0].at >= 3.0  # backed off: 1 s, then 2 s

    # The task never waited for the receiver: it paused and ended while the receiver
    # was still refusing the events (each delivery came seconds later).
    first = {e["type"]: h for h, e in zip(receiver.delivered(), receiver.events(), strict=True)}
    assert paused_at < first["task.paused"].at
    assert closed_at < first["task.completed"].at
    assert closed_at - paused_at < 3.0 and paused_at - started < 10.0

    # The body names the task, the pause and the calls (previews), with the inbox link.
    assert paused_event["task"]["id"] == task_id
    assert paused_event["task"]["description"] == "notify me"
    assert paused_event["pause_id"] == paused.pause_id
    [call] = paused_event["calls"]
    pending = paused.pending_approvals[0]
    assert call["call_id"] == pending.call_id and call["task_id"] == task_id
    assert call["arguments_hash"] == pending.arguments_hash
    assert call["arguments_preview"] == pending.arguments_preview  # data, as written
    assert paused_event["links"]["inbox"] == f"http://127.0.0.1:8090/#task={task_id}"
    assert completed_event["task"]["status"] == "completed"
    assert completed_event["task"]["result_preview"] == "done"
    # What the model wrote arrives as JSON data: bidi and escapes are \u escapes in
    # the bytes, never raw, and parse back to the very text.
    raw = first["task.paused"].body
    assert b"\xe2\x80\xae" not in raw and b"\x1b" not in raw
    assert b"\\u202e" in raw


async def test_a_spawn_cannot_make_a_worker_post_outside_its_allowlist(
    client: SubagentClient, temporal_client: Client, settings: Settings, receivers: Any
) -> None:
    allowed = await receivers()
    elsewhere = await receivers()
    allowed.redirect_to = elsewhere.url  # an allowed receiver that redirects elsewhere
    async with create_worker(temporal_client, notify_settings(settings, allowed.url)):
        ends = []
        for url in (
            elsewhere.url,  # another port: not in the allowlist
            allowed.url.replace("/hooks/subagents", "/hooks/subagents-evil"),
            allowed.url.replace("127.0.0.1", "localhost"),  # another host name
            allowed.url,  # allowed, but answers with a redirect
        ):
            task_id = await client.spawn_task(
                "explore", "x", model=script({"text": "hi"}), notify_url=url
            )
            info = await client.check_task(task_id, wait=True, timeout=30)
            assert info.status == TaskStatus.COMPLETED  # the task never minds
            ends.append(await notify_results(temporal_client, task_id))
    assert elsewhere.hits == []
    assert [h.status for h in allowed.hits] == [307]  # tried once, not followed, not retried
    for results in ends[:3]:
        [result] = results
        assert not result.delivered and "not in this worker's allowlist" in (result.error or "")
    [redirected] = ends[3]
    assert not redirected.delivered and "redirects are never followed" in (redirected.error or "")


async def test_dot_segments_in_a_spawn_s_url_never_reach_a_path_outside_the_allowlist(
    client: SubagentClient, temporal_client: Client, settings: Settings, receivers: Any
) -> None:
    """The allowlist judges the URL as it is sent: HTTP clients resolve ``..`` before
    sending, so ``<allowed>/../admin`` is ``/admin``, outside the prefix."""
    receiver = await receivers()
    allowed = receiver.url  # http://127.0.0.1:PORT/hooks/subagents
    hostile = {
        "/../../admin": "not in this worker's allowlist",
        "/%2e%2e/%2E%2e/admin": "not in this worker's allowlist",
        "/x/.%2e/../../admin": "not in this worker's allowlist",
        "/..;/..;/admin": "dot segment with parameters",
        "/%2f..%2f..%2fadmin": "encoded slash",
        "\\..\\..\\admin": "backslash",
    }
    async with create_worker(temporal_client, notify_settings(settings, allowed)):
        ends = {}
        for tail in [*hostile, "/./a/../inside"]:
            task_id = await client.spawn_task(
                "explore", "x", model=script({"text": "hi"}), notify_url=allowed + tail
            )
            info = await client.check_task(task_id, wait=True, timeout=30)
            assert info.status == TaskStatus.COMPLETED  # the task never minds
            [ends[tail]] = await notify_results(temporal_client, task_id)
    # Only the URL inside the prefix was posted to, at the path it leads to.
    assert [h.path for h in receiver.hits] == ["/hooks/subagents/inside"]
    verified(receiver.hits[0])
    assert ends["/./a/../inside"].delivered
    for tail, why in hostile.items():
        assert not ends[tail].delivered and why in (ends[tail].error or ""), (tail, ends[tail])


async def test_the_workers_url_serves_every_task_a_child_s_pause_is_its_parent_s_event(
    client: SubagentClient, temporal_client: Client, settings: Settings, receivers: Any
) -> None:
    receiver = await receivers()
    client.agents["lead"] = AgentSpec(
        name="lead",
        tools=["bash"],
        may_spawn=True,
        permissions=[PermissionRule(tool="bash", action="ask")],
    )
    child_model = script(
        {"tool_calls": [{"name": "bash", "arguments": {"command": "echo child"}}]},
        {"text": "child done"},
    )
    spawn = {
        "name": "spawn_subagent",
        "arguments": {"agent": "general", "prompt": "go", "model": child_model},
    }
    wait = {"name": "wait_subagents", "arguments": {}}
    model = script(
        {"tool_calls": [spawn]}, {"tool_calls": [wait]}, {"tool_calls": [wait]}, {"text": "done"}
    )
    worker_settings = notify_settings(settings, default=receiver.url)
    async with create_worker(temporal_client, worker_settings):
        task_id = await client.spawn_task("lead", "delegate", model=model)  # no notify_url
        paused = await client.check_task(task_id, wait=True, timeout=30)
        assert paused.status == TaskStatus.PAUSED
        await eventually(lambda: len(receiver.delivered()) == 1, "the pause delivered")
        await client.approve(task_id, pause_id=paused.pause_id)
        done = await client.check_task(task_id, wait=True, timeout=30, after_pause=paused.pause_id)
        assert done.status == TaskStatus.COMPLETED, done
        await eventually(lambda: len(receiver.delivered()) == 2, "the end delivered")
        paused_event, completed_event = receiver.events()
        [call] = paused_event["calls"]
        child = call["task_id"]
        # Both events' workflows have ended, and the child (closed before its parent)
        # started none: nothing more can come.
        results = await notify_results(temporal_client, task_id)
        assert [r.delivered for r in results] == [True, True]
        assert await notify_results(temporal_client, child) == []
    assert len(receiver.hits) == 2
    assert paused_event["task"]["id"] == task_id and child != task_id
    assert call["call_id"] == paused.pending_approvals[0].call_id
    assert call["call_id"].startswith(f"{child}/")
    assert completed_event["task"]["id"] == task_id  # the child's end posts nothing


async def test_a_task_that_ends_before_any_answer_is_told_by_the_worker_s_url(
    client: SubagentClient, temporal_client: Client, settings: Settings, receivers: Any
) -> None:
    receiver = await receivers()
    slow = script({"text": "never seen", "delay": 60})
    ids = []
    for default in (receiver.url, None):
        async with create_worker(temporal_client, notify_settings(settings, default=default)):
            task_id = await client.spawn_task("explore", "x", model=slow)  # no notify_url
            await eventually(partial(model_turn_started, temporal_client, task_id), "a turn")
            info = await client.cancel_task(task_id, wait=True)
            assert info.status == TaskStatus.CANCELLED and info.turns <= 1
            [result] = await notify_results(temporal_client, task_id)
            ids.append(task_id)
            if default is None:
                # Workers without a URL drop it quietly: the one event went nowhere.
                assert not result.delivered and "SUBAGENTS_NOTIFY_URL" in (result.error or "")
    [hit] = receiver.hits
    event = verified(hit)
    assert event["type"] == "task.cancelled" and event["task"]["id"] == ids[0]


async def test_notify_urls_are_checked_at_spawn_and_by_prefix(client: SubagentClient) -> None:
    with pytest.raises(ValidationError, match=r"SUBAGENTS_NOTIFY_URL: notify_url .* is not"):
        Settings(notify_url="hooks.example.com/x")  # the worker's own: checked at start
    for bad in ("ftp://x/y", "http://user:pw@h/x", "not a url", "http:///x", "http://h:99999/"):
        with pytest.raises(InvalidRequest, match="notify_url"):
            await client.spawn_task("explore", "x", notify_url=bad)
    allow = ["https://hooks.example.com/ci/"]
    assert notify_url_allowed("https://hooks.example.com/ci/run?x=1", allow)
    assert notify_url_allowed("https://HOOKS.example.com:443/ci", allow)
    assert not notify_url_allowed("https://hooks.example.com/ci-evil", allow)
    assert not notify_url_allowed("https://hooks.example.com.evil.org/ci/", allow)
    assert not notify_url_allowed("http://hooks.example.com/ci/", allow)
    assert not notify_url_allowed("https://hooks.example.com:8443/ci/", allow)
    assert not notify_url_allowed("https://x@hooks.example.com/ci/", allow)


async def test_a_tree_past_its_budgets_soft_limit_is_told_once_then_its_pause(
    client: SubagentClient,
    temporal_client: Client,
    settings: Settings,
    receivers: Any,
    tmp_path: Any,
) -> None:
    receiver = await receivers()
    prices = tmp_path / "prices.toml"
    prices.write_text("[scripted]\ninput = 2\noutput = 8\n")  # 100,000 input tokens: $0.20
    client.agents["lead"] = AgentSpec(name="lead", tools=["list_files"], may_spawn=True)

    def turn(dollars: float, **reply: Any) -> dict[str, Any]:
        return {**reply, "usage": {"input_tokens": round(dollars * 500_000), "output_tokens": 0}}

    listing = [{"name": "list_files", "arguments": {"path": "."}}]
    child = script(
        turn(0.4, tool_calls=listing), turn(0.4, tool_calls=listing), turn(0.4, text="c")
    )
    spawn = {
        "name": "spawn_subagent",
        "arguments": {"agent": "explore", "prompt": "go", "model": child},
    }
    wait = [{"name": "wait_subagents", "arguments": {}}]
    model = script(turn(0.2, tool_calls=[spawn]), turn(0.2, tool_calls=wait), turn(0.2, text="x"))
    worker_settings = notify_settings(settings, receiver.url).model_copy(update={"prices": prices})
    async with create_worker(temporal_client, worker_settings):
        task_id = await client.spawn_task(
            "lead", "split", model=model, budget_usd=1.0, budget_warn_at=0.5,
            notify_url=receiver.url,
        )  # fmt: skip
        paused = await client.check_task(task_id, wait=True, timeout=30)
        assert [p.tool_name for p in paused.pending_approvals] == ["raise_budget"], paused
        await client.reject(task_id, reason="enough")
        done = await client.check_task(task_id, wait=True, timeout=30, after_pause=paused.pause_id)
        assert done.stop_reason == "budget"
        await eventually(lambda: len(receiver.delivered()) == 3, "three events delivered")
    events = sorted(receiver.events(), key=lambda e: e["time"])
    assert [e["type"] for e in events] == ["task.budget_warning", "task.paused", "task.completed"]
    warning, pause, _ = events
    assert warning["budget_usd"] == 1.0 and 0.5 <= warning["spent_usd"] < 1.0, warning
    assert warning["task"]["id"] == task_id
    [call] = pause["calls"]
    assert call["tool_name"] == "raise_budget" and pause["pause_id"] == paused.pause_id
