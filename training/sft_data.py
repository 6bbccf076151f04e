"""Prompt-completion rows for SFT from verified demonstrations (``collabui train demonstrate``).

Each verified step becomes the exact chat an agent reads at run time (``build_messages`` with the
observation rendered by ``render_observation``), and its completion is the verified action as
an ``Action:`` line: the answer format of the ``trained`` prompt style (``grounded``: after a
``Thought:`` line naming the action and copying its element's screen line). The page text is
rendered from the device's element tree in the requested format, so one data set serves the
``html`` and ``text-first`` arms of a format comparison.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any

from collabui.actions import get_action_space
from collabui.devices.base import Observation
from collabui.errors import ConfigError
from collabui.parsing import render_answer
from collabui.prompts import (
    GROUNDED_STYLES,
    answer_call,
    build_messages,
    history_in_format,
    render_observation,
)
from collabui.training.team_context import PageFacts, TeamContext, team_context

__all__ = ["STATELESS_FIELDS", "sft_rows", "answer_text", "grounded_thought", "prompt_messages", "target_line"]

#: What ``sft_rows(stateless_share=...)`` hides: every field's state; checkboxes' and radios' alone;
#: or ticks always and typed values only on pages where no text field is left empty.
STATELESS_FIELDS = ("all", "toggles", "filled")


def answer_text(action: dict[str, Any], *, thought: str | None = None, space: str = "web") -> str:
    """The completion of a verified step: ``Action: <json>`` (validated against ``space`` on the
    way), after a ``Thought:`` line for ``grounded`` answers (see :func:`grounded_thought`)."""
    return render_answer(get_action_space(space).from_dict(action).to_json(), thought)


def grounded_thought(action: dict[str, Any], line: str | None) -> str:
    """The ``grounded`` thought: the action's name, then the screen line of its element
    (``type_string input "" (City) [U]``). The name comes first because the same field line leads to
    a click on focus tasks and to typing on entry tasks: the choice of kind must be made before
    the line is copied, from the task, not after it from the line."""
    return f"{action['action']} {line}" if line else str(action["action"])


def _tree(row: dict[str, Any]) -> Any:
    tree = row.get("tree")
    tree = json.loads(tree) if isinstance(tree, str) else tree
    if tree is None:
        raise ConfigError(f"row {row.get('task_name')}/{row.get('seed')}/{row.get('t')} has no element "
                          "tree; regenerate the demonstrations to render other formats or grounded answers")
    return tree


def _screen(row: dict[str, Any], element_format: str) -> str:
    if element_format == "html":
        return str(row["screen"])
    from collabui.devices.simplify import render

    return render(_tree(row), element_format)


def target_line(tree: Any, action: dict[str, Any], element_format: str) -> str | None:
    """The screen line (in ``element_format``) of the element ``action`` acts on; None for
    actions without an element, or when ``tree`` does not list it."""
    from collabui.devices.simplify import element_line

    element_id = action.get("element_id")
    if not element_id or tree is None:
        return None
    return element_line(tree, str(element_id), element_format)


def _target(row: dict[str, Any], action: dict[str, Any], element_format: str) -> str | None:
    """The screen line of the element ``action`` acts on (None for actions without one)."""
    if not action.get("element_id"):
        return None
    line = target_line(_tree(row), action, element_format)
    if line is None:
        raise ConfigError(f"row {row.get('task_name')}/{row.get('seed')}/{row.get('t')} acts on element "
                          f"{action['element_id']!r}, which its page does not list")
    return line


def prompt_messages(row: dict[str, Any], *, style: str = "trained", element_format: str = "html",
                    context: TeamContext | None = None) -> list[dict[str, str]]:
    """The chat an agent reads at the row's step: a single agent's, or with ``context`` that of
    an agent in a team (its previous answer and its predecessors' answers)."""
    obs = Observation(text=_screen(row, element_format), task=row["task"], url=row.get("url"),
                      viewport=row.get("viewport"))
    messages = build_messages(space=get_action_space("web"), task=str(row["task"]),
                              observation=render_observation(obs),
                              history=[history_in_format(h, element_format) for h in row["history"]],
                              peers=context.peers if context else (),
                              own_previous=context.own_previous if context else None, style=style)
    return [dict(m) for m in messages]


def _row_random(row: dict[str, Any], *head: object) -> random.Random:
    """A generator seeded by ``head`` and the row's identity (task, seed, step, rendering), so a
    draw about a row is the same in every rerun."""
    key = [*head, row["task_name"], row["seed"], row["t"], row.get("rendering")]
    return random.Random("/".join(map(str, key)))


def _context(row: dict[str, Any], action: dict[str, Any], share: float, seed: int, *,
             style: str = "trained", element_format: str = "html", other_kind: float = 0.0) -> TeamContext | None:
    """A drawn team context for ``share`` of the rows (seeded by the row, so reruns agree); in
    the ``grounded`` style each shown answer carries its grounded thought, as a team's do;
    ``other_kind`` of its mistakes are of the other kind (``team_context.wrong_action``)."""
    if share <= 0:
        return None
    rng = _row_random(row, seed)
    if rng.random() >= share:
        return None
    from collabui.devices.simplify import flat_elements

    tree = _tree(row)
    ids = [str(e["id"]) for e in flat_elements(tree) if e["id"]]
    mistakes: dict[str, Any] = {"page": PageFacts.of(tree), "other_kind": other_kind} if other_kind > 0 else {}
    if style not in GROUNDED_STYLES:
        return team_context(action, ids, rng, **mistakes)
    # In the named style each shown answer is also written as the call naming its element.
    named = {"named_for": lambda a: answer_call(a, tree, element_format)} if style == "named" else {}
    return team_context(action, ids, rng, **named, **mistakes,
                        thought_for=lambda a: grounded_thought(a, target_line(tree, a, element_format)))


def sft_rows(rows: Iterable[dict[str, Any]], *, style: str = "trained", element_format: str = "html",
             limit: int | None = None, seed: int = 0, renderings: Sequence[str] | None = None,
             balance: bool = False, by_step: bool = False, team_share: float = 0.0,
             stateless_share: float = 0.0, stateless_fields: str = "filled",
             team_other_kind: float = 0.0) -> list[dict[str, Any]]:
    """Prompt-completion rows (TRL's conversational format) from demonstration rows.

    Args:
        rows: demonstration rows (``read_steps``); their ``action`` may be a dict or JSON.
        style, element_format: the prompt style and page format the trained model will read.
        limit: keep at most this many, drawn at random (seeded) after shuffling.
        renderings: keep only these renderings (e.g. ``("page",)``); None keeps all.
        balance: draw the ``limit`` rows round-robin over tasks, so a task with many easy
            one-click steps does not crowd out the rarer multi-step ones.
        by_step: with ``balance``, round-robin over (task, step index) pairs instead: a 4-step
            form gets a share for each of its steps, not one share for all four.
        team_share: the share of rows read as an agent of a 4 x 3 team reads them, with
            drawn answers of the other agents beside the page (:mod:`collabui.training.team_context`).
        team_other_kind: the share of those answers' mistakes that are of the other kind: a
            button clicked where the verified step types, a value typed again where it clicks
            (:func:`collabui.training.team_context.wrong_action`).
        stateless_share: the share of rows after a task's first step whose page shows no field
            state (:func:`collabui.devices.simplify.without_state`): what was typed or ticked is
            then told by the previous actions alone, so the history must be read.
        stateless_fields: which fields those rows hide: ``filled`` (the default, the recipe's since
            v73: ticks, and typed values only on a page whose text fields all hold one: an
            empty-looking field then always means one still to fill), ``all`` (typed values and ticks) or
            ``toggles`` (checkboxes and radio buttons alone; typed values stay in view).
    """
    for name, share in (("team_share", team_share), ("stateless_share", stateless_share),
                        ("team_other_kind", team_other_kind)):
        if not 0.0 <= share <= 1.0:
            raise ConfigError(f"{name} must be between 0 and 1, got {share!r}")
    if stateless_fields not in STATELESS_FIELDS:
        raise ConfigError(f"stateless_fields must be one of {', '.join(STATELESS_FIELDS)}, got {stateless_fields!r}")
    out = []
    for row in rows:
        if renderings is not None and row.get("rendering") not in renderings:
            continue
        row = _maybe_stateless(row, stateless_share, seed, fields=stateless_fields)
        action = row["action"]
        action = json.loads(action) if isinstance(action, str) else action
        thought = grounded_thought(action, _target(row, action, element_format)) if style in GROUNDED_STYLES else None
        context = _context(row, action, team_share, seed, style=style, element_format=element_format,
                           other_kind=team_other_kind)
        out.append({"prompt": prompt_messages(row, style=style, element_format=element_format, context=context),
                    "completion": [{"role": "assistant", "content": answer_text(action, thought=thought)}],
                    "task_name": row["task_name"], "seed": int(row["seed"]), "t": int(row["t"])})
    random.Random(seed).shuffle(out)
    if balance:
        out = _round_robin(out, (lambda r: (r["task_name"], r["t"])) if by_step else (lambda r: r["task_name"]))
    return out[:limit] if limit is not None else out


def _maybe_stateless(row: dict[str, Any], share: float, seed: int, *, fields: str) -> dict[str, Any]:
    """``row`` with its page's field state removed, for ``share`` of the rows that have a history
    (seeded by the row, so reruns agree; drawn apart from the team context's draw)."""
    if share <= 0 or not row.get("history"):
        return row
    if _row_random(row, "stateless", seed).random() >= share:
        return row
    from collabui.devices.simplify import empty_text_fields, render, without_state

    tree = _tree(row)
    toggles_only = fields == "toggles" or (fields == "filled" and bool(empty_text_fields(tree)))
    tree = without_state(tree, toggles_only=toggles_only)
    return {**row, "tree": tree, "screen": render(tree, "html")}


def _round_robin(rows: list[dict[str, Any]], group: Callable[[dict[str, Any]], Hashable]) -> list[dict[str, Any]]:
    """``rows`` reordered one group at a time in turn (each group's rows keep their order), so
    any prefix of the result is as even over the groups as the data allows."""
    groups: dict[Hashable, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(group(row), []).append(row)
    queues = list(groups.values())
    out: list[dict[str, Any]] = []
    for k in range(max((len(q) for q in queues), default=0)):
        out.extend(q[k] for q in queues if k < len(q))
    return out
