import json

import pytest

from collabui import CollabAgentTeam
from collabui.cli import main
from collabui.devices.base import Observation
from collabui.devices.fake import FakeDevice
from collabui.errors import ConfigError
from collabui.evaluation.team_dynamics import read_team_traces, team_dynamics
from collabui.models.fake import ScriptedChatModel
from collabui.trace import JsonlTraceStore

SCREENS = [Observation(text="<button[B]| Next> <button[C]| OK>", task="Press OK."),
           Observation(text="<button[B]| Next> <button[C]| OK>", task="Press OK.")]


def _record(folder, answer, *, n=4, m=3, topology="chain", episodes=2, **options):
    """Run ``episodes`` real team episodes (two steps each) and write their JSONL traces."""
    store = JsonlTraceStore(folder / "traces")
    for e in range(episodes):
        team = CollabAgentTeam(ScriptedChatModel(answer), n_agents=n, rounds=m, topology=topology,
                               adapters=tuple(f"a{i}" for i in range(n)), batch_fallback_s=30, max_steps=2,
                               **options)
        team.run(None, FakeDevice(SCREENS, success_when=lambda a: False), seed=e, trace=store, episode_id=f"ep{e}")
    return folder


def _per_agent_calls(decide):
    """A fake whose answer is ``decide(agent, round)``: an agent's calls within a step are its
    rounds in order (each step has m calls per agent)."""
    calls: dict[str, int] = {}

    def answer(req):
        j = calls.get(req.adapter, 0)
        calls[req.adapter] = j + 1
        return f'Action: {{"action": "click", "element_id": "{decide(int(req.adapter[1:]), j % 3)}"}}'

    return answer


def test_agents_that_keep_their_answers_and_agree_read_as_such(tmp_path):
    folder = _record(tmp_path, _per_agent_calls(lambda i, j: "C"))
    d = team_dynamics(read_team_traces(folder))
    assert d.steps == 4 and d.episodes == 2
    assert d.overall == {"winner_share": 1.0, "majority": 1.0, "ties": 0.0, "kept_own": 1.0,
                         "agrees_with_predecessor": 1.0, "last_round_on_winner": 1.0,
                         "arbiter_overruled": 0.0}
    assert [a["on_winner"] for a in d.by_agent] == [1.0] * 4
    assert d.by_task == {"?": d.overall}  # a fake device names no environment


def test_alternating_agents_and_a_split_vote_are_measured(tmp_path):
    # Agents 0 and 1 flip B, C, B; agents 2 and 3 flip C, B, C: every round changes every
    # agent's answer, and the 12 votes split 6-6 (a tie).
    def decide(i, j):
        return "BC"[(i // 2 + j) % 2]

    d = team_dynamics(read_team_traces(_record(tmp_path, _per_agent_calls(decide))))
    assert d.overall["kept_own"] == 0.0
    assert d.overall["winner_share"] == 0.5 and d.overall["majority"] == 0.0 and d.overall["ties"] == 1.0
    # Chain 0 -> 1 -> 2 -> 3: agent 1 repeats agent 0, agent 3 repeats agent 2, agent 2 differs from 1.
    assert d.overall["agrees_with_predecessor"] == pytest.approx(2 / 3, abs=1e-3)
    # In the last round agents 0 and 1 say B, 2 and 3 say C; exactly half match the winner.
    assert d.overall["last_round_on_winner"] == 0.5


def test_an_arbiter_that_overrules_the_count_is_measured(tmp_path):
    # Agent 0 says C (OK, what the task names), the other three B: the count picks B 9-3, the
    # lexical arbiter answers C, which agent 0 proposed, so it is executed at every step.
    d = team_dynamics(read_team_traces(_record(tmp_path, _per_agent_calls(lambda i, j: "C" if i == 0 else "B"),
                                               arbiter="lexical")))
    assert d.overall["arbiter_overruled"] == 1.0 and d.overall["winner_share"] == 0.25
    assert [a["on_winner"] for a in d.by_agent] == [1.0, 0.0, 0.0, 0.0]


def test_cli_prints_one_column_per_folder_and_writes_json(tmp_path, capsys):
    a = _record(tmp_path / "a", _per_agent_calls(lambda i, j: "C"))
    b = _record(tmp_path / "b", _per_agent_calls(lambda i, j: "BC"[(i // 2 + j) % 2]))
    out, png = tmp_path / "dyn.json", tmp_path / "plots" / "dyn.png"
    assert main(["eval", "team", str(a), str(b), "--out", str(out), "--plot", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = capsys.readouterr().out
    assert "kept_own" in text and "100.0%" in text and "0.0%" in text
    data = json.loads(out.read_text())
    assert data[str(a)]["overall"]["kept_own"] == 1.0 and data[str(b)]["overall"]["kept_own"] == 0.0


def test_single_agent_traces_and_missing_folders_get_one_line_errors(tmp_path, capsys):
    single = _record(tmp_path / "s", _per_agent_calls(lambda i, j: "C"), n=1, m=1, topology="independent")
    assert main(["eval", "team", str(single)]) != 0
    assert "no team steps" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="holds no traces"):
        read_team_traces(tmp_path)
    with pytest.raises(ConfigError, match="is not a folder"):
        read_team_traces(tmp_path / "nope")


def test_actions_are_compared_as_the_vote_compares_them(tmp_path):
    # "Hello  World" and "hello world" are one proposal for the vote, so an agent that writes
    # either kept its answer, though the recorded action dicts differ.
    calls: dict[str, int] = {}

    def answer(req):
        j = calls.get(req.adapter, 0)
        calls[req.adapter] = j + 1
        text = "Hello  World" if j % 2 else "hello world"
        return f'Action: {{"action": "type_string", "element_id": "B", "content": "{text}"}}'

    folder = _record(tmp_path, answer, episodes=1)
    steps = read_team_traces(folder)[0].steps
    assert steps[0]["proposals"][0][0]["action"] != steps[0]["proposals"][0][1]["action"]
    assert team_dynamics(read_team_traces(folder)).overall["kept_own"] == 1.0
