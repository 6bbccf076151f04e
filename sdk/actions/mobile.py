"""The mobile action space (paper Table 5), in AndroidWorld's JSON conventions.

Elements are addressed by ``index``: the position of the element in the current screen's
indexed element list (indices are not stable across steps).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from collabui.actions.base import Action, ActionSpace, _check_choice, _check_str
from collabui.errors import ActionError

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

DIRECTIONS = ("up", "down", "left", "right")


def _check_index(action: str, value: object, *, optional: bool = False) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ActionError(f"{action}: index must be an element number >= 0, got {value!r}")


@dataclass(frozen=True)
class _IndexAction(Action):
    index: int = -1

    def __post_init__(self) -> None:
        _check_index(self.name, self.index)


@dataclass(frozen=True)
class Tap(_IndexAction):
    """Tap once on the element (Table 5: CLICK)."""

    name: ClassVar[str] = "click"


@dataclass(frozen=True)
class DoubleTap(_IndexAction):
    """Quickly tap the element twice."""

    name: ClassVar[str] = "double_tap"


@dataclass(frozen=True)
class LongPress(_IndexAction):
    """Tap and hold on the element."""

    name: ClassVar[str] = "long_press"


@dataclass(frozen=True)
class Scroll(Action):
    """Slide the screen (or the element at ``index``) to reveal content in ``direction``."""

    name: ClassVar[str] = "scroll"
    direction: str = "down"
    index: int | None = None

    def __post_init__(self) -> None:
        _check_choice(self.name, "direction", self.direction, DIRECTIONS)
        _check_index(self.name, self.index, optional=True)


@dataclass(frozen=True)
class Swipe(Action):
    """A quick swipe across the screen (or the element at ``index``) towards ``direction``."""

    name: ClassVar[str] = "swipe"
    direction: str = "up"
    index: int | None = None

    def __post_init__(self) -> None:
        _check_choice(self.name, "direction", self.direction, DIRECTIONS)
        _check_index(self.name, self.index, optional=True)


@dataclass(frozen=True)
class InputText(Action):
    """Type text into the element at ``index`` (focus, clear, type)."""

    name: ClassVar[str] = "input_text"
    text: str = ""
    index: int = -1

    def __post_init__(self) -> None:
        _check_str(self.name, "text", self.text, allow_empty=True)
        _check_index(self.name, self.index)


@dataclass(frozen=True)
class NavigateHome(Action):
    """Return to the home screen."""

    name: ClassVar[str] = "navigate_home"


@dataclass(frozen=True)
class NavigateBack(Action):
    """Go back to the previous screen."""

    name: ClassVar[str] = "navigate_back"


@dataclass(frozen=True)
class KeyboardEnter(Action):
    """Press the Enter key."""

    name: ClassVar[str] = "keyboard_enter"


@dataclass(frozen=True)
class OpenApp(Action):
    """Launch an app by its name."""

    name: ClassVar[str] = "open_app"
    app_name: str = ""

    def __post_init__(self) -> None:
        _check_str(self.name, "app_name", self.app_name)


@dataclass(frozen=True)
class Status(Action):
    """Declare the task complete or infeasible; ends the episode."""

    name: ClassVar[str] = "status"
    terminal: ClassVar[bool] = True
    goal_status: str = "complete"

    def __post_init__(self) -> None:
        _check_choice(self.name, "goal_status", self.goal_status, ("complete", "infeasible"))


@dataclass(frozen=True)
class Wait(Action):
    """Pause briefly for the screen to update."""

    name: ClassVar[str] = "wait"


@dataclass(frozen=True)
class Answer(Action):
    """Give the user a textual answer; ends the episode."""

    name: ClassVar[str] = "answer"
    terminal: ClassVar[bool] = True
    text: str = ""

    def __post_init__(self) -> None:
        _check_str(self.name, "text", self.text, allow_empty=True)


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
