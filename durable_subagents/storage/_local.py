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
        """Blobs lie flat in the task's directory: ``<task dir>/<hash>``.

        0.1.0 spread them over ``<hash[:2]>`` subdirectories, which made a directory for
        nearly every blob (a task has tens of blobs, not millions); reads still find them
        there (``_read_blob``).
        """
        return str(self.task_dir(task_id) / digest_of(ref))

    async def _write_blob(self, key: str, data: bytes) -> None:
        # Not looked for first: ``put`` writes nothing it wrote lately (its cache), and a
        # blob that is there already holds these bytes, which the rename puts back.
        _write_atomically(Path(key), data)

    async def _read_blob(self, key: str) -> bytes | None:
        data = await self._read_record(key)
        if data is None:  # written by 0.1.0, in a subdirectory per hash prefix
            path = Path(key)
            data = await self._read_record(str(path.parent / path.name[:2] / path.name))
        return data

    async def _read_record(self, key: str) -> bytes | None:
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
        """The newest modification time of the task's directory and its subdirectories.

        A new blob or record is a new name in one of them (a rename included), which
        moves that directory's time: the blobs themselves need no ``stat``.
        """
        directory = self.task_dir(task_id)
        try:
            with os.scandir(directory) as entries:
                times = [directory.stat().st_mtime] + [
                    e.stat().st_mtime for e in entries if e.is_dir(follow_symlinks=False)
                ]
        except FileNotFoundError:
            return None
        return datetime.fromtimestamp(max(times), UTC)


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
