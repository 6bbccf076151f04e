"""``collabui bench``: how fast is one team step, against its bound and the naive way?

    collabui bench --backend both --model smollm2 --agents 4 --rounds 3 --browsers 2

On one real MiniWoB++ observation (``--env``, ``--seed``) and one model, for each backend
(``local``: transformers in this process; ``vllm``: a managed vLLM-CPU server) it measures:

* the single-agent step (one model call);
* the n x m team step run naively: n x m sequential batch-1 calls, prefix reuse off locally;
* the optimized team step: superstep batching, prefix KV reuse locally, concurrent requests
  and the server's prefix cache on vLLM;
* each of the three ``--repeats`` times (default 3), interleaved so one repeat's three timings
  share the machine's load; the table gives the median and the range [min-max], and the bound
  ratio is the median of the per-repeat ratios;
* prompt tokens requested, computed (local: ``LocalModel.stats``; vLLM: its ``/metrics``
  prefix-cache counters) and unique (distinct token prefixes of the step's prompts);
* on vLLM, rollout throughput: ``--episodes`` MiniWoB++ episodes, ``--browsers`` K at a time,
  sharing the one server.

Decoding is greedy with a fixed ``--max-new-tokens`` so runs compare; each timed phase starts
with a cold local prefix cache. The table and the targets come from :mod:`collabui.bench_report`
(a missed target prints MISSED). Not a test: timings depend on the machine.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import tempfile
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from collabui.bench_report import BackendTimes, format_report, report_dict
from collabui.config import TeamConfig, config_from_dict, config_to_dict
from collabui.errors import ConfigError
from collabui.models.base import ChatModel, ChatRequest, ChatResult
from collabui.models.spec import local_base

__all__ = [
    "BenchSettings",
    "RecordingModel",
    "SequentialModel",
    "measure_backend",
    "run_bench",
]

log = logging.getLogger(__name__)

#: ``() -> cumulative prompt tokens computed by the backend`` (None: unknown).
Counter = Callable[[], int | None]
#: ``(requests) -> distinct prompt-token prefixes`` (None: no tokenizer).
UniqueCounter = Callable[[Sequence[ChatRequest]], int | None]


def _bench_team() -> TeamConfig:
    """A short answer budget (48 tokens) and 3-step rollouts keep the runs comparable and short."""
    return TeamConfig(max_new_tokens=48, max_steps=3)


#: Team fields the bench sets itself (greedy temperatures, the web action space, no adapters,
#: no screenshots) or that change no timing it reports (the batch timer).
_TEAM_FIELDS_SET_HERE = ("temperatures", "adapters", "action_space", "batch_fallback_s", "screenshots")


@dataclass(frozen=True, kw_only=True)
class BenchSettings:
    """What ``collabui bench`` runs (see the module docstring). ``team`` is the timed team
    (``--agents``, ``--rounds``, ``--topology``, ``--seed``: also the page's seed,
    ``--max-new-tokens``, ``--max-steps``); every phase decodes it greedily."""

    backend: str = field(default="both", metadata={"help": "which backends to time",
                                                  "choices": ("local", "vllm", "both")})
    model: str = field(default="smollm2", metadata={"help": "model spec of a local base model: smollm2 | hf:PATH"})
    team: TeamConfig = field(default_factory=_bench_team, metadata={
        "help": "the team timed (decoded greedily)", "skip_flags": _TEAM_FIELDS_SET_HERE})
    env: str = field(default="miniwob/click-link", metadata={"help": "MiniWoB++ environment of the observation"})
    repeats: int = field(default=3, metadata={
        "help": "times each step is timed (single call, naive and optimized team step, interleaved); "
                "the table shows the median [min-max]"})
    browsers: int = field(default=2, metadata={
        "help": "K browsers sharing the vLLM server in the rollout measurement",
        "aliases": ("--episodes-per-hour-browsers",)})
    episodes: int = field(default=4, metadata={"help": "rollout episodes on vLLM (0: skip)"})
    enforce_eager: bool = field(default=False, metadata={"help": "start vLLM without graph compilation"})
    out: str | None = field(default=None, metadata={"help": "also write the results as JSON here"})

    def __post_init__(self) -> None:
        if not isinstance(self.team, TeamConfig):
            raise ConfigError(f"team must be a TeamConfig, got {type(self.team).__name__}")

    def team_config(self, **overrides: Any) -> TeamConfig:
        """The team every phase uses, greedy (temperature 0 for every agent), with ``overrides``."""
        n = overrides.get("n_agents", self.team.n_agents)
        return dataclasses.replace(self.team, **{"temperatures": (0.0,) * n, **overrides})

    def to_dict(self) -> dict[str, Any]:
        """JSON form (the team as its own dict); :meth:`from_dict` gives back an equal config."""
        return config_to_dict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BenchSettings:
        """The settings of :meth:`to_dict` (ConfigError on unknown fields or invalid values)."""
        return config_from_dict(cls, data)


class RecordingModel(ChatModel):
    """Forwards to ``model`` and keeps every request (to count the step's unique tokens)."""

    def __init__(self, model: ChatModel) -> None:
        self.model, self.name, self.requests = model, model.name, []

    def generate(self, requests: Sequence[ChatRequest]) -> list[ChatResult]:
        self.requests.extend(requests)
        return self.model.generate(requests)

    async def agenerate(self, requests: Sequence[ChatRequest]) -> list[ChatResult]:
        self.requests.extend(requests)
        return await self.model.agenerate(requests)


class SequentialModel(ChatModel):
    """The naive baseline: one batch-1 call per request, one after another.

    Args:
        model: the model to call.
        no_prefix: switch off ``model.prefix_cache`` (a LocalModel) during the calls.
        before_call: run before every call (the vLLM bench empties the server's prefix cache,
            so no call shares another's prefix).
    """

    def __init__(self, model: ChatModel, *, no_prefix: bool = True, before_call: Callable[[], None] = lambda: None) -> None:
        self.model, self.name, self.no_prefix, self.calls = model, model.name, no_prefix, 0
        self.before_call = before_call

    def generate(self, requests: Sequence[ChatRequest]) -> list[ChatResult]:
        saved = getattr(self.model, "prefix_cache", None)
        if self.no_prefix and saved is not None:
            self.model.prefix_cache = False
        try:
            results = []
            for request in requests:
                self.calls += 1
                self.before_call()
                results.extend(self.model.generate([request]))
            return results
        finally:
            if saved is not None:
                self.model.prefix_cache = saved


def _timed_step(model: ChatModel, config: TeamConfig, task: str, observation: Any, reset: Callable[[], None]):
    from collabui.team import CollabAgentTeam

    team = CollabAgentTeam(model, config=config)
    reset()
    started = time.perf_counter()
    step = team.step(task, observation)
    return time.perf_counter() - started, step, team


@dataclass
class _Repeat:
    """One repeat's three timings, and what its optimized step asked and computed."""

    single_s: float
    naive_s: float
    team_s: float
    calls: int
    step: Any
    team: Any
    requests: list[ChatRequest]
    computed: int | None


def _measure_once(model: ChatModel, settings: BenchSettings, task: str, observation: Any, *,
                  computed: Counter, reset: Callable[[], None]) -> _Repeat:
    """Single call, naive team step, optimized team step, back to back (same machine load)."""
    single_cfg = settings.team_config(n_agents=1, rounds=1, topology="independent")
    single_s = _timed_step(model, single_cfg, task, observation, reset)[0]
    team_cfg = settings.team_config()
    naive = SequentialModel(model, before_call=reset)
    naive_s = _timed_step(naive, team_cfg, task, observation, reset)[0]
    recorder = RecordingModel(model)
    before = computed()
    team_s, step, team = _timed_step(recorder, team_cfg, task, observation, reset)
    after = computed()
    delta = after - before if before is not None and after is not None else None
    # A copy: the rollout's episodes go through the same recorder and are not this step's.
    return _Repeat(single_s, naive_s, team_s, naive.calls, step, team, list(recorder.requests), delta)


def measure_backend(model: ChatModel, task: str, observation: Any, settings: BenchSettings, *, backend: str,
                    computed: Counter = lambda: None, unique: UniqueCounter = lambda _: None,
                    reset: Callable[[], None] = lambda: None, rollout: Callable[[Any], tuple[int, float]] | None = None,
                    say: Callable[[str], None] = lambda _: None) -> BackendTimes:
    """Measure one backend: single step, naive team step, optimized team step (each
    ``settings.repeats`` times, interleaved), tokens, rollouts.

    Args:
        model: the backend's chat model.
        task, observation: what every step sees (an Observation or its rendered text).
        computed: cumulative prompt tokens the backend prefilled (read before/after the step).
        unique: distinct prompt-token prefixes of a list of requests.
        reset: called before each timed phase and before each naive call (clears the local
            prefix cache or the server's).
        rollout: ``rollout(team) -> (episodes, seconds)`` for the throughput figure, or None.
        say: progress lines (one per repeat, as it ends).
    """
    single_cfg = settings.team_config(n_agents=1, rounds=1, topology="independent")
    _timed_step(model, single_cfg, task, observation, reset)  # warm-up, untimed
    runs, repeats = [], max(1, settings.repeats)
    for k in range(repeats):
        run = _measure_once(model, settings, task, observation, computed=computed, reset=reset)
        say(f"repeat {k + 1}/{repeats}: single-agent step {run.single_s:.2f} s, naive team step "
            f"({run.calls} sequential calls) {run.naive_s:.2f} s, optimized team step "
            f"({run.team.supersteps} supersteps) {run.team_s:.2f} s")
        runs.append(run)
    # Tokens from the first repeat: greedy decoding from a cold cache asks the same every time.
    first = runs[0]
    counts = [p.prompt_tokens for row in first.step.proposals for p in row]
    if rollout is not None:
        say(f"rollout: {settings.episodes} MiniWoB++ episodes on {settings.browsers} browsers ...")
    episodes, rollout_s = rollout(runs[-1].team) if rollout is not None else (0, None)
    return BackendTimes(
        backend=backend, single_runs=tuple(r.single_s for r in runs), naive_runs=tuple(r.naive_s for r in runs),
        team_runs=tuple(r.team_s for r in runs), supersteps=first.team.supersteps, calls=first.calls,
        prompt_tokens_total=sum(counts) if all(c is not None for c in counts) else None,
        prompt_tokens_computed=first.computed, unique_prompt_tokens=unique(first.requests),
        episodes=episodes, rollout_s=rollout_s, browsers=settings.browsers,
    )


# -- the backends ------------------------------------------------------------------------------


def _observation(env: str, seed: int) -> tuple[str, Any]:
    from collabui.devices.registry import make_env

    device = make_env(env)
    try:
        obs = device.reset(seed=seed)
    finally:
        device.close()
    if not obs.task:
        raise ConfigError(f"{env} gave no task text; benchmark a MiniWoB++ environment (miniwob/<task>)")
    return obs.task, obs


def _rollout(settings: BenchSettings) -> Callable[[Any], tuple[int, float]] | None:
    if settings.episodes <= 0:
        return None
    from collabui.evaluation.runner import EnvPool, EpisodeSpec, run_episodes

    prefix, _, task = settings.env.partition("/")

    def run(team: Any) -> tuple[int, float]:
        specs = [EpisodeSpec(task, int(settings.team.seed or 0) + k, f"bench-{k}") for k in range(settings.episodes)]
        pool = EnvPool(prefix)
        with tempfile.TemporaryDirectory(prefix="collabui-bench-") as tmp:
            started = time.perf_counter()
            try:
                run_episodes(team, specs, pool, trace_dir=Path(tmp), manifest=Path(tmp) / "manifest.jsonl",
                             label="bench", progress=False, concurrency=settings.browsers)
            finally:
                pool.close()
            return len(specs), time.perf_counter() - started

    return run


def _say(backend: str) -> Callable[[str], None]:
    return lambda message: log.info("[%s] %s", backend, message)


def _bench_local(settings: BenchSettings, task: str, obs: Any) -> BackendTimes:
    from collabui.models.spec import load_model

    model = load_model(settings.model)  # a LocalModel: run_bench checked the spec is local
    try:
        return measure_backend(model, task, obs, settings, backend="local",
                               computed=lambda: model.stats.prompt_tokens_computed,
                               unique=model.unique_prompt_tokens, reset=model.clear_prefix_cache,
                               say=_say("local"))
    finally:
        model.close()


def _vllm_computed(server: Any) -> Counter:
    """Prompt tokens vLLM prefilled: prefix-cache queries minus hits, from ``/metrics``."""
    url = server.base_url.rsplit("/v1", 1)[0] + "/metrics"

    def read() -> int | None:
        time.sleep(1.0)  # the engine reports its counters just after the answers; not timed
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                text = response.read().decode()
        except OSError:
            return None
        totals = {"vllm:prefix_cache_queries_total": 0.0, "vllm:prefix_cache_hits_total": 0.0}
        seen = set()
        for line in text.splitlines():
            name = line.split("{", 1)[0].split(" ", 1)[0]
            if name in totals:
                totals[name] += float(line.rsplit(" ", 1)[-1])
                seen.add(name)
        if len(seen) < 2:
            return None
        return int(totals["vllm:prefix_cache_queries_total"] - totals["vllm:prefix_cache_hits_total"])

    return read


def _vllm_reset(server: Any) -> Callable[[], None]:
    """Empty the server's prefix cache (needs ``VLLM_SERVER_DEV_MODE=1``), so phases start cold."""
    url = server.base_url.rsplit("/v1", 1)[0] + "/reset_prefix_cache"

    def reset() -> None:
        request = urllib.request.Request(url, data=b"", method="POST")
        try:
            with urllib.request.urlopen(request, timeout=10):
                pass
        except OSError as exc:
            raise ConfigError(f"vLLM did not reset its prefix cache ({exc}); start it with "
                              "VLLM_SERVER_DEV_MODE=1") from None

    return reset


def _bench_vllm(settings: BenchSettings, task: str, obs: Any) -> BackendTimes:
    from transformers import AutoTokenizer

    from collabui.models.prefix_cache import unique_prefix_tokens
    from collabui.serving.vllm_server import VLLMServer

    # Dev mode only adds /reset_prefix_cache (and similar) on 127.0.0.1, for cold phases.
    server = VLLMServer(model=local_base(settings.model), enforce_eager=settings.enforce_eager, env={"VLLM_SERVER_DEV_MODE": "1"})
    tokenizer = AutoTokenizer.from_pretrained(server.model_dir())

    def unique(requests: Sequence[ChatRequest]) -> int:
        # As LocalModel tokenizes: the template's text, no extra special tokens.
        texts = [tokenizer.apply_chat_template([dict(m) for m in r.messages], add_generation_prompt=True, tokenize=False)
                 for r in requests]
        return unique_prefix_tokens(tokenizer(texts, add_special_tokens=False)["input_ids"])

    log.info("starting vLLM (%s) ...", "eager" if settings.enforce_eager else "compiled")
    with server:
        model = server.client(timeout=300)
        return measure_backend(model, task, obs, settings, backend="vllm", computed=_vllm_computed(server),
                               unique=unique, reset=_vllm_reset(server), rollout=_rollout(settings),
                               say=_say("vllm"))


def run_bench(settings: BenchSettings, *, observation: tuple[str, Any] | None = None,
              backends: dict[str, Callable[[BenchSettings, str, Any], BackendTimes]] | None = None) -> dict[str, Any]:
    """Run the benchmark, print the table (stdout; progress is logged), write ``settings.out``;
    returns the JSON record.

    ``observation`` (task, observation) and ``backends`` (name -> measuring function) replace
    the browser and the real backends in tests.
    """
    if settings.backend not in ("local", "vllm", "both"):
        raise ConfigError(f"--backend must be local, vllm or both, got {settings.backend!r}")
    if settings.browsers < 1:  # the team's own checks cover --agents and --rounds
        raise ConfigError("--browsers must be >= 1")
    if settings.repeats < 1:
        raise ConfigError("--repeats must be >= 1")
    local_base(settings.model)  # a local base model, before the browser starts
    runners = backends or {"local": _bench_local, "vllm": _bench_vllm}
    names = ["local", "vllm"] if settings.backend == "both" else [settings.backend]
    team = settings.team
    task, obs = observation or _observation(settings.env, team.seed)
    results = {}
    for name in names:
        log.info("[%s] measuring ...", name)
        results[name] = runners[name](settings, task, obs)
    header = (f"collabui bench: {settings.env} seed {team.seed}, model {settings.model}, "
              f"{team.n_agents} agents x {team.rounds} rounds, topology {team.topology}, "
              f"greedy, max_new_tokens {team.max_new_tokens}")
    print(format_report(results, header), flush=True)
    record = report_dict(results, settings.to_dict())
    if settings.out:
        Path(settings.out).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return record
