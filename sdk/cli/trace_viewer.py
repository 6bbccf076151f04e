"""``collabui view PATH``: a trace or run folder as one static HTML page (see collabui.viewer).

Not to be confused with :mod:`collabui.cli.view`, the live terminal view of ``collabui run``.
"""

from __future__ import annotations

import argparse
import logging
from typing import Any

__all__ = ["add_commands", "run_command"]

#: Notes (silenced by -q), warnings and errors, on stderr (configured by collabui.cli._log).
log = logging.getLogger(__name__)


def add_commands(sub: Any) -> None:
    """Register ``view`` on the top-level subparsers."""
    p = sub.add_parser("view", help="write a trace or run folder as one self-contained HTML page",
                       description="Render an episode trace (.jsonl) or a run folder (collabui eval --out, "
                       "--trace-dir) as one static HTML file: per step the screenshot, observation, DAG, "
                       "n x m matrix, vote, reward and critic labels. Left/right arrows move between steps.")
    p.add_argument("path", help="a trace .jsonl file or a run folder")
    p.add_argument("--out", default=None,
                   help="the HTML file (default: X.html beside trace X.jsonl, DIR/index.html for a folder)")
    p.add_argument("--open", action="store_true", help="open the page in the default browser")
    p.add_argument("--labels", action="append", default=[], metavar="FILE",
                   help="critic labels (collabui train label output); repeatable; default labels*.jsonl "
                   "beside the traces")
    p.add_argument("--pairs", action="append", default=[], metavar="FILE",
                   help="preference pairs (collabui train pairs output); repeatable; default *pairs*.jsonl "
                   "beside the traces")


def run_command(args: argparse.Namespace) -> int:
    """Run a parsed ``collabui view``; return the exit code (1 when --open found no browser)."""
    from collabui.viewer import write_view

    out = write_view(args.path, args.out, labels=args.labels, pairs=args.pairs)
    print(f"wrote {out}")
    if args.open:
        import webbrowser

        if not webbrowser.open(out.resolve().as_uri()):
            log.error("no browser to open %s; open it yourself", out)
            return 1
    return 0
