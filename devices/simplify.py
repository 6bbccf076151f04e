"""The page as language agents read it: an element tree, rendered as text in one of two formats.

The DOM walk runs in the page (``js/simplify.js``, one ``page.evaluate`` round trip) and returns
the visible page as a tree of nodes ``{"tag", "id", "parts"}`` (see :data:`Node`). Interactive
elements carry a short upper-case id that the walk also writes on the element as
``data-collabui-id`` so actions can find it. This module owns everything after the walk:

* :func:`render_html`: AutoWebBench-style simplified HTML, ``<button[B]| Submit>``;
* :func:`render_text_first`: one line per element or text run, ``button "Submit" [B]``;
* :func:`flat_elements`: the interactive elements as dicts, for synthesis and critics;
* :func:`screen_elements`: every node as an :class:`Element`, for the baselines, the candidate
  ranking and the oracle: from the tree when the observation has one, else read back from the
  text (texts stored without their tree, prompts written by hand: :func:`parse_elements`).
  Other modules read the structure through these functions; none parses the text itself.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

__all__ = [
    "ID_ATTRIBUTE",
    "ELEMENT_FORMATS",
    "TYPED_FIELDS",
    "TOGGLE_FIELDS",
    "check_element_format",
    "Node",
    "Element",
    "walk_script",
    "listener_script",
    "screen_hooks_script",
    "conceal_script",
    "walk_options",
    "format_viewport",
    "element_selector",
    "render",
    "render_html",
    "render_text_first",
    "element_ordinals",
    "is_text_first",
    "reorder",
    "without_state",
    "empty_text_fields",
    "text_field_values",
    "element_line",
    "element_name",
    "observation_format",
    "page_key",
    "flat_elements",
    "FIELD_TAGS",
    "field_label",
    "field_labels",
    "tree_elements",
    "screen_elements",
    "parse_elements",
    "element_lines",
    "parse_tree",
]

#: The attribute the DOM walk writes on every interactive element it lists.
ID_ATTRIBUTE = "data-collabui-id"
#: Observation text formats: ``html`` (``<button[B]| Ok>``), ``text-first`` (``button "Ok" [B]``)
#: ``text-first-ordinal``: text-first, each form field that shares its kind with others on the
#: page also reading its place among them on the screen (``input "" 2nd [X]``, see
#: :func:`element_ordinals`), and ``text-first-typed``: text-first, a text box of a type other
#: than text reading its type where the others read ``input`` (``password "" (Password) [I]``,
#: see :data:`TYPED_FIELDS`).
ELEMENT_FORMATS = ("html", "text-first", "text-first-ordinal", "text-first-typed")
#: ``input`` types ``text-first-typed`` writes as the line's tag, out of the quoted text: in
#: ``text-first`` an empty password field reads ``input "password"``, the place where every other
#: field shows its value, so it reads as holding the word; typed, the field reads ``password ""``
#: until something is typed (``password "****"``).
TYPED_FIELDS = frozenset({"password", "email", "number", "tel", "url", "search"})
#: ``input`` types whose state is on or off (the walk writes ``checkbox; true``), not a typed value.
TOGGLE_FIELDS = frozenset({"checkbox", "radio"})
#: A walk node: ``{"tag": str, "id": str | None, "parts": list[str | Node]}``. ``tag`` is the
#: lower-case tag name ('' for an anonymous group of siblings), ``id`` is set exactly on
#: interactive elements, ``parts`` are text runs and child nodes in document order. Interactive
#: nodes also carry ``dom`` (see :func:`flat_elements`) and ``box`` (``[x, y, width, height]``,
#: CSS pixels relative to the viewport, rounded; the trace viewer outlines the executed element
#: with it). Only ``text-first-ordinal`` reads ``box`` (the screen order of like fields); no
#: rendering reads ``dom``.
Node = dict[str, Any]

_OPEN = re.compile(r"<([a-z0-9-]*)(?:\[([A-Z]+)\])?\| ?|< ")
# An html-format element opening, and a text-first element line (label in JSON quotes).
#: The id a text-first line ends with.
_ID_SUFFIX = re.compile(r" \[[A-Z]+\]$")
_HTML_ELEMENT = re.compile(r"<[a-z0-9-]*\[[A-Z]+\]\| ")
# ``tag "text" [ID]``, a form field with its label between: ``input "" (Username) [C]``.
# ``text-first-ordinal`` adds the field's place among like fields: ``input "" 2nd [D]``.
_TEXT_FIRST_ELEMENT = re.compile(
    r'([a-z0-9-]+) ("(?:[^"\\]|\\.)*")(?: \((.*)\))?(?: (\d+(?:st|nd|rd|th)))? \[([A-Z]+)\]')
#: Longest field label a text-first line repeats (a paragraph before a field can be its label).
FIELD_LABEL_CHARS = 60


@cache
def _js(name: str) -> str:
    return resources.files("collabui.devices").joinpath("js", name).read_text(encoding="utf-8")


def walk_script() -> str:
    """The DOM-walk function source, for ``page.evaluate(walk_script(), walk_options(...))``."""
    return _js("simplify.js")


def images_script() -> str:
    """The function that waits (bounded, ``page.evaluate(images_script(), ms)``) for the images
    that give elements their size, so the walk does not drop an icon still loading."""
    return _js("images.js")


def conceal_script() -> str:
    """The function that hides text for a screenshot and restores it (see ``devices._screen``)."""
    return _js("conceal.js")


def listener_script() -> str:
    """Init script that marks elements given click listeners (so the walk lists them)."""
    return _js("listeners.js")


def screen_hooks_script() -> str:
    """Init script that keeps closed shadow roots and the text canvases draw, for
    ``conceal.js`` (see ``devices._screen``)."""
    return _js("screen_hooks.js")


def walk_options(
    *, skip: tuple[str, ...] = (), globals_: tuple[str, ...] = (), max_text: int = 300,
    shuffle: bool = False, seed: int = 0,
) -> dict[str, Any]:
    """Arguments of the DOM walk.

    Args:
        skip: CSS selectors of subtrees to leave out (e.g. MiniWoB's instruction banner).
        globals_: names of page globals to return alongside the tree (MiniWoB reward state).
        max_text: longest text run kept; longer runs are cut with an ellipsis.
        shuffle: shuffle runs of sibling elements and draw ids at random (see ``simplify.js``).
        seed: the shuffle's seed; only its low 32 bits are used.
    """
    return {"skip": list(skip), "globals": list(globals_), "maxText": max_text, "maxOptions": 30,
            "shuffle": bool(shuffle), "seed": int(seed) & 0xFFFFFFFF}


def format_viewport(scroll_y: float, inner_height: float, scroll_height: float) -> str:
    """AutoWebBench's viewport line: pages scrolled / page count, e.g. ``"0 / 1.0"``."""
    height = max(float(inner_height), 1.0)
    scrolled = round(max(float(scroll_y), 0.0) / height, 1)
    pages = max(round(float(scroll_height) / height, 1), 1.0)
    return f"{scrolled:g} / {pages:.1f}"


def element_selector(element_id: str) -> str:
    """CSS selector of the element listed with ``element_id`` in the last observation."""
    return f'[{ID_ATTRIBUTE}="{element_id}"]'


def check_element_format(element_format: object) -> str:
    """``element_format`` when it is one of :data:`ELEMENT_FORMATS`.

    Raises:
        ConfigError: any other value (a ``ValueError``), naming the formats there are.
    """
    if element_format not in ELEMENT_FORMATS:
        from collabui.errors import ConfigError

        raise ConfigError(f"element_format must be one of {list(ELEMENT_FORMATS)}, got {element_format!r}")
    return str(element_format)


def is_text_first(element_format: str) -> bool:
    """Whether ``element_format`` writes one line per element (``text-first`` and its ordinal
    variant), so element lines, names and history entries read as in ``text-first``."""
    return element_format.startswith("text-first")


def render(tree: Node | None, element_format: str = "html") -> str:
    """``tree`` as text in ``element_format`` (one of :data:`ELEMENT_FORMATS`)."""
    if check_element_format(element_format) == "html":
        return render_html(tree)
    return render_text_first(tree, ordinals=element_format == "text-first-ordinal",
                             typed=element_format == "text-first-typed")


def reorder(tree: Node | None, seed: int) -> Node | None:
    """A copy of ``tree`` whose runs of sibling interactive elements are reordered by ``seed``,
    ids unchanged: the same page, another order. The runs are the ones the walk's own shuffle
    moves (``js/simplify.js``): a label holding only text, and a form field right after text or
    such a label, stay where they are (they read as "field labelled X")."""
    if tree is None:
        return None
    draw = random.Random(seed)

    def copy(node: Node) -> Node:
        parts = [p if isinstance(p, str) else copy(p) for p in node["parts"]]
        start = 0
        for i in range(len(parts) + 1):
            if i < len(parts) and _movable(parts, i):
                continue
            if i - start > 1:
                run = parts[start:i]
                draw.shuffle(run)
                parts[start:i] = run
            start = i + 1
        return {**node, "parts": parts}

    return copy(tree)


def without_state(tree: Node | None, *, toggles_only: bool = False) -> Node | None:
    """A copy of ``tree`` whose form fields no longer show their state: an input keeps only the
    type the walk writes first (``checkbox; true`` -> ``checkbox``, ``password; disabled`` ->
    ``password``), a text input or text area loses its value. What a field holds is then told
    only by the actions taken, as on the many real pages whose custom controls expose no state
    (training renders some pages this way so that the action history gets read). A ``select``
    keeps its text: its options are its names, not only its state. ``toggles_only``: only
    checkboxes and radio buttons lose their state; typed values stay (a form's empty field then
    still says it is left to fill)."""
    if tree is None:
        return None

    def copy(node: Node) -> Node:
        if node["tag"] in ("input", "textarea") and node["id"]:
            written, _ = _field_runs(node)
            if toggles_only and written not in TOGGLE_FIELDS:
                return node
            return {**node, "parts": [written] if written else []}
        return {**node, "parts": [p if isinstance(p, str) else copy(p) for p in node["parts"]]}

    return copy(tree)


def empty_text_fields(tree: Node | None) -> list[str]:
    """Ids of the text fields (text-like inputs, text areas) with nothing typed in them, in
    document order (:func:`text_field_values`' fields whose value is ``""``)."""
    return [element_id for element_id, value in text_field_values(tree).items() if not value]


def text_field_values(tree: Node | None) -> dict[str, str]:
    """``{id: value}`` of the text fields (text-like inputs, text areas) in document order:
    what is typed in each, ``""`` when nothing is. The walk writes a field's text as
    ``[type; ]value[; placeholder: ...][; disabled]``, and a placeholder only while the field is
    empty, so a field is empty when no value follows its type. A password field's value is the
    walk's stars. An empty field named by ``aria-label`` alone reads as holding its label (the
    text cannot tell the two apart)."""
    values = {}
    for node in _interactive(tree):
        if node["tag"] not in ("input", "textarea"):
            continue
        written, runs = _field_runs(node)
        if (written or "text") not in _TEXTBOX_TYPES:
            continue
        empty = not runs or runs[0] in ("", "disabled") or runs[0].startswith("placeholder: ")
        values[node["id"]] = "" if empty else runs[0]
    return values


def _field_runs(node: Node) -> tuple[str | None, list[str]]:
    """A form field's text as the walk wrote it (``checkbox; true``, ``password; ****``,
    ``kim; disabled``): the input type it wrote first (None for a text input, a text area or a
    select) and the ``; ``-separated runs after it."""
    runs = _join(_label_runs(node)).split("; ")
    written = runs.pop(0) if node["tag"] == "input" and runs[0] in _INPUT_TYPES else None
    return written, runs


def _text_label(part: Node | str) -> bool:
    return not isinstance(part, str) and part["tag"] == "label" and not any(_nested_interactive(part))


def _movable(parts: list[Node | str], i: int) -> bool:
    part = parts[i]
    if isinstance(part, str) or not part["id"] or _text_label(part):
        return False
    before = parts[i - 1] if i > 0 else None
    reads_as_text = before is not None and (isinstance(before, str) or not before["id"] or _text_label(before))
    return not (part["tag"] in FIELD_TAGS and reads_as_text)


def render_html(tree: Node | None) -> str:
    """Simplified HTML (AutoWebBench style), exactly as the walk rendered it in the page.

    ``<tag| parts>`` with parts joined by one space, ``<tag[ID]| ...>`` for interactive
    elements, ``< parts >`` for an anonymous group, and ``' >'`` closing a node whose last part
    is a node. Prompts and traces hold this text, so its bytes must not change.
    """
    return "" if tree is None else _html(tree)


def _html(node: Node | str) -> str:
    if isinstance(node, str):
        return node
    parts = node["parts"]
    body = " ".join(_html(p) for p in parts)
    if node["tag"] == "":
        return f"< {body} >"
    head = f"<{node['tag']}" + (f"[{node['id']}]" if node["id"] else "")
    tail = " >" if parts and not isinstance(parts[-1], str) else ">"
    return f"{head}| {body}{tail}"


def render_text_first(tree: Node | None, *, ordinals: bool = False, typed: bool = False) -> str:
    """One line per item in document order, without wrapper tags or groups.

    Shorter than :func:`render_html` by what layout markup costs: a quarter to half the tokens
    on nested pages (MiniWoB++ email-inbox, social-media); about as long on pages that are
    mostly controls (the same tag, text and id per element, and each field repeats its label).

    An interactive element is ``tag "text" [ID]`` (``button "Ok" [B]``, ``input "checkbox;
    true" [D]``), its text being all the text inside it except that of interactive elements
    nested in it, which get lines of their own after it. The text is in JSON double quotes (``"``
    and ``\\`` escaped). A form field's line also carries its label (:func:`field_labels`) before
    the id, ``input "" (Username) [C]``: a field's own text is its state, so every empty field
    would otherwise read ``input ""``, and a model that names the element before its id (the
    ``grounded`` answer) could not tell which one it means. Any other text run is a line of its own.

    ``ordinals=True`` (the ``text-first-ordinal`` format) also writes, before the id, the place of
    a field among the fields of its kind on the screen (:func:`element_ordinals`): ``input "" 2nd
    [X]``. A task may name a field by its place ("the 2nd textbox"), which a page listed in
    shuffled order no longer shows.

    ``typed=True`` (the ``text-first-typed`` format) writes a text box of one of the
    :data:`TYPED_FIELDS` types with its type as the tag and only its value quoted:
    ``password "" (Password) [I]``, not ``input "password" (Password) [I]``.
    """
    if tree is None:
        return ""
    places = element_ordinals(tree) if ordinals else {}
    fmt = "text-first-typed" if typed else "text-first"
    return "\n".join(_text_lines(tree, field_labels(tree_elements(tree)), places, fmt))


def _text_lines(node: Node | str, labels: dict[str, str], places: dict[str, str], fmt: str) -> Iterator[str]:
    if isinstance(node, str):
        yield node
        return
    if not node["id"]:
        for part in node["parts"]:
            yield from _text_lines(part, labels, places, fmt)
        return
    yield _text_first_line(node, labels.get(node["id"], ""), places.get(node["id"], ""), fmt)
    for inner in _nested_interactive(node):
        yield from _text_lines(inner, labels, places, fmt)


def _text_first_line(node: Node, field_label: str, place: str = "", fmt: str = "text-first") -> str:
    line = element_name(node["tag"], _join(_label_runs(node)), fmt)
    if field_label:
        cut = field_label if len(field_label) <= FIELD_LABEL_CHARS else field_label[:FIELD_LABEL_CHARS - 1] + "…"
        line += f" ({cut})"
    if place:
        line += f" {place}"
    return f"{line} [{node['id']}]"


#: ``input`` types that read as a text box (a task's "textbox" or "text field").
_TEXTBOX_TYPES = TYPED_FIELDS | {"text"}
#: ``input`` types the walk writes first in a field's text (``checkbox; true``); text is the default.
_INPUT_TYPES = _TEXTBOX_TYPES | TOGGLE_FIELDS | {"date", "time", "datetime-local", "month", "week",
                                                  "color", "range", "file", "submit", "button", "reset", "image"}


def _field_kind(node: Node) -> str | None:
    """What a person would call a form field, for counting like fields: ``textbox`` (text
    inputs of any text-like type, and text areas), ``checkbox``, ``radio``, ``select``, or the
    input's type; None for an element that is not a form field."""
    if node["tag"] not in FIELD_TAGS:
        return None
    if node["tag"] != "input":
        return "textbox" if node["tag"] == "textarea" else node["tag"]
    kind = _field_runs(node)[0] or "text"
    return "textbox" if kind in _TEXTBOX_TYPES else kind


def _ordinal(k: int) -> str:
    suffix = "th" if 10 <= k % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(k % 10, "th")
    return f"{k}{suffix}"


def element_ordinals(tree: Node | None) -> dict[str, str]:
    """The place (``"1st"``, ``"2nd"``, ...) of each form field among the fields of its kind
    (:func:`_field_kind`), keyed by element id, in reading order on the screen: rows top to
    bottom (a field whose vertical centre is within half the taller one's height of the previous
    field's shares its row), left to right within a row. Only kinds with two or more fields on the page are
    numbered, and only fields with a ``box``: the order comes from the layout, so it is the same
    in every rendering of the page, shuffled or not."""
    groups: dict[str, list[Node]] = {}
    for node in _interactive(tree):
        kind = _field_kind(node)
        if kind is not None and node.get("box"):
            groups.setdefault(kind, []).append(node)
    out: dict[str, str] = {}
    for fields in groups.values():
        if len(fields) > 1:
            for k, node in enumerate(_reading_order(fields), start=1):
                out[node["id"]] = _ordinal(k)
    return out


def _reading_order(nodes: list[Node]) -> list[Node]:
    rows: list[list[Node]] = []
    for node in sorted(nodes, key=lambda n: n["box"][1] + n["box"][3] / 2):
        x, y, _, h = node["box"]
        if rows:
            last = rows[-1][-1]["box"]
            if abs((y + h / 2) - (last[1] + last[3] / 2)) < max(h, last[3]) / 2:
                rows[-1].append(node)
                continue
        rows.append([node])
    return [node for row in rows for node in sorted(row, key=lambda n: n["box"][0])]


def _interactive(node: Node | str | None) -> Iterator[Node]:
    """Every interactive node of ``node``, nested ones included."""
    if node is None or isinstance(node, str):
        return
    if node["id"]:
        yield node
    for part in node["parts"]:
        yield from _interactive(part)


def element_line(tree: Node | None, element_id: str, element_format: str = "text-first", *,
                 with_id: bool = True) -> str | None:
    """How the element listed as ``element_id`` reads on the screen, in one line.

    In ``text-first`` this is the element's own line of :func:`render_text_first` (``button "Ok"
    [B]``); in ``html`` its opening with its own text, nested elements left out (``<button[B]|
    Ok>``). A ``grounded`` answer copies it before the action: the model names what it acts on
    and then only has to copy the id that follows that text. ``with_id=False`` leaves the id (and
    a field's label) out (:func:`element_name`): how the element is named once its id is gone,
    e.g. in the history of a page whose ids are drawn anew for every observation. None when no element has the id.
    """
    node = _find(tree, element_id) if tree is not None else None
    if node is None:
        return None
    check_element_format(element_format)
    text = _join(_label_runs(node))
    if not with_id:
        return element_name(node["tag"], text, element_format)
    if is_text_first(element_format):
        place = element_ordinals(tree).get(element_id, "") if element_format == "text-first-ordinal" else ""
        return _text_first_line(node, field_label(tree, element_id), place, element_format)
    return f"<{node['tag']}[{node['id']}]| {text}>"


def element_name(tag: str, text: str, element_format: str = "text-first") -> str:
    """An element's screen line without its id: ``<button| Ok>`` (html), ``button "Ok"``; in
    ``text-first-typed`` a typed text box by its type, ``password ""`` (:func:`typed_name`)."""
    if element_format == "text-first-typed":
        tag, text = typed_name(tag, text)
    if is_text_first(element_format):
        return f"{tag} {json.dumps(text, ensure_ascii=False)}"
    return f"<{tag}| {text}>"


def typed_name(tag: str, text: str) -> tuple[str, str]:
    """``(tag, text)`` of a field as ``text-first-typed`` writes it: an ``input`` whose text starts
    with one of :data:`TYPED_FIELDS` (the walk writes a non-text type first: ``password; ****``)
    gets that type as its tag and keeps the rest as its text; anything else is unchanged."""
    kind, _, rest = text.partition("; ")
    if tag == "input" and kind in TYPED_FIELDS:
        return kind, rest
    return tag, text


def untyped_name(tag: str, text: str) -> tuple[str, str]:
    """:func:`typed_name` undone: ``("password", "****")`` -> ``("input", "password; ****")``."""
    if tag in TYPED_FIELDS:
        return "input", f"{tag}; {text}" if text else tag
    return tag, text


def page_key(tree: Node | None, text: str = "") -> str:
    """The page's content regardless of element order and ids: what "did anything change?"
    compares when the device shuffles every observation (the page's text-first lines without
    their ids, sorted); ``text`` itself for a page without a tree (a phone). Equal keys: the
    page did not change."""
    if tree is None:
        return text
    return "\n".join(sorted(_ID_SUFFIX.sub("", line) for line in render_text_first(tree).splitlines()))


def observation_format(text: str) -> str:
    """Which of :data:`ELEMENT_FORMATS` an observation text is written in (html unless it has
    text-first element lines and no html element; ``text-first-ordinal`` when a line has a
    place, ``text-first-typed`` when a line's tag is a field type; a page without like or typed
    fields reads the same in all text-first formats)."""
    if _HTML_ELEMENT.search(text) or not _TEXT_FIRST_ELEMENT.search(text):
        return "html"
    lines = list(_TEXT_FIRST_ELEMENT.finditer(text))
    if any(match.group(4) for match in lines):
        return "text-first-ordinal"
    if any(match.group(1) in TYPED_FIELDS for match in lines):
        return "text-first-typed"
    return "text-first"


def _find(node: Node | str, element_id: str) -> Node | None:
    if isinstance(node, str):
        return None
    if node["id"] == element_id:
        return node
    for part in node["parts"]:
        found = _find(part, element_id)
        if found is not None:
            return found
    return None


def _label_runs(node: Node) -> Iterator[str]:
    """Text inside ``node``, not descending into nested interactive elements."""
    for part in node["parts"]:
        if isinstance(part, str):
            yield part
        elif not part["id"]:
            yield from _label_runs(part)


def _nested_interactive(node: Node) -> Iterator[Node]:
    """The outermost interactive elements inside ``node``, in document order."""
    for part in node["parts"]:
        if isinstance(part, str):
            continue
        if part["id"]:
            yield part
        else:
            yield from _nested_interactive(part)


def _join(runs: Iterator[str] | list[str]) -> str:
    return " ".join(" ".join(runs).split())


def flat_elements(tree: Node | None) -> list[dict[str, Any]]:
    """The interactive elements of ``tree`` in the order the observation text lists them.

    Each is ``{"id", "tag", "text", "full_text", "context", "dom"}``: ``text`` its own text runs,
    ``full_text`` all text inside it (nested elements included), as :class:`Element` has them;
    ``context`` the nearest text that names it: the own text of a ``label`` wrapping it, else
    the last text run before it that belongs to a non-interactive node or to a ``label``
    (``""`` if none), never a button's or a field's own text. It tells which field an
    ``<input>`` is (``Username``) and which row an icon belongs to; ``dom`` the element's rank
    in document order before any shuffle (the same element in every rendering of a page; None
    in trees recorded before it existed).
    """
    out: list[dict[str, Any]] = []
    if tree is not None:
        _flatten(tree, out, context=[""], wrapping_label=None)
    return out


#: Tags of form fields: their own text is their state (a value, ``password``, ``checkbox;
#: true``), not a name, so their label is what tells one from another.
FIELD_TAGS = ("input", "textarea", "select")


def field_label(tree: Node | None, element_id: str) -> str:
    """The label of the form field listed as ``element_id`` (:func:`field_labels`' rule), ``""``
    for any other element or an id not in ``tree``."""
    return field_labels(tree_elements(tree)).get(element_id, "")


def field_labels(elements: list[Element]) -> dict[str, str]:
    """Each form field's label, keyed by element id, from a document-ordered element list (the
    tree's, :func:`tree_elements`, or the same list read back from its html text,
    :func:`parse_elements`).

    The label is the own text of a ``label`` wrapping the field, else of a text element beside
    it in its group (``<span| Year:> <input>``, or after it: ``<input> <div| Genre>``; the one
    before wins), else the nearest text before it that is not a control's own text (``""`` if
    none). A field's own text is its state, so the label is what tells one field from another.
    """
    labels: dict[str, str] = {}
    for j, el in enumerate(elements):
        if el.id is None or el.tag not in FIELD_TAGS:
            continue
        labels[el.id] = (_wrapping_label(elements, j) or _beside(elements, j)
                         or _text_before(elements, j))
    return labels


def _wrapping_label(elements: list[Element], j: int) -> str:
    depth = elements[j].depth
    for el in reversed(elements[:j]):
        if el.depth < depth:  # an ancestor
            if el.tag == "label" and el.text:
                return el.text
            depth = el.depth
    return ""


def _beside(elements: list[Element], j: int) -> str:
    # In document order, a neighbour at the field's depth is a sibling with no children.
    for k in (j - 1, j + 1):
        if 0 <= k < len(elements):
            el = elements[k]
            if el.depth == elements[j].depth and _names(el):
                return el.text
    return ""


def _text_before(elements: list[Element], j: int) -> str:
    return next((el.text for el in reversed(elements[:j]) if _names(el)), "")


def _names(el: Element) -> bool:
    """Whether ``el``'s own text can name a field: a text or a label, not a control's text."""
    return bool(el.text) and (el.id is None or el.tag == "label")


def _flatten(node: Node, out: list[dict[str, Any]], context: list[str],
             wrapping_label: str | None) -> None:
    """Append ``node``'s interactive elements to ``out``; ``context[0]`` is the last label-like
    text seen so far in document order (a one-item list, so recursion can update it)."""
    own = _join([p for p in node["parts"] if isinstance(p, str)])
    if node["id"]:
        out.append({"id": node["id"], "tag": node["tag"], "text": own,
                    "full_text": _join(_all_runs(node)),
                    "context": wrapping_label if wrapping_label else context[0],
                    "dom": node.get("dom")})
        if node["tag"] == "label" and own:
            wrapping_label = own
    label_like = not node["id"] or node["tag"] == "label"
    for part in node["parts"]:
        if isinstance(part, str):
            if label_like and part.strip():
                context[0] = _join([part])
        else:
            _flatten(part, out, context, wrapping_label)


def _all_runs(node: Node) -> Iterator[str]:
    for part in node["parts"]:
        if isinstance(part, str):
            yield part
        else:
            yield from _all_runs(part)


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


def tree_elements(tree: Node | None) -> list[Element]:
    """Every node of ``tree`` as an :class:`Element`, in document order: what
    :func:`parse_elements` reads from the tree's html rendering, exactly (a text holding ``<``
    or ``>`` stays whole)."""
    out: list[Element] = []
    if tree is not None:
        _tree_elements(tree, 0, out)
    return out


def _tree_elements(node: Node, depth: int, out: list[Element]) -> None:
    own = _join([p for p in node["parts"] if isinstance(p, str)])
    out.append(Element(node["tag"], node["id"], own, _join(_all_runs(node)), depth))
    for part in node["parts"]:
        if not isinstance(part, str):
            _tree_elements(part, depth + 1, out)


def screen_elements(text: str, tree: Node | None = None) -> list[Element]:
    """The elements of one observation: from the walk's ``tree`` (``Observation.extra["tree"]``)
    when there is one, else read back from its ``text`` (a text stored without its tree, a prompt
    written by hand)."""
    return tree_elements(tree) if tree is not None else parse_elements(text)


def parse_elements(text: str) -> list[Element]:
    """Read an observation text (either format) back into a flat, document-ordered element list.

    Meant for texts stored without their tree; with the tree at hand (``Observation.extra
    ["tree"]``), :func:`flat_elements` is exact. In simplified HTML, text that itself contains
    ``<`` or ``>`` may be mis-split (the page text is not escaped; AutoWebBench does not escape
    either). A text-first screen has no nesting: every line is an element of depth 0, a text
    line one with tag ``''`` and no id, and an element's ``text`` and ``full_text`` are both
    its quoted label (which leaves out the elements nested in it).
    """
    if _HTML_ELEMENT.search(text) is None and any(
            _TEXT_FIRST_ELEMENT.fullmatch(line) for line in text.splitlines()):
        return _parse_text_first(text)
    return _parse_html(text)


def element_lines(text: str) -> dict[str, str]:
    """Each element's own line of a text-first observation text, by id (``{"B": 'button "Ok"
    [B]'}``); empty for simplified HTML, whose elements nest rather than take a line each."""
    if _HTML_ELEMENT.search(text) is not None:
        return {}
    return {match.group(5): line for line, match in _text_first_lines(text) if match}


def _text_first_lines(text: str) -> Iterator[tuple[str, re.Match[str] | None]]:
    """Each non-empty line of a text-first text, with its element match (None: a text line)."""
    for line in filter(None, (raw.strip() for raw in text.splitlines())):
        yield line, _TEXT_FIRST_ELEMENT.fullmatch(line)


def _parse_text_first(text: str) -> list[Element]:
    out = []
    for line, match in _text_first_lines(text):
        try:
            label = json.loads(match.group(2)) if match else None
        except json.JSONDecodeError:  # a text line that only looks like an element
            label = None
        if label is None:
            out.append(Element("", None, line, line, 0))
        else:  # a typed field (text-first-typed) reads back as the input the walk saw
            tag, label = untyped_name(match.group(1), label)
            out.append(Element(tag, match.group(5), label, label, 0))
    return out


def _parse_html(text: str) -> list[Element]:
    out: list[Element] = []
    for root in parse_tree(text):
        _tree_elements(root, 0, out)
    return out


def parse_tree(text: str) -> list[Node]:
    """Read simplified HTML back into its top-level nodes (usually one root), for texts stored
    without their tree; text outside every node is dropped, a node the text cuts off is kept
    with what it holds. See :func:`parse_elements` for what may be mis-split."""
    roots: list[Node] = []
    stack: list[Node] = []
    pos = 0
    while pos < len(text):
        match = _OPEN.match(text, pos)
        if match:
            node: Node = {"tag": match.group(1) or "", "id": match.group(2), "parts": []}
            (stack[-1]["parts"] if stack else roots).append(node)
            stack.append(node)
            pos = match.end()
            continue
        if text[pos] == ">" and stack:
            stack.pop()
            pos += 1
            continue
        ends = [i for i in (text.find("<", pos + 1), text.find(">", pos + 1)) if i != -1]
        nxt = min(ends, default=len(text))
        chunk = text[pos:nxt].strip()
        if stack and chunk:
            stack[-1]["parts"].append(chunk)
        pos = nxt
    return roots
