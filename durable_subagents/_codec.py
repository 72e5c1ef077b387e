"""Encrypted payloads and blobs: AES-256-GCM under ``SUBAGENTS_PAYLOAD_KEY``.

One key (32 random bytes, base64) is set on every worker and client of a deployment.
Everything the project writes to Temporal (workflow and activity inputs and results,
signals, queries, memo, Web UI summaries and details, failure messages) goes through
``EncryptionCodec``, and everything it writes to the blob store is sealed with the same
key, so Temporal's database and the bucket hold only ciphertext. Search attributes stay
plain: visibility needs them (see the README's "What stays visible").

Formats (stable; other tools can decrypt them):

* A payload: metadata ``encoding: binary/encrypted`` and ``encryption-key-id: <id>``;
  data ``nonce (12 bytes) || AES-GCM(key, nonce, the whole original Payload message)``,
  no associated data. This is the layout of Temporal's encryption samples, so their
  codec servers read it with the same key.
* A blob or record: ``DSE1 || key id (8 bytes) || nonce (12) || AES-GCM(...)``, with the
  object's own address as associated data (``blob:<ref>``, ``record:<task>/<name>``), so
  a sealed object moved to another address does not open.

A key's id is the first 8 bytes of SHA-256 over a label and the key, in hex. It names
the key in messages and metadata and reveals nothing of it. ``SUBAGENTS_PAYLOAD_OLD_KEYS``
keeps older keys for reading while new data is written under the current one, so a key
is rotated with tasks running.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

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

from durable_subagents.errors import (
    InvalidRequest,
    PayloadCorrupt,
    PayloadEncryptionError,
    PayloadKeyMissing,
)

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

__all__ = [
    "ENCODING",
    "KEY_ID_METADATA",
    "EncryptionCodec",
    "KeyRing",
    "SharedPydanticPayloadConverter",
    "data_converter",
    "new_key",
]

ENCODING = b"binary/encrypted"
"""The ``encoding`` metadata of an encrypted payload."""
KEY_ID_METADATA = "encryption-key-id"
"""The metadata naming the key a payload is encrypted with."""
_SEALED = b"DSE1"
"""The first bytes of a sealed blob or record."""
_NONCE = 12
_KEY_ID_BYTES = 8


def new_key() -> str:
    """A new random key, as ``SUBAGENTS_PAYLOAD_KEY`` takes it (base64 of 32 bytes)."""
    return base64.b64encode(os.urandom(32)).decode()


def key_id(key: bytes) -> str:
    """The id a key is named by (16 hex digits; reveals nothing of the key)."""
    return hashlib.sha256(b"durable-subagents key id\0" + key).hexdigest()[: 2 * _KEY_ID_BYTES]


def _parse_key(text: str, where: str) -> bytes:
    try:
        key = base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError):
        key = b""
    if len(key) != 32:
        raise InvalidRequest(
            f"{where} is not a key: give the base64 of 32 random bytes "
            "(make one with `subagents keygen`)"
        )
    return key


class KeyRing:
    """The current key, which encrypts, and older ones kept for decrypting.

    Args:
        current: The key new payloads and blobs are encrypted with (32 bytes).
        old: Keys that only decrypt (what was written before a rotation).
    """

    def __init__(self, current: bytes, old: Iterable[bytes] = ()) -> None:
        if len(current) != 32 or any(len(k) != 32 for k in old):
            raise InvalidRequest("a payload key is 32 bytes (AES-256)")
        # cryptography is imported with the first key: a process without one never
        # encrypts.
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        self.current_id = key_id(current)
        self._current = AESGCM(current)
        self._keys: dict[str, AESGCM] = {self.current_id: self._current}
        self._macs: dict[str, bytes] = {self.current_id: _mac_key(current)}
        for key in old:
            self._keys.setdefault(key_id(key), AESGCM(key))
            self._macs.setdefault(key_id(key), _mac_key(key))

    @classmethod
    def parse(cls, current: str | None, old: str | None = None) -> KeyRing | None:
        """Keys from their settings' text; None when no current key is set.

        Args:
            current: ``SUBAGENTS_PAYLOAD_KEY``: base64 of 32 bytes.
            old: ``SUBAGENTS_PAYLOAD_OLD_KEYS``: comma-separated keys in the same form.

        Raises:
            InvalidRequest: a key is not the base64 of 32 bytes, or old keys are given
                without a current one (the message says which setting).
        """
        olds = [k for k in (old or "").split(",") if k.strip()]
        if not (current or "").strip():
            if olds:
                raise InvalidRequest(
                    "SUBAGENTS_PAYLOAD_OLD_KEYS is set without SUBAGENTS_PAYLOAD_KEY: set "
                    "the current key too (old keys only decrypt what was written before it)"
                )
            return None
        assert current is not None
        return cls(
            _parse_key(current, "SUBAGENTS_PAYLOAD_KEY"),
            [_parse_key(k, f"SUBAGENTS_PAYLOAD_OLD_KEYS item {i + 1}") for i, k in enumerate(olds)],
        )

    @property
    def ids(self) -> list[str]:
        """The ids of every key held, the current one first."""
        return list(self._keys)

    def encrypt(self, data: bytes, aad: bytes | None = None) -> bytes:
        """``nonce || ciphertext`` of ``data`` under the current key."""
        nonce = os.urandom(_NONCE)
        return nonce + self._current.encrypt(nonce, data, aad)

    def decrypt(self, kid: str, data: bytes, aad: bytes | None = None, what: str = "") -> bytes:
        """Open ``nonce || ciphertext`` written under the key ``kid``.

        Raises:
            PayloadKeyMissing: no key held has that id.
            PayloadCorrupt: the bytes do not open under it (changed after writing).
        """
        key = self._keys.get(kid)
        if key is None:
            raise missing_key(kid, self.ids, what)
        from cryptography.exceptions import InvalidTag

        try:
            return key.decrypt(data[:_NONCE], data[_NONCE:], aad)
        except InvalidTag:
            raise PayloadCorrupt(
                f"{what or 'a payload'} encrypted with key {kid} does not open under it: it "
                "was changed after it was written",
                key_id=kid,
            ) from None

    def mac(self, data: bytes, kid: str | None = None) -> str:
        """A keyed digest of ``data`` (hex): a blob's address that reveals nothing of it."""
        return hmac.new(self._macs[kid or self.current_id], data, hashlib.sha256).hexdigest()

    def seal(self, data: bytes, aad: bytes) -> bytes:
        """A blob or record as stored: marker, key id, nonce, ciphertext."""
        return _SEALED + bytes.fromhex(self.current_id) + self.encrypt(data, aad)

    def open(self, sealed: bytes, aad: bytes, what: str) -> tuple[str, bytes]:
        """``(key id, plaintext)`` of a sealed blob or record.

        Raises:
            PayloadKeyMissing, PayloadCorrupt.
        """
        kid = sealed_key_id(sealed)
        return kid, self.decrypt(kid, sealed[len(_SEALED) + _KEY_ID_BYTES :], aad, what)


def is_sealed(data: bytes) -> bool:
    """Whether stored bytes are a sealed blob or record."""
    return data.startswith(_SEALED)


def sealed_key_id(data: bytes) -> str:
    """The id of the key a sealed blob or record was written with."""
    return data[len(_SEALED) : len(_SEALED) + _KEY_ID_BYTES].hex()


def _mac_key(key: bytes) -> bytes:
    return hmac.new(key, b"durable-subagents blob address", hashlib.sha256).digest()


def missing_key(kid: str, have: Sequence[str], what: str = "") -> PayloadKeyMissing:
    """The error for data encrypted with a key this process does not hold."""
    subject = what or "a payload"
    if have:
        held = f"this process holds key(s) {', '.join(have)}"
        fix = (
            "set SUBAGENTS_PAYLOAD_KEY to that key, or add it to SUBAGENTS_PAYLOAD_OLD_KEYS "
            "if it was rotated out"
        )
    else:
        held = "this process has no SUBAGENTS_PAYLOAD_KEY"
        fix = "set SUBAGENTS_PAYLOAD_KEY to that key on every worker and client"
    return PayloadKeyMissing(
        f"{subject} is encrypted with key {kid}, and {held}: {fix}", key_id=kid
    )


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
