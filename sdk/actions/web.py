"""The web action space (paper Table 6), with AutoWebBench's call signatures."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

from collabui.actions.base import Action, ActionSpace, _check_choice, _check_str
from collabui.errors import ActionError

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

_ELEMENT_ID = re.compile(r"^[A-Za-z0-9_]{1,8}$")


def _check_element(action: str, value: object) -> str:
    if not isinstance(value, str) or not _ELEMENT_ID.match(value.strip()):
        raise ActionError(
            f"{action}: element_id must be a short id like 'B' or 'SD', got {value!r}"
        )
    return value.strip().upper()


@dataclass(frozen=True)
class ElementAction(Action):
    """An action on one element of the simplified page, addressed by its id."""

    element_id: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "element_id", _check_element(self.name, self.element_id))


@dataclass(frozen=True)
class Click(ElementAction):
    """Click at an element."""

    name: ClassVar[str] = "click"


@dataclass(frozen=True)
class Hover(ElementAction):
    """Hover on an element."""

    name: ClassVar[str] = "hover"


@dataclass(frozen=True)
class Select(ElementAction):
    """Select an option of a drop-down element."""

    name: ClassVar[str] = "select"
    option: str = ""

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_str(self.name, "option", self.option)


@dataclass(frozen=True)
class TypeString(ElementAction):
    """Type text into an element (replacing its content), optionally pressing Enter."""

    name: ClassVar[str] = "type_string"
    content: str = ""
    press_enter: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_str(self.name, "content", self.content, allow_empty=True)
        if not isinstance(self.press_enter, bool):
            raise ActionError(f"type_string: press_enter must be true or false, got {self.press_enter!r}")


@dataclass(frozen=True)
class ScrollPage(Action):
    """Scroll one page up or down."""

    name: ClassVar[str] = "scroll_page"
    direction: str = "down"

    def __post_init__(self) -> None:
        _check_choice(self.name, "direction", self.direction, ("up", "down"))


@dataclass(frozen=True)
class Go(Action):
    """Go backward or forward in the tab's history."""

    name: ClassVar[str] = "go"
    direction: str = "backward"

    def __post_init__(self) -> None:
        _check_choice(self.name, "direction", self.direction, ("forward", "backward"))


@dataclass(frozen=True)
class JumpTo(Action):
    """Navigate to a URL, optionally in a new tab."""

    name: ClassVar[str] = "jump_to"
    url: str = ""
    new_tab: bool = False

    def __post_init__(self) -> None:
        _check_str(self.name, "url", self.url)
        if not isinstance(self.new_tab, bool):
            raise ActionError(f"jump_to: new_tab must be true or false, got {self.new_tab!r}")


@dataclass(frozen=True)
class SwitchTab(Action):
    """Switch to the i-th tab (0-based)."""

    name: ClassVar[str] = "switch_tab"
    tab_index: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.tab_index, bool) or not isinstance(self.tab_index, int) or self.tab_index < 0:
            raise ActionError(f"switch_tab: tab_index must be an integer >= 0, got {self.tab_index!r}")


@dataclass(frozen=True)
class UserInput(Action):
    """Ask the user to do something (log in, solve a captcha); ends the episode unattended."""

    name: ClassVar[str] = "user_input"
    terminal: ClassVar[bool] = True
    message: str = ""

    def __post_init__(self) -> None:
        _check_str(self.name, "message", self.message, allow_empty=True)


@dataclass(frozen=True)
class Finish(Action):
    """Stop, optionally with an answer."""

    name: ClassVar[str] = "finish"
    terminal: ClassVar[bool] = True
    answer: str | None = None

    def __post_init__(self) -> None:
        if self.answer is not None:
            _check_str(self.name, "answer", self.answer, allow_empty=True)


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
