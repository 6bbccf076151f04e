"""Fixtures for the serving tests: a fake vLLM package, a fake model folder, fake adapters."""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from collabui.serving.vllm_server import VLLMServer

_FAKE = Path(__file__).with_name("fake_vllm_server.py")


@pytest.fixture
def fake_pkg(tmp_path: Path) -> Path:
    """A folder that makes ``python -m vllm.entrypoints.openai.api_server`` run the fake."""
    root = tmp_path / "pkg"
    folder = root / "vllm" / "entrypoints" / "openai"
    folder.mkdir(parents=True)
    for parent in (root / "vllm", root / "vllm" / "entrypoints", folder):
        (parent / "__init__.py").write_text("")
    shutil.copy(_FAKE, folder / "api_server.py")
    return root


@pytest.fixture
def fake_model(tmp_path: Path) -> Path:
    folder = tmp_path / "tiny-model"
    folder.mkdir()
    (folder / "config.json").write_text('{"max_position_embeddings": 4096}')
    return folder


def make_adapters(root: Path, n: int, rank: int = 4) -> dict[str, str]:
    """``n`` folders that look like PEFT LoRA adapters (only the config matters to the fake)."""
    adapters = {}
    for i in range(n):
        folder = root / f"agent{i}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "adapter_config.json").write_text(json.dumps({"r": rank, "peft_type": "LORA"}))
        adapters[f"agent{i}"] = str(folder)
    return adapters


@pytest.fixture
def fake_server(fake_pkg: Path, fake_model: Path, tmp_path: Path) -> Callable[..., VLLMServer]:
    """Build a VLLMServer that runs the fake; ``mode`` and extra env go to the fake."""
    made: list[VLLMServer] = []

    def build(mode: str = "ok", env: dict[str, str] | None = None, **kwargs: Any) -> VLLMServer:
        server = VLLMServer(
            model=str(fake_model), python=sys.executable, log_file=tmp_path / "vllm.log",
            env={"PYTHONPATH": str(fake_pkg), "FAKE_VLLM_MODE": mode, **(env or {})},
            ready_timeout_s=kwargs.pop("ready_timeout_s", 30.0), **kwargs,
        )
        made.append(server)
        return server

    yield build
    for server in made:
        server.stop()


def make_peft_adapters(base_dir: Path, root: Path, n: int, rank: int = 4) -> dict[str, str]:
    """``n`` real, random LoRA adapters (q_proj/v_proj) for the model in ``base_dir``.

    Both LoRA matrices are random (PEFT's default init is a no-op adapter), so each adapter
    really changes the model's output. One base model is loaded; its LoRA weights are redrawn
    per adapter.
    """
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    lora = LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=["q_proj", "v_proj"],
                      init_lora_weights=False, task_type="CAUSAL_LM")
    model = get_peft_model(base, lora)
    adapters = {}
    for i in range(n):
        generator = torch.Generator().manual_seed(i)
        with torch.no_grad():
            for name, param in model.named_parameters():
                if "lora_" in name:
                    param.copy_(torch.randn(param.shape, generator=generator) * 0.1)
        folder = root / f"agent{i}"
        model.save_pretrained(folder)
        adapters[f"agent{i}"] = str(folder)
    return adapters
