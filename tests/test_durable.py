"""Durable episodes: stopped by kill -9, a pending approval or Ctrl-C, resumed where they stopped
(collabui.durable), with every step in the trace exactly once."""

from __future__ import annotations

import json
import os
import pty
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from collabui import CollabAgentTeam
from collabui.actions import get_action_space
from collabui.devices.fake import FakeDevice
from collabui.errors import ConfigError
from collabui.models.base import ChatRequest
from collabui.models.fake import ScriptedChatModel
from collabui.trace import read_trace
from tests.local_site import LocalSite, serve

ROOT = Path(__file__).resolve().parents[1]
WEB = get_action_space("web")
PAGE = "<button[A]| Cancel> <button[B]| Submit order>"


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _run_ids(db: Path) -> list[str]:
    with sqlite3.connect(db) as conn:
        return [r[0] for r in conn.execute("SELECT run_id FROM collabui_runs")]


# -- the Python API, on a fake device --------------------------------------------------------

def _scripted(request: ChatRequest) -> str:
    t = (request.seed or 0) // 1009  # TeamConfig.seed = 0
    if t == 0:
        return 'Action: {"action": "scroll_page", "direction": "down"}'
    return 'Action: {"action": "click", "element_id": "B"}'


def _device() -> FakeDevice:
    return FakeDevice([PAGE, PAGE, "<div| Thank you>"], task="Submit the order",
                      success_when=lambda a: a == WEB.from_dict({"action": "click", "element_id": "B"}))


def test_pending_approval_stops_and_resumes(tmp_path):
    """A policy that leaves the submit click pending stops the episode after step 0; resuming
    with a decision replays step 0 on the reset device, asks no agent again, and finishes."""
    db = tmp_path / "runs.sqlite"
    model = ScriptedChatModel(_scripted)
    team = CollabAgentTeam(model, n_agents=2, rounds=2, topology="chain", seed=0, max_steps=3)
    device = _device()
    first = team.run(None, device, trace=tmp_path, checkpoint=db, approve=lambda r: None, episode_id="ep")
    assert first.pending_approval["call"] == "click('B')" and first.n_steps == 1
    assert first.error.startswith("ApprovalPending: approval pending for click('B') at step 1")
    assert device.actions == [WEB.from_dict({"action": "scroll_page", "direction": "down"})]
    assert _lines(Path(first.trace_path))[-1]["type"] == "end"
    asked_before = len(model.requests)

    device = _device()
    second = team.run(None, device, checkpoint=db, resume="ep", approve="always")
    assert len(model.requests) == asked_before  # the step's proposals came from the checkpoint
    assert second.success and second.n_steps == 2 and second.trace_path == first.trace_path
    assert [type(a).__name__ for a in device.actions] == ["ScrollPage", "Click"]  # replayed, then run
    assert device.seeds == [None]
    records = _lines(Path(second.trace_path))
    assert [r["type"] for r in records] == ["episode", "step", "step", "end"]
    assert [r["t"] for r in records if r["type"] == "step"] == [0, 1]
    assert records[2]["info"]["approval"]["decision"] == "approved"
    assert records[1]["history"] == [] and len(records[2]["history"]) == 1  # restored for the agents
    assert "scroll" in records[2]["history"][0]
    assert records[-1]["steps"] == 2 and records[-1]["success"]
    read_trace(second.trace_path)  # valid against the schema
    with pytest.raises(ConfigError, match="episode 'ep' already finished; nothing to resume"):
        team.run(None, _device(), checkpoint=db, resume="ep")
    with pytest.raises(ConfigError, match="no episode 'nope' in"):
        team.run(None, _device(), checkpoint=db, resume="nope")
    other = CollabAgentTeam(model, n_agents=1, rounds=1, seed=0)
    with pytest.raises(ConfigError, match="resume= needs checkpoint=PATH"):
        other.run(None, _device(), resume="ep")


def test_resume_cuts_a_torn_line_and_a_step_the_checkpoint_lacks(tmp_path):
    """A kill while writing leaves a torn last line; a kill between the trace line and the
    checkpoint file leaves a step only the trace has. Both are cut, the step runs again, and
    the trace holds each step once."""
    db = tmp_path / "runs.sqlite"
    team = CollabAgentTeam(ScriptedChatModel(_scripted), n_agents=1, rounds=1, seed=0, max_steps=3)
    first = team.run(None, _device(), trace=tmp_path, checkpoint=db, approve=lambda r: None, episode_id="ep")
    path = Path(first.trace_path)
    header, step0, _end = path.read_text().splitlines()
    ghost = json.dumps({**json.loads(step0), "t": 1})
    path.write_text("\n".join([header, step0, ghost]) + '\n{"type": "st')
    second = team.run(None, _device(), checkpoint=db, resume="ep", approve="always")
    trace = read_trace(path)
    assert second.success and [s["t"] for s in trace.steps] == [0, 1]
    assert trace.steps[1]["executed"]["action"] == "click" and trace.end["steps"] == 2
    with pytest.raises(ConfigError, match="episode 'ep' is already in .*; pass resume='ep'"):
        team.run(None, _device(), checkpoint=db, episode_id="ep")


def test_ctrl_c_mid_step_resumes_at_the_last_superstep(tmp_path):
    """KeyboardInterrupt inside agent 1's round-1 call (the step's third superstep): the two
    supersteps before it are not run again on resume."""
    db = tmp_path / "runs.sqlite"
    calls: list[tuple[int, int]] = []
    stop = [True]

    def interrupted(request: ChatRequest) -> str:
        t, rest = divmod(request.seed or 0, 1009)
        calls.append((t, rest))
        if (t, rest) == (1, 31 + 1) and stop:  # agent 1, round 1 (seed t*1009 + i*31 + j), once
            stop.clear()
            raise KeyboardInterrupt
        return _scripted(request)

    team = CollabAgentTeam(ScriptedChatModel(interrupted), n_agents=2, rounds=2, topology="chain",
                           seed=0, max_steps=3)
    with pytest.raises(KeyboardInterrupt):
        team.run(None, _device(), trace=tmp_path, checkpoint=db, approve="always", episode_id="ep")
    assert sorted(c for c in calls if c[0] == 1) == [(1, 0), (1, 1), (1, 31), (1, 32)]
    calls.clear()
    result = team.run(None, _device(), checkpoint=db, resume="ep", approve="always")
    assert calls == [(1, 32)]  # only the node the interrupt stopped
    assert result.success and [s["t"] for s in read_trace(result.trace_path).steps] == [0, 1]


def test_a_resumed_step_passes_over_the_stale_action_the_replay_leaves(tmp_path):
    """skip_stale across a stop between two steps: the replayed prefix ends with a click that
    changed nothing, so the first step after the resume passes it over as the unbroken run did."""
    page = "<button[B]| Refresh> <button[C]| Submit order>"  # Refresh changes nothing

    def mostly_b(request: ChatRequest) -> str:  # three cold agents say B, the hot one C
        element = "B" if request.temperature < 0.4 else "C"
        return f'Action: {{"action": "click", "element_id": "{element}"}}'

    def team() -> CollabAgentTeam:
        return CollabAgentTeam(ScriptedChatModel(mostly_b), n_agents=4, rounds=3, topology="independent",
                               temperatures=(0.1, 0.1, 0.1, 0.8), seed=0, max_steps=4, skip_stale=True)

    def device() -> FakeDevice:
        return FakeDevice([page] * 4, task="Submit the order", success_when=lambda a: a == WEB.from_dict({"action": "click", "element_id": "C"}))

    db = tmp_path / "runs.sqlite"
    first = team().run(None, device(), trace=tmp_path, checkpoint=db, approve=lambda r: None, episode_id="ep")
    # B ran at step 0; step 1 passed it over for the submit click, which waits for a decision
    assert first.n_steps == 1 and first.pending_approval["call"] == "click('C')"
    with sqlite3.connect(db) as conn:  # as if killed before step 1's graph saved anything
        for table in ("checkpoints", "writes"):
            conn.execute(f"DELETE FROM {table} WHERE thread_id LIKE 'ep/t1/%'")
    second = team().run(None, device(), checkpoint=db, resume="ep", approve="always")
    steps = read_trace(second.trace_path).steps
    assert second.success and [s["t"] for s in steps] == [0, 1]
    assert steps[1]["executed"]["element_id"] == "C" and steps[1]["vote"]["passed_over"] == "click('B')"


@pytest.mark.parametrize(("argv", "message"), [
    (["--resume", "r1", "--agents", "3"], "--resume RUN_ID runs with the run's own flags; drop --agents"),
    (["--resume", "r1", "--env", "miniwob/click-button"], "takes the environment from the run; drop --env/--url"),
    (["--resume", "nope"], "no run 'nope' in"),
    ([], "give --env NAME or --url URL (or --resume RUN_ID"),
])
def test_cli_resume_bad_input(tmp_path, capsys, argv, message):
    from collabui.cli import main

    assert main(["run", *argv, "--checkpoint-db", str(tmp_path / "db")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1


# -- the command line in a subprocess, real Chromium -----------------------------------------

def _worker(args: list[str], env: dict[str, str], **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(ROOT / "tests" / "durable_worker.py"), *args],
                            env={**os.environ, **env}, cwd=ROOT, **kwargs)


def _wait_for(path: Path, proc: subprocess.Popen, timeout_s: float = 240) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"the worker never got there (exit {proc.poll()})")
        time.sleep(0.1)


@pytest.mark.browser
@pytest.mark.slow
def test_kill_9_mid_step_then_collabui_run_resume(tmp_path):
    """`collabui run` on MiniWoB++ killed with SIGKILL in the middle of step 2 (its last
    superstep hangs); `collabui run --resume RUN_ID` replays steps 0-1 on the reset page, asks
    only the unfinished node, clicks, and the trace holds steps 0, 1, 2 once each."""
    db, log, mark, traces = tmp_path / "runs.sqlite", tmp_path / "log", tmp_path / "mark", tmp_path / "traces"
    flags = ["run", "--env", "miniwob/click-button", "--model", "scripted", "--agents", "2", "--rounds", "2",
             "--topology", "chain", "--seed", "0", "--max-steps", "5", "--no-screenshots", "--quiet",
             "--trace-dir", str(traces), "--checkpoint-db", str(db)]
    proc = _worker(flags, {"WORKER_LOG": str(log), "WORKER_MARK": str(mark), "WORKER_HANG": "2,1,1"},
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _wait_for(mark, proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    [trace] = traces.glob("*.jsonl")
    before = trace.read_bytes()
    assert [r["t"] for r in _lines(trace) if r["type"] == "step"] == [0, 1] and b'"type": "end"' not in before
    [run_id] = _run_ids(db)
    log.write_text("")

    resumed = _worker(["run", "--resume", run_id, "--checkpoint-db", str(db), "--quiet"],
                      {"WORKER_LOG": str(log)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, out + err
    assert "success 1/1" in out
    assert log.read_text().split("\n")[:-1] == ["2 1 1"]  # supersteps 0-1 of step 2 came from SQLite
    assert trace.read_bytes().startswith(before)  # appended, nothing before rewritten
    done = read_trace(trace)
    assert [s["t"] for s in done.steps] == [0, 1, 2] and done.end["success"] and done.end["steps"] == 3
    assert done.steps[2]["executed"]["action"] == "click"
    again = subprocess.run([sys.executable, "-m", "collabui.cli", "run", "--resume", run_id,
                            "--checkpoint-db", str(db)], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert again.returncode == 2 and f"error: run {run_id} already finished" in again.stderr


ORDER = """<html><head><title>Cart</title></head><body><form method="get" action="thanks.html">
<button>Submit order</button></form></body></html>"""
THANKS = "<html><head><title>Thanks</title></head><body><p>Order placed</p></body></html>"


@pytest.fixture(scope="module")
def shop(tmp_path_factory) -> Iterator[LocalSite]:
    root = tmp_path_factory.mktemp("shop")
    (root / "cart.html").write_text(ORDER)
    (root / "thanks.html").write_text(THANKS)
    with serve(root) as site:
        yield site


def _cli(shop: LocalSite, db: Path, traces: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "collabui.cli", "run", "--url", shop.url("cart.html"), "--task",
            "Submit order", "--model", "lexical", "--agents", "1", "--rounds", "1", "--max-steps", "1",
            "--no-screenshots", "--trace-dir", str(traces), "--checkpoint-db", str(db), *extra]


def _on_a_terminal(cmd: list[str], answer: str | None) -> tuple[subprocess.Popen, int, str]:
    """Start ``cmd`` with a pseudo-terminal as stdin; wait for the approval question; answer it
    (None: leave it pending). Returns the process, the terminal's master side, what it asked."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(cmd, stdin=slave, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    os.close(slave)
    asked = b""
    deadline = time.monotonic() + 240
    os.set_blocking(proc.stderr.fileno(), False)
    while b"[y/N]" not in asked:
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"no question asked: {asked!r}")
        asked += proc.stderr.read() or b""
        time.sleep(0.1)
    if answer is not None:
        os.write(master, answer.encode() + b"\n")
    return proc, master, asked.decode()


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.parametrize("answer", ["y", "n"])
def test_cli_asks_on_a_terminal_by_default_for_a_real_page(tmp_path, shop, answer):
    shop.requests.clear()
    proc, master, asked = _on_a_terminal(_cli(shop, tmp_path / "db", tmp_path / "t"), answer)
    proc.communicate(timeout=120)
    os.close(master)
    assert proc.returncode == 0
    assert "approve step 0: click('A') - click on \"Submit order\" (submit)? [y/N]" in asked
    approval = read_trace(next((tmp_path / "t").glob("*.jsonl"))).steps[0]["info"]["approval"]
    granted = answer == "y"
    assert approval["decision"] == ("approved" if granted else "refused") and approval["by"] == "ask"
    assert any(r.startswith("/thanks.html") for r in shop.requests) == granted


@pytest.mark.browser
@pytest.mark.slow
def test_cli_without_a_terminal_refuses_and_says_how_to_decide(tmp_path, shop):
    shop.requests.clear()
    done = subprocess.run(_cli(shop, tmp_path / "db", tmp_path / "t"), stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, cwd=ROOT, timeout=240)
    assert done.returncode == 0, done.stderr
    assert "approval needed for click('A') (click on \"Submit order\" (submit)) but stdin is not a terminal: " \
           "refused; pass --approve always|never" in done.stderr
    assert not any(r.startswith("/thanks.html") for r in shop.requests)


@pytest.mark.browser
@pytest.mark.slow
def test_kill_9_at_a_pending_question_then_resume_with_a_decision(tmp_path, shop):
    """Killed while the question waits: the run resumes at that question (the start URL
    re-opened, nothing replayed on a real site) and `--approve always` answers it."""
    shop.requests.clear()
    db, traces = tmp_path / "db", tmp_path / "t"
    proc, master, _ = _on_a_terminal(_cli(shop, db, traces), None)
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    os.close(master)
    assert not any(r.startswith("/thanks.html") for r in shop.requests)
    [run_id] = _run_ids(db)
    done = subprocess.run([sys.executable, "-m", "collabui.cli", "run", "--resume", run_id, "--checkpoint-db",
                           str(db), "--approve", "always"], stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, cwd=ROOT, timeout=240)
    assert done.returncode == 0, done.stderr
    assert any(r.startswith("/thanks.html") for r in shop.requests)
    trace = read_trace(next(traces.glob("*.jsonl")))
    assert [s["t"] for s in trace.steps] == [0] and trace.complete
    assert trace.steps[0]["info"]["approval"] == {**trace.steps[0]["info"]["approval"], "decision": "approved",
                                                  "by": "always"}
