"""cookbook/cpu_recipe/serving_speed.py: a team's recorded requests, grouped as the team sent
them, replayed against a real llama.cpp server; bad input is one line and exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from .scripts import load_script


@pytest.fixture(scope="module")
def team_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run folder with one traced step of a 2 x 2 chain team (scripted answers, a real page)."""
    from collabui import CollabAgentTeam
    from collabui.devices import make_env
    from collabui.models.fake import ScriptedChatModel

    folder = tmp_path_factory.mktemp("run")
    model = ScriptedChatModel(lambda req: 'Action: {"action": "click", "element_id": "A"}')
    team = CollabAgentTeam(model, n_agents=2, rounds=2, topology="chain", max_steps=1, seed=0)
    with make_env("miniwob/click-button") as env:
        team.run(None, env, seed=5, trace=folder / "traces")
    return folder


@pytest.mark.browser
def test_requests_are_grouped_by_superstep_with_each_agent_adapter(team_run: Path) -> None:
    speed = load_script("serving_speed")
    [trace] = (team_run / "traces").glob("*.jsonl")
    [step] = speed._steps(trace, ["a0", "a1"])
    # A chain of 2 agents over 2 rounds: (0,0) | (1,0) and (0,1) | (1,1): three supersteps.
    assert [len(batch) for batch in step] == [1, 2, 1]
    assert [[r.adapter for r in batch] for batch in step] == [["a0"], ["a0", "a1"], ["a1"]]
    assert all(r.messages[-1]["role"] == "user" for batch in step for r in batch)
    assert {r.temperature for batch in step for r in batch} == {0.1, 0.3}


def test_bad_input_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    speed = load_script("serving_speed")
    assert speed.main(["--run", str(tmp_path)]) == 2
    assert "holds no traces" in capsys.readouterr().err
    (tmp_path / "traces").mkdir()
    (tmp_path / "traces" / "x.jsonl").write_text("")
    assert speed.main(["--run", str(tmp_path), "--backends", "tgi"]) == 2
    assert "unknown backend 'tgi'" in capsys.readouterr().err


@pytest.mark.browser
@pytest.mark.model
@pytest.mark.slow
def test_replays_on_a_real_llamacpp_server(team_run: Path, tmp_path: Path, monkeypatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("COLLABUI_CACHE", str(tmp_path / "cache"))
    speed = load_script("serving_speed")
    assert speed.main(["--run", str(team_run), "--model", "smollm2", "--backends", "llamacpp", "--streams", "1"]) == 0
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert line.startswith("llamacpp: start-up ") and " 4 requests in " in line and "(1 traces, 1 at once)" in line
