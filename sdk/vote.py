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
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from collabui.actions import Action, Unknown

__all__ = ["VoteResult", "majority_vote"]


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
    """

    action: Action
    counts: tuple[tuple[str, int], ...]
    votes: int
    total: int
    parsed: int
    tie_break: str | None = None

    def to_dict(self) -> dict[str, object]:
        return {
            "action": self.action.to_dict(),
            "counts": [list(c) for c in self.counts],
            "votes": self.votes,
            "total": self.total,
            "parsed": self.parsed,
            "tie_break": self.tie_break,
        }


def majority_vote(matrix: Sequence[Sequence[Action]]) -> VoteResult:
    """Vote over ``matrix[i][j]`` = agent i's action in round j (rounds in order)."""
    cells = [(i, j, a) for i, row in enumerate(matrix) for j, a in enumerate(row)]
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
        )
    groups: dict[tuple, list[tuple[int, int, Action]]] = {}
    for cell in parsed:
        groups.setdefault(cell[2].key(), []).append(cell)
    last_round = max(j for _, j, _ in cells)

    def rank(members: list[tuple[int, int, Action]]) -> tuple[int, int, int, int]:
        latest = max(j for _, j, _ in members)
        return (
            len(members),
            sum(1 for _, j, _ in members if j == last_round),
            latest,
            -min(i for i, j, _ in members if j == latest),
        )

    ranked = sorted(groups.values(), key=rank, reverse=True)
    winner = ranked[0]
    tie_break = None
    if len(ranked) > 1 and len(ranked[1]) == len(winner):
        a, b = rank(winner), rank(ranked[1])
        tie_break = "last-round count" if a[1] != b[1] else "latest round, lowest agent id"
    # Represent each group by its first proposal in reading order (agent, then round).
    counts = tuple((min(g, key=lambda c: (c[0], c[1]))[2].to_call(), len(g)) for g in ranked)
    unknowns = len(cells) - len(parsed)
    if unknowns:
        counts += (("unknown", unknowns),)
    return VoteResult(
        action=min(winner, key=lambda c: (c[0], c[1]))[2],
        counts=counts,
        votes=len(winner),
        total=len(cells),
        parsed=len(parsed),
        tie_break=tie_break,
    )
