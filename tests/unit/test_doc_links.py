"""Every link between the README and the docs leads to a page and a heading that exist."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]
PAGES += [ROOT / "bench" / "README.md"]
LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation gone, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text())
    found: set[str] = set()
    for line in text.splitlines():
        if match := re.match(r"#{1,6} (.+)", line):
            base = slug(match.group(1))
            name, n = base, 1
            while name in found:  # a repeated heading gets -1, -2...
                name, n = f"{base}-{n}", n + 1
            found.add(name)
    return found


def test_every_relative_link_and_anchor_resolves() -> None:
    broken = []
    for page in PAGES:
        text = FENCE.sub("", page.read_text())
        for target in LINK.findall(text):
            if re.match(r"[a-z]+:", target):
                continue  # http(s), mailto: not checked here
            path, _, anchor = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            where = f"{page.relative_to(ROOT)}: {target}"
            if not linked.exists():
                broken.append(f"{where} (no such file)")
            elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
                broken.append(f"{where} (no such heading)")
    assert not broken, "\n".join(broken)
