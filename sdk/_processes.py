"""Ending a process together with every process it started (psutil).

A browser, a vLLM engine or an evaluation worker starts children of its own; killing only the
top process would leave them orphaned (re-parented to init, holding memory and ports).
"""

from __future__ import annotations

import psutil

__all__ = ["kill_tree"]


def kill_tree(pid: int, *, include_root: bool = True, timeout: float = 0.5) -> int:
    """SIGKILL every descendant of process ``pid`` (and ``pid`` itself unless ``include_root``
    is False), then wait up to ``timeout`` s for them to go; returns how many were signalled.

    The descendants are listed before anything is killed: once a parent dies, its children
    belong to init and can no longer be found from it. Processes that end on their own in the
    meantime are skipped.
    """
    try:
        root = psutil.Process(pid)
        procs = root.children(recursive=True)
    except psutil.Error:
        return 0
    if include_root:
        procs.append(root)
    killed = []
    for proc in procs:
        try:
            proc.kill()
        except psutil.Error:
            continue  # already gone
        killed.append(proc)
    psutil.wait_procs(killed, timeout=timeout)
    return len(killed)
