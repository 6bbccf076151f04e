"""cookbook/evaluation/run_results.sh: every collabui command in it parses with today's CLI."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

from collabui.cli import build_parser
from tests.shared_data import AUTOWEBBENCH

SCRIPT = Path(__file__).resolve().parents[2] / "cookbook" / "evaluation" / "run_results.sh"
VALUES = {"C": "collabui", "M": "openai:smollm2@http://127.0.0.1:8011/v1", "OUT": "runs/results",
          "DATA": "../shared/data/autowebbench", "PORT": "8011"}


def _commands() -> list[list[str]]:
    text = SCRIPT.read_text(encoding="utf-8").replace("\\\n", " ")
    lines = [line.strip() for line in text.splitlines() if line.strip().startswith("$C ")]
    expanded = [re.sub(r"\$\{?(\w+)\}?", lambda m: VALUES[m.group(1)], line) for line in lines]
    return [shlex.split(line.split(">", 1)[0].rstrip("&").strip()) for line in expanded]


def test_the_script_is_valid_bash() -> None:
    assert subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True).returncode == 0


def test_every_command_parses() -> None:
    commands = _commands()
    assert len(commands) == 13, commands
    parser = build_parser()
    for argv in commands:
        assert argv[0] == "collabui"
        args = parser.parse_args(argv[1:])  # SystemExit (a test failure) on any unknown flag
        assert args.command in {"serve", "eval"}


def test_data_default_is_the_folder_the_tests_read() -> None:
    default = re.search(r"^DATA=\$\{DATA:-(.+)\}$", SCRIPT.read_text(encoding="utf-8"), re.M)
    assert default is not None
    # The script cds to the repository root first, so its default is relative to it.
    assert (SCRIPT.parents[2] / default.group(1)).resolve() == AUTOWEBBENCH.resolve()
    assert (AUTOWEBBENCH / "en" / "ind.json").is_file() and (AUTOWEBBENCH / "zh" / "ind.json").is_file()
