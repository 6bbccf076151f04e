"""The mobile action space (paper Table 5), in AndroidWorld's JSON conventions.

Elements are addressed by ``index``: the position of the element in the current screen's
indexed element list (indices are not stable across steps).
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal, get_args

from pydantic import Field

from collabui.actions._arguments import NonEmptyText, Text
from collabui.actions.base import Action, ActionSpace

__all__ = [
    "Tap",
    "DoubleTap",
    "LongPress",
    "Scroll",
    "Swipe",
    "InputText",
    "NavigateHome",
    "NavigateBack",
    "KeyboardEnter",
    "OpenApp",
    "Status",
    "Wait",
    "Answer",
    "MOBILE",
    "DIRECTIONS",
]

Direction = Literal["up", "down", "left", "right"]
DIRECTIONS: tuple[str, ...] = get_args(Direction)
Index = Annotated[int, Field(ge=0)]
# On the field rather than in Index: an optional index's description must sit on the field for
# error messages to find it.
_INDEX = "an element number >= 0"


class _IndexAction(Action):
    index: Index = Field(description=_INDEX)


class Tap(_IndexAction):
    """Tap once on the element (Table 5: CLICK)."""

    name: ClassVar[str] = "click"


class DoubleTap(_IndexAction):
    """Quickly tap the element twice."""

    name: ClassVar[str] = "double_tap"


class LongPress(_IndexAction):
    """Tap and hold on the element."""

    name: ClassVar[str] = "long_press"


class Scroll(Action):
    """Slide the screen (or the element at ``index``) to reveal content in ``direction``."""

    name: ClassVar[str] = "scroll"
    direction: Direction = "down"
    index: Index | None = Field(None, description=_INDEX)


class Swipe(Action):
    """A quick swipe across the screen (or the element at ``index``) towards ``direction``."""

    name: ClassVar[str] = "swipe"
    direction: Direction = "up"
    index: Index | None = Field(None, description=_INDEX)


class InputText(Action):
    """Type text into the element at ``index`` (focus, clear, type)."""

    name: ClassVar[str] = "input_text"
    wording: ClassVar[tuple[str, ...]] = ("text",)
    text: Text = ""
    index: Index = Field(description=_INDEX)


class NavigateHome(Action):
    """Return to the home screen."""

    name: ClassVar[str] = "navigate_home"


class NavigateBack(Action):
    """Go back to the previous screen."""

    name: ClassVar[str] = "navigate_back"


class KeyboardEnter(Action):
    """Press the Enter key."""

    name: ClassVar[str] = "keyboard_enter"


class OpenApp(Action):
    """Launch an app by its name."""

    name: ClassVar[str] = "open_app"
    app_name: NonEmptyText


class Status(Action):
    """Declare the task complete or infeasible; ends the episode."""

    name: ClassVar[str] = "status"
    terminal: ClassVar[bool] = True
    goal_status: Literal["complete", "infeasible"] = "complete"


class Wait(Action):
    """Pause briefly for the screen to update."""

    name: ClassVar[str] = "wait"


class Answer(Action):
    """Give the user a textual answer; ends the episode."""

    name: ClassVar[str] = "answer"
    terminal: ClassVar[bool] = True
    wording: ClassVar[tuple[str, ...]] = ("text",)
    text: Text = ""


MOBILE = ActionSpace(
    "mobile",
    [Tap, DoubleTap, LongPress, Scroll, Swipe, InputText, NavigateHome, NavigateBack,
     KeyboardEnter, OpenApp, Status, Wait, Answer],
    description=(
        '{"action": "click", "index": 3}  tap an element\n'
        '{"action": "double_tap", "index": 3}  tap an element twice\n'
        '{"action": "long_press", "index": 3}  tap and hold an element\n'
        '{"action": "input_text", "text": "hello", "index": 3}  type into a field\n'
        '{"action": "scroll", "direction": "down"}  scroll the screen (up, down, left, right; optional index)\n'
        '{"action": "swipe", "direction": "left"}  swipe across the screen (optional index)\n'
        '{"action": "navigate_home"}  go to the home screen\n'
        '{"action": "navigate_back"}  go back\n'
        '{"action": "keyboard_enter"}  press Enter\n'
        '{"action": "open_app", "app_name": "Settings"}  launch an app\n'
        '{"action": "wait"}  wait for the screen to update\n'
        '{"action": "answer", "text": "..."}  answer the user (ends the task)\n'
        '{"action": "status", "goal_status": "complete"}  the task is done (or "infeasible")'
    ),
)
