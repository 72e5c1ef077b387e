"""The worker's side of a fork-server exchange: one frame out, one frame back."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator

import pytest

from durable_subagents.tools._fork_calls import READ_BYTES, exchange
from durable_subagents.tools._forkserver import FRAME


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    ours, child = socket.socketpair()
    ours.setblocking(False)
    try:
        yield ours, child
    finally:
        ours.close()
        child.close()


async def answer_with(child: socket.socket, *pieces: bytes) -> bytes:
    """Read the request frame as the child would, then send ``pieces`` one by one."""
    loop = asyncio.get_running_loop()
    (size,) = FRAME.unpack(await loop.run_in_executor(None, child.recv, FRAME.size))
    request = await loop.run_in_executor(None, child.recv, size)
    for piece in pieces:
        await loop.run_in_executor(None, child.sendall, piece)
        await asyncio.sleep(0.01)  # a separate read for each piece
    return request


async def test_an_answer_in_pieces_and_larger_than_one_read_arrives_whole(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    ours, child = pair
    loop = asyncio.get_running_loop()
    answer = bytes(range(256)) * (3 * READ_BYTES // 256 + 7)
    frame = FRAME.pack(len(answer)) + answer
    pieces = (frame[:2], frame[2:9], frame[9 : READ_BYTES + 100], frame[READ_BYTES + 100 :])
    got, request = await asyncio.gather(
        exchange(loop, ours, b"read a.txt"), answer_with(child, *pieces)
    )
    assert (got, request) == (answer, b"read a.txt")


async def test_an_answer_in_one_piece_and_an_empty_one(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    ours, child = pair
    loop = asyncio.get_running_loop()
    got, _ = await asyncio.gather(
        exchange(loop, ours, b"x"), answer_with(child, FRAME.pack(5) + b"hello")
    )
    assert got == b"hello"
    got, _ = await asyncio.gather(exchange(loop, ours, b"y"), answer_with(child, FRAME.pack(0)))
    assert got == b""


@pytest.mark.parametrize(
    "frame",
    [
        FRAME.pack(3) + b"abcdef",  # more than one answer
        FRAME.pack(10) + b"abc",  # the child ended part way
        b"\x00\x00",  # the child ended within the header
        FRAME.pack(2**31),  # over MAX_ANSWER_BYTES
    ],
)
async def test_a_frame_that_is_not_one_whole_answer_reads_as_none(
    pair: tuple[socket.socket, socket.socket], frame: bytes
) -> None:
    """b"": the caller kills the child and asks its exit status why."""
    ours, child = pair
    loop = asyncio.get_running_loop()

    async def child_side() -> None:
        await answer_with(child, frame)
        child.shutdown(socket.SHUT_WR)

    got, _ = await asyncio.gather(exchange(loop, ours, b"z"), child_side())
    assert got == b""
