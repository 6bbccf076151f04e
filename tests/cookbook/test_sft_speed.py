"""The SFT speed benchmark's input checks (its timings are a benchmark's, not a test's)."""

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "cookbook" / "cpu_recipe" / "sft_speed.py"


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120)


def test_a_folder_without_demonstrations_is_refused_in_one_line(tmp_path):
    done = _run("--demo", str(tmp_path))
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "no steps.jsonl" in done.stderr


def test_fewer_than_two_steps_is_refused(tmp_path):
    (tmp_path / "steps.jsonl").write_text("")
    done = _run("--demo", str(tmp_path), "--steps", "1")
    assert done.returncode == 2 and "--steps must be >= 2" in done.stderr


def test_an_unknown_comparison_is_refused_naming_the_choices(tmp_path):
    (tmp_path / "steps.jsonl").write_text("")
    done = _run("--demo", str(tmp_path), "--compare", "speed")
    assert done.returncode == 2 and "'head', 'precision'" in done.stderr
