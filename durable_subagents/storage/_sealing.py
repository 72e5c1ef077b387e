"""Sealing: AES-256-GCM under ``SUBAGENTS_PAYLOAD_KEY``, for blobs and payloads alike.

One key (32 random bytes, base64) is set on every worker and client of a deployment.
Everything the project writes to the blob store is sealed with it here, and everything
it writes to Temporal goes through ``_codec.EncryptionCodec`` under the same key, so
Temporal's database and the bucket hold only ciphertext. Search attributes stay plain:
visibility needs them (see the README's "What stays visible").

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
from typing import TYPE_CHECKING

from durable_subagents.errors import (
    InvalidRequest,
    PayloadCorrupt,
    PayloadKeyMissing,
)

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

__all__ = [
    "KeyRing",
    "is_sealed",
    "key_id",
    "missing_key",
    "new_key",
    "sealed_key_id",
]

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
