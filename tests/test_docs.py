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


# ------------------------------------------------------------------------------------------ commands a page names

COMMAND_PAGES = [ROOT / "docs" / "teaching.md"]
"""Pages a reader follows command by command (a lesson): every command they name must run as written."""


def _code(text: str) -> list[str]:
    """Command lines of a page: each line of its fenced blocks (backslash continuations joined) and each code span."""
    blocks = re.findall(r"^```[^\n]*\n(.*?)^```", text, flags=re.M | re.S)
    lines = [line for block in blocks for line in block.replace("\\\n", " ").splitlines()]
    return lines + re.findall(r"`([^`\n]+)`", re.sub(r"^```.*?^```", "", text, flags=re.M | re.S))


_PREFIXES = ("/usr/bin/time", "-v", "nice", "env")
"""Words that may stand before the program of a command line, besides ``VAR=value`` settings."""


def documented_commands(text: str) -> list[tuple[str, list[str]]]:
    """('make' | 'rlvmr-nb', its arguments) of every command in the page's code, one per `&&`/`;`/`|` segment,
    a trailing `# comment` dropped; the program is the segment's first word after ``VAR=value`` settings and
    `_PREFIXES` (``/usr/bin/time -v rlvmr-nb ...``), so ``cd rlvmr-nb`` names no command."""
    import shlex

    found = []
    for line in _code(text):
        for segment in re.split(r"&&|;|\|", re.sub(r"(^|\s)#.*$", "", line)):
            try:
                words = shlex.split(segment)
            except ValueError:
                continue
            while words and (words[0] in _PREFIXES or re.match(r"^[A-Z_][A-Z0-9_]*=", words[0])):
                words = words[1:]
            if words and (words[0] in ("make", "rlvmr-nb") or words[0].endswith("/bin/rlvmr-nb")):
                found.append(("make" if words[0] == "make" else "rlvmr-nb", words[1:]))
    return found


def _make_targets() -> set[str]:
    return set(re.findall(r"^([A-Za-z0-9_.-]+):(?!=)", (ROOT / "Makefile").read_text(), flags=re.M))


def command_problems(text: str) -> list[str]:
    """What is wrong with the page's commands: a make target the Makefile lacks, an `rlvmr-nb` command or option
    the command line refuses, a repository file (``configs/…``, ``benchmarks/…``, ``scripts/…``) that is missing."""
    from rlvmr_nb.cli import build_parser

    problems = []
    for program, args in documented_commands(text):
        if program == "make":
            targets = [a for a in args if "=" not in a and not a.startswith("-")]
            problems += [f"make {t}: no such target" for t in targets if t not in _make_targets()]
            continue
        parser = build_parser(args[0] if args else None)
        try:
            _, unknown = parser.parse_known_args(args)
        except SystemExit as stop:  # --help exits 0; a refused command or option exits 2
            unknown = [] if stop.code == 0 else ["(refused)"]
        if unknown:
            problems.append(f"rlvmr-nb {' '.join(args)}: {' '.join(unknown)}")
    for path in re.findall(r"(?<![\w/])((?:configs|benchmarks|scripts|notebooks)/[\w./-]+\.(?:json|py|sh))", text):
        if not (ROOT / path).exists():
            problems.append(f"{path}: no such file")
    return problems


@pytest.mark.parametrize("page", COMMAND_PAGES, ids=[p.relative_to(ROOT).as_posix() for p in COMMAND_PAGES])
def test_every_command_a_lesson_names_exists(page):
    text = page.read_text()
    assert len(documented_commands(text)) >= 5, "the page's commands were not found: is the extraction broken?"
    assert command_problems(text) == []


def test_the_command_checker_sees_a_wrong_command(capsys):
    page = ("```bash\ncd rlvmr-nb && make lab          # JupyterLab\n"
            "rlvmr-nb lab-demo --config configs/lab/demo.json --out /tmp/d\n"
            "make lesson-all\n/usr/bin/time -v rlvmr-nb lab-demo --confgi x.json\n```\n"
            "Then `~/.cache/rlvmr-nb`, `rlvmr-nb teach` and `python benchmarks/no_such_script.py`; `make metalab` and "
            "`rlvmr-nb lab --help` are fine.\n")
    assert documented_commands(page) == [
        ("make", ["lab"]), ("rlvmr-nb", ["lab-demo", "--config", "configs/lab/demo.json", "--out", "/tmp/d"]),
        ("make", ["lesson-all"]), ("rlvmr-nb", ["lab-demo", "--confgi", "x.json"]), ("rlvmr-nb", ["teach"]),
        ("make", ["metalab"]), ("rlvmr-nb", ["lab", "--help"])]
    assert command_problems(page) == [
        "make lesson-all: no such target", "rlvmr-nb lab-demo --confgi x.json: --confgi x.json",
        "rlvmr-nb teach: (refused)", "benchmarks/no_such_script.py: no such file"]
