"""BrowserDevice's page read under a navigation: read again up to 3 times (no browser here)."""

from __future__ import annotations

import asyncio

import pytest
from playwright.async_api import Error as PlaywrightError

from collabui.devices import BrowserDevice
from collabui.errors import DeviceClosedError, DeviceError


class _Page:
    """Fails the first ``failures`` reads with ``message``, then answers."""

    def __init__(self, failures: int, message: str = "Execution context was destroyed") -> None:
        self.failures, self.message, self.reads = failures, message, 0

    async def wait_for_load_state(self, state: str) -> None:
        assert state == "domcontentloaded"

    async def evaluate(self, script: str, options: object) -> dict[str, str] | int:
        if script != "walk":  # the wait for images still loading (js/images.js) that comes first
            return 0
        self.reads += 1
        if self.reads <= self.failures:
            raise PlaywrightError(self.message)
        return {"title": "ok"}


def _device() -> BrowserDevice:
    device = BrowserDevice.__new__(BrowserDevice)  # no Chromium: only the read logic is tested
    device._dead = None
    return device


@pytest.mark.parametrize("failures", [0, 1, 2])
def test_a_navigation_is_read_again(failures: int) -> None:
    page = _Page(failures)
    assert asyncio.run(_device()._snapshot(page, "walk", {})) == {"title": "ok"}
    assert page.reads == failures + 1


def test_three_failed_reads_are_a_device_error() -> None:
    page = _Page(3)
    with pytest.raises(DeviceError, match="could not read the page: Execution context was destroyed"):
        asyncio.run(_device()._snapshot(page, "walk", {}))
    assert page.reads == 3


def test_a_closed_browser_is_not_read_again() -> None:
    page = _Page(3, "Target closed")
    with pytest.raises(DeviceClosedError):
        asyncio.run(_device()._snapshot(page, "walk", {}))
    assert page.reads == 1
