"""The CPU recipe: verified demonstrations -> SFT -> held-out evaluation, with results.json.

Run (one command, resumable: rerun it after a crash or Ctrl-C and finished work is kept):

    ./.venv/bin/python cookbook/cpu_recipe/recipe.py --out runs/recipe [--publish]

Stages (see README.md next to this file for what each one measured):

1. ``demo/``: search verified trajectories on the training tasks (the environment's reward
   keeps only what works; element order and ids shuffled by the device), ``--demo-minutes``.
2. ``sft/``: LoRA SFT (all linear layers, rank 32, completion-only loss) of SmolLM2 on those
   steps in the ``trained`` prompt style, merged into ``sft/merged/`` (the trained model).
3. ``eval/<system>/``: every system on the held-out tasks with shuffled pages and fixed seeds:
   random and lexical baselines, the base model and the trained model as single agents (and
   the team rows when ``--team`` is given).
4. ``results.json`` (and with ``--publish`` ``cookbook/cpu_recipe/results.json``): success per
   system with 95% Wilson intervals; ``--table`` prints the README's table from it.

Train and tune only on ``TRAIN_TASKS``; ``HELDOUT_TASKS`` are evaluation only.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from collabui.training.task_lists import HELDOUT_TASKS, TRAIN_TASKS

HERE = Path(__file__).resolve().parent
#: Where ``--publish`` puts the trained team inside the package (served as ``smollm2-trained``).
SHIPPED = HERE.parents[1] / "sdk" / "trained" / "smollm2"
#: Every linear layer of a Llama block: capacity where a 135M model needs it.
ALL_LINEAR = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def _args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="runs/recipe")
    ap.add_argument("--demo-minutes", type=float, default=10.0, help="search time budget")
    ap.add_argument("--demo-workers", type=int, default=4, help="browsers searching at once")
    ap.add_argument("--sft-examples", type=int, default=2000, help="SFT rows drawn from the data")
    ap.add_argument("--sft-epochs", type=float, default=1.0)
    ap.add_argument("--no-balance", action="store_true",
                    help="draw SFT rows at random (default: round-robin over training tasks)")
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--lora-r", type=int, default=32)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--lora-dropout", type=float, default=0.0,
                    help="LoRA dropout (0: the model underfits here, and dropout costs ~20%% of a step)")
    ap.add_argument("--length-window", type=int, default=32,
                    help="rows per length-sorted window (batches mix tasks, pad little); 0: batches "
                    "grouped by length over all rows (mostly one task each)")
    ap.add_argument("--element-format", default="html", choices=("html", "text-first"))
    ap.add_argument("--style", default="trained", choices=("trained", "grounded"),
                    help="answer format taught: the action alone, or the target's screen line first")
    ap.add_argument("--episodes", type=int, default=13, help="held-out episodes per task (models)")
    ap.add_argument("--baseline-episodes", type=int, default=25, help="per task, random and lexical")
    ap.add_argument("--max-steps", type=int, default=6)
    ap.add_argument("--eval-seed", type=int, default=0)
    ap.add_argument("--critic-episodes", type=int, default=6, help="per oracle task, for the critic check")
    ap.add_argument("--team", action="store_true", help="also evaluate 4 x 3 teams (slow on a CPU)")
    ap.add_argument("--systems", default=None,
                    help="comma-separated rows to evaluate now (default all; 'none' for none; "
                    "others kept from earlier runs)")
    ap.add_argument("--onpolicy-episodes", type=int, default=0, metavar="N",
                    help="on-policy round: roll the SFT model out on N new seeds per training task, label "
                    "its steps with the verified critic and train on (default 0: no round)")
    ap.add_argument("--round2-demo-rows", type=int, default=400,
                    help="demonstration rows not seen in SFT, mixed into the on-policy round's training")
    ap.add_argument("--onpolicy-dpo", action=argparse.BooleanOptionalAction, default=True,
                    help="end the on-policy round with DPO (+ an SFT term on chosen) on the model's own "
                    "wrong answers against verified-right ones (--no-onpolicy-dpo: SFT on verified rows only)")
    ap.add_argument("--dpo-lr", type=float, default=5e-5)
    ap.add_argument("--validate", type=int, default=0, metavar="N",
                    help="also evaluate the trained model on N new seeds per training task (the "
                    "set to tune on; held-out tasks never are)")
    ap.add_argument("--publish", action="store_true", help="copy results.json next to this file")
    ap.add_argument("--table", action="store_true", help="print the README table of results.json and exit")
    args = ap.parse_args(argv)
    for flag in ("validate", "onpolicy_episodes", "round2_demo_rows"):
        if getattr(args, flag) < 0:
            ap.error(f"--{flag.replace('_', '-')} must be >= 0, got {getattr(args, flag)}")
    return args


class _Clock:
    """Seconds per stage, kept in ``recipe.json`` across resumed runs."""

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
        self.path.write_text(json.dumps(self.data, indent=1))
        print(f"[recipe] {name}: {spent:.0f} s", file=sys.stderr, flush=True)
        return result

    def minutes(self, *prefixes: str) -> float:
        return round(sum(v for k, v in self.data["seconds"].items() if k.startswith(prefixes)) / 60, 1)


def demonstrate(args: argparse.Namespace, out: Path) -> Any:
    from collabui.training.demonstrate import DemoConfig, generate_demonstrations

    return generate_demonstrations(DemoConfig(out_dir=str(out), tasks=TRAIN_TASKS, seeds=400,
                                              minutes=args.demo_minutes, workers=args.demo_workers))


def sft(args: argparse.Namespace, demo: Path, out: Path) -> Path:
    """SFT on the verified steps; returns the merged model folder."""
    from datasets import Dataset

    from collabui.models.embedded import embedded_model_dir
    from collabui.training.sft import train_sft

    rows = _demo_rows(args, demo)[:args.sft_examples]
    data = Dataset.from_list([{"prompt": r["prompt"], "completion": r["completion"]} for r in rows])
    train_sft(data, base_model=embedded_model_dir(), out_dir=out, config=_sft_config(args, out), merge=False)
    return out


def _demo_rows(args: argparse.Namespace, demo: Path) -> list[dict[str, Any]]:
    """All demonstration rows in the recipe's fixed order (balanced over tasks): SFT takes the
    first ``--sft-examples``, the on-policy round the next ``--round2-demo-rows``."""
    from collabui.training.demonstrate import read_steps
    from collabui.training.sft_data import sft_rows

    return sft_rows(read_steps(demo / "steps.jsonl"), style=args.style, element_format=args.element_format,
                    seed=0, balance=not args.no_balance)


def _sft_config(args: argparse.Namespace, out: Path) -> Any:
    from collabui.training.sft import AgentSFTConfig

    return AgentSFTConfig(output_dir=str(out / "trl"), num_train_epochs=args.sft_epochs, learning_rate=args.lr,
                          per_device_train_batch_size=args.batch, lora_r=args.lora_r, lora_alpha=2 * args.lora_r,
                          lora_dropout=args.lora_dropout, lora_target_modules=list(ALL_LINEAR), max_length=512,
                          seed=0, lr_scheduler_type="cosine", warmup_steps=10,
                          # Random batches pad ~40% more than length-sorted ones; sorting within
                          # small windows keeps most of that saving and still mixes tasks (the
                          # config then samples in that order; grouping applies with window 0).
                          length_window=args.length_window, train_sampling_strategy="group_by_length")


def onpolicy_round(args: argparse.Namespace, trained: Path, demo: Path, sft_dir: Path, out: Path) -> Path:
    """Roll the SFT model out on new seeds of the training tasks (shuffled pages, as evaluated),
    label every step with the verified critic, and continue training the SFT adapter on the
    visited states with verified-right answers plus demonstration rows SFT did not see."""
    from datasets import Dataset

    from collabui.evaluation.miniwob import evaluate_miniwob
    from collabui.models.embedded import embedded_model_dir
    from collabui.training.critic import make_critic
    from collabui.training.labels import label_traces
    from collabui.training.mistake_pairs import verified_sft_rows
    from collabui.training.sft import train_sft

    config = _on_training_tasks(args, trained, seed=5000, episodes=args.onpolicy_episodes)
    evaluate_miniwob(config, out / "rollouts", command="recipe.py on-policy rollouts")
    critic = make_critic("verified")
    try:
        label_traces(out / "rollouts" / "traces", critic, out / "labels.jsonl")
    finally:
        critic.close()
    visited = verified_sft_rows(out / "rollouts" / "traces", out / "labels.jsonl", critic="verified")
    fresh = _demo_rows(args, demo)[args.sft_examples:args.sft_examples + args.round2_demo_rows]
    sources = {s: sum(r["source"] == s for r in visited) for s in ("own", "self", "team", "verified")}
    (out / "round.json").write_text(json.dumps({"visited_rows": len(visited), "sources": sources,
                                                "demo_rows": len(fresh)}, indent=1))
    print(f"[recipe] on-policy round: {len(visited)} visited-state rows {sources}, {len(fresh)} new "
          "demonstration rows", file=sys.stderr)
    data = Dataset.from_list([{"prompt": r["prompt"], "completion": r["completion"]} for r in [*visited, *fresh]])
    train_sft(data.shuffle(seed=0), base_model=embedded_model_dir(), out_dir=out / "sft",
              config=_sft_config(args, out / "sft"), init_adapter=sft_dir, merge=False)
    return out / "sft"


def onpolicy_dpo(args: argparse.Namespace, round_sft: Path, out: Path) -> Path | None:
    """DPO on the round's own-mistake pairs: rejected = the model's own wrong answer at a visited
    state, chosen = a verified-right one (its own from elsewhere, or the critic's verified
    target), with an SFT term on chosen so its likelihood does not fall (TRL ``loss_type
    ["sigmoid", "sft"]``). The reference is the round's SFT model (merged); one adapter on top,
    shared by every agent of a team. None when the round made no pair."""
    from collabui.models.embedded import embedded_model_dir
    from collabui.training.dpo import AgentDPOConfig, train_agents_dpo
    from collabui.training.mistake_pairs import build_mistake_pairs
    from collabui.training.sft import merge_adapter

    pairs = build_mistake_pairs(out / "rollouts" / "traces", out / "labels.jsonl", critic="verified")
    round_info = json.loads((out / "round.json").read_text())
    round_info["dpo_pairs"] = len(pairs)
    (out / "round.json").write_text(json.dumps(round_info, indent=1))
    print(f"[recipe] on-policy DPO: {len(pairs)} own-mistake pairs", file=sys.stderr)
    if len(pairs) == 0:
        return None
    # Single-agent rollouts: every pair is agent 0's; the adapter serves all agents (cycled).
    pairs = pairs.map(lambda _: {"agent": 0})
    merged = merge_adapter(embedded_model_dir(), round_sft)
    config = AgentDPOConfig(output_dir=str(out / "dpo" / "trl"), learning_rate=args.dpo_lr, num_train_epochs=1,
                            per_device_train_batch_size=4, loss_type=["sigmoid", "sft"], beta=0.1,
                            lora_r=16, lora_alpha=32, lora_target_modules=list(ALL_LINEAR), max_length=512,
                            seed=0)
    train_agents_dpo(pairs.shuffle(seed=0), base_model=merged, out_dir=out / "dpo", config=config, agents=[0])
    return out / "dpo" / "agent0"


def bundle(args: argparse.Namespace, sft_dir: Path, out: Path, dpo_dir: Path | None = None) -> Path:
    """The trained team as a bundle (``trained:FOLDER``): SmolLM2 + the SFT adapter (fp16),
    answering in the taught prompt style; ``--publish`` makes it ``smollm2-trained``."""
    from collabui.models.bundle import write_bundle

    made_by = "cookbook/cpu_recipe/recipe.py " + " ".join(
        f"--{k.replace('_', '-')} {v}" for k, v in sorted(vars(args).items())
        if k in {"demo_minutes", "sft_examples", "sft_epochs", "lr", "lora_r", "batch", "element_format", "style",
                 "onpolicy_episodes", "round2_demo_rows", "onpolicy_dpo", "dpo_lr", "lora_dropout", "length_window"})
    agents = {"agent0": dpo_dir} if dpo_dir is not None else {}
    return write_bundle(out, base="smollm2", merge={"stage1": sft_dir}, agents=agents,
                        team={"prompt_style": args.style, "max_new_tokens": 128,
                              "element_format": args.element_format}, made_by=made_by,
                        train_tasks=list(TRAIN_TASKS))


def critic_check(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """The verified critic's coverage and its agreement with the rule oracle, on random-policy
    rollouts (2 agents: right and wrong entries) of the oracle's tasks, all training tasks."""
    from collabui.config import TeamConfig
    from collabui.evaluation.miniwob import MiniWoBEvalConfig, evaluate_miniwob
    from collabui.training.critic import make_critic
    from collabui.training.critic_check import compare_critics
    from collabui.training.oracles import ORACLE_TASKS

    config = MiniWoBEvalConfig(tasks=",".join(ORACLE_TASKS), episodes=args.critic_episodes, model="random",
                               concurrency=2,
                               team=TeamConfig(n_agents=2, rounds=1, max_steps=3, seed=args.eval_seed + 1))
    evaluate_miniwob(config, out / "rollouts", command="recipe.py critic check")
    verified = make_critic("verified")
    try:
        return compare_critics(out / "rollouts" / "traces", verified, make_critic("oracle"), out).to_dict()
    finally:
        verified.close()


def systems(args: argparse.Namespace, trained: Path) -> dict[str, dict[str, Any]]:
    """The evaluated systems: eval config fields per row of results.json (``team``: the
    TeamConfig fields of the row; the baselines' default to a single agent)."""
    rows: dict[str, dict[str, Any]] = {
        "random": {"model": "random", "episodes": args.baseline_episodes},
        "lexical": {"model": "lexical", "episodes": args.baseline_episodes},
        # 128 tokens: a grounded answer copies the target's line (long email or link texts) before the action.
        "trained_single": {"model": f"trained:{trained}", "team": {"n_agents": 1, "rounds": 1, "max_new_tokens": 128}},
        "base_single": {"model": "smollm2", "team": {"n_agents": 1, "rounds": 1, "prompt_style": "react"}},
    }
    if args.team:
        rows["base_team"] = {"model": "smollm2", "team": {"n_agents": 4, "rounds": 3, "prompt_style": "react"}}
        rows["trained_team"] = {"model": f"trained:{trained}",
                                "team": {"n_agents": 4, "rounds": 3, "max_new_tokens": 128}}
        # Same team, pages in their own order and ids: a position habit would show as a gap.
        rows["trained_team_unshuffled"] = {**rows["trained_team"], "shuffle_elements": False}
    return rows


def evaluate(args: argparse.Namespace, name: str, fields: dict[str, Any], out: Path) -> dict[str, Any]:
    from collabui.evaluation.miniwob import evaluate_miniwob

    return evaluate_miniwob(eval_config(args, fields), out / name, command=f"recipe.py system {name}")


def eval_config(args: argparse.Namespace, fields: dict[str, Any]) -> Any:
    """The held-out evaluation of one row: shuffled pages unless the row says otherwise."""
    from collabui.evaluation.miniwob import MiniWoBEvalConfig, default_team

    fields = {"episodes": args.episodes, "shuffle_elements": True, **fields}
    team = default_team(fields["model"], seed=args.eval_seed, max_steps=args.max_steps, **fields.pop("team", {}))
    return MiniWoBEvalConfig(tasks=",".join(HELDOUT_TASKS), element_format=_format(args, fields["model"]),
                             concurrency=2, team=team, **fields)


def validate(args: argparse.Namespace, trained: Path, out: Path) -> dict[str, Any]:
    """The trained model on new seeds (from 100; demonstrations use 1000 on) of the training
    tasks: the figure to choose formats and hyperparameters by."""
    from collabui.evaluation.miniwob import evaluate_miniwob

    config = _on_training_tasks(args, trained, seed=100, episodes=args.validate)
    return evaluate_miniwob(config, out, command="recipe.py --validate")


def _on_training_tasks(args: argparse.Namespace, trained: Path, *, seed: int, episodes: int) -> Any:
    """The trained model as a single agent on every training task, shuffled pages in the format
    it learned (validation and on-policy rollouts; the seed ranges differ)."""
    from collabui.config import TeamConfig
    from collabui.evaluation.miniwob import MiniWoBEvalConfig

    return MiniWoBEvalConfig(tasks=",".join(TRAIN_TASKS), episodes=episodes, shuffle_elements=True,
                             element_format=args.element_format, concurrency=2, model=f"trained:{trained}",
                             team=TeamConfig(n_agents=1, rounds=1, max_new_tokens=96, seed=seed,
                                             max_steps=args.max_steps))


def _format(args: argparse.Namespace, model: str) -> str:
    """Trained models read pages in the format they learned; the others in html (baselines do
    not care; the base model's ReAct prompt shows html)."""
    return args.element_format if model.startswith("trained:") else "html"


def _row(results: dict[str, Any]) -> dict[str, Any]:
    rate = results["overall"]["success_rate"]
    return {"successes": rate["successes"], "episodes": rate["n"], "rate": rate["value"],
            "ci95": rate["ci95"],
            "per_task": {t: v["success_rate"]["value"] for t, v in results["breakdown"]["per_task"].items()}}


def table(results: dict[str, Any]) -> str:
    """The README table of a results.json."""
    lines = ["| system | success (held-out, shuffled) | 95% CI | episodes |", "|---|---|---|---|"]
    for name, row in results["systems"].items():
        low, high = row["ci95"]
        lines.append(f"| {name} | {row['successes']}/{row['episodes']} = {100 * row['rate']:.1f}% | "
                     f"{100 * low:.1f}-{100 * high:.1f}% | {row['episodes']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    out = Path(args.out)
    if args.table:
        path = out / "results.json" if (out / "results.json").is_file() else HERE / "results.json"
        print(table(json.loads(path.read_text())))
        return 0
    out.mkdir(parents=True, exist_ok=True)
    clock = _Clock(out / "recipe.json", args)
    if not (out / "demo" / "demo_stats.json").is_file():
        clock.run("1 demonstrations", lambda: demonstrate(args, out / "demo"))
    sft_dir = clock.run("2 sft", lambda: sft(args, out / "demo", out / "sft"))
    # With an on-policy round the SFT model is only the round's starting point (bundle-sft/).
    trained = bundle(args, sft_dir, out / ("bundle-sft" if args.onpolicy_episodes else "bundle"))
    if args.onpolicy_episodes:
        sft_dir = clock.run("2b on-policy round",
                            lambda: onpolicy_round(args, trained, out / "demo", sft_dir, out / "onpolicy"))
        dpo_dir = (clock.run("2c on-policy DPO", lambda: onpolicy_dpo(args, sft_dir, out / "onpolicy"))
                   if args.onpolicy_dpo else None)
        trained = bundle(args, sft_dir, out / "bundle", dpo_dir)
    if args.validate:
        # Its own folder per model: the SFT model's figure stays when a round is added later.
        folder = out / ("validation-round" if args.onpolicy_episodes else "validation")
        val = _row(clock.run("5 validation", lambda: validate(args, trained, folder)))
        print(f"[recipe] validation (training tasks, new seeds): {val['successes']}/{val['episodes']} "
              f"{json.dumps(val['per_task'])}", file=sys.stderr)
    check = clock.run("4 critic check", lambda: critic_check(args, out / "critic_check"))
    print(f"[recipe] verified critic: coverage {check['coverage_a']}, agreement with the oracle "
          f"{check['agreement']} over {check['entries_both']} entries", file=sys.stderr)
    path = out / "results.json"
    # Rows of earlier runs into this folder stay: --systems can add rows one session at a time.
    results: dict[str, Any] = json.loads(path.read_text()) if path.is_file() else {"systems": {}}
    if args.validate:
        results["validation"] = val
    results.update({"critic_check": check, "train_tasks": list(TRAIN_TASKS), "heldout_tasks": list(HELDOUT_TASKS),
                    "shuffled": True, "element_format": args.element_format, "max_steps": args.max_steps})
    results["demo"] = {k: v for k, v in json.loads((out / "demo" / "demo_stats.json").read_text()).items()
                       if k != "per_task"}
    # Training time: the search's own clock (kept across resumes) plus SFT.
    results["minutes"] = round(results["demo"]["seconds"] / 60 + clock.minutes("2 ", "2b ", "2c "), 1)
    if args.onpolicy_episodes:
        results["onpolicy_round"] = json.loads((out / "onpolicy" / "round.json").read_text())
    rows = systems(args, trained)
    wanted = [w.strip() for w in args.systems.split(",") if w.strip() not in ("", "none")] if args.systems else None
    unknown = sorted(set(wanted or ()) - set(rows))
    if unknown:
        print(f"error: unknown system(s) {unknown}; choose from {sorted(rows)} (--team adds the teams)", file=sys.stderr)
        return 2
    for name, fields in rows.items():
        if wanted is not None and name not in wanted:
            continue
        done = clock.run(f"3 eval {name}", lambda n=name, f=fields: evaluate(args, n, f, out / "eval"))
        results["systems"][name] = _row(done)
        results["eval_minutes"] = clock.minutes("3 ")
        path.write_text(json.dumps(results, indent=1))  # after every row: an interrupted run keeps them
    results["eval_minutes"] = clock.minutes("3 ")
    path.write_text(json.dumps(results, indent=1))  # also when no row was evaluated this time
    if args.publish:
        shutil.copyfile(out / "results.json", HERE / "results.json")
        shutil.rmtree(SHIPPED, ignore_errors=True)
        shutil.copytree(trained, SHIPPED)  # collabui/trained/smollm2: the smollm2-trained spec
    print(table(results))
    print(f"[recipe] training {results['minutes']} min, evaluation {results['eval_minutes']} min; "
          f"{out / 'results.json'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
