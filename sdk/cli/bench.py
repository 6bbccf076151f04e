"""``collabui bench``: time a team step against its bound and the naive way (flags from
:class:`collabui.bench.BenchSettings`)."""

from __future__ import annotations

import argparse
from typing import Any

from collabui.cli.flags import add_config_flags, config_from_args

__all__ = ["add_commands", "run_command"]


def add_commands(sub: Any) -> None:
    """Register ``bench`` on the top-level subparsers."""
    from collabui.bench import BenchSettings

    parser = sub.add_parser("bench", help="time a team step against its bound and the naive way (local, vLLM)")
    add_config_flags(parser, BenchSettings, helps={
        "team.seed": "seed of the page and of the DAG",
        "team.max_new_tokens": "generation budget per agent call (greedy)",
        "team.max_steps": "steps per rollout episode"})


def run_command(args: argparse.Namespace) -> int:
    """Run a parsed ``collabui bench``."""
    from collabui.bench import BenchSettings, run_bench

    run_bench(config_from_args(BenchSettings, args))
    return 0
