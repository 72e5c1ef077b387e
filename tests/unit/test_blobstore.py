"""The local blob store's writes: atomic, private, and no litter."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

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
    assert files(tmp_path / "blobs") == [f"task_1/{digest[:2]}/{digest}", "task_1/records/call-a"]
    for path in (tmp_path / "blobs").rglob("*"):
        if path.is_file():
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, path


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
