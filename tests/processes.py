"""Process helpers for the tests that check nothing outlives its owner."""

from __future__ import annotations

import contextlib

import psutil


def chromium_descendants() -> set[int]:
    """Pids of Chromium processes descending from this Python."""
    found = set()
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):  # the process ended while we listed
            if "chrom" in child.name():
                found.add(child.pid)
    return found
