"""The all-zero adapter that routes base-model requests through vLLM's LoRA path (hermetic)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from collabui.errors import ConfigError
from collabui.models.base import ChatRequest
from collabui.serving.vllm_server import VLLMServer
from collabui.serving.zero_adapter import zero_adapter

from .conftest import make_adapters, make_peft_adapters


@pytest.fixture(scope="module")
def peft_adapters(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return make_peft_adapters(tiny_model_dir, tmp_path_factory.mktemp("peft"), 2)


def test_zero_adapter_equals_the_base_model(tiny_model_dir: Path, peft_adapters: dict[str, str], tmp_path: Path) -> None:
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    folder = zero_adapter(peft_adapters["agent0"], cache_dir=tmp_path)
    ids = torch.tensor([[1, 5, 9, 42, 7]])
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    with torch.no_grad():
        expected = base(ids).logits
        real = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model_dir), peft_adapters["agent0"]).eval()
        assert not torch.allclose(real(ids).logits, expected), "the source adapter must change the model"
        zero = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model_dir), str(folder)).eval()
        assert torch.equal(zero(ids).logits, expected)
    assert json.loads((folder / "adapter_config.json").read_text())["r"] == 4


def test_zero_adapter_is_created_once(peft_adapters: dict[str, str], tmp_path: Path) -> None:
    first = zero_adapter(peft_adapters["agent0"], cache_dir=tmp_path)
    stamp = (first / "adapter_model.safetensors").stat().st_mtime_ns
    # agent1 has the same config and shapes: the same zero adapter serves it.
    assert zero_adapter(peft_adapters["agent1"], cache_dir=tmp_path) == first
    assert (first / "adapter_model.safetensors").stat().st_mtime_ns == stamp
    assert [p.name for p in tmp_path.iterdir()] == [first.name], "no staging folder left behind"


def test_rejects_adapters_that_zeroing_cannot_neutralize(peft_adapters: dict[str, str], tmp_path: Path) -> None:
    import shutil

    folder = tmp_path / "mts"
    shutil.copytree(peft_adapters["agent0"], folder)
    config = json.loads((folder / "adapter_config.json").read_text())
    (folder / "adapter_config.json").write_text(json.dumps({**config, "modules_to_save": ["lm_head"]}))
    with pytest.raises(ConfigError, match="zero_adapter=False"):
        zero_adapter(folder, cache_dir=tmp_path / "c")
    with pytest.raises(ConfigError, match="no adapter_config.json and adapter_model.safetensors"):
        zero_adapter(tmp_path / "nothing", cache_dir=tmp_path / "c")


def test_server_serves_zero_adapter_and_defaults_to_it(fake_model: Path, peft_adapters: dict[str, str],
                                                       tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("collabui.serving.zero_adapter._default_root", lambda: tmp_path / "zero")
    server = VLLMServer(str(fake_model), adapters=peft_adapters, port=8123, python="/x/bin/python")
    assert server.zero_adapter_name == "tiny-model-base"
    cmd = server.command()
    modules = cmd[cmd.index("--lora-modules") + 1:]
    assert [m.split("=")[0] for m in modules] == ["agent0", "agent1", "tiny-model-base"]
    assert Path(modules[2].split("=", 1)[1]).parent == tmp_path / "zero"
    assert cmd[cmd.index("--max-loras") + 1] == "3"
    assert server.model_spec == "openai:tiny-model-base@http://127.0.0.1:8123/v1"
    off = VLLMServer(str(fake_model), adapters=peft_adapters, port=8123, python="/x/bin/python", zero_adapter=False)
    assert off.zero_adapter_name is None and "tiny-model-base" not in " ".join(off.command())
    assert VLLMServer(str(fake_model), port=1).zero_adapter_name is None, "no adapters, no zero adapter"


def test_zero_adapter_needs_weights_only_when_forced(fake_model: Path, tmp_path: Path) -> None:
    fake = make_adapters(tmp_path / "ad", 1)
    assert VLLMServer(str(fake_model), adapters=fake, port=1).zero_adapter_name is None  # auto: off
    with pytest.raises(ConfigError, match="zero_adapter=True needs PEFT weights"):
        _ = VLLMServer(str(fake_model), adapters=fake, port=1, zero_adapter=True).zero_adapter_name
    with pytest.raises(ConfigError, match="reserved for the zero adapter"):
        VLLMServer(str(fake_model), adapters={"tiny-model-base": fake["agent0"]})


def test_client_sends_base_requests_to_the_zero_adapter(fake_server, peft_adapters: dict[str, str], tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("collabui.serving.zero_adapter._default_root", lambda: tmp_path / "zero")
    record = tmp_path / "requests.jsonl"
    with fake_server(env={"FAKE_VLLM_RECORD": str(record)}, adapters=peft_adapters) as server:
        assert "tiny-model-base" in server.served_models()
        model = server.client(timeout=10, max_retries=0)
        ask = ({"role": "user", "content": "hi"},)
        model.generate([ChatRequest(ask), ChatRequest(ask, adapter="agent1")])
    sent = sorted(json.loads(line)["model"] for line in record.read_text().splitlines())
    assert sent == ["agent1", "tiny-model-base"]
