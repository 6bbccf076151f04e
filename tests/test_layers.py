"""The one-way layers of .importlinter hold (import-linter over the package as installed).

The editable install maps collabui.devices, .topologies and .training from their own folders;
import-linter walks one folder per package, so the test lays the package out as a wheel would
(from pyproject's package-dir) and checks that copy.
"""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT = Path(sys.executable).with_name("lint-imports")


def _installed_layout(target: Path) -> Path:
    # pyproject's `package-dir = { "collabui" = "sdk", ... }` (tomllib is 3.11+; we support 3.10).
    line = re.search(r"^package-dir = \{(.*)\}$", (ROOT / "pyproject.toml").read_text(), re.M)
    assert line, "pyproject.toml has no one-line package-dir table"
    mapping = dict(re.findall(r'"([\w.]+)" = "([\w/]+)"', line.group(1)))
    assert "collabui" in mapping and len(mapping) >= 4, mapping
    # Parents before children: the sub-packages land inside the copied root package.
    for package, folder in sorted(mapping.items(), key=lambda kv: kv[0].count(".")):
        dest = target.joinpath(*package.split("."))
        shutil.copytree(ROOT / folder, dest, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return target


def _lint(layout: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(layout)}
    return subprocess.run([str(LINT), "--config", str(ROOT / ".importlinter"), "--no-cache"],
                          cwd=layout, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def layout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not LINT.is_file():
        pytest.fail("import-linter is not installed; run `make setup` (it is in the test extra)")
    return _installed_layout(tmp_path_factory.mktemp("layers"))


def test_every_import_points_down_the_layers(layout: Path) -> None:
    result = _lint(layout)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "collabui layers KEPT" in result.stdout


def test_an_upward_import_breaks_the_contract(layout: Path, tmp_path: Path) -> None:
    broken = Path(shutil.copytree(layout, tmp_path / "broken"))
    vote = broken / "collabui" / "vote.py"
    vote.write_text(vote.read_text() + "\nfrom collabui.evaluation import stats  # upward\n")
    result = _lint(broken)
    assert result.returncode != 0
    assert "collabui.vote is not allowed to import collabui.evaluation" in result.stdout
