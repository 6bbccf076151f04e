"""The stop bound holds even when cleanup hangs: the watchdog kills the children and exits."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from collabui.cli._stopping import exit_code
from tests.faults.cli import STOP_BOUND_S

pytestmark = pytest.mark.faults

#: A command whose cleanup never ends (like close() on a browser stuck mid-action), with a child.
_HANGING = textwrap.dedent("""
    import subprocess, sys, time
    from collabui.cli import _stopping
    _stopping.install()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    print(child.pid, flush=True)
    try:
        time.sleep(600)
    finally:
        time.sleep(600)  # the hung cleanup
""")


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_watchdog_bounds_a_hung_cleanup(signum):
    proc = subprocess.Popen([sys.executable, "-c", _HANGING], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        child = psutil.Process(int(proc.stdout.readline()))
        sent = time.monotonic()
        proc.send_signal(signum)
        proc.wait(timeout=30)
        seconds = time.monotonic() - sent
    finally:
        proc.kill()
    assert seconds < STOP_BOUND_S and proc.returncode == 128 + signum, (seconds, proc.returncode)
    assert "cleanup took too long" in proc.stderr.read()
    assert not child.is_running() or child.status() == psutil.STATUS_ZOMBIE


def test_exit_codes():
    assert exit_code(KeyboardInterrupt()) == 130
    from collabui.cli._stopping import Interrupted

    assert exit_code(Interrupted(signal.SIGTERM)) == 143
