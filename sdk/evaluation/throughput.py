"""Episodes per hour against the number of workers: the scale-out benchmark of ``eval miniwob``.

    python -m collabui.evaluation.throughput --model lexical --workers 1,2,4 --tasks easy --episodes 2

For each worker count it runs the same MiniWoB++ evaluation (same tasks, episodes and seeds)
into a fresh temporary folder and prints wall seconds and episodes per hour, start-up included
(worker processes, models and browsers): what a user waits for with a run of that size. One
worker runs in this process, as ``eval miniwob`` does; more run on worker processes, or as Ray
actors with ``--ray ADDRESS`` (then every count does). Success rates are printed too: they must
be equal across counts (same seeds, same results). Not a test: figures depend on the machine
and its load; run it on a quiet one.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from collabui.errors import CollabUIError, ConfigError

__all__ = ["ThroughputRow", "measure_throughput", "format_throughput", "main"]


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


def measure_throughput(counts: Sequence[int], *, model: str = "lexical", tasks: str = "easy",
                       episodes: int = 2, max_steps: int = 10, seed: int = 0, ray: str | None = None,
                       env_factory: Any = None) -> list[ThroughputRow]:
    """Run the evaluation once per worker count (each in a fresh folder) and time it."""
    from collabui.evaluation.miniwob import MiniWoBEvalConfig, default_team, evaluate_miniwob

    rows = []
    for workers in counts:
        config = MiniWoBEvalConfig(model=model, tasks=tasks, episodes=episodes, workers=workers, ray=ray,
                                   team=default_team(model, max_steps=max_steps, seed=seed))
        with tempfile.TemporaryDirectory(prefix="collabui-throughput-") as out:
            started = time.perf_counter()
            results = evaluate_miniwob(config, out, env_factory=env_factory, progress=False)
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


def _counts(text: str) -> list[int]:
    try:
        counts = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        raise ConfigError(f"--workers takes worker counts >= 1 like 1,2,4, got {text!r}")
    return counts


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m collabui.evaluation.throughput",
                                     description="MiniWoB++ episodes per hour against worker count")
    parser.add_argument("--model", default="lexical", help="model spec (default lexical: environment-bound)")
    parser.add_argument("--workers", default="1,2,4", help="worker counts, comma-separated (default 1,2,4)")
    parser.add_argument("--tasks", default="easy", help="suite or task names (default easy)")
    parser.add_argument("--episodes", type=int, default=2, help="episodes per task (default 2)")
    parser.add_argument("--max-steps", type=int, default=10, help="steps per episode (default 10)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--ray", default=None, metavar="ADDRESS", help="run every count as Ray actors there")
    args = parser.parse_args(argv)
    try:
        rows = measure_throughput(_counts(args.workers), model=args.model, tasks=args.tasks,
                                  episodes=args.episodes, max_steps=args.max_steps, seed=args.seed,
                                  ray=args.ray)
    except CollabUIError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(format_throughput(rows), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
