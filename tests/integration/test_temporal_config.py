"""Secured clusters: Temporal's own client configuration, through a real TLS front.

A ``TlsFront`` (``tests/tls_front.py``) stands before the session's dev server as a
secured cluster or Temporal Cloud would: TLS with a certificate made for the test, a
client certificate demanded at the handshake, or an API key checked on every request.
Workers, clients and the CLI are configured only as Temporal's own clients are:
``TEMPORAL_*`` variables and TOML profiles.
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from durable_subagents import SubagentClient, TaskStatus
from durable_subagents.config import Settings
from durable_subagents.errors import TemporalAccessDenied
from durable_subagents.testing import DevServer

from ..helpers.cli import CLI, _env
from ..helpers.tasks import give_to_tool_user, script
from ..tls_front import Certificates, TlsFront

POLL = "/temporal.api.workflowservice.v1.WorkflowService/PollActivityTaskQueue"
START = "/temporal.api.workflowservice.v1.WorkflowService/StartWorkflowExecution"


def clean_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The process environment without any Temporal or subagents settings, no Temporal
    configuration file, plus ``extra``."""
    return _env(tmp_path, **{"TEMPORAL_CONFIG_FILE": str(tmp_path / "absent.toml"), **extra})


def cli(*args: str, env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return Certificates(tmp_path_factory.mktemp("certs"))


@pytest.fixture
def mtls_front(dev_server: DevServer, certs: Certificates) -> Iterator[TlsFront]:
    with TlsFront(dev_server.address, certs) as front:
        yield front


def mtls_env(front: TlsFront, certs: Certificates) -> dict[str, str]:
    return {
        "TEMPORAL_ADDRESS": front.address,
        "TEMPORAL_TLS_CLIENT_CERT_PATH": str(certs.client_cert),
        "TEMPORAL_TLS_CLIENT_KEY_PATH": str(certs.client_key),
        "TEMPORAL_TLS_SERVER_CA_CERT_PATH": str(certs.ca),
    }


def paths(front: TlsFront) -> set[str]:
    return {r.get(":path", "") for r in front.requests}


async def test_a_worker_and_a_client_configured_only_by_temporal_variables_run_a_task(
    mtls_front: TlsFront,
    certs: Certificates,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The worker is a real ``subagents worker`` process given no option at all."""
    queue = f"mtls-{uuid.uuid4().hex[:8]}"
    workspace = tmp_path / "ws"
    workspace.mkdir()
    give_to_tool_user(workspace)
    shared = {
        **mtls_env(mtls_front, certs),
        "SUBAGENTS_TASK_QUEUE": queue,
        "SUBAGENTS_BLOB_DIR": str(tmp_path / "blobs"),
    }
    env = clean_env(tmp_path, **shared, SUBAGENTS_WORKSPACE=str(workspace))
    log = (tmp_path / "worker.log").open("wb")
    worker = subprocess.Popen([*CLI, "worker"], env=env, stdout=log, stderr=log)
    try:
        await _wait_for_log(tmp_path / "worker.log", "worker on", worker)
        for name, value in clean_env(tmp_path, **shared).items():
            monkeypatch.setenv(name, value)
        client = await SubagentClient.connect(agents={})
        task_id = await client.spawn_task(
            "explore", "say hello", model=script({"text": "hello through TLS"})
        )
        info = await client.check_task(task_id, wait=True, timeout=60)
    finally:
        worker.terminate()
        worker.wait(30)
        log.close()
    assert info.status == TaskStatus.COMPLETED, info
    assert info.result == "hello through TLS"
    assert POLL in paths(mtls_front) and START in paths(mtls_front)
    assert "worker on localhost:" in (tmp_path / "worker.log").read_text()


async def _wait_for_log(path: Path, text: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while text not in path.read_text(errors="replace"):
        assert proc.poll() is None, path.read_text(errors="replace")
        assert time.monotonic() < deadline, path.read_text(errors="replace")
        await asyncio.sleep(0.1)


def test_the_cli_connects_with_a_toml_profile(
    mtls_front: TlsFront, certs: Certificates, settings: Settings, tmp_path: Path
) -> None:
    config = tmp_path / "temporal.toml"
    config.write_text(
        f'[profile.secure]\naddress = "{mtls_front.address}"\nnamespace = "default"\n'
        f'[profile.secure.tls]\nclient_cert_path = "{certs.client_cert}"\n'
        f'client_key_path = "{certs.client_key}"\nserver_ca_cert_path = "{certs.ca}"\n'
        '[profile.secure.grpc_meta]\nx-team = "platform"\n'
    )
    env = clean_env(
        tmp_path, TEMPORAL_CONFIG_FILE=str(config), SUBAGENTS_TASK_QUEUE=settings.task_queue
    )
    listed = cli("ls", "--json", "--profile", "secure", env=env)
    assert listed.returncode == 0, listed.stderr
    assert isinstance(json.loads(listed.stdout), list)
    listing = [r for r in mtls_front.requests if r[":path"].endswith("/ListWorkflowExecutions")]
    assert listing and all(r.get("x-team") == "platform" for r in listing)
    # TEMPORAL_PROFILE picks it the same way; without it, the default profile (absent) fails.
    by_env = cli("ls", "--json", env={**env, "TEMPORAL_PROFILE": "secure"})
    assert by_env.returncode == 0, by_env.stderr
    unknown = cli("ls", "--profile", "staging", env=env)
    assert unknown.returncode == 1
    assert _one_line(unknown.stderr) == (
        f"error: Temporal profile 'staging' is not in {config}: add a [profile.staging] "
        "table there, point TEMPORAL_CONFIG_FILE at the file that has it, or choose another "
        "with --profile / TEMPORAL_PROFILE"
    )


def _one_line(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr
    return " ".join(stderr.split())


def test_no_client_certificate_is_one_line_naming_the_settings(
    mtls_front: TlsFront, certs: Certificates, tmp_path: Path
) -> None:
    env = clean_env(
        tmp_path,
        TEMPORAL_ADDRESS=mtls_front.address,
        TEMPORAL_TLS_SERVER_CA_CERT_PATH=str(certs.ca),
    )
    result = cli("ls", env=env)
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1, result.stderr
    expected = (
        f"error: Temporal at {mtls_front.address} refused the TLS handshake: it asks for a "
        "client certificate, and none is set. Set TEMPORAL_TLS_CLIENT_CERT_PATH and "
        "TEMPORAL_TLS_CLIENT_KEY_PATH (or tls.client_cert_path and tls.client_key_path in a "
        "profile)"
    )
    # what the transport said, when the refusal was not recognized
    assert _one_line(result.stderr) == expected, cli("-v", "ls", env=env).stderr
    worker = cli("worker", env=env)
    assert worker.returncode == 1
    assert "refused the TLS handshake" in _one_line(worker.stderr)


def test_a_plain_connection_to_a_tls_port_says_it_probably_requires_tls(
    tmp_path: Path, mtls_front: TlsFront
) -> None:
    result = cli("check", "some-task", env=clean_env(tmp_path, TEMPORAL_ADDRESS=mtls_front.address))
    assert result.returncode == 1
    assert result.stderr.startswith(
        f"error: Temporal at {mtls_front.address} closed the connection at once: it "
        "probably requires TLS"
    ), result.stderr


def test_a_tls_port_that_resets_the_plain_preface_unread_says_the_same(tmp_path: Path) -> None:
    """On a busy machine a TLS server closes before it read the whole plain preface,
    and the kernel answers the unread bytes with a reset, not a close."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def reset_each() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            conn.recv(3)
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            conn.close()

    threading.Thread(target=reset_each, daemon=True).start()
    try:
        result = cli(
            "check", "some-task", env=clean_env(tmp_path, TEMPORAL_ADDRESS=f"localhost:{port}")
        )
    finally:
        server.close()
    assert result.returncode == 1
    assert result.stderr.startswith(
        f"error: Temporal at localhost:{port} closed the connection at once: it probably "
        "requires TLS"
    ), result.stderr


@pytest.mark.parametrize(
    ("variable", "problem"),
    [
        ("TEMPORAL_TLS_CLIENT_CERT_PATH", "missing"),
        ("TEMPORAL_TLS_CLIENT_KEY_PATH", "not pem"),
        ("TEMPORAL_TLS_SERVER_CA_CERT_PATH", "missing"),
    ],
)
def test_an_unreadable_certificate_is_one_line_naming_its_variable(
    mtls_front: TlsFront, certs: Certificates, tmp_path: Path, variable: str, problem: str
) -> None:
    bad = tmp_path / "bad.pem"
    if problem == "not pem":
        bad.write_text("not a key")
    env = clean_env(tmp_path, **{**mtls_env(mtls_front, certs), variable: str(bad)})
    result = cli("ls", env=env)
    assert result.returncode == 1
    line = _one_line(result.stderr)
    assert line.startswith(f"error: {variable}={bad}"), line
    if problem == "missing":
        assert "cannot read" in line and "No such file or directory" in line
    else:
        assert "is not a PEM client private key" in line


def test_a_wrong_server_ca_says_which_setting_to_change(
    mtls_front: TlsFront, certs: Certificates, tmp_path: Path
) -> None:
    other = Certificates(tmp_path / "other")
    env = clean_env(
        tmp_path,
        **{**mtls_env(mtls_front, certs), "TEMPORAL_TLS_SERVER_CA_CERT_PATH": str(other.ca)},
    )
    result = cli("ls", env=env)
    assert result.returncode == 1
    assert _one_line(result.stderr) == (
        f"error: Temporal at {mtls_front.address} presented a certificate this client does "
        "not trust: set TEMPORAL_TLS_SERVER_CA_CERT_PATH to the CA certificate that signed it "
        "(PEM)"
    )


async def test_the_api_key_reaches_the_server_in_every_request_and_turns_tls_on(
    dev_server: DevServer,
    certs: Certificates,
    settings: Settings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """TLS is never set here: the key alone turns it on (the front speaks only TLS)."""
    key = f"tsk-{uuid.uuid4().hex}"
    with TlsFront(dev_server.address, certs, require_client_cert=False, api_key=key) as front:
        env = clean_env(
            tmp_path,
            TEMPORAL_ADDRESS=front.address,
            TEMPORAL_API_KEY=key,
            TEMPORAL_TLS_SERVER_CA_CERT_PATH=str(certs.ca),
            TEMPORAL_GRPC_META_X_TENANT="acme",
        )
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        client = await SubagentClient.connect(task_queue=settings.task_queue, agents={})
        assert await client.list_tasks(parent_id=f"none-{key}") == []
        assert front.refused == 0
        assert len(front.requests) >= 2
        for request in front.requests:
            assert request["authorization"] == f"Bearer {key}"
            assert request["x-tenant"] == "acme"
        monkeypatch.setenv("TEMPORAL_API_KEY", "tsk-revoked")
        with pytest.raises(TemporalAccessDenied) as refused:
            await SubagentClient.connect(agents={})
        assert str(refused.value) == (
            f"Temporal at {front.address} refused the API key (TEMPORAL_API_KEY; "
            "Unauthenticated): set a valid, unexpired key for namespace 'default'"
        )
        assert front.refused >= 1
        result = cli("ls", env={**env, "TEMPORAL_API_KEY": "tsk-revoked"})
        assert result.returncode == 1
        assert "refused the API key (TEMPORAL_API_KEY; Unauthenticated)" in _one_line(result.stderr)
