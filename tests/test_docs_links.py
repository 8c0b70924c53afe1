"""The user's reference holds together: every relative link in the README, the changelog and
``docs/`` names a file that exists, and every ``#anchor`` a heading of its page (GitHub's
rule: lower case, punctuation dropped, spaces to hyphens, a repeated heading numbered)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.*)$")


def anchors(page: Path) -> set[str]:
    """The anchors GitHub gives the headings of ``page`` (fenced code is not read)."""
    found: set[str] = set()
    fenced = False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
            continue
        m = None if fenced else HEADING.match(line)
        if m:
            slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            anchor, i = slug, 1
            while anchor in found:
                anchor, i = f"{slug}-{i}", i + 1
            found.add(anchor)
    return found


def broken_links(page: Path, root: Path = ROOT) -> list[str]:
    """The relative links of ``page`` whose file or anchor is missing (named from ``root``)."""
    broken = []
    for link in LINK.findall(page.read_text()):
        if link.startswith(("http://", "https://", "mailto:")):
            continue
        path, _, fragment = link.partition("#")
        target = page.parent / path if path else page
        if not target.exists():
            broken.append(f"{link} (no file {target.relative_to(root)})")
        elif fragment and target.suffix == ".md" and fragment not in anchors(target):
            broken.append(f"{link} (no heading of {target.name} has that anchor)")
    return broken


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_names_a_file_and_heading_that_exist(page: Path) -> None:
    assert broken_links(page) == []


def test_the_link_check_finds_a_missing_anchor_and_file(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "# A title, with punctuation\n\n## Twice\n\n## Twice\n\n"
        "[ok](#a-title-with-punctuation) [ok](#twice-1) [bad](#nowhere) [bad](other.md)\n"
    )
    assert broken_links(page, tmp_path) == [
        "#nowhere (no heading of page.md has that anchor)",
        "other.md (no file other.md)",
    ]
