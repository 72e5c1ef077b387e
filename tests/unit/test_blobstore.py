"""The local blob store's writes: atomic, private, and no litter."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from durable_subagents.errors import BlobNotFound
from durable_subagents.storage import _local
from durable_subagents.storage._blobstore import blob_ref
from durable_subagents.storage._local import LocalBlobStore


def files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


async def test_writes_make_their_directories_and_leave_no_temp_files(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path / "blobs")
    ref = await store.put("task/1", b"hello")
    await store.put_record("task/1", "call-a", b"{}")
    await store.put_record("task/1", "call-a", b'{"again": 1}')
    assert await store.get("task/1", ref) == b"hello"
    assert await store.get_record("task/1", "call-a") == b'{"again": 1}'
    digest = blob_ref(b"hello").split(":")[1]
    assert files(tmp_path / "blobs") == [f"task_1/{digest}", "task_1/records/call-a"]
    for path in (tmp_path / "blobs").rglob("*"):
        if path.is_file():
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, path


async def test_blobs_written_in_the_old_layout_are_still_read(tmp_path: Path) -> None:
    """0.1.0 kept a blob in ``<task>/<hash[:2]>/<hash>``: a task it began reads on."""
    ref = blob_ref(b"from 0.1.0")
    digest = ref.split(":")[1]
    old = tmp_path / "task_1" / digest[:2] / digest
    old.parent.mkdir(parents=True)
    old.write_bytes(b"from 0.1.0")
    store = LocalBlobStore(tmp_path)
    assert await store.get("task/1", ref) == b"from 0.1.0"
    with pytest.raises(BlobNotFound):
        await store.get("task/1", blob_ref(b"never written"))
    empty = await store.put("task/1", b"")
    assert await LocalBlobStore(tmp_path).get("task/1", empty) == b""  # no cache


async def test_a_missing_record_is_looked_for_in_one_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A record was never spread over subdirectories: a miss costs one look."""
    store = LocalBlobStore(tmp_path)
    looked: list[Path] = []
    real = _local._read

    def read(path: Path) -> bytes:
        looked.append(path)
        return real(path)

    monkeypatch.setattr(_local, "_read", read)
    assert await store.get_record("t", "call-a") is None
    assert looked == [tmp_path / "t" / "records" / "call-a"]


async def test_last_write_moves_with_every_new_blob_and_record(tmp_path: Path) -> None:
    """The sweep's idea of a task's age: a new name in the task's directories moves it."""
    store = LocalBlobStore(tmp_path)
    await store.put("t", b"first")
    await store.put_record("t", "call-a", b"{}")
    long_ago = 1_000_000_000.0

    def age_everything() -> None:
        for path in [tmp_path / "t", *(tmp_path / "t").rglob("*")]:
            os.utime(path, (long_ago, long_ago))

    age_everything()
    assert (await store.last_write("t")).timestamp() == long_ago  # type: ignore[union-attr]
    await store.put("t", b"second")
    assert (await store.last_write("t")).timestamp() > long_ago + 1  # type: ignore[union-attr]
    age_everything()
    await store.put_record("t", "call-a", b'{"again": 1}')
    assert (await store.last_write("t")).timestamp() > long_ago + 1  # type: ignore[union-attr]
    assert await store.last_write("never") is None


async def test_a_leftover_temp_name_does_not_stop_a_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A crashed process with the same pid left a temp file under the next name."""
    store = LocalBlobStore(tmp_path)
    await store.put_record("t", "first", b"1")
    counter = iter(range(7, 100))
    monkeypatch.setattr(_local, "_TEMP_NAMES", counter)
    stale = tmp_path / "t" / "records" / f".tmp-{os.getpid()}-7"
    stale.write_bytes(b"left over")
    await store.put_record("t", "second", b"2")
    assert await store.get_record("t", "second") == b"2"
    assert stale.read_bytes() == b"left over"  # not ours to remove: the sweep drops the task


async def test_a_failed_write_removes_its_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = LocalBlobStore(tmp_path)
    await store.put_record("t", "first", b"1")

    def refuse(src: object, dst: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(_local.os, "replace", refuse)
    with pytest.raises(OSError, match="disk full"):
        await store.put_record("t", "second", b"2")
    assert files(tmp_path) == ["t/records/first"]
