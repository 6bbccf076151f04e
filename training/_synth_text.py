"""Template texts for synthesized data: element descriptions and Table 9 knowledge answers.

Template answers are derived from the element alone (tag, field type, text, label, state): they
are correct about what the simplified HTML shows and say nothing the page does not show. They are
a stand-in for a teacher model's richer answers, and are marked ``source="template"`` in the data.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from collabui.devices.simplify import TOGGLE_FIELDS
from collabui.training._synth_page import Node, walk

__all__ = ["UI_QUESTIONS", "ELEMENT_QUESTIONS", "ElementInfo", "describe_elements",
           "ui_answer", "element_answer", "ordinal"]

#: The paper's Table 9, UI understanding (coarse-grained).
UI_QUESTIONS = {
    "ui_purpose": "What is the purpose of the current UI?",
    "ui_aim": "What does the current UI aim to achieve?",
    "ui_summary": "Summarize the current interface in one paragraph.",
}
#: The paper's Table 9, element recognition (fine-grained); ``{x}`` is the element id.
ELEMENT_QUESTIONS = {
    "element_function": "What is the function of UI element {x}?",
    "element_information": "What information does UI element {x} provide?",
    "element_click": "What happens when you click the UI element {x}?",
    "element_action": "What action is associated with UI element {x}?",
}
_ORDINALS = ("first", "second", "third", "fourth", "fifth", "sixth")


def ordinal(k: int) -> str:
    """0 -> 'first', 1 -> 'second', ... (up to 'sixth')."""
    return _ORDINALS[k]


@dataclass(frozen=True)
class ElementInfo:
    """What an interactive element is, read from the simplified HTML.

    ``kind``: button, link, text field, password field, text area, checkbox, radio button,
    drop-down, label or element. ``name``: its visible name (button text, a field's label, a
    checkbox's label), '' when it has none. ``value``: a field's content or state text.
    """

    node: Node
    kind: str
    name: str
    value: str
    checked: bool | None = None
    options: tuple[str, ...] = ()

    @property
    def id(self) -> str:
        return str(self.node.id)

    @property
    def is_text_field(self) -> bool:
        return self.kind in ("text field", "password field", "text area")


def _field(node: Node, label: str) -> ElementInfo:
    text = node.own_text()
    head, _, rest = text.partition(";")
    head, rest = head.strip(), rest.strip()
    if node.tag == "select":
        chosen, _, options = text.partition("; options: ")
        return ElementInfo(node, "drop-down", label, chosen.strip(),
                           options=tuple(o.strip() for o in options.split("|") if o.strip() and o.strip() != "\u2026"))
    if head in TOGGLE_FIELDS:
        kind = "checkbox" if head == "checkbox" else "radio button"
        return ElementInfo(node, kind, label, rest, checked=rest.startswith("true"))
    if node.tag == "textarea" or head == "textarea":
        return ElementInfo(node, "text area", label, rest if head == "textarea" else text)
    if head == "password":
        return ElementInfo(node, "password field", label, rest)
    if head in ("email", "number", "search", "tel", "url", "date", "time"):
        return ElementInfo(node, "text field", label, rest)
    if node.tag == "input" and head in ("submit", "button", "reset"):
        return ElementInfo(node, "button", rest or head, "")
    return ElementInfo(node, "text field", label, text)


def describe_elements(roots: list[Node]) -> list[ElementInfo]:
    """Every element with an id, in pre-order, with its kind and name."""
    parents: dict[int, Node] = {}
    for node in walk(roots):
        for child in node.children:
            parents[id(child)] = node
    out = []
    for node in walk(roots):
        if node.id is None:
            continue
        parent = parents.get(id(node))
        if node.tag in ("input", "textarea", "select"):
            label = ""
            if parent is not None and parent.tag == "label":
                label = parent.own_text()
            elif parent is not None:
                label = next((c.full_text() for c in parent.children if c.tag == "label"), "")
            out.append(_field(node, label))
            continue
        text = node.full_text()
        name = "" if text.startswith((".", "#")) or len(text) > 60 else text
        kind = {"button": "button", "a": "link", "label": "label"}.get(node.tag, "element")
        out.append(ElementInfo(node, kind, name, text))
    return out


def _quote(text: str) -> str:
    return f"'{text}'"


def _inventory(infos: list[ElementInfo]) -> str:
    parts = []
    for e in infos:
        named = f" {_quote(e.name)}" if e.name else ""
        parts.append(f"{e.kind}{named} (id {e.id})")
    return ", ".join(parts) if parts else "no interactive elements"


def ui_answer(key: str, task: str, infos: list[ElementInfo], page_text: str) -> str:
    """Template answer to a UI understanding question."""
    listing = _inventory(infos)
    if key == "ui_purpose":
        return (f"This page is a small web task. Its instruction reads: {task} "
                f"It offers {len(infos)} interactive elements: {listing}.")
    if key == "ui_aim":
        return (f"It aims to have the user complete this instruction: {task} "
                f"The user does so by acting on its elements: {listing}.")
    text = " ".join(page_text.split())
    return (f"The interface is a web page whose task is: {task} It shows {len(infos)} "
            f"interactive elements ({listing}). Its visible text reads: {text[:160]}"
            f"{'...' if len(text) > 160 else ''}")


def _function(e: ElementInfo) -> str:
    named = f" labelled {_quote(e.name)}" if e.name else ""
    return {
        "button": f"Element {e.id} is a button{named}; it triggers the action its label names.",
        "link": f"Element {e.id} is a link{named}; it leads to or triggers what its text names.",
        "text field": f"Element {e.id} is a text field{named}; the user types text into it.",
        "password field": f"Element {e.id} is a password field{named}; the user types a password into it (the text is hidden).",
        "text area": f"Element {e.id} is a multi-line text area{named}; the user types text into it.",
        "checkbox": f"Element {e.id} is a checkbox{named}; it turns that choice on or off.",
        "radio button": f"Element {e.id} is a radio button{named}; it picks that option among its group.",
        "drop-down": f"Element {e.id} is a drop-down list{named}; it chooses one option among: {', '.join(e.options) or 'its options'}.",
        "label": f"Element {e.id} is a label reading {_quote(e.value)}; it names the field next to it.",
    }.get(e.kind, f"Element {e.id} is a clickable {e.node.tag or 'element'}"
                  + (f" showing {_quote(e.value)}" if e.value else "") + "; it reacts to a click.")


def _information(e: ElementInfo) -> str:
    if e.is_text_field:
        state = f"the text {_quote(e.value)}" if e.value and e.kind != "password field" else (
            "a hidden password" if e.value else "nothing yet (it is empty)")
        return f"Element {e.id} shows the content of the {e.kind}{' for ' + _quote(e.name) if e.name else ''}: {state}."
    if e.checked is not None:
        return (f"Element {e.id} shows whether {_quote(e.name or 'its option')} is selected: "
                f"it is {'selected' if e.checked else 'not selected'}.")
    if e.kind == "drop-down":
        return f"Element {e.id} shows the selected option {_quote(e.value)}; the options are {', '.join(e.options)}."
    if e.value:
        return f"Element {e.id} shows the text {_quote(e.value)}."
    return f"Element {e.id} shows no text of its own."


def _click(e: ElementInfo) -> str:
    if e.is_text_field:
        return f"Clicking element {e.id} focuses the {e.kind}, so typed text goes into it."
    if e.kind == "checkbox":
        return f"Clicking element {e.id} {'unchecks' if e.checked else 'checks'} the checkbox {_quote(e.name)}."
    if e.kind == "radio button":
        return f"Clicking element {e.id} selects the option {_quote(e.name)}."
    if e.kind == "drop-down":
        return f"Clicking element {e.id} opens its list of options; use select to pick one."
    if e.kind == "label":
        return f"Clicking element {e.id} focuses or toggles the field it labels."
    what = _quote(e.name) if e.name else "it"
    return f"Clicking element {e.id} activates {what}; the page reacts as that element is meant to."


def _action(e: ElementInfo) -> str:
    if e.is_text_field:
        act = {"action": "type_string", "element_id": e.id, "content": "<text>", "press_enter": False}
        return (f"Element {e.id} takes typed text: {json.dumps(act)} "
                "(replace <text> with what to enter).")
    if e.kind == "drop-down":
        option = e.options[0] if e.options else "<option>"
        act = {"action": "select", "element_id": e.id, "option": option}
        return f"Element {e.id} takes a choice of option: {json.dumps(act)}."
    return f"Element {e.id} is clicked: {json.dumps({'action': 'click', 'element_id': e.id})}."


def element_answer(key: str, e: ElementInfo) -> str:
    """Template answer to an element recognition question about ``e``."""
    return {"element_function": _function, "element_information": _information,
            "element_click": _click, "element_action": _action}[key](e)
