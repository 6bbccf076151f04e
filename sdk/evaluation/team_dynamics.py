"""How a team reached its actions, read from its traces: vote margins and what the discussion did.

A team can lose to its own single agent while every agent is individually competent: the vote
splits, or the agents do not keep their answers from one round to the next. Success rates do not
show which; these figures do. For each folder of traces (a ``collabui eval miniwob`` run folder
or its ``traces/``), over every team step (n x m > 1):

- ``winner_share``: mean share of the n x m proposals the executed action got;
- ``majority``: share of steps whose winner had more than half of the proposals;
- ``ties``: share of steps a tie-break decided;
- ``kept_own``: share of proposals in rounds after the first that repeat the agent's own
  previous-round proposal (one-round memory working as memory, not as a history of actions);
- ``agrees_with_predecessor``: share of proposals that repeat at least one of the agent's DAG
  predecessors in the same round;
- ``last_round_on_winner``: share of last-round proposals that equal the executed action;
- ``arbiter_overruled``: share of steps an arbiter (``TeamConfig.arbiter``) executed a proposal
  the count did not pick (0 for a team without one);
- ``by_agent``: per agent (with its temperature) the share of its proposals equal to the
  executed action.

A team run with ``stop_when_decided`` skips the entries that could no longer change a step's
winner; the figures then read the entries that ran (``winner_share`` of the counted votes, the
comparisons only between entries that both ran).

Actions are compared as the vote compares them (``Action.key()``); secrets are masked in traces,
so two different typed passwords read as the same proposal here.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from collabui.actions import get_action_space
from collabui.errors import ActionError, ConfigError
from collabui.trace import Trace, read_trace

__all__ = ["TeamDynamics", "plot_dynamics", "read_team_traces", "render_dynamics", "team_dynamics"]

_FIGURES = ("winner_share", "majority", "ties", "kept_own", "agrees_with_predecessor", "last_round_on_winner",
            "arbiter_overruled")


@dataclass
class _Tally:
    """Numerators and denominators of the figures, summed over steps."""

    steps: int = 0
    winner_share: float = 0.0
    majority: int = 0
    ties: int = 0
    overruled: int = 0
    kept: list[int] = field(default_factory=lambda: [0, 0])
    predecessor: list[int] = field(default_factory=lambda: [0, 0])
    last_round: list[int] = field(default_factory=lambda: [0, 0])

    def figures(self) -> dict[str, float | None]:
        def share(pair: list[int]) -> float | None:
            return round(pair[0] / pair[1], 3) if pair[1] else None

        n = self.steps
        return {
            "winner_share": round(self.winner_share / n, 3) if n else None,
            "majority": round(self.majority / n, 3) if n else None,
            "ties": round(self.ties / n, 3) if n else None,
            "arbiter_overruled": round(self.overruled / n, 3) if n else None,
            "kept_own": share(self.kept),
            "agrees_with_predecessor": share(self.predecessor),
            "last_round_on_winner": share(self.last_round),
        }


@dataclass(frozen=True)
class TeamDynamics:
    """The figures of one set of traces (see the module docstring)."""

    steps: int
    episodes: int
    overall: dict[str, float | None]
    by_task: dict[str, dict[str, float | None]]
    by_agent: list[dict[str, Any]]

    def to_dict(self) -> dict[str, Any]:
        return {"steps": self.steps, "episodes": self.episodes, "overall": self.overall,
                "by_task": self.by_task, "by_agent": self.by_agent}


class _Keys:
    """``Action.key()`` of recorded action dicts, per action space, cached."""

    def __init__(self) -> None:
        self._cache: dict[tuple[str, str], tuple] = {}

    def __call__(self, space: str, action: Mapping[str, Any]) -> tuple:
        text = json.dumps(action, sort_keys=True)
        if (space, text) not in self._cache:
            try:  # an unparsed proposal ({"action": "unknown", ...}) is no action of the space
                key = get_action_space(space).from_dict(action).key()
            except (ActionError, ConfigError, TypeError, ValueError):
                key = ("unknown",)
            self._cache[(space, text)] = key
        return self._cache[(space, text)]


def team_dynamics(traces: Iterable[Trace]) -> TeamDynamics:
    """The figures over every team step of ``traces`` (steps of 1 x 1 teams are skipped)."""
    keys = _Keys()
    overall, tasks = _Tally(), defaultdict(_Tally)
    agents: dict[int, dict[str, Any]] = {}
    episodes = 0
    for trace in traces:
        task = str(trace.header.get("env") or "?").split("/")[-1]
        space = str(trace.header.get("action_space", "web"))
        counted = False
        for step in trace.steps:
            rows = step.get("proposals") or []
            if sum(len(r) for r in rows) < 2:
                continue
            counted = True
            key_rows = [[None if p.get("skipped") else keys(space, p["action"]) for p in row] for row in rows]
            winner = keys(space, step["executed"] if step.get("executed") else step["vote"]["action"])
            for tally in (overall, tasks[task]):
                _add_step(tally, step, rows, key_rows, winner)
            for i, row in enumerate(rows):
                seen = agents.setdefault(i, {"agent": i, "temperature": row[0].get("temperature"), "on": 0, "of": 0})
                seen["on"] += sum(k == winner for k in key_rows[i])
                seen["of"] += sum(k is not None for k in key_rows[i])
        episodes += counted
    by_agent = [{"agent": a["agent"], "temperature": a["temperature"],
                 "on_winner": round(a["on"] / a["of"], 3) if a["of"] else None}
                for _, a in sorted(agents.items())]
    return TeamDynamics(steps=overall.steps, episodes=episodes, overall=overall.figures(),
                        by_task={t: tasks[t].figures() for t in sorted(tasks)}, by_agent=by_agent)


def _add_step(tally: _Tally, step: Mapping[str, Any], rows: Sequence[Sequence[Mapping[str, Any]]],
              key_rows: Sequence[Sequence[tuple | None]], winner: tuple) -> None:
    vote = step["vote"]
    total = max(1, int(vote.get("total") or sum(len(r) for r in rows)))
    tally.steps += 1
    tally.winner_share += int(vote.get("votes", 0)) / total
    tally.majority += int(vote.get("votes", 0)) * 2 > total
    tally.ties += bool(vote.get("tie_break"))
    tally.overruled += bool((vote.get("arbiter") or {}).get("overruled"))
    for i, row in enumerate(rows):
        for j, prop in enumerate(row):
            if key_rows[i][j] is None:  # skipped: nothing to compare
                continue
            if j > 0 and key_rows[i][j - 1] is not None:
                tally.kept[0] += key_rows[i][j] == key_rows[i][j - 1]
                tally.kept[1] += 1
            preds = [p for p in prop.get("predecessors") or [] if 0 <= p < len(rows) and key_rows[p][j] is not None]
            if preds:
                tally.predecessor[0] += any(key_rows[p][j] == key_rows[i][j] for p in preds)
                tally.predecessor[1] += 1
        if key_rows[i][-1] is not None:
            tally.last_round[0] += key_rows[i][-1] == winner
            tally.last_round[1] += 1


def read_team_traces(folder: str | Path) -> list[Trace]:
    """Every trace of a run folder (its ``traces/``) or of a folder of ``*.jsonl`` traces.

    Raises:
        ConfigError: the folder does not exist or holds no trace.
    """
    root = Path(folder)
    if not root.is_dir():
        raise ConfigError(f"{root} is not a folder; give a collabui eval run folder or a folder of traces")
    files = sorted((root / "traces").glob("*.jsonl")) or sorted(p for p in root.glob("*.jsonl") if p.name != "episodes.jsonl")
    if not files:
        raise ConfigError(f"{root} holds no traces (*.jsonl, or traces/*.jsonl); record some with collabui eval or run")
    return [read_trace(p, validate=False) for p in files]


def render_dynamics(named: Mapping[str, TeamDynamics]) -> str:
    """A plain-text table: one column per traces folder, one row per figure, then agents."""
    from collabui.evaluation.report import text_table

    names = list(named)
    body: list[list[Any]] = [["team steps", *(named[n].steps for n in names)],
                             ["episodes", *(named[n].episodes for n in names)]]
    body += [[fig, *(_pct(named[n].overall[fig]) for n in names)] for fig in _FIGURES]
    most = max((len(named[n].by_agent) for n in names), default=0)
    for i in range(most):
        cells = []
        for n in names:
            agent = next((a for a in named[n].by_agent if a["agent"] == i), None)
            cells.append("" if agent is None else f"{_pct(agent['on_winner'])} (T={agent['temperature']})")
        body.append([f"agent {i} on winner", *cells])
    return text_table(["figure", *names], body)


def plot_dynamics(named: Mapping[str, TeamDynamics], path: str | Path) -> Path:
    """Grouped horizontal bars, one colour per traces folder, one group per figure (PNG).

    Raises:
        ConfigError: matplotlib is missing.
    """
    from collabui._plotting import figure, tidy

    target = Path(path).expanduser()
    names = list(named)
    height = 0.8 / max(1, len(names))
    with figure(target, figsize=(8.0, 1.0 + 0.45 * len(_FIGURES) * max(1, len(names))), dpi=120) as (_, ax):
        for s, name in enumerate(names):
            ys = [k + (s - (len(names) - 1) / 2) * height for k in range(len(_FIGURES))]
            values = [100 * (named[name].overall[f] or 0.0) for f in _FIGURES]
            ax.barh(ys, values, height, label=f"{name} ({named[name].steps} steps)")
        ax.set_yticks(range(len(_FIGURES)), [f.replace("_", " ") for f in _FIGURES], fontsize=8)
        ax.invert_yaxis()  # the figures read top-down in the table's order
        ax.set_xlim(0, 100)
        ax.set_title("How the team reached its actions")
        tidy([ax], xlabel="% of team steps or proposals")
    return target


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"
