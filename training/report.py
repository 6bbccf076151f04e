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
    from collabui._plotting import figure, tidy

    data = report.to_dict() if hasattr(report, "to_dict") else dict(report)
    path = Path(path_png)
    with figure(path, 2, figsize=(10, 4)) as (fig, (ax_loss, ax_margin)):
        without_curve = []
        for agent in data.get("agents", []):
            label = agent.get("adapter") or f"agent{agent.get('agent')}"
            if not agent.get("loss"):
                without_curve.append(f"{label} ({agent.get('status')})")
                continue
            ax_loss.plot(*zip(*agent["loss"], strict=True), marker=".", label=label)
            if agent.get("margins"):
                ax_margin.plot(*zip(*agent["margins"], strict=True), marker=".", label=label)
        ax_loss.set_title("DPO loss")
        ax_margin.set_title("reward margin (chosen - rejected)")
        tidy((ax_loss, ax_margin), xlabel="step")
        if without_curve:
            fig.suptitle("no curve: " + ", ".join(without_curve), fontsize="small")
    return path
