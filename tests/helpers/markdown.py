"""A CommonMark renderer to read what the Web UI would show."""

from __future__ import annotations

from html.parser import HTMLParser

from markdown_it import MarkdownIt


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
