"""``collabui train ...``: label traces with a critic, build preference pairs, run per-agent DPO.

    collabui train label --traces runs/traces --critic outcome --out runs/labels.jsonl
    collabui train pairs --traces runs/traces --labels runs/labels.jsonl --adversary rule --out runs/pairs.jsonl
    collabui train dpo --pairs runs/pairs.jsonl --model smollm2 --out runs/adapters [--max_steps 20 ...]
    collabui train marl --env miniwob --train-tasks click-button,click-link --eval-tasks focus-text --iterations 2
    collabui train synth --envs miniwob/click-button --episodes 5 --out runs/stage1
    collabui train sft --data runs/stage1/instruction.jsonl --model smollm2 --out runs/sft [--merge]
    collabui train demonstrate --out runs/demo --minutes 10

``dpo`` takes every ``AgentDPOConfig`` (TRL ``DPOConfig``) field as a flag, so the CLI and the
API share one dataclass.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

__all__ = ["add_train_commands", "run_train_command"]


def add_train_commands(sub: argparse._SubParsersAction) -> None:
    """Register ``train`` and its subcommands on the top-level ``collabui`` parser."""
    train = sub.add_parser("train", help="train the team from recorded traces")
    tsub = train.add_subparsers(dest="train_command", required=True)
    label = tsub.add_parser("label", help="score every action matrix with a critic (reward matrices)")
    label.add_argument("--traces", nargs="+", required=True, help="trace files or folders of .jsonl traces")
    label.add_argument("--critic", default="outcome", help="outcome | reference | oracle | verified | "
                       "llm:<model spec> (default outcome)")
    label.add_argument("--out", required=True, help="labels JSONL (appended to; finished steps are skipped)")
    label.add_argument("--no-resume", action="store_true", help="relabel everything")
    pairs = tsub.add_parser("pairs", help="build per-agent preference pairs (rewarded vs adversarial)")
    pairs.add_argument("--traces", nargs="+", required=True)
    pairs.add_argument("--labels", required=True)
    pairs.add_argument("--adversary", default="rule", help="rule | llm:<model spec> (invented mistakes) | own "
                       "(the agents' own wrong proposals against verified-right answers; default rule)")
    pairs.add_argument("--critic", default=None, help="use the labels of this critic when the file holds several")
    pairs.add_argument("--out", required=True, help="pairs JSONL")
    pairs.add_argument("--seed", type=int, default=0)
    dpo = tsub.add_parser("dpo", help="train one LoRA adapter per agent with DPO",
                          epilog="Any AgentDPOConfig / TRL DPOConfig field is accepted, e.g. --max_steps 20 --beta 0.1")
    dpo.add_argument("--pairs", required=True)
    dpo.add_argument("--model", default="smollm2", help="base model: smollm2 | hf:PATH")
    dpo.add_argument("--out", required=True, help="adapters go to OUT/agent{i}/")
    dpo.add_argument("--agents", default=None, help="comma-separated agents to train (default all)")
    dpo.add_argument("--init-adapters", default=None, help="continue from these adapters (iterative DPO)")
    dpo.add_argument("--plot", action="store_true", help="also write OUT/dpo_report.png")
    report = tsub.add_parser("report", help="one report (JSON, Markdown, PNG) of a training run folder: "
                             "evaluations, SFT, DPO and MARL results found under it")
    report.add_argument("run", help="the run folder (the --out of train sft|dpo|marl, or the recipe's)")
    report.add_argument("--out", default=None, help="where training_report.* go (default: the run folder)")
    report.add_argument("--no-plot", action="store_true", help="skip the PNG")
    demo = tsub.add_parser("demonstrate", help="search verified trajectories on MiniWoB++ tasks "
                           "(the environment's reward keeps only what works) into a dataset")
    demo.add_argument("--out", required=True, help="folder: steps.jsonl, dataset/, README.md (resumable)")
    demo.add_argument("--tasks", default=None, help="comma-separated MiniWoB++ tasks (default: the "
                      "training list, collabui.training.task_lists.TRAIN_TASKS)")
    demo.add_argument("--seeds", type=int, default=200, help="seeds per task (default 200)")
    demo.add_argument("--seed-start", type=int, default=1000, help="first seed (default 1000)")
    demo.add_argument("--renderings", type=int, default=3, help="observations written per verified step")
    demo.add_argument("--no-shuffle", action="store_true", help="keep document order and A, B, C ids")
    demo.add_argument("--workers", type=int, default=4, help="browsers searching in parallel (default 4)")
    demo.add_argument("--minutes", type=float, default=10.0, help="time budget (default 10)")
    demo.add_argument("--budget", type=int, default=40, help="actions tried per search (default 40)")
    from collabui.training.marl_cli import add_marl_command
    from collabui.training.stage1_cli import add_synth_sft_commands

    add_marl_command(tsub)
    add_synth_sft_commands(tsub)


def _base_dir(spec: str) -> Path:
    from collabui.errors import ConfigError

    if spec == "smollm2":
        from collabui.models.embedded import embedded_model_dir

        return embedded_model_dir()
    if spec.startswith("hf:"):
        return Path(spec[3:]).expanduser()
    raise ConfigError(f"training needs a local base model: use smollm2 or hf:PATH, not {spec!r}")


def _label(args: argparse.Namespace) -> int:
    from collabui.training.critic import make_critic
    from collabui.training.labels import label_traces

    stats = label_traces(args.traces, make_critic(args.critic), args.out, resume=not args.no_resume)
    print(json.dumps(stats.to_dict() if hasattr(stats, "to_dict") else vars(stats), default=str))
    return 0


def _pairs(args: argparse.Namespace) -> int:
    from collabui.training.adversary import LLMAdversary, RuleAdversary
    from collabui.training.pairs import build_pairs, pair_stats, save_pairs

    if args.adversary == "own":
        from collabui.training.mistake_pairs import build_mistake_pairs

        ds = build_mistake_pairs(args.traces, args.labels, critic=args.critic)
        path = save_pairs(ds, args.out)
        print(json.dumps({"pairs": len(ds), "path": str(path), **pair_stats(ds)}, default=str))
        return 0
    if args.adversary == "rule":
        adversary = RuleAdversary(seed=args.seed)
    elif args.adversary.startswith("llm:"):
        from collabui.models.spec import load_model

        adversary = LLMAdversary(load_model(args.adversary[4:]), fallback=RuleAdversary(seed=args.seed))
    else:
        from collabui.errors import ConfigError

        raise ConfigError(f"unknown adversary {args.adversary!r}; use rule, own or llm:<model spec>")
    ds = build_pairs(args.traces, args.labels, adversary, critic=args.critic, progress=True)
    path = save_pairs(ds, args.out)
    print(json.dumps({"pairs": len(ds), "path": str(path), **pair_stats(ds)}, default=str))
    return 0


def _dpo(args: argparse.Namespace, rest: list[str]) -> int:
    from transformers import HfArgumentParser

    from collabui.errors import ConfigError
    from collabui.training.dpo import AgentDPOConfig, train_agents_dpo
    from collabui.training.pairs import load_pairs

    if not any(a.startswith("--output_dir") for a in rest):
        rest = [*rest, "--output_dir", str(Path(args.out) / "trl")]
    try:
        (config,) = HfArgumentParser(AgentDPOConfig).parse_args_into_dataclasses(rest)
    except (SystemExit, ValueError):  # argparse exits; HfArgumentParser raises on leftovers
        raise ConfigError(f"bad DPO option in {' '.join(rest)}; see `collabui train dpo --help` and TRL's DPOConfig") from None
    agents = [int(a) for a in args.agents.split(",")] if args.agents else None
    report = train_agents_dpo(load_pairs(args.pairs), base_model=_base_dir(args.model), out_dir=args.out,
                              config=config, agents=agents, init_adapters_dir=args.init_adapters)
    if args.plot:
        from collabui.training.report import plot_dpo_report

        plot_dpo_report(report, Path(args.out) / "dpo_report.png")
    print(f"adapters in {args.out}; report {Path(args.out) / 'dpo_report.json'}", file=sys.stderr)
    return 0


def _report(args: argparse.Namespace) -> int:
    from collabui.training.run_report import write_training_report

    paths = write_training_report(args.run, args.out, plot=not args.no_plot)
    print(paths["md"].read_text(encoding="utf-8"))
    print("report: " + ", ".join(str(p) for p in paths.values()), file=sys.stderr)
    return 0


def _demonstrate(args: argparse.Namespace) -> int:
    from collabui.training.demonstrate import DemoConfig, generate_demonstrations
    from collabui.training.verified import SearchConfig

    kwargs = {"tasks": tuple(t.strip() for t in args.tasks.split(",") if t.strip())} if args.tasks else {}
    config = DemoConfig(out_dir=args.out, seeds=args.seeds, seed_start=args.seed_start,
                        renderings=args.renderings, shuffle=not args.no_shuffle, workers=args.workers,
                        minutes=args.minutes, search=SearchConfig(node_budget=args.budget), **kwargs)
    stats = generate_demonstrations(config)
    print(json.dumps({k: v for k, v in stats.to_dict().items() if k != "per_task"}))
    print(f"dataset in {Path(args.out) / 'dataset'}; card {Path(args.out) / 'README.md'}", file=sys.stderr)
    return 0 if stats.verified_steps else 1


def run_train_command(args: argparse.Namespace, rest: list[str]) -> int:
    """Dispatch a parsed ``collabui train`` command."""
    if args.train_command == "demonstrate":
        return _demonstrate(args)
    if args.train_command == "label":
        return _label(args)
    if args.train_command == "pairs":
        return _pairs(args)
    if args.train_command == "marl":
        from collabui.training.marl_cli import run_marl_command

        return run_marl_command(args)
    if args.train_command == "report":
        return _report(args)
    if args.train_command in ("synth", "sft"):
        from collabui.training.stage1_cli import run_synth_sft_command

        return run_synth_sft_command(args, rest)
    return _dpo(args, rest)
