"""The MiniWoB++ harness: success rate per task and overall, with Wilson intervals, resumably.

Layout of ``out_dir``::

    run.json          what the episodes depend on (model, adapters, team shape, seed, env,
                      max steps): a rerun with another configuration is refused
    episodes.jsonl    the manifest: one line per finished episode (see ``runner``)
    traces/           one JSONL trace per episode
    results.json      the common results JSON (``schema: collabui.eval``)
    summary.md        the Markdown report; ``plot.png`` with ``plot=True``

Seeds: episode ``e`` of task ``t`` uses ``derive_seed("miniwob", seed, t, e)`` for the page and
builds its team with that seed too (so sampled agents and the random baseline draw differently
in every episode), while the message DAG is drawn once from ``seed`` and shared by all
episodes: the system under test is one team, not a new one per episode. Tasks and episodes may
grow on a rerun (new episodes run, finished ones are reused).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import difflib
import functools
import json
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from collabui.config import (
    ELEMENT_FORMAT_CHOICES,
    ELEMENT_FORMAT_HELP,
    GUIDED_HELP,
    MODEL_HELP,
    PROMPT_STYLE_CHOICES,
    SHUFFLE_HELP,
)
from collabui.errors import ConfigError, EnvNotFoundError
from collabui.evaluation.runner import (
    EnvFactory,
    EnvPool,
    EpisodeSpec,
    episode_specs,
    run_episodes,
    run_episodes_on,
)
from collabui.evaluation.stats import rate_entry
from collabui.models.base import ChatModel
from collabui.models.spec import load_model, team_adapter_names
from collabui.redaction import redact_url

__all__ = ["EASY_TASKS", "SUITES", "MiniWoBEvalConfig", "resolve_tasks", "evaluate_miniwob", "system_label"]

#: The ``easy`` suite: tasks a text-only agent can finish in one to three DOM actions, with the
#: target named in the instruction and shown in the element list (no canvas, drag, hover,
#: scroll, timers, date arithmetic or reading comprehension). Eight are a single click or focus
#: (click-test, click-test-2, click-button, click-link, click-dialog, click-dialog-2,
#: click-widget, click-tab, focus-text, focus-text-2), two are two clicks (click-option: pick
#: then submit; click-button-sequence), three are typing (enter-text: type then submit;
#: enter-password and login-user: two fields then submit). They separate "can ground a named
#: element and emit a valid action" from "cannot", which is what a small model and the
#: baselines differ on; click-test-2, click-dialog and focus-text are also winnable by
#: position alone, so report them next to the others, not alone.
EASY_TASKS: tuple[str, ...] = (
    "click-test", "click-test-2", "click-button", "click-link", "click-dialog", "click-dialog-2",
    "click-widget", "click-tab", "focus-text", "focus-text-2", "click-option",
    "click-button-sequence", "enter-text", "enter-password", "login-user",
)
#: Named suites (``all`` is every task the installed ``miniwob`` package ships).
SUITES: dict[str, tuple[str, ...] | None] = {"easy": EASY_TASKS, "all": None}
_BASELINES = ("random", "lexical")


def resolve_tasks(spec: str | Sequence[str]) -> list[str]:
    """Task names of a suite (``all``, ``easy``) or a comma-separated list, in order, no repeats.

    Raises:
        EnvNotFoundError: a name is not a shipped task (the message suggests close names).
        ConfigError: the list is empty, or the ``miniwob`` package is not installed.
    """
    from collabui.devices.miniwob import miniwob_tasks

    shipped = miniwob_tasks()
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    names: list[str] = []
    for item in (str(x).strip() for x in items):
        if not item:
            continue
        if item in SUITES:
            names.extend(SUITES[item] or shipped)
            continue
        name = item.removeprefix("miniwob/").removeprefix("miniwob-mobile/")
        if name not in shipped:
            close = difflib.get_close_matches(name, [*shipped, *SUITES], n=3, cutoff=0.6)
            hint = f"did you mean {', '.join(repr(c) for c in close)}? " if close else ""
            raise EnvNotFoundError(f"unknown MiniWoB++ task {item!r}; {hint}use a suite "
                                   f"({', '.join(SUITES)}) or names from `collabui envs`")
        names.append(name)
    if not names:
        raise ConfigError("no MiniWoB++ tasks given; pass --tasks easy, all or names like click-button")
    return list(dict.fromkeys(names))


@dataclass(frozen=True, kw_only=True)
class MiniWoBEvalConfig:
    """One MiniWoB++ evaluation. ``n_agents``/``rounds`` None: 1x1 for the ``random`` and
    ``lexical`` baselines, else the paper's 4x3.

    ``guided_json`` constrains every answer to the action space's JSON answer schema (vLLM
    structured outputs on ``openai:`` servers, llguidance locally). ``element_format``
    (``html`` | ``text-first`` | ``auto``: the one a trained bundle learned, else ``html``;
    resolved on construction) and ``shuffle_elements`` set how the web pages are shown (see
    :class:`~collabui.devices.browser.BrowserConfig`); the mobile tasks have their own list. ``team_options`` sets any
    other :class:`~collabui.config.TeamConfig` field (``temperatures``, ``vote``,
    ``max_observation_chars``...), as ``collabui run`` flags do.
    """

    tasks: str = field(default="easy", metadata={
        "help": "a suite (easy, all) or comma-separated task names"})
    episodes: int = field(default=3, metadata={"help": "episodes per task"})
    seed: int = field(default=0, metadata={"help": "seed of the episodes and of the DAG"})
    model: str = field(default="smollm2", metadata={"help": MODEL_HELP})
    adapters: str | None = field(default=None, metadata={
        "help": "a trained team's adapter folder (agent0/, agent1/, ...) on top of --model"})
    n_agents: int | None = field(default=None, metadata={"help": "agents n (default 4; 1 for random/lexical)"})
    rounds: int | None = field(default=None, metadata={"help": "rounds m (default 3; 1 for random/lexical)"})
    topology: str = field(default="random", metadata={"help": "message DAG"})
    mobile: bool = field(default=False, metadata={"help": "the phone-shaped tasks (miniwob-mobile/<task>)"})
    max_steps: int = field(default=10, metadata={"help": "environment steps per episode"})
    concurrency: int = field(default=1, metadata={"help": "episodes (browsers) at once in this process, on one model"})
    workers: int = field(default=1, metadata={
        "metavar": "N", "help": "worker processes, each with its own model (or client of one --model server) and browser; "
                "1: this process"})
    ray: str | None = field(default=None, metadata={
        "help": "run the workers as Ray actors on this cluster: host:port of `ray start --head`, auto, "
                "or local (a private one-node cluster); needs the ray extra", "metavar": "ADDRESS"})
    prompt_style: str = field(default="auto", metadata={
        "help": "agents' prompt; auto: the style a trained team was trained for, react for other models",
        "choices": PROMPT_STYLE_CHOICES})
    max_new_tokens: int = field(default=64, metadata={"help": "generation budget per agent call"})
    guided_json: bool = field(default=False, metadata={"help": GUIDED_HELP})
    element_format: str = field(default="auto", metadata={"help": ELEMENT_FORMAT_HELP,
                                                          "choices": ELEMENT_FORMAT_CHOICES})
    shuffle_elements: bool = field(default=False, metadata={"help": SHUFFLE_HELP})
    team_options: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.prompt_style not in PROMPT_STYLE_CHOICES:
            raise ConfigError(f"prompt_style must be one of {list(PROMPT_STYLE_CHOICES)}, got {self.prompt_style!r}")
        _check_team_options(self.team_options, *self.team_shape())
        self._check_page_options()
        for name in ("episodes", "max_steps", "concurrency", "workers", "n_agents", "rounds", "max_new_tokens"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ConfigError(f"{name} must be an integer >= 1, got {value!r}")
        if self.uses_workers and self.concurrency > 1:
            raise ConfigError("concurrency and workers/ray do not combine: --concurrency K runs K browsers "
                              "in this process on one model, --workers N runs N processes with a model "
                              "each; pick one")

    def _check_page_options(self) -> None:
        from collabui.devices.simplify import ELEMENT_FORMATS

        if self.element_format == "auto":
            from collabui.models.spec import model_element_format

            object.__setattr__(self, "element_format", "html" if self.mobile else model_element_format(self.model))
        if self.element_format not in ELEMENT_FORMATS:
            raise ConfigError(f"element_format must be one of {list(ELEMENT_FORMATS)}, "
                              f"got {self.element_format!r}")
        if not isinstance(self.shuffle_elements, bool):
            raise ConfigError(f"shuffle_elements must be True or False, got {self.shuffle_elements!r}")
        if self.mobile and (self.shuffle_elements or self.element_format != "html"):
            # The phone tasks show an indexed element list: a silent no-op would mislabel results.
            raise ConfigError("element_format and shuffle_elements apply to web pages; the mobile "
                              "tasks show their own element list (drop --mobile or those flags)")

    def env_options(self) -> dict[str, Any]:
        """Keyword arguments for ``make_env`` of every episode's device."""
        options: dict[str, Any] = {"screenshots": bool(self.team_options.get("screenshots"))}
        if not self.mobile:
            options.update(element_format=self.element_format, shuffle_elements=self.shuffle_elements)
        return options

    @property
    def uses_workers(self) -> bool:
        """Episodes run on worker processes (``workers`` > 1 or a Ray cluster), not here."""
        return self.workers > 1 or self.ray is not None

    @property
    def is_baseline(self) -> bool:
        return self.model.strip().split(":")[0] in _BASELINES

    def team_shape(self) -> tuple[int, int]:
        """(n_agents, rounds) with the defaults applied."""
        default = (1, 1) if self.is_baseline else (4, 3)
        return (self.n_agents or default[0], self.rounds or default[1])

    @property
    def env(self) -> str:
        return "miniwob-mobile" if self.mobile else "miniwob"

    @property
    def action_space(self) -> str:
        return "mobile" if self.mobile else "web"


#: TeamConfig fields the evaluation sets itself (its own fields, the episode seed, the device).
_OWN_TEAM_FIELDS = frozenset({"n_agents", "rounds", "topology", "seed", "adapters", "max_steps", "action_space",
                              "prompt_style", "max_new_tokens"})


def _check_team_options(options: Mapping[str, Any], n_agents: int, rounds: int) -> None:
    from collabui.config import TeamConfig

    known = {f.name for f in dataclasses.fields(TeamConfig)} - _OWN_TEAM_FIELDS
    unknown = sorted(set(options) - known)
    if unknown:
        raise ConfigError(f"team_options {unknown} are not TeamConfig fields this evaluation takes; "
                          f"use {sorted(known)} (the others are MiniWoBEvalConfig fields)")
    TeamConfig(n_agents=n_agents, rounds=rounds, **options)  # checked before a browser or model starts


def system_label(model: str, n_agents: int, rounds: int, topology: str, adapters: str | None, *,
                 guided: bool = False) -> str:
    """A short human label: ``random single agent``, ``smollm2+adapters team 4x3 (random)``,
    ``smollm2+guided single agent``."""
    name = redact_url(model) + ("+adapters" if adapters else "") + ("+guided" if guided else "")
    if n_agents == 1 and rounds == 1:
        return f"{name} single agent"
    return f"{name} team {n_agents}x{rounds} ({topology})"


class _EpisodeTeams:
    """Quacks like a team for the runner: builds each episode's team from the episode seed
    (same model, same DAG), so per-request sampling seeds differ across episodes."""

    def __init__(self, model: ChatModel, config: Any) -> None:
        self.model, self.config = model, config

    def _team(self, seed: int) -> Any:
        from collabui.team import CollabAgentTeam

        return CollabAgentTeam(self.model, config=dataclasses.replace(self.config, seed=seed))

    def run(self, task: str | None, device: Any, *, seed: int, **kwargs: Any) -> Any:
        return self._team(seed).run(task, device, seed=seed, **kwargs)

    async def arun(self, task: str | None, device: Any, *, seed: int, **kwargs: Any) -> Any:
        return await self._team(seed).arun(task, device, seed=seed, **kwargs)

    def close(self) -> None:
        self.model.close()


def _load_model(config: MiniWoBEvalConfig) -> ChatModel:
    return load_model(config.model, adapters=config.adapters,
                      **({"guided_json": config.action_space} if config.guided_json else {}))


def _worker_teams(config: MiniWoBEvalConfig, model: ChatModel | None) -> _EpisodeTeams:
    """A worker's team (runs in the worker): its own model, or its copy of a given one."""
    adapter_names = team_adapter_names(config.adapters, config.team_shape()[0]) if model is None else None
    return _EpisodeTeams(model if model is not None else _load_model(config),
                         _team_config(config, adapter_names))


def _team_config(config: MiniWoBEvalConfig, adapter_names: tuple[str | None, ...] | None) -> Any:
    from collabui.config import TeamConfig
    from collabui.topologies import make_topology

    n, m = config.team_shape()
    topology = make_topology(config.topology, n, seed=config.seed)  # one DAG for every episode
    return TeamConfig(n_agents=n, rounds=m, topology=topology, seed=config.seed,
                      adapters=adapter_names, max_steps=config.max_steps,
                      action_space=config.action_space, prompt_style=config.prompt_style,
                      max_new_tokens=config.max_new_tokens, **config.team_options)


def _episode_counts(result: Any) -> dict[str, int]:
    """Per-episode counts kept in the manifest (so a resumed run still reports them)."""
    proposals = [p for step in result.steps for row in step.team_step.proposals for p in row]
    return {"proposals": len(proposals), "unparsable": sum(p.parse_error is not None for p in proposals)}


def _fingerprint(config: MiniWoBEvalConfig) -> dict[str, Any]:
    from collabui.models.spec import model_fingerprint

    n, m = config.team_shape()
    return {"model": redact_url(config.model), "model_weights": model_fingerprint(config.model), "adapters": config.adapters, "n_agents": n, "rounds": m,
            "topology": config.topology, "seed": config.seed, "env": config.env,
            "max_steps": config.max_steps, "prompt_style": config.prompt_style,
            "max_new_tokens": config.max_new_tokens, "guided_json": config.guided_json,
            "element_format": config.element_format, "shuffle_elements": config.shuffle_elements,
            # Screenshots change no outcome: a folder resumes with them on or off.
            "team_options": _jsonable({k: v for k, v in config.team_options.items() if k != "screenshots"})}


def _jsonable(options: Mapping[str, Any]) -> dict[str, Any]:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in sorted(options.items())}


#: Fingerprint fields added later: a run.json without them was made with these values.
_LATER_FIELDS: dict[str, Any] = {"model_weights": None, "prompt_style": "react", "max_new_tokens": 64, "guided_json": False,
                                 "element_format": "html", "shuffle_elements": False,
                                 "team_options": {}}


def _check_out_dir(out: Path, config: MiniWoBEvalConfig) -> None:
    """Refuse to mix episodes of two configurations in one folder (resume would reuse them)."""
    path, wanted = out / "run.json", _fingerprint(config)
    if path.exists():
        try:
            found = json.loads(path.read_text(encoding="utf-8"))
        except ValueError:  # cut short by a crash or a full disk: the run's identity is unknown
            raise ConfigError(f"{path} is cut short (not JSON); delete it to go on with this folder "
                              "using these flags, or pass another --out") from None
        changed = sorted(k for k in wanted if found.get(k, _LATER_FIELDS.get(k)) != wanted[k])
        if changed:
            raise ConfigError(f"{out} holds a run with other {', '.join(changed)}; use another --out "
                              "or delete that folder")
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(wanted, indent=2) + "\n", encoding="utf-8")


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def evaluate_miniwob(config: MiniWoBEvalConfig, out_dir: str | Path, *, model: ChatModel | None = None,
                     env_factory: EnvFactory | None = None, plot: bool = False,
                     command: str | None = None, progress: bool = True) -> dict[str, Any]:
    """Run (or resume) the evaluation and write ``results.json`` and ``summary.md``.

    Args:
        config: what to run.
        out_dir: the run folder (see the module docstring).
        model: an already built chat model (tests); None loads ``config.model``. A model built
            here is closed here.
        env_factory: builds a device from ``miniwob/<task>`` (tests); None: ``make_env``.
        plot: also write ``plot.png`` (needs matplotlib).
        command: the command line recorded in the results.

    Returns:
        The results dict (also written to ``out_dir/results.json``).
    """
    tasks = resolve_tasks(config.tasks)
    out = Path(out_dir).expanduser()
    _check_out_dir(out, config)
    started_at = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    t0 = time.perf_counter()
    n, m = config.team_shape()
    specs = episode_specs(tasks, config.episodes, tag=config.env, seed_parts=("miniwob", config.seed))
    _say(f"eval miniwob: {len(tasks)} tasks x {config.episodes} episodes, "
         f"{system_label(config.model, n, m, config.topology, config.adapters, guided=config.guided_json)}, "
         f"{_parallelism(config)}, out {out}")
    run = _run_on_workers if config.uses_workers else _run_here
    records = run(config, specs, out, model=model, env_factory=env_factory, progress=progress)
    results = build_results(config, tasks, records, started=started_at,
                            seconds=time.perf_counter() - t0, command=command)
    _write_outputs(results, out, plot)
    overall = results["overall"]["success_rate"]
    _say(f"eval miniwob: success {overall['successes']}/{overall['n']} = {overall['value']} "
         f"(95% CI {overall['ci95'][0]:.2f}-{overall['ci95'][1]:.2f}); {out / 'results.json'}")
    return results


def _parallelism(config: MiniWoBEvalConfig) -> str:
    if config.ray is not None:
        return f"{config.workers} Ray workers at {config.ray}"
    return f"{config.workers} worker processes" if config.workers > 1 else f"concurrency {config.concurrency}"


def _run_here(config: MiniWoBEvalConfig, specs: Sequence[EpisodeSpec], out: Path, *, model: ChatModel | None,
              env_factory: EnvFactory | None, progress: bool) -> list[dict[str, Any]]:
    """The episodes in this process: one model, ``concurrency`` browsers."""
    own_model = model is None
    adapter_names = team_adapter_names(config.adapters, config.team_shape()[0]) if own_model else None
    if model is None:
        model = _load_model(config)
    envs = EnvPool(config.env, env_factory, options=config.env_options())  # sibling pools share them
    try:
        teams = _EpisodeTeams(model, _team_config(config, adapter_names))
        return run_episodes(teams, specs, envs, trace_dir=out / "traces", manifest=out / "episodes.jsonl",
                            label="miniwob", progress=progress, concurrency=config.concurrency,
                            extra=_episode_counts)
    finally:
        envs.close()
        if own_model:
            model.close()


def _run_on_workers(config: MiniWoBEvalConfig, specs: Sequence[EpisodeSpec], out: Path, *,
                    model: ChatModel | None, env_factory: EnvFactory | None,
                    progress: bool) -> list[dict[str, Any]]:
    """The episodes on worker processes or Ray actors, each building its own team and browser
    (a given ``model`` and ``env_factory`` are pickled to every worker)."""
    from collabui.evaluation.workers import WorkerPool, WorkerSetup

    if model is None:  # a bad adapter folder fails here, before any worker starts
        team_adapter_names(config.adapters, config.team_shape()[0])
    setup = WorkerSetup(team=functools.partial(_worker_teams, config, model), env=config.env,
                        env_options=config.env_options(), env_factory=env_factory, extra=_episode_counts)
    with WorkerPool(setup, config.workers, ray=config.ray) as workers:
        return run_episodes_on(workers, specs, trace_dir=out / "traces", manifest=out / "episodes.jsonl",
                               label="miniwob", progress=progress)


def build_results(config: MiniWoBEvalConfig, tasks: Sequence[str], records: Sequence[dict[str, Any]], *,
                  started: str, seconds: float, command: str | None) -> dict[str, Any]:
    """The common results JSON from manifest records (pure: no files, no browsers)."""
    n, m = config.team_shape()

    def entry(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
        metrics = {"success_rate": rate_entry(sum(bool(r["success"]) for r in rows), len(rows))}
        # Share of agent answers with no valid action (what guided decoding is meant to remove).
        proposals = sum(int(r.get("proposals", 0)) for r in rows)
        if proposals:
            metrics["unparsable_rate"] = rate_entry(sum(int(r.get("unparsable", 0)) for r in rows), proposals)
        return metrics

    per_task = {t: entry([r for r in records if r["task"] == t]) for t in tasks}
    return {
        "schema": "collabui.eval", "version": 1, "harness": "miniwob",
        "system": {"model": redact_url(config.model), "adapters": config.adapters, "n_agents": n, "rounds": m,
                   "topology": config.topology, "prompt_style": config.prompt_style,
                   "max_new_tokens": config.max_new_tokens, "guided_json": config.guided_json,
                   "team_options": _jsonable(config.team_options),
                   "label": system_label(config.model, n, m, config.topology, config.adapters,
                                         guided=config.guided_json)},
        "data": {"env": config.env, "tasks_spec": config.tasks, "tasks": list(tasks),
                 "episodes": config.episodes, "seed": config.seed, "max_steps": config.max_steps,
                 "element_format": config.element_format, "shuffle_elements": config.shuffle_elements},
        "overall": entry(records),
        "breakdown": {"per_task": per_task},
        "counts": {"episodes": len(records), "errors": sum(1 for r in records if r.get("error")),
                   "unparsable": sum(int(r.get("unparsable", 0)) for r in records),
                   "proposals": sum(int(r.get("proposals", 0)) for r in records),
                   "steps": sum(int(r.get("steps", 0)) for r in records)},
        "run": {"concurrency": config.concurrency, "workers": config.workers,
                "backend": ("ray" if config.ray is not None else "processes") if config.uses_workers else "this process",
                "episode_seconds": round(sum(float(r.get("seconds", 0.0)) for r in records), 3)},
        "started": started, "seconds": round(seconds, 3), "command": command,
    }


def _write_outputs(results: dict[str, Any], out: Path, plot: bool) -> None:
    from collabui.evaluation.report import plot_results, write_markdown

    (out / "results.json").write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    write_markdown(results, out / "summary.md")
    if plot:
        plot_results([results], out / "plot.png")
