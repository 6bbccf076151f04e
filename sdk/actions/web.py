"""The web action space (paper Table 6), with AutoWebBench's call signatures."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import AfterValidator, BeforeValidator, Field

from collabui.actions._arguments import NonEmptyText, Text
from collabui.actions.base import Action, ActionSpace

__all__ = [
    "Click",
    "Hover",
    "Select",
    "TypeString",
    "ScrollPage",
    "Go",
    "JumpTo",
    "SwitchTab",
    "UserInput",
    "Finish",
    "WEB",
    "ElementAction",
]


def _strip(value: object) -> object:
    return value.strip() if isinstance(value, str) else value


# Ids are written upper-case on the page; " b " from a model means "B". The pattern goes first
# so that it lands in the JSON schema (pydantic drops it when placed after a validator).
ElementId = Annotated[
    str,
    Field(pattern=r"^[A-Za-z0-9_]{1,8}$", description="a short id like 'B' or 'SD'"),
    BeforeValidator(_strip),
    AfterValidator(str.upper),
]


class ElementAction(Action):
    """An action on one element of the simplified page, addressed by its id."""

    element_id: ElementId


class Click(ElementAction):
    """Click at an element."""

    name: ClassVar[str] = "click"


class Hover(ElementAction):
    """Hover on an element."""

    name: ClassVar[str] = "hover"


class Select(ElementAction):
    """Select an option of a drop-down element."""

    name: ClassVar[str] = "select"
    option: NonEmptyText


class TypeString(ElementAction):
    """Type text into an element (replacing its content), optionally pressing Enter."""

    name: ClassVar[str] = "type_string"
    wording: ClassVar[tuple[str, ...]] = ("content", "press_enter")
    content: Text = ""
    press_enter: bool = False


class ScrollPage(Action):
    """Scroll one page up or down."""

    name: ClassVar[str] = "scroll_page"
    direction: Literal["up", "down"] = "down"


class Go(Action):
    """Go backward or forward in the tab's history."""

    name: ClassVar[str] = "go"
    direction: Literal["forward", "backward"] = "backward"


class JumpTo(Action):
    """Navigate to a URL, optionally in a new tab."""

    name: ClassVar[str] = "jump_to"
    url: NonEmptyText
    new_tab: bool = False


class SwitchTab(Action):
    """Switch to the i-th tab (0-based)."""

    name: ClassVar[str] = "switch_tab"
    tab_index: Annotated[int, Field(ge=0, description="an integer >= 0")] = 0


class UserInput(Action):
    """Ask the user to do something (log in, solve a captcha); ends the episode unattended."""

    name: ClassVar[str] = "user_input"
    terminal: ClassVar[bool] = True
    wording: ClassVar[tuple[str, ...]] = ("message",)
    message: Text = ""


class Finish(Action):
    """Stop, optionally with an answer."""

    name: ClassVar[str] = "finish"
    terminal: ClassVar[bool] = True
    wording: ClassVar[tuple[str, ...]] = ("answer",)
    answer: Text | None = None


WEB = ActionSpace(
    "web",
    [Click, Hover, Select, TypeString, ScrollPage, Go, JumpTo, SwitchTab, UserInput, Finish],
    description=(
        '{"action": "click", "element_id": "B"}  click an element\n'
        '{"action": "hover", "element_id": "B"}  hover on an element\n'
        '{"action": "select", "element_id": "B", "option": "Blue"}  pick an option of a drop-down\n'
        '{"action": "type_string", "element_id": "B", "content": "text", "press_enter": false}  type into a field\n'
        '{"action": "scroll_page", "direction": "down"}  scroll one page (up or down)\n'
        '{"action": "go", "direction": "backward"}  browser back or forward\n'
        '{"action": "jump_to", "url": "https://...", "new_tab": false}  open a URL\n'
        '{"action": "switch_tab", "tab_index": 0}  switch to a tab\n'
        '{"action": "user_input", "message": "..."}  ask the user for help\n'
        '{"action": "finish", "answer": "..."}  stop (answer optional)'
    ),
)
