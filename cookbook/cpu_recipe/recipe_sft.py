"""Stages 1-2 of the CPU recipe (``recipe.py``): verified demonstrations, SFT (its soup of
draws and its low-rank extract), the optional on-policy round, and ``--from-bundle``'s start."""

from __future__ import annotations

import dataclasses
import json
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from collabui.config import TeamConfig
from collabui.evaluation.miniwob import MiniWoBEvalConfig
from collabui.training.sft import AgentSFTConfig
from collabui.training.task_lists import TRAIN_TASKS

if TYPE_CHECKING:
    from recipe import _Clock as Clock
    from recipe_config import RecipeConfig


#: Every linear layer of a Llama block: capacity where a 135M model needs it.
ALL_LINEAR = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def demonstrate(config: RecipeConfig, out: Path) -> Any:
    from collabui.devices.miniwob import synthetic_tasks
    from collabui.training.demonstrate import generate_demonstrations

    tasks = (*config.demo.tasks, *synthetic_tasks()) if config.synthetic_pages else config.demo.tasks
    return generate_demonstrations(dataclasses.replace(config.demo, out_dir=str(out), tasks=tasks))


def sft(config: RecipeConfig, demo: Path, out: Path) -> Path:
    """SFT on the verified steps; returns the merged model folder."""
    from datasets import Dataset

    from collabui.models.embedded import embedded_model_dir
    from collabui.training.sft import train_sft

    rows = demo_rows(config, demo)[:config.sft_examples]
    data = Dataset.from_list([{"prompt": r["prompt"], "completion": r["completion"]} for r in rows])
    train_sft(data, base_model=embedded_model_dir(), out_dir=out, config=_sft_config(config, out), merge=False)
    return out


def soup(config: RecipeConfig, first: Path, out: Path, clock: Clock) -> Path:
    """SFT draws 2..K (``--sft-seed`` + 1, ...; each resumable) beside ``first``, and their
    uniform average OUT/sft-soup (made again only when a draw is newer than it)."""
    from collabui.training.soup import average_models

    draws = [first]
    for k in range(2, config.sft_draws + 1):
        drawn = dataclasses.replace(config, sft=dataclasses.replace(config.sft, seed=config.sft.seed + k - 1))
        draws.append(clock.run(f"2 sft draw {k}", lambda c=drawn, k=k: sft(c, out / "demo", out / f"sft-draw{k}"),
                               once=True))
    target = out / "sft-soup"
    report = target / "soup.json"
    fresh = (report.is_file() and json.loads(report.read_text()).get("sources") == [str(d) for d in draws]
             and all(report.stat().st_mtime >= (d / "model.safetensors").stat().st_mtime for d in draws))
    if not fresh:
        clock.run("2 soup", lambda: average_models(draws, target))
    return target


def demo_rows(config: RecipeConfig, demo: Path) -> list[dict[str, Any]]:
    """All demonstration rows in the recipe's fixed order (balanced over tasks): SFT takes the
    first ``--sft-examples``, the on-policy round the next ``--round2-demo-rows``."""
    from collabui.training.demonstrate import read_steps
    from collabui.training.hindsight import hindsight_rows
    from collabui.training.sft_data import sft_rows

    steps = read_steps(demo / "steps.jsonl")
    steps += hindsight_rows(steps, per_row=config.hindsight)
    return sft_rows(steps, style=config.style, element_format=config.element_format,
                    seed=0, balance=config.balance, by_step=config.balance_steps, team_share=config.team_share,
                    stateless_share=config.stateless_share, stateless_fields=config.stateless_fields,
                    team_other_kind=config.team_other_kind)


def _sft_config(config: RecipeConfig, out: Path) -> AgentSFTConfig:
    """The SFT config of one stage: ``config.sft`` writing to OUT/trl, alpha twice the rank."""
    return dataclasses.replace(config.sft, output_dir=str(out / "trl"), lora_alpha=2 * config.sft.lora_r,
                               train_sampling_strategy="group_by_length")


def on_training_tasks(config: RecipeConfig, trained: Path, *, seed: int, episodes: int,
                       team: bool = False, tasks: Sequence[str] = TRAIN_TASKS) -> MiniWoBEvalConfig:
    """The trained model as a single agent (``team``: 4 x 3) on the training tasks (``tasks``,
    all by default), shuffled pages in the format it learned (validation and on-policy rollouts;
    the seed ranges differ)."""
    shape = {"n_agents": 4, "rounds": 3, "max_new_tokens": 128} if team else \
        {"n_agents": 1, "rounds": 1, "max_new_tokens": 96}
    return MiniWoBEvalConfig(tasks=",".join(tasks), episodes=episodes, shuffle_elements=True,
                             element_format=config.element_format, concurrency=2, model=f"trained:{trained}",
                             team=TeamConfig(**shape, seed=seed, max_steps=config.evaluation.team.max_steps,
                                             skip_stale=team and config.evaluation.team.skip_stale,
                                             tie_break=config.evaluation.team.tie_break if team else "lowest-id"))


def onpolicy_round(config: RecipeConfig, trained: Path, demo: Path, sft_dir: Path, out: Path) -> Path:
    """Roll the SFT model out on new seeds of the training tasks (shuffled pages, as evaluated),
    label every step with the verified critic, and continue training the SFT model on the
    visited states with verified-right answers plus demonstration rows SFT did not see: the SFT
    adapter, or with full fine-tuning the whole model ``sft_dir`` (the round's model then ships
    as its extract, ``out/extract``, which is what this returns)."""
    from datasets import Dataset

    from collabui.evaluation.miniwob import evaluate_miniwob
    from collabui.models.embedded import embedded_model_dir
    from collabui.training.critic import make_critic
    from collabui.training.labels import label_traces
    from collabui.training.mistake_pairs import verified_sft_rows
    from collabui.training.sft import train_sft

    rollouts = on_training_tasks(config, trained, seed=5000, episodes=config.onpolicy_episodes)
    evaluate_miniwob(rollouts, out / "rollouts", command="recipe.py on-policy rollouts")
    critic = make_critic("verified")
    try:
        label_traces(out / "rollouts" / "traces", critic, out / "labels.jsonl")
    finally:
        critic.close()
    visited = verified_sft_rows(out / "rollouts" / "traces", out / "labels.jsonl", critic="verified")
    fresh = demo_rows(config, demo)[config.sft_examples:config.sft_examples + config.round2_demo_rows]
    sources = {s: sum(r["source"] == s for r in visited) for s in ("own", "self", "team", "verified")}
    (out / "round.json").write_text(json.dumps({"visited_rows": len(visited), "sources": sources,
                                                "demo_rows": len(fresh)}, indent=1))
    print(f"[recipe] on-policy round: {len(visited)} visited-state rows {sources}, {len(fresh)} new "
          "demonstration rows", file=sys.stderr)
    data = Dataset.from_list([{"prompt": r["prompt"], "completion": r["completion"]} for r in [*visited, *fresh]])
    if config.sft.full_finetune:
        train_sft(data.shuffle(seed=0), base_model=sft_dir, out_dir=out / "sft", config=_sft_config(config, out / "sft"))
        return extract(config, out / "sft", out / "extract")
    train_sft(data.shuffle(seed=0), base_model=embedded_model_dir(), out_dir=out / "sft",
              config=_sft_config(config, out / "sft"), init_adapter=sft_dir, merge=False)
    return out / "sft"


def onpolicy_dpo(config: RecipeConfig, round_sft: Path, out: Path) -> Path | None:
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
    dpo = AgentDPOConfig(output_dir=str(out / "dpo" / "trl"), learning_rate=config.dpo_lr, num_train_epochs=1,
                         per_device_train_batch_size=4, loss_type=["sigmoid", "sft"], beta=0.1,
                         lora_r=16, lora_alpha=32, lora_target_modules=list(ALL_LINEAR), max_length=512,
                         seed=0)
    train_agents_dpo(pairs.shuffle(seed=0), base_model=merged, out_dir=out / "dpo", config=dpo, agents=[0])
    return out / "dpo" / "agent0"


def extract(config: RecipeConfig, model_dir: Path, out: Path) -> Path:
    """The fully fine-tuned model's weight change as a LoRA adapter at the recipe's ranks (made
    once: a resumed run reuses an extract of the same ranks)."""
    from collabui.models.embedded import embedded_model_dir
    from collabui.training.extract import extract_adapter

    report = out / "extract.json"
    ranks = {"rank": config.extract_rank, "embedding_rank": config.extract_embedding_rank}
    weights = model_dir / "model.safetensors"
    if (report.is_file() and {k: json.loads(report.read_text()).get(k) for k in ranks} == ranks
            and report.stat().st_mtime >= weights.stat().st_mtime):  # not of an older model
        return out
    found = extract_adapter(embedded_model_dir(), model_dir, out, **ranks)
    print(f"[recipe] extract: rank {found.rank} (embedding {found.embedding_rank}), "
          f"{found.adapter_bytes / 1e6:.1f} MB, change kept {json.dumps(found.energy)}", file=sys.stderr)
    return out


def full_bundle(model_dir: Path, out: Path, **manifest: Any) -> Path:
    """A bundle around a fully fine-tuned model: the model folder inside it (``model/``), its
    base ``hf:model``, no adapters."""
    from collabui.models.bundle import write_bundle_manifest

    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(model_dir, tmp / "model", ignore=shutil.ignore_patterns("*.json.tmp", "trl", ".*"))
    write_bundle_manifest(tmp, base="hf:model", merge=[], agents=[], train_tasks=list(TRAIN_TASKS), **manifest)
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out


def start_bundle(config: RecipeConfig, out: Path) -> Path:
    """``--from-bundle``: the bundle copied to ``out`` (a folder of the run, so ``--publish``
    never copies the shipped bundle onto itself); the copy is refreshed on every run.

    Raises:
        ModelLoadError: the spec names no bundle.
        ConfigError: the bundle has per-agent adapters already (MARL starts from one shared model).
    """
    from collabui.models.bundle import SHIPPED_BUNDLES, read_bundle
    from collabui.training.marl_bundle import bundle_folder, check_bundle_start

    spec = str(config.from_bundle)
    if spec not in SHIPPED_BUNDLES and not spec.startswith("trained:"):
        spec = f"trained:{spec}"
    # A folder without a bundle (or, for MARL, one with agent adapters) fails here, before any work.
    if config.marl_iterations:
        check_bundle_start(spec)
    else:
        read_bundle(bundle_folder(spec))
    source = bundle_folder(spec)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(source, tmp, ignore=shutil.ignore_patterns("__pycache__", ".*"))
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out

