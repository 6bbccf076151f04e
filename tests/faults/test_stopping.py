"""The stop bound holds even when cleanup hangs: the watchdog kills the children, writes the
end record of every trace still open and exits."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from collabui.cli.stopping import exit_code
from collabui.trace import read_trace
from tests.faults.cli import STOP_BOUND_S

pytestmark = pytest.mark.faults

#: A command whose cleanup never ends (like close() on a browser stuck mid-action), with a child.
_HANGING = textwrap.dedent("""
    import subprocess, sys, time
    from collabui.cli import stopping
    stopping.install()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:  # the pid is printed inside: a signal cannot land before the try
        print(child.pid, flush=True)
        time.sleep(600)
    finally:
        time.sleep(600)  # the hung cleanup
""")


def _signal_and_wait(proc: subprocess.Popen, signum: int) -> float:
    """Seconds from sending ``signum`` until the process ended (inf: killed after 30 s, so that
    the caller's assertion can show what the process printed)."""
    sent = time.monotonic()
    proc.send_signal(signum)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return float("inf")
    return time.monotonic() - sent


def _stop_hanging(signum: int, *, before: str = "") -> tuple[float, str, bool]:
    """Run :data:`_HANGING` (with ``before`` run after install()), signal it once its child is
    up: seconds to the end, stderr, whether the child was gone when the process ended. The
    child is killed here in any case: alive, it would hold the stderr pipe open for 600 s."""
    script = _HANGING.replace("stopping.install()\n", f"stopping.install()\n{before}")
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    child = None
    try:
        child = psutil.Process(int(proc.stdout.readline()))
        seconds = _signal_and_wait(proc, signum)
        child_gone = not child.is_running() or child.status() == psutil.STATUS_ZOMBIE
    finally:
        proc.kill()
        if child is not None:
            with contextlib.suppress(psutil.NoSuchProcess):
                child.kill()
    err = proc.stderr.read()
    assert seconds < STOP_BOUND_S and proc.returncode == 128 + signum, (seconds, proc.returncode, err[-2000:])
    return seconds, err, child_gone


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_watchdog_bounds_a_hung_cleanup(signum):
    _, err, child_gone = _stop_hanging(signum)
    assert "cleanup took too long" in err
    assert child_gone


def test_the_bound_holds_when_no_thread_can_start_and_a_watchdog_step_fails():
    # The handler must not need a new thread (under a process limit none can start), and the
    # watchdog must exit even when killing the children raises.
    before = textwrap.dedent("""
        import threading
        def no_thread(self):
            raise RuntimeError("can't start new thread")
        threading.Thread.start = no_thread
        def failing():
            raise PermissionError("not allowed")
        stopping.kill_descendants = failing
    """)
    _, err, child_gone = _stop_hanging(signal.SIGTERM, before=before)
    assert "while stopping: failing failed (PermissionError: not allowed)" in err
    assert "cleanup took too long" in err
    assert not child_gone  # nobody killed it: the step failed


def test_a_forked_child_does_not_wake_its_parents_watchdog():
    script = textwrap.dedent("""
        import os
        from collabui.cli import stopping
        stopping.install()
        if os.fork() == 0:
            print(stopping._wake, flush=True)
            os._exit(0)
        os.wait()
        print(stopping._wake != [], flush=True)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["[]", "True"], out


#: A real episode loop writing a real trace, whose device swallows the signal and never returns
#: (as a Playwright call can when the signal lands in its driver's greenlet): the loop never
#: gets to write the end record itself.
_STUCK_EPISODE = textwrap.dedent("""
    import sys, time
    from collabui import CollabAgentTeam
    from collabui.cli import stopping
    from collabui.devices.fake import FakeDevice
    from collabui.models.fake import ScriptedChatModel

    class Stuck(FakeDevice):
        def act(self, action):
            if self.actions:
                while True:
                    try:  # "stuck" is printed inside: a signal cannot land before the try
                        print("stuck", flush=True)
                        time.sleep(600)
                    except BaseException:
                        pass
            return super().act(action)

    stopping.install()
    model = ScriptedChatModel(['Action: {"action": "click", "element_id": "A"}'], cycle=True)
    team = CollabAgentTeam(model, n_agents=1, rounds=1, max_steps=5)
    team.run(None, Stuck(["<button[A]| Next>"], task="Press Next"), trace=sys.argv[1], episode_id="e")
""")


def test_watchdog_ends_the_trace_of_a_stuck_episode(tmp_path):
    # One signal: both take the same path (the hung-cleanup test above tries both); the suite
    # stays within its time budget.
    signum = signal.SIGTERM
    proc = subprocess.Popen([sys.executable, "-c", _STUCK_EPISODE, str(tmp_path)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "stuck", proc.stderr.read()
        seconds = _signal_and_wait(proc, signum)
    finally:
        proc.kill()
    assert seconds < STOP_BOUND_S and proc.returncode == 128 + signum, (seconds, proc.returncode,
                                                                        proc.stderr.read()[-2000:])
    trace = read_trace(tmp_path / "e.jsonl")
    assert len(trace.steps) == 1 and trace.end is not None, trace
    assert trace.end["steps"] == 1 and trace.end["success"] is False
    assert trace.end["error"] == f"Interrupted: {signum.name} (cleanup took too long; stopped)"


def test_exit_codes():
    assert exit_code(KeyboardInterrupt()) == 130
    from collabui.cli.stopping import Interrupted

    assert exit_code(Interrupted(signal.SIGTERM)) == 143


#: A command whose code swallows the signal (as a thread pool's done-callback catching
#: BaseException can) and then fails on the half-made step that leaves.
_SWALLOWED = textwrap.dedent("""
    import sys, time
    from collabui import cli
    from collabui.cli import run

    def swallowing(args):
        try:  # "ready" is printed inside: a signal cannot land before the try
            print("ready", flush=True)
            time.sleep(600)
        except BaseException:
            pass
        return None.action

    run.run_command = swallowing
    sys.argv = ["collabui", "run", "--model", "random", "--env", "miniwob/click-button"]
    sys.exit(cli.main())
""")


def test_an_error_after_a_swallowed_signal_still_exits_as_stopped():
    proc = subprocess.Popen([sys.executable, "-c", _SWALLOWED], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
        _signal_and_wait(proc, signal.SIGTERM)
    finally:
        proc.kill()
    err = proc.stderr.read()
    assert proc.returncode == 143, (proc.returncode, err[-2000:])
    assert "while stopping: AttributeError" in err and "interrupted (SIGTERM)" in err, err
