"""Encrypted payloads: everything the project writes to Temporal, under the payload key.

Workflow and activity inputs and results, signals, queries, memo, Web UI summaries and
details, failure messages: every client and worker encrypts them through
``EncryptionCodec`` with the keys of ``storage.KeyRing`` (the formats are described
there), so Temporal's database holds only ciphertext.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from temporalio.api.common.v1 import Payload
from temporalio.api.failure.v1 import Failure
from temporalio.contrib.pydantic import (
    PydanticJSONPlainPayloadConverter,
    PydanticPayloadConverter,
)
from temporalio.converter import (
    CompositePayloadConverter,
    DataConverter,
    DefaultFailureConverter,
    DefaultPayloadConverter,
    JSONPlainPayloadConverter,
    PayloadCodec,
    PayloadConverter,
)
from temporalio.exceptions import ApplicationError

from durable_subagents.errors import PayloadEncryptionError
from durable_subagents.storage._sealing import KeyRing, missing_key

__all__ = [
    "ENCODING",
    "KEY_ID_METADATA",
    "EncryptionCodec",
    "SharedPydanticPayloadConverter",
    "data_converter",
]

ENCODING = b"binary/encrypted"
"""The ``encoding`` metadata of an encrypted payload."""
KEY_ID_METADATA = "encryption-key-id"
"""The metadata naming the key a payload is encrypted with."""


class EncryptionCodec(PayloadCodec):
    """Encrypts every payload under the current key; decrypts by the key id it names.

    Without keys it encrypts nothing and fails loudly on an encrypted payload, naming
    the key it needs (rather than a converter's "unknown encoding").
    """

    def __init__(self, keys: KeyRing | None) -> None:
        self.keys = keys

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return self.encode_sync(payloads)

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return self.decode_sync(payloads)

    def encode_sync(self, payloads: Sequence[Payload]) -> list[Payload]:
        """``encode`` without the event loop (the codec server's threads use it)."""
        keys = self.keys
        if keys is None:
            return list(payloads)
        kid = keys.current_id.encode()
        return [
            p
            if p.metadata.get("encoding") == ENCODING
            else Payload(
                metadata={"encoding": ENCODING, KEY_ID_METADATA: kid},
                data=keys.encrypt(p.SerializeToString()),
            )
            for p in payloads
        ]

    def decode_sync(self, payloads: Sequence[Payload]) -> list[Payload]:
        """``decode`` without the event loop."""
        out = []
        for p in payloads:
            if p.metadata.get("encoding") != ENCODING:
                out.append(p)  # written without a key (before encryption was turned on)
                continue
            kid = p.metadata.get(KEY_ID_METADATA, b"").decode(errors="replace")
            if self.keys is None:
                raise missing_key(kid, [])
            plain = Payload()
            plain.ParseFromString(self.keys.decrypt(kid, p.data))
            out.append(plain)
        return out


class EncryptedFailureConverter(DefaultFailureConverter):
    """Failure messages and stack traces go into the encrypted attributes.

    Except a key error's: a worker that cannot decrypt a task reports which key it
    needs in plain text, so whoever holds a different key can still read why.
    """

    def __init__(self) -> None:
        super().__init__(encode_common_attributes=True)
        self._plain = DefaultFailureConverter()

    def to_failure(
        self, exception: BaseException, payload_converter: PayloadConverter, failure: Failure
    ) -> None:
        if _is_key_error(exception):
            self._plain.to_failure(exception, payload_converter, failure)
        else:
            super().to_failure(exception, payload_converter, failure)


KEY_ERROR_TYPES = ("PayloadKeyMissing", "PayloadCorrupt")
"""Failure types whose message is written in plain text: it names a key, never content."""


def _is_key_error(exception: BaseException) -> bool:
    """A key error itself, or an activity's failure made of one (``_blob_failure``)."""
    if isinstance(exception, PayloadEncryptionError):
        return True
    return isinstance(exception, ApplicationError) and exception.type in KEY_ERROR_TYPES


_PYDANTIC_JSON = PydanticJSONPlainPayloadConverter()
"""The one JSON converter of the process, and so its one cache of pydantic type adapters."""


class SharedPydanticPayloadConverter(PydanticPayloadConverter):
    """``PydanticPayloadConverter`` whose type adapters are built once per process.

    Temporal builds a payload converter for every workflow run a worker holds, and each
    ``PydanticPayloadConverter`` keeps a cache of its own: every run built its own type
    adapters for the workflow's inputs, results and signals, and every cached task kept
    them (about 3.5 KB and a few hundred microseconds of CPU a run, measured for four
    types). The adapters are immutable, so every run shares one cache.
    """

    def __init__(self) -> None:
        # PydanticPayloadConverter's own __init__ would build a JSON converter (and a
        # cache) for this instance: the composite is built here as it builds it.
        CompositePayloadConverter.__init__(
            self,
            *(
                _PYDANTIC_JSON if isinstance(c, JSONPlainPayloadConverter) else c
                for c in DefaultPayloadConverter.default_encoding_payload_converters
            ),
        )


def data_converter(keys: KeyRing | None) -> DataConverter:
    """The project's data converter: pydantic payloads, encrypted when ``keys`` are given.

    Every client and worker of a deployment must use one built from the same keys.
    Without keys, payloads are plain, and an encrypted one is refused with an error
    naming its key.
    """
    kwargs: dict[str, Any] = {}
    if keys is not None:
        kwargs["failure_converter_class"] = EncryptedFailureConverter
    return DataConverter(
        payload_converter_class=SharedPydanticPayloadConverter,
        payload_codec=EncryptionCodec(keys),
        **kwargs,
    )
