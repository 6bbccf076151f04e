"""Parse a uiautomator2 ``dump_hierarchy()`` XML into the visible on-screen UI elements.

What is listed (one :class:`~collabui.devices.ui_elements.UIElement` each, in document order):

* nodes that have a label (text or content-desc) or do something (clickable, long-clickable,
  editable, scrollable, checkable); pure layout containers are skipped (their children are not);
* only what is on screen: bounds are clipped to the screen, empty results dropped, subtrees
  marked ``visible-to-user="false"`` dropped;
* not the soft keyboard: an input-method window is reported as ``Screen.keyboard`` and whatever
  it covers is clipped away (the agents type with ``input_text``, not by tapping keys);
* not the status and navigation bars (``com.android.systemui``) unless ``show_system_ui`` or the
  system UI is itself in front (notification shade, lock screen).

A clickable container without a label of its own (a settings row, a list item) takes the text of
its non-interactive descendants, which are then not listed again: one line per row instead of a
nameless container plus loose text, and tapping the row is what tapping its text does anyway.

``Screen.texts`` keeps, apart from what is listed, every node of the dump that holds text, with
its own bounds, system bars and keyboard included: what a screenshot of that screen may have to
hide (``devices._android_screen``).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from collabui.devices.ui_elements import Bounds, UIElement
from collabui.errors import DeviceError

__all__ = ["Screen", "NodeText", "parse_hierarchy", "parse_bounds", "SYSTEM_UI", "is_ime_package"]

SYSTEM_UI = "com.android.systemui"
_BOUNDS = re.compile(r"\[(-?\d+),(-?\d+)\]\[(-?\d+),(-?\d+)\]")
_EDIT_CLASSES = ("EditText", "AutoCompleteTextView", "SearchAutoComplete")
_IME_MARKERS = ("inputmethod", "keyboard", "swiftkey", "com.github.uiautomator")
#: Labels absorbed into a container's label, at most (a row rarely needs more).
_MAX_ABSORBED = 4


@dataclass(frozen=True)
class NodeText:
    """The text of one node of a dump, where the node is drawn.

    Attributes:
        text, content_desc, hint: the node's attributes ("" when absent).
        bounds: the node's own bounds in screen pixels, unclipped; None when the dump has none
            or they are malformed.
        password: the node is a password field.
    """

    text: str
    content_desc: str = ""
    bounds: Bounds | None = None
    password: bool = False
    hint: str = ""

    @property
    def holds_password(self) -> bool:
        """A password field with text in it (Android reports an empty field's hint as text)."""
        return self.password and bool(self.text) and self.text != self.hint


@dataclass(frozen=True)
class Screen:
    """One parsed screen.

    Attributes:
        elements: the visible elements, in document order (their index is the list position).
        size: screen (width, height) in pixels.
        keyboard: bounds of the soft keyboard when it is up, else None.
        foreground: the package that owns most of the screen (None if unknown).
        texts: every node of the dump that holds text or is a password field, listed or not
            (see the module docstring); not compared: two dumps are the same screen when they
            list the same elements.
    """

    elements: tuple[UIElement, ...]
    size: tuple[int, int]
    keyboard: Bounds | None = None
    foreground: str | None = None
    packages: tuple[str, ...] = field(default=())
    texts: tuple[NodeText, ...] = field(default=(), repr=False, compare=False)


def parse_bounds(value: str) -> Bounds | None:
    """``"[l,t][r,b]"`` -> ``(l, t, r, b)``; None when the attribute is malformed."""
    match = _BOUNDS.fullmatch(value.strip()) if value else None
    return tuple(int(g) for g in match.groups()) if match else None  # type: ignore[return-value]


def is_ime_package(package: str) -> bool:
    """Whether ``package`` looks like an input method (Gboard, SwiftKey, AdbKeyboard, ...)."""
    package = package.lower()
    return any(marker in package for marker in _IME_MARKERS)


def _flag(node: ET.Element, name: str) -> bool:
    return node.get(name, "false").lower() == "true"


def _clip(bounds: Bounds, area: Bounds) -> Bounds | None:
    left, top = max(bounds[0], area[0]), max(bounds[1], area[1])
    right, bottom = min(bounds[2], area[2]), min(bounds[3], area[3])
    return (left, top, right, bottom) if right > left and bottom > top else None


def _under_keyboard(bounds: Bounds, keyboard: Bounds | None) -> Bounds | None:
    """``bounds`` minus the part the keyboard covers (it spans the screen's width, at the
    bottom), or None when the keyboard hides it all."""
    if keyboard is None or bounds[3] <= keyboard[1] or bounds[1] >= keyboard[3]:
        return bounds
    if bounds[1] >= keyboard[1]:
        return None
    return (bounds[0], bounds[1], bounds[2], keyboard[1])


class _Walker:
    def __init__(self, keyboard: Bounds | None, show_system_ui: bool) -> None:
        self.keyboard, self.show_system_ui = keyboard, show_system_ui
        self.out: list[UIElement | None] = []

    def visit(self, node: ET.Element, path: str, sink: list[str] | None, clip: Bounds) -> None:
        """Visit ``node``; ``sink`` collects labels for a labelless clickable ancestor; ``clip``
        is the area its scrolling ancestors show (a list clips the rows scrolled past its edge)."""
        if node.get("visible-to-user", "true").lower() == "false":
            return
        package = node.get("package", "")
        if is_ime_package(package) or (package == SYSTEM_UI and not self.show_system_ui):
            return
        raw = parse_bounds(node.get("bounds", ""))
        visible = _clip(raw, clip) if raw else None
        visible = _under_keyboard(visible, self.keyboard) if visible else None
        element = _element(node, visible, path) if visible else None
        children = [c for c in node if c.tag == "node"]
        if visible and _flag(node, "scrollable"):
            clip = visible
        if element is None or not (element.interactive or element.label):
            # Layout-only or off screen: children may still be visible (scrolled containers).
            for k, child in enumerate(children):
                self.visit(child, f"{path}.{k}", sink, clip)
            return
        if sink is not None and not element.interactive:
            sink.append(element.label)
            for k, child in enumerate(children):
                self.visit(child, f"{path}.{k}", sink, clip)
            return
        slot = len(self.out)
        self.out.append(element)
        absorbs = (element.clickable or element.long_clickable or element.checkable) and \
            not (element.label or element.scrollable or element.editable)
        own: list[str] | None = [] if absorbs else None
        for k, child in enumerate(children):
            self.visit(child, f"{path}.{k}", own, clip)
        if own:
            labels = list(dict.fromkeys(own))  # keeps order, drops repeats
            text = " | ".join(labels[:_MAX_ABSORBED]) + (" | \u2026" if len(labels) > _MAX_ABSORBED else "")
            self.out[slot] = _with_text(element, text)


def _with_text(element: UIElement, text: str) -> UIElement:
    from dataclasses import replace

    return replace(element, text=text)


def _element(node: ET.Element, bounds: Bounds, path: str) -> UIElement:
    cls = node.get("class", "") or "android.view.View"
    text, hint = node.get("text", ""), node.get("hint", "")
    editable = _flag(node, "editable") or cls.endswith(_EDIT_CLASSES)
    if editable and hint and text == hint:
        text = ""  # Android reports an empty field's hint as its text
    return UIElement(
        type=cls.rsplit(".", 1)[-1].rsplit("$", 1)[-1] or "View",
        text=text, content_desc=node.get("content-desc", ""), hint=hint,
        resource_id=node.get("resource-id", ""), package=node.get("package", ""),
        bounds=bounds, clickable=_flag(node, "clickable"),
        long_clickable=_flag(node, "long-clickable"), editable=editable,
        scrollable=_flag(node, "scrollable"), checkable=_flag(node, "checkable"),
        checked=_flag(node, "checked"), enabled=node.get("enabled", "true").lower() != "false",
        selected=_flag(node, "selected"), focused=_flag(node, "focused"),
        password=_flag(node, "password"), key=path)


def _roots(xml: str) -> list[ET.Element]:
    try:
        root = ET.fromstring(xml.encode("utf-8"))
    except ET.ParseError as exc:
        raise DeviceError(f"the phone returned an unreadable UI hierarchy ({exc}); retry, and "
                          "update uiautomator2 if it keeps happening") from None
    return [c for c in root if c.tag == "node"] if root.tag == "hierarchy" else [root]


def _texts(nodes: Iterable[ET.Element]) -> Iterator[NodeText]:
    """Every node under ``nodes`` with text, a content description or a password flag, in
    document order, skipping what the parser skips as not drawn (``visible-to-user="false"``)
    but not the keyboard or the system bars: they are in a screenshot's pixels."""
    for node in nodes:
        if node.get("visible-to-user", "true").lower() == "false":
            continue
        text, desc, password = node.get("text", ""), node.get("content-desc", ""), _flag(node, "password")
        if text or desc or password:
            yield NodeText(text, desc, parse_bounds(node.get("bounds", "")), password,
                           node.get("hint", ""))
        yield from _texts(c for c in node if c.tag == "node")


def _area(bounds: Bounds | None) -> int:
    return 0 if bounds is None else max(bounds[2] - bounds[0], 0) * max(bounds[3] - bounds[1], 0)


def parse_hierarchy(xml: str, *, screen: tuple[int, int] | None = None,
                    show_system_ui: bool = False) -> Screen:
    """Parse one dump into the visible elements (see the module docstring for the rules).

    Args:
        xml: the text of ``uiautomator2.Device.dump_hierarchy()``.
        screen: (width, height) in pixels; None derives it from the window roots' bounds.
        show_system_ui: also list the status and navigation bars.

    Raises:
        DeviceError: the text is not XML.
    """
    roots = _roots(xml)
    boxes = [parse_bounds(r.get("bounds", "")) for r in roots]
    if screen is None:
        screen = (max((b[2] for b in boxes if b), default=0),
                  max((b[3] for b in boxes if b), default=0))
    width, height = screen
    full: Bounds = (0, 0, width, height)
    keyboard = None
    for root, box in zip(roots, boxes, strict=True):
        if box and is_ime_package(root.get("package", "")) and _clip(box, full):
            keyboard = _clip(box, full)
    apps = [(r.get("package", ""), _area(b)) for r, b in zip(roots, boxes, strict=True)
            if not is_ime_package(r.get("package", ""))]
    # A screen-sized system UI window (notification shade, lock screen) is in front of the app.
    shade = any(p == SYSTEM_UI and a >= 0.8 * width * height for p, a in apps)
    owners = [a for a in apps if a[0] != SYSTEM_UI] or apps
    foreground = SYSTEM_UI if shade else max(owners, key=lambda a: a[1])[0] if owners else None
    walker = _Walker(keyboard, show_system_ui or shade)
    for k, root in enumerate(roots):
        walker.visit(root, str(k), None, full)
    elements = tuple(e for e in walker.out if e is not None)
    packages = tuple(dict.fromkeys(p for p, _ in apps if p))
    return Screen(elements, (width, height), keyboard, foreground or None, packages,
                  tuple(_texts(roots)))
