"""The S3 blob store over a real S3 wire, and deployments whose hosts share no disk.

moto's S3 server runs in a process of its own; workers are real processes with data
directories of their own (two "hosts"), configured only by environment variables.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio.client import Client

from durable_subagents import SubagentClient, TaskStatus
from durable_subagents.config import Settings
from durable_subagents.errors import InvalidRequest
from durable_subagents.storage._blobstore import (
    BlobCorrupt,
    BlobNotFound,
    BlobStoreUnavailable,
    blob_ref,
)
from durable_subagents.storage._factory import open_blob_store
from durable_subagents.storage._s3 import S3BlobStore
from durable_subagents.worker import sweep_blobs

from ..helpers import CEILING
from ..helpers.tasks import TEST_MODELS, script
from ..s3server import S3Server


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    server = S3Server()
    yield server
    server.stop()


@pytest.fixture
def bucket(s3: S3Server, monkeypatch: pytest.MonkeyPatch) -> str:
    for key, value in s3.env().items():
        monkeypatch.setenv(key, value)
    return s3.new_bucket()


# ---------------------------------------------------------------- the store itself


async def test_blobs_and_records_round_trip_under_namespace_and_task(
    s3: S3Server, bucket: str
) -> None:
    store = open_blob_store(f"s3://{bucket}/team/a", Path("/unused"), "ns1")
    assert isinstance(store, S3BlobStore)
    ref = await store.put("task-1", b"hello")
    assert ref == blob_ref(b"hello")
    await store.put_record("task-1", "call-a", b"{}")
    await store.put_record("task-1", "call-a", b'{"again": 1}')
    await store.put("task-2", b"other")
    digest = ref.split(":")[1]
    assert s3.keys(bucket) == sorted(
        [
            f"team/a/ns1/task-1/sha256/{digest}",
            "team/a/ns1/task-1/records/call-a",
            f"team/a/ns1/task-2/sha256/{blob_ref(b'other').split(':')[1]}",
        ]
    )
    # A store with an empty cache (another host) reads the same bytes back.
    other = open_blob_store(f"s3://{bucket}/team/a", Path("/unused"), "ns1")
    assert await other.get("task-1", ref) == b"hello"
    assert await other.get_record("task-1", "call-a") == b'{"again": 1}'
    assert await other.get_record("task-1", "nothing") is None
    assert await other.task_ids() == ["task-1", "task-2"]
    written = await other.last_write("task-1")
    assert written is not None and abs(time.time() - written.timestamp()) < 120
    await other.delete_task("task-1")
    assert await other.task_ids() == ["task-2"]
    assert await other.last_write("task-1") is None


async def test_a_changed_object_is_refused(s3: S3Server, bucket: str) -> None:
    store = open_blob_store(f"s3://{bucket}", Path("/unused"), "ns")
    ref = await store.put("t", b"the real bytes")
    key = f"ns/t/sha256/{ref.split(':')[1]}"
    s3.boto().put_object(Bucket=bucket, Key=key, Body=b"the fake bytes")
    fresh = open_blob_store(f"s3://{bucket}", Path("/unused"), "ns")
    with pytest.raises(BlobCorrupt) as caught:
        await fresh.get("t", ref)
    assert caught.value.key == key
    assert f"s3://{bucket}/ns" in str(caught.value) and key in str(caught.value)


async def test_a_missing_blob_names_the_store_and_the_key(s3: S3Server, bucket: str) -> None:
    store = open_blob_store(f"s3://{bucket}/p", Path("/unused"), "ns")
    ref = blob_ref(b"never written")
    with pytest.raises(BlobNotFound) as caught:
        await store.get("t", ref)
    message = str(caught.value)
    assert f"s3://{bucket}/p/ns at {s3.endpoint}" in message
    assert f"p/ns/t/sha256/{ref.split(':')[1]}" in message
    assert "SUBAGENTS_BLOB_URL" in message


async def test_a_missing_bucket_says_to_create_it(s3: S3Server, bucket: str) -> None:
    store = open_blob_store("s3://no-such-bucket-here", Path("/unused"), "ns")
    with pytest.raises(BlobStoreUnavailable, match="'no-such-bucket-here' does not exist"):
        await store.put("t", b"x")


async def test_an_unreachable_store_fails_within_its_retry_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from ..s3server import free_port

    endpoint = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    store = open_blob_store("s3://bucket/p", Path("/unused"), "ns")
    started = time.monotonic()
    with pytest.raises(BlobStoreUnavailable) as caught:
        await store.get("t", blob_ref(b"x"))
    assert time.monotonic() - started < 30
    assert endpoint in str(caught.value) and "p/ns/t/sha256/" in str(caught.value)


# ---------------------------------------------------------------- hosts sharing nothing


class Host:
    """A worker process with a data directory and workspace of its own."""

    def __init__(self, root: Path, settings: Settings, env: dict[str, str]) -> None:
        self.data = root / "data"
        self.workspace = root / "ws"
        self.workspace.mkdir(parents=True)
        (self.workspace / "big.txt").write_text(BIG_FILE)  # each host has its checkout
        clean = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("SUBAGENTS_", "AWS_"))},
            **TEST_MODELS,
        }
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "durable_subagents",
                "worker",
                "--address",
                settings.address,
                "--task-queue",
                settings.task_queue,
                "--workspace",
                str(self.workspace),
            ],
            env={
                **clean,
                **env,
                "SUBAGENTS_DATA_DIR": str(self.data),
                "SUBAGENTS_STICKY_QUEUE_TIMEOUT": "1",
            },
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> str:
        """Stop the worker; its log."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        assert self.proc.stderr is not None
        return self.proc.stderr.read().decode(errors="replace")


@pytest.fixture
async def hosts(tmp_path: Path) -> AsyncIterator[list[Host]]:
    started: list[Host] = []
    yield started
    for host in started:
        host.stop()


BIG_FILE = "".join(f"{n:05d} " + "x" * 93 + "\n" for n in range(600))
"""60 KB: each read of it is a tool result far over the inline limit, so a blob."""
TURNS = 12


def big_output_task() -> str:
    """A scripted model: eleven turns that each read 60 KB, then a final answer."""
    call = {"tool_calls": [{"name": "read_file", "arguments": {"path": "big.txt"}}], "delay": 0.3}
    return script(call, repeat=TURNS - 1, final="done after eleven tool calls")


async def until_turn(client: SubagentClient, task_id: str, turn: int, timeout: float) -> None:
    """Until the task's history has its ``turn``-th model turn (the memo, which
    ``check_task`` reads, shows progress up to 10 s late)."""
    async with asyncio.timeout(timeout):
        async for event in client.watch(task_id):
            if event.kind == "turn" and (event.turn or 0) >= turn:
                return
    raise AssertionError(f"the task closed before turn {turn}")


async def test_a_task_moves_between_hosts_that_share_only_s3(
    s3: S3Server,
    bucket: str,
    temporal_client: Client,
    settings: Settings,
    hosts: list[Host],
    tmp_path: Path,
) -> None:
    url = f"s3://{bucket}/subagents"
    env = {**s3.env(), "SUBAGENTS_BLOB_URL": url}
    parent = SubagentClient(temporal_client, task_queue=settings.task_queue)  # no blob store
    hosts.append(Host(tmp_path / "host-a", settings, env))
    task_id = await parent.spawn_task("general", "write big outputs", model=big_output_task())
    await until_turn(parent, task_id, 5, 60)
    hosts[0].kill()
    hosts.append(Host(tmp_path / "host-b", settings, env))

    info = await parent.check_task(task_id, wait=True, timeout=CEILING)
    assert info.status == TaskStatus.COMPLETED, info.error
    assert info.turns == TURNS
    assert info.result is not None and info.result == "done after eleven tool calls"
    assert not info.result_truncated
    for host in hosts:  # nothing of the task's was written to a host's own disk
        assert not (host.data / "blobs").exists()
    assert any(k.startswith(f"subagents/{settings.namespace}/{task_id}/") for k in s3.keys(bucket))

    # A client on a third host, with its own data directory and only the URL and keys.
    third = Settings(
        address=settings.address,
        namespace=settings.namespace,
        data_dir=tmp_path / "host-c",
        blob_url=url,
    )
    reader = SubagentClient(
        temporal_client, task_queue=settings.task_queue, blob_store=third.blob_store()
    )
    transcript = await reader.get_transcript(task_id)
    outputs = [m.content for m in transcript if m.role == "tool"]
    assert len(outputs) == TURNS - 1
    assert all(o == outputs[0] for o in outputs)
    assert len(outputs[0]) > 60_000 and "00599 " + "x" * 93 in outputs[0]
    assert await reader.get_result(task_id) == info.result

    removed = await sweep_blobs(temporal_client, third.blob_store(), retention=timedelta(0))
    assert task_id in removed
    assert not [k for k in s3.keys(bucket) if f"/{task_id}/" in k]


async def test_a_long_answer_comes_whole_only_when_asked_for(
    s3: S3Server,
    bucket: str,
    temporal_client: Client,
    settings: Settings,
    hosts: list[Host],
    tmp_path: Path,
) -> None:
    url = f"s3://{bucket}"
    hosts.append(Host(tmp_path / "host-a", settings, {**s3.env(), "SUBAGENTS_BLOB_URL": url}))
    parent = SubagentClient(temporal_client, task_queue=settings.task_queue)  # no blob store
    medium = "m" * 50_000
    long = "l" * 100_000
    ids = [
        await parent.spawn_task("explore", "a", model=script({"text": medium})),
        await parent.spawn_task("explore", "b", model=script({"text": long})),
    ]
    done = await parent.wait_tasks(ids, timeout=CEILING)
    by_id = {i.id: i for i in done}
    assert by_id[ids[0]].result == medium and not by_id[ids[0]].result_truncated
    truncated = by_id[ids[1]]
    assert truncated.result_truncated
    assert truncated.result is not None and truncated.result.startswith("l" * 1000)
    assert len(truncated.result) < 2000
    with pytest.raises(InvalidRequest, match="no blob store"):
        await parent.get_result(ids[1])
    reader = SubagentClient(
        temporal_client,
        task_queue=settings.task_queue,
        blob_store=Settings(namespace=settings.namespace, blob_url=url).blob_store(),
    )
    assert await reader.get_result(ids[1]) == long

    # The command line reads the whole answer where it can reach the store...
    clean = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("SUBAGENTS_", "AWS_"))},
        **TEST_MODELS,
    }
    base = {
        **clean,
        "TEMPORAL_ADDRESS": settings.address,
        "TEMPORAL_NAMESPACE": settings.namespace,
        "SUBAGENTS_DATA_DIR": str(tmp_path / "cli"),
        "COLUMNS": "200",
    }
    check = [sys.executable, "-m", "durable_subagents", "check", ids[1]]
    with_store = {**base, **s3.env(), "SUBAGENTS_BLOB_URL": url}
    whole = await asyncio.to_thread(
        subprocess.run, check, env=with_store, capture_output=True, text=True, timeout=60
    )
    assert whole.returncode == 0, whole.stderr
    assert long in whole.stdout.replace("\n", "")
    # ... and says why not where it cannot.
    head = await asyncio.to_thread(
        subprocess.run, check, env=base, capture_output=True, text=True, timeout=60
    )
    assert head.returncode == 0, head.stderr
    assert "l" * 1000 in head.stdout.replace("\n", "") and long not in head.stdout
    assert "cannot read the whole answer" in head.stdout


async def test_hosts_with_separate_local_stores_fail_the_task_loudly(
    temporal_client: Client, settings: Settings, hosts: list[Host], tmp_path: Path
) -> None:
    """The misconfiguration S3 fixes: the second host cannot read the first's blobs.

    The task fails, naming the store and the key, after a bounded number of attempts,
    instead of staying ``running``.
    """
    parent = SubagentClient(temporal_client, task_queue=settings.task_queue)
    hosts.append(Host(tmp_path / "host-a", settings, {}))
    task_id = await parent.spawn_task("general", "write big outputs", model=big_output_task())
    await until_turn(parent, task_id, 3, 60)
    hosts[0].kill()
    hosts.append(Host(tmp_path / "host-b", settings, {}))
    started = time.monotonic()
    info = await parent.check_task(task_id, wait=True, timeout=CEILING)
    assert info.status == TaskStatus.FAILED
    error = info.error or ""
    assert "is not in the blob store" in error
    assert str(tmp_path / "host-b" / "data" / "blobs") in error  # the store it looked in
    assert f"/{task_id}/" in error  # and the key
    assert time.monotonic() - started < 60


async def test_a_store_that_does_not_answer_shows_while_the_turn_is_retried(
    temporal_client: Client, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An outage of the store is retried like a model outage, and a parent sees why."""
    from durable_subagents.worker import create_worker

    from ..s3server import free_port

    endpoint = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    down = settings.model_copy(update={"blob_url": "s3://bucket/p"})
    parent = SubagentClient(temporal_client, task_queue=settings.task_queue)
    async with create_worker(temporal_client, down):
        task_id = await parent.spawn_task("explore", "x", model=script({"text": "y" * 20}))
        deadline = time.monotonic() + 60
        while (info := await parent.check_task(task_id)).retrying is None:
            assert time.monotonic() < deadline, "no retry shown"
            await asyncio.sleep(0.2)
        assert info.status == TaskStatus.RUNNING
        assert info.retrying.startswith("model turn, attempt ")
        assert f"s3://bucket/p/{settings.namespace} at {endpoint}" in info.retrying
        assert f"p/{settings.namespace}/{task_id}/sha256/" in info.retrying
        cancelled = await parent.cancel_task(task_id, timeout=CEILING)
    assert cancelled.status == TaskStatus.CANCELLED


async def test_a_worker_checks_its_store_at_start(s3: S3Server, bucket: str) -> None:
    from durable_subagents.storage._blobstore import check_blob_store

    await check_blob_store(open_blob_store(f"s3://{bucket}", Path("/unused"), "ns"))
    with pytest.raises(BlobStoreUnavailable, match="'missing-bucket' does not exist: create it"):
        await check_blob_store(open_blob_store("s3://missing-bucket", Path("/unused"), "ns"))


async def test_a_worker_refuses_to_start_on_a_store_it_cannot_use(
    s3: S3Server, settings: Settings, tmp_path: Path
) -> None:
    clean = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("SUBAGENTS_", "AWS_"))},
        **TEST_MODELS,
    }
    proc = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "durable_subagents", "worker", "--address", settings.address],
        env={
            **clean,
            **s3.env(),
            "SUBAGENTS_BLOB_URL": "s3://no-bucket-by-this-name/x",
            "SUBAGENTS_DATA_DIR": str(tmp_path / "data"),
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert "bucket 'no-bucket-by-this-name' does not exist: create it" in proc.stderr
    assert "Traceback" not in proc.stderr


async def test_a_hostile_model_cannot_reach_the_s3_store_or_its_keys(
    s3: S3Server,
    bucket: str,
    temporal_client: Client,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The attacker knows the endpoint, the bucket and where the keys are kept.

    It tries the worker's environment, the credentials file (placed inside its own
    workspace, so only the hiding protects it), and the store over HTTP.
    """
    from durable_subagents.worker import create_worker

    from ..helpers.attacks import bash, call, run_attack

    secret = "s3-secret-" + os.urandom(8).hex()
    workspace = settings.workspace
    assert workspace is not None
    creds = workspace / "aws-credentials"
    creds.write_text(f"[default]\naws_secret_access_key = {secret}\n")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(creds))
    on_s3 = settings.model_copy(update={"blob_url": f"s3://{bucket}/p"})
    s3.boto().put_object(Bucket=bucket, Key="p/other-task/records/x", Body=b"other task's data")
    listing = f"{s3.endpoint}/{bucket}?list-type=2"
    client = SubagentClient(
        temporal_client, task_queue=on_s3.task_queue, blob_store=on_s3.blob_store()
    )
    async with create_worker(temporal_client, on_s3):
        task_id, outputs = await run_attack(
            client,
            bash(
                'echo "key=$AWS_SECRET_ACCESS_KEY"; env | grep -i aws; cat aws-credentials',
                f"python3 -c \"import urllib.request as u; print(u.urlopen('{listing}').read())\"",
                f"curl -s '{listing}' || wget -qO- '{listing}'",
            ),
            call("read_file", path="aws-credentials"),
            call("grep", pattern="aws_secret", path="."),
        )
    text = "\n".join(outputs)
    assert secret not in text
    assert "ListBucketResult" not in text and "other task's data" not in text
    assert "key=" in [line.strip() for line in text.splitlines()]  # the variable is unset
    # The task's own blobs went to the store all the same.
    assert any(f"/{task_id}/" in k for k in s3.keys(bucket))
