"""Fixtures for the chat-model tests (the tiny model itself lives in tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_model(tiny_model_dir: Path):
    from collabui.models.local import LocalModel

    return LocalModel(tiny_model_dir, device="cpu")


@pytest.fixture(scope="session")
def tiny_adapter_model(tiny_model_dir: Path, adapter_dirs: dict[str, Path]):
    from collabui.models.local import LocalModel

    return LocalModel(tiny_model_dir, device="cpu", adapters=adapter_dirs)
