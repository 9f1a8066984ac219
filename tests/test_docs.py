"""The README and the pages under docs/ hold together: every relative link (a file, or a heading of a
Markdown file) leads somewhere that exists, and the README stays a first visit's read."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
README_MAX_LINES = 250

LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)|(?:src|href)=\"([^\"]+)\"")
"""Inline Markdown links and images, and the src/href of HTML tags."""


def _without_code(text: str) -> str:
    """The page with fenced blocks and `code spans` blanked: a link written as code is an example, not a link."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    return re.sub(r"`[^`\n]*`", "", text)


def _anchor(heading: str) -> str:
    """GitHub's id of a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    return {_anchor(m.group(1)) for m in re.finditer(r"^#+\s+(.*?)\s*#*$", _without_code(page.read_text()), re.M)}


def _relative_links(page: Path) -> list[str]:
    targets = [a or b for a, b in LINK.findall(_without_code(page.read_text()))]
    return [t for t in targets if not re.match(r"[a-z][a-z0-9+.-]*:", t, re.I)]  # http:, mailto: ... are not ours


@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(ROOT).as_posix() for p in PAGES])
def test_every_relative_link_leads_to_a_file_or_heading_that_exists(page):
    broken = []
    for target in _relative_links(page):
        path, _, fragment = unquote(target).partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(target)
        elif fragment and file.suffix == ".md" and fragment not in _anchors(file):
            broken.append(target)
    assert broken == [], f"{page.relative_to(ROOT)}: links to nothing: {broken}"


def test_the_readme_is_a_first_visit_s_read():
    assert len((ROOT / "README.md").read_text().splitlines()) <= README_MAX_LINES


def test_the_link_checker_sees_a_broken_link(tmp_path):
    page = tmp_path / "page.md"
    (tmp_path / "there.md").write_text("# A heading, with punctuation\n")
    page.write_text("[ok](there.md#a-heading-with-punctuation) [gone](missing.md) `[code](not-a-link.md)` "
                    "[web](https://example.org) [bad anchor](there.md#nowhere)\n")
    assert _relative_links(page) == ["there.md#a-heading-with-punctuation", "missing.md", "there.md#nowhere"]
    assert "a-heading-with-punctuation" in _anchors(tmp_path / "there.md")
