"""Simplified HTML for language agents (AutoWebBench style) and helpers to read it back.

The DOM walk itself runs in the page (``js/simplify.js``, one ``page.evaluate`` round trip). It
renders nested ``<tag| text>`` nodes; interactive elements carry a short upper-case id
(``<button[B]| Submit>``, ``<input[E]| checkbox; true>``) that is also written on the element
as ``data-collabui-id`` so actions can find it. This module loads that script, formats the
viewport line and offers :func:`parse_elements` for scripted policies and tests.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

__all__ = [
    "ID_ATTRIBUTE",
    "Element",
    "walk_script",
    "listener_script",
    "walk_options",
    "format_viewport",
    "element_selector",
    "parse_elements",
]

#: The attribute the DOM walk writes on every interactive element it lists.
ID_ATTRIBUTE = "data-collabui-id"

_OPEN = re.compile(r"<([a-z0-9-]*)(?:\[([A-Z]+)\])?\| ?|< ")


@cache
def _js(name: str) -> str:
    return resources.files("collabui.devices").joinpath("js", name).read_text(encoding="utf-8")


def walk_script() -> str:
    """The DOM-walk function source, for ``page.evaluate(walk_script(), walk_options(...))``."""
    return _js("simplify.js")


def listener_script() -> str:
    """Init script that marks elements given click listeners (so the walk lists them)."""
    return _js("listeners.js")


def walk_options(
    *, skip: tuple[str, ...] = (), globals_: tuple[str, ...] = (), max_text: int = 300
) -> dict[str, Any]:
    """Arguments of the DOM walk.

    Args:
        skip: CSS selectors of subtrees to leave out (e.g. MiniWoB's instruction banner).
        globals_: names of page globals to return alongside the text (MiniWoB reward state).
        max_text: longest text run kept; longer runs are cut with an ellipsis.
    """
    return {"skip": list(skip), "globals": list(globals_), "maxText": max_text, "maxOptions": 30}


def format_viewport(scroll_y: float, inner_height: float, scroll_height: float) -> str:
    """AutoWebBench's viewport line: pages scrolled / page count, e.g. ``"0 / 1.0"``."""
    height = max(float(inner_height), 1.0)
    scrolled = round(max(float(scroll_y), 0.0) / height, 1)
    pages = max(round(float(scroll_height) / height, 1), 1.0)
    return f"{scrolled:g} / {pages:.1f}"


def element_selector(element_id: str) -> str:
    """CSS selector of the element listed with ``element_id`` in the last observation."""
    return f'[{ID_ATTRIBUTE}="{element_id}"]'


@dataclass(frozen=True)
class Element:
    """One element read back from simplified HTML.

    Attributes:
        tag: lower-case tag name ('' for an anonymous group).
        id: the short id for interactive elements, else None.
        text: the element's own text runs (not its children's), joined by spaces.
        full_text: all text inside the element, children included.
        depth: nesting depth (0 = outermost).
    """

    tag: str
    id: str | None
    text: str
    full_text: str
    depth: int


def parse_elements(text: str) -> list[Element]:
    """Read simplified HTML back into a flat, document-ordered element list.

    Meant for scripted policies and tests. Text that itself contains ``<`` or ``>`` may be
    mis-split; the page text is not escaped (AutoWebBench does not escape either).
    """
    closed: list[tuple[int, Element]] = []
    # Each open frame: [opening order, tag, id, own text runs, all text runs]
    stack: list[list[Any]] = []
    opened = 0
    pos = 0
    while pos < len(text):
        match = _OPEN.match(text, pos)
        if match:
            stack.append([opened, match.group(1) or "", match.group(2), [], []])
            opened += 1
            pos = match.end()
            continue
        if text[pos] == ">" and stack:
            seq, tag, eid, own, everything = stack.pop()
            full = " ".join(" ".join(everything).split())
            closed.append((seq, Element(tag, eid, " ".join(" ".join(own).split()), full,
                                        len(stack))))
            if stack:
                stack[-1][4].append(full)
            pos += 1
            continue
        ends = [i for i in (text.find("<", pos + 1), text.find(">", pos + 1)) if i != -1]
        nxt = min(ends, default=len(text))
        chunk = text[pos:nxt].strip()
        if stack and chunk:
            stack[-1][3].append(chunk)
            stack[-1][4].append(chunk)
        pos = nxt
    # Elements close in post-order; sorting by opening order restores document order.
    return [element for _, element in sorted(closed, key=lambda item: item[0])]
