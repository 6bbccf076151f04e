"""The low-rank extract of a full fine-tune (training.extract) on a tiny tied Llama: a full-rank
extract merges back to the tuned weights, a truncated one to the best rank-r change, and the
adapter file holds factors only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from collabui.errors import ConfigError
from collabui.models.local import LocalModel
from collabui.training.extract import extract_adapter
from tests.tiny_models import moved_copy


@pytest.fixture(scope="module")
def tuned_dir(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model with every parameter moved (as a full fine-tune moves them)."""
    return moved_copy(tiny_model_dir, tmp_path_factory.mktemp("tuned"), seed=1)


def _weights(folder: Path, merge: list[Path] | None = None) -> dict:
    model = LocalModel(folder, merge=merge or [], prefix_cache=False).model
    return {name: p.detach().float().clone() for name, p in model.named_parameters()}


def test_full_rank_extract_merges_back_to_the_tuned_linears_and_tied_embedding(tiny_model_dir, tuned_dir, tmp_path):
    import torch

    report = extract_adapter(tiny_model_dir, tuned_dir, tmp_path / "ad", rank=64, embedding_rank=32)
    merged, tuned, base = _weights(tiny_model_dir, [tmp_path / "ad"]), _weights(tuned_dir), _weights(tiny_model_dir)
    for name, w in tuned.items():
        if name.endswith("proj.weight") or "embed_tokens" in name:
            assert (merged[name] - w).abs().max() < 2e-3, name  # fp16 factors
        else:  # the norms' gains are not carried: they keep the base's values
            assert torch.equal(merged[name], base[name]), name
    assert set(report.energy) == {"embed_tokens", "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                  "up_proj", "down_proj"}
    assert all(v == pytest.approx(1.0) for v in report.energy.values())
    assert set(report.not_carried) == {"input_layernorm", "post_attention_layernorm", "norm"}
    assert json.loads((tmp_path / "ad" / "extract.json").read_text())["rank"] == 64
    # In sorted order, not PEFT's set order (which follows the hash seed): one extract, one file.
    targets = json.loads((tmp_path / "ad" / "adapter_config.json").read_text())["target_modules"]
    assert targets == sorted(targets) and "q_proj" in targets


def test_truncated_extract_is_the_best_rank_r_change_and_leaves_the_embedding_when_asked(
        tiny_model_dir, tuned_dir, tmp_path):
    import torch
    from safetensors.torch import load_file

    report = extract_adapter(tiny_model_dir, tuned_dir, tmp_path / "ad", rank=2, embedding_rank=0)
    merged, tuned, base = _weights(tiny_model_dir, [tmp_path / "ad"]), _weights(tuned_dir), _weights(tiny_model_dir)
    name = "model.layers.1.mlp.down_proj.weight"
    u, s, vh = torch.linalg.svd(tuned[name] - base[name], full_matrices=False)
    best = base[name] + (u[:, :2] * s[:2]) @ vh[:2]
    assert (merged[name] - best).abs().max() < 1e-3
    assert (merged[name] - tuned[name]).abs().max() > 10 * (merged[name] - best).abs().max()
    assert torch.equal(merged["model.embed_tokens.weight"], base["model.embed_tokens.weight"])
    assert 0.0 < report.energy["down_proj"] < 1.0 and "embed_tokens" not in report.energy
    assert "embed_tokens" in report.not_carried
    stored = load_file(str(tmp_path / "ad" / "adapter_model.safetensors"))
    assert stored and all("lora_" in key for key in stored)  # factors only, no copied weights
    assert all(t.dtype == torch.float16 for t in stored.values())
    assert all(min(t.shape) == 2 for t in stored.values())
    assert report.adapter_bytes == (tmp_path / "ad" / "adapter_model.safetensors").stat().st_size


def test_bad_ranks_and_a_model_of_another_shape_are_one_line_errors(tiny_model_dir, smollm2_dir, tmp_path):
    with pytest.raises(ConfigError, match="ranks must be >= 1"):
        extract_adapter(tiny_model_dir, tiny_model_dir, tmp_path / "ad", rank=0)
    with pytest.raises(ConfigError, match="is not a fine-tune of") as info:
        extract_adapter(tiny_model_dir, smollm2_dir, tmp_path / "ad", rank=4)
    assert "\n" not in str(info.value)
    assert not (tmp_path / "ad").exists()


def test_train_extract_command_writes_the_adapter_and_a_bad_rank_is_one_line(tiny_model_dir, tuned_dir, tmp_path,
                                                                             capsys):
    from collabui.cli import main

    out = tmp_path / "ad"
    assert main(["train", "extract", "--tuned", str(tuned_dir), "--model", f"hf:{tiny_model_dir}",
                 "--out", str(out), "--rank", "3", "--embedding-rank", "0"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["rank"] == 3 and (out / "adapter_config.json").is_file()
    assert json.loads((out / "adapter_config.json").read_text())["r"] == 3
    assert main(["train", "extract", "--tuned", str(tuned_dir), "--model", f"hf:{tiny_model_dir}",
                 "--out", str(tmp_path / "bad"), "--rank", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "ranks must be >= 1" in err[0]
