"""Phone screenshots that never show a secret: opaque boxes over the elements that hold one.

A page's text can be replaced for the moment of a capture (``devices._screen``); a phone's
pixels cannot, so the Android device paints over them after the capture instead. Hidden are
the boxes of every node of the UI hierarchy whose text or content description holds what
``Device.hide_on_screen`` named (``ScreenMask.hides``: the rule the browser applies, values
anywhere and words whole), and of every password field that holds text (Android draws a typed
character in clear for a moment, and a "show password" toggle draws all of it).

The boxes come from the dump the observation was read from (``Screen.texts``): its bounds and
uiautomator2's screenshot are both in the display's pixels, so the boxes cover those pixels.
When an element to hide cannot be placed (no bounds, malformed or empty ones, or an image
smaller than the screen the dump describes) there is no screenshot, never an unmasked one.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

from collabui.devices._screen import ScreenMask
from collabui.devices.hierarchy import NodeText, Screen
from collabui.devices.ui_elements import Bounds
from collabui.errors import ConfigError

__all__ = ["MASK_FILL", "hidden_boxes", "masked_png"]

#: The colour painted over hidden elements: opaque black.
MASK_FILL = (0, 0, 0)


def hidden_boxes(screen: Screen, mask: ScreenMask) -> list[Bounds] | None:
    """The bounds of every node of ``screen`` a screenshot must hide; None when one of them has
    no usable bounds (the caller then returns no screenshot)."""
    boxes: list[Bounds] = []
    for node in screen.texts:
        if not _hidden(node, mask):
            continue
        if node.bounds is None or not _has_area(node.bounds):
            return None  # where its pixels are is unknown: better no screenshot than a leak
        boxes.append(node.bounds)
    return boxes


def _hidden(node: NodeText, mask: ScreenMask) -> bool:
    return node.holds_password or mask.hides(node.text) or mask.hides(node.content_desc)


def _has_area(bounds: Bounds) -> bool:
    left, top, right, bottom = bounds
    return right > left and bottom > top


def masked_png(image: Any, boxes: Sequence[Bounds], screen: tuple[int, int]) -> bytes | None:
    """``image`` (a PIL image, as ``uiautomator2.Device.screenshot()`` returns it) as PNG with
    ``boxes`` painted over; None when the image is smaller than ``screen`` (a scaled capture:
    the boxes would not land on the pixels they must hide)."""
    if boxes:
        width, height = image.size
        if width < screen[0] or height < screen[1]:
            return None
        image = _painted(image, boxes)
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def _painted(image: Any, boxes: Sequence[Bounds]) -> Any:
    try:
        from PIL import ImageDraw
    except ImportError:
        raise ConfigError("Pillow is not installed (hiding text in phone screenshots needs it); "
                          "run `pip install 'collabui-agents[android]'`") from None
    # A palette or greyscale capture would not take the fill as given: paint on RGB(A).
    image = image.copy() if image.mode in ("RGB", "RGBA") else image.convert("RGB")
    draw = ImageDraw.Draw(image)
    for left, top, right, bottom in boxes:
        # Android's right and bottom edges are exclusive, PIL's inclusive.
        draw.rectangle((left, top, right - 1, bottom - 1), fill=MASK_FILL)
    return image
