"""The inbox's HTTP API (subagents serve), driven with a real HTTP client.

A real dev server, worker and inbox server; aiohttp's client sends the requests a
script or the page would. Tasks pause on real permission rules (the scripted model
asks for bash).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from openapi_spec_validator import validate
from pydantic import SecretStr
from temporalio.client import Client

from durable_subagents import (
    AgentSpec,
    PermissionRule,
    SubagentClient,
    TaskNotFound,
    TaskStatus,
    connect_client,
)
from durable_subagents.cli.inbox import ROUTES, Grant, Inbox, InboxServer, Role, Tokens
from durable_subagents.config import Settings
from durable_subagents.storage._sealing import new_key
from durable_subagents.worker import create_worker

from ..helpers import CEILING, eventually
from ..helpers.slowloris import ATTACKER, half_open
from ..helpers.tasks import script

APPROVER = "approver-" + uuid.uuid4().hex
VIEWER = "viewer-" + uuid.uuid4().hex
SCOPED = "scoped-" + uuid.uuid4().hex
BY_PARENT = "by-parent-" + uuid.uuid4().hex
ORIGIN = "https://dashboard.example.com"

CAREFUL = AgentSpec(
    name="careful", tools=["bash"], permissions=[PermissionRule(tool="bash", action="ask")]
)
LEAD = AgentSpec(
    name="lead",
    tools=["bash"],
    may_spawn=True,
    permissions=[PermissionRule(tool="bash", action="ask")],
)


def bash(*commands: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "bash", "arguments": {"command": c}} for c in commands]}


def tree_model(child_command: str) -> str:
    """A lead that spawns a child asking for ``child_command``, then waits for it."""
    child = script(bash(child_command), {"text": "child done"})
    spawn = {
        "name": "spawn_subagent",
        "arguments": {"agent": "general", "prompt": "go", "model": child},
    }
    wait = {"name": "wait_subagents", "arguments": {}}
    return script(
        {"tool_calls": [spawn]},
        {"tool_calls": [wait]},
        {"tool_calls": [wait]},
        {"text": "lead done"},
    )


@dataclass
class Api:
    url: str
    session: aiohttp.ClientSession
    prefix: str
    inbox: Inbox

    async def call(
        self,
        method: str,
        path: str,
        token: str | None = APPROVER,
        body: Any = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, Any, aiohttp.typedefs.LooseHeaders]:
        sent = dict(headers or {})
        if token is not None:
            sent["Authorization"] = f"Bearer {token}"
        async with self.session.request(
            method, self.url + path, json=body, headers=sent
        ) as response:
            text = await response.text()
            data = (
                json.loads(text) if text and response.content_type == "application/json" else text
            )
            return response.status, data, response.headers


def tokens(prefix: str) -> Tokens:
    return Tokens(
        [
            (APPROVER, Grant("ops", Role.APPROVER)),
            (VIEWER, Grant("watcher", Role.VIEWER)),
            (SCOPED, Grant("team-a", Role.APPROVER, task_prefixes=(f"{prefix}a-",))),
            (BY_PARENT, Grant("ci", Role.APPROVER, parent_ids=(f"{prefix}orchestrator",))),
        ]
    )


@pytest.fixture
async def api(
    client: SubagentClient, temporal_client: Client, settings: Settings
) -> AsyncIterator[Api]:
    client.agents.update(careful=CAREFUL, lead=LEAD)
    prefix = f"t{uuid.uuid4().hex[:8]}-"
    served = SubagentClient(
        temporal_client, task_queue=settings.task_queue, blob_store=settings.blob_store()
    )
    inbox = Inbox(served, task_queue=settings.task_queue, ui_url="http://127.0.0.1:8233", poll=0.2)
    async with (
        create_worker(temporal_client, settings),
        InboxServer(inbox, tokens(prefix), port=0, origins=[ORIGIN]) as server,
        aiohttp.ClientSession() as session,
    ):
        yield Api(server.url, session, prefix, inbox)


async def paused(client: SubagentClient, task_id: str) -> Any:
    info = await client.check_task(task_id, wait=True, timeout=30)
    assert info.status == TaskStatus.PAUSED, info
    return info


async def inbox_of(api: Api, token: str = APPROVER, want: int | None = None) -> dict[str, Any]:
    """The inbox, once it lists ``want`` entries (visibility lags a little)."""
    deadline = time.monotonic() + 15
    while True:
        status, view, _ = await api.call("GET", "/api/inbox", token)
        assert status == 200, view
        if want is None or len(view["entries"]) == want or time.monotonic() > deadline:
            return view
        await asyncio.sleep(0.1)


async def assert_no_token(client: SubagentClient, *task_ids: str) -> None:
    """No token, nor its header, in the tasks' histories, memos or search attributes."""
    for task_id in task_ids:
        handle = client.temporal.get_workflow_handle(task_id)
        history = (await handle.fetch_history()).to_json()
        described = (await handle.describe()).raw_description.SerializeToString()
        for secret in (APPROVER, VIEWER, SCOPED, BY_PARENT):
            assert secret not in history and secret.encode() not in described, task_id
        assert "Bearer" not in history and b"Bearer" not in described


async def test_a_paused_child_of_a_paused_parent_is_one_entry_decided_through_the_top(
    api: Api, client: SubagentClient
) -> None:
    top = await client.spawn_task("lead", "delegate", model=tree_model("echo from the child"))
    info = await paused(client, top)
    view = await inbox_of(api, want=1)
    [entry] = view["entries"]
    assert entry["task"]["id"] == top and entry["pause_id"] == info.pause_id
    [call] = entry["calls"]
    child = call["task_id"]
    assert child != top and call["call_id"].startswith(f"{child}/")
    assert entry["web_ui"].startswith("http://127.0.0.1:8233/namespaces/default/workflows/")

    status, pause, _ = await api.call("GET", f"/api/tasks/{top}/pause")
    assert status == 200, pause
    assert pause["calls"][0]["arguments"] == {"command": "echo from the child"}
    refs = [{k: c[k] for k in ("call_id", "tool_name", "arguments_hash")} for c in pause["calls"]]
    status, result, _ = await api.call(
        "POST", f"/api/tasks/{top}/approve", body={"pause_id": pause["pause_id"], "calls": refs}
    )
    assert status == 200, result
    assert result["decided"] == [call["call_id"]] and result["not_shown"] == []
    done = await client.check_task(top, wait=True, timeout=30, after_pause=info.pause_id)
    assert done.status == TaskStatus.COMPLETED and done.result == "lead done"
    assert (await inbox_of(api, want=0))["entries"] == []
    await assert_no_token(client, top, child)  # decided with the token, recorded without it


async def test_a_decision_on_a_pause_that_changed_since_it_was_read_is_refused(
    api: Api, client: SubagentClient
) -> None:
    model = script(bash("echo first"), bash("echo second"), {"text": "done"})
    task_id = await client.spawn_task("careful", "two asks", model=model)
    first = await paused(client, task_id)
    status, read, _ = await api.call("GET", f"/api/tasks/{task_id}/pause")
    assert status == 200
    refs = [{k: c[k] for k in ("call_id", "tool_name", "arguments_hash")} for c in read["calls"]]
    # Someone else decides it meanwhile; the task goes on and pauses again.
    await client.approve(task_id, pause_id=first.pause_id)
    second = await client.check_task(task_id, wait=True, timeout=30, after_pause=first.pause_id)
    assert second.status == TaskStatus.PAUSED and second.pause_id != first.pause_id

    status, error, _ = await api.call(
        "POST", f"/api/tasks/{task_id}/approve", body={"pause_id": read["pause_id"], "calls": refs}
    )
    assert status == 409
    assert error["type"] == "WrongTaskState" and error["status"] == "paused"
    assert f"not {first.pause_id}: it paused again since you read it" in error["error"]
    assert "\n" not in error["error"]
    # A call named with arguments other than those read is refused too.
    forged = [{**refs[0], "call_id": second.pending_approvals[0].call_id}]
    status, error, _ = await api.call(
        "POST",
        f"/api/tasks/{task_id}/approve",
        body={"pause_id": second.pause_id, "calls": forged, "call_ids": [forged[0]["call_id"]]},
    )
    assert status == 409 and error["type"] == "UnknownCallId"
    now = await client.check_task(task_id)
    assert now.status == TaskStatus.PAUSED and now.pause_id == second.pause_id  # nothing decided
    await client.cancel_task(task_id)


async def test_a_viewer_reads_but_cannot_decide_send_or_cancel(
    api: Api, client: SubagentClient
) -> None:
    task_id = await client.spawn_task(
        "careful", "ask", model=script(bash("echo hi"), {"text": "x"})
    )
    info = await paused(client, task_id)
    status, pause, _ = await api.call("GET", f"/api/tasks/{task_id}/pause", VIEWER)
    assert status == 200
    refs = [{k: c[k] for k in ("call_id", "tool_name", "arguments_hash")} for c in pause["calls"]]
    for path, body in (
        ("approve", {"pause_id": info.pause_id, "calls": refs}),
        ("reject", {"pause_id": info.pause_id, "calls": refs, "reason": "no"}),
        ("input", {"text": "stop"}),
        ("cancel", {}),
    ):
        status, error, _ = await api.call("POST", f"/api/tasks/{task_id}/{path}", VIEWER, body)
        assert status == 403, (path, error)
        assert "'watcher' is a viewer" in error["error"]
    still = await client.check_task(task_id)
    assert still.status == TaskStatus.PAUSED and still.pause_id == info.pause_id
    status, info_json, _ = await api.call(
        "POST", f"/api/tasks/{task_id}/cancel", APPROVER, {"wait": True}
    )
    assert status == 200 and info_json["status"] == "cancelled"


async def test_a_scoped_token_sees_its_trees_only(api: Api, client: SubagentClient) -> None:
    ours = await client.spawn_task(
        "lead", "ours", model=tree_model("echo ours"), task_id=f"{api.prefix}a-1"
    )
    theirs = await client.spawn_task(
        "careful",
        "theirs",
        model=script(bash("echo theirs"), {"text": "x"}),
        task_id=f"{api.prefix}b-1",
    )
    ci = await client.spawn_task(
        "careful",
        "ci's",
        model=script(bash("echo ci"), {"text": "x"}),
        parent_id=f"{api.prefix}orchestrator",  # an id outside Temporal: recorded only
    )
    for task_id in (ours, theirs, ci):
        await paused(client, task_id)
    assert len((await inbox_of(api, want=3))["entries"]) == 3

    view = await inbox_of(api, SCOPED, want=1)
    assert [e["task"]["id"] for e in view["entries"]] == [ours]
    child = view["entries"][0]["calls"][0]["task_id"]
    assert [e["task"]["id"] for e in (await inbox_of(api, BY_PARENT, want=1))["entries"]] == [ci]

    # The other trees do not exist for it: the same 404 as an unknown id.
    status, unknown, _ = await api.call("GET", f"/api/tasks/{api.prefix}nope", SCOPED)
    assert status == 404
    for path in ("", "/pause"):
        status, error, _ = await api.call("GET", f"/api/tasks/{theirs}{path}", SCOPED)
        assert status == 404 and error["error"] == unknown["error"].replace(
            f"{api.prefix}nope", theirs
        )
    status, error, _ = await api.call(
        "POST",
        f"/api/tasks/{theirs}/approve",
        SCOPED,
        {"pause_id": "x", "calls": [{"call_id": "c", "tool_name": "bash", "arguments_hash": "h"}]},
    )
    assert status == 404
    status, error, _ = await api.call("POST", f"/api/tasks/{theirs}/cancel", SCOPED, {})
    assert status == 404
    status, listed, _ = await api.call("GET", "/api/tasks", SCOPED)
    ids = {t["id"] for t in listed["tasks"]}
    assert ours in ids and child in ids and theirs not in ids and ci not in ids
    # Its own tree, the child included (reached through its parent).
    status, info, _ = await api.call("GET", f"/api/tasks/{child}", SCOPED)
    assert status == 200 and info["parent_id"] == ours
    for task_id in (ours, theirs, ci):
        await client.cancel_task(task_id)


async def test_tokens_cors_and_errors(api: Api, client: SubagentClient, caplog: Any) -> None:
    caplog.set_level(logging.DEBUG)
    # No token, a wrong one, a cookie alone: 401, and nothing is done.
    status, error, headers = await api.call("GET", "/api/inbox", None)
    assert status == 401 and headers["WWW-Authenticate"].startswith("Bearer")
    status, error, _ = await api.call("GET", "/api/inbox", "x" * 40)
    assert status == 401 and error["error"] == "this token is not one of the server's"
    task_id = await client.spawn_task(
        "careful", "ask", model=script(bash("echo hi"), {"text": "x"})
    )
    await paused(client, task_id)
    status, _, _ = await api.call(
        "POST", f"/api/tasks/{task_id}/cancel", None, {}, {"Cookie": f"token={APPROVER}"}
    )
    assert status == 401
    assert (await client.check_task(task_id)).status == TaskStatus.PAUSED

    # Browsers: the page's own origin and the configured one; any other gets 403.
    status, _, headers = await api.call("GET", "/api/inbox", APPROVER, headers={"Origin": ORIGIN})
    assert status == 200 and headers["Access-Control-Allow-Origin"] == ORIGIN
    status, _, headers = await api.call("GET", "/api/inbox", APPROVER, headers={"Origin": api.url})
    assert status == 200
    status, error, headers = await api.call(
        "POST", f"/api/tasks/{task_id}/cancel", APPROVER, {}, {"Origin": "https://evil.example"}
    )
    assert status == 403 and "Access-Control-Allow-Origin" not in headers
    assert (await client.check_task(task_id)).status == TaskStatus.PAUSED
    async with api.session.options(
        api.url + "/api/inbox",
        headers={"Origin": ORIGIN, "Access-Control-Request-Method": "POST"},
    ) as preflight:
        assert preflight.status == 204
        assert "Authorization" in preflight.headers["Access-Control-Allow-Headers"]
    async with api.session.options(
        api.url + "/api/inbox", headers={"Origin": "https://evil.example"}
    ) as preflight:
        assert preflight.status == 403

    # The client's typed errors, with their one-line messages (naming endpoints).
    try:
        await client.check_task("no-such-task")
    except TaskNotFound as err:
        expected = str(err).replace("list_tasks()", "GET /api/tasks")
    status, error, _ = await api.call("GET", "/api/tasks/no-such-task")
    assert (status, error["type"], error["error"]) == (404, "TaskNotFound", expected)
    status, error, _ = await api.call("POST", f"/api/tasks/{task_id}/input", body={"text": "  "})
    assert status == 400 and error["type"] == "InvalidRequest"
    status, error, _ = await api.call(
        "POST", f"/api/tasks/{task_id}/approve", body={"pause_id": "p"}
    )
    assert status == 400 and "calls" in error["error"]
    status, error, _ = await api.call("GET", "/api/inbox?wait=999")
    assert status == 400
    status, sent, _ = await api.call("POST", f"/api/tasks/{task_id}/input", body={"text": "hurry"})
    assert status == 200 and sent["id"] == task_id
    status, cancelled, _ = await api.call(
        "POST", f"/api/tasks/{task_id}/cancel", body={"wait": True}
    )
    assert status == 200 and cancelled["status"] == "cancelled"
    status, error, _ = await api.call("GET", f"/api/tasks/{task_id}/pause")
    assert status == 409 and error["type"] == "WrongTaskState" and error["status"] == "cancelled"

    # No token in a log line (the token's name instead), nor in what the task recorded
    # of the input and the cancel it was sent with.
    for secret in (APPROVER, VIEWER, SCOPED):
        assert all(secret not in r.getMessage() for r in caplog.records)
    await assert_no_token(client, task_id)


async def test_the_long_poll_answers_when_the_inbox_changes(
    api: Api, client: SubagentClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    view = await inbox_of(api, want=0)
    polling = asyncio.Event()
    wait = api.inbox.wait

    async def seen_wait(*args: Any, **kwargs: Any) -> Any:
        polling.set()
        return await wait(*args, **kwargs)

    monkeypatch.setattr(api.inbox, "wait", seen_wait)
    waiting = asyncio.ensure_future(api.call("GET", f"/api/inbox?wait=30&since={view['version']}"))
    await asyncio.wait_for(polling.wait(), CEILING)  # the server holds the request
    assert not waiting.done()
    task_id = await client.spawn_task(
        "careful", "ask", model=script(bash("echo hi"), {"text": "x"})
    )
    # Answered well before its own timeout (30 s): by the change.
    status, changed, _ = await asyncio.wait_for(waiting, 20)
    assert status == 200 and changed["version"] != view["version"]
    assert [e["task"]["id"] for e in changed["entries"]] == [task_id]
    # Nothing changes: it answers at its timeout with the same version.
    started = time.monotonic()
    status, same, _ = await api.call("GET", f"/api/inbox?wait=1&since={changed['version']}")
    assert same["version"] == changed["version"] and time.monotonic() - started >= 0.9
    await client.cancel_task(task_id)


async def test_the_api_serves_its_openapi_document(api: Api) -> None:
    status, document, _ = await api.call("GET", "/api/openapi.json", None)
    assert status == 200
    validate(document)
    served = {(r.method.lower(), r.path) for r in ROUTES}
    documented = {(m, p) for p, ops in document["paths"].items() for m in ops}
    assert served == documented
    approve = document["paths"]["/api/tasks/{task_id}/approve"]["post"]
    assert set(approve["responses"]) >= {"200", "401", "403", "404", "409"}
    schema = document["components"]["schemas"]["DecisionRequest"]
    assert schema["required"] == ["pause_id", "calls"]


async def test_encrypted_payloads_are_read_by_the_server_holding_the_key(
    settings: Settings, tmp_path: Path
) -> None:
    own = settings.model_copy(update={"payload_key": SecretStr(new_key())})
    temporal = await connect_client(own.address, own.namespace, keys=own.payload_keys())
    client = SubagentClient(temporal, task_queue=own.task_queue, blob_store=own.blob_store())
    client.agents["careful"] = CAREFUL
    plain = await connect_client(own.address, own.namespace)
    inbox = Inbox(
        SubagentClient(temporal, task_queue=own.task_queue, blob_store=own.blob_store()),
        task_queue=own.task_queue,
        poll=0.2,
    )
    async with (
        create_worker(temporal, own),
        InboxServer(inbox, tokens("x"), port=0) as server,
        aiohttp.ClientSession() as session,
    ):
        api = Api(server.url, session, "x", inbox)
        task_id = await client.spawn_task(
            "careful", "secret", model=script(bash("echo top secret"), {"text": "x"})
        )
        await paused(client, task_id)
        raw = await plain.get_workflow_handle(task_id).describe()
        assert b"top secret" not in raw.raw_description.SerializeToString()
        [entry] = (await inbox_of(api, want=1))["entries"]
        assert "top secret" in entry["calls"][0]["arguments_preview"]
        status, pause, _ = await api.call("GET", f"/api/tasks/{task_id}/pause")
        assert status == 200
        assert pause["calls"][0]["arguments"] == {"command": "echo top secret"}
        # The token is nowhere in the task's history or memo.
        history = await temporal.get_workflow_handle(task_id).fetch_history()
        await client.cancel_task(task_id)
    text = history.to_json()
    assert APPROVER not in text and "Bearer" not in text


async def test_one_peer_s_connections_beyond_its_share_are_refused_and_others_served(
    client: SubagentClient, settings: Settings
) -> None:
    """A peer gets ``max_per_peer`` connections; more are answered 429 and closed at
    once while another peer is served; a closed one gives its place back. A body that
    does not come in time is answered 408."""
    inbox = Inbox(client, task_queue=settings.task_queue, poll=0.2)
    server = InboxServer(
        inbox, tokens("t-"), port=0, max_per_peer=8, head_timeout=10 * CEILING, body_timeout=1
    )
    async with server, aiohttp.ClientSession() as session:
        flood = await half_open(server.port, 8 * 5)
        assert len(flood) == 8 * 5
        await eventually(lambda: sum(c.refused for c in flood) == 8 * 4, "32 refusals")
        refused = [c for c in flood if c.refused]
        await asyncio.gather(*(c.closed for c in refused))  # closed by the server
        held = [c for c in flood if not c.refused]
        assert not any(c.closed.done() or c.received for c in held)  # waiting for a head
        body = json.loads(refused[0].received.partition(b"\r\n\r\n")[2])
        assert body["type"] == "TooManyConnections" and "at most 8" in body["error"]

        headers = {"Authorization": f"Bearer {APPROVER}"}
        async with session.get(server.url + "/api/inbox", headers=headers) as response:
            assert response.status == 200  # another peer: served

        # The attacker closes one: its address may open one again (and is served).
        held[0].abort()
        attacker = aiohttp.TCPConnector(local_addr=(ATTACKER, 0), force_close=True)

        async def served_again() -> bool:
            try:
                async with (
                    aiohttp.ClientSession(connector=attacker, connector_owner=False) as other,
                    other.get(server.url + "/api/openapi.json") as answer,
                ):
                    return answer.status == 200
            except aiohttp.ClientError:  # refused before its answer was read
                return False

        await eventually(served_again, "a place given back")
        await attacker.close()

        # A head whose body never comes: 408 once the body deadline passes, then closed.
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(
            f"POST /api/tasks/x/cancel HTTP/1.1\r\nHost: inbox\r\nAuthorization: Bearer "
            f"{APPROVER}\r\nContent-Type: application/json\r\nContent-Length: 20\r\n"
            "\r\n{".encode()
        )
        answer = await asyncio.wait_for(reader.read(), CEILING)
        writer.close()
        assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]
        assert b'"type":"RequestTimeout"' in answer
        for connection in held[1:]:
            connection.abort()


async def test_a_calls_arguments_come_in_the_tools_schema_order(
    api: Api, client: SubagentClient, workspace: Path
) -> None:
    """write_file(path, content): the page lists path first, whatever order the model
    sent and the transcript keeps (its keys sorted)."""
    client.agents["writer"] = AgentSpec(
        name="writer",
        tools=["write_file", "edit_file"],
        permissions=[PermissionRule(tool="*", action="ask")],
    )
    write = {"content": "hello\n", "path": "notes.txt"}
    edit = {"replace_all": False, "new": "b", "old": "a", "path": "notes.txt"}
    model = script(
        {"tool_calls": [{"name": "write_file", "arguments": write},
                        {"name": "edit_file", "arguments": edit}]},
        {"text": "written"},
    )  # fmt: skip
    task_id = await client.spawn_task("writer", "write it", model=model)
    await paused(client, task_id)
    status, pause, _ = await api.call("GET", f"/api/tasks/{task_id}/pause")
    assert status == 200, pause
    shown = [list(c["arguments"]) for c in pause["calls"]]
    assert shown == [["path", "content"], ["path", "old", "new", "replace_all"]], shown
    view = await inbox_of(api, want=1)
    assert [list(c["arguments"] or {}) for c in view["entries"][0]["calls"]] in ([[], []], shown)


async def test_errors_name_the_endpoints_to_call_not_python_functions(
    api: Api, client: SubagentClient
) -> None:
    model = script(bash("echo first"), bash("echo second"), {"text": "done"})
    task_id = await client.spawn_task("careful", "two asks", model=model)
    first = await paused(client, task_id)
    status, read, _ = await api.call("GET", f"/api/tasks/{task_id}/pause")
    refs = [{k: c[k] for k in ("call_id", "tool_name", "arguments_hash")} for c in read["calls"]]
    await client.approve(task_id, pause_id=first.pause_id)
    await client.check_task(task_id, wait=True, timeout=30, after_pause=first.pause_id)
    errors = []
    for pause_id in (read["pause_id"], "pause-1-wrong"):
        status, error, _ = await api.call(
            "POST", f"/api/tasks/{task_id}/approve", body={"pause_id": pause_id, "calls": refs}
        )
        assert status == 409, error
        errors.append(error["error"])
    assert f"(GET /api/tasks/{task_id}/pause)" in errors[0], errors
    assert f"as GET /api/tasks/{task_id}/pause shows them" in errors[1], errors
    status, missing, _ = await api.call("GET", "/api/tasks/no-such-task")
    assert status == 404 and "GET /api/tasks lists the tasks" in missing["error"], missing
    await client.cancel_task(task_id)
    status, ended, _ = await api.call(
        "POST", f"/api/tasks/{task_id}/approve", body={"pause_id": pause_id, "calls": refs}
    )
    assert status == 409 and f"GET /api/tasks/{task_id}/pause shows" in ended["error"], ended
    for message in (*errors, missing["error"], ended["error"]):
        for python in ("check_task", "list_tasks", "send_input"):
            assert python not in message, message


async def test_a_paused_tree_s_events_page_by_offset_and_wait_for_more(
    api: Api, client: SubagentClient
) -> None:
    """``/events?tree=true`` holds the tree's events, the child's text among them, each
    with its offset; with ``wait`` and ``after`` it answers with what came next."""
    child = script({"text": "checking first", **bash("echo from the child")}, {"text": "done"})
    spawn = {
        "name": "spawn_subagent",
        "arguments": {"agent": "general", "prompt": "go", "model": child},
    }
    wait = {"name": "wait_subagents", "arguments": {}}
    model = script({"tool_calls": [spawn]}, {"tool_calls": [wait]}, {"tool_calls": [wait]},
                   {"text": "lead done"})  # fmt: skip
    top = await client.spawn_task("lead", "delegate", model=model)
    info = await paused(client, top)
    status, page, _ = await api.call("GET", f"/api/tasks/{top}/events?tree=true", VIEWER)
    assert status == 200, page
    texts = [(e["depth"], e["text"]) for e in page["events"] if e["kind"] == "text"]
    assert (1, "checking first") in texts
    offsets = [e["offset"] for e in page["events"]]
    assert offsets == sorted(set(offsets)) and page["next"] == offsets[-1]
    status, own, _ = await api.call("GET", f"/api/tasks/{top}/events")
    assert status == 200 and {e["task_id"] for e in own["events"]} == {top}

    waiting = asyncio.ensure_future(
        api.call("GET", f"/api/tasks/{top}/events?tree=true&wait=20&after={page['next']}")
    )
    # Nothing can happen before the approval below; a poll that wrongly answered at
    # fact-checked: once would be done within this time
    await asyncio.sleep(0.5)
    assert not waiting.done()  # nothing new yet: it waits
    await client.approve(top)
    status, more, _ = await waiting
    assert status == 200, more
    assert more["events"] and all(e["offset"] > page["next"] for e in more["events"])
    done = await client.check_task(top, wait=True, timeout=30, after_pause=info.pause_id)
    assert done.status == TaskStatus.COMPLETED
    status, error, _ = await api.call("GET", f"/api/tasks/{top}/events?after=-1")
    assert status == 400 and "after must be an offset" in error["error"]
    status, _, _ = await api.call("GET", f"/api/tasks/{top}/events", SCOPED)
    assert status == 404
