"""Ending a process together with every process it started (psutil).

A browser, a vLLM engine or an evaluation worker starts children of its own; killing only the
top process would leave them orphaned (re-parented to init, holding memory and ports).
"""

from __future__ import annotations

import psutil

__all__ = ["descendants", "kill_all", "kill_tree"]


def descendants(pid: int) -> list[psutil.Process]:
    """Every process below ``pid`` now (empty when it is gone). List them before ending
    ``pid``: once a parent dies, its children belong to init and can no longer be found from it."""
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def kill_all(procs: list[psutil.Process], *, timeout: float = 0.5) -> int:
    """SIGKILL each of ``procs`` still running (psutil checks that a pid was not reused), then
    wait up to ``timeout`` s for them to go; returns how many were signalled. Zombies are
    skipped: dead already, they only wait for a parent (or an init that may never) to reap them."""
    killed = []
    for proc in procs:
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            proc.kill()
        except psutil.Error:
            continue  # already gone
        killed.append(proc)
    psutil.wait_procs(killed, timeout=timeout)
    return len(killed)


def kill_tree(pid: int, *, include_root: bool = True, timeout: float = 0.5) -> int:
    """SIGKILL every descendant of process ``pid`` (and ``pid`` itself unless ``include_root``
    is False), then wait up to ``timeout`` s for them to go; returns how many were signalled.

    The descendants are listed before anything is killed: once a parent dies, its children
    belong to init and can no longer be found from it. Processes that end on their own in the
    meantime are skipped.
    """
    try:
        root = psutil.Process(pid)
    except psutil.Error:
        return 0
    procs = descendants(pid)
    return kill_all([*procs, root] if include_root else procs, timeout=timeout)
