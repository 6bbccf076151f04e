"""Every fault test must leave no Chromium behind, whatever it killed or signalled."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.processes import chromium_descendants


@pytest.fixture(autouse=True)
def _no_chromium_left() -> Iterator[None]:
    yield
    left = chromium_descendants()
    assert not left, f"Chromium processes left behind by this test: {sorted(left)}"
