"""Untrusted text in the Markdown the Temporal Web UI renders, shown literally.

The Web UI renders a workflow's summary, details and current details as Markdown
(the dev server's UI 2.54 also makes typographic replacements, links bare URLs and
passes raw HTML through). A prompt, a description or a tool argument put there as is
loses characters (``__init__`` turns bold, ``inventory/*.py tests/*.py`` loses its
stars), and a hostile model's arguments could add lines of their own: a fake
"approve with" hint, a link. Every such text goes through one of two functions:

- :func:`code_span` for what must read exactly (commands, prompts, ids): a code span
  whose fence is longer than any run of backticks inside it.
- :func:`escape` for prose (a description, a list of tools): every ASCII punctuation
  character a Markdown renderer gives a meaning is backslash-escaped. The UI's
  typographer still curls straight quotes in prose (no escape stops it there).

Both put the text on one line first (:func:`one_line`): a line break could start a
block (a heading, a list item, a quote) outside the span. Activity summaries are not
Markdown in the Web UI (it shows them as plain text), so they are not escaped.
"""

from __future__ import annotations

import re
import string
import unicodedata

_INERT = "\"',%/;=?@"
"""ASCII punctuation that means nothing to a renderer on its own, left as it is.

The UI's renderer takes no backslash before these (``\\=`` shows the backslash); and
its typographer turns even an escaped quote into a curly one (``\\"`` shows as
``\\“``)."""
_SPECIAL = re.compile("([" + re.escape("".join(set(string.punctuation) - set(_INERT))) + "])")
_FRACTION = re.compile(r"(?<=[0-9])/")
"""The UI's typographer shows ``1/2`` as a fraction; a character reference keeps it."""
_BACKTICKS = re.compile("`+")
_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
"""Direction controls: they could make a command read otherwise than it runs."""


def one_line(text: str, limit: int | None = None) -> str:
    """``text`` on one line: whitespace runs become one space, controls become U+FFFD.

    Line breaks would end a span or start a block; control characters cannot be shown
    anyway, and direction controls (U+202E...) could make an approver read a command
    otherwise than it runs. ``limit`` cuts the result (with ``…``) to that many
    characters.
    """
    line = " ".join(text.split())
    if any(_hidden(c) for c in line):
        line = "".join("\ufffd" if _hidden(c) else c for c in line)
    if limit is not None and len(line) > limit:
        line = line[: limit - 1] + "…"
    return line


def escape(text: str) -> str:
    r"""Prose shown literally: one line, Markdown's punctuation backslash-escaped.

    Example:
        >>> print(escape("check __init__ in *.py"))
        check \_\_init\_\_ in \*\.py
    """
    return _FRACTION.sub("&#47;", _SPECIAL.sub(r"\\\1", one_line(text)))


def code_span(text: str) -> str:
    """``text`` as an inline code span on one line, whatever backticks it holds.

    The fence is one backtick longer than the longest run inside, so no run inside can
    close it; a space pads text that starts or ends with a backtick or a space (the
    renderer strips one on each side). Empty text is a span of one no-break space
    (the UI's renderer drops a span of spaces).

    Example:
        >>> code_span("wc -l *.py")
        '`wc -l *.py`'
        >>> code_span("a `b` c")
        '``a `b` c``'
    """
    line = one_line(text)
    if not line:
        return "`\u00a0`"
    longest = max((len(run) for run in _BACKTICKS.findall(line)), default=0)
    fence = "`" * (longest + 1)
    if line[:1] in ("`", " ") or line[-1:] in ("`", " "):
        line = f" {line} "
    return f"{fence}{line}{fence}"


def _hidden(char: str) -> bool:
    return char in _BIDI or unicodedata.category(char) in ("Cc", "Cs")


__all__ = ["code_span", "escape", "one_line"]
