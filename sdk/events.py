"""Typed events of a streamed episode (``team.stream`` / ``team.astream``).

An episode streams, in this order::

    EpisodeStarted
    for each step t:
        StepStarted
        ProposalMade  x (n agents x m rounds), as each lands; every proposal comes after the
                      proposals it read (its DAG predecessors' in that round, its own previous
                      round), i.e. in the order of the step graph's supersteps
        VoteDecided
        ActionExecuted
        StepEnded
    EpisodeEnded

``EpisodeStarted`` comes once the environment has been reset (a reset that fails goes straight
to ``EpisodeEnded`` with the error). A step whose model call raises ends the stream with that
exception, as ``team.run`` would, after the trace has recorded it. Every event is a small frozen
dataclass whose ``kind`` names it, so an application can dispatch on ``event.kind`` or on
``isinstance``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:  # pragma: no cover
    from collabui.actions import Action
    from collabui.devices.base import Observation
    from collabui.episode import EpisodeResult, StepRecord
    from collabui.team import Proposal, TeamStep
    from collabui.vote import VoteResult

__all__ = [
    "ActionExecuted",
    "EpisodeEnded",
    "EpisodeStarted",
    "Event",
    "EVENT_KINDS",
    "ProposalMade",
    "StepEnded",
    "StepStarted",
    "VoteDecided",
]


@dataclass(frozen=True)
class EpisodeStarted:
    """The environment is reset and the task is known; nothing has been proposed yet."""

    episode_id: str
    task: str
    env: str | None
    seed: int | None
    n_agents: int
    rounds: int
    supersteps: int
    max_steps: int
    trace_path: str | None
    kind: Literal["episode_start"] = field(default="episode_start", init=False)


@dataclass(frozen=True)
class StepStarted:
    """Step ``t`` begins on ``observation`` (the page the agents are about to read)."""

    t: int
    observation: Observation = field(repr=False)
    kind: Literal["step_start"] = field(default="step_start", init=False)


@dataclass(frozen=True)
class ProposalMade:
    """Agent ``agent``'s output in round ``round`` of step ``t``, as soon as it is parsed.

    ``action`` is an ``Unknown`` action when the output did not parse (``parse_error`` says
    why); ``proposal`` is the full record (prompt messages, raw text, latency) the trace keeps.
    """

    t: int
    agent: int
    round: int
    superstep: int
    thought: str | None
    action: Action
    parse_error: str | None
    proposal: Proposal = field(repr=False)
    kind: Literal["proposal"] = field(default="proposal", init=False)


@dataclass(frozen=True)
class VoteDecided:
    """All n x m proposals of step ``t`` are in and the majority vote has chosen ``action``.

    ``tally`` is ``(action call, count)`` for every distinct proposal, most votes first.
    """

    t: int
    action: Action
    votes: int
    total: int
    tally: tuple[tuple[str, int], ...]
    tie_break: str | None
    vote: VoteResult = field(repr=False)
    team_step: TeamStep = field(repr=False)
    kind: Literal["vote"] = field(default="vote", init=False)


@dataclass(frozen=True)
class ActionExecuted:
    """The device ran the voted action of step ``t``.

    ``call`` is the action as the trace records it (text typed into password fields masked as
    ``***``); ``error`` is set when the device failed, which also ends the episode.
    """

    t: int
    action: Action
    call: str
    reward: float
    done: bool
    error: str | None
    kind: Literal["executed"] = field(default="executed", init=False)


@dataclass(frozen=True)
class StepEnded:
    """Step ``t`` is recorded in the trace; ``record`` holds all of it, timings included."""

    t: int
    seconds: float
    record: StepRecord = field(repr=False)
    kind: Literal["step_end"] = field(default="step_end", init=False)


@dataclass(frozen=True)
class EpisodeEnded:
    """The episode is over and its trace closed; ``result`` is what ``team.run`` returns."""

    success: bool
    reward: float
    steps: int
    error: str | None
    trace_path: str | None
    result: EpisodeResult = field(repr=False)
    kind: Literal["episode_end"] = field(default="episode_end", init=False)


#: Any event of a streamed episode.
Event = EpisodeStarted | StepStarted | ProposalMade | VoteDecided | ActionExecuted | StepEnded | EpisodeEnded

#: Every ``kind``, in the order an episode's events come.
EVENT_KINDS = ("episode_start", "step_start", "proposal", "vote", "executed", "step_end", "episode_end")
