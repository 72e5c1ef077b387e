"""Every link between the README and the docs leads to a page and a heading that exist,
and every repository file a page names is there."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]
PAGES += [ROOT / "bench" / "README.md", ROOT / "CONTRIBUTING.md"]
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


CODE = re.compile(r"(`+)(.+?)\1", re.S)
NOT_IN_REPO = {".git", ".venv", "build", "dist", "node_modules"}
TOP_FILE = re.compile(r"(?<![\w/.-])[A-Z][A-Z_]*\.md\b")
IN_A_WORKSPACE = {"AGENTS.md", "CLAUDE.md", "deploy/hooks"}
"""Names the pages give as files of a user's workspace (agent notes, an example of a
worker's own protected paths), not of this repository."""


def repo_paths(text: str) -> set[str]:
    """Paths into the repository a page names in inline code or a fenced block.

    A path counts when its first part is a folder at the repository's root; so does
    a name such as ``DESIGN.md``, wherever it stands. Placeholders (``<queue>``, ``...``) are left
    alone, and a line number or a test's name after the path is dropped.
    """
    found = set(TOP_FILE.findall(text))  # DESIGN.md, in prose too
    spans = [m.group(2) for m in CODE.finditer(FENCE.sub("", text))]
    spans += [m.group(0) for m in FENCE.finditer(text)]
    for span in spans:
        for token in re.split(r"[\s\"'(),;=]+", span):
            token = re.sub(r"(::\w+|:\d+(-\d+)?)$", "", token.strip("`.:"))
            if not token or "<" in token or "..." in token or "{" in token:
                continue
            first = token.split("/", 1)[0]
            if first and "/" in token and first not in NOT_IN_REPO and (ROOT / first).is_dir():
                if not first.endswith(".egg-info"):
                    found.add(token)
    return found - IN_A_WORKSPACE


def test_every_repository_path_a_page_names_exists() -> None:
    """``durable_subagents/x.py``, ``tests/e2e/test_x.py``, ``deploy/...``, ``DESIGN.md``:
    a page that names a file of the repository names one that is there."""
    missing = []
    for page in PAGES:
        for path in sorted(repo_paths(page.read_text())):
            if not any(ROOT.glob(path)) if "*" in path else not (ROOT / path).exists():
                missing.append(f"{page.relative_to(ROOT)}: {path}")
    assert not missing, "pages name files the repository does not have:\n" + "\n".join(missing)
