"""Reading payloads and failures found in histories and descriptions.

Everything the workflow writes may be encrypted (``SUBAGENTS_PAYLOAD_KEY``), so a raw
payload is always read through the client's data converter, codec included, never with
the bare payload converter.
"""

from __future__ import annotations

from typing import Any

from temporalio.api.common.v1 import Payload
from temporalio.api.failure.v1 import Failure
from temporalio.converter import DataConverter

from durable_subagents.errors import PayloadEncryptionError


async def decoded(converter: DataConverter, payload: Payload, type_hint: type) -> Any:
    """One payload's value.

    Raises:
        PayloadKeyMissing: it is encrypted with a key this client lacks.
    """
    [value] = await converter.decode([payload], [type_hint])
    return value


async def failure_message(converter: DataConverter, failure: Failure) -> str:
    """A failure's message, decrypted when it is encrypted.

    A failure this client cannot decrypt is described by the key it needs, rather than
    by Temporal's placeholder ("Encoded failure").
    """
    copy = Failure()
    copy.CopyFrom(failure)  # decoding works in place
    try:
        error = await converter.decode_failure(copy)
    except PayloadEncryptionError as err:
        return f"(encrypted with key {err.key_id}, which this client does not hold)"
    return getattr(error, "message", None) or str(error) or failure.message
