"""GGUF export of SmolLM2 fine-tunes: the file transformers reads back holds the same weights."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from collabui.errors import ConfigError
from collabui.serving.gguf_export import gguf_tensor_name, write_gguf

pytestmark = [pytest.mark.model]


def _read_back(path: Path) -> dict[str, torch.Tensor]:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype="float32")
    return model.state_dict()


def _source(folder: Path) -> dict[str, torch.Tensor]:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(folder, dtype="float32").state_dict()


@pytest.fixture(scope="module")
def moved_smollm2(smollm2_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """SmolLM2 with every weight moved by noise: a fine-tune no file on disk already holds."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(smollm2_dir, dtype=torch.float32)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn(param.shape, generator=generator) * 1e-3)
    folder = tmp_path_factory.mktemp("moved")
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(smollm2_dir).save_pretrained(folder)
    return folder


def test_float32_export_reads_back_with_the_same_weights(moved_smollm2: Path, tmp_path: Path) -> None:
    path = write_gguf(moved_smollm2, tmp_path / "model.gguf", dtype="f32")
    got, want = _read_back(path), _source(moved_smollm2)
    assert set(got) == set(want)
    # Exact: the rotary interleave of q and k is undone by the reader, the tied head rebuilt.
    different = [name for name in want if not torch.equal(got[name], want[name])]
    assert different == []
    assert path.stat().st_mode & 0o777 == 0o644


def test_float16_export_rounds_each_weight_once(moved_smollm2: Path, tmp_path: Path) -> None:
    got = _read_back(write_gguf(moved_smollm2, tmp_path / "model.gguf", dtype="f16"))
    want = _source(moved_smollm2)
    for name, tensor in want.items():
        expected = tensor if tensor.ndim == 1 else tensor.half().float()  # norms stay float32
        assert torch.equal(got[name], expected), name


def test_tensor_names() -> None:
    assert gguf_tensor_name("model.layers.3.mlp.up_proj.weight") == "blk.3.ffn_up.weight"
    assert gguf_tensor_name("model.layers.0.self_attn.q_proj.weight") == "blk.0.attn_q.weight"
    assert gguf_tensor_name("model.embed_tokens.weight") == "token_embd.weight"
    with pytest.raises(ConfigError, match="lora_A.*no place in a llama GGUF"):
        gguf_tensor_name("model.layers.0.self_attn.q_proj.lora_A.weight")


def test_refuses_other_models_and_dtypes(tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    config = {"model_type": "llama", "num_hidden_layers": 30, "hidden_size": 1024, "intermediate_size": 1536,
              "num_attention_heads": 9, "num_key_value_heads": 3, "vocab_size": 49152}
    (other / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError, match="hidden_size=1024, the embedded SmolLM2 576"):
        write_gguf(other, tmp_path / "x.gguf")
    (other / "config.json").write_text(json.dumps({**config, "model_type": "gpt2"}))
    with pytest.raises(ConfigError, match="'gpt2' model"):
        write_gguf(other, tmp_path / "x.gguf")
    with pytest.raises(ConfigError, match="unknown GGUF dtype 'int4'"):
        write_gguf(other, tmp_path / "x.gguf", dtype="int4")
    with pytest.raises(ConfigError, match="no readable config.json"):
        write_gguf(tmp_path / "missing", tmp_path / "x.gguf")
    assert not list(tmp_path.glob("*.gguf")) and not list(tmp_path.glob(".x.gguf*"))


def test_q8_export_is_close(moved_smollm2: Path, tmp_path: Path) -> None:
    got = _read_back(write_gguf(moved_smollm2, tmp_path / "model.gguf", dtype="q8_0"))
    want = _source(moved_smollm2)
    for name, tensor in want.items():
        if tensor.ndim == 1:
            assert torch.equal(got[name], tensor), name
        else:  # 8 bits per weight, one float16 scale per 32: within one step of each block
            step = tensor.abs().reshape(tensor.shape[0], -1, 32).amax(-1, keepdim=True) / 127
            error = (got[name] - tensor).abs().reshape(step.shape[0], -1, 32)
            assert bool((error <= step * 1.01 + 1e-6).all()), name
