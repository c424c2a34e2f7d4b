"""The documentation holds together: the README is a short front door, every link between
README.md and docs/ reaches a file and a heading that exist, and every long docs file opens
with a table of contents."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import ROOT

README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.DOTALL)
    return {anchor(line.lstrip("#")) for line in text.splitlines() if re.match(r"#{1,6} ", line)}


def links(path: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.DOTALL)
    return [target for target in LINK.findall(text) if not re.match(r"[a-z]+:", target)]


def test_anchor_follows_github() -> None:
    assert anchor("Scorecards in GitHub Actions (Classroom)") == "scorecards-in-github-actions-classroom"
    assert anchor("This repository's CI") == "this-repositorys-ci"
    assert anchor("Releases: the wheel and the `Gradescope` zip") == "releases-the-wheel-and-the-gradescope-zip"


@pytest.mark.parametrize("page", [README, *DOCS], ids=lambda p: p.name)
def test_every_link_reaches_a_file_and_a_heading(page: Path) -> None:
    found = links(page)
    assert found or page.name != "README.md"
    for target in found:
        file, _, fragment = target.partition("#")
        destination = (page.parent / file).resolve() if file else page
        assert destination.exists(), f"{page.name}: {target} (no such file)"
        if fragment and destination.suffix == ".md":
            assert fragment in anchors(destination), f"{page.name}: {target} (no such heading)"


def test_readme_is_a_front_door() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 300
    first_screen = "\n".join(text.splitlines()[:40])
    for path in ("docs/students.md", "docs/ta.md", "docs/instructors.md", "docs/maintainers.md"):
        assert path in first_screen, f"{path} is not on the README's first screen"
    # A table of contents: every section of the README is linked from its first screen.
    sections = [anchor(line[3:]) for line in text.splitlines() if line.startswith("## ")]
    unlisted = [s for s in sections if f"(#{s})" not in first_screen]
    assert not unlisted, f"sections the README's first screen does not link: {unlisted}"
    for doc in DOCS:
        assert f"docs/{doc.name}" in text, f"the README links nowhere to {doc.name}"


@pytest.mark.parametrize("page", [p for p in DOCS if len(p.read_text(encoding="utf-8").splitlines()) > 80], ids=lambda p: p.name)
def test_long_docs_open_with_a_table_of_contents(page: Path) -> None:
    lines = page.read_text(encoding="utf-8").splitlines()
    contents = [line for line in lines[1:12] if re.match(r"- \[[^\]]+\]\(#", line)]
    assert len(contents) >= 2, f"{page.name}: no table of contents after its title"
    targets = {m.group(1) for line in contents for m in [re.search(r"\(#([^)]+)\)", line)] if m}
    assert targets <= anchors(page), targets - anchors(page)
