"""Notification URLs as they go on the wire, and the allowlist that judges them so."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from durable_subagents.activities import Notifier
from durable_subagents.config import Settings
from durable_subagents.errors import InvalidRequest
from durable_subagents.policy._notify_url import (
    normal_notify_url,
    notify_url_allowed,
    remove_dot_segments,
)

ALLOW = ["https://h.example/hooks/"]


@pytest.mark.parametrize(
    ("path", "removed"),
    [
        # RFC 3986 section 5.2.4's own examples
        ("/a/b/c/./../../g", "/a/g"),
        ("mid/content=5/../6", "mid/6"),
        ("/hooks/../admin", "/admin"),
        ("/..", "/"),
        ("/../../x", "/x"),
        ("/a/b/..", "/a/"),
        ("/a/.", "/a/"),
        ("/hooks//..//admin", "/hooks//admin"),
        ("/a/..b/.c", "/a/..b/.c"),  # not dot segments
    ],
)
def test_dot_segments_are_removed_as_rfc_3986_says(path: str, removed: str) -> None:
    assert remove_dot_segments(path) == removed


@pytest.mark.parametrize(
    ("url", "sent"),
    [
        ("https://h.example/hooks/../admin", "https://h.example/admin"),
        ("https://h.example/hooks/%2e%2e/admin", "https://h.example/admin"),
        ("https://h.example/hooks/%2E%2e/admin", "https://h.example/admin"),
        ("https://h.example/hooks/.%2e/admin", "https://h.example/admin"),
        ("https://h.example/hooks/./a/../b", "https://h.example/hooks/b"),
        ("https://h.example/hooks/%7Eme%41", "https://h.example/hooks/~meA"),
        ("https://h.example/hooks/a%3cb%20c", "https://h.example/hooks/a%3Cb%20c"),
        ("https://h.example/hooks/\u00e9", "https://h.example/hooks/%C3%A9"),
        ("https://h.example/hooks/x?a=../b&c=%2f#frag", "https://h.example/hooks/x?a=../b&c=%2F"),
        ("HTTPS://H.Example.:443/hooks", "https://h.example/hooks"),
        ("http://h.example:8080", "http://h.example:8080/"),
        ("http://[::1]:80/x", "http://[::1]/x"),
    ],
)
def test_a_url_is_written_as_it_is_sent(url: str, sent: str) -> None:
    assert normal_notify_url(url) == sent
    assert normal_notify_url(sent) == sent


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("https://h.example/hooks/%2fadmin", "encoded slash"),
        ("https://h.example/hooks/%2F..%2Fadmin", "encoded slash"),
        ("https://h.example/hooks/%5c..%5cadmin", "encoded slash"),
        ("https://h.example/hooks\\..\\admin", "backslash"),
        ("https://h.example/hooks/..;/admin", "dot segment with parameters"),
        ("https://h.example/hooks/.;x/admin", "dot segment with parameters"),
        ("https://h.example/hooks/%2e%2e%3b/admin", "dot segment with parameters"),
        ("https://h.example/hooks/%zz", "starts no %XX escape"),
        ("https://h%2eexample/hooks", "no host name"),
        ("https://h.ex\u00e4mple/hooks", "no host name"),
        ("https://user:pw@h.example/hooks", "credentials"),
        ("ftp://h.example/hooks", "is not an http"),
    ],
)
def test_what_receivers_read_in_more_than_one_way_is_refused_saying_why(
    url: str, said: str
) -> None:
    with pytest.raises(InvalidRequest, match=said):
        normal_notify_url(url)
    assert not notify_url_allowed(url, ["https://h.example/"])


@pytest.mark.parametrize(
    "url",
    [
        "https://h.example/hooks/../admin",
        "https://h.example/hooks/%2e%2e/admin",
        "https://h.example/hooks/x/../../admin",
        "https://h.example/hooks/%2E./admin",
        "https://h.example/hooks-evil/x",
        "https://h.example/hooks/..;/admin",
    ],
)
def test_dot_segments_never_lead_out_of_an_allowed_prefix(url: str) -> None:
    assert not notify_url_allowed(url, ALLOW)


def test_a_url_inside_the_prefix_is_allowed_however_it_is_written() -> None:
    assert notify_url_allowed("https://h.example/hooks/a/../b", ALLOW)
    assert notify_url_allowed("https://H.EXAMPLE:443/hooks/%7Eci", ALLOW)
    assert notify_url_allowed("https://h.example/x/../hooks/ci", ALLOW)
    # a prefix is judged as sent too: its own dot segments cannot widen it
    assert not notify_url_allowed("https://h.example/admin", ["https://h.example/hooks/../x/"])


def test_a_worker_refuses_an_allowlist_it_could_not_judge_at_start() -> None:
    with pytest.raises(ValidationError, match=r"SUBAGENTS_NOTIFY_ALLOW: .*encoded slash"):
        Settings(notify_allow="https://h.example/ok/,https://h.example/a%2fb/")
    with pytest.raises(ValidationError, match=r"SUBAGENTS_NOTIFY_URL: .*backslash"):
        Settings(notify_url="https://h.example/a\\b")
    with pytest.raises(InvalidRequest, match="SUBAGENTS_NOTIFY_ALLOW"):
        Notifier(allow=["https://h.example/..;/x"])
