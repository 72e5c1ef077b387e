"""Where a task's bytes live: blob stores (local and S3), the transcript chain, sealing.

``open_blob_store`` is the one way to a store; the S3 store is loaded only for an
``s3://`` URL.
"""

from durable_subagents.storage._blobstore import BlobStore, blob_ref, check_blob_store
from durable_subagents.storage._factory import open_blob_store
from durable_subagents.storage._local import LocalBlobStore
from durable_subagents.storage._sealing import KeyRing, key_id, new_key
from durable_subagents.storage._transcript import Transcript

__all__ = [
    "BlobStore",
    "KeyRing",
    "LocalBlobStore",
    "Transcript",
    "blob_ref",
    "check_blob_store",
    "key_id",
    "new_key",
    "open_blob_store",
]
