"""The READMEs name Python files by the path a reader of the repository can open."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
READMES = [ROOT / "README.md", *sorted((ROOT / "cookbook").rglob("README.md"))]
_PY_FILE = re.compile(r"[\w./-]+\.py\b")


@pytest.mark.parametrize("readme", READMES, ids=lambda p: str(p.relative_to(ROOT)))
def test_named_python_files_exist(readme: Path) -> None:
    named = set(_PY_FILE.findall(readme.read_text(encoding="utf-8")))
    # Package paths are not file paths here: collabui/... lives in sdk/, training/, ...
    missing = sorted(name for name in named if not (ROOT / name).is_file())
    assert not missing, f"{readme.relative_to(ROOT)} names {missing}, which are not files of the repository"
