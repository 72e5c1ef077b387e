"""The command line's words for a transport error, read without a server."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(
    ("text", "words"),
    [
        # what Temporal's client said, on this machine, for each kind of failure
        ('Failed client connect: `get_system_info` call error after connection: Status { code: '
         'Cancelled, message: "Timeout expired", source: Some(tonic::transport::Error(Transport, '
         "TimeoutExpired(()))) }", "timed out"),
        ('Failed client connect: `get_system_info` call error after connection: Status { code: '
         'Unimplemented, message: "grpc-status header missing, mapped from HTTP status code 404"',
         "something answers there, but it is not a Temporal frontend"),
        ("tcp connect error", "the server does not answer"),
        ("something new", "the connection failed"),
    ],
    ids=["timeout", "not-temporal", "lost", "unknown"],
)  # fmt: skip
def test_transport_errors_in_words(text: str, words: str) -> None:
    from durable_subagents.connection._connect import plain_connection_error

    assert plain_connection_error(text) == words
