"""Screenshots that never show a secret: the text to hide is replaced in the page for the
moment of the capture, then put back (``js/conceal.js``).

Chromium draws what is typed into a password field as dots, but a value shown as text (a task
that names the password, a page that echoes what it got, a secret typed into a plain field) is
drawn in clear. The episode tells the device what to hide (``Device.hide_on_screen``); every
frame of the page gets the values replaced by ``***`` in its text nodes (open and closed shadow
roots included) and its fields' values and placeholders, an opaque box over each canvas that was
given such a value to draw (an init script, ``js/screen_hooks.js``, keeps closed roots and the
text canvases draw), the screenshot is taken, and the page is restored in ``finally``. A frame
that cannot be masked (it is navigating) means no screenshot for that observation, never an
unmasked one. The observation text is read before, from the page as it is.

The matching rule has one owner, :class:`ScreenMask`: its ``pattern`` is what ``conceal.js``
replaces in a page and what ``ScreenMask.hides`` looks for in a phone's UI hierarchy text (the
Android device paints over those elements instead, ``devices._android_screen``).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass, field
from typing import Any

from collabui.devices import simplify
from collabui.devices.ui_elements import PASSWORD_MASK

__all__ = ["ScreenMask", "capture_hidden"]


@dataclass(frozen=True)
class ScreenMask:
    """What screenshots hide: ``values`` wherever they occur, ``words`` as whole words."""

    values: tuple[str, ...] = ()
    words: tuple[str, ...] = ()
    #: The rule as one regular expression ("" when there is nothing to hide); see ``_pattern``.
    pattern: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "pattern", _pattern(self.values, self.words))

    @classmethod
    def of(cls, values: Collection[str], words: Collection[str] = ()) -> ScreenMask:
        return cls(tuple(sorted({v for v in values if v})), tuple(sorted({w for w in words if w})))

    def __bool__(self) -> bool:
        return bool(self.values or self.words)

    def hides(self, text: str) -> bool:
        """Whether ``text`` holds something this mask hides (a value anywhere, a whole word)."""
        return bool(self.pattern and text) and re.search(self.pattern, text) is not None

    def argument(self) -> dict[str, Any]:
        """What ``conceal.js`` gets: the same pattern, so the page and the phone hide alike."""
        return {"pattern": self.pattern, "mask": PASSWORD_MASK}


def _pattern(values: Collection[str], words: Collection[str]) -> str:
    """Each value anywhere, each word not inside a longer word (as ``collabui.redaction`` masks
    passwords in text); longest first, so that a value holding another is replaced whole.
    ``re.escape`` only adds escapes JavaScript reads as the character itself, so the same
    source compiles in Python and in the page (``new RegExp(pattern, 'g')``)."""
    anywhere = [re.escape(v) for v in _longest_first(values)]
    whole = [rf"(?<![A-Za-z0-9]){re.escape(w)}(?![A-Za-z0-9])" for w in _longest_first(words)]
    return "|".join(anywhere + whole)


def _longest_first(items: Collection[str]) -> list[str]:
    return sorted((i for i in items if i), key=len, reverse=True)


async def capture_hidden(page: Any, mask: ScreenMask,
                         capture: Callable[[Any], Awaitable[bytes]]) -> bytes | None:
    """``capture(page)`` with ``mask``'s text hidden in every frame of ``page`` meanwhile;
    None when a frame still attached could not be masked."""
    if not mask:
        return await capture(page)
    script, frames = simplify.conceal_script(), list(page.frames)
    try:
        hidden = [await _in_frame(frame, script, mask.argument()) for frame in frames]
        return await capture(page) if all(hidden) else None
    finally:
        for frame in frames:
            await _in_frame(frame, script, None)


async def _in_frame(frame: Any, script: str, argument: dict[str, Any] | None) -> bool:
    """Run the conceal script in one frame: True when it ran or the frame is gone (it is not
    drawn then), False when an attached frame refused (a navigation in flight)."""
    from playwright.async_api import Error as PlaywrightError

    try:
        await frame.evaluate(script, argument)
    except PlaywrightError:
        return frame.is_detached()
    return True
