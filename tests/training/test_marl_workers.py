"""MARL rollouts and held-out evaluations on worker processes equal the one-process run.

Each worker loads its own LocalModel (the tiny random Llama of tests/conftest.py) with the
iteration's adapters; request seeds depend on the episode's step, agent and round only, so
the answers, executed actions and outcomes must match episode by episode.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from collabui.config import TeamConfig
from collabui.errors import ConfigError
from collabui.trace import read_trace
from collabui.training import labels
from collabui.training.marl import MARLConfig, run_marl
from tests.evaluation.worker_kit import fake_env
from tests.serving.conftest import fake_pkg  # noqa: F401 - a fixture


class StopAfterRollouts(Exception):
    pass


@pytest.fixture
def stop_after_rollouts(monkeypatch):
    def stop(*args, **kwargs):
        raise StopAfterRollouts

    monkeypatch.setattr(labels, "label_traces", stop)


def _config(base_dir: Path, out: Path, **kw: Any) -> MARLConfig:
    kw.setdefault("train_tasks", ("task-a",))
    kw.setdefault("eval_tasks", ("task-b",))
    return MARLConfig(model=f"hf:{base_dir}", episodes_per_task=2,
                      eval_episodes_per_task=1, iterations=1, critic="reference", out_dir=str(out),
                      team=TeamConfig(n_agents=2, rounds=1, max_steps=2, max_new_tokens=6, prompt_style="react"), **kw)


def _episodes(out: Path) -> list[dict[str, Any]]:
    """Every episode of the held-out evaluation and the rollouts: outcome, answers, actions."""
    rows = []
    for manifest, traces in (("before/eval.jsonl", "before/eval_traces"), ("iter0/rollouts.jsonl", "iter0/traces")):
        for line in (out / manifest).read_text().splitlines():
            record = json.loads(line)
            trace = read_trace(out / traces / f"{record['episode_id']}.jsonl")
            rows.append({"id": record["episode_id"], "success": record["success"], "steps": record["steps"],
                         "answers": [p["raw"] for _, p in trace.proposals()],
                         "executed": [step["executed"] for step in trace.steps]})
    return sorted(rows, key=lambda row: row["id"])


@pytest.mark.slow
def test_rollouts_on_worker_processes_equal_the_one_process_run(base_dir, tmp_path, stop_after_rollouts):
    for name, workers in (("here", 1), ("workers", 2)):
        with pytest.raises(StopAfterRollouts):
            run_marl(_config(base_dir, tmp_path / name, workers=workers), progress=False, env_factory=fake_env)
    here, there = _episodes(tmp_path / "here"), _episodes(tmp_path / "workers")
    assert len(here) == 3 and there == here
    pids = {json.loads(line)["worker"]["pid"] for line in (tmp_path / "workers" / "iter0" / "rollouts.jsonl").open()}
    assert len(pids) == 2  # both rollout workers ran an episode


def test_workers_may_change_when_a_run_resumes(tmp_path):
    from collabui.training.marl_config import RESUMABLE_CHANGES

    assert {"workers", "ray"} <= set(RESUMABLE_CHANGES)
    with pytest.raises(Exception, match="workers must be an integer >= 1"):
        MARLConfig(workers=0, train_tasks=("a",), eval_tasks=("b",))


@pytest.mark.slow
def test_serve_rolls_out_on_a_vllm_server_of_the_base_model(base_dir, tmp_path, stop_after_rollouts,
                                                            fake_pkg, monkeypatch):  # noqa: F811 - the fixture
    """``serve=True`` takes the default path to the server: the venv's python (here a stand-in
    running the fake vLLM, which answers every request with a click on B and records it)."""
    venv = tmp_path / "venv" / "bin"
    venv.mkdir(parents=True)
    (venv / "python").write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    (venv / "python").chmod(0o755)
    record = tmp_path / "requests.jsonl"
    monkeypatch.setenv("COLLABUI_VLLM_VENV", str(venv.parent))
    monkeypatch.setenv("PYTHONPATH", str(fake_pkg))
    monkeypatch.setenv("FAKE_VLLM_RECORD", str(record))
    monkeypatch.setenv("COLLABUI_CACHE", str(tmp_path / "cache"))  # the servers' logs
    with pytest.raises(StopAfterRollouts):
        run_marl(_config(base_dir, tmp_path / "served", serve=True, serve_dtype="float32"), progress=False,
                 env_factory=fake_env)
    episodes = _episodes(tmp_path / "served")
    assert len(episodes) == 3  # the held-out evaluation's and the rollouts', all answered by the server
    assert {a for e in episodes for a in e["answers"]} == {'Thought: B is the button.\nAction: {"action": "click", "element_id": "B"}'}
    sent = [json.loads(line) for line in record.read_text().splitlines()]
    assert len(sent) == sum(len(e["answers"]) for e in episodes) and {r["model"] for r in sent} == {base_dir.name}
    logs = list((tmp_path / "cache" / "logs").glob("vllm-*.log"))
    assert logs and all("dtype=float32" in log.read_text() for log in logs)  # serve_dtype reaches each server
    with pytest.raises(ConfigError, match="serve_dtype would be ignored without serve"):
        _config(base_dir, tmp_path / "x", serve_dtype="float32")


def test_serve_backend_llamacpp_rolls_out_on_its_factory(base_dir, tmp_path, stop_after_rollouts, monkeypatch):
    """``serve_backend="llamacpp"`` takes llama.cpp's rollout factory with the run's dtype (the
    factory itself is tested on real servers in tests/serving/test_real_llamacpp.py; the tiny
    random Llama here has no GGUF form); without serve it is refused."""
    from collabui.models.local import LocalModel
    from collabui.serving import managed

    built = []

    def factory(**fields):
        def build(base, adapters):
            built.append((fields, dict(adapters)))
            return LocalModel(str(base), adapters=dict(adapters))
        return build

    monkeypatch.setattr(managed, "llamacpp_model_factory", factory)
    monkeypatch.setattr(managed, "vllm_model_factory", lambda **f: pytest.fail("vLLM was started"))
    with pytest.raises(StopAfterRollouts):
        run_marl(_config(base_dir, tmp_path / "run", serve=True, serve_backend="llamacpp", serve_dtype="float32"),
                 progress=False, env_factory=fake_env)
    assert built and all(fields == {"dtype": "float32"} for fields, _ in built)
    assert len(_episodes(tmp_path / "run")) == 3
    with pytest.raises(ConfigError, match="serve_backend would be ignored without serve"):
        _config(base_dir, tmp_path / "x", serve_backend="llamacpp")


def test_auto_rolls_one_model_out_on_vllm(base_dir, tmp_path, stop_after_rollouts, monkeypatch):
    """Iteration 0's team is the start model alone, shared adapter or not, so ``auto`` rolls it out
    on vLLM's factory (merged when the team will share one adapter; the factories are tested on
    the fake server in tests/serving/test_managed.py, the per-set choice there too: per-agent
    adapters from iteration 1 on take llama.cpp's where it is installed)."""
    from collabui.models.local import LocalModel
    from collabui.serving import managed, setup

    built = []

    def factory(backend):
        def make(**fields):
            def build(base, adapters):
                built.append((backend, fields))
                return LocalModel(str(base), adapters=dict(adapters))
            return build
        return make

    monkeypatch.setattr(managed, "_installed", lambda: {"vllm": True, "llamacpp": True})
    monkeypatch.setattr(setup, "default_flavor", lambda: "cpu")
    monkeypatch.setattr(managed, "llamacpp_model_factory", factory("llamacpp"))
    monkeypatch.setattr(managed, "vllm_model_factory", factory("vllm"))
    for name, shared, expected in (("shared", True, ("vllm", {"merged": True, "dtype": "auto"})),
                                   ("per-agent", False, ("vllm", {"merged": False, "dtype": "auto"}))):
        built.clear()
        with pytest.raises(StopAfterRollouts):
            run_marl(_config(base_dir, tmp_path / name, serve=True, serve_backend="auto", shared_adapter=shared),
                     progress=False, env_factory=fake_env)
        assert built and set(map(str, built)) == {str(expected)}


def test_task_episodes_rolls_out_more_of_the_named_tasks(base_dir, tmp_path, stop_after_rollouts):
    """``task_episodes`` overrides ``episodes_per_task`` for the tasks it names: their extra episodes
    get new seeds, the first ones keep the seeds the plain count would give them."""
    runs = {}
    for name, extra in (("plain", ()), ("more", "task-c=4")):
        config = _config(base_dir, tmp_path / name, train_tasks=("task-a", "task-c"), task_episodes=extra)
        with pytest.raises(StopAfterRollouts):
            run_marl(config, progress=False, env_factory=fake_env)
        manifest = (tmp_path / name / "iter0" / "rollouts.jsonl").read_text().splitlines()
        runs[name] = {r["episode_id"]: r["seed"] for r in map(json.loads, manifest)}
    assert sorted(runs["more"]) == ["iter0-task-a-0", "iter0-task-a-1", *(f"iter0-task-c-{e}" for e in range(4))]
    assert all(runs["more"][k] == seed for k, seed in runs["plain"].items())
    assert len(set(runs["more"].values())) == 6
    assert config.task_episodes == ("task-c=4",) and config.episodes_of("task-a") == 2


def test_task_episodes_adds_the_synthetic_pages_it_names(base_dir, tmp_path, stop_after_rollouts):
    """A synthetic page in ``task_episodes`` is rolled out beside the training tasks, with the
    training tasks' episodes and seeds unchanged; its name goes into the trained bundle's tasks."""
    runs = {}
    for name, extra in (("plain", ()), ("synth", "synth-forms=3")):
        config = _config(base_dir, tmp_path / name, task_episodes=extra)
        with pytest.raises(StopAfterRollouts):
            run_marl(config, progress=False, env_factory=fake_env)
        manifest = (tmp_path / name / "iter0" / "rollouts.jsonl").read_text().splitlines()
        runs[name] = {r["episode_id"]: (r["task"], r["seed"]) for r in map(json.loads, manifest)}
    assert sorted(runs["synth"]) == ["iter0-synth-forms-0", "iter0-synth-forms-1", "iter0-synth-forms-2",
                                     "iter0-task-a-0", "iter0-task-a-1"]
    assert all(runs["synth"][k] == v for k, v in runs["plain"].items())
    assert config.rollout_tasks == ("task-a", "synth-forms") and config.train_tasks == ("task-a",)


@pytest.mark.parametrize("extra, error", [("task-b=2", "'task-b' is neither one of train_tasks nor a synthetic"),
                                          ("synth-nope=2", "'synth-nope' is neither"),
                                          ("task-a=0", "'task-a=0' is not TASK=N with N >= 1"),
                                          ("task-a", "'task-a' is not TASK=N"),
                                          ("task-a=2,task-a=3", "'task-a' is named twice")])
def test_task_episodes_names_a_bad_entry(tmp_path, extra, error):
    with pytest.raises(ConfigError, match=error):
        _config(tmp_path, tmp_path / "x", task_episodes=extra)


def test_a_synthetic_page_rolled_out_is_no_held_out_task(tmp_path):
    with pytest.raises(ConfigError, match=r"eval task\(s\) \['synth-forms'\] are also training tasks"):
        _config(tmp_path, tmp_path / "x", task_episodes="synth-forms=2", eval_tasks=("synth-forms",))


def test_a_field_a_stored_config_lacks_reads_as_its_default(tmp_path):
    """A run folder (or a --marl-rollouts-from source) stored before an option existed ran with
    its default: only a value that differs from it counts as a change."""
    from collabui.training.marl_config import changed_fields

    new = json.loads(json.dumps(_config(tmp_path, tmp_path / "x").to_dict()))
    old = {k: v for k, v in new.items() if k != "task_episodes"}
    assert changed_fields(old, new) == [] and changed_fields(new, old) == []
    more = {**new, "task_episodes": ["task-a=3"]}
    assert changed_fields(old, more) == ["task_episodes"]
