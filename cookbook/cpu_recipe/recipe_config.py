"""The CPU recipe's settings: ``RecipeConfig`` (every flag of ``recipe.py`` is one of its fields,
composing the stages' own configs), its command line, and the ``made_by`` command a trained
bundle records."""

import argparse
import dataclasses
import functools
import re
from dataclasses import dataclass, field
from typing import Any

from recipe_eval import check_previous_name, check_row_name
from recipe_marl import MARL_FLAGS, marl_template
from recipe_sft import ALL_LINEAR

from collabui.cli.flags import add_config_flags, config_from_args, flag_of
from collabui.config import TeamConfig
from collabui.devices.simplify import ELEMENT_FORMATS
from collabui.errors import ConfigError
from collabui.evaluation.miniwob import MiniWoBEvalConfig
from collabui.training.demonstrate import DemoConfig
from collabui.training.marl_config import MARLConfig
from collabui.training.mistake_pairs import OWN_PAIR_OPTIONS
from collabui.training.sft import AgentSFTConfig
from collabui.training.sft_data import STATELESS_FIELDS
from collabui.training.task_lists import HELDOUT_TASKS, TRAIN_TASKS

# No ``from __future__ import annotations``: the dataclass's annotations are real types, so the
# module also works loaded by file path without an entry in sys.modules (tests, importlib).

#: The command's description (``--help``'s first line).
DESCRIPTION = "The CPU recipe: verified demonstrations -> SFT -> held-out evaluation, with results.json."

#: The fields of the composed configs that have recipe flags; the recipe sets the others.
_DEMO_FLAGS = ("minutes", "workers", "seeds")
_SFT_FLAGS = ("num_train_epochs", "learning_rate", "per_device_train_batch_size", "lora_r", "lora_dropout",
              "lora_from_layer", "length_window", "full_finetune", "seed", "bf16")
_EVAL_FLAGS = ("episodes", "serve", "serve_dtype", "serve_agents", "serve_backend")
#: Fields of the evaluation's team with flags (added apart: flags reach one level of nesting).
_EVAL_TEAM_FLAGS = ("seed", "max_steps", "stop_when_decided", "skip_stale", "tie_break")
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
    "tie_break": "the 4 x 3 teams (held-out team rows, team validations) break a tie the last-round count leaves by "
                 "the proposals of the DAG's sources, agents that read no peer (TeamConfig.tie_break; MARL's rollouts "
                 "only with --marl-skip-stale; lowest-id: the latest round's lowest agent id, every row before v75t)",
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


def sft_template() -> AgentSFTConfig:
    """The SFT of stage 2 and of the on-policy round (each sets ``output_dir``; ``lora_alpha`` is
    twice ``lora_r``). Every weight trains (since v35: on the same data it beat LoRA r=32 held
    out, 57 against 28 of 104, section v34ft of EXPERIMENTS.md); ``--no-full-finetune --lr 3e-4`` is
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
                             # Ties go to the sources' proposals: team validation 234/300 against 228 (v75t).
                             team=TeamConfig(seed=0, max_steps=6, stop_when_decided=True, skip_stale=True,
                                             tie_break="independent"))


@dataclass(frozen=True, kw_only=True)
class RecipeConfig:
    """Every setting of the CPU recipe; the command line is generated from it (:func:`parser`).

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
    team_other_kind: float = field(default=0.0, metadata={
        "metavar": "P", "help": "share of those drawn answers' mistakes of the other kind: a clickable clicked where "
        "the verified step types, a value typed again where it clicks (collabui.training.team_context)"})
    stateless_share: float = field(default=0.5, metadata={
        "metavar": "P", "help": "share of SFT rows after a task's first step shown without field state "
        "(--stateless-fields; collabui.devices.simplify.without_state), so only the previous actions tell what is "
        "done (0.5 since v73)"})
    stateless_fields: str = field(default="filled", metadata={
        "choices": STATELESS_FIELDS, "help": "what --stateless-share's rows hide: all (typed values and ticks), "
        "toggles (checkbox and radio state alone: typed values, and so a form's empty fields, stay in view) or "
        "filled (ticks, and typed values only on pages where no text field is empty; the default since v73)"})
    balance: bool = field(default=True, metadata={
        "help": "draw SFT rows round-robin over training tasks (--no-balance: at random)"})
    balance_steps: bool = field(default=True, metadata={
        "help": "with --balance: round-robin over (task, step) pairs, so a multi-step task gets a share per step"})
    hindsight: int = field(default=0, metadata={
        "metavar": "N", "help": "add up to N hindsight-relabelled rows per first-step click on a quoted text (the "
        "same page, the instruction quoting another element's text: collabui.training.hindsight) before drawing"})
    sft: AgentSFTConfig = field(default_factory=sft_template, metadata={
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
    baselines_from: str | None = field(default=None, metadata={
        "metavar": "RUN", "help": "take the rows no training changes (random, lexical, base_single, base_team) "
        "from the recipe run folder RUN, whose eval/ holds them at this run's settings (the same held-out "
        "episodes, team and page format; checked before training): they resume there instead of running "
        "again (base_team alone took 19 min in v68), and results.json says where each came from"})
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
        "left the page unchanged is passed over; --tie-break), so the team that plays the training episodes is the team "
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
    timeline: str | None = field(default=None, metadata={
        "metavar": "PNG", "help": "draw the minutes of each stage of the run in --out (its recipe.json, so far) to "
        "PNG and exit; a finished run draws OUT/timeline.png itself"})

    def __post_init__(self) -> None:
        for name in ("validate", "validate_forms", "onpolicy_episodes", "round2_demo_rows", "hindsight", "marl_iterations"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{flag_of(name)} must be >= 0, got {getattr(self, name)}")
        for flag, share in (("--team-share", self.team_share), ("--team-other-kind", self.team_other_kind),
                            ("--stateless-share", self.stateless_share)):
            if not 0.0 <= share <= 1.0:
                raise ConfigError(f"{flag} must be between 0 and 1, got {share}")
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
        if sum((self.table, self.paired is not None, self.plot is not None, self.timeline is not None)) > 1:
            raise ConfigError("--table, --paired, --plot and --timeline each read a file and exit: give one of them")
        if self.publish_ablations and not self.ablations:
            raise ConfigError("--publish-ablations copies the run's ablation rows: give --ablations with it")


def parser() -> tuple[argparse.ArgumentParser, dict[str, str]]:
    """The recipe's parser, and ``{dotted field path: its flag without dashes}`` (in the order added)."""
    ap = argparse.ArgumentParser(description=DESCRIPTION)

    def named(paths: list[str], rename: dict[str, str]) -> dict[str, str]:
        return {path: flag_of(path.rsplit(".", 1)[-1], rename)[2:].replace("-", "_") for path in paths}

    flags = named(add_config_flags(ap, RecipeConfig, rename=_RENAME, helps=_HELPS), _RENAME)
    team = _evaluation_template().team
    flags |= named(["evaluation.team." + name for name in add_config_flags(
        ap, TeamConfig, only=_EVAL_TEAM_FLAGS, rename=_EVAL_TEAM_RENAME, helps=_HELPS, dest_prefix=_EVAL_TEAM_DEST,
        defaults={name: getattr(team, name) for name in _EVAL_TEAM_FLAGS})], _EVAL_TEAM_RENAME)
    return ap, flags


def parse_args(argv: list[str] | None = None) -> RecipeConfig:
    """The RecipeConfig of the command line (argparse's error and exit 2 on a bad value)."""
    ap, _ = parser()
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
    _, flags = parser()
    return {flag: functools.reduce(getattr, path.split("."), config) for path, flag in flags.items()}


#: The settings that shape the trained model, written into the bundle's ``made_by`` command.
TAUGHT = ("balance_steps", "batch", "bf16", "demo_minutes", "demo_seeds", "dpo_lr", "element_format", "extract_embedding_rank",
           "extract_rank", "full_finetune", "hindsight",
           "length_window", "lora_dropout", "lora_from_layer", "lora_r", "lr", "onpolicy_dpo", "onpolicy_episodes", "round2_demo_rows",
           "sft_draws", "sft_epochs", "sft_examples", "sft_seed", "stateless_fields", "stateless_share", "style", "synthetic_pages",
           "team_other_kind", "team_share")
#: MARL's settings, in the MARL team's ``made_by`` (they shape the team, not the SFT model): every
#: MARLConfig flag plus the recipe's own MARL fields that change what is trained (not where from:
#: ``--marl-rollouts-from`` is added apart).
TAUGHT_MARL = tuple(sorted({_RENAME.get(name, name) for name in MARL_FLAGS}
                            | {"marl_epochs", "marl_iterations", "marl_skip_stale"}))


def made_by_command(config: RecipeConfig, *, marl: bool = False) -> str:
    """The recipe command line that trains ``config``'s model (``marl``: its MARL team): its
    shaping settings as flags the parser accepts (a switch on as ``--x``; off as ``--no-x`` where
    it is on by default, else left out: the parser has no ``--no-x`` then)."""
    values, defaults = flag_values(config), flag_values(parse_args([]))
    words = ["cookbook/cpu_recipe/recipe.py"]
    names = TAUGHT + (TAUGHT_MARL if marl else ())
    if config.from_bundle is not None:  # the start's own made_by says how it was trained
        words += ["--from-bundle", config.from_bundle]
        names = ("dpo_lr", *TAUGHT_MARL) if marl else ()
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
