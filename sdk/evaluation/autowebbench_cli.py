"""``collabui eval autowebbench``: run a model (single agent or team) on AutoWebBench records.

Registered by the ``collabui eval`` parser (``collabui.eval_cli``) through
:func:`add_autowebbench_command`; dispatched to :func:`run_autowebbench_command`.

Team options are the flags ``collabui run`` generates from ``TeamConfig`` (``--agents``,
``--rounds``, ``--topology``, ``--seed``, ``--temperatures``, ``--prompt-style``...), except
``--adapters``, which here is a folder of per-agent LoRA adapters (``agent0/``, ``agent1/``...)
as in ``collabui eval miniwob``. As there, ``--agents``/``--rounds`` default to 1x1 for the
``random``/``lexical`` baselines and to the paper's 4x3 for models.
"""

from __future__ import annotations

import argparse
import dataclasses
import shlex
import sys
from pathlib import Path
from typing import Any

from collabui.errors import ConfigError

__all__ = ["add_autowebbench_command", "run_autowebbench_command"]

_BASELINES = ("random", "lexical")


def add_autowebbench_command(eval_subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``autowebbench`` subcommand to ``collabui eval``'s subparsers; return its parser."""
    from collabui.cli import _add_team_options
    from collabui.eval_cli import GUIDED_HELP

    # "resolve": our --adapters (a folder) replaces TeamConfig's per-agent adapter names flag.
    parser = eval_subparsers.add_parser(
        "autowebbench", conflict_handler="resolve",
        help="step success on AutoWebBench/Mind2Web-format records",
        description="Run a single agent or a team on each {source, target} record; score the "
                    "published step success (function + element id, element records) and strict "
                    "exact match (all records), per action type.")
    _add_team_options(parser, skip={"action_space"})  # records are web pages
    parser.add_argument("--data", required=True,
                        help="JSON list of {source, target} records, e.g. ../shared/data/autowebbench/en/ind.json")
    parser.add_argument("--model", default="smollm2",
                        help="smollm2 | hf:PATH | openai:MODEL@URL | random[:SEED] | lexical (default smollm2)")
    parser.add_argument("--adapters", default=None, help="folder of per-agent LoRA adapters agent0/, agent1/, ...")
    parser.add_argument("--agents", dest="n_agents", type=int, default=None,
                        help="agents n (default 4; 1 for random/lexical)")
    parser.add_argument("--rounds", type=int, default=None, help="rounds m (default 3; 1 for random/lexical)")
    parser.add_argument("--out", required=True,
                        help="run folder (predictions.jsonl, results.json, summary.md); the same folder resumes")
    parser.add_argument("--start", type=int, default=0, help="first record, 0-based (default 0)")
    parser.add_argument("--limit", type=int, default=None, help="at most this many records (default all)")
    parser.add_argument("--guided-json", action="store_true", help=GUIDED_HELP)
    parser.add_argument("--quiet", action="store_true", help="no per-record progress on stderr")
    return parser


def _config(args: argparse.Namespace):
    from collabui.cli import team_config_from_args

    baseline = args.model.strip().split(":")[0] in _BASELINES
    values = dict(vars(args))
    values["n_agents"] = args.n_agents or (1 if baseline else 4)
    values["rounds"] = args.rounds or (1 if baseline else 3)
    values["adapters"] = None  # per-agent names come from the adapters folder, below
    values["action_space"] = "web"
    return team_config_from_args(argparse.Namespace(**values))


def _command(args: argparse.Namespace) -> str:
    parts = ["collabui", "eval", "autowebbench", "--data", args.data, "--model", args.model,
             "--agents", str(args.n_agents), "--rounds", str(args.rounds), "--topology", str(args.topology),
             "--seed", str(args.seed), "--out", args.out, "--start", str(args.start)]
    for flag, value in (("--limit", args.limit), ("--adapters", args.adapters)):
        if value is not None:
            parts += [flag, str(value)]
    return shlex.join(parts + (["--guided-json"] if args.guided_json else []))


def run_autowebbench_command(args: argparse.Namespace) -> int:
    """Run the evaluation described by ``args``; print the summary path; return the exit code.

    Raises:
        ConfigError: bad data file, range or options (all checked before a model loads).
    """
    from collabui.evaluation.autowebbench import SUMMARY_FILE, evaluate_autowebbench, load_records
    from collabui.evaluation.miniwob import load_system_model, system_label
    from collabui.team import CollabAgentTeam, _resolve_topology

    config = _config(args)
    _resolve_topology(config)
    records = load_records(args.data)  # a bad file fails before the model loads
    if not 0 <= args.start < len(records) or (args.limit is not None and args.limit < 1):
        raise ConfigError(f"--start must be in [0, {len(records) - 1}] and --limit >= 1; "
                          f"got --start {args.start} --limit {args.limit}")
    model, names = load_system_model(args.model, args.adapters, config.n_agents,
                                     guided_json="web" if args.guided_json else None)
    if names is not None:
        config = dataclasses.replace(config, adapters=names)
    args.n_agents, args.rounds = config.n_agents, config.rounds
    try:
        team = CollabAgentTeam(model, config=config)
        system = {"model": args.model, "adapters": args.adapters, "n_agents": config.n_agents,
                  "rounds": config.rounds, "topology": str(config.topology), "seed": config.seed,
                  "label": system_label(args.model, config.n_agents, config.rounds,
                                        str(config.topology), args.adapters, guided=args.guided_json),
                  "temperatures": [config.agent_temperature(i) for i in range(config.n_agents)],
                  "prompt_style": config.prompt_style, "max_new_tokens": config.max_new_tokens,
                  "max_observation_chars": config.max_observation_chars}
        if args.guided_json:  # only when on: folders of earlier (unguided) runs still resume
            system["guided_json"] = True
        evaluate_autowebbench(args.data, team, args.out, start=args.start, limit=args.limit,
                              system=system, command=_command(args),
                              progress=None if args.quiet else sys.stderr)
    finally:
        model.close()
    print(Path(args.out) / SUMMARY_FILE)
    return 0
