"""Encrypted payloads and blobs (``SUBAGENTS_PAYLOAD_KEY``): the codec and the sealed store.

Keys, the payload codec and the blob store, in process; tasks that run encrypted on
the dev server are in tests/integration/test_encryption.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from temporalio.api.common.v1 import Payload

from durable_subagents.config import Settings
from durable_subagents.errors import BlobCorrupt, InvalidRequest, PayloadCorrupt, PayloadKeyMissing
from durable_subagents.storage._local import LocalBlobStore
from durable_subagents.storage._sealing import KeyRing, new_key
from durable_subagents.wire._codec import ENCODING, KEY_ID_METADATA, EncryptionCodec, data_converter

PROMPT = "Summarize the ledger of ACCOUNT-PROMPT-7f3a for the audit"
OUTPUT = "TOOL-OUTPUT-c0ffee-secret-ledger-line"
ANSWER = "ANSWER-e5f6: the ledger balances"


def stored_bytes(root: Path) -> bytes:
    return b"\n".join(p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file())


# ---------------------------------------------------------------- the codec itself


def test_keys_are_parsed_with_errors_that_name_the_setting() -> None:
    key = new_key()
    ring = KeyRing.parse(key)
    assert ring is not None and len(ring.current_id) == 16
    assert KeyRing.parse(None) is None and KeyRing.parse("  ") is None
    with pytest.raises(InvalidRequest, match=r"SUBAGENTS_PAYLOAD_KEY is not a key.*keygen"):
        KeyRing.parse("c2hvcnQ=")
    with pytest.raises(InvalidRequest, match="SUBAGENTS_PAYLOAD_OLD_KEYS item 2"):
        KeyRing.parse(key, f"{new_key()},not base64!")
    with pytest.raises(InvalidRequest, match="without SUBAGENTS_PAYLOAD_KEY"):
        KeyRing.parse(None, new_key())
    with pytest.raises(InvalidRequest, match="SUBAGENTS_PAYLOAD_KEY"):
        Settings(payload_key="nope").payload_keys()
    assert "nope" not in repr(Settings(payload_key="nope"))


async def test_the_codec_encrypts_every_payload_and_opens_it_by_key_id() -> None:
    old, new = new_key(), new_key()
    before = EncryptionCodec(KeyRing.parse(old))
    after = EncryptionCodec(KeyRing.parse(new, old))
    plain = Payload(metadata={"encoding": b"json/plain"}, data=json.dumps(PROMPT).encode())
    [sealed] = await before.encode([plain])
    assert sealed.metadata["encoding"] == ENCODING
    assert sealed.metadata[KEY_ID_METADATA].decode() == KeyRing.parse(old).current_id  # type: ignore[union-attr]
    assert PROMPT.encode() not in sealed.SerializeToString()
    assert await after.decode([sealed]) == [plain]  # the old key still opens it
    [resealed] = await after.encode([plain])
    assert resealed.metadata[KEY_ID_METADATA] != sealed.metadata[KEY_ID_METADATA]
    # A plain payload (written before the key was set) is read as it is.
    assert await after.decode([plain]) == [plain]

    with pytest.raises(PayloadKeyMissing, match=f"key {after.keys.current_id}.*holds key") as e:  # type: ignore[union-attr]
        await before.decode([resealed])
    assert e.value.key_id == after.keys.current_id  # type: ignore[union-attr]
    with pytest.raises(PayloadKeyMissing, match="no SUBAGENTS_PAYLOAD_KEY"):
        await EncryptionCodec(None).decode([sealed])
    tampered = Payload()
    tampered.CopyFrom(sealed)
    tampered.data = sealed.data[:-1] + bytes([sealed.data[-1] ^ 1])
    with pytest.raises(PayloadCorrupt, match="changed after it was written"):
        await before.decode([tampered])


async def test_failures_are_encrypted_except_the_ones_that_name_a_missing_key() -> None:
    """A failure's message can carry content (a provider's error quoting the prompt, a
    tool's stderr); a key error names only a key, and must be readable by whoever holds
    a different key than the worker that failed."""
    from temporalio.api.failure.v1 import Failure
    from temporalio.exceptions import ApplicationError

    keys = KeyRing.parse(new_key())
    converter = data_converter(keys)
    for error, plain in (
        (RuntimeError(f"provider said: {PROMPT}"), False),
        (ApplicationError(f"tool failed: {OUTPUT}", type="ToolError"), False),
        (PayloadKeyMissing("a payload is encrypted with key 0011", key_id="0011"), True),
        (ApplicationError("blob sealed with key 0011", type="PayloadKeyMissing"), True),
    ):
        failure = Failure()
        await converter.encode_failure(error, failure)
        message = getattr(error, "message", None) or str(error)
        assert (message.encode() in failure.SerializeToString()) is plain, error
        assert message in str(await converter.decode_failure(failure))


async def test_blobs_and_records_are_sealed_at_addresses_that_reveal_nothing(
    tmp_path: Path,
) -> None:
    keys = KeyRing.parse(new_key())
    store = LocalBlobStore(tmp_path / "s", keys=keys)
    ref = await store.put("t1", OUTPUT.encode())
    assert ref.startswith("hmac:")
    assert ref != "hmac:" + __import__("hashlib").sha256(OUTPUT.encode()).hexdigest()
    await store.put_record("t1", "call-1", ANSWER.encode())
    assert OUTPUT.encode() not in stored_bytes(tmp_path) and b"e5f6" not in stored_bytes(tmp_path)

    fresh = LocalBlobStore(tmp_path / "s", keys=keys)  # no cache
    assert await fresh.get("t1", ref) == OUTPUT.encode()
    assert await fresh.get_record("t1", "call-1") == ANSWER.encode()
    # A sealed record copied to another task's name does not open there.
    (tmp_path / "s" / "t2" / "records").mkdir(parents=True)
    (tmp_path / "s" / "t2" / "records" / "call-1").write_bytes(
        (tmp_path / "s" / "t1" / "records" / "call-1").read_bytes()
    )
    with pytest.raises(BlobCorrupt, match="does not open"):
        await fresh.get_record("t2", "call-1")
    # Without the key: a clear error naming it.
    keyless = LocalBlobStore(tmp_path / "s")
    with pytest.raises(PayloadKeyMissing, match=keys.current_id):  # type: ignore[union-attr]
        await keyless.get("t1", ref)
    # Blobs written before the key was set still read (their hash checks them).
    plain_ref = await keyless.put("t1", b"from before")
    assert await fresh.get("t1", plain_ref) == b"from before"


# ---------------------------------------------------------------- tasks, end to end


@pytest.fixture
def key() -> str:
    return new_key()
