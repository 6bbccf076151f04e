"""``collabui train marl``: iterative MARL from the command line; flags generated from MARLConfig.

    collabui train marl --env miniwob --train-tasks click-button,click-link --eval-tasks focus-text \\
        --iterations 1 --episodes 1 --agents 2 --rounds 1 --dpo max_steps=1 --out runs/marl

DPO hyperparameters are ``--dpo KEY=VALUE`` (repeatable; any AgentDPOConfig / TRL DPOConfig
field; a comma-separated VALUE is a list), parsed by transformers' HfArgumentParser so they get
the same types as ``collabui train dpo --KEY VALUE``. TRL is imported only when the command runs.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import Any

from collabui.errors import ConfigError
from collabui.training.marl import MARLConfig

__all__ = ["add_marl_command", "run_marl_command", "marl_config_from_args", "parse_dpo_options"]

# Flag names that differ from the field names (shared with `collabui run` / the examples).
_FLAG_NAMES = {"n_agents": "agents", "episodes_per_task": "episodes",
               "eval_episodes_per_task": "eval-episodes", "out_dir": "out"}


def _flag(name: str) -> str:
    return "--" + _FLAG_NAMES.get(name, name).replace("_", "-")


def add_marl_command(tsub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``marl`` on the ``collabui train`` subparsers; return its parser."""
    marl = tsub.add_parser("marl", help="iterative MARL: rollouts, critic, pairs, per-agent DPO, eval",
                           epilog="Resumes when --out holds an unfinished run with the same options.")
    defaults = MARLConfig()
    for f in dataclasses.fields(MARLConfig):
        help_text, default = f.metadata.get("help", ""), getattr(defaults, f.name)
        if f.name == "dpo":
            marl.add_argument("--dpo", dest="dpo", action="append", default=[], metavar="KEY=VALUE",
                              help=help_text)
        elif isinstance(default, bool):
            marl.add_argument(_flag(f.name), dest=f.name, action=argparse.BooleanOptionalAction,
                              default=default, help=help_text)
        elif isinstance(default, tuple):
            marl.add_argument(_flag(f.name), dest=f.name, default=",".join(default),
                              help=f"{help_text} (default {','.join(default)})")
        else:
            marl.add_argument(_flag(f.name), dest=f.name, type=type(default), default=default,
                              help=f"{help_text} (default {default})")
    marl.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    return marl


def parse_dpo_options(items: list[str]) -> dict[str, Any]:
    """``["max_steps=1", "beta=0.2"]`` -> ``{"max_steps": 1, "beta": 0.2}``, typed like the
    AgentDPOConfig fields.

    Raises:
        ConfigError: not KEY=VALUE, an unknown field, or a bad value.
    """
    if not items:
        return {}
    from transformers import HfArgumentParser

    from collabui.training.dpo import AgentDPOConfig

    argv, keys = [], []
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip().lstrip("-").replace("-", "_")
        if not sep or not key:
            raise ConfigError(f"--dpo takes KEY=VALUE (e.g. --dpo max_steps=5), got {item!r}")
        if key == "output_dir":
            raise ConfigError("--dpo output_dir is set by the run (OUT/iter{k}/trl); drop it")
        keys.append(key)
        argv += [f"--{key}", *(value.split(",") if "," in value else [value])]
    try:
        (config,) = HfArgumentParser(AgentDPOConfig).parse_args_into_dataclasses(
            [*argv, "--output_dir", "unused"])
    except (SystemExit, ValueError):  # argparse exits; HfArgumentParser raises on leftovers
        raise ConfigError(f"bad --dpo option in {' '.join(items)}; use fields of TRL's DPOConfig") from None
    return {key: _plain(getattr(config, key)) for key in keys}


def _plain(value: Any) -> Any:
    """JSON-friendly values (enums to their value), so state.json compares equal on a rerun."""
    value = getattr(value, "value", value)
    return list(value) if isinstance(value, tuple) else value


def marl_config_from_args(args: argparse.Namespace) -> MARLConfig:
    """Build the MARLConfig of parsed ``train marl`` arguments."""
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(MARLConfig)}
    values["dpo"] = parse_dpo_options(list(args.dpo or []))
    return MARLConfig(**values)


def run_marl_command(args: argparse.Namespace) -> int:
    """Run ``collabui train marl``; print the report's path and success curve on stdout."""
    from collabui.training.marl import run_marl

    config = marl_config_from_args(args)
    report = run_marl(config, progress=not args.quiet)
    print(json.dumps({"report": f"{report.out_dir}/marl_report.json",
                      "held_out_success": dict(report.success_curve()),
                      "complete": report.complete}))
    if not report.complete:
        print("the run is incomplete; rerun the same command to continue", file=sys.stderr)
    return 0
