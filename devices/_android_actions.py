"""Execution of MOBILE actions on an AndroidDevice (uiautomator2 calls).

Each handler returns None on success or one short sentence for ``last_action_error`` (a
recoverable failure: nothing, or only a focusing tap, was done); ``info`` collects what lands
in ``StepOutcome.info``. Infrastructure failures raise from ``device._u2``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from collabui.actions import mobile

if TYPE_CHECKING:
    from collabui.devices.android import AndroidDevice

__all__ = ["HANDLERS"]

Handler = Callable[[Any, Any, dict[str, Any]], "str | None"]


# The pointing actions differ only in the uiautomator2 method (also the name ``_u2`` reports on
# failure) and its arguments after the point: a table, so a new one is a row, not a handler.
_POINTER_CALLS: dict[type, tuple[str, Callable[[Any], tuple[Any, ...]]]] = {
    mobile.Tap: ("click", lambda config: ()),
    mobile.DoubleTap: ("double_click", lambda config: ()),
    mobile.LongPress: ("long_click", lambda config: (config.long_press_s,)),
}


def _point(device: AndroidDevice, action: Any, info: dict[str, Any]) -> str | None:
    """Tap, double-tap or long-press the centre of ``action.index`` (see ``_POINTER_CALLS``)."""
    element, error = device._target(action.index)
    if element is None:
        return error
    x, y = element.center
    method, extra_args = _POINTER_CALLS[type(action)]
    extra = extra_args(device.config)
    device._u2(method, lambda d: getattr(d, method)(x, y, *extra))
    return None


def _input_text(device: AndroidDevice, action: mobile.InputText, info: dict[str, Any]) -> str | None:
    element, error = device._target(action.index)
    if element is None:
        return error
    x, y = element.center
    device._u2("click", lambda d: d.click(x, y))  # focus, as a finger would
    screen, _ = device._settle()
    field = next((e for e in screen.elements if e.focused and e.editable), None)
    if field is None and not element.editable:
        device._screen = screen
        return (f"element {action.index} ({element.type} {element.label!r}) is not a text field "
                "and tapping it focused none; pick an editable element")
    if (field and field.password) or element.password:
        info["masked_action"] = device.masked(action)
    before = device._u2("current_ime", lambda d: d.current_ime()) if device.config.restore_ime \
        else None
    try:
        device._u2("clear_text", lambda d: d.clear_text())
        device._u2("send_keys", lambda d: d.send_keys(action.text))
    finally:
        if before:
            _restore_ime(device, str(before).strip())
    return None


def _restore_ime(device: AndroidDevice, before: str) -> None:
    # uiautomator2 switches to its AdbKeyboard to type: give the user's keyboard back.
    now = device._u2("current_ime", lambda d: d.current_ime())
    if before and str(now).strip() != before:
        device._u2("ime set", lambda d: d.shell(["ime", "set", before]))


def _region(device: AndroidDevice, index: int | None) -> tuple[tuple[int, int, int, int] | None,
                                                               str | None]:
    if index is None:
        width, height = device._screen.size if device._screen else (0, 0)
        return (0, 0, width, height), None
    element, error = device._target(index)
    return (element.bounds, None) if element else (None, error)


def _gesture(device: AndroidDevice, direction: str, index: int | None, *, content: bool,
             duration: float) -> str | None:
    from collabui.devices.android import gesture_path

    box, error = _region(device, index)
    if box is None:
        return error
    fx, fy, tx, ty = gesture_path(direction, box, content=content)
    if (fx, fy) == (tx, ty):
        return f"element {index} is too small to {'scroll' if content else 'swipe'} in"
    device._u2("swipe", lambda d: d.swipe(fx, fy, tx, ty, duration))
    return None


def _scroll(device: AndroidDevice, action: mobile.Scroll, info: dict[str, Any]) -> str | None:
    return _gesture(device, action.direction, action.index, content=True,
                    duration=device.config.scroll_s)


def _swipe(device: AndroidDevice, action: mobile.Swipe, info: dict[str, Any]) -> str | None:
    return _gesture(device, action.direction, action.index, content=False,
                    duration=device.config.swipe_s)


def _press(key: str) -> Handler:
    def handler(device: AndroidDevice, action: Any, info: dict[str, Any]) -> str | None:
        device._u2(f"press {key}", lambda d: d.press(key))
        return None

    return handler


def _open_app(device: AndroidDevice, action: mobile.OpenApp, info: dict[str, Any]) -> str | None:
    return device._open_app(action.app_name)


def _wait(device: AndroidDevice, action: mobile.Wait, info: dict[str, Any]) -> str | None:
    """Poll until the listed elements change, at most ``wait_s`` (then the usual settle)."""
    listed = device._screen.elements if device._screen else ()
    deadline = time.monotonic() + device.config.wait_s
    while time.monotonic() < deadline:
        if device._dump().elements != listed:
            break
        time.sleep(device.config.settle_poll_s)
    return None


def _status(device: AndroidDevice, action: mobile.Status, info: dict[str, Any]) -> str | None:
    info["goal_status"] = action.goal_status
    return None


def _answer(device: AndroidDevice, action: mobile.Answer, info: dict[str, Any]) -> str | None:
    info["answer"] = action.text
    return None


HANDLERS: dict[type, Handler] = {
    mobile.Tap: _point,
    mobile.DoubleTap: _point,
    mobile.LongPress: _point,
    mobile.InputText: _input_text,
    mobile.Scroll: _scroll,
    mobile.Swipe: _swipe,
    mobile.NavigateHome: _press("home"),
    mobile.NavigateBack: _press("back"),
    mobile.KeyboardEnter: _press("enter"),
    mobile.OpenApp: _open_app,
    mobile.Wait: _wait,
    mobile.Status: _status,
    mobile.Answer: _answer,
}
