"""load_model: the three CLI model specs and their errors."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from collabui.errors import ConfigError, ModelLoadError
from collabui.models import LangChainModel, LocalModel, load_model


def test_openai_spec(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    model = load_model("openai:SmolLM2@http://127.0.0.1:8000/v1", timeout=3, max_retries=0)
    assert isinstance(model, LangChainModel)
    assert model.name == "openai:SmolLM2" and model.base_url == "http://127.0.0.1:8000/v1"
    assert model.chat.model_name == "SmolLM2"
    assert model.chat.openai_api_key.get_secret_value() == "EMPTY"
    assert model.chat.max_retries == 0 and model.chat.request_timeout == 3


def test_openai_spec_takes_key_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    model = load_model("openai:gpt-4o-mini")
    assert model.chat.openai_api_key.get_secret_value() == "sk-test"


def test_openai_spec_without_langchain_openai(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "langchain_openai", None)
    with pytest.raises(ModelLoadError, match=r"pip install 'collabui-agents\[openai\]'"):
        load_model("openai:m@http://127.0.0.1:8000/v1")


def test_hf_spec(tiny_model_dir: Path) -> None:
    model = load_model(f"hf:{tiny_model_dir}", device="cpu", max_batch_size=3)
    assert isinstance(model, LocalModel) and model.max_batch_size == 3


def test_hf_spec_missing_folder(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="does not exist"):
        load_model(f"hf:{tmp_path / 'nope'}")


@pytest.mark.parametrize(
    "spec", ["gpt-4", "hf:", "openai:", "openai:@http://x", "vllm:m@http://x", "", "openai:m@localhost:8000"]
)
def test_bad_specs_list_the_forms(spec: str) -> None:
    with pytest.raises(ConfigError, match=r"smollm2|http://"):
        load_model(spec)


def test_unknown_spec_lists_every_form() -> None:
    with pytest.raises(ConfigError, match=r"smollm2 \(embedded\), smollm2-trained .*trained:FOLDER.*hf:PATH .*openai:MODEL@BASE_URL"):
        load_model("llama")
