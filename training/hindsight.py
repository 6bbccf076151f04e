"""Hindsight relabelling of verified demonstrations: the same page, another instruction it answers.

A verified first step that clicks the element whose text the task quotes (``Click on the "yes"
button.`` -> ``click(Y)``, Y reading ``yes``) says more than that one pair: clicking any other
element of that kind answers the instruction that quotes *its* text instead. Each such row
yields up to ``per_row`` new rows: the task with the quoted text swapped for another element's
(same tag, a text no other element of the page shares, none of the task's other quoted values),
the click on that element as the target, the page unchanged. They are right by construction,
not verified by the environment (MiniWoB++ rewards its own instruction only), so they carry
``source="hindsight"`` and no ``verified_reward``.

Only first steps (empty history) are relabelled: a later step's history and page follow from the
original instruction. Typing steps are left alone for the same reason (the page shows the value).
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterable, Iterator
from typing import Any

from collabui.devices.simplify import flat_elements

__all__ = ["hindsight_rows"]

_QUOTED = re.compile(r'"([^"]+)"')


def hindsight_rows(rows: Iterable[dict[str, Any]], *, per_row: int = 2, seed: int = 0) -> list[dict[str, Any]]:
    """Relabelled rows for the first-step clicks among ``rows`` (demonstration rows, as
    ``read_steps`` returns them); at most ``per_row`` per row, drawn at random (seeded)."""
    if per_row < 1:
        return []
    rng = random.Random(seed)
    return [new for row in rows for new in _relabel(row, per_row, rng)]


def _relabel(row: dict[str, Any], per_row: int, rng: random.Random) -> Iterator[dict[str, Any]]:
    action = row["action"]
    action = json.loads(action) if isinstance(action, str) else action
    if int(row.get("t", 0)) != 0 or row.get("history") or action.get("action") != "click" or not row.get("tree"):
        return
    tree = row["tree"]
    elements = flat_elements(json.loads(tree) if isinstance(tree, str) else tree)
    target = next((e for e in elements if e["id"] == action.get("element_id")), None)
    task = str(row["task"])
    quoted = _QUOTED.findall(task)
    if target is None or not target["text"] or quoted.count(target["text"]) != 1:
        return
    counts: dict[str, int] = {}
    for element in elements:
        counts[element["text"]] = counts.get(element["text"], 0) + 1
    others = [e for e in elements if e["tag"] == target["tag"] and e["text"] and counts[e["text"]] == 1
              and e["text"] not in quoted and '"' not in e["text"]]
    for element in rng.sample(others, min(per_row, len(others))):
        yield {**row, "task": task.replace(f'"{target["text"]}"', f'"{element["text"]}"'),
               "action": {"action": "click", "element_id": element["id"]},
               "source": "hindsight", "verified_reward": None, "relabelled_from": target["id"]}
