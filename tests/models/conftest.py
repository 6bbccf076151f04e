"""Fixtures for the chat-model tests (the tiny model itself lives in tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def adapter_dirs(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two LoRA adapters with random, non-zero A and B (so each changes the outputs)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    folders = {}
    for seed, name in ((1, "a1"), (2, "a2")):
        torch.manual_seed(seed)
        base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
        config = LoraConfig(r=4, lora_alpha=16, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
        peft_model = get_peft_model(base, config)
        folder = tmp_path_factory.mktemp(f"adapter-{name}")
        peft_model.save_pretrained(folder)
        folders[name] = folder
    return folders


@pytest.fixture(scope="session")
def tiny_model(tiny_model_dir: Path):
    from collabui.models.local import LocalModel

    return LocalModel(tiny_model_dir, device="cpu")


@pytest.fixture(scope="session")
def tiny_adapter_model(tiny_model_dir: Path, adapter_dirs: dict[str, Path]):
    from collabui.models.local import LocalModel

    return LocalModel(tiny_model_dir, device="cpu", adapters=adapter_dirs)
