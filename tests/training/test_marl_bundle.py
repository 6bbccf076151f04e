"""MARL from a trained bundle (its shared stage-1 model, prompt style and page format) and the
bundle every run leaves: per-agent adapters, null slots for agents without pairs, the last DAG."""

import json

import pytest

from collabui.errors import ConfigError
from collabui.models.bundle import read_bundle, write_bundle
from collabui.models.spec import load_model
from collabui.team import CollabAgentTeam
from collabui.training.marl import iteration_topologies, run_marl
from collabui.training.marl_bundle import effective_config
from tests.training.marl_kit import factories, new_log, small_config


@pytest.fixture
def stage1(tmp_path, base_dir, adapter_dirs):
    """A recipe-like bundle: the tiny model with one shared adapter, trained prompt style, text-first pages."""
    return write_bundle(tmp_path / "stage1", base=f"hf:{base_dir}", merge={"stage1": adapter_dirs["a1"]}, agents={},
                        team={"prompt_style": "trained", "max_new_tokens": 8, "element_format": "text-first"},
                        made_by="test")


def test_a_run_from_a_bundle_trains_on_its_shared_model_and_leaves_a_team_bundle(tmp_path, base_dir, stage1,
                                                                                   adapter_dirs):
    from collabui.models.local import LocalModel

    out = tmp_path / "run"
    config = small_config(None, out, model=f"trained:{stage1}", prompt_style="auto", n_agents=3, iterations=2,
                          eval_tasks=(), eval_episodes_per_task=0)
    # auto settings come from the bundle; the stored config keeps what the user asked for
    run = effective_config(config)
    assert (run.team.prompt_style, run.element_format) == ("trained", "text-first")
    log = new_log()
    model_factory, env_factory = factories(log)
    report = run_marl(config, progress=False, env_factory=env_factory, model_factory=model_factory)
    assert report.complete and len(report.iterations) == 2
    assert json.loads((out / "state.json").read_text())["config"]["team"]["prompt_style"] == "auto"
    # The base the agents trained on is the bundle's model: tiny model + stage1 merged.
    base = out / "base"
    served = LocalModel(base_dir, device="cpu", adapters={"s": adapter_dirs["a1"]})
    assert _answer(LocalModel(base, device="cpu")) == _answer(served, "s") != _answer(served)
    from collabui.trace import read_trace

    header = read_trace(next((out / "iter1" / "traces").glob("*.jsonl"))).header
    assert header["team"]["prompt_style"] == "trained"
    bundle = read_bundle(out / "bundle")
    last_dag = iteration_topologies(config)[-1]
    assert bundle["team"]["topology"] == last_dag.to_spec() and bundle["team"]["prompt_style"] == "trained"
    assert bundle["merge"] == ["stage1"] and bundle["marl"]["iterations"] == 2
    trained = {a["agent"] for a in report.iterations[-1].dpo["agents"] if a["status"] in ("trained", "resumed")}
    assert bundle["agents"] == [f"agent{i}" if (out / "iter1" / "adapters" / f"agent{i}").is_dir() else None
                                for i in range(3)] and trained
    # Loaded as trained:FOLDER, a team of that size takes the DAG and the adapters it was trained with.
    team = CollabAgentTeam(load_model(f"trained:{out / 'bundle'}", device="cpu"), n_agents=3, rounds=1)
    assert team.config.topology == last_dag.to_spec() and team.config.adapters == tuple(bundle["agents"])
    assert CollabAgentTeam(load_model(f"trained:{out / 'bundle'}", device="cpu"), n_agents=2,
                           rounds=1).config.topology == "random"  # another size: not the trained DAG



def test_a_run_grown_to_more_iterations_keeps_the_team_it_had(tmp_path, base_dir, stage1):
    import dataclasses

    out = tmp_path / "run"
    config = small_config(None, out, model=f"trained:{stage1}", n_agents=2, iterations=1, eval_tasks=(),
                          eval_episodes_per_task=0)
    model_factory, env_factory = factories(new_log())
    run_marl(config, progress=False, env_factory=env_factory, model_factory=model_factory)
    first = (out / "bundle" / "team.json").read_text()
    run_marl(dataclasses.replace(config, iterations=2), progress=False, env_factory=env_factory,
             model_factory=model_factory)
    assert (out / "bundle-x1" / "team.json").read_text() == first
    assert read_bundle(out / "bundle-x1")["marl"]["iterations"] == 1
    assert read_bundle(out / "bundle")["marl"]["iterations"] == 2
    from safetensors.torch import load_file

    agents = [a for a in read_bundle(out / "bundle-x1")["agents"] if a is not None]
    assert agents
    for agent in agents:  # the first iteration's adapters (in the bundle's fp16), not the second's
        kept = load_file(out / "bundle-x1" / agent / "adapter_model.safetensors")
        trained = load_file(out / "iter0" / "adapters" / agent / "adapter_model.safetensors")
        assert kept.keys() == trained.keys()
        assert all(kept[k].equal(trained[k].to(kept[k].dtype)) for k in kept)
    run_marl(dataclasses.replace(config, iterations=2), progress=False, env_factory=env_factory,
             model_factory=model_factory)  # a rerun of the same run moves nothing
    assert sorted(p.name for p in out.glob("bundle*")) == ["bundle", "bundle-x1"]


def test_an_interpolated_bundle_keeps_that_share_of_the_update_without_training_again(tmp_path, base_dir, stage1):
    import dataclasses

    from safetensors.torch import load_file

    out = tmp_path / "run"
    config = small_config(None, out, model=f"trained:{stage1}", n_agents=2, iterations=1, eval_tasks=(),
                          eval_episodes_per_task=0)
    log = new_log()
    model_factory, env_factory = factories(log)
    run_marl(config, progress=False, env_factory=env_factory, model_factory=model_factory)
    calls = log["requests"]
    # A finished run asked for a quarter of its update: the same iterations, a new bundle.
    run_marl(dataclasses.replace(config, interpolate=0.25), progress=False, env_factory=env_factory,
             model_factory=model_factory)
    assert log["requests"] == calls  # nothing rolled out or trained again
    bundle = read_bundle(out / "bundle")
    assert bundle["marl"]["interpolate"] == 0.25 and bundle["merge"] == ["stage1"]
    agents = [a for a in bundle["agents"] if a is not None]
    assert agents
    for agent in agents:
        kept = load_file(out / "bundle" / agent / "adapter_model.safetensors")
        trained = load_file(out / "iter0" / "adapters" / agent / "adapter_model.safetensors")
        scaled = [k for k in kept if "lora_B" in k]
        assert scaled and all(kept[k].float().allclose(trained[k].float() * 0.25, atol=1e-4) for k in scaled)
        assert all(kept[k].equal(trained[k].to(kept[k].dtype)) for k in kept if "lora_A" in k)
    with pytest.raises(ConfigError, match=r"in \(0, 1\]"):
        dataclasses.replace(config, interpolate=0)


def _answer(model, adapter=None):
    from collabui.models.base import ChatRequest

    request = ChatRequest(messages=({"role": "user", "content": "Click OK."},), max_new_tokens=6,
                          temperature=0.0, adapter=adapter)
    return model.generate([request])[0].text


def test_a_bundle_with_per_agent_adapters_is_not_a_start(tmp_path, base_dir, adapter_dirs):
    team = write_bundle(tmp_path / "team", base=f"hf:{base_dir}", merge={}, agents={"agent0": adapter_dirs["a1"]},
                        team={}, made_by="test")
    config = small_config(base_dir, tmp_path / "run", model=f"trained:{team}")
    with pytest.raises(ConfigError, match="already has per-agent adapters"):
        run_marl(config, progress=False, env_factory=factories(new_log())[1])
    assert not (tmp_path / "run").exists()


def test_a_shared_adapter_learns_every_agents_pairs_and_every_agent_runs_it(tmp_path, base_dir, stage1):
    from collabui.training.pairs import load_pairs

    out = tmp_path / "run"
    config = small_config(None, out, model=f"trained:{stage1}", n_agents=3, iterations=2, eval_tasks=(),
                          eval_episodes_per_task=0, shared_adapter=True)
    log = new_log()
    model_factory, env_factory = factories(log)
    report = run_marl(config, progress=False, env_factory=env_factory, model_factory=model_factory)
    for k, it in enumerate(report.iterations):
        pairs = load_pairs(out / f"iter{k}" / "pairs.jsonl")
        assert len(set(pairs["agent"])) > 1  # the pairs keep whose mistake they were...
        (trained,) = it.dpo["agents"]  # ...and one adapter learns them all
        assert (trained["agent"], trained["n_pairs"]) == (0, len(pairs))
        assert sorted(p.name for p in (out / f"iter{k}" / "adapters").iterdir() if p.is_dir()) == ["agent0"]
    assert report.iterations[1].dpo["agents"][0]["init_from"]  # the second iteration continues it
    assert log["adapters"] >= {"agent0"} and not log["adapters"] & {"agent1", "agent2"}
    bundle = read_bundle(out / "bundle")
    assert bundle["agents"] == ["agent0"] * 3 and bundle["marl"]["shared_adapter"] is True
    assert sorted(p.name for p in (out / "bundle").iterdir() if p.is_dir()) == ["agent0", "stage1"]
    team = CollabAgentTeam(load_model(f"trained:{out / 'bundle'}", device="cpu"), n_agents=3, rounds=1)
    assert team.config.adapters == ("agent0",) * 3
