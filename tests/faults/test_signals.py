"""SIGINT and SIGTERM stop `collabui run` and `collabui eval miniwob` within 5 s (exit 130 /
143, every trace closed, no Chromium left); SIGKILL at random points leaves every completed
step in a parseable trace.

Each trial signals at a seeded random moment after Chromium started (during a reset, a team
step or an action). SIGINT goes to the process group, as Ctrl-C in a terminal does; SIGTERM to
the command alone, as ``kill`` and process managers do.
"""

from __future__ import annotations

import random
import signal
import statistics
import time
from pathlib import Path

import pytest

from collabui.trace import read_trace
from tests.faults.cli import STOP_BOUND_S, Child, chromium_under, report

pytestmark = [pytest.mark.faults, pytest.mark.browser]

RUN = ["run", "--env", "miniwob/click-dialog", "--model", "random", "--episodes", "50", "--max-steps", "10",
       "--quiet"]
EVAL = ["eval", "miniwob", "--tasks", "click-dialog,click-button", "--episodes", "25", "--model", "random",
        "--max-steps", "10"]
#: (command, signal, trials): >= 10 SIGINT trials and SIGTERM on both commands.
PLAN = [("run", signal.SIGINT, 6), ("eval", signal.SIGINT, 4), ("run", signal.SIGTERM, 2), ("eval", signal.SIGTERM, 2)]
_stop_times: dict[str, list[float]] = {}
_watchdog_stops = [0]  # trials whose cleanup the watchdog had to cut short


def _start(command: str, folder: Path) -> tuple[Child, Path]:
    if command == "run":
        traces = folder / "traces"
        return Child.start([*RUN, "--trace-dir", str(traces)], folder / "out.log"), traces
    return Child.start([*EVAL, "--out", str(folder / "eval")], folder / "out.log"), folder / "eval" / "traces"


@pytest.mark.parametrize(("command", "signum", "trials"), PLAN, ids=[f"{c}-{s.name}" for c, s, _ in PLAN])
def test_signal_stops_within_bound(tmp_path, command, signum, trials):
    rng = random.Random(f"{command}-{signum.name}")
    for trial in range(trials):
        child, traces = _start(command, tmp_path / str(trial))
        try:
            child.wait_for_chromium()
            family = child.descendants()
            time.sleep(rng.uniform(0.0, 2.0))  # reset, team step or action
            seconds = child.signal_and_time(signum, group=signum == signal.SIGINT)
        finally:
            child.cleanup()
        out = child.output()
        _stop_times.setdefault(signum.name, []).append(seconds)
        assert seconds < STOP_BOUND_S, f"trial {trial}: stopped after {seconds:.1f} s\n{out[-2000:]}"
        assert child.proc.returncode == 128 + signum, out[-2000:]
        assert not [p for p in family if p.is_running() and p.status() != "zombie"], "a process outlived the run"
        # Every trace parses and is closed by an end record, also when the cleanup itself hung
        # and the watchdog ended the process (it writes the end records still missing).
        _watchdog_stops[0] += "cleanup took too long" in out
        for path in traces.glob("*.jsonl"):
            trace = read_trace(path)
            assert trace.end is not None, f"{path.name} has no end record\n{out[-2000:]}"
    times = _stop_times[signum.name]
    report({f"{signum.name}_trials": len(times), "max_s": round(max(times), 2),
            "median_s": round(statistics.median(times), 2), "watchdog_stops": _watchdog_stops[0]})


def _wait_for_a_step(traces: Path, bound_s: float = 120.0) -> None:
    """Until a trace under ``traces`` holds a step record (at most ``bound_s``)."""
    deadline = time.monotonic() + bound_s
    while time.monotonic() < deadline:
        if any(b'"type": "step"' in path.read_bytes() for path in traces.glob("*.jsonl")):
            return
        time.sleep(0.2)
    pytest.fail(f"no step record within {bound_s:.0f} s")


def test_sigkill_at_random_points_keeps_every_finished_step(tmp_path):
    """kill -9 of the whole command at 6 seeded random moments: every trace parses, and every
    step record the file holds is whole (a torn last line is the only loss). The last kill lands
    at a random moment after the first step is on disk, so a loaded machine, where every step
    comes later, still tests a trace with steps in it."""
    rng = random.Random(9)
    steps_kept = 0
    for trial in range(6):
        child, traces = _start("run", tmp_path / str(trial))
        try:
            child.wait_for_chromium()
            if trial == 5:
                _wait_for_a_step(traces)
            time.sleep(rng.uniform(0.0, 4.0))
            child.signal_and_time(signal.SIGKILL, group=True)
        finally:
            child.cleanup()
        assert child.proc.returncode == -signal.SIGKILL
        assert not chromium_under(child.proc.pid)
        for path in traces.glob("*.jsonl"):
            trace = read_trace(path)  # raises on any corrupt line but a torn last one
            lines = [line for line in path.read_bytes().split(b"\n") if line.strip()]
            whole = sum(b'"type": "step"' in line for line in lines[:-1])
            assert len(trace.steps) >= whole, path.name
            assert [s["t"] for s in trace.steps] == list(range(len(trace.steps))), path.name
            steps_kept += len(trace.steps)
    assert steps_kept > 0, "no trial got as far as a step: the kills all landed too early to test anything"
    report({"sigkill_trials": 6, "steps_kept": steps_kept})
