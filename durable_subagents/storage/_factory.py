"""The one way in to a blob store: a URL (or none) and the namespace, to a store.

The S3 store and its client library are imported only for an ``s3://`` URL.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote, urlparse

from durable_subagents.errors import InvalidRequest
from durable_subagents.storage._blobstore import BlobStore, safe_task_id
from durable_subagents.storage._local import LocalBlobStore
from durable_subagents.storage._sealing import KeyRing

__all__ = ["open_blob_store"]


def open_blob_store(
    url: str | None, directory: Path, namespace: str, *, keys: KeyRing | None = None
) -> BlobStore:
    """The namespace's blob store.

    Args:
        url: ``s3://BUCKET[/PREFIX]``, ``file:///PATH``, or None for ``directory``.
        directory: The local blob directory used when ``url`` is None.
        namespace: The Temporal namespace; its blobs live under ``<root>/<namespace>``.
        keys: Payload keys: blobs and records are sealed with the current one.

    Raises:
        InvalidRequest: ``url`` is not one of those forms.
    """
    if not url:
        return LocalBlobStore(directory / safe_task_id(namespace), keys=keys)
    parsed = urlparse(url)
    if parsed.scheme == "file":
        if parsed.netloc not in ("", "localhost") or not parsed.path:
            raise InvalidRequest(
                f"SUBAGENTS_BLOB_URL {url!r} is not a local path: write file:///ABSOLUTE/PATH"
            )
        return LocalBlobStore(Path(unquote(parsed.path)) / safe_task_id(namespace), keys=keys)
    if parsed.scheme == "s3":
        from durable_subagents.storage._s3 import S3BlobStore

        return S3BlobStore.from_url(url, namespace, keys=keys)
    raise InvalidRequest(
        f"SUBAGENTS_BLOB_URL {url!r} is not supported: use s3://BUCKET/PREFIX (with "
        "AWS_ENDPOINT_URL for MinIO, Ceph or R2) or file:///PATH"
    )
