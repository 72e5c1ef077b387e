"""Typed errors. Every message says what was wrong and what to do about it."""

from __future__ import annotations

__all__ = [
    "NON_RETRYABLE_ERROR_TYPES",
    "BlobCorrupt",
    "BlobError",
    "BlobNotFound",
    "BlobStoreUnavailable",
    "InvalidRequest",
    "ModelNotAllowed",
    "PayloadCorrupt",
    "PayloadEncryptionError",
    "PayloadKeyMissing",
    "PayloadTooLarge",
    "SearchAttributesMissing",
    "SubagentError",
    "TaskNotFound",
    "TemporalAccessDenied",
    "TemporalConfigError",
    "TemporalUnavailable",
    "UnknownCallId",
    "WrongTaskState",
]


class SubagentError(Exception):
    """Base class of every error this library raises on purpose."""


class InvalidRequest(SubagentError, ValueError):
    """The caller asked for something that cannot be done (unknown agent, empty prompt...)."""


class TaskNotFound(SubagentError, LookupError):
    """No task has this id in the namespace."""


class TemporalUnavailable(SubagentError, ConnectionError):
    """The Temporal server could not be reached.

    The message says why in plain words (connection refused, no such host, timed
    out); ``detail`` keeps the transport's own error text, if there was one.
    """

    def __init__(self, message: str, detail: str | None = None) -> None:
        super().__init__(message)
        self.detail = detail


class TemporalConfigError(InvalidRequest):
    """The Temporal connection settings cannot be used.

    A profile that does not exist, a configuration file that does not parse, a
    certificate or key file that cannot be read. The message names the setting
    (environment variable or profile key).
    """


class TemporalAccessDenied(TemporalUnavailable):
    """The Temporal server answered but refused this client.

    A TLS handshake it did not accept (no client certificate, or one it does not know; a
    server certificate this client does not trust) or credentials it rejected (an API
    key). The message names the setting.
    """


class WrongTaskState(InvalidRequest):
    """The task's state does not allow this request; ``status`` is the state it is in.

    For example a decision while the task is not paused, or input to a cancelled task.
    """

    def __init__(self, message: str, status: str) -> None:
        super().__init__(message)
        self.status = status


class UnknownCallId(InvalidRequest):
    """A decision names a call that is not pending in the task's current pause."""


class ModelNotAllowed(InvalidRequest):
    """A spawn asks for a model the workers do not run.

    Not among ``SUBAGENTS_MODELS``, or the scripted model where it is not enabled; the
    message says what they allow.
    """


class SearchAttributesMissing(SubagentError):
    """The namespace lacks the custom search attributes the workflow writes."""


class PayloadTooLarge(InvalidRequest):
    """A workflow or activity payload would exceed the configured size limit."""


class BlobError(SubagentError):
    """A blob could not be read or written; ``store`` and ``key`` say where."""

    def __init__(self, message: str, *, store: str = "", key: str = "") -> None:
        super().__init__(message)
        self.store = store
        self.key = key


class BlobNotFound(BlobError, LookupError):
    """A referenced blob is not in the store (wrong store configured, or expired)."""


class BlobCorrupt(BlobError, ValueError):
    """A stored blob's bytes do not match its reference: the store was changed."""


class BlobStoreUnavailable(BlobError, ConnectionError):
    """The store did not answer (after its own retries) or refused the request."""


class PayloadEncryptionError(SubagentError):
    """Encrypted data could not be opened; ``key_id`` names the key it was written with."""

    def __init__(self, message: str, *, key_id: str) -> None:
        super().__init__(message)
        self.key_id = key_id


class PayloadKeyMissing(PayloadEncryptionError, LookupError):
    """Data is encrypted with a key this process does not hold.

    The keys are ``SUBAGENTS_PAYLOAD_KEY`` and ``SUBAGENTS_PAYLOAD_OLD_KEYS``. A worker
    lacking the key fails the task's step and Temporal retries it until a worker with the
    key takes it: nothing is lost.
    """


class PayloadCorrupt(PayloadEncryptionError, ValueError):
    """Encrypted data does not open under the key it names: it was changed after writing."""


NON_RETRYABLE_ERROR_TYPES = [
    "InvalidRequest",
    "PayloadCorrupt",
    "PayloadEncryptionError",
    "PayloadKeyMissing",
    "PayloadTooLarge",
    "ModelRequestError",
    "ModelNotAllowed",
    "WorkspaceError",
    "TaskCancelled",
    "BlobCorrupt",
]
"""``ApplicationError`` types that Temporal must not retry: retrying cannot help."""
