"""The guided-decoding answer schema: valid JSON Schema, generated from the action models (so
faithful to their validation), and readable by parse_proposal."""

from __future__ import annotations

import json

import jsonschema
import pytest

from collabui.actions import MOBILE, WEB, ActionSpace
from collabui.errors import ActionError, ConfigError
from collabui.parsing import parse_proposal
from collabui.serving.schema import action_schema, answer_schema

_EXAMPLES = {
    "web": [{"action": "click", "element_id": "B"},
            {"action": "select", "element_id": "SD", "option": "Blue"},
            {"action": "type_string", "element_id": "C", "content": "hi", "press_enter": True},
            {"action": "scroll_page", "direction": "down"}, {"action": "go", "direction": "backward"},
            {"action": "jump_to", "url": "https://x.org", "new_tab": False},
            {"action": "switch_tab", "tab_index": 1}, {"action": "finish"},
            {"action": "finish", "answer": "42"}, {"action": "user_input", "message": "log in"},
            {"action": "hover", "element_id": "A1"}],
    "mobile": [{"action": "click", "index": 3}, {"action": "scroll", "direction": "left"},
               {"action": "scroll", "direction": "up", "index": 2},
               {"action": "input_text", "text": "hello", "index": 0},
               {"action": "status", "goal_status": "infeasible"}, {"action": "navigate_back"},
               {"action": "open_app", "app_name": "Clock"}, {"action": "answer", "text": "5"}],
}


@pytest.mark.parametrize("space", [WEB, MOBILE])
def test_schema_is_valid_and_covers_every_action(space: ActionSpace) -> None:
    schema = answer_schema(space)
    jsonschema.Draft202012Validator.check_schema(schema)
    names = [branch["properties"]["action"]["const"] for branch in schema["properties"]["action"]["anyOf"]]
    assert names == list(space.actions)
    assert list(schema["properties"]) == ["action", "thought"]
    assert list(answer_schema(space, action_first=False)["properties"]) == ["thought", "action"]


@pytest.mark.parametrize("space", ["web", "mobile"])
def test_schema_valid_answers_parse_to_the_same_action(space: str) -> None:
    validator = jsonschema.Draft202012Validator(answer_schema(space))
    for action in _EXAMPLES[space]:
        answer = {"thought": "because", "action": action}
        validator.validate(answer)
        for text in (json.dumps(answer), json.dumps(answer, separators=(",", ":")),
                     json.dumps({"action": action, "thought": "because"})):
            parsed = parse_proposal(text, space)
            assert parsed.error is None, (text, parsed.error)
            assert parsed.action.to_dict() == action and parsed.thought == "because"


def test_an_action_cut_by_the_budget_still_parses_when_action_first() -> None:
    text = '{"action":{"action":"click","element_id":"B"},"thought":"the submit but'
    assert parse_proposal(text, "web").action.to_dict() == {"action": "click", "element_id": "B"}


@pytest.mark.parametrize("bad", [
    {"action": "click"},  # missing element_id
    {"action": "click", "element_id": "B", "x": 1},  # unknown argument
    {"action": "scroll_page", "direction": "left"},  # web pages scroll up/down only
    {"action": "teleport"},
    {"action": "switch_tab", "tab_index": -1},
])
def test_schema_refuses_what_the_actions_refuse(bad: dict) -> None:
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"thought": "", "action": bad}, answer_schema("web"))
    with pytest.raises(ActionError):
        WEB.from_dict(bad)


_ENUM_ARGUMENTS = {
    "web": {("scroll_page", "direction"), ("go", "direction")},
    "mobile": {("scroll", "direction"), ("swipe", "direction"), ("status", "goal_status")},
}


@pytest.mark.parametrize("space", [WEB, MOBILE])
def test_every_enum_in_the_schema_is_what_the_action_accepts(space: ActionSpace) -> None:
    enums = [(branch["properties"]["action"]["const"], name, prop["enum"])
             for branch in action_schema(space)["anyOf"]
             for name, prop in branch["properties"].items() if "enum" in prop]
    assert {(a, f) for a, f, _ in enums} == _ENUM_ARGUMENTS[space.name]
    for action, field, values in enums:
        cls = space.actions[action]
        for value in values:
            assert getattr(cls(**{field: value}), field) == value
        with pytest.raises(ActionError, match=f"{field} must be"):
            cls(**{field: "sideways"})


def test_optional_arguments_are_left_out_never_null() -> None:
    finish = next(b for b in action_schema("web")["anyOf"] if b["properties"]["action"]["const"] == "finish")
    assert finish["required"] == ["action"]
    assert finish["properties"]["answer"]["type"] == "string"
    scroll = next(b for b in action_schema("mobile")["anyOf"] if b["properties"]["action"]["const"] == "scroll")
    assert scroll["required"] == ["action", "direction"]
    assert scroll["properties"]["index"] == {"description": "an element number >= 0", "minimum": 0,
                                             "title": "Index", "type": "integer"}


def test_unknown_space_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="unknown action space"):
        answer_schema("desktop")
