"""Gold actions for MiniWoB++ tasks whose solution follows from the task text and the page.

With no strong LLM reachable, this is what the ``oracle`` critic knows, exactly: for the task
templates below it reads the task sentence and the simplified HTML the agents saw, and names
the one correct next action; for any other task (or a page it cannot read) it knows nothing and
the critic abstains. It never looks at hidden page state, rewards or other agents' proposals.

=================  ==========================================  ===============================
task               task sentence                               gold action
=================  ==========================================  ===============================
click-button       Click on the "X" button.                    click the button whose text is X
click-link         Click on the link "X".                      click the element whose text is X
enter-text         Enter "X" into the text field and press     type X into the input, then click
                   Submit.                                     Submit once the field holds X
click-checkboxes   Select A, B and click Submit.               toggle each checkbox whose state
                                                               is wrong, then click Submit
focus-text         Focus into the textbox.                     click the input
=================  ==========================================  ===============================
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from collabui.actions import Action, web
from collabui.devices.simplify import Element, Node, screen_elements

__all__ = ["ORACLE_TASKS", "miniwob_gold_action", "oracle_gold"]

ORACLE_TASKS = ("click-button", "click-link", "enter-text", "click-checkboxes", "focus-text")


def _find(elements: list[Element], text: str, tag: str | None = None) -> Element | None:
    return next((e for e in elements if e.id and e.full_text == text and (tag is None or e.tag == tag)), None)


def _click(element: Element | None) -> Action | None:
    return web.Click(element.id) if element is not None else None


def _enter_text(m: re.Match[str], elements: list[Element]) -> Action | None:
    field = next((e for e in elements if e.tag == "input" and e.id), None)
    if field is None:
        return None
    if field.text != m.group(1):
        return web.TypeString(field.id, m.group(1))
    return _click(_find(elements, "Submit", "button"))


def _checkboxes(m: re.Match[str], elements: list[Element]) -> Action | None:
    wanted = set() if m.group(1) == "nothing" else set(m.group(1).split(", "))
    for label, box in zip(elements, elements[1:], strict=False):
        is_pair = label.tag == "label" and box.tag == "input" and box.id
        if is_pair and (label.text in wanted) != box.text.endswith("true"):
            return web.Click(box.id)
    return _click(_find(elements, "Submit", "button"))


_RULES: list[tuple[re.Pattern[str], Callable[[re.Match[str], list[Element]], Action | None]]] = [
    (re.compile(r'Click on the "(.+)" button\.'), lambda m, els: _click(_find(els, m.group(1), "button"))),
    (re.compile(r'Click on the link "(.+)"\.'), lambda m, els: _click(_find(els, m.group(1)))),
    (re.compile(r'Enter "(.+)" into the text field and press Submit\.'), _enter_text),
    (re.compile(r"Select (.*) and click Submit\."), _checkboxes),
    (re.compile(r"Focus into the textbox\."), lambda m, els: _click(next((e for e in els if e.tag == "input" and e.id), None))),
]


def miniwob_gold_action(task: str, screen: str, tree: Node | None = None) -> Action | None:
    """The correct next web action for ``task`` on ``screen`` (simplified HTML; its elements
    read from ``tree`` when given), or None when the task is not one of ``ORACLE_TASKS`` or the
    page does not show what it needs."""
    html = "\n".join(line for line in screen.splitlines() if line.lstrip().startswith("<"))
    elements = screen_elements(html, tree)
    for pattern, rule in _RULES:
        if m := pattern.fullmatch(task.strip()):
            return rule(m, elements)
    return None


def oracle_gold(ctx: Any) -> dict[str, Any] | None:
    """Gold provider for ``ReferenceCritic``: reads ``ctx.task`` and ``ctx.observation``."""
    if ctx.action_space != "web":
        return None
    action = miniwob_gold_action(ctx.task, ctx.observation, getattr(ctx, "tree", None))
    return action.to_dict() if action is not None else None
