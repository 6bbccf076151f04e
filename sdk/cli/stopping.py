"""How a command stops: SIGINT / SIGTERM within a bounded time, a closed pipe quietly.

SIGINT and SIGTERM both raise :class:`Interrupted` in the main thread, so the same ``finally``
blocks run for either (each open trace gets its ``end`` record, each checkpoint its status, each
browser ``close()``). Closing a browser whose driver is mid-operation can hang for tens of
seconds (seen: 17 s after Ctrl-C in a MiniWoB++ step), so a watchdog thread woken by the first signal
kills this process's descendants (Playwright's driver, Chromium, worker processes) after
:data:`KILL_AFTER_S` and ends the process after :data:`EXIT_AFTER_S`, having written the ``end``
record of every trace still open in the last :data:`TRACES_BUDGET_S` before: a run always stops within
5 s, with exit 130 (SIGINT) or 143 (SIGTERM), and every trace it wrote ends with an ``end``.

Public so that a script running long work (the cookbook's recipe) stops as ``collabui`` does:
``install(watchdog=False)`` first, ``exit_code(exc)`` on the KeyboardInterrupt.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType

__all__ = ["Interrupted", "install", "exit_code", "exit_now", "received", "quiet_broken_pipe", "kill_descendants",
           "KILL_AFTER_S", "EXIT_AFTER_S", "TRACES_BUDGET_S"]

#: Seconds after the first signal at which the process's descendants are killed.
KILL_AFTER_S = 2.5
#: Seconds after the first signal at which the process exits, cleanup finished or not.
EXIT_AFTER_S = 4.0
#: Seconds before EXIT_AFTER_S at which the watchdog writes the open traces' end records.
TRACES_BUDGET_S = 0.5


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM arrived; ``signum`` says which (a KeyboardInterrupt, so code that
    already cleans up on Ctrl-C does the same on SIGTERM)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


_first: list[int] = []  # the first signal received (one process, one command)


def exit_code(exc: BaseException) -> int:
    """128 + the signal number: 130 for SIGINT (also a plain KeyboardInterrupt), 143 for SIGTERM."""
    return 128 + getattr(exc, "signum", signal.SIGINT)


def received() -> int | None:
    """The first SIGINT / SIGTERM this process got, or None. A library that swallows the
    :class:`Interrupted` (a thread pool's done-callback catching BaseException) lets the command
    go on to fail on the half-made step it left; the exit code must still say "stopped"."""
    return _first[0] if _first else None


def install(*, watchdog: bool = True) -> None:
    """Route SIGINT and SIGTERM of the main thread to :class:`Interrupted`, with the watchdog
    (``watchdog=False``: no time bound, for commands whose cleanup may take long, e.g. saving
    adapters). SIGINT is set explicitly: a shell without job control starts background jobs
    with SIGINT ignored, and Ctrl-C / ``kill -INT`` would otherwise be swallowed.

    The watchdog thread starts here, waiting on a pipe: a signal handler runs in the main
    thread wherever it was stopped, and starting a thread there takes ``threading``'s locks
    (which the interrupted code may hold) and can fail outright (no thread left under a
    process limit); a write to a pipe can do neither."""
    if threading.current_thread() is not threading.main_thread():
        return  # signal handlers can only be set from the main thread (e.g. main() in a test thread)
    _watchdog_on[:] = [watchdog]
    if watchdog:
        _start_watchdog()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _handler)


_watchdog_on: list[bool] = [True]
_wake: list[int] = []  # the write end of the watchdog's pipe, in the process that owns the thread


def _start_watchdog() -> None:
    if _wake:
        return  # one watchdog a process: commands run again in one process (tests) share it
    read_fd, write_fd = os.pipe()
    threading.Thread(target=_await_signal, args=(read_fd,), name="collabui-stop", daemon=True).start()
    _wake.append(write_fd)


def _forget_watchdog() -> None:
    """In a forked child: the watchdog thread stayed in the parent, so its pipe must not be
    written from here (a signal to the child would end the parent). The child gets none: its
    handler still raises :class:`Interrupted`, without a time bound."""
    _wake.clear()


os.register_at_fork(after_in_child=_forget_watchdog)


def _await_signal(read_fd: int) -> None:
    data = b""
    while not data:
        try:
            data = os.read(read_fd, 1)
        except InterruptedError:
            continue
    _watchdog(128 + data[0])


def _handler(signum: int, frame: FrameType | None) -> None:
    if _first and _watchdog_on[0]:
        return  # cleanup is under way and bounded: a second Ctrl-C must not cut a trace record
    _first.append(signum)
    if _watchdog_on[0] and len(_first) == 1 and _wake:
        os.write(_wake[0], bytes([signum]))
    raise Interrupted(signum)


def _watchdog(code: int, sleep: Callable[[float], None] = time.sleep) -> None:
    """Kill the descendants, end the open traces, exit: the exit happens whatever the first two
    raise (a watchdog that died on an error would leave the process hanging in its cleanup)."""
    try:
        sleep(KILL_AFTER_S)
        _try(kill_descendants)
        sleep(EXIT_AFTER_S - KILL_AFTER_S - TRACES_BUDGET_S)  # the main thread may still end them itself
        name = signal.Signals(code - 128).name
        _try(_end_open_traces, f"Interrupted: {name} (cleanup took too long; stopped)")
        # print, not logging: a thread stuck mid-record may hold the handler's lock, and this line
        # must not wait before the exit below.
        print("interrupted (cleanup took too long; stopped)", file=sys.stderr, flush=True)
    finally:
        os._exit(code)


def _try(step: Callable[..., object], *args: object) -> None:
    try:
        step(*args)
    except Exception as exc:  # noqa: BLE001 - the exit must follow; say why this step did not
        print(f"while stopping: {step.__name__} failed ({type(exc).__name__}: {exc})", file=sys.stderr, flush=True)


def _end_open_traces(error: str) -> None:
    """Write the end record of every trace still open (the episode loop never got to it: its
    thread is stuck in a driver). Only if the trace module is loaded: otherwise no trace was
    opened, and an import here could wait on a lock the stuck thread holds."""
    trace = sys.modules.get("collabui.trace")
    if trace is not None:
        trace.close_open_traces(error, budget_s=TRACES_BUDGET_S)


def exit_now(code: int) -> None:
    """End the process once a stopped command has cleaned up, skipping interpreter shutdown.

    Python's shutdown joins executor threads (atexit), and one still inside a dead browser
    driver's call hung the exit for 26 s after every ``finally`` had run; the traces and
    checkpoints are already written by then, so nothing is lost by not waiting.
    """
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            continue  # a closed pipe: nothing more to say
    kill_descendants()
    os._exit(code)


def kill_descendants() -> int:
    """SIGKILL every descendant process of this one; return how many were killed."""
    from collabui._processes import kill_tree

    return kill_tree(os.getpid(), include_root=False)


def quiet_broken_pipe() -> int:
    """After stdout's reader went away (``collabui envs | head -1``): no traceback, exit 141.

    Python would otherwise complain again when it flushes stdout at exit; pointing stdout at
    /dev/null is the fix the Python docs give (library/signal, "Note on SIGPIPE").
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return 128 + signal.SIGPIPE
