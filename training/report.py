"""Plots of training reports (matplotlib, headless Agg backend, imported lazily)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["plot_dpo_report"]


def plot_dpo_report(report: Any, path_png: str | Path) -> Path:
    """Plot DPO loss and reward margin per agent against the step into ``path_png``.

    Args:
        report: a :class:`collabui.training.dpo.DPOReport` (or its ``to_dict()``).
        path_png: where to write the PNG (parent folders are created).

    Returns:
        the written path. Agents without logged steps (resumed without metrics, skipped) are
        listed in the title so an empty curve is never silent.
    """
    import matplotlib

    matplotlib.use("Agg")  # never needs a display; safe to call from a training job
    import matplotlib.pyplot as plt

    data = report.to_dict() if hasattr(report, "to_dict") else dict(report)
    path = Path(path_png)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, (ax_loss, ax_margin) = plt.subplots(1, 2, figsize=(10, 4))
    without_curve = []
    for agent in data.get("agents", []):
        label = agent.get("adapter") or f"agent{agent.get('agent')}"
        if not agent.get("loss"):
            without_curve.append(f"{label} ({agent.get('status')})")
            continue
        ax_loss.plot(*zip(*agent["loss"], strict=True), marker=".", label=label)
        if agent.get("margins"):
            ax_margin.plot(*zip(*agent["margins"], strict=True), marker=".", label=label)
    for ax, title in ((ax_loss, "DPO loss"), (ax_margin, "reward margin (chosen - rejected)")):
        ax.set_xlabel("step")
        ax.set_title(title)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize="small")
    if without_curve:
        fig.suptitle("no curve: " + ", ".join(without_curve), fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
