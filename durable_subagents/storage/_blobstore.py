"""Content-addressed blob store for transcripts and large tool outputs.

Blobs are grouped per task so that everything a task wrote can be dropped once
Temporal has dropped the task's closed runs. A reference is ``sha256:<hex>``, or, with a
payload key set, ``hmac:<hex>`` (a keyed digest, so the address tells nothing about the
content to whoever can list the bucket). The same bytes always give the same reference,
so a retried activity that writes again writes nothing new, and every read is checked
against its reference. With a payload key, blobs and records are sealed (AES-256-GCM,
bound to their address; see ``_codec``).

Two stores: ``LocalBlobStore`` (a directory, ``<root>/<task id>/<hash>``)
and ``S3BlobStore`` (any S3-compatible service, ``<prefix>/<task id>/sha256/<hash>``).
``open_blob_store`` picks one from ``SUBAGENTS_BLOB_URL``.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections import OrderedDict
from datetime import UTC, datetime
from typing import Protocol

from durable_subagents.errors import (
    BlobCorrupt,
    BlobError,
    BlobNotFound,
    BlobStoreUnavailable,
    PayloadCorrupt,
)
from durable_subagents.storage._sealing import KeyRing, is_sealed, missing_key, sealed_key_id

__all__ = [
    "BlobCorrupt",
    "BlobError",
    "BlobNotFound",
    "BlobStore",
    "BlobStoreUnavailable",
    "blob_ref",
    "check_blob_store",
]

_REF = re.compile(r"^(sha256|hmac):([0-9a-f]{64})$")
_SAFE_ID = re.compile(r"[^A-Za-z0-9._-]")


class BlobStore(Protocol):
    """Where large transcript parts live. Workers and clients must use the same one.

    ``url`` names the store in messages (``file:///...`` or ``s3://bucket/prefix``).
    """

    url: str

    async def put(self, task_id: str, data: bytes) -> str:
        """Store ``data`` for ``task_id``; return its reference."""
        ...

    async def get(self, task_id: str, ref: str) -> bytes:
        """The bytes a reference names, checked against it.

        Raises:
            BlobNotFound, BlobCorrupt, BlobStoreUnavailable.
        """
        ...

    async def put_record(self, task_id: str, name: str, data: bytes) -> None:
        """Store ``data`` under a name of the task's (overwriting)."""
        ...

    async def get_record(self, task_id: str, name: str) -> bytes | None:
        """The bytes stored under ``name``, or None."""
        ...

    async def task_ids(self) -> list[str]:
        """The (store-safe) ids of the tasks that have blobs."""
        ...

    async def last_write(self, task_id: str) -> datetime | None:
        """When anything of the task's was last written; None if nothing is stored."""
        ...

    async def delete_task(self, task_id: str) -> None:
        """Remove everything the task stored."""
        ...


def blob_ref(data: bytes) -> str:
    """The reference ``data`` is stored under."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def safe_task_id(task_id: str) -> str:
    """A task id as a directory name or key segment (unsafe characters become ``_``)."""
    return _SAFE_ID.sub("_", task_id)


def split_ref(ref: str) -> tuple[str, str]:
    """``(scheme, hex digest)`` of a reference: ``sha256`` or ``hmac``.

    Raises:
        BlobNotFound: ``ref`` is not a blob reference.
    """
    m = _REF.match(ref)
    if not m:
        raise BlobNotFound(f"not a blob reference: {ref!r}")
    return m.group(1), m.group(2)


def digest_of(ref: str) -> str:
    """The hex digest a reference names.

    Raises:
        BlobNotFound: ``ref`` is not a blob reference.
    """
    return split_ref(ref)[1]


PROBE_TASK = "_probe"
"""Where ``check_blob_store`` writes (the sweep removes it like an unknown task's)."""


async def check_blob_store(store: BlobStore, name: str = "probe") -> None:
    """Write a small record and read it back: a worker checks its store at start.

    Args:
        store: The store.
        name: The record's name; one per process that probes again and again (its
            readiness), so that two workers probing at once never read each other's.

    Raises:
        BlobStoreUnavailable: the store cannot be written or read (the message names it
            and says what to check: the bucket, the credentials, the endpoint).
    """
    data = f"probe {os.getpid()} {datetime.now(UTC).isoformat()}".encode()
    await store.put_record(PROBE_TASK, name, data)
    back = await store.get_record(PROBE_TASK, name)
    if back != data:
        raise BlobStoreUnavailable(
            f"the blob store {store.url} did not give back what was just written to it; "
            "check that the bucket or directory is not shared with something else",
            store=store.url,
            key=f"{PROBE_TASK}/records/{name}",
        )


class BlobCache:
    """Blobs read or written lately, by task and reference (blobs never change)."""

    def __init__(self, limit: int) -> None:
        self._cache: OrderedDict[str, bytes] = OrderedDict()
        self._size = 0
        self._limit = limit

    def get(self, task_id: str, ref: str) -> bytes | None:
        key = f"{task_id}/{ref}"
        data = self._cache.get(key)
        if data is not None:
            self._cache.move_to_end(key)
        return data

    def add(self, task_id: str, ref: str, data: bytes) -> None:
        if len(data) > self._limit // 4:
            return
        key = f"{task_id}/{ref}"
        if key in self._cache:
            return
        self._cache[key] = data
        self._size += len(data)
        while self._size > self._limit:
            _, old = self._cache.popitem(last=False)
            self._size -= len(old)

    def drop_task(self, task_id: str) -> None:
        prefix = f"{task_id}/"
        for key in [k for k in self._cache if k.startswith(prefix)]:
            self._size -= len(self._cache.pop(key))


def corrupt(store: str, key: str, task_id: str, ref: str) -> BlobCorrupt:
    """The error for a blob whose bytes do not match its reference."""
    return BlobCorrupt(
        f"blob {ref} of task {task_id} at {key} in {store} does not match its hash: "
        "something changed the blob store; the task cannot trust it and stops",
        store=store,
        key=key,
    )


def missing(store: str, key: str, task_id: str, ref: str) -> BlobNotFound:
    """The error for a blob the store does not have."""
    return BlobNotFound(
        f"blob {ref} of task {task_id} is not in the blob store {store} (key {key}). "
        "Every worker and client of a deployment must use the same store "
        "(SUBAGENTS_BLOB_URL, e.g. s3://BUCKET/PREFIX, or one shared SUBAGENTS_BLOB_DIR); "
        "blobs of closed tasks are removed after the namespace retention",
        store=store,
        key=key,
    )


class CachedBlobStore:
    """What every store shares: blobs kept in memory, every read checked, and sealing.

    Blobs never change, so one read or written lately is served from memory.
    A store says where a blob or record lives (``_blob_key``, ``_record_key``) and how
    to write and read bytes there (``_write_blob``, ``_read_blob``); ``_shown`` is how a
    key appears in messages. With ``keys``, what is written is sealed under the current
    key and what is read is opened by the key it names.
    """

    url: str

    def __init__(self, cache_bytes: int, keys: KeyRing | None = None) -> None:
        self._cache = BlobCache(cache_bytes)
        self.keys = keys

    def _blob_key(self, task_id: str, ref: str) -> str:
        raise NotImplementedError

    def _record_key(self, task_id: str, name: str) -> str:
        raise NotImplementedError

    async def _write_blob(self, key: str, data: bytes) -> None:
        raise NotImplementedError

    async def _write_record(self, key: str, data: bytes) -> None:
        """Write a record (which, unlike a blob, may be overwritten)."""
        await self._write_blob(key, data)

    async def _read_blob(self, key: str) -> bytes | None:
        """The bytes at ``key``, or None if there are none."""
        raise NotImplementedError

    async def _read_record(self, key: str) -> bytes | None:
        """The record at ``key``, or None (read as a blob unless a store differs)."""
        return await self._read_blob(key)

    def _shown(self, key: str) -> str:
        return key

    async def put(self, task_id: str, data: bytes) -> str:
        """Store ``data``; return its reference (writing nothing it wrote lately)."""
        keys = self.keys
        ref = blob_ref(data) if keys is None else "hmac:" + keys.mac(data)
        if self._cache.get(task_id, ref) is None:
            stored = data if keys is None else keys.seal(data, b"blob:" + ref.encode())
            await self._write_blob(self._blob_key(task_id, ref), stored)
            self._cache.add(task_id, ref, data)
        return ref

    async def get(self, task_id: str, ref: str) -> bytes:
        """The bytes ``ref`` names, from memory when read or written lately.

        Raises:
            BlobNotFound, BlobCorrupt, BlobStoreUnavailable (naming the store and key).
            PayloadKeyMissing: the blob is sealed with a key this process lacks.
        """
        cached = self._cache.get(task_id, ref)
        if cached is not None:
            return cached
        key = self._blob_key(task_id, ref)
        stored = await self._read_blob(key)
        if stored is None:
            raise missing(self.url, self._shown(key), task_id, ref)
        scheme, digest = split_ref(ref)
        what = f"blob {ref} of task {task_id} ({self._shown(key)} in {self.url})"
        if is_sealed(stored):
            kid, data = self._open(stored, b"blob:" + ref.encode(), what, key)
        else:
            kid, data = None, stored
        if scheme == "sha256":
            good = hashlib.sha256(data).hexdigest() == digest
        else:  # a keyed address: only sealed bytes may be there
            good = kid is not None and self.keys is not None and self.keys.mac(data, kid) == digest
        if not good:
            raise corrupt(self.url, self._shown(key), task_id, ref)
        self._cache.add(task_id, ref, data)
        return data

    async def put_record(self, task_id: str, name: str, data: bytes) -> None:
        """Store ``data`` under a name of the task's (overwriting)."""
        key = self._record_key(task_id, name)
        if self.keys is not None:
            data = self.keys.seal(data, b"record:" + key.encode())
        await self._write_record(key, data)

    async def get_record(self, task_id: str, name: str) -> bytes | None:
        """The bytes stored under ``name``, or None.

        A plain record is read as it is, also with keys set: it was written before
        encryption was turned on.

        Raises:
            BlobCorrupt: a sealed record does not open (changed, or moved from elsewhere).
            PayloadKeyMissing: it is sealed with a key this process lacks.
        """
        key = self._record_key(task_id, name)
        stored = await self._read_record(key)
        if stored is None or not is_sealed(stored):
            return stored
        what = f"record {name} of task {task_id} ({self._shown(key)} in {self.url})"
        return self._open(stored, b"record:" + key.encode(), what, key)[1]

    def _open(self, stored: bytes, aad: bytes, what: str, key: str) -> tuple[str, bytes]:
        if self.keys is None:
            raise missing_key(sealed_key_id(stored), [], what)
        try:
            return self.keys.open(stored, aad, what)
        except PayloadCorrupt as err:
            raise BlobCorrupt(
                f"{err}; the task cannot trust it and stops", store=self.url, key=self._shown(key)
            ) from None
