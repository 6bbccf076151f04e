"""Module-level device factories for the worker tests (workers unpickle them by module name)."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from collabui.actions.web import Click
from collabui.devices.base import Observation
from collabui.devices.fake import FakeDevice
from collabui.errors import DeviceError

__all__ = ["fake_env", "broken_env", "real_or_broken_env", "slow_env", "PIDS_ENV"]

#: Folder where ``slow_env`` devices note the pid of the worker running each episode.
PIDS_ENV = "COLLABUI_TEST_WORKER_PIDS"


def fake_env(name: str) -> FakeDevice:
    """One OK/Cancel screen per task; clicking OK (B) succeeds."""
    screen = Observation(text="<button[B]| OK> <button[C]| Cancel>", task=f"Click OK ({name}).")
    return FakeDevice([screen], success_when=lambda action: action == Click("B"))


def broken_env(name: str) -> FakeDevice:
    """A device that cannot be opened (a worker's failure must reach the driver)."""
    raise DeviceError(f"cannot open {name}: no browser in this test")


def real_or_broken_env(name: str):
    """Real MiniWoB++ in Chromium, except that click-test cannot be opened: one worker holds a
    live browser when the other fails."""
    if name.endswith("/click-test"):
        broken_env(name)
    from collabui.devices.registry import make_env

    return make_env(name)


class _Slow(FakeDevice):
    """Each action takes 0.3 s and nothing ever succeeds; every reset notes this process's pid
    in ``$COLLABUI_TEST_WORKER_PIDS/<seed>.pid`` (a test kills that worker mid-episode)."""

    def reset(self, *, seed: int | None = None, options: Mapping[str, Any] | None = None):
        folder = os.environ.get(PIDS_ENV)
        if folder:
            Path(folder, f"{seed}.pid").write_text(str(os.getpid()))
        return super().reset(seed=seed, options=options)

    def act(self, action):
        time.sleep(0.3)
        return super().act(action)


def slow_env(name: str) -> FakeDevice:
    """A slow device that never ends an episode by itself (see ``_Slow``)."""
    return _Slow([Observation(text="<button[B]| OK> <button[C]| Cancel>", task=f"Click OK ({name}).")])
