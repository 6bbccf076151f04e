"""Trained team bundles: base + merged shared adapter + per-agent adapters + the team settings
they were trained for, loaded by model spec and applied by the team."""

from __future__ import annotations

import shutil

import pytest

from collabui.config import TeamConfig
from collabui.errors import ConfigError, ModelLoadError
from collabui.models.base import ChatRequest
from collabui.models.bundle import read_bundle, write_bundle
from collabui.models.spec import load_model
from collabui.team import CollabAgentTeam

_MSG = ({"role": "user", "content": "Click the OK button."},)


def _bundle(tmp_path, tiny_model_dir, adapter_dirs):
    return write_bundle(tmp_path / "bundle", base=f"hf:{tiny_model_dir}", merge={"stage1": adapter_dirs["a1"]},
                        agents={"agent0": adapter_dirs["a2"], "agent1": adapter_dirs["a1"]},
                        team={"prompt_style": "trained", "max_new_tokens": 8}, made_by="test")


def _answer(model, adapter=None):
    request = ChatRequest(messages=_MSG, max_new_tokens=6, temperature=0.0, adapter=adapter)
    return model.generate([request])[0].text


def test_bundle_merges_its_shared_adapter_and_serves_agent_adapters(tmp_path, tiny_model_dir, adapter_dirs, tiny_model):
    from collabui.models.local import LocalModel

    model = load_model(f"trained:{_bundle(tmp_path, tiny_model_dir, adapter_dirs)}", device="cpu")
    assert model.adapters == ("agent0", "agent1")
    # The merged base is the tiny model with stage1 merged in: equal to serving stage1 as an adapter.
    with_stage1 = LocalModel(tiny_model_dir, device="cpu", adapters={"s": adapter_dirs["a1"]})
    assert _answer(model) == _answer(with_stage1, "s")
    assert _answer(model) != _answer(tiny_model)  # the merge changed the weights


def test_bundles_store_fp16_adapters_and_replace_a_folder_whole(tmp_path, tiny_model_dir, adapter_dirs):
    from safetensors.torch import load_file

    root = _bundle(tmp_path, tiny_model_dir, adapter_dirs)
    weights = load_file(str(root / "stage1" / "adapter_model.safetensors"))
    assert weights and all(str(w.dtype) == "torch.float16" for w in weights.values())
    assert read_bundle(root)["made_by"] == "test"
    (root / "stale").mkdir()
    _bundle(tmp_path, tiny_model_dir, adapter_dirs)  # written again: nothing of the old one stays
    assert not (root / "stale").exists() and not (tmp_path / "bundle.tmp").exists()


def test_team_applies_the_bundle_settings_unless_told_otherwise(tmp_path, tiny_model_dir, adapter_dirs):
    model = load_model(f"trained:{_bundle(tmp_path, tiny_model_dir, adapter_dirs)}", device="cpu")
    team = CollabAgentTeam(model, n_agents=3, rounds=1, topology="chain")
    assert team.config.prompt_style == "trained"
    assert team.config.adapters == ("agent0", "agent1", "agent0")  # cycled over the agents
    chosen = CollabAgentTeam(model, n_agents=2, rounds=1, prompt_style="compact", adapters=(None, "agent1"))
    assert chosen.config.prompt_style == "compact" and chosen.config.adapters == (None, "agent1")
    # An untrained model resolves auto to react and keeps the base model.
    assert TeamConfig().for_model(object()).prompt_style == "react"


def test_an_agent_without_an_adapter_runs_on_the_merged_model(tmp_path, tiny_model_dir, adapter_dirs):
    """A MARL agent that never had a pair keeps the stage-1 model: a null slot, not a cycled neighbour."""
    root = write_bundle(tmp_path / "bundle", base=f"hf:{tiny_model_dir}", merge={"stage1": adapter_dirs["a1"]},
                        agents={"agent1": adapter_dirs["a2"]}, slots=[None, "agent1", None],
                        team={"prompt_style": "trained"}, made_by="test")
    assert read_bundle(root)["agents"] == [None, "agent1", None] and not (root / "agent0").exists()
    model = load_model(f"trained:{root}", device="cpu")
    team = CollabAgentTeam(model, n_agents=3, rounds=1, topology="chain")
    assert team.config.adapters == (None, "agent1", None)
    assert _answer(model, "agent1") != _answer(model)  # agent 1 reads through its own adapter
    with pytest.raises(ConfigError, match="slots name adapters"):
        write_bundle(tmp_path / "b2", base=f"hf:{tiny_model_dir}", merge={}, agents={}, slots=["agent0"],
                     team={}, made_by="test")


def test_broken_bundles_fail_with_the_fix(tmp_path, tiny_model_dir, adapter_dirs):
    with pytest.raises(ModelLoadError, match="no team.json"):
        load_model(f"trained:{tmp_path}")
    root = _bundle(tmp_path, tiny_model_dir, adapter_dirs)
    shutil.rmtree(root / "agent1")
    with pytest.raises(ModelLoadError, match="copy the whole bundle"):
        read_bundle(root)


def test_pages_are_shown_in_the_format_the_bundle_learned(tmp_path, tiny_model_dir, adapter_dirs):
    from collabui.cli import build_parser
    from collabui.cli.run import page_options
    from collabui.evaluation.miniwob import MiniWoBEvalConfig
    from collabui.models.spec import model_element_format

    root = write_bundle(tmp_path / "tf", base=f"hf:{tiny_model_dir}", merge={"stage1": adapter_dirs["a1"]},
                        agents={}, team={"prompt_style": "grounded", "element_format": "text-first"})
    spec = f"trained:{root}"
    assert model_element_format(spec) == "text-first"
    assert model_element_format("smollm2") == model_element_format("lexical") == "html"
    # auto (the default) follows the model; an explicit format wins; phone tasks keep their list.
    assert MiniWoBEvalConfig(model=spec).element_format == "text-first"
    assert MiniWoBEvalConfig(model=spec, element_format="html").element_format == "html"
    assert MiniWoBEvalConfig(model=spec, mobile=True).element_format == "html"
    assert MiniWoBEvalConfig(model="lexical").element_format == "html"
    run = build_parser().parse_args(["run", "--env", "miniwob/click-button", "--model", spec])
    assert page_options(run)["element_format"] == "text-first"
    with pytest.raises(ModelLoadError, match="no team.json"):
        MiniWoBEvalConfig(model=f"trained:{tmp_path}")  # a bad bundle fails before any browser starts


def test_a_bundle_rewritten_with_other_weights_is_not_resumed_as_the_same_model(tmp_path, tiny_model_dir, adapter_dirs):
    from collabui.evaluation.miniwob import MiniWoBEvalConfig
    from collabui.evaluation.miniwob_folder import check_out_dir as _check_out_dir
    from collabui.models.spec import model_fingerprint

    def write(adapter):
        return write_bundle(tmp_path / "b", base=f"hf:{tiny_model_dir}", merge={"stage1": adapter_dirs[adapter]},
                            agents={}, team={"prompt_style": "trained"})

    spec = f"trained:{write('a1')}"
    first = model_fingerprint(spec)
    assert first == model_fingerprint(f"trained:{write('a1')}")  # same weights, same identity
    assert model_fingerprint("smollm2") is None
    config = MiniWoBEvalConfig(model=spec, episodes=1)
    _check_out_dir(tmp_path / "run", config)  # records the run's fingerprint
    _check_out_dir(tmp_path / "run", config)  # resuming the same model is fine
    write("a2")  # the recipe wrote a new model in the same folder
    assert model_fingerprint(spec) != first
    with pytest.raises(ConfigError, match="model_weights"):
        _check_out_dir(tmp_path / "run", config)


def test_an_interpolated_bundle_moves_its_agents_part_of_the_way_to_their_trained_weights(tmp_path, tiny_model_dir,
                                                                                           adapter_dirs):
    from safetensors.torch import load_file

    from collabui.models.bundle import interpolate_bundle, write_merged_model

    source = _bundle(tmp_path, tiny_model_dir, adapter_dirs)
    half = interpolate_bundle(source, tmp_path / "half", 0.5)
    manifest = read_bundle(half)
    assert manifest["interpolated"] == {"from": str(source), "weight": 0.5}
    assert manifest["agents"] == read_bundle(source)["agents"] and manifest["made_by"] == "test"

    def weights(folder, agent=None, name="w"):
        out = write_merged_model(folder, tmp_path / f"{name}-{agent}", agent=agent)
        return load_file(str(next(out.glob("*.safetensors"))))

    shared, trained, mid = weights(source), weights(source, "agent0", "s"), weights(half, "agent0", "h")
    key = next(k for k in shared if "layers.0.self_attn.q_proj.weight" in k)
    assert not (trained[key] - shared[key]).abs().max() < 1e-4  # the agent's adapter moves the weights
    assert ((mid[key] - (shared[key] + trained[key]) / 2).abs().max()) < 1e-3  # halfway between
    assert (weights(half, name="hs")[key] == shared[key]).all()  # the merged stage-1 adapter is whole


@pytest.mark.parametrize("weight", [0, -0.5, 1.5, float("nan"), True])
def test_interpolation_weights_outside_the_unit_interval_are_refused(tmp_path, tiny_model_dir, adapter_dirs, weight):
    from collabui.models.bundle import interpolate_bundle

    source = _bundle(tmp_path, tiny_model_dir, adapter_dirs)
    with pytest.raises(ConfigError, match=r"in \(0, 1\]"):
        interpolate_bundle(source, tmp_path / "out", weight)
    with pytest.raises(ConfigError, match="another folder"):
        interpolate_bundle(source, source, 0.5)
    assert not (tmp_path / "out").exists()
