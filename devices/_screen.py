"""Screenshots that never show a secret: the text to hide is replaced in the page for the
moment of the capture, then put back (``js/conceal.js``).

Chromium draws what is typed into a password field as dots, but a value shown as text (a task
that names the password, a page that echoes what it got, a secret typed into a plain field) is
drawn in clear. The episode tells the device what to hide (``Device.hide_on_screen``); every
frame of the page gets the values replaced by ``***`` in its text nodes and its fields' values
and placeholders, the screenshot is taken, and the page is restored in ``finally``. A frame
that cannot be masked (it is navigating) means no screenshot for that observation, never an
unmasked one. The observation text is read before, from the page as it is.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from typing import Any

from collabui.devices import simplify
from collabui.devices.ui_elements import PASSWORD_MASK

__all__ = ["ScreenMask", "capture_hidden"]


@dataclass(frozen=True)
class ScreenMask:
    """What screenshots hide: ``values`` wherever they occur, ``words`` as whole words."""

    values: tuple[str, ...] = ()
    words: tuple[str, ...] = ()

    @classmethod
    def of(cls, values: Collection[str], words: Collection[str] = ()) -> ScreenMask:
        return cls(tuple(sorted({v for v in values if v})), tuple(sorted({w for w in words if w})))

    def __bool__(self) -> bool:
        return bool(self.values or self.words)

    def argument(self) -> dict[str, Any]:
        return {"values": list(self.values), "words": list(self.words), "mask": PASSWORD_MASK}


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
