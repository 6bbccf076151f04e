"""Terminal rendering of a running team from its event stream: each step's n x m action matrix,
the vote, the result."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from collabui.events import (
    EpisodeEnded,
    EpisodeStarted,
    Event,
    ProposalMade,
    StepEnded,
    StepStarted,
    VoteDecided,
)

__all__ = ["LiveView", "matrix_table"]


def _short(text: str, limit: int = 34) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def matrix_table(t: int, cells: Mapping[tuple[int, int], Any], n_agents: int, n_rounds: int, vote: Any = None):
    """A rich Table of step ``t``: rows are agents, columns rounds, cells the proposed actions
    (``cells[(agent, round)]`` are Proposals; missing ones are still being generated). With the
    ``vote``, the winning action is bold green."""
    from rich.table import Table

    vote_key = vote.action.key() if vote is not None else None
    table = Table(title=f"step {t}: {n_rounds}-round action matrix", title_justify="left")
    table.add_column("agent", justify="right")
    for j in range(n_rounds):
        table.add_column(f"round {j}")
    for i in range(n_agents):
        row = []
        for j in range(n_rounds):
            p = cells.get((i, j))
            if p is None:
                row.append("[dim]…[/dim]")
                continue
            text = _short(p.action.to_call()) if p.parse_error is None else "[red]unparsable[/red]"
            if p.parse_error is None and p.action.key() == vote_key:
                text = f"[bold green]{text}[/bold green]"
            row.append(text)
        table.add_row(str(i), *row)
    return table


class LiveView:
    """Prints a running team to the terminal from its event stream (``team.stream``): the
    task, each step's n x m matrix filling in as proposals land (on a terminal; elsewhere the
    finished matrix), the vote, the result. stderr stays free for errors."""

    def __init__(self, *, quiet: bool = False, console: Any = None) -> None:
        from rich.console import Console

        self.console = console or Console(highlight=False)
        self.quiet = quiet
        self._shape = (0, 0)
        self._cells: dict[tuple[int, int], Any] = {}
        self._live: Any = None

    def status(self, text: str) -> None:
        self.console.print(f"[dim]{text}[/dim]")

    def team(self, team: Any) -> None:
        cfg = team.config
        self.console.print(
            f"team: {cfg.n_agents} agents x {cfg.rounds} rounds, topology {team.topology.describe()}, "
            f"{team.supersteps} supersteps per step, temperatures "
            f"{[cfg.agent_temperature(i) for i in range(cfg.n_agents)]}"
        )

    def episode_start(self, k: int, total: int, env: str | None, seed: int | None) -> None:
        self.console.rule(f"episode {k + 1}/{total}  {env or ''}  seed={seed}")

    def handle(self, event: Event) -> None:
        """Show one event of the stream."""
        if isinstance(event, EpisodeStarted):
            self._shape = (event.n_agents, event.rounds)
            if not self.quiet:
                self.console.print(f"task: [bold]{event.task}[/bold]")
        elif isinstance(event, EpisodeEnded):
            self.close()
            self.episode_end(event.result)
        elif self.quiet:
            return
        elif isinstance(event, StepStarted):
            self._cells = {}
            if self.console.is_terminal:
                from rich.live import Live

                self._live = Live(self._table(event.t), console=self.console, auto_refresh=False, transient=True)
                self._live.start()
        elif isinstance(event, ProposalMade):
            self._cells[(event.agent, event.round)] = event.proposal
            if self._live is not None:
                self._live.update(self._table(event.t), refresh=True)
        elif isinstance(event, VoteDecided):
            self.close()
            self._vote(event)
        elif isinstance(event, StepEnded):
            self._step_end(event.record)

    def close(self) -> None:
        """Stop a live matrix still on screen (after an error, or at the vote)."""
        if self._live is not None:
            self._live.stop()
            self._live = None

    def _table(self, t: int, vote: Any = None):
        return matrix_table(t, self._cells, *self._shape, vote=vote)

    def _vote(self, event: VoteDecided) -> None:
        self.console.print(self._table(event.t, event.vote))
        counts = ", ".join(f"{a} x{c}" for a, c in event.tally[:4])
        tie = f" (tie broken by {event.tie_break})" if event.tie_break else ""
        self.console.print(f"vote: [bold]{event.action.to_call()}[/bold] {event.votes}/{event.total}{tie}  [{counts}]")

    def _step_end(self, record: Any) -> None:
        result = f"reward {record.reward:+g}" + (" done" if record.done else "")
        err = f"  [red]{record.error}[/red]" if record.error else ""
        obs_err = record.observation.last_action_error
        self.console.print(
            f"{result}  team {record.timings.get('team_s', 0):.1f}s{err}"
            + (f"  (previous action failed: {obs_err})" if obs_err else "")
        )

    def episode_end(self, result: Any) -> None:
        if result.success:
            mark = "[green]success[/green]"
        elif result.ended:
            mark = "[red]failure[/red]"
        else:
            mark = "[yellow]stopped[/yellow] (max steps or error)"
        err = f"  error: {result.error}" if result.error else ""
        trace = f"  trace: {result.trace_path}" if result.trace_path else ""
        self.console.print(f"{mark}  reward {result.reward:+g} in {result.n_steps} steps, {result.duration_s:.1f}s{err}{trace}")

    def summary(self, results: Sequence[Any]) -> None:
        n = len(results)
        wins = sum(r.success for r in results)
        steps = sum(r.n_steps for r in results)
        secs = sum(r.duration_s for r in results)
        self.console.rule("summary")
        self.console.print(
            f"episodes {n}  success {wins}/{n} ({100 * wins / max(n, 1):.0f}%)  "
            f"steps {steps}  time {secs:.1f}s ({secs / max(steps, 1):.1f}s/step)"
        )
