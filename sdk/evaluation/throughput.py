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

import dataclasses
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from collabui.config import TeamConfig
from collabui.errors import ConfigError

if TYPE_CHECKING:
    from collabui.evaluation.miniwob import MiniWoBEvalConfig

__all__ = ["ThroughputConfig", "ThroughputRow", "measure_throughput", "format_throughput"]


#: Team fields the benchmark does not vary (no flag): what the evaluation sets itself, and the
#: screenshots (off: they cost time no figure here is about).
_TEAM_FIELDS_SET_HERE = ("adapters", "action_space", "batch_fallback_s", "screenshots")


@dataclass(frozen=True)
class ThroughputConfig:
    """One throughput measurement (``collabui eval throughput``'s flags). ``team`` None is the
    model's default team (:func:`collabui.evaluation.miniwob.default_team`: 1x1 for the
    baselines, else 4x3); its flags (``--agents``, ``--rounds``, ``--max-steps``, ``--seed``...)
    are TeamConfig's own."""

    model: str = field(default="lexical", metadata={"help": "model spec (lexical: environment-bound)"})
    workers: tuple[int, ...] = field(default=(1, 2, 4), metadata={
        "help": "worker counts to time, e.g. 1,2,4", "metavar": "N"})
    tasks: str = field(default="easy", metadata={"help": "suite or comma-separated task names"})
    episodes: int = field(default=2, metadata={"help": "episodes per task"})
    ray: str | None = field(default=None, metadata={
        "help": "run every count as Ray actors on the cluster at ADDRESS", "metavar": "ADDRESS"})
    team: TeamConfig | None = field(default=None, metadata={
        "help": "the team (None: the model's default)", "skip_flags": _TEAM_FIELDS_SET_HERE})

    def __post_init__(self) -> None:
        if not self.workers or min(self.workers) < 1:
            raise ConfigError(f"--workers takes worker counts >= 1 like 1,2,4, got {self.workers!r}")
        if self.episodes < 1:
            raise ConfigError("--episodes must be >= 1")

    def evaluation(self, workers: int) -> MiniWoBEvalConfig:
        """The evaluation timed with ``workers`` workers."""
        from collabui.evaluation.miniwob import MiniWoBEvalConfig, default_team

        team = self.team if self.team is not None else default_team(self.model)
        return MiniWoBEvalConfig(model=self.model, tasks=self.tasks, episodes=self.episodes, workers=workers,
                                 ray=self.ray, team=dataclasses.replace(team, screenshots=False))


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
    from collabui.evaluation.miniwob import evaluate_miniwob

    rows = []
    for workers in config.workers:
        evaluation = config.evaluation(workers)
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
