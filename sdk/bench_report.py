"""The arithmetic and the printed table of ``collabui bench`` (no model, no timing here).

A :class:`BackendTimes` holds what was measured on one backend, every timing repeated
(``--repeats``) and summarised as a :class:`Spread` (median and min-max); :func:`evaluate_targets`
turns the measurements into the issue's targets, each with its value, its limit and whether it
was met; :func:`format_report` prints both. Kept apart from the measuring code so the numbers
can be unit-tested on made-up inputs.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

__all__ = [
    "BackendTimes",
    "Spread",
    "Target",
    "evaluate_targets",
    "format_report",
    "report_dict",
    "BOUND_FACTOR",
    "SPEEDUP_TARGET",
    "TOKENS_FACTOR",
]

#: Optimized team step at most this many times (supersteps x single-call time).
BOUND_FACTOR = 1.25
#: Team step on the vLLM server at least this many times faster than the naive local team.
SPEEDUP_TARGET = 3.0
#: Prompt tokens computed per team step at most this many times the unique ones.
TOKENS_FACTOR = 1.5


@dataclass(frozen=True)
class Spread:
    """Repeated measurements summarised: their median and their range (min-max).

    With the 3 repeats of a bench an interquartile range says nothing more than the range, so
    the range it is.
    """

    median: float
    low: float
    high: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        if not values:
            raise ValueError("a spread needs at least one measurement")
        return cls(statistics.median(values), min(values), max(values))

    def text(self, fmt: str = "{:.2f}") -> str:
        """``median [min-max]``, e.g. ``1.10 [1.05-1.21]``."""
        return f"{fmt.format(self.median)} [{fmt.format(self.low)}-{fmt.format(self.high)}]"


@dataclass(frozen=True)
class BackendTimes:
    """Measurements on one backend (seconds; token counts per team step; None = not measured).

    Timings are one value per repeat, in the order measured; repeat k measured its single
    call, its naive step and its team step one after another, so the k-th values of the three
    saw the same machine load (the bound ratio pairs them).

    Attributes:
        backend: ``local`` or ``vllm``.
        single_runs: one single-agent, single-round step (one model call), per repeat.
        naive_runs: the n x m team step as sequential batch-1 calls, no prefix sharing.
        team_runs: the optimized team step (superstep batching, prefix reuse).
        supersteps: supersteps of the team step (L + m - 1).
        calls: model calls in a team step (n x m).
        prompt_tokens_total: prompt tokens of the optimized step's requests.
        prompt_tokens_computed: of those, tokens the backend actually prefilled.
        unique_prompt_tokens: distinct token prefixes among the requests (the least possible).
        episodes: MiniWoB++ episodes run for the throughput figure.
        rollout_s: wall time of those episodes.
        browsers: browsers (concurrent episodes) sharing the model.
    """

    backend: str
    single_runs: tuple[float, ...]
    naive_runs: tuple[float, ...]
    team_runs: tuple[float, ...]
    supersteps: int
    calls: int
    prompt_tokens_total: int | None = None
    prompt_tokens_computed: int | None = None
    unique_prompt_tokens: int | None = None
    episodes: int = 0
    rollout_s: float | None = None
    browsers: int = 1

    def __post_init__(self) -> None:
        counts = {len(self.single_runs), len(self.naive_runs), len(self.team_runs)}
        if counts != {self.repeats} or not self.repeats:
            raise ValueError(f"{self.backend}: every timing needs one value per repeat, got {sorted(counts)}")

    @property
    def repeats(self) -> int:
        return len(self.team_runs)

    @property
    def single(self) -> Spread:
        return Spread.of(self.single_runs)

    @property
    def naive(self) -> Spread:
        return Spread.of(self.naive_runs)

    @property
    def team(self) -> Spread:
        return Spread.of(self.team_runs)

    @property
    def single_s(self) -> float:
        return self.single.median

    @property
    def naive_s(self) -> float:
        return self.naive.median

    @property
    def team_s(self) -> float:
        return self.team.median

    @property
    def bound_s(self) -> float:
        """The latency bound: supersteps x single-call time (its median)."""
        return self.supersteps * self.single_s

    @property
    def bound_ratio(self) -> Spread:
        """team step / (supersteps x single call), one ratio per repeat."""
        return Spread.of([_ratio(t, self.supersteps * s) for s, t in zip(self.single_runs, self.team_runs, strict=True)])

    @property
    def team_over_bound(self) -> float:
        """The median of the per-repeat ratios (the target's value)."""
        return self.bound_ratio.median

    @property
    def naive_over_team(self) -> float:
        return _ratio(self.naive_s, self.team_s)

    @property
    def computed_over_unique(self) -> float | None:
        if self.prompt_tokens_computed is None or not self.unique_prompt_tokens:
            return None
        return self.prompt_tokens_computed / self.unique_prompt_tokens

    @property
    def episodes_per_hour(self) -> float | None:
        if not self.episodes or not self.rollout_s:
            return None
        return self.episodes * 3600.0 / self.rollout_s


@dataclass(frozen=True)
class Target:
    """One target of the issue: ``value`` compared with ``limit`` (``<=`` or ``>=``)."""

    name: str
    value: float | None
    limit: float
    op: str

    @property
    def met(self) -> bool | None:
        """True/False, or None when the value could not be measured."""
        if self.value is None:
            return None
        return self.value <= self.limit if self.op == "<=" else self.value >= self.limit

    @property
    def verdict(self) -> str:
        return {True: "met", False: "MISSED", None: "n/a"}[self.met]


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 else float("inf")


def evaluate_targets(results: Mapping[str, BackendTimes]) -> list[Target]:
    """The issue's targets for the backends in ``results`` (keys ``local`` and/or ``vllm``)."""
    targets = []
    for name, r in results.items():
        targets.append(Target(f"{name}: team step / (supersteps x single call)", r.team_over_bound, BOUND_FACTOR, "<="))
    if "local" in results and "vllm" in results:
        speedup = _ratio(results["local"].naive_s, results["vllm"].team_s)
        targets.append(Target("vllm team step speed-up over naive local team", speedup, SPEEDUP_TARGET, ">="))
    for name, r in results.items():
        targets.append(Target(f"{name}: prompt tokens computed / unique", r.computed_over_unique, TOKENS_FACTOR, "<="))
    return targets


def _num(value: float | int | None, fmt: str = "{:.2f}") -> str:
    return "n/a" if value is None else fmt.format(value)


def format_report(results: Mapping[str, BackendTimes], header: str = "") -> str:
    """The benchmark's printed table: per-backend figures, then every target with its verdict."""
    names = list(results)
    rows: list[tuple[str, list[str]]] = [
        ("repeats (timings: median [min-max])", [str(results[n].repeats) for n in names]),
        ("single-agent step (s)", [results[n].single.text() for n in names]),
        ("naive team step, sequential (s)", [results[n].naive.text() for n in names]),
        ("optimized team step (s)", [results[n].team.text() for n in names]),
        ("supersteps / model calls", [f"{results[n].supersteps} / {results[n].calls}" for n in names]),
        ("bound = supersteps x single (s)", [_num(results[n].bound_s) for n in names]),
        ("team / bound", [results[n].bound_ratio.text() for n in names]),
        ("naive / team (speed-up)", [_num(results[n].naive_over_team) for n in names]),
        ("prompt tokens requested / step", [_num(results[n].prompt_tokens_total, "{}") for n in names]),
        ("prompt tokens computed / step", [_num(results[n].prompt_tokens_computed, "{}") for n in names]),
        ("unique prompt tokens / step", [_num(results[n].unique_prompt_tokens, "{}") for n in names]),
        ("computed / unique", [_num(results[n].computed_over_unique) for n in names]),
        ("rollout episodes/hour (K browsers)",
         [f"{_num(results[n].episodes_per_hour, '{:.0f}')} (K={results[n].browsers}, {results[n].episodes} ep)"
          if results[n].episodes else "n/a" for n in names]),
    ]
    width = max(len(label) for label, _ in rows)
    cols = [max(len(n), *(len(cells[k]) for _, cells in rows)) for k, n in enumerate(names)]
    lines = [header] if header else []
    lines.append(" " * width + "  " + "  ".join(n.rjust(c) for n, c in zip(names, cols, strict=True)))
    for label, cells in rows:
        lines.append(label.ljust(width) + "  " + "  ".join(v.rjust(c) for v, c in zip(cells, cols, strict=True)))
    lines.append("")
    lines.append("targets:")
    for t in evaluate_targets(results):
        lines.append(f"  [{t.verdict:>6}] {t.name}: {_num(t.value)} (target {t.op} {t.limit:g})")
    return "\n".join(lines)


def _phases(r: BackendTimes) -> list[tuple[str, Spread]]:
    return [("single", r.single), ("naive", r.naive), ("team", r.team)]


def report_dict(results: Mapping[str, BackendTimes], settings: Mapping[str, Any]) -> dict[str, Any]:
    """A JSON-ready record of the run: settings, raw measurements (``*_runs``, one per repeat),
    their medians (``single_s``, ...) and ranges (``single_s_range``: [min, max]), derived
    ratios (``team_over_bound``: the median per-repeat ratio, ``team_over_bound_range``) and
    the targets."""
    backends = {}
    for name, r in results.items():
        backends[name] = {
            **asdict(r),
            "repeats": r.repeats,
            **{f"{phase}_s": spread.median for phase, spread in _phases(r)},
            **{f"{phase}_s_range": [spread.low, spread.high] for phase, spread in _phases(r)},
            "bound_s": r.bound_s,
            "team_over_bound": r.team_over_bound,
            "team_over_bound_range": [r.bound_ratio.low, r.bound_ratio.high],
            "naive_over_team": r.naive_over_team,
            "computed_over_unique": r.computed_over_unique,
            "episodes_per_hour": r.episodes_per_hour,
        }
    targets = [{"name": t.name, "value": t.value, "limit": t.limit, "op": t.op, "met": t.met}
               for t in evaluate_targets(results)]
    return {"settings": dict(settings), "backends": backends, "targets": targets}
