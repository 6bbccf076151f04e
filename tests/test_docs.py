"""The READMEs name Python files by the path a reader of the repository can open."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
READMES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "cookbook").rglob("*.md"))]
_PY_FILE = re.compile(r"[\w./-]+\.py\b")


@pytest.mark.parametrize("readme", READMES, ids=lambda p: str(p.relative_to(ROOT)))
def test_named_python_files_exist(readme: Path) -> None:
    named = set(_PY_FILE.findall(readme.read_text(encoding="utf-8")))
    # Package paths are not file paths here: collabui/... lives in sdk/, training/, ...
    missing = sorted(name for name in named if not (ROOT / name).is_file())
    assert not missing, f"{readme.relative_to(ROOT)} names {missing}, which are not files of the repository"


_LINK = re.compile(r"\]\(([^)\s]+)\)")


def _anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@pytest.mark.parametrize("readme", READMES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(readme: Path) -> None:
    """Links between the READMEs and docs/ (and to images) land on a file, and an anchor on a heading of it."""
    broken = []
    for target in _LINK.findall(readme.read_text(encoding="utf-8")):
        if "://" in target or target.startswith("mailto:"):
            continue
        path, _, anchor = target.partition("#")
        file = (readme.parent / path).resolve() if path else readme
        if not file.is_file():
            broken.append(target)
        elif anchor and file.suffix == ".md":
            headings = re.findall(r"^#+ (.+)$", file.read_text(encoding="utf-8"), flags=re.MULTILINE)
            if anchor not in {_anchor(h) for h in headings}:
                broken.append(target)
    assert not broken, f"{readme.relative_to(ROOT)} links to {broken}, which do not resolve"


def test_experiment_log_lists_every_section_in_order() -> None:
    """EXPERIMENTS.md's contents list is its sections, in order: a section added without its line there fails."""
    text = (ROOT / "cookbook" / "cpu_recipe" / "EXPERIMENTS.md").read_text(encoding="utf-8")
    contents, _, body = text.partition("\n## Contents\n")[2].partition("\n## ")
    listed = re.findall(r"^- \[.+\]\(#([^)]+)\)$", contents, flags=re.MULTILINE)
    sections = [_anchor(h) for h in re.findall(r"^## (.+)$", "## " + body, flags=re.MULTILINE)]
    assert listed == sections
