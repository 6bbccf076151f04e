"""Typed action vocabularies: ``WEB`` (paper Table 6) and ``MOBILE`` (paper Table 5)."""

from __future__ import annotations

from collabui.actions import mobile, web
from collabui.actions.base import Action, ActionSpace, Unknown, normalize_text
from collabui.actions.mobile import MOBILE
from collabui.actions.web import WEB
from collabui.errors import ConfigError

__all__ = ["Action", "ActionSpace", "Unknown", "normalize_text", "WEB", "MOBILE", "web", "mobile",
           "get_action_space"]

_SPACES = {"web": WEB, "mobile": MOBILE}


def get_action_space(name: str | ActionSpace) -> ActionSpace:
    """Look up an action space by name (``web`` or ``mobile``)."""
    if isinstance(name, ActionSpace):
        return name
    try:
        return _SPACES[name]
    except KeyError:
        raise ConfigError(f"unknown action space {name!r}; use 'web' or 'mobile'") from None
