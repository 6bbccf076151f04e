"""A browser killed mid-episode ends that episode only; the next one starts a new browser.

Real Chromium, real MiniWoB++, the deterministic ``lexical`` model (it wins click-button every
time), so every episode after a kill must succeed. Chromium is SIGKILLed part-way through the
team's step (after the k-th of its 4 proposal events, each k twice), like an OOM kill or a crash.
"""

from __future__ import annotations

import re
import time

import pytest

from collabui import CollabAgentTeam
from collabui.devices import make_env
from collabui.events import ProposalMade
from collabui.models.spec import load_model
from collabui.trace import read_trace
from tests.faults.cli import Child, kill_chromium, report
from tests.processes import chromium_descendants

pytestmark = [pytest.mark.faults, pytest.mark.browser]

POINTS = (1, 2, 3, 4)  # after the k-th of the step's 4 proposals: every point of the step
KILLS = 2 * len(POINTS)


def test_killed_browser_ends_only_its_episode(tmp_path):
    """8 kills, each followed by a normal episode: every killed episode ends alone with a
    DeviceClosedError in its result and trace, every following one succeeds on a new browser."""
    team = CollabAgentTeam(load_model("lexical"), n_agents=2, rounds=2, topology="chain")
    env = make_env("miniwob/click-button")
    ended_alone = recovered = 0
    started = time.perf_counter()
    try:
        for k in range(KILLS):
            point = POINTS[k % len(POINTS)]
            with team.stream(None, env, seed=2 * k, trace=tmp_path) as events:
                proposals = 0
                for event in events:
                    proposals += isinstance(event, ProposalMade)
                    if isinstance(event, ProposalMade) and proposals == point:
                        assert kill_chromium() > 0
            killed = events.result
            assert killed.error and killed.error.startswith("DeviceClosedError"), killed.error
            assert read_trace(killed.trace_path).end["error"] == killed.error
            ended_alone += 1
            after = team.run(None, env, seed=2 * k + 1, trace=tmp_path)
            assert after.success and after.error is None, after.error
            recovered += 1
        assert env.relaunches == KILLS
    finally:
        env.close()
    assert not chromium_descendants()
    report({"browser_kills": KILLS, "ended_only_their_episode": ended_alone,
            "next_episode_succeeded": recovered, "seconds": round(time.perf_counter() - started, 1)})


def test_run_summary_names_the_killed_episode(tmp_path):
    """`collabui run --episodes 3`, Chromium killed during episode 2's steps: episodes 1 and 3
    run normally, the summary names episode 2 and the relaunch, the exit code is 1."""
    traces = tmp_path / "traces"
    child = Child.start(["run", "--env", "miniwob/click-dialog", "--model", "random", "--episodes", "3",
                         "--max-steps", "10", "--quiet", "--trace-dir", str(traces)], tmp_path / "out.log")
    try:
        _kill_during_episode(child, traces, episode=2)
        code = child.wait()
    finally:
        child.cleanup()
    out = child.output()
    assert code == 1, out
    assert re.search(r"episode 2 ended by an error after \d+ steps: DeviceClosedError", out), out
    assert "started again 1 time" in out and "1/3 episodes ended by an error" in out
    ends = {p.name[-7:]: read_trace(p).end for p in sorted(traces.glob("*.jsonl"))}
    assert [e["error"] is None for e in ends.values()] == [True, False, True], ends


def test_eval_names_the_killed_episode(tmp_path):
    """`collabui eval miniwob`, Chromium killed during the second episode: that one counts as a
    failure with its error, the others run, stderr names it, the exit code is 1."""
    out_dir = tmp_path / "eval"
    child = Child.start(["eval", "miniwob", "--tasks", "click-dialog", "--episodes", "3", "--model", "random",
                         "--max-steps", "10", "--out", str(out_dir)], tmp_path / "out.log")
    try:
        _kill_during_episode(child, out_dir / "traces", episode=2)
        code = child.wait()
    finally:
        child.cleanup()
    out = child.output()
    assert code == 1, out
    assert "1/3 episodes ended by an error" in out and "DeviceClosedError" in out, out
    assert "success 0/3" in out or "success 1/3" in out or "success 2/3" in out, out


def _kill_during_episode(child: Child, traces, *, episode: int) -> None:
    """Kill the child's Chromium once the ``episode``-th trace holds a step record."""
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and child.proc.poll() is None:
        files = sorted(traces.glob("*.jsonl"), key=lambda p: p.stat().st_mtime) if traces.exists() else []
        if len(files) >= episode and '"type": "step"' in files[episode - 1].read_text(errors="replace"):
            assert kill_chromium(child.proc.pid) > 0
            return
        time.sleep(0.02)
    raise AssertionError(f"episode {episode} never took a step:\n{child.output()[-2000:]}")


