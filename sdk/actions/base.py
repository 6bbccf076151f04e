"""The typed action vocabulary shared by agents, devices, traces and training.

Every action is a frozen pydantic model validated on construction (an invalid one raises
ActionError). The same declaration gives the JSON schema that guided decoding samples from
(:meth:`ActionSpace.json_schema`), so the vocabulary and the schema cannot drift apart.
Devices only translate actions; they never parse model text. ``Action.key()`` is the canonical
form used by the vote: two actions are equal when their type and arguments are equal, with text
compared case- and whitespace-insensitively.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, ConfigDict, ValidationError

from collabui.actions._arguments import problem
from collabui.errors import ActionError

if TYPE_CHECKING:
    from typing_extensions import Self  # typing.Self is 3.11+; we support 3.10

__all__ = ["Action", "Unknown", "ActionSpace", "normalize_text"]

_WS = re.compile(r"\s+")


def normalize_text(value: str) -> str:
    """Casefold and collapse whitespace runs: the vote's notion of "the same text"."""
    return _WS.sub(" ", value).strip().casefold()


def _canon(value: Any) -> Any:
    if isinstance(value, str):
        return normalize_text(value)
    return value


def _schema_of_action(schema: dict[str, Any], cls: type[Any]) -> None:
    """pydantic's hook on every action's JSON schema: the wire form ``{"action": name, **args}``.

    The constant ``action`` name goes first. A None default means "optional": its argument may
    be left out, and is never written as null (absent already means None). Every other argument
    is required, so a guided answer always writes it, which also keeps the vote's comparison of
    actions free of default-vs-explicit noise.
    """
    properties = schema.get("properties", {})
    for name, info in cls.model_fields.items():
        if info.default is None:
            properties[name] = _not_null(properties[name])
    schema["properties"] = {"action": {"type": "string", "const": cls.name}, **properties}
    schema["required"] = ["action", *(n for n, f in cls.model_fields.items() if f.default is not None)]


def _not_null(prop: dict[str, Any]) -> dict[str, Any]:
    branches = [b for b in prop.get("anyOf", ()) if b != {"type": "null"}]
    rest = {k: v for k, v in prop.items() if k not in ("anyOf", "default")}
    return {**branches[0], **rest} if len(branches) == 1 else rest


class Action(BaseModel):
    """Base class of all actions. Subclasses set ``name`` and declare their arguments.

    Arguments may be given by position, in declaration order, or by name::

        >>> from collabui.actions.web import Click
        >>> Click("b")
        Click(element_id='B')
    """

    # strict: a model-written "3" is not an index; collabui.parsing coerces before building.
    model_config = ConfigDict(frozen=True, strict=True, extra="forbid",
                              json_schema_extra=_schema_of_action)

    name: ClassVar[str] = ""
    #: Whether executing the action ends the episode (finish, status, answer).
    terminal: ClassVar[bool] = False
    #: Arguments that only say *how* (typed text, an answer's wording), not *what* the action
    #: acts on; ``target()`` leaves them out.
    wording: ClassVar[tuple[str, ...]] = ()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        try:
            super().__init__(**_by_name(type(self), args, kwargs))
        except ValidationError as exc:
            raise ActionError(problem(type(self), exc)) from None

    def args(self) -> dict[str, Any]:
        """The action's arguments, in declaration order."""
        return {name: getattr(self, name) for name in type(self).model_fields}

    def replace(self, **changes: Any) -> Self:
        """A copy with some arguments changed, validated like a new action."""
        return type(self)(**{**self.args(), **changes})

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

    def target(self) -> tuple[Any, ...]:
        """The key without the wording arguments: ``type_string('E', 'jon')`` and
        ``type_string('E', 'john')`` share a target (the vote's ``target`` rule groups by it)."""
        return (self.name, *(_canon(v) for k, v in self.args().items() if k not in self.wording))

    def __str__(self) -> str:
        return self.to_call()


def _by_name(cls: type[Action], args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """Positional arguments keyed by field name (pydantic models take keywords only)."""
    names = list(cls.model_fields)
    if len(args) > len(names):
        raise ActionError(f"{cls.name}: takes at most {len(names)} argument(s) {names}, got {len(args)}")
    twice = [n for n in names[:len(args)] if n in kwargs]
    if twice:
        raise ActionError(f"{cls.name}: {twice} given both by position and by name; give each once")
    return {**dict(zip(names, args, strict=False)), **kwargs}


class Unknown(Action):
    """A proposal that could not be parsed into the action space. Never wins a vote while any
    proposal parsed; executing it is a no-op that reports ``reason`` in the next observation."""

    name: ClassVar[str] = "unknown"
    raw: str = ""
    reason: str = ""

    def key(self) -> tuple[Any, ...]:
        return ("unknown",)

    def target(self) -> tuple[Any, ...]:
        return ("unknown",)


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
        data = {str(k): v for k, v in data.items()}
        name = data.pop("action", None) or data.pop("action_type", None)
        if not isinstance(name, str) or name.lower() not in self.actions:
            raise ActionError(
                f"unknown {self.name} action {name!r}; expected one of {sorted(self.actions)}"
            )
        return self.actions[name.lower()](**data)

    def json_schema(self) -> dict[str, Any]:
        """The JSON schema of one action of this space: an ``anyOf`` over its action types,
        each its model's ``model_json_schema()``. (``anyOf`` rather than ``oneOf``: the constant
        names make them equivalent, and grammar engines support ``anyOf`` everywhere.)"""
        return {"anyOf": [cls.model_json_schema() for cls in self.actions.values()]}

    def __repr__(self) -> str:
        return f"ActionSpace({self.name!r}, {sorted(self.actions)})"
