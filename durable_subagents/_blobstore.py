"""Content-addressed blob store for transcripts and large tool outputs.

Blobs are grouped per task (``<root>/<task id>/<hash[:2]>/<hash>``) so that everything
a task wrote can be dropped once Temporal has dropped the task's closed runs.
A reference is ``sha256:<hex>``; the same bytes always give the same reference, so a
retried activity that writes again writes nothing new.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import re
import shutil
import tempfile
from collections import OrderedDict
from pathlib import Path
from typing import Protocol

from durable_subagents.errors import SubagentError

_REF = re.compile(r"^sha256:([0-9a-f]{64})$")
_SAFE_ID = re.compile(r"[^A-Za-z0-9._-]")


class BlobNotFound(SubagentError, LookupError):
    """A referenced blob is not in the store (wrong store configured, or expired)."""


class BlobCorrupt(SubagentError, ValueError):
    """A stored blob's bytes do not match its reference: the store was changed."""


class BlobStore(Protocol):
    """Where large transcript parts live. Workers and clients must share one."""

    def put(self, task_id: str, data: bytes) -> str:
        """Store ``data`` for ``task_id``; return its reference."""
        ...

    def get(self, task_id: str, ref: str) -> bytes:
        """Return the bytes a reference names. Raises ``BlobNotFound``."""
        ...

    def put_record(self, task_id: str, name: str, data: bytes) -> None:
        """Store ``data`` under a name of the task's (overwriting)."""
        ...

    def get_record(self, task_id: str, name: str) -> bytes | None:
        """The bytes stored under ``name``, or None."""
        ...


def blob_ref(data: bytes) -> str:
    """The reference ``data`` is stored under."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


class LocalBlobStore:
    """A blob store in a local (or shared network) directory."""

    def __init__(self, root: Path | str, cache_bytes: int = 64 * 1024 * 1024) -> None:
        self.root = Path(root)
        self._cache: OrderedDict[str, bytes] = OrderedDict()
        self._cache_size = 0
        self._cache_limit = cache_bytes

    def task_dir(self, task_id: str) -> Path:
        """The directory holding one task's blobs."""
        return self.root / _SAFE_ID.sub("_", task_id)

    def _path(self, task_id: str, ref: str) -> Path:
        m = _REF.match(ref)
        if not m:
            raise BlobNotFound(f"not a blob reference: {ref!r}")
        digest = m.group(1)
        return self.task_dir(task_id) / digest[:2] / digest

    def put(self, task_id: str, data: bytes) -> str:
        """Store ``data`` atomically (write to a temp file, then rename)."""
        ref = blob_ref(data)
        path = self._path(task_id, ref)
        if not path.exists():
            _write_atomically(path, data)
        self._remember(task_id, ref, data)
        return ref

    def get(self, task_id: str, ref: str) -> bytes:
        """Read a blob, from the in-process cache when possible (blobs never change)."""
        key = f"{task_id}/{ref}"
        cached = self._cache.get(key)
        if cached is not None:
            self._cache.move_to_end(key)
            return cached
        path = self._path(task_id, ref)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise BlobNotFound(
                f"blob {ref} of task {task_id} is not in {self.root}; the client and the "
                "worker must use the same blob store (SUBAGENTS_BLOB_DIR), and blobs of "
                "closed tasks are removed after the namespace retention"
            ) from None
        if blob_ref(data) != ref:
            raise BlobCorrupt(
                f"blob {ref} of task {task_id} in {self.root} does not match its hash: "
                "something changed the blob store; the task cannot trust it and stops"
            )
        self._remember(task_id, ref, data)
        return data

    def put_record(self, task_id: str, name: str, data: bytes) -> None:
        """Store a named record atomically (``records/<name>`` in the task's directory)."""
        _write_atomically(self._record_path(task_id, name), data)

    def get_record(self, task_id: str, name: str) -> bytes | None:
        """A named record, or None."""
        try:
            return self._record_path(task_id, name).read_bytes()
        except FileNotFoundError:
            return None

    def _record_path(self, task_id: str, name: str) -> Path:
        return self.task_dir(task_id) / "records" / _SAFE_ID.sub("_", name)

    def delete_task(self, task_id: str) -> None:
        """Remove every blob of a task."""
        shutil.rmtree(self.task_dir(task_id), ignore_errors=True)
        prefix = f"{task_id}/"
        for key in [k for k in self._cache if k.startswith(prefix)]:
            self._cache_size -= len(self._cache.pop(key))

    def task_ids(self) -> list[str]:
        """Directory names of the tasks that have blobs (ids with unsafe chars replaced)."""
        if not self.root.exists():
            return []
        return sorted(p.name for p in self.root.iterdir() if p.is_dir())

    def _remember(self, task_id: str, ref: str, data: bytes) -> None:
        if len(data) > self._cache_limit // 4:
            return
        key = f"{task_id}/{ref}"
        if key in self._cache:
            return
        self._cache[key] = data
        self._cache_size += len(data)
        while self._cache_size > self._cache_limit:
            _, old = self._cache.popitem(last=False)
            self._cache_size -= len(old)


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
