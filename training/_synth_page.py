"""Simplified-HTML trees for data synthesis: parse, shuffle, add distractors, relabel, render.

The DOM walk (``devices/js/simplify.js``) renders nested ``<tag[ID]| parts>`` nodes and gives
interactive elements ids in pre-order (A, B, ..., Z, AA, ...). :func:`page_roots` takes the
walk's tree (or a text without one, read back by ``collabui.devices.simplify``) as :class:`Node`
trees and :func:`render` writes them back byte for byte (same spacing rules as the walk), so a
synthesized observation looks exactly like one the agents read at runtime.

:func:`make_variant` is what stops position from paying: it shuffles sibling elements (except a
label + field pair, whose order carries the "field labelled X" meaning), inserts a few distractor
elements and then relabels every id in pre-order, as the walk would have. Each real node keeps
its page id in ``Node.page_id``, so an action on the variant maps back to the real page.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from collabui.devices import simplify

__all__ = ["Node", "parse_tree", "from_tree", "page_roots", "render", "walk", "make_variant", "id_for"]

_DISTRACTOR_WORDS = (
    "Cancel", "Next", "Back", "Help", "More", "Close", "Save", "Apply", "Reset", "Search", "Menu",
    "Home", "Edit", "Open", "Share", "Done", "Skip", "Retry", "Details", "Settings", "Continue",
    "Delete", "Previous", "Confirm", "Refresh", "Archive", "Upload", "Profile", "Options", "Exit",
)


@dataclass
class Node:
    """One simplified-HTML node. ``parts`` are text runs and child nodes in order.

    ``page_id`` is the id the element has on the real page (None for distractors and
    non-interactive nodes); ``id`` is the id shown in the (possibly relabelled) text.
    """

    tag: str
    id: str | None
    parts: list[Node | str] = field(default_factory=list)
    page_id: str | None = None
    distractor: bool = False

    @property
    def children(self) -> list[Node]:
        return [p for p in self.parts if isinstance(p, Node)]

    def own_text(self) -> str:
        return " ".join(" ".join(p for p in self.parts if isinstance(p, str)).split())

    def full_text(self) -> str:
        runs = [p if isinstance(p, str) else p.full_text() for p in self.parts]
        return " ".join(" ".join(runs).split())


def id_for(index: int) -> str:
    """The walk's id scheme: 0 -> A, 25 -> Z, 26 -> AA, ..."""
    out = ""
    i = index
    while True:
        out = chr(65 + i % 26) + out
        i = i // 26 - 1
        if i < 0:
            return out


def parse_tree(text: str) -> list[Node]:
    """Read simplified HTML into its top-level nodes (usually one root)."""
    return [from_tree(root) for root in simplify.parse_tree(text)]


def from_tree(tree: simplify.Node) -> Node:
    """A walk tree (``Observation.extra["tree"]``) as synthesis nodes."""
    parts: list[Node | str] = [p if isinstance(p, str) else from_tree(p) for p in tree["parts"]]
    return Node(tree["tag"], tree["id"], parts, page_id=tree["id"])


def page_roots(text: str, tree: simplify.Node | None = None) -> list[Node]:
    """The top-level nodes of one observation: its walk ``tree`` when it has one, else its text
    read back."""
    return [from_tree(tree)] if tree is not None else parse_tree(text)


def render(nodes: list[Node]) -> str:
    """Write nodes back as the DOM walk does (``' >'`` after a trailing child node)."""
    return " ".join(_render(n) for n in nodes)


def _render(node: Node | str) -> str:
    if isinstance(node, str):
        return node
    body = " ".join(_render(p) for p in node.parts)
    if node.tag == "" and node.id is None:
        return "< " + body + " >"
    tail = " >" if node.parts and isinstance(node.parts[-1], Node) else ">"
    return f"<{node.tag}{f'[{node.id}]' if node.id else ''}| {body}{tail}"


def walk(nodes: list[Node]) -> list[Node]:
    """Every node in pre-order (the order ids are assigned in)."""
    out: list[Node] = []
    for node in nodes:
        out.append(node)
        out += walk(node.children)
    return out


def _is_field_group(node: Node) -> bool:
    tags = {c.tag for c in node.children}
    return "label" in tags and bool(tags & set(simplify.FIELD_TAGS))


def _shufflable(node: Node) -> bool:
    # Only containers of elements: shuffling around text runs would garble sentences.
    return len(node.parts) >= 2 and all(isinstance(p, Node) for p in node.parts) and not _is_field_group(node)


def _copy(node: Node) -> Node:
    return Node(node.tag, node.id, [p if isinstance(p, str) else _copy(p) for p in node.parts],
                node.page_id, node.distractor)


def _distractor(rng: random.Random, avoid: set[str]) -> Node:
    words = [w for w in _DISTRACTOR_WORDS if w.casefold() not in avoid] or ["Other"]
    word = rng.choice(words)
    avoid.add(word.casefold())
    kind = rng.choice(("button", "button", "a", "span", "input"))
    if kind == "input":
        return Node("input", "?", [], distractor=True)
    return Node(kind, "?", [word], distractor=True)


def make_variant(roots: list[Node], rng: random.Random, *, distractors: tuple[int, int] = (1, 3),
                 shuffle: bool = True) -> list[Node]:
    """A copy of the tree with shuffled siblings, distractor elements and walk-order ids.

    Args:
        roots: the parsed page (not modified).
        rng: the randomness (one per example, so every example gets its own order).
        distractors: inclusive range of distractor elements inserted into the largest
            shuffle-able container (none when the page has no such container).
        shuffle: shuffle sibling elements (False: only insert distractors and relabel).
    """
    nodes = [_copy(r) for r in roots]
    containers = [n for n in walk(nodes) if _shufflable(n)]
    if shuffle:
        for node in containers:
            rng.shuffle(node.parts)
    if containers:
        target = max(containers, key=lambda n: len(n.parts))
        avoid = {n.full_text().casefold() for n in walk(nodes)}
        for _ in range(rng.randint(*distractors)):
            target.parts.insert(rng.randint(0, len(target.parts)), _distractor(rng, avoid))
    counter = 0
    for node in walk(nodes):
        if node.id is not None:
            node.id = id_for(counter)
            counter += 1
    return nodes
