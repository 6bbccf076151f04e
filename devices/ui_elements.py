"""The UI element model and its indexed-line rendering, shared by Android and mobile MiniWoB++.

Both mobile devices show the agents the same thing: one line per visible element, numbered by
its position in that screen's list (AndroidWorld's convention; numbers are not stable across
steps). A line is short on purpose (small models pay for every prompt token)::

    3: Button "Submit" (clickable) [120,400][360,480]
    7: EditText "" hint="Email" (clickable, editable, focused) [40,600][1040,720]
    9: Switch "Wi-Fi" (clickable, checked) [900,300][1040,380]
    12: RecyclerView id=settings_list (scrollable) [0,220][1080,2200]

Fields, in order: index; widget type (Android class short name, or an Android-like name for web
elements); the label in double quotes (text, else content description; JSON-escaped); extra
``desc=``/``hint=``/``id=`` only when they add information; the flags that are true (and
``disabled`` when an element is not enabled); the bounds ``[left,top][right,bottom]`` in screen
pixels (CSS pixels for the browser). Password fields never show their text.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict, cast

# What a password field's text (and a masked typed password) becomes: the redaction layer's
# mask, so that a masked field on screen and a masked value in a trace read the same.
from collabui.redaction import PASSWORD_MASK

__all__ = ["UIElement", "Bounds", "ElementRecord", "render_line", "render_elements", "element_record",
           "screen_records", "parse_line", "parse_lines", "MAX_LABEL", "PASSWORD_MASK"]

Bounds = tuple[int, int, int, int]


class ElementRecord(TypedDict):
    """One indexed line as data: what :func:`element_record` keeps and :func:`parse_line` reads back."""

    index: int
    type: str
    label: str
    flags: list[str]
    bounds: tuple[int, ...]  # (left, top, right, bottom); () when the line shows none


#: Longest label shown; longer ones end with an ellipsis.
MAX_LABEL = 80

_FLAGS = ("clickable", "long_clickable", "editable", "scrollable", "checkable", "selected",
          "focused", "password")


@dataclass(frozen=True)
class UIElement:
    """One visible element of a mobile screen.

    Attributes:
        type: short widget type, e.g. ``Button``, ``EditText``, ``TextView``, ``Link``.
        text: visible text ("" when none; never a password).
        content_desc: accessibility description (Android content-desc, web aria-label).
        hint: placeholder / hint text of an empty field.
        resource_id: Android resource id (``com.pkg:id/name``) or the web element's id.
        package: Android package of the element ("" for the web).
        bounds: visible bounds (left, top, right, bottom), already clipped to the screen.
        clickable, long_clickable, editable, scrollable, checkable, checked, enabled, selected,
            focused, password: the element's state flags.
        key: an opaque handle a device uses to find the element again (not rendered).
    """

    type: str
    text: str = ""
    content_desc: str = ""
    hint: str = ""
    resource_id: str = ""
    package: str = ""
    bounds: Bounds = (0, 0, 0, 0)
    clickable: bool = False
    long_clickable: bool = False
    editable: bool = False
    scrollable: bool = False
    checkable: bool = False
    checked: bool = False
    enabled: bool = True
    selected: bool = False
    focused: bool = False
    password: bool = False
    key: str = ""

    @property
    def center(self) -> tuple[int, int]:
        """Centre of the visible bounds, in integer pixels (where taps land)."""
        left, top, right, bottom = self.bounds
        return (left + right) // 2, (top + bottom) // 2

    @property
    def label(self) -> str:
        """The element's name as agents read it: its text, else its content description."""
        if self.password:
            return PASSWORD_MASK if self.text else ""
        return self.text or self.content_desc

    @property
    def interactive(self) -> bool:
        """Whether a gesture on the element does something by itself."""
        return (self.clickable or self.long_clickable or self.editable or self.scrollable
                or self.checkable)

    def identity(self) -> tuple[str, str, str, str, Bounds]:
        """What must match for an element of a new dump to be "the same" element."""
        return (self.type, self.resource_id, self.text, self.content_desc, self.bounds)


def _shown(value: str) -> str:
    """A label as the line shows it: whitespace collapsed, cut at MAX_LABEL."""
    value = " ".join(value.split())
    return value[:MAX_LABEL - 1] + "\u2026" if len(value) > MAX_LABEL else value


def _quote(value: str) -> str:
    return json.dumps(_shown(value), ensure_ascii=False)


def _short_id(resource_id: str) -> str:
    return resource_id.rsplit(":id/", 1)[-1].rsplit("/", 1)[-1]


def render_line(index: int, element: UIElement) -> str:
    """One indexed line (see the module docstring for the format)."""
    parts = [f"{index}: {element.type}"]
    label = element.label
    if label or element.editable:
        parts.append(_quote(label))
    if element.content_desc and element.text and element.content_desc != element.text \
            and not element.password:
        parts.append(f"desc={_quote(element.content_desc)}")
    if element.hint and not element.text and element.hint != label:
        parts.append(f"hint={_quote(element.hint)}")
    if not label and not element.hint and element.resource_id:
        # An icon-only control: its resource id is the only clue to what it does.
        parts.append(f"id={_short_id(element.resource_id)}")
    flags = _flags(element)
    if flags:
        parts.append(f"({', '.join(flags)})")
    left, top, right, bottom = element.bounds
    parts.append(f"[{left},{top}][{right},{bottom}]")
    return " ".join(parts)


def _flags(element: UIElement) -> list[str]:
    flags = [name.replace("_", "-") for name in _FLAGS if getattr(element, name)]
    if element.checkable:
        flags[flags.index("checkable")] = "checked" if element.checked else "unchecked"
    if not element.enabled:
        flags.append("disabled")
    return flags


def element_record(index: int, element: UIElement) -> ElementRecord:
    """What the indexed line of ``element`` says, as a record: ``{"index", "type", "label",
    "flags", "bounds"}``, equal to what :func:`parse_line` reads back from that line. Devices
    keep these in ``Observation.extra["ui_elements"]``, for readers that act on elements."""
    label = _shown(element.label) if element.label or element.editable else ""
    return {"index": index, "type": element.type, "label": label, "flags": _flags(element),
            "bounds": tuple(element.bounds)}


def screen_records(text: str, records: Sequence[Mapping[str, Any]] | None = None) -> list[ElementRecord]:
    """The element records of one phone screen: the device's ``records`` when it kept them
    (``Observation.extra["ui_elements"]``), else read back from its ``text`` (a text stored
    without them, a prompt written by hand)."""
    if records is None:
        return parse_lines(text)
    # Kept records were written by element_record; through JSON (a trace) bounds come back as a list.
    return [cast(ElementRecord, {**r, "bounds": tuple(r.get("bounds") or ())}) for r in records]


def render_elements(elements: Sequence[UIElement], *, empty: str = "(no visible elements)") -> str:
    """Every element as an indexed line, numbered from 0; ``empty`` when there is none."""
    if not elements:
        return empty
    return "\n".join(render_line(i, element) for i, element in enumerate(elements))


def parse_line(line: str) -> ElementRecord:
    """Read one rendered line back (for scripted policies and tests).

    Returns:
        ``{"index", "type", "label", "flags", "bounds"}``; ``label`` is "" when not shown.

    Raises:
        ValueError: the line is not in the indexed-line format.
    """
    head, _, rest = line.partition(": ")
    if not head.isdigit() or not rest:
        raise ValueError(f"not an indexed element line: {line!r}")
    type_, _, rest = rest.partition(" ")
    label = ""
    if rest.startswith('"'):
        decoder = json.JSONDecoder()
        label, end = decoder.raw_decode(rest)
        rest = rest[end:].lstrip()
    flags: list[str] = []
    if "(" in rest:
        start = rest.rindex("(")
        flags = [f.strip() for f in rest[start + 1:rest.index(")", start)].split(",")]
    box = rest[rest.rindex("[", 0, rest.rindex("[")) :] if rest.count("[") >= 2 else ""
    numbers = [int(n) for n in box.replace("][", ",").strip("[]").split(",")] if box else []
    return {"index": int(head), "type": type_, "label": label, "flags": flags,
            "bounds": tuple(numbers)}


def parse_lines(text: str) -> list[ElementRecord]:
    """Every indexed line of an observation text, in order (other lines are skipped)."""
    out = []
    for line in text.splitlines():
        try:
            out.append(parse_line(line))
        except ValueError:
            continue
    return out
