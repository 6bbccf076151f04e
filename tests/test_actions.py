"""The action models: validated on construction (ActionError, one line naming the argument and
what it must be), positional or keyword arguments, frozen and hashable, replace() revalidates."""

from __future__ import annotations

import pytest

from collabui.actions import MOBILE, WEB, Unknown, mobile, web
from collabui.errors import ActionError


def test_positional_and_keyword_arguments_build_the_same_action() -> None:
    assert web.TypeString("e", "hi", True) == web.TypeString(element_id=" E ", content="hi", press_enter=True)
    assert mobile.InputText("hi", 0) == mobile.InputText(text="hi", index=0)
    assert web.Click("b").element_id == "B"  # ids are stripped and upper-cased
    assert web.ScrollPage().direction == "down" and web.Finish().answer is None


@pytest.mark.parametrize(("build", "message"), [
    (lambda: mobile.Tap("B"), "click: index must be an element number >= 0, got 'B'"),
    (lambda: mobile.Tap(True), "click: index must be an element number >= 0, got True"),
    (lambda: mobile.Tap(), "click: missing required argument 'index'"),
    (lambda: mobile.Scroll("sideways"), "scroll: direction must be 'up', 'down', 'left' or 'right'"),
    (lambda: web.Click("x y"), "click: element_id must be a short id like 'B' or 'SD', got 'x y'"),
    (lambda: web.SwitchTab("1"), "switch_tab: tab_index must be an integer >= 0, got '1'"),
    (lambda: web.JumpTo("  "), "jump_to: url must be a non-empty string, got '  '"),
    (lambda: web.TypeString("B", "x", "yes"), "type_string: press_enter must be true or false"),
    (lambda: web.Finish(3), "finish: answer must be a string, got 3"),
    (lambda: web.Click("B", "C"), "click: takes at most 1 argument(s)"),
    (lambda: web.Click("B", element_id="C"), "given both by position and by name"),
    (lambda: WEB.from_dict({"action": "click", "element_id": "B", "x": 1}),
     "click: unexpected argument(s) ['x']; it takes ['element_id']"),
    (lambda: WEB.from_dict({"action": "teleport"}), "unknown web action 'teleport'"),
    (lambda: MOBILE.from_dict({"action": "status", "goal_status": "done"}),
     "status: goal_status must be 'complete' or 'infeasible', got 'done'"),
])
def test_invalid_arguments_raise_one_line_action_errors(build, message: str) -> None:
    with pytest.raises(ActionError) as info:
        build()
    assert message in str(info.value) and "\n" not in str(info.value)


def test_actions_are_frozen_hashable_values() -> None:
    click = web.Click("B")
    assert {click, web.Click("b")} == {click}
    assert click != mobile.Tap(0) and Unknown(raw="x") != Unknown(raw="y")
    with pytest.raises(Exception, match="frozen"):
        click.element_id = "C"  # type: ignore[misc]


def test_replace_validates_like_a_new_action() -> None:
    assert web.TypeString("E", "a").replace(content="b") == web.TypeString("E", "b")
    with pytest.raises(ActionError, match="element_id must be"):
        web.Click("B").replace(element_id="!!")


def test_wire_forms_round_trip() -> None:
    for action in (web.Select("K", "Blue"), web.Finish(), mobile.Scroll("up", 2), mobile.Status()):
        space = WEB if action in WEB else MOBILE
        assert space.from_dict(action.to_dict()) == action
    assert web.TypeString("E", "x").to_call() == "type_string('E', 'x', False)"
    assert mobile.Scroll("up").to_json() == '{"action": "scroll", "direction": "up"}'
