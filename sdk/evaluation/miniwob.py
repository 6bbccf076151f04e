"""The MiniWoB++ harness: success rate per task and overall, with Wilson intervals, resumably.

Layout of ``out_dir``::

    run.json          what the episodes depend on (model, adapters, team shape, seed, env,
                      max steps): a rerun with another configuration is refused; under
                      "config" the whole MiniWoBEvalConfig (team included), which
                      load_run_config reads back (`collabui eval miniwob --from RUN_DIR`)
    episodes.jsonl    the manifest: one line per finished episode (see ``runner``)
    traces/           one JSONL trace per episode
    results.json      the common results JSON (``schema: collabui.eval``)
    summary.md        the Markdown report; ``plot.png`` with ``plot=True``

Seeds: episode ``e`` of task ``t`` uses ``derive_seed("miniwob", seed, t, e)`` for the page and
builds its team with that seed too (so sampled agents and the random baseline draw differently
in every episode), while the message DAG is drawn once from ``seed`` and shared by all
episodes: the system under test is one team, not a new one per episode. Tasks and episodes may
grow on a rerun (new episodes run, finished ones are reused). ``seed`` is the team's
(``config.team.seed``): one seed for the pages, the DAG and the sampling.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import functools
import json
import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from collabui.config import (
    ELEMENT_FORMAT_CHOICES,
    ELEMENT_FORMAT_HELP,
    GUIDED_HELP,
    MODEL_HELP,
    SHUFFLE_HELP,
    TeamConfig,
    config_from_dict,
    config_to_dict,
    pin_action_space,
)
from collabui.errors import ConfigError, EnvNotFoundError
from collabui.evaluation.miniwob_folder import check_out_dir, load_run_config, topology_name
from collabui.evaluation.report import RunClock
from collabui.evaluation.runner import (
    EnvFactory,
    EnvPool,
    EpisodeSpec,
    episode_specs,
    finished_records,
    run_episodes,
    run_episodes_on,
)
from collabui.evaluation.stats import rate_entry
from collabui.models.base import ChatModel
from collabui.models.spec import is_baseline, load_model, team_adapter_names
from collabui.redaction import redact_url
from collabui.serving.managed import AGENT_SERVING, SERVE_BACKENDS, check_backend, server_labels

__all__ = ["EASY_TASKS", "SUITES", "MiniWoBEvalConfig", "default_team", "load_run_config", "resolve_tasks",
           "evaluate_miniwob", "system_label"]

log = logging.getLogger(__name__)

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


def resolve_tasks(spec: str | Sequence[str]) -> list[str]:
    """Task names of a suite (``all``, ``easy``) or a comma-separated list, in order, no repeats.

    Raises:
        EnvNotFoundError: a name is not a shipped task (the message suggests close names).
        ConfigError: the list is empty, or the ``miniwob`` package is not installed.
    """
    from collabui.devices.miniwob import miniwob_tasks, synthetic_tasks

    shipped = miniwob_tasks()
    known = {*shipped, *synthetic_tasks()}  # named only: no suite holds the synthetic pages
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    names: list[str] = []
    for item in (str(x).strip() for x in items):
        if not item:
            continue
        if item in SUITES:
            names.extend(SUITES[item] or shipped)
            continue
        name = item.removeprefix("miniwob/").removeprefix("miniwob-mobile/")
        if name not in known:
            close = difflib.get_close_matches(name, [*known, *SUITES], n=3, cutoff=0.6)
            hint = f"did you mean {', '.join(repr(c) for c in close)}? " if close else ""
            raise EnvNotFoundError(f"unknown MiniWoB++ task {item!r}; {hint}use a suite "
                                   f"({', '.join(SUITES)}) or names from `collabui envs`")
        names.append(name)
    if not names:
        raise ConfigError("no MiniWoB++ tasks given; pass --tasks easy, all or names like click-button")
    return list(dict.fromkeys(names))


def default_team(model: str, **fields: Any) -> TeamConfig:
    """The team an evaluation of ``model`` runs unless told otherwise: a single agent (1x1) for
    the ``random`` and ``lexical`` baselines, else TeamConfig's defaults (the paper's 4x3).
    ``fields`` set any TeamConfig field (``n_agents``/``rounds`` given win over the defaults)."""
    if is_baseline(model):
        fields = {"n_agents": 1, "rounds": 1, **fields}
    return TeamConfig(**fields)


#: Weights' dtypes a served evaluation may ask vLLM for (VLLMServer.dtype).
SERVE_DTYPES = ("auto", "float32", "bfloat16", "float16")
SERVE_DTYPE_HELP = ("(--serve) the server's weights: auto (bfloat16 where the CPU has it natively, else "
                    "float32), or float32 to compare exactly with a local (float32) run")


SERVE_AGENTS_HELP = ("(--serve) a trained bundle's per-agent adapters: lora (one server, each adapter by name) "
                     "or merged (each agent's adapter folded into its own compiled model, one server each on "
                     "cores of its own: for CPUs with cores to spare; on 2 cores half as fast as lora)")


SERVE_BACKEND_HELP = ("(--serve) the server: vllm (LoRA adapters by name; the faster one for a single model, and on "
                      "GPUs) or llamacpp (llama.cpp, needs the llamacpp extra: each agent's whole model on a server of "
                      "its own, starts in seconds; on 2 cores 2x vLLM's speed for a team of per-agent models) or auto "
                      "(vLLM on a GPU; on a CPU vLLM for one model, llama.cpp for per-agent models, among those installed)")


def check_serve(model: str, serve: bool, serve_dtype: str, serve_agents: str = "lora",
                serve_backend: str = "vllm") -> None:
    """ConfigError when the serving options cannot apply: an unknown dtype, backend or agent
    serving, any of them without ``serve``, or ``serve`` for a model no server is started for
    (baselines run here, ``openai:`` specs are already served)."""
    if serve_dtype not in SERVE_DTYPES:
        raise ConfigError(f"unknown serve_dtype {serve_dtype!r}; use one of {', '.join(SERVE_DTYPES)}")
    if serve_agents not in AGENT_SERVING:
        raise ConfigError(f"unknown serve_agents {serve_agents!r}; use one of {', '.join(AGENT_SERVING)}")
    check_backend(serve_backend, serve_agents)
    if serve_backend != "vllm" and not serve:
        raise ConfigError("serve_backend would be ignored without serve; add --serve or drop --serve-backend")
    if serve_dtype != "auto" and not serve:
        raise ConfigError("serve_dtype would be ignored without serve (a local model runs in float32); "
                          "add --serve or drop --serve-dtype")
    if serve_agents != "lora" and not serve:
        raise ConfigError("serve_agents would be ignored without serve; add --serve or drop --serve-agents")
    if serve and (is_baseline(model) or model.strip().startswith("openai:")):
        raise ConfigError(f"serve starts a vLLM server for a local model; {redact_url(model)} is not one "
                          "(baselines run here, openai: specs are already served): drop --serve")


#: TeamConfig fields the evaluation sets itself: the action space (from ``mobile``) and the
#: batch timer have no flag; ``adapters`` names served adapters (``--adapters`` is a folder).
_TEAM_FIELDS_SET_HERE = ("adapters", "action_space", "batch_fallback_s")


@dataclass(frozen=True, kw_only=True)
class MiniWoBEvalConfig:
    """One MiniWoB++ evaluation: the tasks, the model and the team (a :class:`TeamConfig`).

    Example:
        >>> MiniWoBEvalConfig(tasks="click-button", model="lexical").team.n_agents  # a baseline: 1x1
        1
        >>> MiniWoBEvalConfig(tasks="easy", team=TeamConfig(n_agents=2, rounds=1, max_steps=5)).team.max_steps
        5

    ``team`` None is :func:`default_team` of ``model``: 1x1 for the ``random`` and ``lexical``
    baselines, else the paper's 4x3. ``team.seed`` seeds the pages, the DAG and the sampling
    (an integer); ``team.action_space`` follows ``mobile``; ``team.screenshots`` reaches the
    devices. ``guided_json`` constrains every answer to the action space's JSON answer schema
    (vLLM structured outputs on ``openai:`` servers, llguidance locally). ``element_format``
    (one of ``ELEMENT_FORMATS`` or ``auto``: the one a trained bundle learned, else ``html``;
    resolved on construction) and ``shuffle_elements`` set how the web pages are shown (see
    :class:`~collabui.devices.browser.BrowserConfig`); the mobile tasks have their own list.
    """

    tasks: str = field(default="easy", metadata={
        "help": "a suite (easy, all) or comma-separated task names"})
    episodes: int = field(default=3, metadata={"help": "episodes per task"})
    model: str = field(default="smollm2", metadata={"help": MODEL_HELP})
    adapters: str | None = field(default=None, metadata={
        "help": "a trained team's adapter folder (agent0/, agent1/, ...) on top of --model"})
    # None given means the model's default team; __post_init__ replaces it, so a built config
    # always holds a TeamConfig (hence the annotation without None).
    team: TeamConfig = field(default=None, metadata={  # type: ignore[assignment]
        "help": "the team (None: 1x1 for random/lexical, else 4x3)", "skip_flags": _TEAM_FIELDS_SET_HERE})
    mobile: bool = field(default=False, metadata={"help": "the phone-shaped tasks (miniwob-mobile/<task>)"})
    concurrency: int = field(default=1, metadata={"help": "episodes (browsers) at once in this process, on one model"})
    workers: int = field(default=1, metadata={
        "metavar": "N", "help": "worker processes, each with its own model (or client of one --model server) and browser; "
                "1: this process"})
    ray: str | None = field(default=None, metadata={
        "help": "run the workers as Ray actors on this cluster: host:port of `ray start --head`, auto, "
                "or local (a private one-node cluster); needs the ray extra", "metavar": "ADDRESS"})
    guided_json: bool = field(default=False, metadata={"help": GUIDED_HELP})
    element_format: str = field(default="auto", metadata={"help": ELEMENT_FORMAT_HELP,
                                                          "choices": ELEMENT_FORMAT_CHOICES})
    shuffle_elements: bool = field(default=False, metadata={"help": SHUFFLE_HELP})
    serve: bool = field(default=False, metadata={
        "help": "run the model on a vLLM server started for this evaluation (a trained bundle: its shared model "
                "merged, each agent's LoRA adapter by name; needs `collabui serve --setup`); episodes at once: "
                "--concurrency"})
    serve_dtype: str = field(default="auto", metadata={"choices": SERVE_DTYPES, "help": SERVE_DTYPE_HELP})
    serve_agents: str = field(default="lora", metadata={"choices": AGENT_SERVING, "help": SERVE_AGENTS_HELP})
    serve_backend: str = field(default="vllm", metadata={"choices": SERVE_BACKENDS, "help": SERVE_BACKEND_HELP})

    def __post_init__(self) -> None:
        self._check_team()
        self._check_page_options()
        check_serve(self.model, self.serve, self.serve_dtype, self.serve_agents, self.serve_backend)
        if self.serve and self.uses_workers:
            raise ConfigError("serve and workers/ray do not combine: the server batches the requests of "
                              "--concurrency K episodes in this process; use --concurrency")
        for name in ("episodes", "concurrency", "workers"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name} must be an integer >= 1, got {value!r}")
        if self.uses_workers and self.concurrency > 1:
            raise ConfigError("concurrency and workers/ray do not combine: --concurrency K runs K browsers "
                              "in this process on one model, --workers N runs N processes with a model "
                              "each; pick one")

    def _check_team(self) -> None:
        team = default_team(self.model) if self.team is None else self.team
        if not isinstance(team, TeamConfig):
            raise ConfigError(f"team must be a TeamConfig (or None for the model's default team), "
                              f"got {type(team).__name__}; e.g. team=TeamConfig(n_agents=1, rounds=1)")
        if isinstance(team.seed, bool) or not isinstance(team.seed, int):
            raise ConfigError(f"team.seed must be an integer (it seeds the pages of the episodes), got {team.seed!r}")
        if self.adapters is not None and team.adapters is not None:
            raise ConfigError("adapters (a folder) and team.adapters (served adapter names) both name the "
                              "agents' adapters; give one")
        which = "mobile=True: the phone tasks" if self.mobile else "mobile=False: the web tasks (set mobile=True for phones)"
        object.__setattr__(self, "team", pin_action_space(team, self.action_space, which))

    def _check_page_options(self) -> None:
        from collabui.devices.simplify import check_element_format

        if self.element_format == "auto":
            from collabui.models.spec import model_element_format

            object.__setattr__(self, "element_format", "html" if self.mobile else model_element_format(self.model))
        check_element_format(self.element_format)
        if not isinstance(self.shuffle_elements, bool):
            raise ConfigError(f"shuffle_elements must be True or False, got {self.shuffle_elements!r}")
        if self.mobile and (self.shuffle_elements or self.element_format != "html"):
            # The phone tasks show an indexed element list: a silent no-op would mislabel results.
            raise ConfigError("element_format and shuffle_elements apply to web pages; the mobile "
                              "tasks show their own element list (drop --mobile or those flags)")

    def to_dict(self) -> dict[str, Any]:
        """JSON form (the team as its own dict); :meth:`from_dict` gives back an equal config."""
        return config_to_dict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MiniWoBEvalConfig:
        """The config of :meth:`to_dict` (ConfigError on unknown fields or invalid values)."""
        return config_from_dict(cls, data)

    def env_options(self) -> dict[str, Any]:
        """Keyword arguments for ``make_env`` of every episode's device."""
        options: dict[str, Any] = {"screenshots": self.team.screenshots}
        if not self.mobile:
            options.update(element_format=self.element_format, shuffle_elements=self.shuffle_elements)
        return options

    @property
    def uses_workers(self) -> bool:
        """Episodes run on worker processes (``workers`` > 1 or a Ray cluster), not here."""
        return self.workers > 1 or self.ray is not None

    @property
    def is_baseline(self) -> bool:
        return is_baseline(self.model)

    @property
    def env(self) -> str:
        return "miniwob-mobile" if self.mobile else "miniwob"

    @property
    def action_space(self) -> str:
        return "mobile" if self.mobile else "web"


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
        self.arbiter: ChatModel | None = None
        if config.arbiter:  # loaded once, shared by every episode's team
            from collabui.team import load_arbiter

            self.arbiter = load_arbiter(config.arbiter)

    def _team(self, seed: int) -> Any:
        from collabui.team import CollabAgentTeam

        return CollabAgentTeam(self.model, config=dataclasses.replace(self.config, seed=seed),
                               arbiter_model=self.arbiter)

    def run(self, task: str | None, device: Any, *, seed: int, **kwargs: Any) -> Any:
        return self._team(seed).run(task, device, seed=seed, **kwargs)

    async def arun(self, task: str | None, device: Any, *, seed: int, **kwargs: Any) -> Any:
        return await self._team(seed).arun(task, device, seed=seed, **kwargs)

    def close(self) -> None:
        self.model.close()
        if self.arbiter is not None:
            self.arbiter.close()


def _load_model(config: MiniWoBEvalConfig) -> ChatModel:
    return load_model(config.model, adapters=config.adapters,
                      **({"guided_json": config.action_space} if config.guided_json else {}))


def _worker_teams(config: MiniWoBEvalConfig, model: ChatModel | None) -> _EpisodeTeams:
    """A worker's team (runs in the worker): its own model, or its copy of a given one."""
    adapter_names = team_adapter_names(config.adapters, config.team.n_agents) if model is None else None
    return _EpisodeTeams(model if model is not None else _load_model(config),
                         _team_config(config, adapter_names))


def _team_config(config: MiniWoBEvalConfig, adapter_names: tuple[str | None, ...] | None) -> TeamConfig:
    """The evaluated team with its DAG drawn once (every episode shares it) and the adapter
    names of ``--adapters``' folder."""
    from collabui.topologies import make_topology

    team = config.team
    topology = team.topology
    if isinstance(topology, str):
        topology = make_topology(topology, team.n_agents, seed=team.seed)
    return dataclasses.replace(team, topology=topology,
                               adapters=adapter_names if adapter_names is not None else team.adapters)


def _episode_counts(result: Any) -> dict[str, int]:
    """Per-episode counts kept in the manifest (so a resumed run still reports them)."""
    every = [p for step in result.steps for row in step.team_step.proposals for p in row]
    proposals = [p for p in every if not p.skipped]  # skipped entries asked no model (stop_when_decided)
    counts = {"proposals": len(proposals), "unparsable": sum(p.parse_error is not None for p in proposals),
              "typing_loop": int(typing_loop([step.executed.to_dict() for step in result.steps]))}
    if len(every) > len(proposals):
        counts["skipped"] = len(every) - len(proposals)
    tokens = [p.prompt_tokens for p in proposals]
    if tokens and None not in tokens:  # a backend that reports them (the baselines read no tokens)
        counts["prompt_tokens"] = sum(tokens)
    return counts


#: Executed steps in a row typing one text that make a typing loop (no MiniWoB++ task asks for a
#: third: enter-password types its password twice, into two fields).
TYPING_LOOP_STEPS = 3


def typing_loop(executed: Sequence[Mapping[str, Any]]) -> bool:
    """Whether an episode's executed actions (``Action.to_dict()`` each) type one text
    :data:`TYPING_LOOP_STEPS` times running: the failure strong MARL updates made on held-out
    forms (the password typed into field after field until the step limit), which a success
    rate on a few validation episodes hardly shows."""
    run, last = 0, None
    for action in executed:
        text = action.get("content") if action.get("action") == "type_string" else None
        run = 0 if text is None else run + 1 if text == last else 1
        last = text
        if run >= TYPING_LOOP_STEPS:
            return True
    return False


def evaluate_miniwob(config: MiniWoBEvalConfig, out_dir: str | Path, *, model: ChatModel | None = None,
                     env_factory: EnvFactory | None = None, plot: bool = False,
                     command: str | None = None, progress: bool = True,
                     server_options: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Run (or resume) the evaluation and write ``results.json`` and ``summary.md``.

    Args:
        config: what to run.
        out_dir: the run folder (see the module docstring).
        model: an already built chat model (tests); None loads ``config.model``. A model built
            here is closed here.
        env_factory: builds a device from ``miniwob/<task>`` (tests); None: ``make_env``.
        plot: also write ``plot.png`` (needs matplotlib).
        command: the command line recorded in the results.
        server_options: with ``config.serve``, :class:`~collabui.serving.VLLMServer` fields
            (``enforce_eager``, ``kv_cache_gib``, ``venv``...).

    Returns:
        The results dict (also written to ``out_dir/results.json``).
    """
    tasks = resolve_tasks(config.tasks)
    out = Path(out_dir).expanduser()
    check_out_dir(out, config)
    clock = RunClock(out)
    team = config.team
    specs = episode_specs(tasks, config.episodes, tag=config.env, seed_parts=("miniwob", team.seed))
    label = system_label(config.model, team.n_agents, team.rounds, topology_name(team), config.adapters,
                         guided=config.guided_json)
    log.info("eval miniwob: %d tasks x %d episodes, %s, %s, out %s", len(tasks), config.episodes, label,
             _parallelism(config), out)
    run = _run_on_workers if config.uses_workers else _run_here
    records, servers = finished_records(specs, out / "episodes.jsonl"), None
    if records is None:  # else a finished run resumed: no model to load, no server to start
        with _served(config, model, server_options or {}) as served:
            servers = server_labels(served) if served is not None else None
            records = run(config, specs, out, model=served or model, env_factory=env_factory, progress=progress)
    results = build_results(config, tasks, records, started=clock.started,
                            seconds=clock.seconds(), command=command, servers=servers)
    _write_outputs(results, out, plot)
    overall = results["overall"]["success_rate"]
    log.info("eval miniwob: success %s/%s = %s (95%% CI %.2f-%.2f); %s", overall["successes"], overall["n"],
             overall["value"], overall["ci95"][0], overall["ci95"][1], out / "results.json")
    return results


@contextlib.contextmanager
def _served(config: MiniWoBEvalConfig, model: ChatModel | None,
            server_options: Mapping[str, Any]) -> Iterator[ChatModel | None]:
    """With ``serve``: a client of a vLLM server of the model, up for the evaluation; else None."""
    if not config.serve:
        yield None
        return
    if model is not None:
        raise ConfigError("serve starts the model itself; pass model=None (or serve=False with a built model)")
    from collabui.serving.managed import serve_model

    client = {"guided_json": config.action_space} if config.guided_json else {}
    with serve_model(config.model, config.adapters, client=client, agents=config.serve_agents,
                     backend=config.serve_backend, **{"dtype": config.serve_dtype, **server_options}) as served:
        yield served


def _parallelism(config: MiniWoBEvalConfig) -> str:
    if config.ray is not None:
        return f"{config.workers} Ray workers at {config.ray}"
    return f"{config.workers} worker processes" if config.workers > 1 else f"concurrency {config.concurrency}"


def _run_here(config: MiniWoBEvalConfig, specs: Sequence[EpisodeSpec], out: Path, *, model: ChatModel | None,
              env_factory: EnvFactory | None, progress: bool) -> list[dict[str, Any]]:
    """The episodes in this process: one model, ``concurrency`` browsers."""
    own_model = model is None
    adapter_names = team_adapter_names(config.adapters, config.team.n_agents) if own_model or config.serve else None
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
        team_adapter_names(config.adapters, config.team.n_agents)
    setup = WorkerSetup(team=functools.partial(_worker_teams, config, model), env=config.env,
                        env_options=config.env_options(), env_factory=env_factory, extra=_episode_counts)
    with WorkerPool(setup, config.workers, ray=config.ray) as workers:
        return run_episodes_on(workers, specs, trace_dir=out / "traces", manifest=out / "episodes.jsonl",
                               label="miniwob", progress=progress)


def build_results(config: MiniWoBEvalConfig, tasks: Sequence[str], records: Sequence[dict[str, Any]], *,
                  started: str, seconds: float, command: str | None,
                  servers: Sequence[str] | None = None) -> dict[str, Any]:
    """The common results JSON from manifest records (pure: no files, no browsers); ``servers``:
    what ``serve`` started (:func:`collabui.serving.managed.server_labels`)."""
    team = config.team
    n, m, topology = team.n_agents, team.rounds, topology_name(team)

    def entry(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
        metrics = {"success_rate": rate_entry(sum(bool(r["success"]) for r in rows), len(rows))}
        # Share of agent answers with no valid action (what guided decoding is meant to remove).
        proposals = sum(int(r.get("proposals", 0)) for r in rows)
        if proposals:
            metrics["unparsable_rate"] = rate_entry(sum(int(r.get("unparsable", 0)) for r in rows), proposals)
        if any("typing_loop" in r for r in rows):  # manifests written before the count lack it
            metrics["typing_loop_rate"] = rate_entry(sum(int(r.get("typing_loop", 0)) for r in rows), len(rows))
        return metrics

    per_task = {t: entry([r for r in records if r["task"] == t]) for t in tasks}
    return {
        "schema": "collabui.eval", "version": 1, "harness": "miniwob",
        "system": {"model": redact_url(config.model), "adapters": config.adapters, "n_agents": n, "rounds": m,
                   "topology": topology, "prompt_style": team.prompt_style,
                   "max_new_tokens": team.max_new_tokens, "guided_json": config.guided_json,
                   "team": team.to_dict(),
                   "label": system_label(config.model, n, m, topology, config.adapters, guided=config.guided_json)},
        "data": {"env": config.env, "tasks_spec": config.tasks, "tasks": list(tasks),
                 "episodes": config.episodes, "seed": team.seed, "max_steps": team.max_steps,
                 "element_format": config.element_format, "shuffle_elements": config.shuffle_elements},
        "overall": entry(records),
        "breakdown": {"per_task": per_task},
        "counts": {"episodes": len(records), "errors": sum(1 for r in records if r.get("error")),
                   "unparsable": sum(int(r.get("unparsable", 0)) for r in records),
                   "proposals": sum(int(r.get("proposals", 0)) for r in records),
                   **({"skipped": sum(int(r.get("skipped", 0)) for r in records)} if team.stop_when_decided else {}),
                   "steps": sum(int(r.get("steps", 0)) for r in records),
                   **_prompt_tokens(records)},
        "run": {"concurrency": config.concurrency, "workers": config.workers,
                "backend": ("ray" if config.ray is not None else "processes") if config.uses_workers else "this process",
                "episode_seconds": round(sum(float(r.get("seconds", 0.0)) for r in records), 3),
                # what --serve started (--serve-backend auto chooses per model): one entry per server
                **({"servers": list(servers)} if servers is not None else {})},
        "started": started, "seconds": round(seconds, 3), "command": command,
    }


def _prompt_tokens(records: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Mean prompt tokens per agent answer (what a step costs an agent), over the episodes
    whose backend counted them; nothing when none did."""
    counted = [r for r in records if "prompt_tokens" in r]
    proposals = sum(int(r.get("proposals", 0)) for r in counted)
    if not proposals:
        return {}
    return {"prompt_tokens_per_answer": round(sum(int(r["prompt_tokens"]) for r in counted) / proposals, 1)}


def _write_outputs(results: dict[str, Any], out: Path, plot: bool) -> None:
    from collabui.evaluation.report import plot_results, write_markdown

    (out / "results.json").write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    write_markdown(results, out / "summary.md")
    if plot:
        plot_results([results], out / "plot.png")
