"""Episode workers (`eval miniwob --workers N [--ray ADDRESS]`): same seeds, same results.

The lexical baseline is deterministic and cheap, so a run on worker processes must equal the
one-process run episode by episode: outcome, steps and the executed actions in the traces.
Fake devices test the plumbing in seconds; the `browser` test runs real MiniWoB++ pages. The
Ray tests are in test_ray_cluster.py.
"""

from __future__ import annotations

import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from collabui.errors import ConfigError, DeviceError
from collabui.evaluation.miniwob import MiniWoBEvalConfig, default_team, evaluate_miniwob
from collabui.evaluation.workers import EpisodeWorker, WorkerPool, WorkerSetup, _apply
from collabui.trace import read_trace
from tests.evaluation.worker_kit import broken_env, fake_env, real_or_broken_env
from tests.processes import chromium_descendants

#: What must not depend on the worker that ran an episode.
OUTCOME = ("episode_id", "task", "seed", "success", "reward", "steps", "error", "proposals", "unparsable")


def outcomes(out: Path) -> list[dict[str, Any]]:
    """Per episode, in spec order: the outcome fields and the executed actions of its trace."""
    results = json.loads((out / "results.json").read_text())
    manifest = {json.loads(line)["episode_id"]: json.loads(line)
                for line in (out / "episodes.jsonl").read_text().splitlines()}
    rows = []
    for episode_id in sorted(manifest):
        record = manifest[episode_id]
        trace = read_trace(out / "traces" / f"{episode_id}.jsonl")
        rows.append({**{k: record.get(k) for k in OUTCOME},
                     "actions": [step["executed"] for step in trace.steps]})
    assert results["counts"]["episodes"] == len(rows)
    return rows


def _config(team: dict[str, Any] | None = None, **kw: Any) -> MiniWoBEvalConfig:
    model = kw.pop("model", "lexical")
    return MiniWoBEvalConfig(**{"tasks": "click-button,focus-text", "episodes": 2, "model": model,
                                "team": default_team(model, **{"max_steps": 2, **(team or {})}), **kw})


def test_worker_processes_equal_the_one_process_run(tmp_path):
    here = evaluate_miniwob(_config(), tmp_path / "here", env_factory=fake_env, progress=False)
    there = evaluate_miniwob(_config(workers=2), tmp_path / "there", env_factory=fake_env, progress=False)
    assert outcomes(tmp_path / "there") == outcomes(tmp_path / "here")
    assert there["overall"] == here["overall"] and there["run"]["backend"] == "processes"
    pids = {json.loads(line)["worker"]["pid"] for line in (tmp_path / "there" / "episodes.jsonl").open()}
    assert len(pids) == 2  # both workers ran episodes


def test_a_resumed_run_starts_no_worker(tmp_path, monkeypatch):
    evaluate_miniwob(_config(episodes=1), tmp_path, env_factory=fake_env, progress=False)
    monkeypatch.setattr(WorkerPool, "start", lambda *a: pytest.fail("a worker was started"))
    results = evaluate_miniwob(_config(episodes=1, workers=2), tmp_path, env_factory=fake_env, progress=False)
    assert results["counts"]["episodes"] == 2


def test_a_worker_failure_reaches_the_driver_and_the_workers_close(tmp_path):
    with pytest.raises(DeviceError, match="cannot open miniwob/click-button"):
        evaluate_miniwob(_config(workers=2), tmp_path, env_factory=broken_env, progress=False)
    assert not (tmp_path / "episodes.jsonl").read_text()  # nothing finished, nothing recorded


def test_bad_worker_settings_are_one_line_errors(tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match="concurrency and workers/ray do not combine"):
        _config(workers=2, concurrency=2)
    with pytest.raises(ConfigError, match="workers must be an integer >= 1"):
        _config(workers=0)
    with pytest.raises(ConfigError, match=r"no Ray cluster answers at 127\.0\.0\.1:9 .*ray start --head"):
        evaluate_miniwob(_config(ray="127.0.0.1:9"), tmp_path / "a", env_factory=fake_env, progress=False)
    monkeypatch.setitem(__import__("sys").modules, "ray", None)  # as if the extra were not installed
    with pytest.raises(ConfigError, match=r"needs Ray, which is not installed; pip install 'collabui-agents\[ray\]'"):
        evaluate_miniwob(_config(ray="auto"), tmp_path / "b", env_factory=fake_env, progress=False)


def test_episode_worker_streams_its_trace_and_closes_its_team(tmp_path):
    closed = []

    class Team:
        def run(self, task, device, *, seed, trace, episode_id, env_name):
            from collabui.models.spec import load_model
            from collabui.team import CollabAgentTeam

            return CollabAgentTeam(load_model("lexical"), n_agents=1, rounds=1, max_steps=1).run(
                task, device, seed=seed, trace=trace, episode_id=episode_id, env_name=env_name)

        def close(self):
            closed.append(True)

    from collabui.evaluation.runner import EpisodeSpec

    worker = EpisodeWorker(WorkerSetup(team=Team, env="miniwob", env_factory=fake_env))
    items = list(worker.stream(EpisodeSpec("click-button", 3, "e0"), poll_s=0.01))
    worker.close()
    kinds = [kind for kind, _ in items]
    assert kinds[0] == "where" and kinds[-1] == "done" and set(kinds[1:-1]) <= {"append", "rewrite"}
    trace = tmp_path / "e0.jsonl"
    for kind, item in items[1:-1]:
        _apply(trace, kind, item)  # what the driver does with them
    record, files = items[-1][1]
    assert record["success"] and record["worker"]["pid"] == os.getpid() and files == {}
    assert [s["executed"] for s in read_trace(trace).steps] == [{"action": "click", "element_id": "B"}]
    assert closed == [True]


def _descendants() -> set[int]:
    """Pids of every live process below this one (read from /proc)."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue  # ended while we listed
            if stat[stat.rindex(")") + 2] != "Z":  # an exited child not yet reaped is gone
                parents[int(entry)] = int(stat[stat.rindex(")") + 2:].split()[1])
    found, frontier = set(), {os.getpid()}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


@pytest.mark.slow
def test_a_private_ray_cluster_equals_the_one_process_run_and_goes_away(tmp_path, monkeypatch):
    import ray  # noqa: F401 - the ray extra, which make test installs: missing, the test fails
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")  # else Ray saves a token in the user's ~/.ray
    before = _descendants()
    evaluate_miniwob(_config(), tmp_path / "here", env_factory=fake_env, progress=False)
    results = evaluate_miniwob(_config(workers=2, ray="local"), tmp_path / "ray", env_factory=fake_env,
                               progress=False)
    assert outcomes(tmp_path / "ray") == outcomes(tmp_path / "here") and results["run"]["backend"] == "ray"
    deadline = time.monotonic() + 30  # ray.shutdown has signalled its processes; let them exit
    while _descendants() - before and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _descendants() - before == set()


@pytest.mark.browser
@pytest.mark.slow
def test_real_pages_on_worker_processes_equal_the_one_process_run(tmp_path):
    before = chromium_descendants()
    config = {"tasks": "click-button,click-test", "episodes": 2, "model": "lexical",
              "team": default_team("lexical", max_steps=3)}
    evaluate_miniwob(MiniWoBEvalConfig(**config), tmp_path / "here", progress=False)
    evaluate_miniwob(MiniWoBEvalConfig(**config, workers=2), tmp_path / "there", progress=False)
    assert outcomes(tmp_path / "there") == outcomes(tmp_path / "here")
    assert chromium_descendants() - before == set()  # every worker closed its browser


def test_cli_ray_address_nobody_answers_is_one_line(tmp_path, capsys):
    from collabui.cli import main

    code = main(["eval", "miniwob", "--model", "lexical", "--tasks", "click-button", "--workers", "2",
                 "--ray", "127.0.0.1:9", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 2 and err[-1].startswith("error: no Ray cluster answers at 127.0.0.1:9")


def test_throughput_benchmark_times_each_worker_count(capsys):
    from collabui.cli import build_parser, main
    from collabui.cli.eval import nested_values
    from collabui.config import TeamConfig
    from collabui.evaluation.throughput import (
        ThroughputConfig,
        format_throughput,
        measure_throughput,
    )

    config = ThroughputConfig(workers=(1,), tasks="click-button", episodes=2,
                              team=TeamConfig(n_agents=1, rounds=1, max_steps=1))
    assert config.evaluation(2).workers == 2 and config.evaluation(2).team.screenshots is False
    assert ThroughputConfig(model="smollm2").evaluation(1).team.n_agents == 4  # the model's default team
    args = build_parser().parse_args(["eval", "throughput", "--model", "smollm2", "--agents", "1", "--rounds", "1",
                                      "--max-steps", "3"])
    team = TeamConfig(**nested_values(ThroughputConfig, "team", args))
    assert (team.n_agents, team.rounds, team.max_steps) == (1, 1, 3)
    rows = measure_throughput(config, env_factory=fake_env)
    assert [(r.workers, r.episodes, r.successes) for r in rows] == [(1, 2, 2)] and rows[0].seconds > 0
    table = format_throughput(rows)
    assert table.splitlines()[0].startswith("| workers | episodes |") and "| 1.00x |" in table
    assert main(["eval", "throughput", "--workers", "0,2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --workers takes worker counts >= 1 like 1,2,4")


class _ClickB(BaseHTTPRequestHandler):
    """An OpenAI-compatible /v1/chat/completions that always clicks B and counts the calls."""

    calls: list[int] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server API
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.calls.append(1)
        answer = 'Thought: OK is B.\nAction: {"action": "click", "element_id": "B"}'
        data = json.dumps({
            "id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": answer}}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


def test_workers_send_their_model_calls_to_one_shared_server(tmp_path):
    _ClickB.calls = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _ClickB)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        spec = f"openai:stub@http://127.0.0.1:{server.server_address[1]}/v1"
        results = evaluate_miniwob(_config(model=spec, team={"n_agents": 2, "rounds": 1}, workers=2), tmp_path,
                                   env_factory=fake_env, progress=False)
    finally:
        server.shutdown()
        server.server_close()
    records = [json.loads(line) for line in (tmp_path / "episodes.jsonl").open()]
    assert results["overall"]["success_rate"]["value"] == 1.0
    assert len({r["worker"]["pid"] for r in records}) == 2  # two workers, each a client of the server
    assert len(_ClickB.calls) == sum(r["proposals"] for r in records) == 4 * 2  # every call, none from here


@pytest.mark.browser
def test_a_failing_worker_leaves_no_chromium_of_the_others(tmp_path):
    before = chromium_descendants()
    config = MiniWoBEvalConfig(tasks="click-button,click-test", episodes=1, model="lexical", workers=2,
                               team=default_team("lexical", max_steps=2))
    with pytest.raises(DeviceError, match="cannot open miniwob/click-test"):
        evaluate_miniwob(config, tmp_path, env_factory=real_or_broken_env, progress=False)
    assert chromium_descendants() - before == set()  # the live worker closed its browser too
