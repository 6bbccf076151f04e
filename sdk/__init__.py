"""collabui: a team of role-free LLM agents that operates web browsers and phones."""

from __future__ import annotations

__version__ = "0.1.0"
