"""Helpers of the fault suite: `collabui` as a child process, its Chromium, signals, timings."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

#: The issue's bound: a signalled run is gone within this many seconds.
STOP_BOUND_S = 5.0


def kill_chromium(root: int | None = None) -> int:
    """SIGKILL every Chromium process under ``root`` (default: this process); wait until gone."""
    try:
        procs = [p for p in psutil.Process(root).children(recursive=True) if "chrom" in p.name()]
    except psutil.NoSuchProcess:
        return 0
    for proc in procs:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            continue
    psutil.wait_procs(procs, timeout=10)
    return len(procs)


def chromium_under(root: int) -> list[psutil.Process]:
    """Chromium processes descending from ``root`` (none once it is gone)."""
    try:
        return [p for p in psutil.Process(root).children(recursive=True) if "chrom" in p.name()]
    except psutil.NoSuchProcess:
        return []


@dataclass
class Child:
    """A running ``collabui`` command in its own session (so a test can signal its group)."""

    proc: subprocess.Popen[str]
    log: Path

    @classmethod
    def start(cls, args: list[str], log: Path) -> Child:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("w") as fh:
            proc = subprocess.Popen([sys.executable, "-m", "collabui.cli", *args], stdout=fh,
                                    stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True)
        return cls(proc, log)

    def descendants(self) -> list[psutil.Process]:
        try:
            return psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []

    def wait_for_chromium(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while not chromium_under(self.proc.pid):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"no Chromium started; output:\n{self.output()[-2000:]}")
            time.sleep(0.05)

    def signal_and_time(self, signum: int, *, group: bool) -> float:
        """Send ``signum`` (to the whole group, as a terminal's Ctrl-C does, or to the CLI
        alone, as ``kill`` does); seconds until the process has exited."""
        sent = time.monotonic()
        if group:
            os.killpg(self.proc.pid, signum)
        else:
            self.proc.send_signal(signum)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.cleanup()
        return time.monotonic() - sent

    def wait(self, timeout: float = 300) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.cleanup()
            raise

    def cleanup(self) -> None:
        """Kill the whole group (a test that failed must not leave a browser behind)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def report(figures: dict[str, object]) -> None:
    """Print measured figures for the README (shown with ``pytest -s`` or ``-rA``)."""
    print("\nFAULTS " + " ".join(f"{k}={v}" for k, v in figures.items()), file=sys.stderr)
