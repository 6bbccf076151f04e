"""Mobile MiniWoB++: MiniWoB++ tasks in Chromium emulating a phone, through the MOBILE space.

The page runs under Playwright's "Pixel 7" descriptor (412x839 CSS px viewport, touch, device
pixel ratio 2.625, mobile user agent). The observation is the same indexed element list as on a
phone (:mod:`collabui.devices.ui_elements`), built by an in-page DOM walk (``js/elements.js``)
of the task area; bounds are CSS pixels of the viewport. Serving, seeding, episodes and rewards
are MiniWoBEnv's.

Actions: ``click`` taps the element's centre on the touchscreen; ``double_tap`` taps twice;
``long_press`` holds a touch for ``long_press_s``; ``input_text`` taps the element, clears the
focused field and types; ``scroll`` reveals content in ``direction`` (half a screen or half the
element's scroll box), ``swipe`` moves the finger in ``direction`` (so ``swipe up`` scrolls down);
``keyboard_enter`` presses Enter; ``navigate_back`` goes back in history; ``wait`` waits 1 s;
``status``/``answer`` end the episode with MiniWoB's reward. There is no home screen and there
are no apps: ``navigate_home`` and ``open_app`` come back as errors. Text typed into a password
field sets ``info["masked_action"]`` (the action with ``text`` = ``"***"``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from functools import cache
from importlib import resources
from typing import Any

from collabui.actions import MOBILE, Action, Unknown, mobile
from collabui.devices.browser import BrowserConfig
from collabui.devices.miniwob import MiniWoBEnv
from collabui.devices.ui_elements import PASSWORD_MASK, UIElement, element_record, render_elements
from collabui.errors import ConfigError

__all__ = ["MiniWoBMobileEnv", "elements_script", "DEVICE_NAME"]

#: The Playwright device descriptor the page emulates.
DEVICE_NAME = "Pixel 7"
_Result = tuple[str | None, dict[str, Any]]

_FOCUSED_EDITABLE = """() => {
  const a = document.activeElement;
  return !!a && (a.isContentEditable || a.tagName === 'TEXTAREA' ||
    (a.tagName === 'INPUT' && !['checkbox', 'radio', 'button', 'submit', 'reset', 'range',
      'file', 'image'].includes((a.type || '').toLowerCase())));
}"""
_CLEAR_FOCUSED = """() => {
  const a = document.activeElement;
  if (!a) return;
  if ('value' in a) { a.value = ''; a.dispatchEvent(new Event('input', {bubbles: true})); }
  else if (a.isContentEditable) a.textContent = '';
}"""
# Scroll the element's nearest scrollable box (or the page) by half its size; report the change.
_SCROLL = """({idx, dx, dy}) => {
  const start = idx === null ? null : document.querySelector(`[data-collabui-idx="${idx}"]`);
  const canScroll = (el) => {
    const s = getComputedStyle(el);
    const over = (v) => v === 'auto' || v === 'scroll';
    return (dy && over(s.overflowY) && el.scrollHeight > el.clientHeight) ||
      (dx && over(s.overflowX) && el.scrollWidth > el.clientWidth);
  };
  let box = start;
  while (box && box !== document.body && !canScroll(box)) box = box.parentElement;
  const page = !box || box === document.body;
  const target = page ? document.scrollingElement : box;
  const w = page ? window.innerWidth : target.clientWidth;
  const h = page ? window.innerHeight : target.clientHeight;
  const before = [target.scrollLeft, target.scrollTop];
  target.scrollBy(dx * w / 2, dy * h / 2);
  return before[0] !== target.scrollLeft || before[1] !== target.scrollTop;
}"""
_STEP = {"up": (0, -1), "down": (0, 1), "left": (-1, 0), "right": (1, 0)}
_OPPOSITE = {"up": "down", "down": "up", "left": "right", "right": "left"}


@cache
def elements_script() -> str:
    """The element-list DOM walk source (``js/elements.js``)."""
    return resources.files("collabui.devices").joinpath("js", "elements.js").read_text("utf-8")


def _element(item: Mapping[str, Any]) -> UIElement:
    return UIElement(type=item["type"], text=item["text"], content_desc=item["desc"],
                     hint=item["hint"], resource_id=item["id"], bounds=tuple(item["bounds"]),
                     clickable=item["clickable"], editable=item["editable"],
                     scrollable=item["scrollable"], checkable=item["checkable"],
                     checked=item["checked"], enabled=item["enabled"], selected=item["selected"],
                     focused=item["focused"], password=item["password"])


class MiniWoBMobileEnv(MiniWoBEnv):
    """One MiniWoB++ task on an emulated phone (``make_env("miniwob-mobile/click-button")``).

    Args:
        task: task name, with or without the ``miniwob-mobile/`` prefix.
        device: Playwright device descriptor to emulate (default "Pixel 7").
        long_press_s: how long ``long_press`` holds the touch.
        episode_max_time_s, config, overrides: as MiniWoBEnv (the viewport comes from
            ``device``).
    """

    action_space = MOBILE
    env_prefix = "miniwob-mobile"

    def __init__(self, task: str, *, device: str = DEVICE_NAME, long_press_s: float = 0.8,
                 episode_max_time_s: float = 600.0, config: BrowserConfig | None = None,
                 **overrides: Any) -> None:
        if not isinstance(device, str) or not device:
            raise ConfigError(f"device must be a Playwright device name like 'Pixel 7', got {device!r}")
        if isinstance(long_press_s, bool) or not isinstance(long_press_s, int | float) \
                or long_press_s <= 0:
            raise ConfigError(f"long_press_s must be a positive number, got {long_press_s!r}")
        super().__init__(task, episode_max_time_s=episode_max_time_s, config=config, **overrides)
        if self.config.shuffle_elements or self.config.element_format != "html":
            # This env renders its own indexed list: the web-page options would silently do nothing.
            raise ConfigError("element_format and shuffle_elements apply to web pages; "
                              "miniwob-mobile shows an indexed element list")
        self.device_name, self.long_press_s = device, float(long_press_s)
        self._elements: list[UIElement] = []

    def _context_options(self) -> dict[str, Any]:
        try:
            descriptor = dict(self._pw.devices[self.device_name])
        except KeyError:
            raise ConfigError(f"Playwright knows no device {self.device_name!r}; use e.g. "
                              "'Pixel 7' or 'iPhone 13'") from None
        descriptor.pop("default_browser_type", None)
        return descriptor

    def _walk(self) -> tuple[str, dict[str, Any]]:
        return elements_script(), {"skip": list(self.skip_selectors),
                                   "globals": list(self.page_globals),
                                   "maxText": min(self.config.max_text, 200)}

    def _snapshot_text(self, snap: dict[str, Any]) -> str:
        self._elements = [_element(item) for item in snap["elements"]]
        return render_elements(self._elements)

    def _snapshot_extra(self, snap: dict[str, Any]) -> dict[str, Any]:
        # Read from this snapshot: the browser asks for the extra before the text, so
        # self._elements still holds the previous screen's elements here.
        elements = [_element(item) for item in snap["elements"]]
        extra = super()._snapshot_extra(snap)
        extra["password_fields"] = [i for i, e in enumerate(elements) if e.password]
        extra["ui_elements"] = [element_record(i, e) for i, e in enumerate(elements)]
        return extra

    def describe(self) -> Mapping[str, Any]:
        return {"env": f"{self.env_prefix}/{self.task_name}", "device": self.device_name,
                "episode_max_time_s": self.episode_max_time_s}

    # ---- actions (run on the private loop) ----------------------------------------------------

    async def _execute(self, action: Action) -> _Result:
        if isinstance(action, Unknown):
            return f"no action was executed: {action.reason or 'the proposal was not understood'}", {}
        handler = _HANDLERS.get(type(action))
        if handler is None or action not in self.action_space:
            return f"'{action.name}' is not a mobile action; use one of {sorted(MOBILE.actions)}", {}
        return await handler(self, action)

    async def _center(self, index: int) -> tuple[tuple[float, float] | None, str | None]:
        """Where element ``index`` of the last observation is now, or why it cannot be used."""
        locator = self._current_page().locator(f'[data-collabui-idx="{index}"]').first
        box = await locator.bounding_box() if await locator.count() else None
        if box is None:
            if index >= len(self._elements):
                last = f"0 to {len(self._elements) - 1}" if self._elements else "none"
                return None, f"there is no element {index}; this screen lists elements {last}"
            return None, (f"element {index} is gone: the screen changed since it was listed; "
                          "read the new screen")
        x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
        size = self._current_page().viewport_size or {"width": 0, "height": 0}
        if not (0 <= x < size["width"] and 0 <= y < size["height"]):
            return None, f"element {index} is outside the screen; scroll to bring it into view"
        return (x, y), None


async def _tap(env: MiniWoBMobileEnv, action: mobile.Tap) -> _Result:
    point, error = await env._center(action.index)
    if point is None:
        return error, {}
    await env._current_page().touchscreen.tap(*point)
    return None, {}


async def _double_tap(env: MiniWoBMobileEnv, action: mobile.DoubleTap) -> _Result:
    point, error = await env._center(action.index)
    if point is None:
        return error, {}
    page = env._current_page()
    await page.touchscreen.tap(*point)
    await page.touchscreen.tap(*point)
    return None, {}


async def _long_press(env: MiniWoBMobileEnv, action: mobile.LongPress) -> _Result:
    point, error = await env._center(action.index)
    if point is None:
        return error, {}
    page = env._current_page()
    cdp = await page.context.new_cdp_session(page)
    try:
        touch = [{"x": point[0], "y": point[1]}]
        await cdp.send("Input.dispatchTouchEvent", {"type": "touchStart", "touchPoints": touch})
        await asyncio.sleep(env.long_press_s)  # the gesture's own duration, not a settle wait
        await cdp.send("Input.dispatchTouchEvent", {"type": "touchEnd", "touchPoints": []})
    finally:
        await cdp.detach()
    return None, {}


async def _input_text(env: MiniWoBMobileEnv, action: mobile.InputText) -> _Result:
    point, error = await env._center(action.index)
    if point is None:
        return error, {}
    page = env._current_page()
    await page.touchscreen.tap(*point)  # focus, as a finger would
    if not await page.evaluate(_FOCUSED_EDITABLE):
        return (f"element {action.index} is not a text field and tapping it focused none; pick "
                "an EditText"), {}
    listed = env._elements[action.index] if action.index < len(env._elements) else None
    is_password = await page.evaluate("() => (document.activeElement.type || '') === 'password'")
    info = {"masked_action": {**action.to_dict(), "text": PASSWORD_MASK}} \
        if is_password or (listed and listed.password) else {}
    await page.evaluate(_CLEAR_FOCUSED)
    await page.keyboard.type(action.text)
    return None, info


async def _move(env: MiniWoBMobileEnv, direction: str, index: int | None) -> _Result:
    if index is not None:
        point, error = await env._center(index)
        if point is None:
            return error, {}
    dx, dy = _STEP[direction]
    moved = await env._current_page().evaluate(_SCROLL, {"idx": index, "dx": dx, "dy": dy})
    if not moved:
        return f"nothing moved: the content is already at its {direction} edge", {}
    return None, {}


async def _scroll(env: MiniWoBMobileEnv, action: mobile.Scroll) -> _Result:
    return await _move(env, action.direction, action.index)


async def _swipe(env: MiniWoBMobileEnv, action: mobile.Swipe) -> _Result:
    # The finger moves towards `direction`, so the content scrolls the other way.
    return await _move(env, _OPPOSITE[action.direction], action.index)


async def _enter(env: MiniWoBMobileEnv, action: mobile.KeyboardEnter) -> _Result:
    await env._current_page().keyboard.press("Enter")
    return None, {}


async def _back(env: MiniWoBMobileEnv, action: mobile.NavigateBack) -> _Result:
    page = env._current_page()
    before = page.url
    await page.go_back(wait_until="domcontentloaded")
    if page.url == before:
        return "there is no earlier page to go back to", {}
    return None, {}


async def _no_home(env: MiniWoBMobileEnv, action: Action) -> _Result:
    return "there is no home screen in mobile MiniWoB++; act on the task's elements", {}


async def _no_apps(env: MiniWoBMobileEnv, action: Action) -> _Result:
    return "there are no apps in mobile MiniWoB++; act on the task's elements", {}


async def _wait(env: MiniWoBMobileEnv, action: mobile.Wait) -> _Result:
    await env._current_page().wait_for_timeout(1000)
    return None, {}


async def _status(env: MiniWoBMobileEnv, action: mobile.Status) -> _Result:
    return None, {"goal_status": action.goal_status}


async def _answer(env: MiniWoBMobileEnv, action: mobile.Answer) -> _Result:
    return None, {"answer": action.text}


_HANDLERS: dict[type, Callable[[Any, Any], Awaitable[_Result]]] = {
    mobile.Tap: _tap,
    mobile.DoubleTap: _double_tap,
    mobile.LongPress: _long_press,
    mobile.InputText: _input_text,
    mobile.Scroll: _scroll,
    mobile.Swipe: _swipe,
    mobile.KeyboardEnter: _enter,
    mobile.NavigateBack: _back,
    mobile.NavigateHome: _no_home,
    mobile.OpenApp: _no_apps,
    mobile.Wait: _wait,
    mobile.Status: _status,
    mobile.Answer: _answer,
}
