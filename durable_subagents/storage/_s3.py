"""The blob store on S3 or any S3-compatible service (MinIO, Ceph, R2).

Keys: ``<prefix>/<namespace>/<task id>/sha256/<hash>`` (``.../hmac/<hash>`` with a
payload key) for blobs and
``<prefix>/<namespace>/<task id>/records/<name>`` for records, so one task's objects
share a key prefix (the sweep lists and deletes them together) and tasks spread over
S3's per-prefix request limits.

Configured by the standard variables the AWS tools read: ``AWS_ENDPOINT_URL``,
``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``AWS_REGION``
(obstore reads them; an ``http://`` endpoint is allowed as such). Requests that fail
with a 5xx, a timeout or a dropped connection are retried with exponential backoff and
jitter, for at most ``RETRY_TIMEOUT`` per request.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

import obstore
from obstore.store import S3Store

from durable_subagents.errors import InvalidRequest
from durable_subagents.storage._blobstore import (
    BlobStoreUnavailable,
    CachedBlobStore,
    safe_task_id,
    split_ref,
)
from durable_subagents.storage._sealing import KeyRing

if TYPE_CHECKING:
    from obstore.store import ClientConfig, RetryConfig

RETRIES = 4
"""Retries of one request (5xx, timeouts, dropped connections) before it fails."""
RETRY_TIMEOUT = timedelta(seconds=30)
"""Longest time one request may spend retrying."""
REQUEST_TIMEOUT = timedelta(seconds=60)
"""Longest time one request attempt may take."""
CONNECT_TIMEOUT = timedelta(seconds=5)


class S3BlobStore(CachedBlobStore):
    """Blobs as objects of one bucket, under a prefix per namespace.

    Args:
        bucket: The bucket; it must exist (the store never creates buckets).
        prefix: Key prefix of the namespace (``<url prefix>/<namespace>``).
        endpoint: An S3-compatible endpoint (default: ``AWS_ENDPOINT_URL``, else AWS).
        cache_bytes: Blobs read or written lately that are kept in memory.
        config: More obstore ``S3Config`` keys (credentials, region...).
        keys: Payload keys: blobs and records are sealed with the current one.
    """

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint: str | None = None,
        cache_bytes: int = 64 * 1024 * 1024,
        config: dict[str, Any] | None = None,
        keys: KeyRing | None = None,
    ) -> None:
        super().__init__(cache_bytes, keys)
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.endpoint = endpoint or os.environ.get("AWS_ENDPOINT_URL") or None
        self.url = f"s3://{bucket}/{self.prefix}" if self.prefix else f"s3://{bucket}"
        if self.endpoint:
            self.url += f" at {self.endpoint}"
        options: dict[str, Any] = dict(config or {})
        if endpoint:
            options["endpoint"] = endpoint
        client: ClientConfig = {"timeout": REQUEST_TIMEOUT, "connect_timeout": CONNECT_TIMEOUT}
        if (self.endpoint or "").startswith("http://"):
            client["allow_http"] = True
        retry: RetryConfig = {
            "max_retries": RETRIES,
            "retry_timeout": RETRY_TIMEOUT,
            "backoff": {
                "init_backoff": timedelta(milliseconds=100),
                "max_backoff": timedelta(seconds=5),
                "base": 2,
            },
        }
        try:
            self._store = S3Store(
                bucket,
                prefix=self.prefix or None,
                client_options=client,
                retry_config=retry,
                **options,
            )
        except Exception as err:
            raise InvalidRequest(
                f"cannot use the blob store {self.url}: {_first_line(err)}; check "
                "AWS_ENDPOINT_URL, AWS_REGION and the credentials variables"
            ) from err

    @classmethod
    def from_url(cls, url: str, namespace: str, **kwargs: Any) -> S3BlobStore:
        """The store of ``namespace`` under ``s3://BUCKET[/PREFIX]``.

        Raises:
            InvalidRequest: the URL names no bucket.
        """
        parsed = urlparse(url)
        if not parsed.netloc or parsed.query or parsed.fragment:
            raise InvalidRequest(
                f"SUBAGENTS_BLOB_URL {url!r} names no bucket: write s3://BUCKET or "
                "s3://BUCKET/PREFIX"
            )
        parts = [p for p in parsed.path.split("/") if p]
        prefix = "/".join([*parts, safe_task_id(namespace)])
        return cls(parsed.netloc, prefix, **kwargs)

    def _blob_key(self, task_id: str, ref: str) -> str:
        """The object key (below the prefix) a task's blob is stored under."""
        scheme, digest = split_ref(ref)
        return f"{safe_task_id(task_id)}/{scheme}/{digest}"

    def _record_key(self, task_id: str, name: str) -> str:
        return f"{safe_task_id(task_id)}/records/{safe_task_id(name)}"

    def _shown(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    async def task_ids(self) -> list[str]:
        """The task key segments under the prefix."""
        try:
            listing = await obstore.list_with_delimiter_async(self._store)
        except Exception as err:
            raise self._unavailable("list", "", err) from err
        return sorted(p.rstrip("/").rsplit("/", 1)[-1] for p in listing["common_prefixes"])

    async def last_write(self, task_id: str) -> datetime | None:
        """The newest object's last-modified time, or None."""
        objects = await self._objects(task_id)
        return max((o["last_modified"] for o in objects), default=None)

    async def delete_task(self, task_id: str) -> None:
        """Delete every object of the task (batched deletes)."""
        paths = [o["path"] for o in await self._objects(task_id)]
        if paths:
            try:
                await obstore.delete_async(self._store, paths)
            except FileNotFoundError:
                pass
            except Exception as err:
                raise self._unavailable("delete", safe_task_id(task_id) + "/", err) from err
        self._cache.drop_task(task_id)

    async def _objects(self, task_id: str) -> list[Any]:
        prefix = safe_task_id(task_id) + "/"
        try:
            return list(await obstore.list(self._store, prefix=prefix).collect_async())
        except Exception as err:
            raise self._unavailable("list", prefix, err) from err

    async def _write_blob(self, key: str, data: bytes) -> None:
        try:
            await obstore.put_async(self._store, key, data)
        except Exception as err:
            raise self._unavailable("write", key, err) from err

    async def _read_blob(self, key: str) -> bytes | None:
        try:
            result = await obstore.get_async(self._store, key)
            return bytes(await result.bytes_async())
        except FileNotFoundError:
            return None
        except Exception as err:
            raise self._unavailable("read", key, err) from err

    def _unavailable(self, action: str, key: str, err: Exception) -> BlobStoreUnavailable:
        detail = _first_line(err)
        hint = "check that it is reachable and the credentials (AWS_ACCESS_KEY_ID...)"
        if "NoSuchBucket" in str(err):
            hint = f"bucket {self.bucket!r} does not exist: create it"
        elif "403" in detail or "AccessDenied" in str(err):
            hint = "access denied: check the credentials and the bucket policy"
        return BlobStoreUnavailable(
            f"cannot {action} {self._shown(key)} in the blob store {self.url}: {detail}; {hint}",
            store=self.url,
            key=self._shown(key),
        )


def _first_line(err: Exception) -> str:
    text = str(err).strip().splitlines()
    line = text[0] if text else type(err).__name__
    return line if len(line) <= 300 else line[:300] + "..."
