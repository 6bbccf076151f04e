"""Episodes per hour against the number of workers: the scale-out benchmark of ``eval miniwob``.

    collabui eval throughput --model lexical --workers 1,2,4 --tasks easy --episodes 2

For each worker count it runs the same MiniWoB++ evaluation (same tasks, episodes and seeds)
into a fresh temporary folder and prints wall seconds and episodes per hour, start-up included
(worker processes, models and browsers): what a user waits for with a run of that size. One
worker runs in this process, as ``eval miniwob`` does; more run on worker processes, or as Ray
actors with ``--ray ADDRESS`` (then every count does). Success rates are printed too: they must
be equal across counts (same seeds, same results). Not a test: figures depend on the machine
and its load; run it on a quiet one.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from collabui.errors import ConfigError

__all__ = ["ThroughputConfig", "ThroughputRow", "measure_throughput", "format_throughput"]


@dataclass(frozen=True)
class ThroughputConfig:
    """One throughput measurement (``collabui eval throughput``'s flags)."""

    model: str = field(default="lexical", metadata={"help": "model spec (lexical: environment-bound)"})
    workers: tuple[int, ...] = field(default=(1, 2, 4), metadata={
        "help": "worker counts to time, e.g. 1,2,4", "metavar": "N"})
    tasks: str = field(default="easy", metadata={"help": "suite or comma-separated task names"})
    episodes: int = field(default=2, metadata={"help": "episodes per task"})
    max_steps: int = field(default=10, metadata={"help": "steps per episode"})
    seed: int = field(default=0, metadata={"help": "seed of the episodes' pages"})
    ray: str | None = field(default=None, metadata={
        "help": "run every count as Ray actors on the cluster at ADDRESS", "metavar": "ADDRESS"})

    def __post_init__(self) -> None:
        if not self.workers or min(self.workers) < 1:
            raise ConfigError(f"--workers takes worker counts >= 1 like 1,2,4, got {self.workers!r}")
        if self.episodes < 1 or self.max_steps < 1:
            raise ConfigError("--episodes and --max-steps must be >= 1")


@dataclass(frozen=True)
class ThroughputRow:
    """One worker count's run."""

    workers: int
    episodes: int
    successes: int
    seconds: float

    @property
    def episodes_per_hour(self) -> float:
        return 3600.0 * self.episodes / self.seconds if self.seconds > 0 else float("inf")


def measure_throughput(config: ThroughputConfig, *, env_factory: Any = None) -> list[ThroughputRow]:
    """Run the evaluation once per worker count (each in a fresh folder) and time it."""
    from collabui.evaluation.miniwob import MiniWoBEvalConfig, default_team, evaluate_miniwob

    rows = []
    for workers in config.workers:
        evaluation = MiniWoBEvalConfig(model=config.model, tasks=config.tasks, episodes=config.episodes,
                                       workers=workers, ray=config.ray,
                                       team=default_team(config.model, max_steps=config.max_steps, seed=config.seed))
        with tempfile.TemporaryDirectory(prefix="collabui-throughput-") as out:
            started = time.perf_counter()
            results = evaluate_miniwob(evaluation, out, env_factory=env_factory, progress=False)
            seconds = time.perf_counter() - started
        rate = results["overall"]["success_rate"]
        rows.append(ThroughputRow(workers, int(rate["n"]), int(rate["successes"]), seconds))
    return rows


def format_throughput(rows: Sequence[ThroughputRow]) -> str:
    """A Markdown table: workers, episodes, successes, seconds, episodes per hour, speed-up."""
    lines = ["| workers | episodes | successes | seconds | episodes/hour | speed-up |",
             "|---:|---:|---:|---:|---:|---:|"]
    base = rows[0].episodes_per_hour if rows else 0.0
    for row in rows:
        lines.append(f"| {row.workers} | {row.episodes} | {row.successes} | {row.seconds:.1f} | "
                     f"{row.episodes_per_hour:.0f} | {row.episodes_per_hour / base:.2f}x |")
    return "\n".join(lines) + "\n"
