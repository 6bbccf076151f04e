"""Devices the team acts on: browsers, MiniWoB++ tasks, scripted fakes.

``Device``, ``Observation`` and ``StepOutcome`` import eagerly; the rest loads on first use so
``import collabui.devices`` stays light (Playwright itself loads only when a browser starts).
"""

from __future__ import annotations

import importlib
from typing import Any

from collabui.devices.base import Device, Observation, StepOutcome

__all__ = ["Device", "Observation", "StepOutcome", "BrowserConfig", "BrowserDevice",
           "MiniWoBEnv", "FakeDevice", "check_device", "list_envs", "make_env",
           "parse_elements"]

_LAZY = {
    "BrowserConfig": "collabui.devices.browser",
    "BrowserDevice": "collabui.devices.browser",
    "MiniWoBEnv": "collabui.devices.miniwob",
    "FakeDevice": "collabui.devices.fake",
    "check_device": "collabui.devices.checks",
    "list_envs": "collabui.devices.registry",
    "make_env": "collabui.devices.registry",
    "parse_elements": "collabui.devices.simplify",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'collabui.devices' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
