"""Execution of web actions (paper Table 6) on a BrowserDevice's current tab.

Every handler returns ``(error, info)``: ``error`` is one short sentence for
``Observation.last_action_error`` when the action could not be done (a recoverable failure the
agents can react to), ``info`` lands in ``StepOutcome.info``. Handlers never raise for such
failures; a dead browser still raises DeviceClosedError (via ``device._raise_if_dead``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from collabui.actions import Action, Unknown, web
from collabui.devices import simplify
from collabui.devices.ui_elements import PASSWORD_MASK

if TYPE_CHECKING:
    from collabui.devices.browser import BrowserDevice

__all__ = ["execute"]

Result = tuple[str | None, dict[str, Any]]

_PICK_OPTION = """(el, want) => {
  if (el.tagName !== 'SELECT') return {error: 'tag', tag: el.tagName.toLowerCase()};
  const norm = (s) => (s || '').replace(/\\s+/g, ' ').trim();
  const opts = Array.from(el.options);
  let i = opts.findIndex((o) => norm(o.textContent) === norm(want) || o.value === want);
  if (i < 0) {
    const w = norm(want).toLowerCase();
    i = opts.findIndex((o) => norm(o.textContent).toLowerCase() === w || o.value.toLowerCase() === w);
  }
  if (i < 0) return {error: 'option', options: opts.slice(0, 15).map((o) => norm(o.textContent))};
  return {index: i};
}"""

_SCROLL = """(sign) => {
  const before = window.scrollY;
  window.scrollBy(0, sign * window.innerHeight);
  return [before, window.scrollY];
}"""


async def execute(device: BrowserDevice, action: Action) -> Result:
    """Run ``action`` on ``device``'s current tab; see the module docstring for the contract."""
    handler = _HANDLERS.get(type(action))
    if isinstance(action, Unknown):
        return f"no action was executed: {action.reason or 'the proposal was not understood'}", {}
    if handler is None:
        return (f"'{action.name}' is not a web action; use one of "
                f"{sorted(device.action_space.actions)}"), {}
    return await handler(device, action)


async def _element(device: BrowserDevice, element_id: str) -> tuple[Any, str | None]:
    locator = device._current_page().locator(simplify.element_selector(element_id)).first
    if await locator.count() == 0:
        return None, (f"there is no element [{element_id}] on this page; use an id shown in the "
                      "current page text")
    return locator, None


async def _not_enabled(locator: Any, what: str, element_id: str, *, editable: bool = False) -> str | None:
    """The error for an element Playwright would wait on in vain, or None: a disabled element (or,
    for typing, a read-only one) fails at once instead of after the whole action timeout, since
    waiting does not enable it (a login form's fields under a time-out popup). The action would
    fail either way; only the wait is saved, which the verified critic's searches pay per try."""
    from playwright.async_api import Error as PlaywrightError

    try:
        blocked = not await locator.is_editable(timeout=500) if editable else await locator.is_disabled(timeout=500)
    except PlaywrightError:  # not an input for is_editable, or detached: the action itself says why
        return None
    if not blocked:
        return None
    state = "disabled or read-only" if editable else "disabled"
    return f"{what} [{element_id}] failed: the element is {state}; try another element"


async def _guard(device: BrowserDevice, what: str, element_id: str,
                 run: Callable[[], Awaitable[Any]]) -> str | None:
    """Run one Playwright element operation, turning its failure into a short sentence."""
    from playwright.async_api import Error as PlaywrightError
    from playwright.async_api import TimeoutError as PlaywrightTimeout

    try:
        await run()
    except PlaywrightTimeout:
        return (f"{what} [{element_id}] timed out: the element is hidden, covered or disabled; "
                "try another element or scroll")
    except PlaywrightError as exc:
        device._raise_if_dead(exc)
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return f"{what} [{element_id}] failed: {first[:160]}"
    return None


async def _click(device: BrowserDevice, action: web.Click) -> Result:
    locator, error = await _element(device, action.element_id)
    if error:
        return error, {}
    error = await _not_enabled(locator, "clicking", action.element_id)
    return error or await _guard(device, "clicking", action.element_id, locator.click), {}


async def _hover(device: BrowserDevice, action: web.Hover) -> Result:
    locator, error = await _element(device, action.element_id)
    if error:
        return error, {}
    return await _guard(device, "hovering", action.element_id, locator.hover), {}


async def _select(device: BrowserDevice, action: web.Select) -> Result:
    locator, error = await _element(device, action.element_id)
    if error:
        return error, {}
    found = await locator.evaluate(_PICK_OPTION, action.option)
    if found.get("error") == "tag":
        return (f"element [{action.element_id}] (<{found['tag']}>) is not a drop-down "
                "(<select>); use click instead"), {}
    if found.get("error") == "option":
        shown = ", ".join(repr(o) for o in found["options"])
        return f"drop-down [{action.element_id}] has no option {action.option!r}; options: {shown}", {}

    async def pick() -> None:
        await locator.select_option(index=found["index"])

    return await _guard(device, "selecting in", action.element_id, pick), {}


async def _type(device: BrowserDevice, action: web.TypeString) -> Result:
    locator, error = await _element(device, action.element_id)
    if error:
        return error, {}

    async def clear_then_type() -> None:
        from playwright.async_api import Error as PlaywrightError

        # fill("") clears (and refuses non-editable elements with a clear message); typing key
        # by key then fires the keydown/keyup events autocomplete widgets listen to.
        await locator.fill("")
        try:
            await locator.press_sequentially(action.content)
        except PlaywrightError:
            await locator.fill(action.content)  # date/number inputs reject raw keystrokes
        if action.press_enter:
            await locator.press("Enter")

    is_password = await locator.evaluate("(el) => (el.type || '').toLowerCase() === 'password'")
    error = (await _not_enabled(locator, "typing into", action.element_id, editable=True)
             or await _guard(device, "typing into", action.element_id, clear_then_type))
    if error and "not an <input>" in error:
        error = f"element [{action.element_id}] is not a text field; use click or pick an input"
    # Never report what went into a password field: traces record this masked form instead.
    info = {"masked_action": {**action.to_dict(), "content": PASSWORD_MASK}} if is_password else {}
    return error, info


async def _scroll(device: BrowserDevice, action: web.ScrollPage) -> Result:
    sign = 1 if action.direction == "down" else -1
    before, after = await device._current_page().evaluate(_SCROLL, sign)
    if before == after:
        edge = "bottom" if sign > 0 else "top"
        return f"the page is already at the {edge}; scrolling {action.direction} changed nothing", {}
    return None, {}


async def _go(device: BrowserDevice, action: web.Go) -> Result:
    page = device._current_page()
    before = page.url
    if action.direction == "backward":
        response = await page.go_back(wait_until="domcontentloaded")
    else:
        response = await page.go_forward(wait_until="domcontentloaded")
    if action.direction == "backward" and page.url == "about:blank" and before != page.url:
        # Every tab starts on about:blank; going back there is not a page the agents opened.
        await page.go_forward(wait_until="domcontentloaded")
        response = None
    if response is None and page.url == before:
        where = "earlier" if action.direction == "backward" else "later"
        return f"there is no {where} page in this tab's history", {}
    return None, {}


async def _jump(device: BrowserDevice, action: web.JumpTo) -> Result:
    from collabui.devices.browser import _normalize_url

    url = _normalize_url(action.url)
    if device._refused(url):  # before a new tab opens: a refused jump changes nothing
        return None, {}
    if action.new_tab:
        page = await device._context.new_page()
        device._adopt_page(page)
    return await device._goto(url), {}


async def _switch(device: BrowserDevice, action: web.SwitchTab) -> Result:
    pages = device._context.pages
    if action.tab_index >= len(pages):
        return (f"there is no tab {action.tab_index}; open tabs are numbered 0 to "
                f"{len(pages) - 1}"), {}
    device._page = pages[action.tab_index]
    await device._page.bring_to_front()
    return None, {}


async def _user_input(device: BrowserDevice, action: web.UserInput) -> Result:
    return None, {"user_input": action.message}


async def _finish(device: BrowserDevice, action: web.Finish) -> Result:
    return None, {"answer": action.answer}


_HANDLERS: dict[type, Callable[[Any, Any], Awaitable[Result]]] = {
    web.Click: _click,
    web.Hover: _hover,
    web.Select: _select,
    web.TypeString: _type,
    web.ScrollPage: _scroll,
    web.Go: _go,
    web.JumpTo: _jump,
    web.SwitchTab: _switch,
    web.UserInput: _user_input,
    web.Finish: _finish,
}
