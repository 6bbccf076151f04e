"""``collabui train synth|sft``: stage-1 data synthesis and SFT (also the RFT ablation).

    collabui train synth --envs miniwob/click-button,miniwob/login-user --episodes 5 --out runs/synth
    collabui train sft --data runs/synth/instruction.jsonl --model smollm2 --out runs/sft --merge
    collabui train sft --pairs runs/pairs.jsonl --model smollm2 --out runs/rft   # RFT ablation

``sft`` accepts every ``AgentSFTConfig`` (TRL ``SFTConfig``) field as a flag, e.g.
``--max_steps 20 --learning_rate 2e-4``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

__all__ = ["add_synth_sft_commands", "run_synth_sft_command"]


def add_synth_sft_commands(tsub: argparse._SubParsersAction) -> None:
    """Register ``synth`` and ``sft`` on the ``collabui train`` sub-parsers."""
    synth = tsub.add_parser("synth", help="synthesize stage-1 data (knowledge QA, instructions, preferences) from MiniWoB++ pages")
    synth.add_argument("--envs", required=True, help="comma-separated env names, e.g. miniwob/click-button,miniwob/login-user")
    synth.add_argument("--episodes", type=int, default=5, help="pages per environment (default 5)")
    synth.add_argument("--out", required=True, help="output folder (knowledge.jsonl, instruction.jsonl, preference.jsonl)")
    synth.add_argument("--teacher", default=None, help="model spec of a teacher (default: template answers)")
    synth.add_argument("--kinds", default="knowledge,instruction,preference", help="which datasets to write")
    synth.add_argument("--per-page", type=int, default=4, help="questions and instructions per page (default 4)")
    synth.add_argument("--style", default="react", help="the agents' prompt style: react | compact (default react)")
    synth.add_argument("--seed", type=int, default=0)
    sft = tsub.add_parser("sft", help="SFT of one LoRA adapter (or one per agent with --pairs: rejection fine-tuning)",
                          epilog="Any AgentSFTConfig / TRL SFTConfig field is accepted, e.g. --max_steps 20")
    data = sft.add_mutually_exclusive_group(required=True)
    data.add_argument("--data", help="prompt-completion JSONL (from `collabui train synth`)")
    data.add_argument("--pairs", help="preference pairs JSONL: train agent{i} adapters on the rewarded outputs (RFT)")
    sft.add_argument("--model", default="smollm2", help="base model: smollm2 | hf:PATH")
    sft.add_argument("--out", required=True, help="adapter folder (with --pairs: OUT/agent{i}/)")
    sft.add_argument("--merge", action="store_true", help="also write OUT/merged/, the next stage's base model")
    sft.add_argument("--init-adapter", default=None, help="continue this adapter (with --pairs: a folder of agent{i}/)")
    sft.add_argument("--no-resume", action="store_true", help="train again even if OUT holds a finished adapter")


def _synth(args: argparse.Namespace) -> int:
    from collabui.training.synth import synthesize

    teacher = None
    if args.teacher:
        from collabui.models.spec import load_model

        teacher = load_model(args.teacher)
    envs = [e.strip() for e in args.envs.split(",") if e.strip()]
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    try:
        stats = synthesize(envs, episodes_per_env=args.episodes, seed=args.seed, teacher=teacher,
                           out_dir=args.out, kinds=kinds, per_page=args.per_page, style=args.style)
    finally:
        if teacher is not None:
            teacher.close()
    print(json.dumps(stats.to_dict()))
    return 0


def _sft_config(out: str, rest: list[str]):
    from transformers import HfArgumentParser

    from collabui.errors import ConfigError
    from collabui.training.sft import AgentSFTConfig

    if not any(a.startswith("--output_dir") for a in rest):
        rest = [*rest, "--output_dir", str(Path(out) / "trl")]
    try:
        (config,) = HfArgumentParser(AgentSFTConfig).parse_args_into_dataclasses(rest)
    except (SystemExit, ValueError):  # argparse exits; HfArgumentParser raises on leftovers
        raise ConfigError(f"bad SFT option in {' '.join(rest)}; see `collabui train sft --help` "
                          "and TRL's SFTConfig") from None
    return config


def _sft(args: argparse.Namespace, rest: list[str]) -> int:
    from collabui.training.cli import _base_dir
    from collabui.training.sft import rft_dataset_from_pairs, train_agents_sft, train_sft

    config = _sft_config(args.out, rest)
    base = _base_dir(args.model)
    if args.pairs:
        from collabui.training.pairs import load_pairs

        reports = train_agents_sft(rft_dataset_from_pairs(load_pairs(args.pairs)), base_model=base,
                                   out_dir=args.out, config=config, init_adapters_dir=args.init_adapter,
                                   resume=not args.no_resume)
        print(json.dumps([{"adapter": r.out_dir, "status": r.status, "steps": r.steps,
                           "final_loss": r.final_loss} for r in reports]))
        return 0
    from collabui.training.synth import load_sft_dataset

    report = train_sft(load_sft_dataset(args.data), base_model=base, out_dir=args.out, config=config,
                       init_adapter=args.init_adapter, resume=not args.no_resume, merge=args.merge)
    print(json.dumps({k: v for k, v in report.to_dict().items() if k != "loss"}, default=str))
    if report.merged_path:
        print(f"next stage's base: --model hf:{report.merged_path}", file=sys.stderr)
    return 0


def run_synth_sft_command(args: argparse.Namespace, rest: list[str]) -> int:
    """Dispatch ``collabui train synth`` or ``collabui train sft``."""
    if args.train_command == "synth":
        if rest:
            from collabui.errors import ConfigError

            raise ConfigError(f"unknown option(s) {' '.join(rest)} for `collabui train synth`; see --help")
        return _synth(args)
    return _sft(args, rest)
