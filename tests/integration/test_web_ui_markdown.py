"""What the Web UI renders shows untrusted text literally, and nothing else of it.

The summary, details and current details are Markdown. Hostile prompts, descriptions
and tool arguments are rendered by two renderers: markdown-it (CommonMark, in
process) and the dev server's own Web UI (its ``/render`` page, which the UI frames
show). The text they show must be the text given, and everything outside the code
spans must be ours, whatever the arguments hold: no forged line, link or image.
"""

from __future__ import annotations

import asyncio
import re
import urllib.parse
import urllib.request

import pytest
from hypothesis import given, settings

from durable_subagents.testing import DevServer
from durable_subagents.types import TaskStatus
from durable_subagents.wording._markdown import code_span, escape, one_line
from durable_subagents.workflows._current_details import current_details

from ..helpers.markdown import HOSTILE, Rendered, hostile_text, shown, task_view

_QUOTES = re.compile("[\"'\u201c\u201d\u2018\u2019]")


def unquoted(text: str) -> str:
    """``text`` without quotes: the UI's typographer curls (and merges) them in prose."""
    return _QUOTES.sub("", text)


# ------------------------------------------------------------------ the dev server's UI


def _render(ui_url: str, markdown: str) -> Rendered:
    """The Web UI's own rendering of ``markdown`` (the page its metadata frames show)."""
    query = urllib.parse.urlencode({"content": markdown, "theme": "light"})
    with urllib.request.urlopen(f"{ui_url}/render?{query}", timeout=10) as response:
        html = response.read().decode()
    main = re.search(r"<main>(.*)</main>", html, re.S)
    assert main is not None, html[-500:]
    return Rendered(main.group(1))


@pytest.fixture(scope="module")
def ui_url(dev_server: DevServer) -> str:
    if not dev_server.ui:
        pytest.skip("the session's dev server serves no Web UI")
    return dev_server.ui_url


async def test_the_web_ui_renders_the_text_literally(ui_url: str) -> None:
    """The dev server's UI (2.54: typographer, bare-URL links, raw HTML) shows the text.

    One difference remains in prose: its typographer curls straight quotes (``''``
    becomes one); code spans (commands, prompts) keep them.
    """

    @given(hostile_text)
    @settings(max_examples=150, deadline=None)
    def check(text: str) -> None:
        prose = _render(ui_url, escape(text))
        assert unquoted(prose.text) == unquoted(shown(text))
        assert not prose.codes and set(prose.tags) <= {"p"}
        code = _render(ui_url, "x " + code_span(text))
        assert code.codes == [one_line(text) or "\xa0"]
        benign = _render(ui_url, current_details(task_view(TaskStatus.PAUSED, "c", "ls")))
        hostile = _render(ui_url, current_details(task_view(TaskStatus.PAUSED, text, text)))
        assert hostile.text == benign.text and hostile.tags == benign.tags

    for text in [*HOSTILE, "1/2 of 3/4", "it''s"]:
        assert unquoted(_render(ui_url, escape(text)).text) == unquoted(shown(text))
    assert _render(ui_url, escape("check __init__ in *.py")).text == "check __init__ in *.py"
    await asyncio.to_thread(check)
