"""Terminal rendering of a running team: each step's n x m action matrix, the vote, the result."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["LiveView", "matrix_table"]


def _short(text: str, limit: int = 34) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def matrix_table(record: Any):
    """A rich Table of one step: rows are agents, columns rounds, cells the proposed actions."""
    from rich.table import Table

    step = record.team_step
    n_rounds = len(step.proposals[0])
    vote_key = step.vote.action.key()
    table = Table(title=f"step {record.t}: {n_rounds}-round action matrix", title_justify="left")
    table.add_column("agent", justify="right")
    for j in range(n_rounds):
        table.add_column(f"round {j}")
    for row in step.proposals:
        cells = []
        for p in row:
            text = _short(p.action.to_call()) if p.parse_error is None else "[red]unparsable[/red]"
            if p.parse_error is None and p.action.key() == vote_key:
                text = f"[bold green]{text}[/bold green]"
            cells.append(text)
        table.add_row(str(row[0].agent), *cells)
    return table


class LiveView:
    """Prints progress to the terminal (stderr stays free for errors)."""

    def __init__(self, *, quiet: bool = False) -> None:
        from rich.console import Console

        self.console = Console(highlight=False)
        self.quiet = quiet

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

    def step(self, record: Any) -> None:
        if self.quiet:
            return
        if record.t == 0:
            self.console.print(f"task: [bold]{record.observation.task or ''}[/bold]")
        self.console.print(matrix_table(record))
        vote = record.vote
        counts = ", ".join(f"{a} x{c}" for a, c in vote.counts[:4])
        tie = f" (tie broken by {vote.tie_break})" if vote.tie_break else ""
        self.console.print(
            f"vote: [bold]{vote.action.to_call()}[/bold] {vote.votes}/{vote.total}{tie}  [{counts}]"
        )
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
