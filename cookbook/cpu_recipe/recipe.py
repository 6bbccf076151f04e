"""The CPU recipe: verified demonstrations -> SFT -> held-out evaluation, with results.json.

Run (one command, resumable: rerun it after a crash or Ctrl-C and finished work is kept):

    ./.venv/bin/python cookbook/cpu_recipe/recipe.py --out runs/recipe [--publish]

Stages (see README.md next to this file for what each one measured):

1. ``demo/``: search verified trajectories on the training tasks (the environment's reward
   keeps only what works; element order and ids shuffled by the device), ``--demo-minutes``.
2. ``sft/``: SFT of every SmolLM2 weight (completion-only loss) on those steps in the
   ``terse`` prompt style; ``extract/``: its weight change as a 32.5 MB low-rank LoRA adapter,
   which ``bundle/`` merges at load (``--no-full-finetune``: a LoRA adapter, rank 32 on every
   linear layer, instead).
3. ``eval/<system>/``: every system on the held-out tasks with shuffled pages and fixed seeds:
   random and lexical baselines, the base model and the trained model as single agents (and
   the team rows when ``--team`` is given).
4. ``results.json`` (and with ``--publish`` ``cookbook/cpu_recipe/results.json``): success per
   system with 95% Wilson intervals; ``--table`` prints the README's table from it.

Train and tune only on ``TRAIN_TASKS``; ``HELDOUT_TASKS`` are evaluation only.
"""

import argparse
import dataclasses
import datetime
import functools
import json
import re
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# The stages, in modules beside this file (a script's folder is on sys.path).
from recipe_eval import (
    MARL_ROW,
    check_marl_row,
    check_previous,
    check_previous_name,
    check_row_name,
    critic_check,
    evaluate,
    paired_rows,
    plot,
    publish_ablations,
    publish_results,
    publish_row,
    systems,
    table,
    team_figures,
    validate,
)
from recipe_eval import row as _row
from recipe_marl import ABLATIONS, MARL_FLAGS, marl_runs, marl_suffix, marl_template, train_marl
from recipe_sft import (
    ALL_LINEAR,
    demonstrate,
    extract,
    full_bundle,
    onpolicy_dpo,
    onpolicy_round,
    sft,
    soup,
    start_bundle,
)

from collabui.cli.flags import add_config_flags, config_from_args, flag_of
from collabui.config import TeamConfig
from collabui.devices.simplify import ELEMENT_FORMATS
from collabui.errors import ConfigError, ModelLoadError
from collabui.evaluation.miniwob import MiniWoBEvalConfig
from collabui.evaluation.paired import render_paired
from collabui.training.demonstrate import DemoConfig
from collabui.training.marl_config import MARLConfig
from collabui.training.mistake_pairs import OWN_PAIR_OPTIONS
from collabui.training.sft import AgentSFTConfig
from collabui.training.task_lists import HELDOUT_TASKS, TRAIN_TASKS

# No ``from __future__ import annotations``: the dataclass's annotations are real types, so the
# module also works loaded by file path without an entry in sys.modules (tests, importlib).
HERE = Path(__file__).resolve().parent
#: Where ``--publish`` puts the trained team inside the package (served as ``smollm2-trained``).
SHIPPED = HERE.parents[1] / "sdk" / "trained" / "smollm2"

#: The fields of the composed configs that have recipe flags; the recipe sets the others.
_DEMO_FLAGS = ("minutes", "workers", "seeds")
_SFT_FLAGS = ("num_train_epochs", "learning_rate", "per_device_train_batch_size", "lora_r", "lora_dropout",
              "lora_from_layer", "length_window", "full_finetune", "seed", "bf16")
_EVAL_FLAGS = ("episodes", "serve", "serve_dtype", "serve_agents", "serve_backend")
#: Fields of the evaluation's team with flags (added apart: flags reach one level of nesting).
_EVAL_TEAM_FLAGS = ("seed", "max_steps", "stop_when_decided", "skip_stale")
#: Flags spelled otherwise than their fields: the recipe's flags from before the config existed.
_RENAME = {"minutes": "demo_minutes", "workers": "demo_workers", "seeds": "demo_seeds", "num_train_epochs": "sft_epochs",
           "learning_rate": "lr", "per_device_train_batch_size": "batch", "seed": "sft_seed", "teams": "team",
           "episodes_per_task": "marl_episodes", "task_episodes": "marl_task_episodes", "max_pairs": "marl_pairs",
           **{name: f"marl_{name}" for name in OWN_PAIR_OPTIONS},
           "mirror_corrections": "marl_mirror", "element_kinds": "marl_element_kinds", "pool_pairs": "marl_pool",
           "shared_adapter": "marl_shared", "anchor": "marl_anchor", "rehearse": "marl_rehearse",
           "interpolate": "marl_interpolate"}
#: The evaluation team's flags: its ``seed`` is the held-out rows' (dests prefixed: SFT has a seed too).
_EVAL_TEAM_RENAME = {**_RENAME, "seed": "eval_seed"}
_EVAL_TEAM_DEST = "eval_team_"
#: The recipe's help of the composed configs' flagged fields (their own help is written for other commands).
_HELPS = {
    "stop_when_decided": "held-out team rows skip a step's remaining agent calls once the vote is decided (the "
                         "same actions, fewer calls; not the arbiter row, not MARL's rollouts or the validations; "
                         "--no-stop-when-decided: every entry asked)",
    "skip_stale": "the 4 x 3 teams (held-out team rows, team validations) pass over a voted action that repeats "
                  "the last one when it left the page unchanged, for the most-voted other proposal (TeamConfig."
                  "skip_stale; MARL's rollouts only with --marl-skip-stale; --no-skip-stale: the paper's vote, every row before v57)",
    "demo.minutes": "search time budget",
    "demo.workers": "browsers searching at once",
    "demo.seeds": "seeds searched per training task, round-robin over the tasks 8 seeds at a time; the search "
                  "stops at whichever of this and --demo-minutes comes first (a count that ends first makes "
                  "the data the same on a faster or slower machine)",
    "sft.num_train_epochs": "SFT epochs",
    "sft.learning_rate": "SFT learning rate (cosine schedule, 10 warm-up steps)",
    "sft.per_device_train_batch_size": "SFT rows per step",
    "sft.lora_r": "LoRA rank (alpha: twice the rank)",
    "sft.lora_dropout": "LoRA dropout (0: the model underfits here, and dropout costs ~20%% of a step)",
    "sft.lora_from_layer": "LoRA on the decoder layers from this index up (0: all; the backward pass stops "
                           "above the layers below it, a cheaper step)",
    "sft.length_window": "rows per length-sorted window (batches mix tasks, pad little); 0: batches grouped "
                         "by length over all rows (mostly one task each)",
    "sft.seed": "SFT's seed (LoRA's initial weights, the batches' order): another draw of the same recipe",
    "sft.full_finetune": "train every weight (the default since v35; the bundle carries the change as a "
                         "low-rank adapter, --extract-rank); --no-full-finetune --lr 3e-4: a LoRA adapter, the "
                         "recipe up to v34",
    "sft.bf16": "bf16 mixed precision in SFT (and the on-policy round); default: where the hardware computes it "
                "(CUDA, a CPU with AVX512-BF16/AMX: ~1.5x faster steps there), float32 elsewhere",
    "evaluation.episodes": "held-out episodes per task (models)",
    "evaluation.serve": "evaluate the model rows on a vLLM server each (`collabui serve --setup` once; 4 episodes "
                        "at once); the baselines run here",
    "seed": "seed of the held-out evaluation",
    "max_steps": "environment steps per episode (every evaluation)",
}


def _skip_all_but(cls: type, flagged: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls) if f.name not in flagged)


def _demo_template() -> DemoConfig:
    """The search of stage 1 (``out_dir`` becomes OUT/demo)."""
    return DemoConfig(out_dir="demo", tasks=TRAIN_TASKS, seeds=400)


def _sft_template() -> AgentSFTConfig:
    """The SFT of stage 2 and of the on-policy round (each sets ``output_dir``; ``lora_alpha`` is
    twice ``lora_r``). Every weight trains (since v35: on the same data it beat LoRA r=32 held
    out, 57 against 28 of 104, section v34ft of the README); ``--no-full-finetune --lr 3e-4`` is
    the LoRA recipe up to v34. Random batches pad ~40% more than length-sorted ones; sorting within small
    windows keeps most of that saving and still mixes tasks (the config then samples in that
    order; the sampling strategy applies with window 0)."""
    return AgentSFTConfig(output_dir="sft/trl", num_train_epochs=1.0, learning_rate=1e-4, full_finetune=True,
                          per_device_train_batch_size=8, lora_r=32, lora_alpha=64, lora_dropout=0.0,
                          lora_target_modules=list(ALL_LINEAR), max_length=512, seed=0, lr_scheduler_type="cosine",
                          warmup_steps=10, length_window=32, train_sampling_strategy="group_by_length")


def _evaluation_template() -> MiniWoBEvalConfig:
    """The held-out evaluation every row starts from (each row sets its model, team and format)."""
    return MiniWoBEvalConfig(tasks=",".join(HELDOUT_TASKS), episodes=13, concurrency=2, shuffle_elements=True,
                             element_format="html",
                             # Decided votes stop (the team rows only): the same actions in ~2/3 of the time (v49v).
                             # Stale repeats are passed over (the teams): validation 40/60 against 38, none
                             # lost; held out 55/104 against 39 on v55's draw (section v57).
                             team=TeamConfig(seed=0, max_steps=6, stop_when_decided=True, skip_stale=True))


@dataclass(frozen=True, kw_only=True)
class RecipeConfig:
    """Every setting of the CPU recipe; the command line is generated from it (``_parser``).

    It composes the configs of its stages instead of copying their fields: ``demo`` (the search,
    :class:`DemoConfig`), ``sft`` (:class:`AgentSFTConfig`, also the on-policy round's SFT),
    ``evaluation`` (:class:`MiniWoBEvalConfig`, the held-out evaluation with its team) and ``marl``
    (:class:`MARLConfig`, stage 6: its pair options have ``--marl-*`` flags, and
    ``recipe_marl.marl_config`` sets its start, team, iterations, DPO step and serving). The
    recipe sets some of their fields itself: ``demo.out_dir`` (OUT/demo), ``sft.output_dir``
    (per stage), ``sft.lora_alpha`` (2 x ``lora_r``), ``sft.train_sampling_strategy``
    (``group_by_length``, used when ``length_window`` is 0), and per evaluated row the model,
    the team's shape and the page format. ``evaluation.team`` gives every evaluation its
    ``max_steps`` and the held-out rows their ``seed`` (the critic check uses seed + 1).
    """

    out_dir: str = field(default="runs/recipe", metadata={"help": "run folder (resumable)"})
    from_bundle: str | None = field(default=None, metadata={
        "metavar": "SPEC", "help": "skip stages 1-2: start from this trained bundle (smollm2-trained, the shipped "
        "model, or trained:FOLDER), copied to OUT/bundle; with --marl-iterations MARL (and --ablations) "
        "trains on it, so a fresh machine measures the MARL rows without retraining the SFT model"})
    demo: DemoConfig = field(default_factory=_demo_template, metadata={
        "help": "stage 1", "skip_flags": _skip_all_but(DemoConfig, _DEMO_FLAGS)})
    synthetic_pages: bool = field(default=False, metadata={
        "help": "stage 1 also searches collabui's synthetic form pages (miniwob/synth-fields, "
                "synth-choices, synth-forms) beside the training tasks"})
    sft_examples: int = field(default=3200, metadata={"help": "SFT rows drawn from the data"})
    team_share: float = field(default=0.5, metadata={
        "metavar": "P", "help": "share of SFT rows read as an agent of a 4 x 3 team reads them: drawn answers "
        "of the other agents beside the page, right or a plausible mistake (collabui.training.team_context)"})
    balance: bool = field(default=True, metadata={
        "help": "draw SFT rows round-robin over training tasks (--no-balance: at random)"})
    balance_steps: bool = field(default=True, metadata={
        "help": "with --balance: round-robin over (task, step) pairs, so a multi-step task gets a share per step"})
    hindsight: int = field(default=0, metadata={
        "metavar": "N", "help": "add up to N hindsight-relabelled rows per first-step click on a quoted text (the "
        "same page, the instruction quoting another element's text: collabui.training.hindsight) before drawing"})
    sft: AgentSFTConfig = field(default_factory=_sft_template, metadata={
        "help": "stage 2", "skip_flags": _skip_all_but(AgentSFTConfig, _SFT_FLAGS)})
    sft_draws: int = field(default=1, metadata={
        "metavar": "K", "help": "with full fine-tuning: train SFT K times (seeds --sft-seed, +1, ...) and average the "
        "K models into one (a uniform soup, collabui.training.soup); K times the SFT time (default 1: one draw)"})
    extract_rank: int = field(default=48, metadata={
        "metavar": "R", "help": "with full fine-tuning: the bundle carries the weight change as a rank-R LoRA "
        "adapter (truncated SVD per linear layer, collabui.training.extract; 48 + --extract-embedding-rank 32 "
        "is 32.5 MB in fp16); 0: the whole model (~540 MB; no --publish, no MARL)"})
    extract_embedding_rank: int = field(default=32, metadata={
        "metavar": "R", "help": "the extract's rank on the tied token embedding (0: left out)"})
    element_format: str = field(default="text-first", metadata={"choices": ELEMENT_FORMATS,
                                                          "help": "page format taught (and read by trained models)"})
    style: str = field(default="terse", metadata={
        "choices": ("trained", "grounded", "terse", "named"),
        "help": "answer format taught: the action alone, the target's screen line first, or that with the "
        "shortest prompt (terse, the default since v30t: a team agent's prompt ~181 tokens on the training "
        "pages against grounded's 251), or terse with the team's answers as calls naming their element "
        "(named: click(button \"TWO\" [E]))"})
    evaluation: MiniWoBEvalConfig = field(default_factory=_evaluation_template, metadata={
        "help": "stage 3", "skip_flags": _skip_all_but(MiniWoBEvalConfig, _EVAL_FLAGS)})
    baseline_episodes: int = field(default=25, metadata={"help": "per task, random, lexical and the trained team"})
    critic_episodes: int = field(default=6, metadata={"help": "per oracle task, for the critic check"})
    teams: bool = field(default=False, metadata={"help": "also evaluate 4 x 3 teams (slow on a CPU)"})
    systems: str | None = field(default=None, metadata={
        "help": "comma-separated rows to evaluate now (default all; 'none' for none; others kept from earlier runs)"})
    onpolicy_episodes: int = field(default=0, metadata={
        "metavar": "N", "help": "on-policy round: roll the SFT model out on N new seeds per training task, label "
        "its steps with the verified critic and train on (default 0: no round)"})
    round2_demo_rows: int = field(default=400, metadata={
        "help": "demonstration rows not seen in SFT, mixed into the on-policy round's training"})
    onpolicy_dpo: bool = field(default=True, metadata={
        "help": "end the on-policy round with DPO (+ an SFT term on chosen) on the model's own wrong answers "
        "against verified-right ones (--no-onpolicy-dpo: SFT on verified rows only)"})
    dpo_lr: float = field(default=5e-5, metadata={"help": "learning rate of the on-policy and MARL DPO"})
    marl_iterations: int = field(default=0, metadata={
        "metavar": "N", "help": "MARL on the SFT model (paper Sec. 3.2): N iterations of 4 x 3 team rollouts on new "
        "seeds of the training tasks, the verified critic, each agent's own wrong proposals against verified-"
        "right answers, per-agent DPO (+ SFT term), edge update; the trained team rows then use it (default 0)"})
    marl: MARLConfig = field(default_factory=marl_template, metadata={
        "help": "stage 6", "skip_flags": _skip_all_but(MARLConfig, MARL_FLAGS)})
    marl_epochs: float = field(default=1.0, metadata={
        "metavar": "E", "help": "MARL: DPO epochs over each agent's pairs per iteration"})
    marl_skip_stale: bool = field(default=False, metadata={
        "help": "MARL's rollouts vote as the evaluated teams do (--skip-stale: a voted repeat of an action that "
        "left the page unchanged is passed over), so the team that plays the training episodes is the team "
        "evaluated; default: the paper's vote"})
    marl_rollouts_from: str | None = field(default=None, metadata={
        "metavar": "RUN", "help": "MARL: take iteration 0's rollouts (and labels) from the recipe run folder RUN, "
        "which trained MARL from the same bundle with the same team, tasks and episodes: a sweep of the update "
        "(--dpo-lr, --marl-epochs, ...) on the same episodes, without rolling them out again. More episodes of a "
        "task (--marl-episodes, --marl-task-episodes) grow RUN's: only the rest are rolled out"})
    marl_reuse_iterations: int = field(default=1, metadata={
        "metavar": "K", "help": "with --marl-rollouts-from: reuse the rollouts (and labels) of RUN's first K "
        "iterations. From iteration 1 on they are the episodes RUN's own updated team played, not this run's: "
        "every update of the sweep then learns from the same data"})
    marl_gate: bool = field(default=False, metadata={
        "help": "with --marl-iterations, --team, --validate and --validate-forms: validate the SFT team on the same "
        "pages too, and keep the MARL team (its trained_team rows, --publish) only when it is below the SFT team on "
        "neither; else those rows and --publish take the SFT team (results.json: marl_gate)"})
    ablations: bool = field(default=False, metadata={
        "help": "with --marl-iterations and --team: also train the paper's ablations from the same SFT model at "
        "the same compute (ablation_no_cr: outcome critic; ablation_no_edge_update; ablation_rft: SFT on "
        "chosen) and evaluate them as rows (only those --systems names, when it names any)"})
    validate: int = field(default=0, metadata={
        "metavar": "N", "help": "also evaluate the trained model on N new seeds per training task (the set to "
        "tune on; held-out tasks never are)"})
    validate_forms: int = field(default=0, metadata={
        "metavar": "N", "help": "with --team: also evaluate the trained team (the MARL team when there is one) on "
        "N new seeds of each training page with several steps before Submit (the forms login-user-popup and "
        "multi-layouts, the checkbox list click-checkboxes) and count its "
        "typing loops: updates too strong for the team loop there as on the held-out login forms, which "
        "--validate's 3 seeds a task hardly show (v52p looped in 9 of 15 login-user-popup episodes, v41 in 0)"})
    publish: bool = field(default=False, metadata={
        "help": "ship this run: its bundle as smollm2-trained, its results.json next to this file with the shipped "
        "rows it lacks kept (carried baselines, experiment rows) and the shipped model's own rows replaced"})
    publish_previous: str | None = field(default=None, metadata={
        "metavar": "NAME", "help": "with --publish: keep the shipped model's own rows beside this run's as "
        "<row>_NAME (e.g. NAME v66: trained_team_v66), each with its command and figures"})
    publish_row: str | None = field(default=None, metadata={
        "metavar": "NAME", "help": "add this run's trained_team row to the results.json next to this file as row "
        "NAME (with the command that trained it and the run's MARL and validation figures under runs.NAME), "
        "the other rows kept: an experiment beside the shipped model"})
    publish_ablations: bool = field(default=False, metadata={
        "help": "with --ablations: put this run's MARL team row (as trained_team_marl) and its ablation rows into "
        "the results.json next to this file, replacing those of an earlier start, so every MARL row there "
        "branches from one SFT model"})
    table: bool = field(default=False, metadata={"help": "print the README table of results.json and exit"})
    paired: str | None = field(default=None, metadata={
        "metavar": "A,B", "help": "print the paired counts (exact McNemar) of rows A and B of results.json on "
        "the episodes both played, from the per-episode outcomes rows keep, and exit"})
    plot: str | None = field(default=None, metadata={
        "metavar": "PNG", "help": "draw the headline rows of results.json (success with 95%% intervals) to PNG "
        "and exit; a finished run draws OUT/results.png itself"})

    def __post_init__(self) -> None:
        for name in ("validate", "validate_forms", "onpolicy_episodes", "round2_demo_rows", "hindsight", "marl_iterations"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{flag_of(name)} must be >= 0, got {getattr(self, name)}")
        if not 0.0 <= self.team_share <= 1.0:
            raise ConfigError(f"--team-share must be between 0 and 1, got {self.team_share}")
        if self.sft_draws < 1:
            raise ConfigError(f"--sft-draws must be >= 1, got {self.sft_draws}")
        if self.sft_draws > 1 and not self.sft.full_finetune:
            raise ConfigError("--sft-draws averages fully fine-tuned models; the mean of LoRA adapters' factors is not "
                              "the mean of their changes: drop --no-full-finetune or --sft-draws")
        if self.critic_episodes < 1:  # checked here, not after the stages before it ran
            raise ConfigError(f"--critic-episodes must be >= 1, got {self.critic_episodes}")
        if self.extract_rank < 0 or self.extract_embedding_rank < 0:
            raise ConfigError(f"--extract-rank and --extract-embedding-rank must be >= 0, got {self.extract_rank} "
                              f"and {self.extract_embedding_rank}")
        if self.sft.full_finetune and not self.extract_rank and self.onpolicy_episodes:
            raise ConfigError("the on-policy round (--onpolicy-episodes) puts its DPO adapter on an extract; "
                              "--extract-rank 0 makes none: give a rank, or --no-full-finetune --lr 3e-4")
        if self.sft.full_finetune and not self.extract_rank and (self.publish or self.marl_iterations):
            raise ConfigError("--extract-rank 0 bundles the whole model (~540 MB): it is not shipped (--publish) "
                              "and takes no MARL (--marl-iterations); give a rank or drop those")
        if self.from_bundle is not None and (self.onpolicy_episodes or self.sft_draws > 1):
            raise ConfigError("--from-bundle starts from a trained model and skips stages 1-2; the on-policy round "
                              "(--onpolicy-episodes) and --sft-draws belong to them: drop one or the other")
        if self.publish_previous is not None and not self.publish:
            raise ConfigError("--publish-previous names the shipped model that --publish replaces: give --publish "
                              "with it")
        if self.publish_previous is not None:
            check_previous_name(self.publish_previous)  # main checks it against the shipped rows
        if self.publish_row is not None:
            if not self.teams:
                raise ConfigError("--publish-row copies the run's trained_team row: give --team with it")
            check_row_name(self.publish_row)
        if self.marl_epochs <= 0:
            raise ConfigError(f"--marl-epochs must be > 0, got {self.marl_epochs}")
        if self.marl_skip_stale and not self.evaluation.team.skip_stale:
            raise ConfigError("--marl-skip-stale rolls MARL out with the evaluated teams' vote, but --no-skip-stale "
                              "evaluates them with the paper's: drop one of the two")
        if self.marl_rollouts_from is not None and not self.marl_iterations:
            raise ConfigError("--marl-rollouts-from reuses MARL rollouts: give --marl-iterations N with it")
        if not 1 <= self.marl_reuse_iterations <= max(self.marl_iterations, 1):
            raise ConfigError(f"--marl-reuse-iterations must be between 1 and --marl-iterations "
                              f"({self.marl_iterations}), got {self.marl_reuse_iterations}")
        if self.marl_reuse_iterations > 1 and self.marl_rollouts_from is None:
            raise ConfigError("--marl-reuse-iterations says how many of another run's iterations to reuse: give "
                              "--marl-rollouts-from RUN with it")
        if self.marl_gate and not (self.marl_iterations and self.teams and self.validate and self.validate_forms):
            raise ConfigError("--marl-gate compares the MARL team with the SFT team on both validations: give "
                              "--marl-iterations N, --team, --validate N and --validate-forms N with it")
        if self.validate_forms and not self.teams:
            raise ConfigError("--validate-forms measures the trained team: give --team with it")
        if self.ablations and not (self.marl_iterations and self.teams):
            raise ConfigError("--ablations compares MARL teams: give --marl-iterations N and --team with it")
        if self.publish_ablations and self.marl_gate:
            raise ConfigError("--publish-ablations publishes the MARL team beside its ablations, and --marl-gate may "
                              "replace that team by the SFT team: drop one of the two")
        if sum((self.table, self.paired is not None, self.plot is not None)) > 1:
            raise ConfigError("--table, --paired and --plot each read results.json and exit: give one of them")
        if self.publish_ablations and not self.ablations:
            raise ConfigError("--publish-ablations copies the run's ablation rows: give --ablations with it")


def _parser() -> tuple[argparse.ArgumentParser, dict[str, str]]:
    """The recipe's parser, and ``{dotted field path: its flag without dashes}`` (in the order added)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])

    def named(paths: list[str], rename: dict[str, str]) -> dict[str, str]:
        return {path: flag_of(path.rsplit(".", 1)[-1], rename)[2:].replace("-", "_") for path in paths}

    flags = named(add_config_flags(ap, RecipeConfig, rename=_RENAME, helps=_HELPS), _RENAME)
    team = _evaluation_template().team
    flags |= named(["evaluation.team." + name for name in add_config_flags(
        ap, TeamConfig, only=_EVAL_TEAM_FLAGS, rename=_EVAL_TEAM_RENAME, helps=_HELPS, dest_prefix=_EVAL_TEAM_DEST,
        defaults={name: getattr(team, name) for name in _EVAL_TEAM_FLAGS})], _EVAL_TEAM_RENAME)
    return ap, flags


def _args(argv: list[str] | None = None) -> RecipeConfig:
    """The RecipeConfig of the command line (argparse's error and exit 2 on a bad value)."""
    ap, _ = _parser()
    args = ap.parse_args(argv)
    try:
        config = config_from_args(RecipeConfig, args)
        team = dataclasses.replace(config.evaluation.team,
                                   **{n: getattr(args, _EVAL_TEAM_DEST + n) for n in _EVAL_TEAM_FLAGS})
        return dataclasses.replace(config, evaluation=dataclasses.replace(config.evaluation, team=team))
    except ConfigError as e:
        ap.error(_in_recipe_flags(str(e)))


def _in_recipe_flags(message: str) -> str:
    """A MARL config's error in the recipe's words: its fields (``max_pairs``, ``--max-pairs``)
    named by the recipe's flags (``--marl-pairs``)."""
    for name in MARL_FLAGS:
        message = re.sub(rf"(?<![\w-])(--{name.replace('_', '-')}|{name})(?![\w-])", flag_of(name, _RENAME), message)
    return message


def flag_values(config: RecipeConfig) -> dict[str, Any]:
    """``{flag: value}`` of every recipe flag (``demo_minutes``, ``lr``, ...: the flag without
    its dashes, dashes as underscores), read from ``config``: ``recipe.json``'s ``args``."""
    _, flags = _parser()
    return {flag: functools.reduce(getattr, path.split("."), config) for path, flag in flags.items()}


#: The settings that shape the trained model, written into the bundle's ``made_by`` command.
_TAUGHT = ("balance_steps", "batch", "bf16", "demo_minutes", "demo_seeds", "dpo_lr", "element_format", "extract_embedding_rank",
           "extract_rank", "full_finetune", "hindsight",
           "length_window", "lora_dropout", "lora_from_layer", "lora_r", "lr", "onpolicy_dpo", "onpolicy_episodes", "round2_demo_rows",
           "sft_draws", "sft_epochs", "sft_examples", "sft_seed", "style", "synthetic_pages", "team_share")
#: MARL's settings, in the MARL team's ``made_by`` (they shape the team, not the SFT model): every
#: MARLConfig flag plus the recipe's own MARL fields that change what is trained (not where from:
#: ``--marl-rollouts-from`` is added apart).
_TAUGHT_MARL = tuple(sorted({_RENAME.get(name, name) for name in MARL_FLAGS}
                            | {"marl_epochs", "marl_iterations", "marl_skip_stale"}))


def made_by_command(config: RecipeConfig, *, marl: bool = False) -> str:
    """The recipe command line that trains ``config``'s model (``marl``: its MARL team): its
    shaping settings as flags the parser accepts (a switch on as ``--x``; off as ``--no-x`` where
    it is on by default, else left out: the parser has no ``--no-x`` then)."""
    values, defaults = flag_values(config), flag_values(_args([]))
    words = ["cookbook/cpu_recipe/recipe.py"]
    names = _TAUGHT + (_TAUGHT_MARL if marl else ())
    if config.from_bundle is not None:  # the start's own made_by says how it was trained
        words += ["--from-bundle", config.from_bundle]
        names = ("dpo_lr", *_TAUGHT_MARL) if marl else ()
    for name in sorted(names):
        flag, value = "--" + name.replace("_", "-"), values[name]
        if isinstance(value, bool):
            if value or defaults[name]:
                words.append(flag if value else "--no-" + flag[2:])
        elif isinstance(value, tuple):  # a list flag takes its items comma-separated; none: its default
            if value:
                words += [flag, ",".join(map(str, value))]
        else:
            words += [flag, str(value)]
    if marl and config.marl_reuse_iterations > 1:  # later iterations learnt from that run's team's episodes
        words += ["--marl-rollouts-from", str(config.marl_rollouts_from),
                  "--marl-reuse-iterations", str(config.marl_reuse_iterations)]
    return " ".join(words)


class _Clock:
    """Seconds per stage, kept in ``recipe.json`` across resumed runs."""

    def __init__(self, path: Path, config: RecipeConfig) -> None:
        self.path = path
        self.data: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {"seconds": {}}
        self.data["args"] = flag_values(config)

    def run(self, name: str, fn: Callable[[], Any], once: bool = False) -> Any:
        """Run a stage and add its seconds. ``once``: the stage's output is final once made
        (a trained model), so a resumed run that finds it only reloads it and adds no time;
        an interrupted stage's seconds count either way (the resumed run finishes it)."""
        finished = once and name in self.data.setdefault("finished", [])
        print(f"[recipe] {name} ...", file=sys.stderr, flush=True)
        started = time.perf_counter()
        try:
            result = fn()
            if once and not finished:
                self.data["finished"].append(name)
        finally:
            spent = time.perf_counter() - started
            if not finished:
                self.data["seconds"][name] = round(self.data["seconds"].get(name, 0.0) + spent, 1)
            self.path.write_text(json.dumps(self.data, indent=1))
        print(f"[recipe] {name}: {spent:.0f} s{' (finished earlier; not counted)' if finished else ''}",
              file=sys.stderr, flush=True)
        return result

    def minutes(self, *prefixes: str) -> float:
        return round(sum(v for k, v in self.data["seconds"].items() if k.startswith(prefixes)) / 60, 1)


def marl(config: RecipeConfig, start: Path, out: Path, clock: _Clock) -> dict[str, Path]:
    """Stage 6 (``recipe_marl.train_marl``), the MARL team's bundle stamped with this command."""
    found = train_marl(config, start, out, clock)
    _stamp(found["trained_team"], made_by_command(config, marl=True))
    return found


def _stamp(bundle_dir: Path, made_by: str) -> None:
    """The recipe's own command as the bundle's ``made_by`` (what reproduces it)."""
    path = bundle_dir / "team.json"
    manifest = json.loads(path.read_text())
    manifest["made_by"] = made_by
    path.write_text(json.dumps(manifest, indent=1) + "\n")


def bundle(config: RecipeConfig, sft_dir: Path, out: Path, dpo_dir: Path | None = None) -> Path:
    """The trained team as a bundle (``trained:FOLDER``): SmolLM2 + the SFT adapter (fp16; with
    full fine-tuning its extract, or with ``--extract-rank 0`` the whole model),
    answering in the taught prompt style; ``--publish`` makes it ``smollm2-trained``."""
    from collabui.models.bundle import write_bundle

    made_by = made_by_command(config)
    team = {"prompt_style": config.style, "max_new_tokens": 128, "element_format": config.element_format}
    if config.sft.full_finetune and not config.extract_rank:
        return full_bundle(sft_dir, out, team=team, made_by=made_by)
    agents = {"agent0": dpo_dir} if dpo_dir is not None else {}
    return write_bundle(out, base="smollm2", merge={"stage1": sft_dir}, agents=agents, team=team,
                        made_by=made_by, train_tasks=list(TRAIN_TASKS))


def train(config: RecipeConfig, out: Path, clock: _Clock) -> Path:
    """Stages 1-2 (demonstrations unless done, SFT, the optional on-policy round): the trained
    model's bundle."""
    if not (out / "demo" / "demo_stats.json").is_file():
        clock.run("1 demonstrations", lambda: demonstrate(config, out / "demo"))
    sft_dir = model_dir = clock.run("2 sft", lambda: sft(config, out / "demo", out / "sft"), once=True)
    if config.sft_draws > 1:
        sft_dir = model_dir = soup(config, model_dir, out, clock)
    if config.sft.full_finetune and config.extract_rank:  # the shipped form of the whole model's change
        sft_dir = clock.run("2 extract", lambda: extract(config, model_dir, out / "extract"))
    if not config.onpolicy_episodes:
        return bundle(config, sft_dir, out / "bundle")
    # With an on-policy round the SFT model is only the round's starting point (bundle-sft/); a
    # fully fine-tuned one continues from its whole weights, not from its extract.
    start = bundle(config, sft_dir, out / "bundle-sft")
    init = model_dir if config.sft.full_finetune else sft_dir
    sft_dir = clock.run("2b on-policy round",
                        lambda: onpolicy_round(config, start, out / "demo", init, out / "onpolicy"), once=True)
    dpo_dir = (clock.run("2c on-policy DPO", lambda: onpolicy_dpo(config, sft_dir, out / "onpolicy"), once=True)
               if config.onpolicy_dpo else None)
    return bundle(config, sft_dir, out / "bundle", dpo_dir)


def checks(config: RecipeConfig, trained: Path, out: Path, clock: _Clock,
           teams: dict[str, Path] | None = None) -> dict[str, Any]:
    """Validation on the training tasks (with ``--validate``; with ``--team`` the trained team's
    too: the MARL team of ``teams`` when there is one) and the verified critic's check: the
    results.json fields they fill."""
    found: dict[str, Any] = {}
    if config.validate:
        # Its own folder per model: the SFT model's figure stays when a round is added later.
        folder = out / ("validation-round" if config.onpolicy_episodes else "validation")
        val = found["validation"] = _row(clock.run("5 validation", lambda: validate(config, trained, folder)))
        print(f"[recipe] validation (training tasks, new seeds): {val['successes']}/{val['episodes']} "
              f"{json.dumps(val['per_task'])}", file=sys.stderr)
    team = (teams or {}).get("trained_team", trained)
    name = f"marl-team{marl_suffix(config.marl_iterations, config.marl.interpolate)}" if team != trained else "team"
    if config.validate and config.teams:
        val = found["validation_team"] = _team_validation(config, team, out, name, clock, "5 validation team")
        print(f"[recipe] validation of the trained team (training tasks, new seeds): {val['successes']}/"
              f"{val['episodes']} {json.dumps(val['per_task'])}", file=sys.stderr)
    if config.validate_forms:
        val = found["validation_forms_team"] = _team_validation(config, team, out, name, clock, "5 validation forms",
                                                                forms=True)
        print(f"[recipe] validation of the trained team on the training forms (new seeds): {val['successes']}/"
              f"{val['episodes']}, typing loops in {val.get('typing_loops')} {json.dumps(val['per_task'])}",
              file=sys.stderr)
    if config.marl_gate and team != trained:
        found["marl_gate"] = marl_gate(config, trained, out, clock, found)
    check = found["critic_check"] = clock.run("4 critic check", lambda: critic_check(config, out / "critic_check"))
    print(f"[recipe] verified critic: coverage {check['coverage_a']}, agreement with the oracle "
          f"{check['agreement']} over {check['entries_both']} entries", file=sys.stderr)
    return found


def _team_validation(config: RecipeConfig, model: Path, out: Path, name: str, clock: _Clock, stage: str, *,
                     forms: bool = False) -> dict[str, Any]:
    """``model`` as the 4 x 3 team on the validation pages (``forms``: ``--validate-forms``') into
    ``validation[-forms]-<name>/``, timed as ``stage``: its results.json row."""
    folder = out / f"validation-{'forms-' if forms else ''}{name}"
    return _row(clock.run(stage, lambda: validate(config, model, folder, team=True, forms=forms)))


def marl_gate(config: RecipeConfig, trained: Path, out: Path, clock: _Clock, found: dict[str, Any]) -> dict[str, Any]:
    """``--marl-gate``: the SFT team on the pages the MARL team was just validated on (``found``),
    and the team the run keeps: the MARL team unless it is below the SFT team on either validation
    (the forms are where too strong an update shows first, as typing loops)."""
    sft = {"validation": _team_validation(config, trained, out, "team", clock, "5 validation sft team"),
           "forms": _team_validation(config, trained, out, "team", clock, "5 validation sft forms", forms=True)}
    marl = {"validation": found["validation_team"], "forms": found["validation_forms_team"]}
    figures = {who: {k: v["successes"] for k, v in rows.items()} for who, rows in (("sft_team", sft), ("marl_team", marl))}
    kept = "marl" if all(figures["marl_team"][k] >= figures["sft_team"][k] for k in marl) else "sft"
    episodes = {k: v["episodes"] for k, v in marl.items()}
    print(f"[recipe] MARL gate: the MARL team {figures['marl_team']} against the SFT team's {figures['sft_team']} "
          f"(of {episodes}): the run keeps the {kept.upper()} team", file=sys.stderr)
    return {**figures, "episodes": episodes, "kept": kept}


def run_facts(config: RecipeConfig, out: Path, clock: _Clock) -> dict[str, Any]:
    """What results.json says about the run beside its rows: tasks, format, data, minutes."""
    if config.from_bundle is not None:
        return _bundle_facts(config, out, clock)
    demo = {k: v for k, v in json.loads((out / "demo" / "demo_stats.json").read_text()).items() if k != "per_task"}
    facts = {**_task_facts(config, config.element_format), "demo": demo,
             # Training time: the search's own clock (kept across resumes) plus SFT.
             "minutes": round(demo["seconds"] / 60 + clock.minutes("2 ", "2b ", "2c ", "6 marl trained_team"), 1)}
    if config.marl_iterations:
        facts["marl"] = marl_runs(out / "marl")
    if config.onpolicy_episodes:
        facts["onpolicy_round"] = json.loads((out / "onpolicy" / "round.json").read_text())
    return facts


def _task_facts(config: RecipeConfig, element_format: str) -> dict[str, Any]:
    """The facts every results.json states: the task lists, shuffled pages, page format, step cap."""
    return {"train_tasks": list(TRAIN_TASKS), "heldout_tasks": list(HELDOUT_TASKS), "shuffled": True,
            "element_format": element_format, "max_steps": config.evaluation.team.max_steps}


def _bundle_facts(config: RecipeConfig, out: Path, clock: _Clock) -> dict[str, Any]:
    """run_facts of a run from a trained bundle: the start and its ``made_by``, MARL's minutes."""
    from collabui.models.bundle import read_bundle

    manifest = read_bundle(out / "bundle")
    facts = {**_task_facts(config, manifest.get("team", {}).get("element_format", config.element_format)),
             "start": {"bundle": config.from_bundle, "made_by": manifest.get("made_by")},
             "minutes": clock.minutes("6 marl trained_team")}
    if config.marl_iterations:
        facts["marl"] = marl_runs(out / "marl")
    return facts


def wanted_rows(config: RecipeConfig, rows: dict[str, Any]) -> list[str]:
    """The rows ``--systems`` asks for (all by default), in the recipe's order.

    Raises:
        ConfigError: a name that is not a row (``--team`` adds the teams).
    """
    if not config.systems:
        return list(rows)
    wanted = {w.strip() for w in config.systems.split(",")} - {"", "none"}
    unknown = sorted(wanted - set(rows))
    if unknown:
        raise ConfigError(f"unknown system(s) {unknown}; choose from {sorted(rows)} (--team adds the teams)")
    return [name for name in rows if name in wanted]


def main(argv: list[str] | None = None) -> int:
    """The recipe's command. Run as a script, SIGINT and SIGTERM stop it through every ``finally``
    (as ``collabui train`` stops): the stopped stage's seconds reach recipe.json, its servers
    and browsers close, and the exit is 130 / 143; the same command resumes the run."""
    from collabui.cli import stopping
    from collabui.cli._log import configure

    config = _args(argv)
    configure()  # the stages' progress (episodes, labels, MARL stages) on stderr, bars on a tty
    if argv is None:  # no time bound: a stop may come while a stage saves a model
        stopping.install(watchdog=False)
    out = Path(config.out_dir)
    if config.table or config.paired is not None or config.plot is not None:
        path = out / "results.json" if (out / "results.json").is_file() else HERE / "results.json"
        return _show(config, json.loads(path.read_text()), path)
    out.mkdir(parents=True, exist_ok=True)
    try:  # before hours of training, not after
        rows = systems(config, out / "bundle")
        names = wanted_rows(config, rows)
        if config.publish_row is not None:
            check_row_name(config.publish_row, taken={*rows, *ABLATIONS, MARL_ROW})
            if not _will_have(out, names, ["trained_team"]):
                raise ConfigError("--publish-row copies the run's trained_team row, which neither --systems nor "
                                  "an earlier run into this folder gives: add trained_team to --systems")
        if config.publish_previous is not None and (HERE / "results.json").is_file():
            check_previous(json.loads((HERE / "results.json").read_text()), config.publish_previous)
        if config.publish_ablations and not _will_have(out, names, list(ABLATIONS)):
            raise ConfigError("--publish-ablations copies the run's ablation rows (and its trained_team row), which "
                              "neither --systems nor an earlier run into this folder gives: add them to --systems")
        if config.publish_ablations and not _will_have(out, names, ["trained_team"]):
            check_marl_row(HERE / "results.json", _ablations_command(config, out))
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        _run(config, out, names)
    except KeyboardInterrupt as exc:  # SIGTERM too (collabui.cli.stopping.Interrupted)
        print(f"stopped ({exc or 'SIGINT'}); the same command resumes the run in {out}", file=sys.stderr)
        return stopping.exit_code(exc)
    except (ConfigError, ModelLoadError) as exc:  # e.g. a stage's folder holds another run: one line, not a trace
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


def _show(config: RecipeConfig, results: dict[str, Any], path: Path) -> int:
    """``--table`` / ``--paired A,B`` / ``--plot PNG``: show ``results`` (read from ``path``) and exit."""
    if config.table:
        print(table(results))
        return 0
    if config.plot is not None:
        try:
            drawn = plot(results, config.plot)
        except ConfigError as exc:
            print(f"error: {exc} ({path})", file=sys.stderr)
            return 2
        print(f"{config.plot}: {len(drawn)} rows of {path}")
        return 0
    names = [n.strip() for n in (config.paired or "").split(",")]
    try:
        if len(names) != 2 or not all(names):
            raise ConfigError(f"--paired takes two row names, A,B; got {config.paired!r}")
        found = paired_rows(results, *names)
    except ConfigError as exc:
        print(f"error: {exc} ({path})", file=sys.stderr)
        return 2
    print(f"A = {names[0]}, B = {names[1]} ({path})")
    print(render_paired(found), end="")
    return 0


def _draw(results: dict[str, Any], path: Path) -> None:
    """The run's plot beside its results.json; a run that trained and evaluated does not fail
    for want of a picture."""
    try:
        plot(results, path)
    except ConfigError as exc:
        print(f"[recipe] no {path.name}: {exc}", file=sys.stderr)


def _ablations_command(config: RecipeConfig, out: Path) -> str:
    """``from`` of the rows --publish-ablations writes: each ablation row is the MARL team's
    command with the one change its name says."""
    return f"{out} ({datetime.date.today()}): {made_by_command(config, marl=True)} --ablations"


def _will_have(out: Path, names: list[str], rows: list[str]) -> bool:
    """Whether the folder's results.json will hold one of ``rows`` after this run: evaluated now
    (``names``) or by an earlier run into the folder."""
    earlier = out / "results.json"
    done = json.loads(earlier.read_text()).get("systems", {}) if earlier.is_file() else {}
    return any(row in names or row in done for row in rows)


def _reads_marl(fields: dict[str, Any], out: Path) -> bool:
    """Whether a row evaluates a MARL team of this run (its folder then says how many iterations
    trained it: ``eval/trained_team-x2``)."""
    return str(fields["model"]).startswith(f"trained:{out / 'marl'}")


def _is_team(fields: dict[str, Any]) -> bool:
    """Whether a row of :func:`systems` evaluates a team (more than one agent)."""
    return fields.get("team", {}).get("n_agents", 1) > 1


def _row_folder(config: RecipeConfig, name: str, fields: dict[str, Any], out: Path, trained: Path) -> str:
    """Where a row is evaluated (in ``eval/``): its name, with the MARL team's ``-xN`` (iterations)
    or, for a team row that ``--marl-gate`` gave the SFT team (``trained``), ``-sft`` (the MARL
    team's folder of an earlier run stays)."""
    if _reads_marl(fields, out):
        return name + marl_suffix(config.marl_iterations, config.marl.interpolate)
    sft_team = fields["model"] == f"trained:{trained}" and _is_team(fields)
    if config.marl_iterations and sft_team:
        return name + "-sft"
    return name


def _run(config: RecipeConfig, out: Path, names: list[str]) -> None:
    """The stages :func:`main` runs: training (or the bundle's copy), MARL, checks, the rows."""
    clock = _Clock(out / "recipe.json", config)
    trained = start_bundle(config, out / "bundle") if config.from_bundle is not None else train(config, out, clock)
    teams = marl(config, trained, out / "marl", clock) if config.marl_iterations else {}
    found = checks(config, trained, out, clock, teams)
    kept_marl = found.get("marl_gate", {}).get("kept") != "sft"
    if not kept_marl:  # the team rows and --publish take the SFT team
        teams = {name: team for name, team in teams.items() if name != "trained_team"}
    rows = systems(config, trained, out / "marl", marl_team=kept_marl)
    path = out / "results.json"
    # Rows of earlier runs into this folder stay: --systems can add rows one session at a time.
    results: dict[str, Any] = json.loads(path.read_text()) if path.is_file() else {"systems": {}}
    results.update({**found, **run_facts(config, out, clock)})
    for name in names:
        folder = _row_folder(config, name, rows[name], out, trained)
        done = clock.run(f"3 eval {folder}", lambda n=name, f=folder: evaluate(config, f, rows[n], out / "eval"))
        results["systems"][name] = _row(done, out / "eval" / folder)
        if _is_team(rows[name]):
            results.setdefault("team_dynamics", {})[name] = team_figures(out / "eval" / folder)
        results["eval_minutes"] = clock.minutes("3 ")
        path.write_text(json.dumps(results, indent=1))  # after every row: an interrupted run keeps them
    results["eval_minutes"] = clock.minutes("3 ")
    path.write_text(json.dumps(results, indent=1))  # also when no row was evaluated this time
    if config.publish_row is not None:
        command = f"{out} ({datetime.date.today()}): {made_by_command(config, marl=bool(config.marl_iterations))}"
        command += " --marl-gate" if config.marl_gate else ""  # the row may then be the SFT team's (runs.<row>.marl_gate)
        publish_row(results, config.publish_row, command, HERE / "results.json")
    if config.publish_ablations:
        # Each ablation row is the MARL team's command with the one change its name says.
        written = publish_ablations(results, _ablations_command(config, out), HERE / "results.json")
        print(f"[recipe] published {', '.join(written)} to {HERE / 'results.json'}", file=sys.stderr)
    if config.publish:
        note = f"the model shipped until {out} replaced it ({datetime.date.today()})"
        dropped = publish_results(results, HERE / "results.json", previous=config.publish_previous, note=note)
        if dropped:
            print(f"[recipe] dropped the shipped model's rows this run did not evaluate: {', '.join(dropped)} "
                  "(--publish-previous NAME keeps them as <row>_NAME)", file=sys.stderr)
        shutil.rmtree(SHIPPED, ignore_errors=True)
        # collabui/trained/smollm2: the smollm2-trained spec (the MARL team when there is one)
        shutil.copytree(teams.get("trained_team", trained), SHIPPED)
    print(table(results))
    _draw(results, out / "results.png")
    print(f"[recipe] training {results['minutes']} min, evaluation {results['eval_minutes']} min; "
          f"{out / 'results.json'}", file=sys.stderr)


if __name__ == "__main__":
    raise SystemExit(main())
