"""The typed action vocabulary shared by agents, devices, traces and training.

Every action is a frozen dataclass validated on construction. Devices only translate actions;
they never parse model text. ``Action.key()`` is the canonical form used by the vote: two
actions are equal when their type and arguments are equal, with text compared case- and
whitespace-insensitively.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from collabui.errors import ActionError

__all__ = ["Action", "Unknown", "ActionSpace", "normalize_text"]

_WS = re.compile(r"\s+")


def normalize_text(value: str) -> str:
    """Casefold and collapse whitespace runs: the vote's notion of "the same text"."""
    return _WS.sub(" ", value).strip().casefold()


def _canon(value: Any) -> Any:
    if isinstance(value, str):
        return normalize_text(value)
    return value


@dataclass(frozen=True)
class Action:
    """Base class of all actions. Subclasses set ``name`` and declare their arguments."""

    name: ClassVar[str] = ""
    #: Whether executing the action ends the episode (finish, status, answer).
    terminal: ClassVar[bool] = False

    def args(self) -> dict[str, Any]:
        """The action's arguments, in declaration order."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def to_dict(self) -> dict[str, Any]:
        """JSON form: ``{"action": name, **args}`` (None-valued arguments omitted)."""
        out: dict[str, Any] = {"action": self.name}
        out.update({k: v for k, v in self.args().items() if v is not None})
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False)

    def to_call(self) -> str:
        """Python-call form, as in AutoWebBench targets: ``click('B')``."""
        parts = [repr(v) for v in self.args().values() if v is not None]
        return f"{self.name}({', '.join(parts)})"

    def key(self) -> tuple[Any, ...]:
        """Canonical, hashable form: equal keys mean the same action for the vote."""
        return (self.name, *(_canon(v) for v in self.args().values()))

    def __str__(self) -> str:
        return self.to_call()


@dataclass(frozen=True)
class Unknown(Action):
    """A proposal that could not be parsed into the action space. Never wins a vote while any
    proposal parsed; executing it is a no-op that reports ``reason`` in the next observation."""

    name: ClassVar[str] = "unknown"
    raw: str = ""
    reason: str = ""

    def key(self) -> tuple[Any, ...]:
        return ("unknown",)


def _check_str(action: str, field: str, value: Any, *, allow_empty: bool = False) -> None:
    if not isinstance(value, str):
        raise ActionError(f"{action}: '{field}' must be a string, got {type(value).__name__}")
    if not allow_empty and not value.strip():
        raise ActionError(f"{action}: '{field}' must not be empty")


def _check_choice(action: str, field: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ActionError(f"{action}: '{field}' must be one of {list(choices)}, got {value!r}")


class ActionSpace:
    """A named set of action classes (``web`` or ``mobile``)."""

    def __init__(self, name: str, actions: list[type[Action]], description: str) -> None:
        self.name = name
        self.actions: dict[str, type[Action]] = {a.name: a for a in actions}
        self.description = description

    def __contains__(self, action: object) -> bool:
        return isinstance(action, Unknown) or (
            isinstance(action, Action) and type(action) is self.actions.get(action.name)
        )

    def from_dict(self, data: Mapping[str, Any]) -> Action:
        """Build an action from ``{"action": name, **args}``; raises ActionError when invalid."""
        data = dict(data)
        name = data.pop("action", None) or data.pop("action_type", None)
        if not isinstance(name, str) or name.lower() not in self.actions:
            raise ActionError(
                f"unknown {self.name} action {name!r}; expected one of {sorted(self.actions)}"
            )
        cls = self.actions[name.lower()]
        known = {f.name for f in dataclasses.fields(cls)}
        unexpected = sorted(set(data) - known)
        if unexpected:
            raise ActionError(f"{cls.name}: unexpected argument(s) {unexpected}")
        try:
            return cls(**data)
        except TypeError as exc:  # missing required arguments
            raise ActionError(f"{cls.name}: {exc}") from None

    def __repr__(self) -> str:
        return f"ActionSpace({self.name!r}, {sorted(self.actions)})"
