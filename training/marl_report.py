"""The report of an iterative MARL run (``marl_report.json``) and its plot (``marl_report.png``)."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["IterationReport", "MARLReport", "plot_marl_report"]


@dataclass
class IterationReport:
    """One iteration: the DAG used, success of the training rollouts and of the held-out
    evaluation (``summarize`` dicts: ``success_rate``, ``per_task``...), labelling and pair
    statistics, per-agent DPO results and seconds per stage."""

    iteration: int
    topology: dict[str, Any]
    train: dict[str, Any] = field(default_factory=dict)
    eval: dict[str, Any] = field(default_factory=dict)
    labels: dict[str, Any] = field(default_factory=dict)
    pairs: dict[str, Any] = field(default_factory=dict)
    dpo: dict[str, Any] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)

    def pairs_per_agent(self) -> dict[int, int]:
        return {int(k): int(v) for k, v in self.pairs.get("per_agent", {}).items()}


@dataclass
class MARLReport:
    """The result of :func:`collabui.training.marl.run_marl` (JSON-serialisable).

    ``before`` is the held-out evaluation of the untrained team; ``iterations[k].eval`` the one
    after iteration k. ``complete`` is False while iterations are missing.
    """

    config: dict[str, Any]
    out_dir: str
    before: dict[str, Any] = field(default_factory=dict)
    iterations: list[IterationReport] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)
    complete: bool = False

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self, path: str | Path) -> Path:
        """Write the report atomically (temp file, then rename) and return the path."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=2), encoding="utf-8")
        tmp.replace(path)
        return path

    @classmethod
    def from_json(cls, path: str | Path) -> MARLReport:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        data["iterations"] = [IterationReport(**it) for it in data.get("iterations", [])]
        return cls(**data)

    def success_curve(self) -> list[tuple[str, float | None]]:
        """Held-out success rate: ``("before", r)`` then ``("iter0", r)``, ..."""
        return [("before", self.before.get("success_rate"))] + [
            (f"iter{it.iteration}", it.eval.get("success_rate")) for it in self.iterations]


def plot_marl_report(report: MARLReport | dict[str, Any], path_png: str | Path) -> Path:
    """Success rate per iteration (held-out eval from "before" on, training rollouts) and the
    DPO (or RFT) loss of every agent, iterations laid end to end, into ``path_png`` (Agg backend)."""
    from collabui._plotting import figure, tidy

    data = report.to_dict() if hasattr(report, "to_dict") else dict(report)
    iterations = data.get("iterations", [])
    path = Path(path_png)
    with figure(path, 2, figsize=(11, 4)) as (_, (ax_ok, ax_loss)):
        labels = ["before"] + [f"iter{it['iteration']}" for it in iterations]
        held_out = [data.get("before", {}).get("success_rate")] + [it["eval"].get("success_rate") for it in iterations]
        xs = list(range(len(labels)))
        ax_ok.plot(xs, [_nan(v) for v in held_out], marker="o", label="held-out eval")
        ax_ok.plot(xs[1:], [_nan(it["train"].get("success_rate")) for it in iterations], marker="s",
                   linestyle="--", label="training rollouts")
        ax_ok.set_xticks(xs, labels)
        ax_ok.set_ylim(-0.05, 1.05)
        ax_ok.set_title("success rate")
        _plot_losses(ax_loss, iterations, str(data.get("config", {}).get("objective", "dpo")).upper())
        tidy((ax_ok, ax_loss))
    return path


def _plot_losses(ax: Any, iterations: list[dict[str, Any]], objective: str = "DPO") -> None:
    """Each agent's loss curve, iteration k's steps after iteration k-1's (dotted separators)."""
    curves: dict[str, tuple[list[float], list[float]]] = {}
    offset, untrained = 0, []
    for it in iterations:
        longest = 0
        for agent in it.get("dpo", {}).get("agents", []):
            name = agent.get("adapter") or f"agent{agent.get('agent')}"
            points = agent.get("loss") or []
            if not points:
                untrained.append(f"{name}@iter{it['iteration']} ({agent.get('status')})")
            xs, ys = curves.setdefault(name, ([], []))
            for step, value in points:
                xs.append(offset + step)
                ys.append(value)
                longest = max(longest, int(step))
        offset += longest
        ax.axvline(offset + 0.5, color="grey", linestyle=":", linewidth=0.8)
    for name, (xs, ys) in sorted(curves.items()):
        if xs:
            ax.plot(xs, ys, marker=".", label=name)
    ax.set_xlabel(f"{objective} step (iterations end to end)")
    title = f"{objective} loss"
    if untrained:
        title += "\nno curve: " + ", ".join(untrained[:6]) + (" ..." if len(untrained) > 6 else "")
    ax.set_title(title, fontsize="small" if untrained else None)


def _nan(value: Any) -> float:
    return float("nan") if value is None else float(value)
