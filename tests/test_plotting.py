"""The shared plot scaffolding: files written headless, figures closed even on errors."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from collabui._plotting import figure, tidy
from collabui.errors import ConfigError


def test_figure_writes_and_closes(tmp_path: Path) -> None:
    import matplotlib.pyplot as plt

    target = tmp_path / "deep" / "plot.png"
    with figure(target, 2, figsize=(4, 2)) as (_, (left, right)):
        left.plot([0, 1], [1, 0], label="loss")
        tidy((left, right), xlabel="step")
    assert target.stat().st_size > 0 and plt.get_fignums() == []
    assert left.get_xlabel() == "step" and left.get_legend() is not None and right.get_legend() is None


def test_figure_closed_and_nothing_written_when_drawing_fails(tmp_path: Path) -> None:
    import matplotlib.pyplot as plt

    with pytest.raises(ZeroDivisionError), figure(tmp_path / "p.png", figsize=(2, 2)):
        1 / 0  # noqa: B018 - the drawing code failing
    assert plt.get_fignums() == [] and not (tmp_path / "p.png").exists()


def test_missing_matplotlib_is_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ConfigError, match="pip install matplotlib"), figure(tmp_path / "p.png", figsize=(2, 2)):
        pass


def test_report_plots_draw_from_plain_dicts(tmp_path: Path) -> None:
    from collabui.training.marl_report import plot_marl_report
    from collabui.training.report import plot_dpo_report

    agents = [{"agent": 0, "adapter": "agent0", "loss": [[1, 0.69], [2, 0.5]], "margins": [[1, 0.0], [2, 0.3]]},
              {"agent": 1, "adapter": "agent1", "loss": [], "status": "skipped"}]
    assert plot_dpo_report({"agents": agents}, tmp_path / "dpo.png").stat().st_size > 0
    marl = {"before": {"success_rate": 0.25},
            "iterations": [{"iteration": 0, "eval": {"success_rate": 0.5}, "train": {"success_rate": 0.4},
                            "dpo": {"agents": agents}}]}
    assert plot_marl_report(marl, tmp_path / "marl.png").stat().st_size > 0
