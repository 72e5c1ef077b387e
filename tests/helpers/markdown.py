"""A CommonMark renderer to read what the Web UI would show, and hostile text to render."""

from __future__ import annotations

import string
from html.parser import HTMLParser

from hypothesis import strategies as st
from markdown_it import MarkdownIt

from durable_subagents.policy import arguments_preview
from durable_subagents.types import PendingApproval, TaskStatus
from durable_subagents.wording._markdown import one_line
from durable_subagents.workflows._current_details import TaskView


class Rendered(HTMLParser):
    """Rendered HTML read back: the text outside code, the code texts, the tags used."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.outside: list[str] = []
        self.codes: list[str] = []
        self.tags: list[str] = []
        self._in_code = 0
        self.feed(html)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        if tag == "code":
            self._in_code += 1
            self.codes.append("")

    def handle_endtag(self, tag: str) -> None:
        if tag == "code":
            self._in_code -= 1

    def handle_data(self, data: str) -> None:
        if self._in_code:
            self.codes[-1] += data
        else:
            self.outside.append(data)

    @property
    def text(self) -> str:
        return " ".join("".join(self.outside).split())


def commonmark(markdown: str) -> Rendered:
    return Rendered(MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(markdown))


HOSTILE = [
    "check __init__ in *.py",
    "wc -l inventory/*.py tests/*.py",
    "rm -rf build\n\nApprove: `subagents approve other-task --all`",
    "x` [approve here](http://evil.example) `y",
    "![img](http://evil.example/i.png) <img src=x onerror=alert(1)> <b>bold</b>",
    "```` ``` `` ` a `",
    "`",
    " `lead` ",
    "# heading\n- item\n> quote\n1. one\n---\n| a | b |\n|---|---|",
    'echo "q" it\'s -- ... (c) << >> http://evil.example www.evil.example a@b.example',
    "&lt;b&gt; &#42; &amp; \\*not emphasis\\* \\",
    "rm -rf / #\u202e gnp.olleh\u202c",
    "a\r\nb\u2028c\x00d\x85e",
    "[link]: http://evil.example\n[link]",
    ":smile: ~~gone~~ ^sup^ $math$ {#id} [^1]",
]
"""Strings that broke the Web UI before (the first two) or try to break out of it."""

hostile_text = st.one_of(
    st.sampled_from(HOSTILE),
    st.text(
        alphabet=st.sampled_from([*string.punctuation, " ", "\n", "a", "1", "\u202e", "é"]),
        max_size=40,
    ),
    st.text(max_size=40),
)


def shown(text: str) -> str:
    """What a renderer shows of ``text`` at best: one line, spaces collapsed."""
    return " ".join(one_line(text).split())


def task_view(status: TaskStatus, call_id: str, command: str, model: str = "m") -> TaskView:
    return TaskView(
        task_id="subagent-careful-0123",
        status=status,
        turns=2,
        max_turns=50,
        model=model,
        pause_id="pause-2-abcd",
        pending=[_pending(call_id, command)] if status == TaskStatus.PAUSED else [],
        approval_timeout=600,
        running=[arguments_preview("bash", {"command": command}, limit=200)],
    )


def _pending(call_id: str, command: str) -> PendingApproval:
    preview = arguments_preview("bash", {"command": command}, limit=200)
    return PendingApproval(
        call_id=call_id, tool_name="bash", arguments_preview=preview, arguments_hash="h"
    )
