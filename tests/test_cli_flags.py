"""collabui.cli.flags: flags generated from a config dataclass, and the CLI's fast start."""

from __future__ import annotations

import argparse
import dataclasses
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Literal

import pytest

from collabui.cli.flags import (
    add_config_flags,
    config_argv,
    config_from_args,
    given_flags,
    nested_values,
    replace_given,
)


@dataclass(frozen=True, kw_only=True)
class _Toy:
    out_dir: str = field(metadata={"help": "where results go"})
    n_agents: int = field(default=4, metadata={"help": "agents n"})
    ratio: float = field(default=0.5, metadata={"help": "a float"})
    label: str | None = field(default=None, metadata={"help": "optional text"})
    verbose: bool = field(default=False, metadata={"help": "say more"})
    resample: bool = field(default=True, metadata={"help": "resample the DAG"})
    temps: tuple[float, ...] = field(default=(0.1, 0.3), metadata={"help": "per-agent temperatures"})
    names: tuple[str | None, ...] | None = field(default=None, metadata={"help": "per-agent names"})
    style: str = field(default="react", metadata={"help": "prompt style", "choices": ("react", "compact")})
    mode: Literal["fast", "slow"] = field(default="fast", metadata={"help": "speed"})
    old: int = field(default=1, metadata={"help": "renamed once", "aliases": ("--older",)})


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="toy", exit_on_error=False)
    assert add_config_flags(parser, _Toy) == [f.name for f in _Toy.__dataclass_fields__.values()]
    return parser


def test_parsed_flags_build_the_expected_config() -> None:
    args = _parser().parse_args(["--out", "o", "--agents", "2", "--ratio", "0.25", "--label", "x", "--verbose",
                                 "--no-resample", "--temps", "0.2,0.4", "0.6", "--names", "a,none",
                                 "--style", "compact", "--mode", "slow", "--older", "7"])
    assert config_from_args(_Toy, args) == _Toy(
        out_dir="o", n_agents=2, ratio=0.25, label="x", verbose=True, resample=False, temps=(0.2, 0.4, 0.6),
        names=("a", None), style="compact", mode="slow", old=7)
    assert config_from_args(_Toy, _parser().parse_args(["--out", "o"])) == _Toy(out_dir="o")
    assert config_from_args(_Toy, _parser().parse_args(["--out", "o"]), n_agents=3).n_agents == 3


def test_help_comes_from_the_metadata() -> None:
    text = _parser().format_help()
    for part in ("--agents AGENTS", "agents n (default 4)", "--resample, --no-resample", "{react,compact}",
                 "per-agent temperatures (default 0.1,0.3)", "--old OLD, --older OLD", "where results go"):
        assert part in " ".join(text.split()), part


@pytest.mark.parametrize(("argv", "flag"), [
    (["--out", "o", "--agents", "two"], "--agents"),
    (["--out", "o", "--temps", "0.1,hot"], "--temps"),
    (["--out", "o", "--style", "verbose"], "--style"),
    (["--out", "o", "--mode", "medium"], "--mode"),
    (["--agents", "2"], "--out"),
])
def test_bad_value_is_an_argparse_error_naming_the_flag(argv: list[str], flag: str,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser(prog="toy")
    add_config_flags(parser, _Toy)
    with pytest.raises(SystemExit) as info:
        parser.parse_args(argv)
    err = capsys.readouterr().err
    assert info.value.code == 2 and flag in err.splitlines()[-1], err


def test_only_skip_rename_and_unsupported_types() -> None:
    parser = argparse.ArgumentParser()
    assert add_config_flags(parser, _Toy, only={"n_agents", "verbose"}, rename={"n_agents": "team_size"}) == \
        ["n_agents", "verbose"]
    assert parser.parse_args(["--team-size", "5"]).n_agents == 5

    @dataclass
    class _Nested:
        options: dict[str, int] = field(default_factory=dict)

    with pytest.raises(TypeError, match="skip the field"):
        add_config_flags(argparse.ArgumentParser(), _Nested)
    assert add_config_flags(argparse.ArgumentParser(), _Nested, skip={"options"}) == []


def test_config_argv_reproduces_the_values() -> None:
    values = {"out_dir": "o", "n_agents": 2, "resample": False, "temps": (0.2, 0.4), "style": "react"}
    argv = config_argv(_Toy, values, always={"style"})
    assert argv == ["--out", "o", "--agents", "2", "--no-resample", "--temps", "0.2,0.4", "--style", "react"]
    assert config_from_args(_Toy, _parser().parse_args(argv)) == _Toy(out_dir="o", n_agents=2, resample=False,
                                                                     temps=(0.2, 0.4))


def test_the_cli_starts_without_heavy_libraries() -> None:
    """`collabui --help` and building every parser import no torch, transformers or Playwright."""
    code = ("import sys\nfrom collabui.cli import build_parser, main\nbuild_parser()\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in ('torch', 'transformers', 'playwright', 'trl', 'peft', 'datasets') "
            "if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[]"


@dataclass(frozen=True, kw_only=True)
class _Inner:
    n_agents: int = field(default=4, metadata={"help": "agents n"})
    max_steps: int = field(default=10, metadata={"help": "steps"})
    temps: tuple[float, ...] | None = field(default=None, metadata={"help": "temperatures"})
    owned: str = field(default="web", metadata={"help": "set by the outer config"})


@dataclass(frozen=True, kw_only=True)
class _Outer:
    tasks: str = field(default="easy", metadata={"help": "tasks"})
    team: _Inner = field(default_factory=lambda: _Inner(max_steps=3),
                         metadata={"help": "the team", "skip_flags": ("owned",)})
    verbose: bool = field(default=False, metadata={"help": "say more"})
    owned: str | None = field(default=None, metadata={"help": "the outer field named like a skipped inner one"})


def _outer_parser(**kw) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="outer", exit_on_error=False)
    add_config_flags(parser, _Outer, **kw)
    return parser


def test_a_nested_config_gets_its_fields_flags_under_their_usual_names() -> None:
    parser = _outer_parser(helps={"team.n_agents": "agents (nested)"})
    text = " ".join(parser.format_help().split())
    assert "--agents AGENTS agents (nested) (default 4)" in text and "--max-steps" in text
    assert "set by the outer config" not in text and "--team" not in text  # skip_flags: the outer --owned only
    args = parser.parse_args(["--agents", "2", "--temps", "0.1,0.2"])
    config = config_from_args(_Outer, args)
    # defaults of the nested flags come from the outer field's default instance (max_steps 3)
    assert config == _Outer(team=_Inner(n_agents=2, max_steps=3, temps=(0.1, 0.2)))
    assert config_from_args(_Outer, parser.parse_args([])) == _Outer()
    argv = config_argv(_Outer, {"tasks": "easy", "team": config.team}, always={"tasks", "team.max_steps"})
    assert argv == ["--tasks", "easy", "--agents", "2", "--max-steps", "3", "--temps", "0.1,0.2"]
    assert config_from_args(_Outer, parser.parse_args(argv)) == config


def test_nested_skip_defaults_and_one_meaning_per_flag() -> None:
    parser = _outer_parser(skip={"team.temps"}, defaults={"team.n_agents": None})
    args = parser.parse_args([])
    assert args.n_agents is None and not hasattr(args, "temps")
    assert nested_values(_Outer, "team", args, skip={"team.temps"}) == {"max_steps": 3}
    with pytest.raises(argparse.ArgumentError, match="conflicting option string: --agents"):
        add_config_flags(parser, _Toy, only={"n_agents"})  # --agents already means the team's


def test_replace_given_applies_only_typed_flags() -> None:
    stored = _Outer(tasks="click-button", team=_Inner(n_agents=2, max_steps=7))
    parser = _outer_parser(record=True)
    args = parser.parse_args(["--max-steps", "3", "--verbose"])  # 3 is the default: typed all the same
    assert given_flags(args) == {"max_steps", "verbose"}
    assert replace_given(stored, args) == _Outer(tasks="click-button", team=_Inner(n_agents=2, max_steps=3),
                                                 verbose=True)
    assert replace_given(stored, parser.parse_args([])) == stored
    assert replace_given(stored, parser.parse_args(["--owned", "x"])) == _Outer(
        tasks="click-button", team=_Inner(n_agents=2, max_steps=7), owned="x")  # team.owned untouched
    assert given_flags(_outer_parser().parse_args(["--verbose"])) == frozenset()  # record=False: nothing noted
    # A switch a stored run turned on can be turned off again (the default is False).
    loud = dataclasses.replace(stored, verbose=True)
    assert replace_given(loud, parser.parse_args(["--no-verbose"])) == stored
    assert _outer_parser().parse_known_args(["--no-verbose"])[1] == ["--no-verbose"]  # unrecorded: --verbose only
