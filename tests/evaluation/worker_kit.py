"""Module-level device factories for the worker tests (workers unpickle them by module name)."""

from __future__ import annotations

from collabui.actions.web import Click
from collabui.devices.base import Observation
from collabui.devices.fake import FakeDevice
from collabui.errors import DeviceError

__all__ = ["fake_env", "broken_env", "real_or_broken_env"]


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
