"""How fast is an SFT (or DPO) step of the recipe, with TRL's LM head and with the answer-only one?

Run:  ./.venv/bin/python cookbook/cpu_recipe/sft_speed.py --demo runs/recipe/demo --steps 6 --repeats 2
      ./.venv/bin/python cookbook/cpu_recipe/sft_speed.py --demo runs/recipe/demo --trainer dpo
      ./.venv/bin/python cookbook/cpu_recipe/sft_speed.py --demo runs/recipe/demo --compare precision --full-finetune

On the recipe's own rows (the first ``--steps`` x batch rows the recipe trains on, from a
demonstration folder) and its SFT settings (LoRA r=32 on every linear layer, batch 8), it times
``--steps`` optimizer steps of TRL's ``SFTTrainer`` with TRL's fused LM head (every position
scored) and with :func:`collabui.training._compact_head.compact_lm_head` (the answer tokens
only), interleaved ``--repeats`` times so both share the machine's load, and prints seconds per
step, the ratio and each run's last loss (they agree: the loss is the same). ``--trainer dpo``
times MARL's update instead: DPO with the SFT term (TRL ``loss_type=["sigmoid", "sft"]``), LoRA
r=8 on every linear layer, 2 pairs a step, each pair a recipe row's answer against the next
row's (another action, as an agent's wrong proposal would be). Not a test: timings depend on
the machine.

``--compare precision`` times float32 against bf16 mixed precision instead (both with the
answer-only head): bf16 is the trainers' default where the CPU computes it natively
(AVX512-BF16/AMX, :func:`collabui.training._peft.default_bf16`). ``--full-finetune`` trains
every weight, as the recipe does since v35, instead of the LoRA adapter.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import recipe_config  # noqa: E402  (the recipe's configs, from beside this file)
import recipe_sft  # noqa: E402  (its SFT rows)


def _rows(demo: Path, n: int, dpo: bool) -> object:
    from datasets import Dataset

    config = recipe_config.parse_args(["--out", str(demo.parent), "--balance-steps"])
    rows = recipe_sft.demo_rows(config, demo)[:2 * n + 1]
    if dpo:
        return Dataset.from_list([{"prompt": r["prompt"], "chosen": r["completion"], "rejected": nxt["completion"]}
                                  for r, nxt in zip(rows, rows[1:], strict=False)
                                  if r["completion"] != nxt["completion"]][:n])
    return Dataset.from_list([{"prompt": r["prompt"], "completion": r["completion"]} for r in rows[:n]])


def _dpo_config(work: Path, steps: int) -> object:
    from collabui.training.dpo import AgentDPOConfig

    return AgentDPOConfig(output_dir=str(work), max_steps=steps, loss_type=["sigmoid", "sft"], lora_r=8,
                          lora_alpha=16, lora_dropout=0.0, lora_target_modules=list(recipe_sft.ALL_LINEAR), disable_tqdm=True)


def _sft_config(work: Path, steps: int) -> object:
    template = recipe_config.sft_template()
    return dataclasses.replace(template, output_dir=str(work), max_steps=steps, lora_alpha=2 * template.lora_r,
                               warmup_steps=0, disable_tqdm=True)


#: The two arms of each comparison: (name, answer-only head, bf16).
ARMS = {"head": (("trl", False, False), ("compact", True, False)),
        "precision": (("fp32", True, False), ("bf16", True, True))}


def _time(compact: bool, rows: object, steps: int, work: Path, dpo: bool, *, bf16: bool = False,
          full: bool = False) -> tuple[float, float]:
    """Seconds per step (the first step excluded: allocation) and the last logged loss."""
    from transformers import TrainerCallback
    from trl import DPOTrainer, SFTTrainer

    from collabui.models.embedded import embedded_model_dir
    from collabui.training._compact_head import compact_lm_head
    from collabui.training._peft import load_base, restore_base

    tokenizer, model = load_base(Path(embedded_model_dir()))
    config = _dpo_config(work, steps) if dpo else _sft_config(work, steps)
    config = dataclasses.replace(config, bf16=bf16)  # its __post_init__ lets bf16 run on the CPU
    stamps: list[float] = []

    class _Stamp(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):  # noqa: ANN001, ANN003, ANN201
            stamps.append(time.perf_counter())

    kind = DPOTrainer if dpo else SFTTrainer
    lora = None if full and not dpo else config.lora_config()
    trainer = kind(model=copy.deepcopy(model) if lora is None else model, args=config, train_dataset=rows,
                   processing_class=tokenizer, peft_config=lora, callbacks=[_Stamp()])
    if compact:
        compact_lm_head(trainer)
    trainer.train()
    if lora is not None:
        restore_base(trainer.accelerator.unwrap_model(trainer.model), model)
    losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
    return (stamps[-1] - stamps[0]) / (len(stamps) - 1), losses[-1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--demo", type=Path, required=True, help="a demonstration folder (OUT/demo of the recipe)")
    ap.add_argument("--steps", type=int, default=6, help="optimizer steps per timing (the first is not counted)")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--trainer", choices=("sft", "dpo"), default="sft", help="the recipe's SFT or MARL's DPO")
    ap.add_argument("--compare", choices=tuple(ARMS), default="head",
                    help="TRL's LM head against the answer-only one, or float32 against bf16 mixed precision")
    ap.add_argument("--full-finetune", action="store_true", help="SFT trains every weight (the recipe since v35)")
    args = ap.parse_args()
    if not (args.demo / "steps.jsonl").is_file():
        print(f"error: no steps.jsonl in {args.demo}; pass the demo folder of a recipe run", file=sys.stderr)
        return 2
    if args.steps < 2:
        print("error: --steps must be >= 2 (the first step is not timed)", file=sys.stderr)
        return 2
    dpo = args.trainer == "dpo"
    rows = _rows(args.demo, (2 if dpo else 8) * args.steps, dpo)
    arms = ARMS[args.compare]
    times: dict[str, list[float]] = {name: [] for name, _, _ in arms}
    with tempfile.TemporaryDirectory() as work:
        for r in range(args.repeats):
            for name, compact, bf16 in arms:
                seconds, loss = _time(compact, rows, args.steps, Path(work) / f"{name}{r}", dpo, bf16=bf16,
                                      full=args.full_finetune)
                times[name].append(seconds)
                print(f"repeat {r}: {name:8s} {seconds:.2f} s/step, last loss {loss:.4f}", flush=True)
    (slow, _, _), (fast, _, _) = arms
    ratio = statistics.median(t / c for t, c in zip(times[slow], times[fast], strict=True))
    what = {"trl": "TRL's LM head", "compact": "answer-only", "fp32": "float32", "bf16": "bf16 mixed precision"}
    print(f"{what[slow]} {statistics.median(times[slow]):.2f} s/step, {what[fast]} "
          f"{statistics.median(times[fast]):.2f} s/step: {ratio:.2f}x faster (median of {args.repeats} "
          f"interleaved repeats, {args.steps - 1} timed {args.trainer.upper()} steps of "
          f"{2 if dpo else 8} {'pairs' if dpo else 'rows'} each"
          f"{', every weight trained' if args.full_finetune and not dpo else ''})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
