"""``collabui bench``: time a team step against its bound and the naive way (flags from
:class:`collabui.bench.BenchSettings`)."""

from __future__ import annotations

import argparse
from typing import Any

from collabui.cli.flags import (
    add_config_flags,
    config_from_args,
    field_defaults,
    given_flags,
    refuse_ignored,
)

__all__ = ["add_commands", "run_command"]


def add_commands(sub: Any) -> None:
    """Register ``bench`` on the top-level subparsers."""
    from collabui.bench import BenchSettings

    parser = sub.add_parser("bench", help="time a team step against its bound and the naive way (local, vLLM)")
    add_config_flags(parser, BenchSettings)


def run_command(args: argparse.Namespace) -> int:
    """Run a parsed ``collabui bench``."""
    from collabui.bench import BenchSettings, run_bench

    _refuse_ignored_flags(args, BenchSettings)
    run_bench(config_from_args(BenchSettings, args))
    return 0


def _refuse_ignored_flags(args: argparse.Namespace, settings: type) -> None:
    """The rollout (``--episodes`` on ``--browsers``, ``--max-steps`` each) and ``--enforce-eager``
    belong to the vLLM backend: with ``--backend local``, or no rollout, they would be ignored."""
    if args.backend == "local":
        vllm_only = field_defaults(settings, ("episodes", "browsers", "max_steps", "enforce_eager"))
        refuse_ignored(given_flags(args, vllm_only), "with --backend local (they set the vLLM server and its "
                       "rollout); drop them or use --backend vllm|both")
    elif args.episodes == 0:
        refuse_ignored(given_flags(args, field_defaults(settings, ("browsers", "max_steps"))),
                       "with --episodes 0 (no rollout runs); drop them or give --episodes N")
