"""``collabui bench``: time a team step against its bound and the naive way (flags from
:class:`collabui.bench.BenchSettings`)."""

from __future__ import annotations

import argparse
from typing import Any

from collabui.cli.flags import (
    add_config_flags,
    changed_flags,
    config_from_args,
    field_defaults,
    refuse_ignored,
)

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

    _refuse_ignored_flags(args, BenchSettings)
    run_bench(config_from_args(BenchSettings, args))
    return 0


def _refuse_ignored_flags(args: argparse.Namespace, settings: type) -> None:
    """The rollout (``--episodes`` on ``--browsers``, ``--max-steps`` each) and ``--enforce-eager``
    belong to the vLLM backend: with ``--backend local``, or no rollout, they would be ignored."""
    # --max-steps is the team's (team.max_steps), so its default is the bench team's.
    rollout = {**field_defaults(settings, ("browsers",)), "max_steps": settings().team.max_steps}
    if args.backend == "local":
        vllm_only = {**field_defaults(settings, ("episodes", "enforce_eager")), **rollout}
        refuse_ignored(changed_flags(args, vllm_only), "with --backend local (they set the vLLM server and its "
                       "rollout); drop them or use --backend vllm|both")
    elif args.episodes == 0:
        refuse_ignored(changed_flags(args, rollout),
                       "with --episodes 0 (no rollout runs); drop them or give --episodes N")
