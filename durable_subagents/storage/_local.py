"""The blob store in a local (or shared network) directory."""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from durable_subagents.errors import (
    BlobStoreUnavailable,
)
from durable_subagents.storage._blobstore import CachedBlobStore, digest_of, safe_task_id
from durable_subagents.storage._sealing import KeyRing

__all__ = ["LocalBlobStore"]


class LocalBlobStore(CachedBlobStore):
    """A blob store in a local (or shared network) directory.

    Reads and writes are small local file operations, done inline; writes are atomic
    (a temp file, then a rename).
    """

    def __init__(
        self, root: Path | str, cache_bytes: int = 64 * 1024 * 1024, keys: KeyRing | None = None
    ) -> None:
        super().__init__(cache_bytes, keys)
        self.root = Path(root)
        self.url = self.root.resolve().as_uri() if self.root.is_absolute() else str(self.root)

    def task_dir(self, task_id: str) -> Path:
        """The directory holding one task's blobs."""
        return self.root / safe_task_id(task_id)

    def _blob_key(self, task_id: str, ref: str) -> str:
        digest = digest_of(ref)
        return str(self.task_dir(task_id) / digest[:2] / digest)

    async def _write_blob(self, key: str, data: bytes) -> None:
        _write_new(Path(key), data)

    async def _read_blob(self, key: str) -> bytes | None:
        try:
            return _read(Path(key))
        except FileNotFoundError:
            return None
        except OSError as err:
            raise BlobStoreUnavailable(
                f"cannot read {key} in the blob store {self.url}: {err}", store=self.url, key=key
            ) from err

    def _record_key(self, task_id: str, name: str) -> str:
        """Records live in ``records/<name>`` in the task's directory."""
        return str(self.task_dir(task_id) / "records" / safe_task_id(name))

    async def _write_record(self, key: str, data: bytes) -> None:
        _write_atomically(Path(key), data)

    async def delete_task(self, task_id: str) -> None:
        """Remove every blob of a task."""
        shutil.rmtree(self.task_dir(task_id), ignore_errors=True)
        self._cache.drop_task(task_id)

    async def task_ids(self) -> list[str]:
        """Directory names of the tasks that have blobs."""
        if not self.root.exists():
            return []
        return sorted(p.name for p in self.root.iterdir() if p.is_dir())

    async def last_write(self, task_id: str) -> datetime | None:
        """The newest modification time of the task's directory and its entries."""
        directory = self.task_dir(task_id)
        try:
            times = [directory.stat().st_mtime] + [p.stat().st_mtime for p in directory.iterdir()]
        except FileNotFoundError:
            return None
        return datetime.fromtimestamp(max(times), UTC)


def _write_new(path: Path, data: bytes) -> None:
    if not path.exists():  # content-addressed: what is there is these bytes
        _write_atomically(path, data)


def _read(path: Path) -> bytes:
    return path.read_bytes()


_TEMP_NAMES = itertools.count()


def _write_atomically(path: Path, data: bytes) -> None:
    """Write to a temp file beside ``path``, then rename: readers never see half a file.

    The directory is made only when the first write into it finds none (a worker writes
    a few files per turn; a ``mkdir`` and a random temp name each time showed in its
    profile).
    """
    tmp = path.parent / f".tmp-{os.getpid()}-{next(_TEMP_NAMES)}"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(tmp, flags, 0o600)
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(tmp, flags, 0o600)
    except FileExistsError:  # left by a crashed process that had the same pid
        fd, name = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        tmp = Path(name)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
