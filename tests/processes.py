"""Process helpers for the tests that check nothing outlives its owner (read from /proc)."""

from __future__ import annotations

import os
from pathlib import Path


def chromium_descendants() -> set[int]:
    """Pids of Chromium processes descending from this Python."""
    parents: dict[int, int] = {}
    names: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue  # the process ended while we listed
        names[int(entry)] = stat[stat.index("(") + 1:stat.rindex(")")]
        parents[int(entry)] = int(stat[stat.rindex(")") + 2:].split()[1])
    me, found = os.getpid(), set()
    for pid, name in names.items():
        if "chrom" not in name:
            continue
        ancestor = parents.get(pid, 0)
        while ancestor > 1 and ancestor != me:
            ancestor = parents.get(ancestor, 0)
        if ancestor == me:
            found.add(pid)
    return found
