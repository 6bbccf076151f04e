"""`eval miniwob --workers N`: a worker process killed in mid-episode loses nothing it finished.

Worker processes write their traces straight into the run's folder, one flushed record per
step. Two real kills: SIGKILL of one worker while the run goes on (its episode becomes an error
in the manifest, its trace keeps its steps and gets an ``end`` record, a new worker takes the
next episodes), and SIGTERM to the command, whose stop watchdog kills the workers still busy
(every trace of the run folder parses, keeps its steps and ends with an ``end`` record).
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from collabui.evaluation.miniwob import MiniWoBEvalConfig, default_team, evaluate_miniwob
from collabui.trace import read_trace
from tests.evaluation.worker_kit import PIDS_ENV, slow_env
from tests.faults.cli import STOP_BOUND_S, Child, report

pytestmark = pytest.mark.faults


def _running_trace(traces: Path, min_steps: int, timeout: float = 120) -> Path:
    """A trace with at least ``min_steps`` steps and no end record yet (its episode runs)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for path in traces.glob("*.jsonl"):
            lines = path.read_bytes().splitlines()
            if sum(b'"type": "step"' in line for line in lines) >= min_steps \
                    and not any(b'"type": "end"' in line for line in lines):
                return path
        time.sleep(0.05)
    raise AssertionError(f"no episode got {min_steps} steps within {timeout} s")


def _kill_a_worker_mid_episode(config: MiniWoBEvalConfig, out: Path, pids: Path) -> tuple[dict[str, Any], Path, int]:
    """Run ``config`` (slow fake pages) into ``out``, SIGKILL the worker of the first episode
    that has 2 steps, and return the run's results, that episode's trace and the killed pid."""
    results: dict[str, Any] = {}
    runner = threading.Thread(target=lambda: results.update(
        evaluate_miniwob(config, out, env_factory=slow_env, progress=False)))
    runner.start()
    try:
        path = _running_trace(out / "traces", min_steps=2, timeout=180)
        seed = read_trace(path).header["seed"]
        victim = int((pids / f"{seed}.pid").read_text())
        os.kill(victim, signal.SIGKILL)
    finally:
        runner.join(timeout=240)
    assert not runner.is_alive(), "the run did not end after its worker was killed"
    return results, path, victim


def test_a_killed_worker_keeps_its_steps_and_its_episode_is_an_error(tmp_path, monkeypatch):
    pids = tmp_path / "pids"
    pids.mkdir()
    monkeypatch.setenv(PIDS_ENV, str(pids))  # the spawned workers inherit it
    out = tmp_path / "eval"
    config = MiniWoBEvalConfig(tasks="click-button,focus-text", episodes=2, model="lexical", workers=2,
                               team=default_team("lexical", max_steps=8))
    results, path, victim = _kill_a_worker_mid_episode(config, out, pids)
    assert results["counts"]["episodes"] == 4
    records = {r["episode_id"]: r for r in map(json.loads, (out / "episodes.jsonl").read_text().splitlines())}
    killed = records.pop(path.stem)
    assert killed["error"].startswith(f"WorkerDied: the worker process (pid {victim}) was killed by SIGKILL")
    trace = read_trace(path)
    assert killed["steps"] == len(trace.steps) >= 2 and not killed["success"]
    assert [s["t"] for s in trace.steps] == list(range(len(trace.steps)))
    assert trace.end["error"] == killed["error"] and trace.end["steps"] == killed["steps"]
    # The run went on: the other three episodes ran to their step cap on live workers.
    assert [(r["error"], r["steps"]) for r in records.values()] == [(None, 8)] * 3
    report({"worker_sigkill_steps_kept": killed["steps"], "other_episodes_ok": len(records)})


@pytest.mark.browser
def test_sigterm_watchdog_kills_busy_workers_and_their_traces_end(tmp_path):
    """Real MiniWoB++ pages on 2 workers, long episodes (the lexical baseline loops on
    enter-password); SIGTERM to the command alone, so the workers go on until the watchdog
    kills them: every trace of the run folder parses, keeps its whole steps, and ends."""
    out = tmp_path / "eval"
    child = Child.start(["eval", "miniwob", "--tasks", "enter-password", "--episodes", "4", "--model", "lexical",
                         "--agents", "1", "--rounds", "1", "--max-steps", "60", "--workers", "2",
                         "--no-screenshots", "--out", str(out)], tmp_path / "out.log")
    try:
        _running_trace(out / "traces", min_steps=2, timeout=180)
        family = child.descendants()
        seconds = child.signal_and_time(signal.SIGTERM, group=False)
    finally:
        child.cleanup()
    log = child.output()
    assert child.proc.returncode == 143 and seconds < STOP_BOUND_S, log[-2000:]
    assert not [p for p in family if p.is_running() and p.status() != "zombie"], "a worker outlived the run"
    traces = sorted((out / "traces").glob("*.jsonl"))
    assert traces, log[-2000:]
    steps = 0
    for path in traces:
        trace = read_trace(path)
        assert trace.end is not None and trace.end["error"].startswith("Interrupted"), (path.name, trace.end)
        assert trace.end["steps"] == len(trace.steps) and \
            [s["t"] for s in trace.steps] == list(range(len(trace.steps))), path.name
        steps += len(trace.steps)
    assert steps >= 2
    assert not (out / "episodes.jsonl").read_text()  # stopped episodes run again on resume
    report({"worker_sigterm_traces": len(traces), "steps_kept": steps, "stop_s": round(seconds, 2)})


def test_a_killed_ray_worker_keeps_its_streamed_steps_and_a_new_actor_goes_on(tmp_path, monkeypatch):
    """A Ray actor writes into its own temporary folder; its trace lines reach the run's folder
    as they are written, so its SIGKILL loses no finished step, and a new actor runs the rest."""
    import ray  # noqa: F401 - the ray extra, which make test installs: missing, the test fails
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")  # else Ray saves a token in the user's ~/.ray
    pids = tmp_path / "pids"
    pids.mkdir()
    monkeypatch.setenv(PIDS_ENV, str(pids))  # the private cluster's workers inherit it
    out = tmp_path / "eval"
    config = MiniWoBEvalConfig(tasks="click-button", episodes=3, model="lexical", workers=1, ray="local",
                               team=default_team("lexical", max_steps=6))
    results, path, victim = _kill_a_worker_mid_episode(config, out, pids)
    assert results["counts"]["episodes"] == 3
    records = {r["episode_id"]: r for r in map(json.loads, (out / "episodes.jsonl").read_text().splitlines())}
    killed = records.pop(path.stem)
    assert killed["error"].startswith(f"WorkerDied: the Ray worker (pid {victim} on ") and \
        "\n" not in killed["error"], killed["error"]
    trace = read_trace(path)
    assert killed["steps"] == len(trace.steps) >= 2 and not killed["success"]
    assert [s["t"] for s in trace.steps] == list(range(len(trace.steps)))
    assert trace.end["error"] == killed["error"]
    # The episodes after it ran whole on a new actor (another process).
    assert [(r["error"], r["steps"]) for r in records.values()] == [(None, 6)] * 2
    assert {r["worker"]["pid"] for r in records.values()} - {victim}
    report({"ray_worker_sigkill_steps_kept": killed["steps"], "other_episodes_ok": len(records),
            "error": killed["error"]})
