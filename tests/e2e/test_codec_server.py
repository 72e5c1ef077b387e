"""The codec server: Temporal's Web UI and CLI read encrypted tasks through it.

A task runs encrypted on the session's dev server; its raw history is read through a
keyless client and sent to a real codec server over HTTP, to the real ``temporal`` CLI
(``--codec-endpoint``) and to the real Web UI in Debian's Chromium.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import json
import os
import re
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from google.protobuf.json_format import MessageToDict, ParseDict
from rich.console import Console
from temporalio.api.common.v1 import Payload, Payloads
from temporalio.client import Client

from durable_subagents import SubagentClient, TaskStatus, connect_client
from durable_subagents.cli._codec_server import CodecServer, web_ui_origins
from durable_subagents.cli._dev_run import run_dev
from durable_subagents.config import Settings
from durable_subagents.errors import InvalidRequest, SubagentError
from durable_subagents.storage._sealing import KeyRing, new_key
from durable_subagents.testing import DevServer, free_port, temporal_binary
from durable_subagents.wire._codec import ENCODING, KEY_ID_METADATA
from durable_subagents.worker import create_worker

from ..browser import CHROMIUM, needs_browser
from ..helpers import CEILING
from ..helpers.cli import CLI, _env, decoded_strings, failed, ok, run, temporal_cli
from ..helpers.processes import _wait_ready
from ..helpers.slowloris import half_open
from ..helpers.tasks import script

# Plain words: the Web UI shows a summary as markdown, escaping punctuation.
PROMPT = "Reconcile the ledger of account 4471 for the quarterly audit"
ANSWER = "ANSWER-codec-9e2f the ledger reconciles"
TOKEN = "s3cret-codec-token"


@dataclass
class Task:
    keys: KeyRing
    key: str
    id: str
    run_id: str


def _settings(tmp: Path, address: str, namespace: str, key: str) -> Settings:
    workspace = tmp / "ws"
    workspace.mkdir(parents=True, exist_ok=True)
    return Settings(
        address=address,
        namespace=namespace,
        task_queue=f"codec-{uuid.uuid4().hex[:10]}",
        data_dir=tmp / "data",
        blob_dir=tmp / "blobs",
        workspace=workspace,
        payload_key=key,
    )


async def _run_task(settings: Settings, *, worker: bool = True) -> Task:
    """Run one encrypted task to completion; return what finds it again.

    Args:
        settings: The deployment, with its key.
        worker: Run a worker for it here (else one must already run).
    """
    keys = settings.payload_keys()
    assert keys is not None and settings.payload_key is not None
    temporal = await connect_client(settings.address, settings.namespace, keys=keys)
    client = SubagentClient(
        temporal, task_queue=settings.task_queue, blob_store=settings.blob_store()
    )
    async with create_worker(temporal, settings) if worker else contextlib.nullcontext():
        task_id = await client.spawn_task(
            "general", PROMPT, model=script({"text": ANSWER}), description=PROMPT
        )
        info = await client.check_task(task_id, wait=True, timeout=CEILING)
    assert info.status == TaskStatus.COMPLETED and info.result == ANSWER, info
    assert info.run_id is not None
    return Task(keys, settings.payload_key.get_secret_value(), task_id, info.run_id)


@pytest.fixture(scope="module")
async def task(dev_server: DevServer, tmp_path_factory: pytest.TempPathFactory) -> Task:
    """An encrypted task, completed on the session's dev server."""
    tmp = tmp_path_factory.mktemp("codec-task")
    return await _run_task(_settings(tmp, dev_server.address, dev_server.namespace, new_key()))


@pytest.fixture
def codec(task: Task) -> Iterator[CodecServer]:
    with CodecServer(task.keys) as server:
        yield server


async def _start_input(temporal_client: Client, task: Task) -> Payload:
    """The task's start input exactly as Temporal stored it."""
    handle = temporal_client.get_workflow_handle(task.id, run_id=task.run_id)
    async for event in handle.fetch_history_events():
        started = event.workflow_execution_started_event_attributes
        assert event.HasField("workflow_execution_started_event_attributes")
        return started.input.payloads[0]
    raise AssertionError("no history")


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: Any


def _request(
    url: str,
    body: Any = None,
    *,
    method: str = "POST",
    headers: dict[str, str] | None = None,
) -> Reply:
    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        url,
        data=data,
        method=method,
        headers={"Content-Type": "application/json", "X-Namespace": "default", **(headers or {})},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            status, head, raw = response.status, response.headers, response.read()
    except urllib.error.HTTPError as err:
        status, head, raw = err.code, err.headers, err.read()
    return Reply(status, dict(head.items()), json.loads(raw) if raw else None)


async def post(url: str, body: Any = None, **kwargs: Any) -> Reply:
    """An HTTP request off the event loop (the worker and the server share it)."""
    return await asyncio.to_thread(_request, url, body, **kwargs)


def as_json(*payloads: Payload) -> dict[str, Any]:
    return MessageToDict(Payloads(payloads=payloads))


def from_json(body: dict[str, Any]) -> list[Payload]:
    return list(ParseDict(body, Payloads()).payloads)


# ---------------------------------------------------------------- the protocol


async def test_it_decodes_a_tasks_start_input_read_raw_from_history(
    task: Task, codec: CodecServer, temporal_client: Client
) -> None:
    raw = await _start_input(temporal_client, task)
    assert raw.metadata["encoding"] == ENCODING  # stored encrypted, read without a key
    assert raw.metadata[KEY_ID_METADATA].decode() == task.keys.current_id
    assert PROMPT.encode() not in raw.SerializeToString()

    reply = await post(f"{codec.endpoint}/decode", as_json(raw))
    assert reply.status == 200, reply
    assert reply.headers["Content-Type"] == "application/json"
    [plain] = from_json(reply.body)
    assert plain.metadata["encoding"] == b"json/plain"
    assert json.loads(plain.data)["prompt"] == PROMPT

    # /encode then /decode: a fresh ciphertext under the current key, the same payload back.
    reply = await post(f"{codec.endpoint}/encode", as_json(plain))
    assert reply.status == 200, reply
    [sealed] = from_json(reply.body)
    assert sealed.metadata["encoding"] == ENCODING and sealed.data != raw.data
    assert PROMPT.encode() not in sealed.SerializeToString()
    reply = await post(f"{codec.endpoint}/decode", as_json(sealed, raw))
    assert from_json(reply.body) == [plain, plain]
    # A plain payload passes through; a path prefix and a query (the Web UI sends
    # ?preserveStorageRefs=true) are allowed by the protocol.
    reply = await post(f"{codec.endpoint}/codec/decode?preserveStorageRefs=true", as_json(plain))
    assert reply.status == 200 and from_json(reply.body) == [plain]


async def test_bad_requests_say_what_is_wrong(
    task: Task, codec: CodecServer, temporal_client: Client
) -> None:
    raw = await _start_input(temporal_client, task)
    url = f"{codec.endpoint}/decode"
    for body, expected in [
        (b"{not json", "not JSON"),
        ({"payload": []}, '{"payloads": [...]}'),
        ({"payloads": ["x"]}, '{"payloads": [...]}'),
        ({"payloads": [{"data": 5}]}, "not a temporal.api.common.v1.Payload"),
        ({"payloads": [{"metadata": "x"}]}, "not a temporal.api.common.v1.Payload"),
    ]:
        reply = await post(url, body)
        assert reply.status == 400, (body, reply)
        assert expected in reply.body["error"], reply.body

    reply = await post(f"{codec.endpoint}/upload", as_json(raw))
    assert reply.status == 404 and "/decode" in reply.body["error"]
    reply = await post(f"{codec.endpoint}/", method="GET")
    assert reply.status == 405 and "codec server" in reply.body["error"]

    # Another deployment's key: 422, naming the key the payload needs.
    with CodecServer(KeyRing(os.urandom(32))) as other:
        reply = await post(f"{other.endpoint}/decode", as_json(raw))
    assert reply.status == 422, reply
    assert f"key {task.keys.current_id}" in reply.body["error"]
    assert "SUBAGENTS_PAYLOAD_KEY" in reply.body["error"]
    # Tampered ciphertext: 422, "changed after it was written".
    tampered = Payload()
    tampered.CopyFrom(raw)
    tampered.data = raw.data[:-1] + bytes([raw.data[-1] ^ 1])
    reply = await post(url, as_json(tampered))
    assert reply.status == 422 and "changed after it was written" in reply.body["error"]


async def test_a_namespace_allowlist_refuses_other_namespaces(task: Task) -> None:
    with CodecServer(task.keys, namespaces=["default"]) as server:
        url = f"{server.endpoint}/encode"
        body = as_json(Payload(metadata={"encoding": b"json/plain"}, data=b"1"))
        assert (await post(url, body)).status == 200
        reply = await post(url, body, headers={"X-Namespace": "payments"})
        assert reply.status == 403 and "namespace payments is not served" in reply.body["error"]


async def test_a_token_when_set_is_required_on_encode_and_decode(task: Task) -> None:
    body = as_json(Payload(metadata={"encoding": b"json/plain"}, data=b'"x"'))
    with CodecServer(task.keys, token=TOKEN) as server:
        for path in ("/encode", "/decode"):
            url = server.endpoint + path
            for headers in (
                {},
                {"Authorization": "Bearer wrong-token"},
                {"Authorization": f"Basic {TOKEN}"},
                {"Authorization": f"Bearer {TOKEN}x"},
            ):
                reply = await post(url, body, headers=headers)
                assert reply.status == 401, (headers, reply)
                assert "Authorization: Bearer" in reply.body["error"]
                assert TOKEN not in json.dumps(reply.body)
                assert reply.headers["WWW-Authenticate"].startswith("Bearer")
            reply = await post(url, body, headers={"Authorization": f"Bearer {TOKEN}"})
            assert reply.status == 200, reply
        # The browser's preflight carries no credentials: it needs no token.
        preflight = await post(
            server.endpoint + "/decode",
            method="OPTIONS",
            headers={"Origin": "http://localhost:8233"},
        )
        assert preflight.status == 204
    with pytest.raises(InvalidRequest, match="token is empty"):
        CodecServer(task.keys, token=" ")


async def test_only_the_allowed_browser_origins_are_answered(task: Task) -> None:
    body = as_json(Payload(metadata={"encoding": b"json/plain"}, data=b'"x"'))
    allowed = "http://127.0.0.1:18233"
    with CodecServer(task.keys, origins=[allowed + "/", "https://ui.example.com"]) as server:
        url = f"{server.endpoint}/decode"
        for method in ("POST", "OPTIONS"):
            reply = await post(url, body, method=method, headers={"Origin": "https://evil.test"})
            assert reply.status == 403, reply
            assert "origin https://evil.test is not allowed" in reply.body["error"]
            assert "Access-Control-Allow-Origin" not in reply.headers
        # The same port under another name is another origin to a browser.
        reply = await post(url, body, headers={"Origin": "http://localhost:18233"})
        assert reply.status == 403

        preflight = await post(
            url,
            method="OPTIONS",
            headers={
                "Origin": allowed,
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "content-type,x-namespace",
                "Access-Control-Request-Private-Network": "true",
            },
        )
        assert preflight.status == 204, preflight
        for reply in (preflight, await post(url, body, headers={"Origin": allowed})):
            assert reply.headers["Access-Control-Allow-Origin"] == allowed
            assert reply.headers["Access-Control-Allow-Credentials"] == "true"
            assert reply.headers["Access-Control-Allow-Methods"] == "POST, OPTIONS"
            assert reply.headers["Access-Control-Allow-Headers"] == (
                "Content-Type, X-Namespace, Authorization"
            )
            assert reply.headers["Vary"] == "Origin"
        assert reply.status == 200
        assert preflight.headers["Access-Control-Allow-Private-Network"] == "true"
        # Not a browser (the temporal CLI, a script): no Origin, no CORS headers needed.
        reply = await post(url, body)
        assert reply.status == 200 and "Access-Control-Allow-Origin" not in reply.headers

    with pytest.raises(InvalidRequest, match="not a browser origin"):
        CodecServer(task.keys, origins=["http://localhost:8233/ui"])
    assert web_ui_origins(8233) == ["http://127.0.0.1:8233", "http://localhost:8233"]


async def test_a_taken_port_is_a_clear_error(task: Task) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(SubagentError, match=f"cannot listen on 127.0.0.1:{port}"):
            CodecServer(task.keys, port=port).start()
    server = CodecServer(task.keys)
    async with server:
        assert server.port != 0
        assert (await post(f"{server.endpoint}/decode", {"payloads": []})).status == 200
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", server.port), timeout=1).close()


# ---------------------------------------------------------------- the temporal CLI


async def test_temporal_workflow_show_decodes_through_it(task: Task, dev_server: DevServer) -> None:
    base = ["workflow", "show", "--workflow-id", task.id, "--output", "json"]
    base += ["--address", dev_server.address, "--namespace", dev_server.namespace]
    with CodecServer(task.keys, token=TOKEN) as server:
        shown = await temporal_cli(
            *base, "--codec-endpoint", server.endpoint, "--codec-auth", f"Bearer {TOKEN}"
        )
        texts = "\n".join(decoded_strings(json.loads(shown)))
        assert PROMPT in texts and ANSWER in texts
        # Without the token it is refused (the CLI retries until its command timeout).
        refused = await asyncio.create_subprocess_exec(
            str(temporal_binary()),
            *base,
            "--codec-endpoint",
            server.endpoint,
            "--command-timeout",
            "2s",
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await refused.communicate()
        assert refused.returncode != 0 and PROMPT.encode() not in out, (out, err)
    # Without the codec it sees ciphertext.
    plain = "\n".join(decoded_strings(json.loads(await temporal_cli(*base))))
    assert task.id in plain and PROMPT not in plain and ANSWER not in plain


# ---------------------------------------------------------------- the subagents CLI


def test_codec_server_without_a_key_says_to_set_one(tmp_path: Path) -> None:
    result = failed(run("codec-server", env=_env(tmp_path)))
    assert "SUBAGENTS_PAYLOAD_KEY" in result.flat_err
    assert "subagents keygen" in result.flat_err
    result = failed(run("codec-server", env=_env(tmp_path, SUBAGENTS_PAYLOAD_KEY="short")))
    assert "SUBAGENTS_PAYLOAD_KEY is not a key" in result.flat_err


def test_keygen_prints_a_key_for_an_env_file(tmp_path: Path) -> None:
    result = ok(run("keygen", env=_env(tmp_path)))
    lines = result.out.splitlines()
    assert len(lines) == 2 and lines[0].startswith("# payload key id "), lines
    name, _, key = lines[1].partition("=")
    assert name == "SUBAGENTS_PAYLOAD_KEY"
    ring = KeyRing.parse(key)
    assert ring is not None and lines[0].split()[4] == ring.current_id
    assert len(base64.b64decode(key)) == 32
    assert "SUBAGENTS_PAYLOAD_OLD_KEYS" in result.err  # how to rotate, off stdout
    again = ok(run("keygen", env=_env(tmp_path))).out.splitlines()[1]
    assert again != lines[1]


async def test_the_codec_server_command_serves_until_ctrl_c(
    tmp_path: Path, task: Task, temporal_client: Client
) -> None:
    port = free_port()
    env = _env(tmp_path, SUBAGENTS_PAYLOAD_KEY=task.key, SUBAGENTS_CODEC_TOKEN=TOKEN)
    args = ["codec-server", "--port", str(port), "--origin", "http://localhost:3000", "-v"]
    proc = subprocess.Popen(
        [*CLI, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        banner = ""
        deadline = time.monotonic() + CEILING
        while "Ctrl-C to stop" not in banner and time.monotonic() < deadline:
            line = await asyncio.to_thread(proc.stdout.readline)
            assert line, f"exited {proc.wait()}: {banner}{proc.stderr.read()}"  # type: ignore[union-attr]
            banner += line
        endpoint = f"http://127.0.0.1:{port}"
        assert f"codec server on {endpoint}" in banner
        assert task.keys.current_id in banner and "bearer token required" in banner
        assert f"--codec-endpoint {endpoint} --codec-auth" in banner
        assert "http://localhost:3000" in banner and TOKEN not in banner

        raw = await _start_input(temporal_client, task)
        auth = {"Authorization": f"Bearer {TOKEN}"}
        reply = await post(f"{endpoint}/decode", as_json(raw), headers=auth)
        assert reply.status == 200 and PROMPT in from_json(reply.body)[0].data.decode()
        assert (await post(f"{endpoint}/decode", as_json(raw))).status == 401
        origin = {"Origin": "http://localhost:3000"}
        assert (await post(f"{endpoint}/decode", method="OPTIONS", headers=origin)).status == 204
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = await asyncio.to_thread(proc.communicate, timeout=15)
    assert proc.returncode == 0, err
    assert "Stopped." in out and "Traceback" not in err
    # -v: one line per request, never a payload or the token.
    assert re.search(r'"POST /decode HTTP/1.1" 200 1 payload\(s\), namespace default', err), err
    assert '"POST /decode HTTP/1.1" 401' in err
    assert TOKEN not in err and raw.data.hex() not in err
    assert base64.b64encode(raw.data).decode()[:40] not in err


# ---------------------------------------------------------------- subagents dev


@asynccontextmanager
async def running_dev(
    settings: Settings, *, port: int, ui_port: int, width: int = 200, **options: Any
) -> AsyncIterator[tuple[str, io.StringIO]]:
    """``run_dev`` until its banner is printed: (the banner, all it prints); stopped after."""
    out = io.StringIO()
    runner = asyncio.create_task(
        run_dev(
            settings=settings,
            port=port,
            ui_port=ui_port,
            db=None,
            workspace=None,
            console=Console(file=out, width=width),
            **{"retention": None, **options},
        )
    )
    try:
        yield await _wait_ready(runner, out), out
    finally:
        runner.cancel()
        await asyncio.wait_for(runner, 20)


def _cmdlines_with(marker: str) -> list[list[str]]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                args = (entry / "cmdline").read_bytes().split(b"\0")
                if any(marker.encode() in a for a in args):
                    found.append([a.decode() for a in args if a])
    return found


async def test_dev_with_a_key_runs_a_codec_server_for_its_web_ui(tmp_path: Path) -> None:
    key = new_key()
    port, ui_port, codec_port = free_port(), free_port(), free_port()
    settings = _settings(tmp_path, f"127.0.0.1:{port}", "default", key)
    endpoint = f"http://127.0.0.1:{codec_port}"
    ready = running_dev(settings, port=port, ui_port=ui_port, codec_port=codec_port)
    async with ready as (text, out):
        assert f"Codec server: {endpoint} (the Web UI decrypts tasks through it" in text
        db = str((tmp_path / "data" / "temporal.db").resolve())
        [server_args] = [a for a in _cmdlines_with(db) if "start-dev" in a]
        flag = server_args.index("--ui-codec-endpoint")
        assert server_args[flag + 1] == endpoint
        settings_json = await asyncio.to_thread(
            urllib.request.urlopen, f"http://127.0.0.1:{ui_port}/api/v1/settings", timeout=10
        )
        assert json.loads(settings_json.read())["Codec"]["Endpoint"] == endpoint

        # The dev worker runs a task; the codec server opens it, for the Web UI's origin.
        done = await _run_task(settings, worker=False)
        temporal = await connect_client(settings.address, settings.namespace)
        raw = await _start_input(temporal, done)
        for origin in web_ui_origins(ui_port):
            reply = await post(f"{endpoint}/decode", as_json(raw), headers={"Origin": origin})
            assert reply.status == 200 and reply.headers["Access-Control-Allow-Origin"] == origin
            assert PROMPT in from_json(reply.body)[0].data.decode()
        reply = await post(
            f"{endpoint}/decode", as_json(raw), headers={"Origin": "http://127.0.0.1:9"}
        )
        assert reply.status == 403

        # A second dev on the same port names the codec server the Web UI uses.
        async with running_dev(settings, port=port, ui_port=free_port()) as (text, _):
            pass
        assert f"the Web UI decrypts through {endpoint}, the codec server of the" in text
    assert "Stopped." in out.getvalue()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", codec_port), timeout=1).close()


async def test_dev_reusing_a_running_server_says_its_web_ui_does_not_use_it(
    tmp_path: Path, dev_server: DevServer
) -> None:
    settings = _settings(tmp_path, dev_server.address, dev_server.namespace, new_key())
    reuse = {"port": dev_server.port, "ui_port": dev_server.ui_port, "width": 400}
    async with running_dev(settings, **reuse, retention=timedelta(days=1)) as (text, _):
        pass
    found = re.search(r"Codec server: (http://127\.0\.0\.1:\d+) ", text)
    assert found, text
    assert "was not started with it" in text and "Codec Server setting" in text
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", int(found[1].rsplit(":", 1)[1])), 1).close()
    # Without a key there is nothing to decrypt: no codec server.
    keyless = settings.model_copy(update={"payload_key": None})
    async with running_dev(keyless, **reuse, codec_port=free_port()) as (text, _):
        pass
    assert "Codec server" not in text and "--codec-port" in text and "is not used" in text


# ---------------------------------------------------------------- the Web UI, in a browser


@pytest.fixture(scope="module")
async def ui_task(
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[tuple[DevServer, Task]]:
    """A dev server whose Web UI decodes through a codec server, and a task on it."""
    tmp = tmp_path_factory.mktemp("codec-ui")
    key, ui_port = new_key(), free_port()
    keys = KeyRing.parse(key)
    assert keys is not None
    with CodecServer(keys, origins=web_ui_origins(ui_port)) as codec:
        async with DevServer(
            port=free_port(), ui_port=ui_port, db=tmp / "t.db", codec_endpoint=codec.endpoint
        ) as server:
            done = await _run_task(_settings(tmp, server.address, server.namespace, key))
            yield server, done


async def _page_text(server: DevServer, task: Task, expect: str | None) -> str:
    """The task's page in the Web UI, once ``expect`` shows (or 15 s passed).

    Without ``expect``: once the history shows, and the UI had 2 s to decode.
    """
    async_api = pytest.importorskip("playwright.async_api")
    url = f"{server.ui_url}/namespaces/{server.namespace}/workflows/{task.id}/{task.run_id}/history"
    async with async_api.async_playwright() as playwright:
        chromium = await playwright.chromium.launch(executable_path=CHROMIUM)
        try:
            page = await chromium.new_page(viewport={"width": 1600, "height": 1200})
            await page.goto(url)
            await page.get_by_text("Workflow Execution Started").first.wait_for(timeout=15_000)
            if expect is None:
                await page.wait_for_timeout(2000)
            else:
                with contextlib.suppress(async_api.TimeoutError):
                    await page.get_by_text(expect).first.wait_for(timeout=15_000)
            text: str = await page.locator("body").inner_text()
            folder = Path(os.environ.get("SUBAGENTS_SCREENSHOTS") or server.db.parent)
            folder.mkdir(parents=True, exist_ok=True)
            await page.screenshot(path=folder / f"codec-{task.id}.png")
            return text
        finally:
            await chromium.close()


@needs_browser
@pytest.mark.browser
async def test_the_web_ui_shows_the_task_decrypted_through_the_codec_server(
    ui_task: tuple[DevServer, Task],
) -> None:
    server, task = ui_task
    text = await _page_text(server, task, PROMPT)
    assert PROMPT in text, text  # the summary of the start event
    assert ANSWER in text, text  # the result panel


@needs_browser
@pytest.mark.browser
async def test_without_a_codec_endpoint_the_web_ui_shows_ciphertext(
    dev_server: DevServer, task: Task
) -> None:
    text = await _page_text(dev_server, task, None)
    assert task.id in text  # the page did load
    assert PROMPT not in text and ANSWER not in text


async def test_unfinished_requests_from_one_address_leave_the_codec_server_answering(
    task: Task,
) -> None:
    """A slowloris from one address holds at most its share of the connections, and
    none past the head deadline; the Web UI's decode from another address is answered."""
    body = as_json(Payload(metadata={"encoding": b"json/plain"}, data=b'"x"'))
    async with CodecServer(task.keys) as server:
        flood = await half_open(server.port, server.peers.most + 20)
        try:
            reply = await post(f"{server.endpoint}/decode", body)
            assert reply.status == 200, reply
            # the excess answered 429 at once, the rest closed at the head deadline
            async with asyncio.timeout(CEILING):
                await asyncio.gather(*(c.closed for c in flood))
            refused = [c for c in flood if c.refused]
            assert len(refused) >= 20, len(refused)
            assert all(c.refused or not c.received for c in flood)
        finally:
            for connection in flood:
                connection.abort()
