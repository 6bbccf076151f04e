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
the terminal masked: the ``collabui`` records, the warnings and errors other libraries log
(httpx, openai, urllib3 quote the URLs they call; a second handler on the root logger takes them
instead of :data:`logging.lastResort`), an exception no command expected
(:func:`unexpected_error`) and one a thread left (:func:`thread_excepthook`).
"""

from __future__ import annotations

import argparse
import logging
import sys
import threading
import traceback

from collabui.redaction import redact_url

__all__ = ["RedactingFormatter", "add_verbosity_flags", "configure", "level_of", "thread_excepthook",
           "unexpected_error"]

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
    """Send ``collabui.*`` records at ``level`` and above to stderr, and other libraries'
    warnings and errors (replacing an earlier call's handlers, so repeated ``main()`` calls in
    one process do not print twice). Every line is masked (:class:`RedactingFormatter`)."""
    fmt = "%(name)s: %(message)s" if level <= logging.DEBUG else "%(message)s"
    _install(logging.getLogger(ROOT), _StderrHandler(), fmt).setLevel(level)
    others = _StderrHandler(logging.WARNING)
    others.addFilter(_not_ours)  # ours have their own handler (and propagate to the root)
    _install(logging.getLogger(), others, "%(name)s: %(message)s")


def _install(logger: logging.Logger, handler: logging.Handler, fmt: str) -> logging.Logger:
    for old in [h for h in logger.handlers if isinstance(h, _StderrHandler)]:
        logger.removeHandler(old)
    handler.setFormatter(RedactingFormatter(fmt))
    logger.addHandler(handler)
    return logger


def _not_ours(record: logging.LogRecord) -> bool:
    return record.name != ROOT and not record.name.startswith(ROOT + ".")


def unexpected_error(exc: BaseException) -> str:
    """The one ``error:`` line for an exception no command expected (a bug, a library's own
    error): its type and first line, credentials masked. Its traceback goes to the log at
    DEBUG (``--verbose`` shows it, masked too)."""
    logging.getLogger(f"{ROOT}.cli").debug("traceback of the error below", exc_info=exc)
    lines = str(exc).strip().splitlines()
    text = f"{type(exc).__name__}: {lines[0][:500]}" if lines else type(exc).__name__
    return f"error: {redact_url(text)} (unexpected; run again with --verbose for the traceback)"


def thread_excepthook(args: threading.ExceptHookArgs) -> None:
    """``threading.excepthook`` for the command line: a thread's uncaught exception printed
    as Python would, with credentials masked."""
    if args.exc_type is SystemExit:
        return
    name = args.thread.name if args.thread is not None else "?"
    text = "".join(traceback.format_exception(args.exc_type, args.exc_value, args.exc_traceback))
    sys.stderr.write(redact_url(f"Exception in thread {name}:\n{text}"))
