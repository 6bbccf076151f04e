"""Team context for SFT rows: the other agents' answers an agent reads in a team.

In a team every agent reads, beside the page, its own answer of the previous round and the
answers of its DAG predecessors in this round (``collabui.prompts.build_messages``). Rows from
single-agent demonstrations never show those sections, so a model trained only on them reads
every team prompt out of distribution. :func:`team_context` draws such a context for a verified
step: each shown answer is the verified action with probability ``p_right``, else a plausible
mistake on the same page (another element, or the same value typed into another field; with
``other_kind``, some of the other kind: a submit clicked where a field waits, a value typed again
where a click is due), and the target stays the verified action. The model so learns to follow
a right neighbour and to ignore a wrong one, as the vote needs.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from collabui.actions import Action, get_action_space
from collabui.parsing import render_answer
from collabui.prompts import PeerOutput

__all__ = ["PageFacts", "TeamContext", "team_context", "wrong_action"]

#: The team shape drawn from: the default 4 agents x 3 rounds.
AGENTS, ROUNDS = 4, 3


@dataclass(frozen=True)
class TeamContext:
    """What one (agent, round) node reads from the team: ``own_previous`` (None in round 0) and
    this round's ``peers``."""

    peers: tuple[PeerOutput, ...]
    own_previous: PeerOutput | None


@dataclass(frozen=True)
class PageFacts:
    """What a mistake of the other kind may name on a page: its clickables (every listed element
    but a form field: buttons, links, a ``div`` that submits), and what is typed in each of its
    text fields (``""`` when nothing is)."""

    clickables: tuple[str, ...] = ()
    field_values: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, tree: Any) -> PageFacts:
        """The facts of a device's element tree (``collabui.devices.simplify``)."""
        from collabui.devices.simplify import FIELD_TAGS, flat_elements, text_field_values

        clickables = tuple(str(e["id"]) for e in flat_elements(tree) if e["id"] and e["tag"] not in FIELD_TAGS)
        return cls(clickables=clickables, field_values=text_field_values(tree))


def wrong_action(action: dict[str, Any], element_ids: list[str], rng: random.Random, *,
                 page: PageFacts | None = None, other_kind: float = 0.0) -> dict[str, Any] | None:
    """A plausible mistake beside ``action``: the same kind of action on another element of the
    page (typing keeps its value: the wrong field), or None when the page has no other element.

    With ``page``, a share ``other_kind`` of the mistakes are of the other kind, the two a team's
    agents make on forms: beside typing, a click on a clickable (submitting with a field still
    empty); beside a click, a value already typed typed again (a retyping loop). Where the page
    has nothing for such a mistake, it is of the same kind."""
    if page is not None and other_kind > 0 and rng.random() < other_kind:
        wrong = _other_kind(action, page, rng)
        if wrong is not None:
            return wrong
    others = [e for e in element_ids if e != action.get("element_id")]
    if not others or not action.get("element_id"):
        return None
    if action.get("action") == "type_string":
        return {**action, "element_id": rng.choice(others)}
    return {"action": "click", "element_id": rng.choice(others)}


def _other_kind(action: dict[str, Any], page: PageFacts, rng: random.Random) -> dict[str, Any] | None:
    target = action.get("element_id")
    if action.get("action") == "type_string":
        clickables = [c for c in page.clickables if c != target]
        return {"action": "click", "element_id": rng.choice(clickables)} if clickables else None
    if action.get("action") == "click":
        # Stars are a password field's mask, not a value anyone would type.
        filled = [(i, v) for i, v in page.field_values.items() if i != target and v and set(v) != {"*"}]
        if filled:
            element_id, value = rng.choice(filled)
            return {"action": "type_string", "element_id": element_id, "content": value, "press_enter": False}
    return None


#: The thought an agent writes beside an action (None: an ``Action:`` line alone).
ThoughtFor = Callable[[dict[str, Any]], "str | None"]


#: The call naming an action's element, as a ``named``-style reader sees it (None: not shown so).
NamedFor = Callable[[Action], "str | None"]


def _output(agent: int, round_: int, action: dict[str, Any], space: str, thought_for: ThoughtFor,
            named_for: NamedFor) -> PeerOutput:
    typed = get_action_space(space).from_dict(action)
    text = typed.to_json()
    thought = thought_for(action)
    return PeerOutput(agent=agent, round=round_, thought=thought, action_json=text,
                      raw=render_answer(text, thought), named=named_for(typed))


def team_context(action: dict[str, Any], element_ids: list[str], rng: random.Random, *,
                 p_right: float = 0.6, space: str = "web",
                 thought_for: ThoughtFor = lambda _action: None,
                 named_for: NamedFor = lambda _action: None,
                 page: PageFacts | None = None, other_kind: float = 0.0) -> TeamContext:
    """A team context for a step whose verified answer is ``action``, on a page listing
    ``element_ids``: a round (0-2) and 0-3 predecessors, each answer right with ``p_right``.

    ``thought_for`` writes each shown answer's thought as the team's agents would: in the
    ``grounded`` style a team reads its peers' screen lines too (``Thought: click button "Ok"
    [B]``), so rows without them would teach a prompt no team shows. ``named_for`` writes each
    shown answer as the ``named`` style shows it (``collabui.prompts.answer_call``). ``page`` and
    ``other_kind``: mistakes of the other kind too (:func:`wrong_action`)."""
    agent = rng.randrange(AGENTS)
    round_ = rng.randrange(ROUNDS)
    others = [a for a in range(AGENTS) if a != agent]
    peer_ids = sorted(rng.sample(others, rng.randrange(len(others) + 1)))

    def answer() -> dict[str, Any]:
        wrong = None if rng.random() < p_right else wrong_action(action, element_ids, rng, page=page,
                                                                 other_kind=other_kind)
        return wrong or action

    peers = tuple(_output(p, round_, answer(), space, thought_for, named_for) for p in peer_ids)
    own = _output(agent, round_ - 1, answer(), space, thought_for, named_for) if round_ > 0 else None
    return TeamContext(peers=peers, own_previous=own)
