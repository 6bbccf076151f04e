"""Trained bundles on a vLLM server: the merged shared model, per-agent adapters by slot, the
bundle's team settings on the client, and ``eval miniwob --serve`` (against the fake server,
which records every request; tests/serving/test_real_vllm.py serves a bundle on real vLLM)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from collabui.config import TeamConfig
from collabui.errors import ConfigError
from collabui.evaluation.miniwob import MiniWoBEvalConfig, evaluate_miniwob
from collabui.models.base import ChatRequest
from collabui.models.bundle import merged_model_dir, write_bundle
from collabui.models.local import LocalModel
from collabui.models.spec import load_model
from collabui.serving.managed import served_spec
from collabui.trace import read_trace

_ASK = ({"role": "user", "content": "Click the OK button."},)


def _bundle(root: Path, tiny_model_dir: Path, adapter_dirs: dict[str, Path], stage1: str = "a1") -> Path:
    # Agent 1 has no adapter of its own: it runs on the merged model alone.
    return write_bundle(root, base=f"hf:{tiny_model_dir}", merge={"stage1": adapter_dirs[stage1]},
                        agents={"agent0": adapter_dirs["a2"]}, slots=["agent0", None],
                        team={"prompt_style": "trained", "max_new_tokens": 8}, made_by="test")


def _greedy(model, adapter=None) -> str:
    return model.generate([ChatRequest(messages=_ASK, max_new_tokens=6, temperature=0.0, adapter=adapter)])[0].text


def test_the_merged_model_is_the_bundle_shared_model_made_once(tmp_path, tiny_model_dir, adapter_dirs):
    root = _bundle(tmp_path / "bundle", tiny_model_dir, adapter_dirs)
    merged = merged_model_dir(root, cache_dir=tmp_path / "cache")
    assert (merged / "config.json").is_file() and merged.parent == tmp_path / "cache"
    plain = LocalModel(merged, device="cpu")
    assert _greedy(plain) == _greedy(load_model(f"trained:{root}", device="cpu"))  # same weights as the local bundle
    assert _greedy(plain) != _greedy(LocalModel(tiny_model_dir, device="cpu"))  # and not the base alone
    weights = next(merged.glob("*.safetensors"))
    stamp = weights.stat().st_mtime_ns
    assert merged_model_dir(root, cache_dir=tmp_path / "cache") == merged and weights.stat().st_mtime_ns == stamp
    other = _bundle(tmp_path / "bundle", tiny_model_dir, adapter_dirs, stage1="a2")  # other merged weights
    assert merged_model_dir(other, cache_dir=tmp_path / "cache") != merged
    nothing_merged = write_bundle(tmp_path / "plain", base=f"hf:{tiny_model_dir}", merge={},
                                  agents={"agent0": adapter_dirs["a2"]}, team={})
    assert merged_model_dir(nothing_merged, cache_dir=tmp_path / "cache") == tiny_model_dir


def test_a_bundle_is_served_as_its_merged_model_and_agent_adapters(tmp_path, tiny_model_dir, adapter_dirs, monkeypatch):
    monkeypatch.setenv("COLLABUI_CACHE", str(tmp_path / "cache"))
    root = _bundle(tmp_path / "bundle", tiny_model_dir, adapter_dirs)
    served = served_spec(f"trained:{root}")
    assert served.model == str(merged_model_dir(root)) and served.served_name == "trained-bundle"
    assert dict(served.adapters) == {"agent0": root / "agent0"}
    assert dict(served.team_defaults) == {"prompt_style": "trained", "max_new_tokens": 8, "adapters": ("agent0", None)}
    base = served_spec(f"hf:{tiny_model_dir}", tmp_path / "bundle")  # a plain folder of agent adapters
    assert base.model == str(tiny_model_dir) and set(base.adapters) == {"agent0"} and not base.team_defaults
    with pytest.raises(ConfigError, match="brings its own agent adapters; drop --adapters"):
        served_spec(f"trained:{root}", tmp_path / "bundle")
    with pytest.raises(ConfigError, match="is not a local base model"):
        served_spec("lexical")


@pytest.mark.parametrize(("fields", "message"), [
    ({"model": "lexical"}, "lexical is not one"),
    ({"model": "openai:m@http://127.0.0.1:9/v1"}, "openai: specs are already served"),
    ({"workers": 2}, "serve and workers/ray do not combine"),
    ({"serve_dtype": "float8"}, "unknown serve_dtype 'float8'"),
])
def test_serve_refuses_what_it_cannot_serve(fields, message):
    with pytest.raises(ConfigError, match=message):
        MiniWoBEvalConfig(tasks="click-test", serve=True, **fields)


def test_serve_dtype_without_serve_is_refused():
    with pytest.raises(ConfigError, match="serve_dtype would be ignored without serve"):
        MiniWoBEvalConfig(tasks="click-test", model="smollm2", serve_dtype="float32")


def _served_episode(tmp_path: Path, root: Path, fake_pkg: Path, log_file: Path | None = None,
                    **serving: str) -> tuple[dict, list[dict]]:
    """One served click-test episode of the bundle's 2 x 2 chain team on the fake vLLM: its first
    step and the requests the servers received. Each agent runs on its bundle slot (agent 0 its
    adapter, agent 1 the merged model), whatever the serving."""
    record = tmp_path / "requests.jsonl"
    config = MiniWoBEvalConfig(tasks="click-test", episodes=1, model=f"trained:{root}", serve=True, **serving,
                               team=TeamConfig(n_agents=2, rounds=2, topology="chain", max_steps=1))
    options = {"python": sys.executable, "ready_timeout_s": 60, **({"log_file": log_file} if log_file else {}),
               "env": {"PYTHONPATH": str(fake_pkg), "FAKE_VLLM_RECORD": str(record)}}
    results = evaluate_miniwob(config, tmp_path / "run", server_options=options, progress=False)
    assert results["overall"]["success_rate"]["n"] == 1
    [trace] = (tmp_path / "run" / "traces").glob("*.jsonl")
    step = read_trace(trace).steps[0]
    assert [[p["adapter"] for p in row] for row in step["proposals"]] == [["agent0", "agent0"], [None, None]]
    merged = serving.get("serve_agents") == "merged"  # results.json says what served the team
    assert results["run"]["servers"] == (["vLLM trained-bundle-agent0", "vLLM trained-bundle-shared"] if merged
                                         else ["vLLM trained-bundle"])
    return step, [json.loads(line) for line in record.read_text().splitlines()]


@pytest.mark.browser
def test_eval_serve_runs_the_bundle_team_on_its_own_server(tmp_path, tiny_model_dir, adapter_dirs, fake_pkg,
                                                          monkeypatch):
    monkeypatch.setenv("COLLABUI_CACHE", str(tmp_path / "cache"))
    root = _bundle(tmp_path / "bundle", tiny_model_dir, adapter_dirs)
    step, sent = _served_episode(tmp_path, root, fake_pkg, serve_dtype="float32", log_file=tmp_path / "vllm.log")
    assert step["proposals"][0][0]["messages"][0]["content"].startswith("You operate a web browser")  # trained style
    assert sorted(r["model"] for r in sent) == ["agent0", "agent0", "trained-bundle-base", "trained-bundle-base"]
    assert f"fake vllm: model={merged_model_dir(root)} " in (tmp_path / "vllm.log").read_text()
    assert "dtype=float32" in (tmp_path / "vllm.log").read_text()  # --serve-dtype reaches the server


def test_eval_autowebbench_serve_runs_the_bundle_team_on_its_own_server(tmp_path, tiny_model_dir, adapter_dirs,
                                                                        fake_pkg, monkeypatch, capsys):
    from collabui.cli import main
    from tests.shared_data import AUTOWEBBENCH

    monkeypatch.setenv("COLLABUI_CACHE", str(tmp_path / "cache"))
    venv = tmp_path / "venv" / "bin"  # `collabui serve --setup`'s venv, running the fake vLLM
    venv.mkdir(parents=True)
    (venv / "python").write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    (venv / "python").chmod(0o755)
    record = tmp_path / "requests.jsonl"
    for name, value in (("COLLABUI_VLLM_VENV", venv.parent), ("PYTHONPATH", fake_pkg), ("FAKE_VLLM_RECORD", record)):
        monkeypatch.setenv(name, str(value))
    root = _bundle(tmp_path / "bundle", tiny_model_dir, adapter_dirs)
    out = tmp_path / "awb"
    argv = ["eval", "autowebbench", "--data", str(AUTOWEBBENCH / "en" / "ind.json"), "--model", f"trained:{root}",
            "--agents", "2", "--rounds", "1", "--topology", "chain", "--limit", "2", "--out", str(out)]
    assert main([*argv, "--serve-dtype", "float32"]) == 2  # nothing to serve in float32
    assert "serve_dtype would be ignored without serve" in capsys.readouterr().err
    assert main([*argv, "--serve-agents", "merged"]) == 2
    assert "serve_agents would be ignored without serve" in capsys.readouterr().err
    assert not (out / "results.json").exists()
    assert main([*argv, "--serve", "--serve-dtype", "float32"]) == 0
    results = json.loads((out / "results.json").read_text())
    assert results["data"]["records"] == 2 and results["system"]["serve"] is True
    assert results["system"]["serve_dtype"] == "float32"
    assert results["command"].endswith("--serve-dtype float32 --serve")
    logs = list((tmp_path / "cache" / "logs").glob("vllm-*.log"))
    assert len(logs) == 1 and "dtype=float32" in logs[0].read_text()  # --serve-dtype reaches the server
    sent = [json.loads(line) for line in record.read_text().splitlines()]
    # Two records, each agent on its bundle slot: agent 0 its adapter, agent 1 the merged model.
    assert sorted(r["model"] for r in sent) == ["agent0", "agent0", "trained-bundle-base", "trained-bundle-base"]
    assert main(["eval", "autowebbench", "--data", str(AUTOWEBBENCH / "en" / "ind.json"), "--model", "lexical",
                 "--serve", "--out", str(tmp_path / "lex")]) == 2
    assert "is not one (baselines run here" in capsys.readouterr().err


def test_the_rollout_factory_serves_each_adapter_set_and_stops_the_last(tmp_path, tiny_model_dir, adapter_dirs,
                                                                        fake_pkg):
    import pickle

    from collabui.serving.managed import vllm_model_factory
    from collabui.serving.vllm_server import group_members
    from collabui.training.rollout import TeamModels

    record = tmp_path / "requests.jsonl"
    factory = vllm_model_factory(python=sys.executable, ready_timeout_s=60,
                                 env={"PYTHONPATH": str(fake_pkg), "FAKE_VLLM_RECORD": str(record)})
    pickle.loads(pickle.dumps(factory))  # rollout workers build their own
    models = TeamModels(tiny_model_dir, factory)
    first = models.get({})
    first.generate([ChatRequest(_ASK, max_new_tokens=4)])
    pid = first.server.pid
    second = models.get({"agent0": adapter_dirs["a1"]})
    assert second is not first and not first.server.running and group_members(pid) == []
    second.generate([ChatRequest(_ASK, max_new_tokens=4, adapter="agent0")])
    models.close()
    assert not second.server.running
    assert [json.loads(line)["model"] for line in record.read_text().splitlines()] == [tiny_model_dir.name, "agent0"]


def test_the_rollout_factory_serves_a_shared_adapter_merged_under_its_name(tmp_path, tiny_model_dir, adapter_dirs,
                                                                           fake_pkg, monkeypatch):
    """``merged=True``: a team's one adapter is folded into the model and served plain (vLLM-CPU's
    compiled path), answering as that adapter; the base model alone is not served beside it."""
    import pickle

    from collabui.models.bundle import merged_folder
    from collabui.serving.managed import AgentRouter, vllm_model_factory
    from collabui.training.rollout import TeamModels

    monkeypatch.setenv("COLLABUI_CACHE", str(tmp_path / "cache"))
    record = tmp_path / "requests.jsonl"
    factory = vllm_model_factory(merged=True, python=sys.executable, ready_timeout_s=60,
                                 env={"PYTHONPATH": str(fake_pkg), "FAKE_VLLM_RECORD": str(record)})
    pickle.loads(pickle.dumps(factory))
    models = TeamModels(tiny_model_dir, factory)
    plain = models.get({})  # iteration 0: no adapter yet, the base model as before
    assert plain.server.model == str(tiny_model_dir)
    team = models.get({"agent0": adapter_dirs["a1"]})
    assert isinstance(team, AgentRouter) and list(team.routes) == ["agent0"]
    server = team.routes["agent0"].server
    assert server.model == str(merged_folder(tiny_model_dir, [adapter_dirs["a1"]]))
    assert not server.adapters and server.model.startswith(str(tmp_path / "cache"))
    team.generate([ChatRequest(_ASK, max_new_tokens=4, adapter="agent0")] * 2)
    with pytest.raises(ConfigError, match="no server for adapter None"):
        team.generate([ChatRequest(_ASK, max_new_tokens=4)])
    models.close()
    assert not server.running
    sent = [json.loads(line)["model"] for line in record.read_text().splitlines()]
    assert sent == [f"{tiny_model_dir.name}-agent0"] * 2  # no LoRA name: the merged model itself
    # Two distinct adapters keep LoRA on one server.
    both = factory(tiny_model_dir, {"agent0": adapter_dirs["a1"], "agent1": adapter_dirs["a2"]})
    try:
        assert set(both.server.adapters) == {"agent0", "agent1"}
    finally:
        both.close()


def test_an_agent_merged_model_is_that_agent_of_the_local_bundle(tmp_path, tiny_model_dir, adapter_dirs):
    root = _bundle(tmp_path / "bundle", tiny_model_dir, adapter_dirs)
    agent = merged_model_dir(root, cache_dir=tmp_path / "cache", agent="agent0")
    shared = merged_model_dir(root, cache_dir=tmp_path / "cache")
    assert agent != shared and agent.parent == shared.parent
    bundle = load_model(f"trained:{root}", device="cpu")
    own = _greedy(LocalModel(agent, device="cpu"))
    assert own == _greedy(bundle, adapter="agent0")  # the adapter folded in, not served on top
    assert own != _greedy(LocalModel(shared, device="cpu"))
    with pytest.raises(ConfigError, match="has no agent adapter 'agent7'; its agents: \\['agent0'\\]"):
        merged_model_dir(root, cache_dir=tmp_path / "cache", agent="agent7")


def test_the_router_sends_each_request_to_its_agent_model_in_order():
    import asyncio

    from collabui.models.fake import ScriptedChatModel
    from collabui.serving.managed import AgentRouter

    routes = {key: ScriptedChatModel(lambda r, key=key: f"{key}:{r.messages[0]['content']}") for key in ("a0", None)}
    router = AgentRouter(routes, name="team", team_defaults={"adapters": ("a0", None)})
    asks = [ChatRequest(({"role": "user", "content": str(i)},), adapter=("a0", None)[i % 2]) for i in range(5)]
    assert [r.text for r in router.generate(asks)] == ["a0:0", "None:1", "a0:2", "None:3", "a0:4"]
    assert [r.text for r in asyncio.run(router.agenerate(asks[:2]))] == ["a0:0", "None:1"]
    # Each agent model already holds its adapter: requests reach it without one.
    assert {r.adapter for model in routes.values() for r in model.requests} == {None}
    with pytest.raises(ConfigError, match="no server for adapter 'a9'"):
        router.generate([ChatRequest(_ASK, adapter="a9")])
    assert router.team_defaults == {"adapters": ("a0", None)}


def test_the_agent_serving_choices_agree_across_layers():
    from collabui.evaluation import miniwob
    from collabui.serving import managed

    assert miniwob.AGENT_SERVING == managed.AGENT_SERVING
    with pytest.raises(ConfigError, match="serve_agents would be ignored without serve"):
        MiniWoBEvalConfig(tasks="click-test", model="smollm2", serve_agents="merged")
    with pytest.raises(ConfigError, match="unknown serve_agents 'both'"):
        MiniWoBEvalConfig(tasks="click-test", model="smollm2", serve=True, serve_agents="both")


def test_merged_agents_need_a_bundle_not_an_adapters_folder(tmp_path, tiny_model_dir, adapter_dirs):
    import shutil

    from collabui.serving.managed import ServedModel

    folder = tmp_path / "adapters"
    shutil.copytree(adapter_dirs["a1"], folder / "agent0")
    # Refused before any server starts: such a folder would silently be served as LoRA.
    with pytest.raises(ConfigError, match="merged needs a trained bundle .* drop --serve-agents merged"):
        ServedModel.of_spec(f"hf:{tiny_model_dir}", folder, agents="merged")


@pytest.mark.browser
def test_eval_serve_merged_runs_each_agent_on_a_server_of_its_own(tmp_path, tiny_model_dir, adapter_dirs, fake_pkg,
                                                                  monkeypatch):
    monkeypatch.setenv("COLLABUI_CACHE", str(tmp_path / "cache"))
    root = _bundle(tmp_path / "bundle", tiny_model_dir, adapter_dirs)
    _, sent = _served_episode(tmp_path, root, fake_pkg, serve_agents="merged")
    # No LoRA names: each agent's requests went to the server of its own merged model.
    assert sorted(r["model"] for r in sent) == ["trained-bundle-agent0"] * 2 + ["trained-bundle-shared"] * 2
    logs = "".join(p.read_text() for p in (tmp_path / "cache" / "logs").glob("vllm-*.log"))
    assert f"model={merged_model_dir(root, agent='agent0')} " in logs and f"model={merged_model_dir(root)} " in logs
    assert "lora" not in logs.lower()


def test_per_agent_servers_get_cores_of_their_own_on_a_cpu(monkeypatch):
    import os

    from collabui.serving import managed, setup

    monkeypatch.setattr(setup, "default_flavor", lambda: "cpu")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3, 4, 5, 6, 7}, raising=False)
    slices = managed._core_slices(4)
    assert [s["VLLM_CPU_OMP_THREADS_BIND"] for s in slices] == ["0,1", "2,3", "4,5", "6,7"]
    assert {s["OMP_NUM_THREADS"] for s in slices} == {"2"} and {s["OMP_WAIT_POLICY"] for s in slices} == {"PASSIVE"}
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert [s["VLLM_CPU_OMP_THREADS_BIND"] for s in managed._core_slices(4)] == ["0", "1", "0", "1"]
    # The caller's own environment wins over the binding.
    fields = managed._with_env({"env": {"OMP_WAIT_POLICY": "ACTIVE"}, "dtype": "float32"}, slices[0])
    assert fields["env"]["OMP_WAIT_POLICY"] == "ACTIVE" and fields["env"]["OMP_NUM_THREADS"] == "2"
    assert fields["dtype"] == "float32"
    monkeypatch.setattr(setup, "default_flavor", lambda: "gpu")
    assert managed._core_slices(4) == []


@pytest.mark.parametrize(("what", "flavor", "installed", "chosen"), [
    ("plain", "cpu", {"vllm": True, "llamacpp": True}, ("vllm", "lora")),
    ("sft bundle", "cpu", {"vllm": True, "llamacpp": True}, ("vllm", "lora")),
    ("shared adapter", "cpu", {"vllm": True, "llamacpp": True}, ("vllm", "merged")),
    ("per-agent bundle", "cpu", {"vllm": True, "llamacpp": True}, ("llamacpp", "lora")),
    ("per-agent bundle", "cpu", {"vllm": True, "llamacpp": False}, ("vllm", "lora")),
    ("shared adapter", "cpu", {"vllm": False, "llamacpp": True}, ("llamacpp", "lora")),
    ("per-agent bundle", "gpu", {"vllm": True, "llamacpp": True}, ("vllm", "lora")),
    ("adapters folder", "cpu", {"vllm": True, "llamacpp": True}, ("vllm", "lora")),
    ("plain", "cpu", {"vllm": False, "llamacpp": False}, ("vllm", "lora")),
])
def test_auto_serves_one_model_on_vllm_and_per_agent_models_on_llamacpp(tmp_path, tiny_model_dir, adapter_dirs,
                                                                        monkeypatch, what, flavor, installed, chosen):
    from collabui.serving import managed, setup
    from collabui.serving.managed import choose_backend, rollout_model_factory

    monkeypatch.setattr(managed, "_installed", lambda: installed)
    monkeypatch.setattr(setup, "default_flavor", lambda: flavor)
    import shutil

    folder = tmp_path / "adapters"
    shutil.copytree(adapter_dirs["a1"], folder / "agent0")
    base = f"hf:{tiny_model_dir}"
    sft = write_bundle(tmp_path / "s", base=base, merge={"stage1": adapter_dirs["a1"]}, agents={}, team={})
    shared = write_bundle(tmp_path / "h", base=base, merge={}, team={}, agents={"agent0": adapter_dirs["a2"]},
                          slots=["agent0"] * 3)
    specs = {"plain": (base, None), "adapters folder": (base, folder), "sft bundle": (f"trained:{sft}", None),
             "shared adapter": (f"trained:{shared}", None),
             "per-agent bundle": (f"trained:{_bundle(tmp_path / 'p', tiny_model_dir, adapter_dirs)}", None)}
    spec, adapters = specs[what]
    assert choose_backend(served_spec(spec, adapters)) == chosen
    # MARL's rollouts choose per adapter set: the start model alone (iteration 0) and a shared
    # adapter are one model; per-agent adapters are several
    one = "vllm" if flavor == "gpu" or installed["vllm"] or not installed["llamacpp"] else "llamacpp"
    several = "vllm" if flavor == "gpu" or not installed["llamacpp"] else "llamacpp"
    built = []

    def factory(backend):
        return lambda **fields: lambda base, adapters: built.append((backend, fields.get("merged", False))) or backend

    monkeypatch.setattr(managed, "llamacpp_model_factory", factory("llamacpp"))
    monkeypatch.setattr(managed, "vllm_model_factory", factory("vllm"))
    pair = {"agent0": adapter_dirs["a1"], "agent1": adapter_dirs["a2"]}
    per_agent, shared = rollout_model_factory("auto", dtype="auto"), rollout_model_factory("auto", shared=True)
    assert [per_agent(tiny_model_dir, {}), per_agent(tiny_model_dir, pair)] == [one, several]
    assert shared(tiny_model_dir, dict.fromkeys(pair, adapter_dirs["a1"])) == one
    assert built[-1] == (one, one == "vllm")  # a shared adapter on vLLM is folded into the model
    assert rollout_model_factory("vllm")(tiny_model_dir, pair) == "vllm"
    assert rollout_model_factory("llamacpp", shared=True)(tiny_model_dir, {}) == "llamacpp"


def test_auto_says_when_it_drops_merged(tmp_path, tiny_model_dir, adapter_dirs, monkeypatch, caplog):
    from collabui.serving import managed, setup
    from collabui.serving.managed import choose_backend

    monkeypatch.setattr(managed, "_installed", lambda: {"vllm": True, "llamacpp": True})
    monkeypatch.setattr(setup, "default_flavor", lambda: "cpu")
    spec = served_spec(f"trained:{_bundle(tmp_path / 'p', tiny_model_dir, adapter_dirs)}", None)
    with caplog.at_level("WARNING", logger=managed.__name__):
        assert choose_backend(spec, "merged") == ("llamacpp", "lora")
    assert "--serve-agents merged is ignored" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger=managed.__name__):
        assert choose_backend(spec, "lora") == ("llamacpp", "lora")
    assert not caplog.text
