"""Environment names -> devices.

``make_env("miniwob/click-button")`` builds a MiniWoBEnv; ``make_env("miniwob-mobile/click-button")``
the same task on an emulated phone (MiniWoBMobileEnv, mobile action space);
``make_env("web", url=..., task=...)`` a plain BrowserDevice on any site;
``make_env("android", serial=..., task=...)`` an AndroidDevice on a real phone. Nothing here
imports Playwright or uiautomator2 until a device is built.
"""

from __future__ import annotations

import difflib
from typing import Any

from collabui.devices.base import Device
from collabui.errors import ConfigError, EnvNotFoundError

__all__ = ["list_envs", "make_env", "env_not_found"]


def list_envs() -> list[str]:
    """Every MiniWoB++ environment name (``miniwob/<task>`` and ``miniwob-mobile/<task>``),
    sorted, with collabui's synthetic form pages (``miniwob/synth-forms`` and the like).

    ``web`` and ``android`` are not listed: they need a URL or a phone (see ``make_env``).
    """
    from collabui.devices.miniwob import miniwob_tasks, synthetic_tasks

    tasks = miniwob_tasks()
    return sorted([f"miniwob/{t}" for t in (*tasks, *synthetic_tasks())]
                  + [f"miniwob-mobile/{t}" for t in tasks])


def env_not_found(name: str) -> EnvNotFoundError:
    """The error for an unknown environment name, suggesting close matches."""
    try:
        known = [*list_envs(), "web", "android"]
    except ConfigError:
        known = ["web", "android"]
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
    hint = f"did you mean {', '.join(repr(c) for c in close)}? " if close else ""
    return EnvNotFoundError(f"unknown environment {name!r}; {hint}run `collabui envs` to list them")


def make_env(name: str, **config: Any) -> Device:
    """Build the device named ``name``.

    Args:
        name: ``miniwob/<task>``, ``miniwob-mobile/<task>``, ``web`` or ``android``.
        **config: for browsers, BrowserConfig fields (``headless``, ``viewport``,
            ``screenshots``, ...); for ``web`` also ``url`` (alias of ``start_url``) and
            ``task``; for MiniWoB also ``episode_max_time_s`` (mobile: ``device``,
            ``long_press_s``). For ``android``: ``serial`` (None: $ANDROID_SERIAL or the only
            phone), ``connect`` (factory, for tests) and AndroidConfig fields (``task``,
            ``app_allowlist``, ``screenshots``, ``settle_timeout_s``, ...).

    Raises:
        EnvNotFoundError: unknown name (the message lists close matches).
        ConfigError: invalid options. BrowserNotFoundError: no Chromium.
    """
    if not isinstance(name, str):
        raise EnvNotFoundError(f"environment name must be a string, got {type(name).__name__}; "
                               "run `collabui envs` to list them")
    if name == "web":
        from collabui.devices.browser import BrowserDevice

        if "url" in config:
            if "start_url" in config:
                raise ConfigError("pass either url= or start_url= to make_env('web'), not both")
            config["start_url"] = config.pop("url")
        return BrowserDevice(**config)
    if name == "android":
        from collabui.devices.android import AndroidDevice

        return AndroidDevice(**config)
    if name.startswith("miniwob-mobile/"):
        from collabui.devices.mobile_miniwob import MiniWoBMobileEnv

        return MiniWoBMobileEnv(name, **config)
    if name.startswith("miniwob/"):
        from collabui.devices.miniwob import MiniWoBEnv

        return MiniWoBEnv(name, **config)
    raise env_not_found(name)
