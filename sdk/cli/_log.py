"""Where the library's diagnostics go when ``collabui`` runs: one handler on the ``collabui`` logger.

Library modules never print progress; each logs to ``logging.getLogger(__name__)`` (all below
``collabui``) and leaves the handling to the application. The command line is that application:
:func:`configure` installs one stderr handler per command, at INFO by default, DEBUG with
``--verbose`` and WARNING with ``--quiet`` (:func:`add_verbosity_flags` gives every command the
same pair). The results a command prints (tables, summaries, paths) stay on stdout; its own
notes on stderr (``written F``, ``starting vLLM``) are INFO records of ``collabui.cli.*``
loggers, so ``--quiet`` drops them, while warnings and errors (``error: ...``) always show.

Every line goes through :class:`RedactingFormatter`, so a model spec with credentials logged
anywhere (``openai:M@https://user:KEY@host/v1``, also inside an exception's traceback) reaches
the terminal masked.
"""

from __future__ import annotations

import argparse
import logging
import sys

from collabui.redaction import redact_url

__all__ = ["RedactingFormatter", "add_verbosity_flags", "configure", "level_of"]

#: The package's root logger: every module's ``logging.getLogger(__name__)`` sits below it.
ROOT = "collabui"


class RedactingFormatter(logging.Formatter):
    """Formats a record, then masks URL credentials (:func:`collabui.redaction.redact_url`) in
    the whole line: the message, its arguments and any traceback. Warnings and errors start
    with ``warning:`` / ``error:``, as the CLI's own error lines do."""

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        if record.levelno >= logging.WARNING:
            text = f"{record.levelname.lower()}: {text}"
        return redact_url(text)


class _StderrHandler(logging.Handler):
    """Writes to whatever ``sys.stderr`` is at the time of the record, not at set-up: tests and
    callers that swap stderr (pytest's capture, a redirect) get the lines."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(self.format(record) + "\n")
            sys.stderr.flush()
        except Exception:  # logging's contract: a failing handler reports, never raises
            self.handleError(record)


def add_verbosity_flags(parser: argparse.ArgumentParser) -> None:
    """``-v/--verbose`` and ``-q/--quiet`` (exclusive) on one command."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument("-v", "--verbose", action="store_true", help="also print debug diagnostics on stderr")
    group.add_argument("-q", "--quiet", action="store_true",
                       help="only warnings and errors on stderr (no progress lines or bars)")


def level_of(args: argparse.Namespace) -> int:
    """The log level the flags ask for (INFO when the command has neither)."""
    if getattr(args, "verbose", False):
        return logging.DEBUG
    return logging.WARNING if getattr(args, "quiet", False) else logging.INFO


def configure(level: int = logging.INFO) -> None:
    """Send ``collabui.*`` records at ``level`` and above to stderr (replacing an earlier call's
    handler, so repeated ``main()`` calls in one process do not print twice)."""
    logger = logging.getLogger(ROOT)
    for old in [h for h in logger.handlers if isinstance(h, _StderrHandler)]:
        logger.removeHandler(old)
    handler = _StderrHandler()
    fmt = "%(name)s: %(message)s" if level <= logging.DEBUG else "%(message)s"
    handler.setFormatter(RedactingFormatter(fmt))
    logger.addHandler(handler)
    logger.setLevel(level)
