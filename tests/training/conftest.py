"""Training tests train on the shared tiny random Llama (tests/conftest.py)."""

from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def base_dir(tiny_model_dir: Path) -> Path:
    """The base model folder (weights + tokenizer) that training tests fine-tune; never written."""
    return tiny_model_dir
