"""Devices the team acts on: browsers, MiniWoB++ tasks (desktop and phone-shaped), Android
phones, scripted fakes.

``Device``, ``Observation`` and ``StepOutcome`` import eagerly; the rest loads on first use so
``import collabui.devices`` stays light (Playwright loads only when a browser starts,
uiautomator2 only when a phone connects).
"""

from __future__ import annotations

import importlib
from typing import Any

from collabui.devices.base import Device, Observation, StepOutcome

__all__ = ["Device", "Observation", "StepOutcome", "BrowserConfig", "BrowserDevice",
           "MiniWoBEnv", "FakeDevice", "check_device", "list_envs", "make_env",
           "parse_elements", "AndroidConfig", "AndroidDevice", "PhoneConnectionError",
           "MiniWoBMobileEnv", "UIElement", "parse_hierarchy", "list_phones", "PhoneInfo"]

_LAZY = {
    "BrowserConfig": "collabui.devices.browser",
    "BrowserDevice": "collabui.devices.browser",
    "MiniWoBEnv": "collabui.devices.miniwob",
    "FakeDevice": "collabui.devices.fake",
    "check_device": "collabui.devices.checks",
    "list_envs": "collabui.devices.registry",
    "make_env": "collabui.devices.registry",
    "parse_elements": "collabui.devices.simplify",
    "AndroidConfig": "collabui.devices.android",
    "AndroidDevice": "collabui.devices.android",
    "PhoneConnectionError": "collabui.devices.android",
    "MiniWoBMobileEnv": "collabui.devices.mobile_miniwob",
    "UIElement": "collabui.devices.ui_elements",
    "parse_hierarchy": "collabui.devices.hierarchy",
    "list_phones": "collabui.devices.phones",
    "PhoneInfo": "collabui.devices.phones",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'collabui.devices' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
