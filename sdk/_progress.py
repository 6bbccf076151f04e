"""Progress bars for loops that take minutes: episodes, records, pages, traces, demonstrations.

A bar is drawn only where a person watches: stderr is a terminal and the ``collabui`` logger
shows INFO (the CLI's default; ``--quiet`` sets WARNING, and a library user who configured no
logging sees nothing either). In pipes, CI logs and tests nothing is drawn and the per-item log
lines are the record. While a bar is live, rich redirects stderr, so those log lines still
print, above the bar. TRL draws its own bar for training steps.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["Advance", "bars_wanted", "progress_bar"]

#: ``advance(n=1)``: n more items done.
Advance = Callable[..., None]


def bars_wanted() -> bool:
    """Whether a bar would be drawn now (terminal stderr and INFO enabled for ``collabui``)."""
    isatty = getattr(sys.stderr, "isatty", None)
    return bool(isatty and isatty()) and logging.getLogger("collabui").isEnabledFor(logging.INFO)


def _skip(n: int = 1) -> None:
    pass


@contextmanager
def progress_bar(total: int, description: str, *, done: int = 0, enabled: bool = True) -> Iterator[Advance]:
    """A rich progress bar on stderr for ``total`` items, ``done`` of them finished already
    (a resumed run); yields ``advance(n=1)``. Draws nothing unless ``enabled`` and
    :func:`bars_wanted`; the yielded function is then a no-op."""
    if not (enabled and total > 0 and bars_wanted()):
        yield _skip
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TextColumn("eta"), TimeRemainingColumn())
    with Progress(*columns, console=Console(stderr=True)) as bar:
        task = bar.add_task(description, total=total, completed=done)
        yield lambda n=1: bar.advance(task, n)
