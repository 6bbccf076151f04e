"""A static HTML viewer of multi-agent traces (``collabui view``).

One self-contained page per trace or run folder: per step the screenshot the agents saw, the
task, the observation, the step's message DAG, the n x m matrix of thoughts and actions coloured
by action with arrows for what each agent read, the vote, reward and done, and, when found, the
critic's reward matrix and the preference pairs built from it. A run folder also gets success per
task with 95% Wilson intervals and a link per episode. No server and no network: CSS, JS, SVG and
screenshots are inlined. Model output is untrusted and always escaped.

Example:
    >>> from collabui.viewer import write_view
    >>> write_view("runs/eval/traces/miniwob-click-button-0.jsonl")  # doctest: +SKIP
    PosixPath('runs/eval/traces/miniwob-click-button-0.html')
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from collabui.errors import ConfigError
from collabui.viewer.data import ViewInput, load_input
from collabui.viewer.render import render_page

__all__ = ["ViewInput", "load_input", "render_page", "render_view", "default_output", "write_view"]


def default_output(path: str | Path) -> Path:
    """Where the page goes by default: ``X.html`` beside trace ``X.jsonl``, ``DIR/index.html``."""
    source = Path(path)
    return source / "index.html" if source.is_dir() else source.with_suffix(".html")


def render_view(path: str | Path, *, labels: Iterable[str | Path] = (),
                pairs: Iterable[str | Path] = ()) -> str:
    """The HTML page for a trace file or run folder (see :func:`load_input`)."""
    return render_page(load_input(path, labels=labels, pairs=pairs))


def write_view(path: str | Path, out: str | Path | None = None, *, labels: Iterable[str | Path] = (),
               pairs: Iterable[str | Path] = ()) -> Path:
    """Write the page for ``path`` to ``out`` (default :func:`default_output`); return its path.

    Raises:
        ConfigError: bad input (see :func:`load_input`) or an output that cannot be written.
    """
    html = render_view(path, labels=labels, pairs=pairs)
    target = Path(out) if out is not None else default_output(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(html, encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot write {target}: {exc.strerror}; pass a writable --out FILE") from None
    return target
