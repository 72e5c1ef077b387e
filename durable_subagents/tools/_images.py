"""Images in tool results: which ones a model may be shown, checked before they are kept.

A tool (an MCP server's screenshot tool) may return images. A model is shown one only
if both providers' APIs would take it, because an image the API refuses would be sent
again with every later turn, and every turn would fail: at most ``MAX_IMAGES`` a
result, PNG, JPEG, GIF or WebP as its first bytes say (whatever type the tool named),
at most ``MAX_IMAGE_BASE64`` characters of base64 (Anthropic's limit per image),
``MAX_IMAGE_SIDE`` pixels a side, and a GIF only if it is still (OpenAI's rule). Any
other image becomes a short note in the result's text saying why it was left out.
"""

from __future__ import annotations

import base64
import binascii
import struct
from dataclasses import dataclass

from durable_subagents.types import IMAGE_TYPES, ImageType

__all__ = [
    "MAX_IMAGES",
    "MAX_IMAGE_BASE64",
    "MAX_IMAGE_SIDE",
    "CheckedImage",
    "check_image",
    "image_size",
    "sniff",
]

MAX_IMAGES = 4
"""Images one tool result may carry; the others become notes."""
MAX_IMAGE_BASE64 = 5 * 1024 * 1024
"""Characters of base64 one image may take (Anthropic refuses an image over 5 MB of
base64: about 3.75 MB of image)."""
MAX_IMAGE_SIDE = 8000
"""Pixels an image may have on either side (Anthropic refuses larger ones)."""


@dataclass(frozen=True)
class CheckedImage:
    """An image a model may be shown: its type (from its bytes) and the bytes."""

    media_type: ImageType
    data: bytes


def sniff(data: bytes) -> ImageType | None:
    """The image type ``data`` begins as (one of ``IMAGE_TYPES``), or None."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def image_size(data: bytes, media_type: str) -> tuple[int, int] | None:
    """``(width, height)`` as the image's header says, or None where it says nothing."""
    try:
        if media_type == "image/png" and data[12:16] == b"IHDR":
            width, height = struct.unpack(">II", data[16:24])
            return width, height
        if media_type == "image/gif":
            width, height = struct.unpack("<HH", data[6:10])
            return width, height
        if media_type == "image/webp":
            return _webp_size(data)
        if media_type == "image/jpeg":
            return _jpeg_size(data)
    except struct.error:
        return None
    return None


def _webp_size(data: bytes) -> tuple[int, int] | None:
    chunk = data[12:16]
    if chunk == b"VP8X":
        width = int.from_bytes(data[24:27], "little") + 1
        height = int.from_bytes(data[27:30], "little") + 1
        return width, height
    if chunk == b"VP8L" and len(data) >= 25:
        bits = int.from_bytes(data[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8 " and len(data) >= 30:
        width, height = struct.unpack("<HH", data[26:30])
        return width & 0x3FFF, height & 0x3FFF
    return None


_SOF = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}
"""JPEG's start-of-frame markers: the segment that gives the image's size."""


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    i = 2
    while i + 9 <= len(data):
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker in (0x01, *range(0xD0, 0xD8)):  # no length of their own
            i += 2
            continue
        length = int.from_bytes(data[i + 2 : i + 4], "big")
        if marker in _SOF:
            height, width = struct.unpack(">HH", data[i + 5 : i + 9])
            return width, height
        i += 2 + length
    return None


_ANIMATED = b"NETSCAPE2.0"
"""The application extension that makes a GIF loop: what every animated GIF carries."""


def check_image(mime_type: str, encoded: str, index: int) -> CheckedImage | str:
    """The image a tool returned as ``encoded`` base64, or why a model is not shown it.

    Args:
        mime_type: The type the tool named (the bytes decide; it is only quoted).
        encoded: The image, base64-encoded.
        index: How many images of the same result were kept before this one.
    """
    if index >= MAX_IMAGES:
        return f"more than {MAX_IMAGES} images in one result"
    if len(encoded) > MAX_IMAGE_BASE64:
        return f"{len(encoded):,} characters of base64, over {MAX_IMAGE_BASE64:,}"
    try:
        data = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        return "not valid base64"
    media_type = sniff(data)
    if media_type is None:
        return f"not an image of a type models take ({', '.join(IMAGE_TYPES)})"
    size = image_size(data, media_type)
    if size is None or min(size) < 1:
        return f"not a readable {media_type.removeprefix('image/').upper()} image"
    if max(size) > MAX_IMAGE_SIDE:
        return f"{size[0]}x{size[1]} pixels, over {MAX_IMAGE_SIDE} a side"
    if media_type == "image/gif" and _ANIMATED in data:
        return "an animated GIF (OpenAI takes only still ones)"
    return CheckedImage(media_type=media_type, data=data)
