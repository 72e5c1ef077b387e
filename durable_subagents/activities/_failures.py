"""How an activity's failures reach the workflow: typed, and retried only when it helps.

A spawner's mistake (a workspace outside the root) fails the task at once; a blob that
cannot be read fails it when retrying cannot help, and is retried like any outage when
it can.
"""

from __future__ import annotations

import logging

from temporalio import activity
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from durable_subagents.errors import (
    BlobCorrupt,
    BlobError,
    BlobNotFound,
    PayloadCorrupt,
    PayloadEncryptionError,
)

__all__ = [
    "MISSING_BLOB_ATTEMPTS",
    "blob_failure",
    "configuration_error",
    "log_configuration_error",
    "workspace_error",
]

log = logging.getLogger("durable_subagents.activities._activities")


def workspace_error(message: str) -> ApplicationError:
    """A spawner's mistake, not the worker's: one log line, and the task fails with it."""
    info = activity.info()
    log.warning("task %s: %s", info.workflow_id, message)
    return ApplicationError(
        message,
        type="WorkspaceError",
        non_retryable=True,
        category=ApplicationErrorCategory.BENIGN,  # no traceback: it says it all
    )


def log_configuration_error(message: str) -> None:
    """One warning for a task that fails on what an operator or spawner must set.

    A missing or refused API key, an unknown model: the message names the setting, so
    the activity's error is ``BENIGN`` (the SDK logs no traceback) and this line, with
    the task's id, is all the worker prints for it.
    """
    info = activity.info()
    log.warning("task %s: %s", info.workflow_id, message)


def configuration_error(message: str, error_type: str) -> ApplicationError:
    """``message`` logged once, as the non-retryable, ``BENIGN`` failure of the task."""
    log_configuration_error(message)
    return ApplicationError(
        message, type=error_type, non_retryable=True, category=ApplicationErrorCategory.BENIGN
    )


MISSING_BLOB_ATTEMPTS = 3
"""Attempts of an activity that finds a blob missing before the task fails (a shared
network filesystem may show a new file late; S3 never does)."""


def blob_failure(err: BlobError | PayloadEncryptionError) -> ApplicationError:
    """The activity's failure for a blob that cannot be read or written.

    A corrupt blob fails the task at once; a missing one after ``MISSING_BLOB_ATTEMPTS``
    attempts; an unreachable store is retried like any outage (the message, naming the
    store and the key, is the activity's last failure meanwhile), and so is a blob sealed
    with a key this worker lacks (another worker may hold it; the message names it).
    """
    attempt = activity.info().attempt
    if isinstance(err, PayloadEncryptionError):
        log.warning("task %s, attempt %d: %s", activity.info().workflow_id, attempt, err)
        return ApplicationError(
            str(err),
            {"key_id": err.key_id},
            type=type(err).__name__,
            non_retryable=isinstance(err, PayloadCorrupt),
            category=ApplicationErrorCategory.BENIGN,
        )
    if isinstance(err, BlobCorrupt):
        kind, final = "BlobCorrupt", True
    elif isinstance(err, BlobNotFound):
        kind, final = "BlobNotFound", attempt >= MISSING_BLOB_ATTEMPTS
    else:
        kind, final = "BlobStoreUnavailable", False
    log.warning("task %s, attempt %d: %s", activity.info().workflow_id, attempt, err)
    return ApplicationError(
        str(err),
        {"store": err.store, "key": err.key},
        type=kind,
        non_retryable=final,
        category=ApplicationErrorCategory.BENIGN,  # the message says it all
    )
