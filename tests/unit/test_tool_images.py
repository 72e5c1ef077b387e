"""Images in tool results: which a model may be shown, how each wire carries them, and
what the context does with them (counted, dropped past a request's limits, compacted)."""

from __future__ import annotations

import base64
import struct
import zlib

import pytest

from durable_subagents.context._context import (
    IMAGE_CHARS,
    IMAGE_STEP,
    IMAGES_LEFT_OUT,
    REQUEST_IMAGE_BYTES,
    REQUEST_IMAGES,
    message_chars,
    note,
    within_image_budget,
)
from durable_subagents.providers.anthropic import add_cache_breakpoints, to_anthropic_messages
from durable_subagents.providers.openai import IMAGES_FOLLOW, to_openai_messages
from durable_subagents.testing._wire_images import anthropic_problem, openai_problem
from durable_subagents.tools._images import (
    MAX_IMAGE_BASE64,
    CheckedImage,
    check_image,
    image_size,
)
from durable_subagents.types import Message, ModelRequest, ToolCall, ToolImage


def png(width: int, height: int = 1) -> bytes:
    def chunk(kind: bytes, body: bytes) -> bytes:
        return (
            struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
        )

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    rows = b"".join(b"\x00" + b"\x80" * width for _ in range(height))
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows))


def jpeg(width: int, height: int) -> bytes:
    app0 = b"\xff\xe0" + struct.pack(">H", 16) + b"JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00"
    sof = b"\xff\xc0" + struct.pack(">HBHHB", 11, 8, height, width, 1) + b"\x01\x11\x00"
    return b"\xff\xd8" + app0 + sof + b"\xff\xd9"


def webp_vp8x(width: int, height: int) -> bytes:
    body = (
        b"\x00\x00\x00\x00" + (width - 1).to_bytes(3, "little") + (height - 1).to_bytes(3, "little")
    )
    return (
        b"RIFF"
        + struct.pack("<I", 4 + 8 + len(body))
        + b"WEBP"
        + b"VP8X"
        + struct.pack("<I", 10)
        + body
    )


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


# ------------------------------------------------------------------ which images


def test_an_image_is_kept_by_what_its_bytes_are() -> None:
    kept = check_image("image/jpeg", b64(png(3, 2)), 0)
    assert kept == CheckedImage(media_type="image/png", data=png(3, 2))
    assert image_size(jpeg(640, 480), "image/jpeg") == (640, 480)
    assert image_size(webp_vp8x(300, 200), "image/webp") == (300, 200)
    assert isinstance(check_image("image/webp", b64(webp_vp8x(300, 200)), 3), CheckedImage)


@pytest.mark.parametrize(
    ("mime", "encoded", "index", "why"),
    [
        ("image/png", b64(png(1)), 4, "more than 4 images in one result"),
        ("image/png", "A" * (MAX_IMAGE_BASE64 + 4), 0, "characters of base64, over"),
        ("image/png", "iVBO%%%", 0, "not valid base64"),
        ("image/svg+xml", b64(b"<svg/>"), 0, "not an image of a type models take"),
        ("image/png", b64(b"\x89PNG\r\n\x1a\n"), 0, "not a readable PNG image"),
        ("image/jpeg", b64(jpeg(8001, 10)), 0, "8001x10 pixels, over 8000 a side"),
        ("image/png", b64(png(0)), 0, "not a readable PNG image"),
        ("image/gif", b64(b"GIF89a\x01\x00\x01\x00!\xff\x0bNETSCAPE2.0"), 0, "animated GIF"),
    ],
)
def test_images_a_model_is_not_shown_say_why(mime: str, encoded: str, index: int, why: str) -> None:
    reason = check_image(mime, encoded, index)
    assert isinstance(reason, str) and why in reason


# ------------------------------------------------------------------ the wires


def image(data: bytes, ref: str = "blob") -> ToolImage:
    return ToolImage(media_type="image/png", ref=ref, size=len(data), data=b64(data))


def conversation(*results: Message, after: Message | None = None) -> ModelRequest:
    calls = [ToolCall(id=r.tool_call_id or "", name=r.tool_name or "") for r in results]
    messages = [
        Message(role="user", content="look"),
        Message(role="assistant", tool_calls=calls),
        *results,
    ]
    return ModelRequest(model="m", messages=[*messages, *([after] if after else [])])


def result(call_id: str, *images: ToolImage) -> Message:
    return Message(
        role="tool",
        tool_call_id=call_id,
        tool_name="mcp__shots__picture",
        content="[image 1: image/png, 60 bytes]",
        images=list(images),
    )


def test_anthropic_gets_image_blocks_in_the_tool_result() -> None:
    request = conversation(result("c1", image(png(2))), result("c2"))
    _, turns = to_anthropic_messages(request)
    first, second = turns[-1]["content"]
    assert first["content"] == [
        {"type": "text", "text": "[image 1: image/png, 60 bytes]"},
        {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": b64(png(2))},
        },
    ]
    assert second["content"] == "[image 1: image/png, 60 bytes]"
    params = {"messages": turns}
    add_cache_breakpoints(params)
    assert anthropic_problem(params["messages"]) is None


def test_openai_gets_the_images_in_a_user_message_after_the_results() -> None:
    later = Message(role="user", content="and now?")
    request = conversation(result("c1", image(png(2)), image(png(3))), result("c2"), after=later)
    wire = to_openai_messages(request)
    assert [m["role"] for m in wire] == ["user", "assistant", "tool", "tool", "user", "user"]
    assert wire[2]["content"] == f"[image 1: image/png, 60 bytes]\n{IMAGES_FOLLOW}"
    assert wire[3]["content"] == "[image 1: image/png, 60 bytes]"
    label, *parts = wire[4]["content"]
    assert label["text"] == "The images of the result of mcp__shots__picture call c1:"
    assert [p["image_url"]["url"] for p in parts] == [
        f"data:image/png;base64,{b64(png(2))}",
        f"data:image/png;base64,{b64(png(3))}",
    ]
    assert wire[5] == {"role": "user", "content": "and now?"}
    assert openai_problem(wire) is None


def test_the_fake_apis_refuse_what_the_real_ones_refuse() -> None:
    tool_with_image = [
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c1"}]},
        {"role": "tool", "tool_call_id": "c1", "content": [{"type": "image_url"}]},
    ]
    assert "Supported values are: 'text'" in (openai_problem(tool_with_image) or "")
    user_between = [
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c1"}, {"id": "c2"}]},
        {"role": "tool", "tool_call_id": "c1", "content": "x"},
        {"role": "user", "content": "y"},
    ]
    assert "did not have response messages: c2" in (openai_problem(user_between) or "")
    svg = [
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": "data:image/svg+xml;base64,PHN2Zy8+"}}
            ],
        }
    ]
    assert "Invalid MIME type" in (openai_problem(svg) or "")

    def anthropic(media_type: str, data: str) -> str | None:
        block = {
            "type": "image",
            "source": {"type": "base64", "media_type": media_type, "data": data},
        }
        content = [{"type": "tool_result", "tool_use_id": "c1", "content": [block]}]
        return anthropic_problem([{"role": "user", "content": content}])

    assert anthropic("image/png", b64(png(1))) is None
    assert "does not match the provided media type image/jpeg" in (
        anthropic("image/jpeg", b64(png(1))) or ""
    )
    assert "invalid base64" in (anthropic("image/png", "%%%") or "")
    assert "exceeds 5 MB maximum" in (anthropic("image/png", "A" * (5 * 1024 * 1024 + 4)) or "")


# ------------------------------------------------------------------ the context


def test_an_image_counts_in_the_context_and_a_note_drops_it() -> None:
    plain = result("c1")
    pictured = result("c1", ToolImage(media_type="image/png", ref="r", size=10))
    assert message_chars(pictured) == message_chars(plain) + IMAGE_CHARS
    noted = note(pictured, None)
    assert noted.images == [] and noted.content.startswith("[compacted:")


def pictured(count: int, size: int = 1000) -> list[Message]:
    return [
        result(f"c{i}", ToolImage(media_type="image/png", ref=f"r{i}", size=size))
        for i in range(count)
    ]


def test_a_request_carries_the_latest_images_within_its_limits() -> None:
    assert within_image_budget(pictured(REQUEST_IMAGES)) == (pictured(REQUEST_IMAGES), set())
    kept, dropped = within_image_budget(pictured(REQUEST_IMAGES + 2))
    assert dropped == set(range(IMAGE_STEP))
    assert [len(m.images) for m in kept] == [0] * IMAGE_STEP + [1] * (
        REQUEST_IMAGES + 2 - IMAGE_STEP
    )
    big = ToolImage(media_type="image/png", ref="big", size=REQUEST_IMAGE_BYTES // 2 + 1)
    kept, dropped = within_image_budget([result("a", big), result("b", big), result("c")])
    assert dropped == {0} and kept[1].images == [big]
    assert "call the tool again" in IMAGES_LEFT_OUT


def test_the_images_a_request_carries_change_once_in_a_step() -> None:
    """Turn after turn, the oldest images kept stay the same for ``IMAGE_STEP`` new ones:
    the request's prefix, which a prompt cache reads, changes that seldom."""
    firsts = []
    for count in range(REQUEST_IMAGES + 1, REQUEST_IMAGES + 2 * IMAGE_STEP + 1):
        kept, _ = within_image_budget(pictured(count))
        firsts.append(next(i for i, m in enumerate(kept) if m.images))
    assert firsts == [IMAGE_STEP] * IMAGE_STEP + [2 * IMAGE_STEP] * IMAGE_STEP
