"""The CPU training recipe: stage 1 (agentic fine-tuning) then iterative MARL, measured on held-out tasks.

Run (about an hour on 2 CPU cores; resumable: rerun the same command after a crash or Ctrl-C):

    ./.venv/bin/python cookbook/cpu_recipe/recipe.py --out runs/recipe

Stages, each one's output the next one's input (see README.md next to this file):

0. ``base_eval/``: the untrained SmolLM2 team on the held-out tasks;
1. ``stage1/``: synthesize knowledge QA, simple instructions and process preferences from real
   MiniWoB++ pages of the training tasks; LoRA SFT on the first two (merged), then DPO on the
   preferences (merged): the stage-1 model;
2. ``marl/``: iterative MARL from the stage-1 model on the training tasks (oracle critic, rule
   adversary, per-agent DPO, edge update), held-out evaluation before and after every iteration
   on exactly the episodes of step 0.

At the end ``training_report.{md,json,png}`` gathers everything (``collabui train report``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from collabui.training.marl import MARLConfig, evaluate_model, resolve_base_model, run_marl
from collabui.training.run_report import write_training_report

TRAIN_TASKS = "click-button,click-link,enter-text,focus-text"
EVAL_TASKS = "click-dialog,click-tab,click-widget,focus-text-2"


def _args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="runs/recipe")
    ap.add_argument("--train-tasks", default=TRAIN_TASKS, help="the oracle critic knows these templates")
    ap.add_argument("--eval-tasks", default=EVAL_TASKS, help="held-out tasks (never trained on)")
    ap.add_argument("--agents", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-steps", type=int, default=2)
    ap.add_argument("--eval-episodes", type=int, default=3, help="episodes per held-out task")
    ap.add_argument("--episodes", type=int, default=2, help="MARL rollout episodes per training task")
    ap.add_argument("--iterations", type=int, default=2, help="MARL iterations")
    ap.add_argument("--synth-pages", type=int, default=3, help="stage-1 pages per training task")
    ap.add_argument("--sft-epochs", type=float, default=1.0)
    ap.add_argument("--stage1-dpo-steps", type=int, default=6)
    ap.add_argument("--marl-dpo-steps", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    return ap.parse_args(argv)


class _Clock:
    """Seconds per stage, kept in ``recipe.json`` across resumed runs (a resumed stage adds ~0)."""

    def __init__(self, path: Path, args: argparse.Namespace) -> None:
        self.path = path
        self.data: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {"seconds": {}}
        self.data["args"] = vars(args)

    def run(self, name: str, fn: Callable[[], Any]) -> Any:
        print(f"[recipe] {name} ...", file=sys.stderr, flush=True)
        started = time.perf_counter()
        result = fn()
        spent = time.perf_counter() - started
        self.data["seconds"][name] = round(self.data["seconds"].get(name, 0.0) + spent, 1)
        self.data["seconds"]["total"] = round(sum(v for k, v in self.data["seconds"].items() if k != "total"), 1)
        self.path.write_text(json.dumps(self.data, indent=1))
        print(f"[recipe] {name}: {spent:.0f} s", file=sys.stderr, flush=True)
        return result


def _stage1(args: argparse.Namespace, out: Path) -> Path:
    """Synthesize, SFT (merged), DPO on process preferences (merged): the stage-1 model folder."""
    from datasets import concatenate_datasets

    from collabui.training.dpo import AgentDPOConfig, train_agents_dpo
    from collabui.training.pairs import load_pairs
    from collabui.training.sft import AgentSFTConfig, merge_adapter, train_sft
    from collabui.training.synth import load_sft_dataset, synthesize

    synth = out / "synth"
    if not (synth / "synth_stats.json").is_file():
        envs = [f"miniwob/{t}" for t in args.train_tasks.split(",")]
        synthesize(envs, episodes_per_env=args.synth_pages, seed=args.seed, out_dir=synth,
                   kinds=("knowledge", "instruction", "preference"), style="compact")
    rows = concatenate_datasets([load_sft_dataset(synth / "knowledge.jsonl"),
                                 load_sft_dataset(synth / "instruction.jsonl")]).shuffle(seed=args.seed)
    sft = train_sft(rows, base_model=resolve_base_model("smollm2"), out_dir=out / "sft", merge=True,
                    config=AgentSFTConfig(output_dir=str(out / "sft" / "trl"), num_train_epochs=args.sft_epochs,
                                          learning_rate=2e-4, per_device_train_batch_size=4, seed=args.seed,
                                          gradient_checkpointing=False))
    sft_model = Path(str(sft.merged_path))
    train_agents_dpo(load_pairs(synth / "preference.jsonl"), base_model=sft_model, out_dir=out / "dpo",
                     config=AgentDPOConfig(output_dir=str(out / "dpo" / "trl"), max_steps=args.stage1_dpo_steps,
                                           learning_rate=5e-5, seed=args.seed, gradient_checkpointing=False))
    return merge_adapter(sft_model, out / "dpo" / "agent0")


def marl_config(args: argparse.Namespace, model: str, out: Path) -> MARLConfig:
    """The MARL run of the recipe; its held-out protocol is also the untrained team's."""
    return MARLConfig(model=model, env="miniwob", train_tasks=args.train_tasks, eval_tasks=args.eval_tasks,
                      episodes_per_task=args.episodes, eval_episodes_per_task=args.eval_episodes,
                      iterations=args.iterations, n_agents=args.agents, rounds=args.rounds,
                      max_steps=args.max_steps, max_new_tokens=48, prompt_style="compact",
                      critic="oracle", adversary="rule", seed=args.seed, out_dir=str(out / "marl"),
                      dpo={"max_steps": args.marl_dpo_steps, "per_device_train_batch_size": 1, "learning_rate": 1e-4,
                           "gradient_checkpointing": False})


def main() -> int:
    args = _args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    clock = _Clock(out / "recipe.json", args)

    base = marl_config(args, "smollm2", out)
    clock.run("0 base eval", lambda: evaluate_model(base, "smollm2", out / "base_eval", tag="base"))
    stage1_model = clock.run("1 stage 1 (synth, SFT, DPO)", lambda: _stage1(args, out / "stage1"))
    clock.run("2 MARL", lambda: run_marl(marl_config(args, f"hf:{stage1_model}", out)))
    paths = write_training_report(out)
    print(paths["md"].read_text())
    print(f"[recipe] total {clock.data['seconds']['total'] / 60:.1f} min; report {paths['md']}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
