"""The uniform model soup (training.soup) on a tiny tied Llama: every weight of the soup is the
mean of its sources' (loaded back through transformers), and mismatched sources are refused
with an error naming the problem."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from collabui.errors import ConfigError, ModelLoadError
from collabui.training.soup import average_models
from tests.tiny_models import moved_copy


def _params(folder: Path) -> dict:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder)
    return {name: p.detach().double().clone() for name, p in model.named_parameters()}


@pytest.fixture(scope="module")
def three(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return [moved_copy(tiny_model_dir, tmp_path_factory.mktemp(f"draw{k}"), seed=k) for k in range(3)]


def test_the_soup_is_the_mean_of_every_weight_and_loads_as_a_model(three, tmp_path):
    report = average_models(three, tmp_path / "soup")
    soup, parts = _params(tmp_path / "soup"), [_params(p) for p in three]
    assert set(soup) == set(parts[0])
    for name, weight in soup.items():
        mean = sum(p[name] for p in parts) / 3
        assert (weight - mean).abs().max() < 1e-6, name
        # not merely one of the sources: the draws moved every weight differently
        assert (weight - parts[0][name]).abs().max() > 1e-3, name
    assert report.sources == [str(p) for p in three] and report.parameters == sum(w.numel() for w in soup.values())
    assert report.spread > 0
    assert json.loads((tmp_path / "soup" / "soup.json").read_text())["tensors"] == report.tensors
    assert (tmp_path / "soup" / "tokenizer_config.json").is_file()  # the first source's files come along


def test_a_soup_of_a_model_with_itself_is_that_model(three, tmp_path):
    report = average_models([three[0], three[0]], tmp_path / "same")
    soup, one = _params(tmp_path / "same"), _params(three[0])
    assert all((soup[k] - one[k]).abs().max() == 0 for k in one) and report.spread == 0


def test_sources_that_cannot_be_averaged_are_refused_by_name(three, tiny_model_dir, tmp_path):
    with pytest.raises(ConfigError, match="two or more"):
        average_models(three[:1], tmp_path / "one")
    with pytest.raises(ConfigError, match="is one of its sources"):
        average_models([three[0], three[1]], three[1])
    with pytest.raises(ModelLoadError, match="no \\*.safetensors"):
        average_models([three[0], tmp_path], tmp_path / "x")
    wider = tmp_path / "wider"
    wider.mkdir()
    config = json.loads((tiny_model_dir / "config.json").read_text())
    config["intermediate_size"] = config["intermediate_size"] * 2
    from transformers import AutoConfig, AutoModelForCausalLM

    (wider / "config.json").write_text(json.dumps(config))
    AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(wider)).save_pretrained(wider)
    with pytest.raises(ConfigError, match="another architecture"):
        average_models([three[0], wider], tmp_path / "y")
    assert not (tmp_path / "y").exists() and not (tmp_path / "y.tmp").exists()
