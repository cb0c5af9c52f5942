"""Every relative link and image in README.md and docs/ resolves, anchors included, and the README stays a
front page of at most 250 lines without long paragraphs (issue 45).

Decisions: links inside fenced code blocks and inline code are not links; http(s) and mailto links are not
checked (no network); an anchor must equal a heading's GitHub slug (lower case, punctuation other than ``-``
and ``_`` dropped, spaces to ``-``, repeats numbered ``-1``, ``-2``).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README_MAX_LINES = 250
PARAGRAPH_MAX_CHARS = 600

_FENCE = re.compile(r"^ *(```|~~~).*?^ *\1", re.MULTILINE | re.DOTALL)
_INLINE_CODE = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _prose(text: str) -> str:
    return _INLINE_CODE.sub("", _FENCE.sub("", text))


def links(text: str) -> list[str]:
    """Targets of the Markdown links and images of a page, outside code."""
    return _LINK.findall(_prose(text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading keeps its text
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for heading in _HEADING.findall(_FENCE.sub("", text)):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        out.add(base if count == 0 else f"{base}-{count}")
    return out


def broken_links(page: Path) -> list[str]:
    """The links of ``page`` that do not resolve, each with the reason."""
    broken = []
    for target in links(page.read_text()):
        if re.match(r"^(https?:|mailto:)", target):
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no file {file}")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file.read_text()):
            broken.append(f"{target}: no heading with anchor #{anchor} in {file.name}")
    return broken


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    assert broken_links(page) == []


def test_the_pages_have_links_to_check():
    """The checker finds the README's links (contents, figure, docs) and every docs page is linked from it or
    from the docs index."""
    readme = links((ROOT / "README.md").read_text())
    assert "#install" in readme and "reports/study/figures/overview.png" in readme
    assert "docs/README.md" in readme and "docs/gpu.md" in readme
    index = {t.partition("#")[0] for t in links((ROOT / "docs" / "README.md").read_text())}
    readme_docs = {t.partition("#")[0].removeprefix("docs/") for t in readme if t.startswith("docs/")}
    for page in (ROOT / "docs").glob("*.md"):
        if page.name != "README.md":
            assert page.name in index | readme_docs, f"docs/{page.name} is linked from neither index"


def test_the_checker_reports_a_missing_file_and_a_missing_anchor(tmp_path):
    (tmp_path / "other.md").write_text("# Other page\n\n## A section: `code`, too\n")
    page = tmp_path / "page.md"
    page.write_text(
        "# Title\n\n[ok](other.md#a-section-code-too) [ok](#title) ![ok](other.md) [web](https://x.org/nope)\n"
        "[gone](missing.md) [bad](other.md#nope) [bad](#nope)\n\n```\n[code](not-a-link.md)\n```\n"
        "`[inline](not-a-link-either.md)`\n"
    )
    assert [b.split(":")[0] for b in broken_links(page)] == ["missing.md", "other.md#nope", "#nope"]


def test_slugs_follow_github():
    assert slug("A run's results in pandas") == "a-runs-results-in-pandas"
    assert slug("The 7B-9B models on a GPU") == "the-7b-9b-models-on-a-gpu"
    assert slug("How accurate `--dry-run` estimates are") == "how-accurate---dry-run-estimates-are"
    assert anchors("# Notes\n\n## Notes\n") == {"notes", "notes-1"}


def test_readme_is_at_most_250_lines():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, len(lines)


@pytest.mark.parametrize(
    "path",
    [
        "README.md",
        "experiments/README.md",
        *sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md")),
    ],
)
def test_no_paragraph_over_600_characters(path):
    """Prose paragraphs and list items of the README, experiments/README.md and docs/; code blocks and tables
    are not prose."""
    text = _FENCE.sub("", (ROOT / path).read_text())
    blocks = re.split(r"\n\s*\n|\n(?=- )", text)
    long = [b[:60] for b in blocks if not b.lstrip().startswith("|") and len(" ".join(b.split())) > 600]
    assert long == [], long
