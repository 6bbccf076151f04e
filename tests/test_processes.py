"""kill_tree: a process and everything it started, none orphaned."""

from __future__ import annotations

import subprocess
import sys

import psutil

from collabui._processes import kill_tree

# A parent that starts a sleeping child and prints the child's pid.
_PARENT = ("import subprocess, sys, time\n"
           "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
           "print(c.pid, flush=True); time.sleep(60)\n")


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_kill_tree_ends_the_process_and_its_children() -> None:
    parent = subprocess.Popen([sys.executable, "-c", _PARENT], stdout=subprocess.PIPE, text=True)
    try:
        child = int(parent.stdout.readline())
        # timeout: a killed grandchild may stay a zombie where init does not reap; it is gone anyway
        assert kill_tree(parent.pid, timeout=1) == 2
        parent.wait(timeout=5)
        assert _gone(child), "the grandchild must not outlive its parent"
    finally:
        parent.kill()
        parent.wait()


def test_kill_tree_of_a_finished_process_is_nothing() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    assert kill_tree(proc.pid) == 0
