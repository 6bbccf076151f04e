"""``collabui eval``: evaluation harnesses and reports.

``collabui eval miniwob``       success rates on MiniWoB++ tasks (suites ``easy`` and ``all``)
``collabui eval autowebbench``  step success on AutoWebBench records (registered when present)
``collabui eval compare A B``   per-metric deltas between two results files
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import Any

__all__ = ["add_eval_command", "run_eval_command", "add_page_options"]


def add_eval_command(subparsers: Any) -> None:
    """Add ``eval`` and its subcommands to the top-level ``collabui`` subparsers."""
    ev = subparsers.add_parser("eval", help="evaluate a team or a baseline; compare results")
    sub = ev.add_subparsers(dest="eval_command", required=True)
    _add_miniwob(sub)
    _add_compare(sub)
    _add_autowebbench(sub)


#: TeamConfig flags of `collabui run` that `eval miniwob` passes through as team_options.
_TEAM_OPTIONS = ("temperatures", "max_observation_chars", "screenshots")
GUIDED_HELP = ("constrain answers to the action space's JSON schema (vLLM structured outputs on "
               "openai: servers, llguidance for local models); baselines ignore it")


def _add_miniwob(sub: Any) -> None:
    from collabui.cli import _add_team_options

    # "resolve": the evaluation's own flags below replace some of TeamConfig's generated ones.
    p = sub.add_parser("miniwob", conflict_handler="resolve",
                       help="success rate per MiniWoB++ task and overall (95%% Wilson CIs)")
    _add_team_options(p, skip={"action_space"})  # --mobile decides it
    p.add_argument("--tasks", default="easy", help="a suite (easy, all) or comma-separated task names (default easy)")
    p.add_argument("--episodes", type=int, default=3, help="episodes per task (default 3)")
    p.add_argument("--seed", type=int, default=0, help="seed of the episodes and of the DAG (default 0)")
    p.add_argument("--agents", dest="agents", type=int, default=None, help="agents n (default 4; 1 for random/lexical)")
    p.add_argument("--rounds", type=int, default=None, help="rounds m (default 3; 1 for random/lexical)")
    p.add_argument("--topology", default="random", help="message DAG (default random)")
    p.add_argument("--model", default="smollm2",
                   help="smollm2 | smollm2-trained | trained:FOLDER | hf:PATH | openai:MODEL@URL | "
                   "random[:SEED] | lexical (default smollm2)")
    p.add_argument("--adapters", default=None, help="folder of per-agent LoRA adapters agent0/, agent1/, ...")
    p.add_argument("--mobile", action="store_true", help="the phone-shaped tasks (miniwob-mobile/<task>)")
    p.add_argument("--max-steps", type=int, default=10, help="environment steps per episode (default 10)")
    p.add_argument("--concurrency", type=int, default=1, help="episodes (browsers) at once (default 1)")
    p.add_argument("--prompt-style", default="auto",
                   help="agents' prompt: react | compact | trained | auto (default: the style a trained "
                   "team was trained for, react for other models)")
    p.add_argument("--max-new-tokens", type=int, default=64, help="generation budget per agent call (default 64)")
    p.add_argument("--guided-json", action="store_true", help=GUIDED_HELP)
    add_page_options(p)
    p.add_argument("--out", required=True, help="run folder: results.json, summary.md, traces/, episodes.jsonl")
    p.add_argument("--plot", action="store_true", help="also write plot.png (needs matplotlib)")


def add_page_options(parser: argparse.ArgumentParser) -> None:
    """``--element-format`` and ``--shuffle-elements``: how web pages are shown to the agents."""
    from collabui.devices.simplify import ELEMENT_FORMATS

    parser.add_argument("--element-format", choices=("auto", *ELEMENT_FORMATS), default="auto",
                        help="page text: html (<button[B]| Ok>) or text-first (one line per item, "
                             'button "Ok" [B]; fewer tokens); default auto: what a trained model '
                             "(smollm2-trained, trained:FOLDER) learned, else html")
    parser.add_argument("--shuffle-elements", action="store_true",
                        help="shuffle sibling elements and draw element ids at random (seeded by "
                             "the episode), so no policy wins by position habits")


def _add_compare(sub: Any) -> None:
    p = sub.add_parser("compare", help="print B - A for every metric two results files share")
    p.add_argument("a", help="results.json of A (the reference)")
    p.add_argument("b", help="results.json of B")
    p.add_argument("--out", default=None, help="also write the table: FILE.md (Markdown) or FILE.json")
    p.add_argument("--plot", default=None, metavar="FILE.png",
                   help="also draw A and B side by side per task/action type (needs matplotlib)")


def _add_autowebbench(sub: Any) -> None:
    # Written in parallel by another module owner: register it when it exists, and let any
    # other import failure inside it surface.
    try:
        from collabui.evaluation.autowebbench_cli import add_autowebbench_command
    except ModuleNotFoundError as exc:
        if exc.name != "collabui.evaluation.autowebbench_cli":
            raise
        return
    add_autowebbench_command(sub)


def run_eval_command(args: argparse.Namespace) -> int:
    """Dispatch a parsed ``collabui eval ...``; return the exit code."""
    if args.eval_command == "miniwob":
        return _cmd_miniwob(args)
    if args.eval_command == "compare":
        return _cmd_compare(args)
    if args.eval_command == "autowebbench":
        from collabui.evaluation.autowebbench_cli import run_autowebbench_command

        return int(run_autowebbench_command(args) or 0)
    raise SystemExit(f"unknown eval command {args.eval_command!r}")  # argparse prevents this


def _miniwob_command(args: argparse.Namespace) -> str:
    """The full command line with every effective value, so results say how to reproduce them."""
    parts = ["collabui", "eval", "miniwob", "--tasks", args.tasks, "--episodes", str(args.episodes),
             "--seed", str(args.seed), "--model", args.model, "--topology", args.topology,
             "--max-steps", str(args.max_steps), "--concurrency", str(args.concurrency), "--out", args.out]
    for flag, value in (("--agents", args.agents), ("--rounds", args.rounds), ("--adapters", args.adapters)):
        if value is not None:
            parts += [flag, str(value)]
    if args.prompt_style != "auto":
        parts += ["--prompt-style", args.prompt_style]
    if args.max_new_tokens != 64:
        parts += ["--max-new-tokens", str(args.max_new_tokens)]
    if args.element_format != "auto":
        parts += ["--element-format", args.element_format]
    for name, value in _team_options(args).items():
        flag = "--" + name.replace("_", "-")
        parts += [flag] if value is True else [flag, ",".join(map(str, value)) if isinstance(value, tuple) else str(value)]
    parts += [flag for flag, on in (("--guided-json", args.guided_json), ("--mobile", args.mobile),
                                    ("--shuffle-elements", args.shuffle_elements),
                                    ("--plot", args.plot)) if on]
    return shlex.join(parts)


def _team_options(args: argparse.Namespace) -> dict[str, Any]:
    """The pass-through TeamConfig flags the user set (those left at their defaults are omitted)."""
    from collabui.config import TeamConfig

    defaults = TeamConfig()
    return {name: getattr(args, name) for name in _TEAM_OPTIONS
            if getattr(args, name) is not None and getattr(args, name) != getattr(defaults, name)}


def _cmd_miniwob(args: argparse.Namespace) -> int:
    from collabui.evaluation.miniwob import MiniWoBEvalConfig, evaluate_miniwob

    config = MiniWoBEvalConfig(tasks=args.tasks, episodes=args.episodes, seed=args.seed, model=args.model,
                               adapters=args.adapters, n_agents=args.agents, rounds=args.rounds,
                               topology=args.topology, mobile=args.mobile, max_steps=args.max_steps,
                               concurrency=args.concurrency, prompt_style=args.prompt_style,
                               max_new_tokens=args.max_new_tokens, guided_json=args.guided_json,
                               element_format=args.element_format,
                               shuffle_elements=args.shuffle_elements,
                               team_options=_team_options(args))
    evaluate_miniwob(config, args.out, plot=args.plot, command=_miniwob_command(args))
    print(Path(args.out) / "summary.md")
    return 0


def _cmd_compare(args: argparse.Namespace) -> int:
    from collabui.evaluation.report import compare, load_results, render_compare, write_compare

    a, b = load_results(args.a), load_results(args.b)
    rows = compare(a, b)
    label_a = (a.get("system") or {}).get("label") or "A"
    label_b = (b.get("system") or {}).get("label") or "B"
    print(f"A = {label_a} ({args.a})\nB = {label_b} ({args.b})")
    sys.stdout.write(render_compare(rows, "A", "B"))
    if not rows:
        print("no metric is shared by A and B (different harnesses?)", file=sys.stderr)
    if args.out:
        print(f"written {write_compare(rows, args.out, a=a, b=b)}", file=sys.stderr)
    if args.plot:
        from collabui.evaluation.report import plot_results

        print(f"written {plot_results([a, b], args.plot)}", file=sys.stderr)
    return 0
