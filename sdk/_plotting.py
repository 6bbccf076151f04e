"""The matplotlib scaffolding every report plot shares: a headless figure saved on exit.

matplotlib is imported here, lazily, with the Agg backend: plots are files, written from
training jobs and CLIs that have no display.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from collabui.errors import ConfigError

__all__ = ["figure", "tidy"]


@contextmanager
def figure(path: str | Path, ncols: int = 1, *, figsize: tuple[float, float], dpi: int = 100) -> Iterator[tuple[Any, Any]]:
    """``with figure(path, 2, figsize=(10, 4)) as (fig, (ax1, ax2)):`` draw; on exit the figure
    is laid out, written to ``path`` (parent folders created) and closed, even on errors.

    Raises:
        ConfigError: matplotlib is not installed.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only: never opens a window, works without a display
        import matplotlib.pyplot as plt
    except ImportError:
        raise ConfigError("plots need matplotlib; run `pip install matplotlib` (or the [train] extra)") from None
    fig, axes = plt.subplots(1, ncols, figsize=figsize)
    try:
        yield fig, axes
        fig.tight_layout()
        target = Path(path).expanduser()
        target.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(target, dpi=dpi)
    finally:
        plt.close(fig)


def tidy(axes: Iterable[Any], *, xlabel: str | None = None, legend_size: str = "small") -> None:
    """A light grid on each axis, its x label, and a legend when something is labelled."""
    for ax in axes:
        if xlabel:
            ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=legend_size)
