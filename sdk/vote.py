"""Majority vote over the whole n x m action matrix (paper Eq. 5).

Rule, in order:

1. Proposals are compared by ``Action.key()``: same action type and arguments, text compared
   case- and whitespace-insensitively.
2. An unparsable proposal (``Unknown``) never wins while any proposal parsed.
3. The action proposed most often over all agents and rounds wins.
4. Ties go to the action proposed most often in the *last* round (agents there have read the
   most discussion), then to the one that appears in the latest round, then to the one proposed
   by the lowest agent id in that round. The rule is deterministic: the same matrix always
   yields the same winner.

That is the paper's rule (``rule="exact"``, the default). ``rule="target"`` first decides *what*
to do and then *how*: proposals are grouped by ``Action.target()`` (the action without its
wording: typed text, an answer), the target group wins by the same ranking, and within it the
exact rule picks the wording. Sampled agents that agree on typing into the password field but
differ in one character then outvote a minority that agrees on clicking Login, where the exact
rule splits them into small groups and lets the minority win.

With ``independent`` agents named (``TeamConfig.tie_break="independent"``: the DAG's sources,
which read no peer), a tie the last-round count leaves goes first to the action more of *their*
proposals name. Entries that read a peer may repeat it; a source's entries are the team's own
evidence, so they decide before the agent id does.

An *arbiter* (``arbitrate``; ``TeamConfig.arbiter``) may overrule the count: a second policy
answers the step on its own, and when its action is one of the proposals, that proposal is
executed. The count stays the fallback, so an arbiter can only choose among the agents' ideas.

A vote can be *decided* before every entry is in (``vote_decided``): when the leading action's
count exceeds the runner-up's by more than the entries still to come, no answer they could give
changes the winner. ``TeamConfig.stop_when_decided`` skips those entries (``None`` in the matrix
``majority_vote`` reads): the same action is executed with fewer model calls.

A winner can be *passed over* (``pass_over``; ``TeamConfig.skip_stale``): when it repeats the
last executed action and that action left the page as it was, doing it again cannot change the
page either, so the most-voted other proposal is executed instead. Only when every proposal is
the stale action does it stand.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, replace
from functools import partial

from collabui.actions import Action, Unknown

__all__ = ["TIE_BREAKS", "VOTE_RULES", "VoteResult", "majority_vote", "arbitrate", "pass_over", "stale_decided", "vote_decided"]

#: The vote rules ``majority_vote`` (and ``TeamConfig.vote``) accept.
VOTE_RULES = ("exact", "target")

#: The tie rules ``TeamConfig.tie_break`` accepts: ``lowest-id`` (latest round, lowest agent id)
#: and ``independent`` (first the proposals of the agents that read no peer).
TIE_BREAKS = ("lowest-id", "independent")

_Cell = tuple[int, int, Action]


@dataclass(frozen=True)
class VoteResult:
    """The executed action and how it was chosen.

    Attributes:
        action: the winning action (an ``Unknown`` only when no proposal parsed).
        counts: ``(action call string, count)`` for every distinct proposal, most votes first.
        votes: how many proposals the winner got.
        total: number of proposals in the matrix (n x m).
        parsed: how many proposals parsed into the action space.
        tie_break: None when the winner had strictly most votes, else the rule that decided.
        rule: the vote rule (``exact`` or ``target``).
        target_votes: under the ``target`` rule, how many proposals named the winner's target
            (``votes`` counts the winner's exact wording); None under ``exact``.
        arbiter: with an arbiter, ``{"model": name, "answer": its call string or None,
            "chose": whether its answer was among the proposals and so decided, "overruled":
            whether that choice differs from the count's}``; else None.
        passed_over: the call of the count's winner when ``pass_over`` set it aside as a stale
            repeat (``counts`` still lists it); else None.
    """

    action: Action
    counts: tuple[tuple[str, int], ...]
    votes: int
    total: int
    parsed: int
    tie_break: str | None = None
    rule: str = "exact"
    target_votes: int | None = None
    arbiter: dict[str, object] | None = None
    passed_over: str | None = None

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {
            "action": self.action.to_dict(),
            "counts": [list(c) for c in self.counts],
            "votes": self.votes,
            "total": self.total,
            "parsed": self.parsed,
            "tie_break": self.tie_break,
        }
        if self.rule != "exact":  # traces of the paper's rule keep their old shape
            out["rule"] = self.rule
            out["target_votes"] = self.target_votes
        if self.arbiter is not None:
            out["arbiter"] = dict(self.arbiter)
        if self.passed_over is not None:
            out["passed_over"] = self.passed_over
        return out


def majority_vote(matrix: Sequence[Sequence[Action | None]], *, rule: str = "exact",
                  independent: Collection[int] = ()) -> VoteResult:
    """Vote over ``matrix[i][j]`` = agent i's action in round j (rounds in order); ``None`` is an
    entry that was not run (``TeamConfig.stop_when_decided``) and is not counted.

    ``rule`` is ``exact`` (the paper's) or ``target`` (see the module docstring). ``independent``
    names the agents whose proposals break a tie first after the last-round count (the DAG's
    sources); empty, ties go by the latest round and the lowest agent id."""
    if rule not in VOTE_RULES:
        raise ValueError(f"vote rule {rule!r} is unknown; use one of {list(VOTE_RULES)}")
    cells = [(i, j, a) for i, row in enumerate(matrix) for j, a in enumerate(row) if a is not None]
    if not cells:
        raise ValueError("majority_vote needs at least one proposal")
    parsed = [(i, j, a) for i, j, a in cells if not isinstance(a, Unknown)]
    if not parsed:
        return VoteResult(
            action=Unknown(raw="", reason="no agent proposed a parsable action"),
            counts=(("unknown", len(cells)),),
            votes=len(cells),
            total=len(cells),
            parsed=0,
            rule=rule,
        )
    last_round = max(j for _, j, _ in cells)
    rank = partial(_rank, last_round=last_round, independent=frozenset(independent))
    target_votes = None
    pool = parsed
    target_tie = None
    if rule == "target":
        targets = _ranked(parsed, lambda a: a.target(), rank)
        pool, target_votes = targets[0], len(targets[0])
        target_tie = _tie_break(targets, rank)
    ranked = _ranked(pool, lambda a: a.key(), rank)
    winner = ranked[0]
    tie_break = target_tie or _tie_break(ranked, rank)
    # The tally lists every exact proposal in the matrix, most votes first (under ``exact`` the
    # pool is the whole matrix, so the ranking above is already that list).
    everyone = ranked if pool is parsed else _ranked(parsed, lambda a: a.key(), rank)
    counts = tuple((_first(g)[2].to_call(), len(g)) for g in everyone)
    unknowns = len(cells) - len(parsed)
    if unknowns:
        counts += (("unknown", unknowns),)
    return VoteResult(
        action=_first(winner)[2],
        counts=counts,
        votes=len(winner),
        total=len(cells),
        parsed=len(parsed),
        tie_break=tie_break,
        rule=rule,
        target_votes=target_votes,
    )


def vote_decided(matrix: Sequence[Sequence[Action | None]], *, rule: str = "exact") -> bool:
    """Whether the entries still ``None`` in ``matrix`` can no longer change the winner of
    ``majority_vote`` (under ``rule``), whatever actions they turn out to be.

    The leader must be ahead of every other action by more than the entries to come, so no tie
    rule is ever reached; under ``target`` both its target and, within it, its wording must be.
    An unparsable entry counts for no action."""
    if rule not in VOTE_RULES:
        raise ValueError(f"vote rule {rule!r} is unknown; use one of {list(VOTE_RULES)}")
    actions = [a for row in matrix for a in row]
    pending = sum(a is None for a in actions)
    parsed = [a for a in actions if a is not None and not isinstance(a, Unknown)]
    if not parsed:
        return False
    if rule == "target":
        if not _clear_lead([a.target() for a in parsed], pending):
            return False
        leader = Counter(a.target() for a in parsed).most_common(1)[0][0]
        parsed = [a for a in parsed if a.target() == leader]
    return _clear_lead([a.key() for a in parsed], pending)


def pass_over(result: VoteResult, matrix: Sequence[Sequence[Action | None]], stale: Callable[[Action], bool],
              *, rule: str = "exact", independent: Collection[int] = ()) -> VoteResult:
    """``result``, or when its action is ``stale`` (it repeats an action that left the page
    unchanged) the vote of the matrix without the stale proposals, with ``passed_over`` naming
    the action set aside and ``counts`` still the whole matrix's tally. ``result`` stands when no
    parsed proposal is anything else."""
    if isinstance(result.action, Unknown) or not stale(result.action):
        return result
    rest = [[None if a is None or isinstance(a, Unknown) or stale(a) else a for a in row] for row in matrix]
    if not any(a is not None for row in rest for a in row):
        return result
    other = majority_vote(rest, rule=rule, independent=independent)
    return replace(other, counts=result.counts, total=result.total, parsed=result.parsed, arbiter=result.arbiter,
                   passed_over=result.action.to_call())


def stale_decided(matrix: Sequence[Sequence[Action | None]], stale: Callable[[Action], bool], *,
                  rule: str = "exact") -> bool:
    """``vote_decided`` for a vote that ``pass_over`` will read: stale proposals count for no
    action, so the entries still to come must be unable to change the winner among the others."""
    rest = [[a if a is None or isinstance(a, Unknown) or not stale(a) else Unknown(raw="", reason="stale")
             for a in row] for row in matrix]
    return vote_decided(rest, rule=rule)


def _clear_lead(keys: list[tuple], pending: int) -> bool:
    counts = [n for _, n in Counter(keys).most_common(2)] + [0]
    return counts[0] > counts[1] + pending


def arbitrate(result: VoteResult, matrix: Sequence[Sequence[Action]], answer: Action | None,
              *, name: str) -> VoteResult:
    """``result`` overruled by an arbiter's ``answer`` when some agent proposed that action
    (compared by ``Action.key()``); else ``result`` as it was. Either way the arbiter's answer is
    recorded (``VoteResult.arbiter``)."""
    usable = answer is not None and not isinstance(answer, Unknown)
    same = [a for row in matrix for a in row if a.key() == answer.key()] if usable else []
    overrules = bool(same) and same[0].key() != result.action.key()
    record = {"model": name, "answer": answer.to_call() if usable else None, "chose": bool(same),
              "overruled": overrules}
    if not overrules:
        return replace(result, arbiter=record)
    # The agents' own wording of the action is executed (the first proposal of it in reading order).
    return replace(result, action=same[0], votes=len(same), tie_break=None, target_votes=None, arbiter=record)


def _rank(members: list[_Cell], *, last_round: int, independent: frozenset[int]) -> tuple[int, int, int, int, int]:
    latest = max(j for _, j, _ in members)
    return (
        len(members),
        sum(1 for _, j, _ in members if j == last_round),
        sum(1 for i, _, _ in members if i in independent),
        latest,
        -min(i for i, j, _ in members if j == latest),
    )


def _ranked(cells: list[_Cell], key: Callable[[Action], tuple], rank: Callable) -> list[list[_Cell]]:
    """Cells grouped by ``key`` of their action, best group first (by ``rank``)."""
    groups: dict[tuple, list[_Cell]] = {}
    for cell in cells:
        groups.setdefault(key(cell[2]), []).append(cell)
    return sorted(groups.values(), key=rank, reverse=True)


def _tie_break(ranked: list[list[_Cell]], rank: Callable) -> str | None:
    if len(ranked) < 2 or len(ranked[1]) != len(ranked[0]):
        return None
    a, b = rank(ranked[0]), rank(ranked[1])
    if a[1] != b[1]:
        return "last-round count"
    return "independent count" if a[2] != b[2] else "latest round, lowest agent id"


def _first(group: list[_Cell]) -> _Cell:
    """A group's representative: its first proposal in reading order (agent, then round)."""
    return min(group, key=lambda c: (c[0], c[1]))
