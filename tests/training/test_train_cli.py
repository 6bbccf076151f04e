"""`collabui train label|pairs|dpo` end to end on traces recorded by a real team graph."""

import json

import pytest

from collabui import CollabAgentTeam
from collabui.actions.web import Click
from collabui.cli import main
from collabui.devices.base import Observation
from collabui.devices.fake import FakeDevice
from collabui.models.fake import ScriptedChatModel
from collabui.training.pairs import load_pairs


def _record(trace_dir, episodes=2):
    ok = 'Thought: OK is B.\nAction: {"action": "click", "element_id": "B"}'
    wrong = 'Thought: maybe C.\nAction: {"action": "click", "element_id": "C"}'
    # Agent 1 (temperature 0.3) first says C, then follows agent 0 (round 1 sees round-0 peers).
    model = ScriptedChatModel(lambda r: ok if r.temperature < 0.2 or "[Agent 0]" in r.messages[-1]["content"]
                              and "Your answer in the previous round" in r.messages[-1]["content"] else wrong)
    team = CollabAgentTeam(model, n_agents=2, rounds=2, topology="chain", max_steps=2)
    for k in range(episodes):
        device = FakeDevice([Observation(text="<button[B]| OK> <button[C]| Cancel>", task="Click OK.")],
                            success_when=lambda a: a == Click("B"))
        team.run(None, device, seed=k, trace=trace_dir, episode_id=f"ep{k}")
    return model


def test_label_then_pairs(tmp_path, capsys):
    traces = tmp_path / "traces"
    _record(traces)
    labels, pairs = tmp_path / "labels.jsonl", tmp_path / "pairs.jsonl"
    assert main(["train", "label", "--traces", str(traces), "--critic", "outcome", "--out", str(labels)]) == 0
    records = [json.loads(line) for line in labels.read_text().splitlines()]
    assert len(records) == 2 and all(r["rewards"] == [[1, 1], [1, 1]] for r in records)
    assert all(len(r["rewards"]) == 2 and len(r["rewards"][0]) == 2 for r in records)
    # Resume: a second run labels nothing new.
    assert main(["train", "label", "--traces", str(traces), "--out", str(labels)]) == 0
    assert len(labels.read_text().splitlines()) == 2  # resume: nothing relabelled
    assert main(["train", "pairs", "--traces", str(traces), "--labels", str(labels), "--out", str(pairs)]) == 0
    ds = load_pairs(pairs)
    assert len(ds) > 0 and set(ds["agent"]) <= {0, 1}
    assert all(r["chosen"][0]["content"] != r["rejected"][0]["content"] for r in ds)
    capsys.readouterr()


def test_own_pairs_with_right_pairs_and_a_cap_per_agent(tmp_path, capsys):
    """`train pairs --adversary own --right-pairs --max-pairs 1`: agent 1's wrong round-0 answer
    (C) is its own pair, the right answers (agent 0's, agent 1's round 1) are paired against it,
    one pair per agent kept."""
    traces, labels, pairs = tmp_path / "traces", tmp_path / "labels.jsonl", tmp_path / "pairs.jsonl"
    _record(traces)
    assert main(["train", "label", "--traces", str(traces), "--critic", "outcome", "--out", str(labels)]) == 0
    records = [json.loads(line) for line in labels.read_text().splitlines()]
    for r in records:  # as the verified critic scores it: C was wrong
        r["rewards"][1][0], r["scores"][1][0] = 0, 0.0
    labels.write_text("".join(json.dumps(r) + "\n" for r in records))
    argv = ["train", "pairs", "--traces", str(traces), "--labels", str(labels), "--adversary", "own", "--out", str(pairs)]
    assert main([*argv, "--right-pairs"]) == 0
    built = load_pairs(pairs)
    assert sorted(set(zip(built["agent"], built["rejected_source"], strict=True))) == [(0, "team"), (1, "own"), (1, "team")]
    assert main([*argv, "--right-pairs", "--max-pairs", "1"]) == 0
    assert sorted(load_pairs(pairs)["agent"]) == [0, 1] and len(built) > 2
    assert main([*argv, "--right-pairs", "--lost-only"]) == 0  # both episodes were won: nothing to pair
    assert len(load_pairs(pairs)) == 0
    capsys.readouterr()


@pytest.mark.parametrize("argv", [["train", "label", "--traces", "/nonexistent", "--out", "x.jsonl"],
                                  ["train", "label", "--traces", ".", "--critic", "oracle", "--out", "x.jsonl"],
                                  ["train", "pairs", "--traces", ".", "--labels", "l", "--adversary", "evil", "--out", "p"],
                                  ["train", "pairs", "--traces", ".", "--labels", "l", "--adversary", "own", "--repeat-clicks",
                                   "--out", "p"],
                                  ["train", "pairs", "--traces", ".", "--labels", "l", "--adversary", "own", "--swap-texts",
                                   "--out", "p"],
                                  ["train", "pairs", "--traces", ".", "--labels", "l", "--swap-texts", "--out", "p"]])
def test_train_bad_input_one_line(argv, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ")


def test_dpo_command_trains_adapters_the_team_then_runs(tmp_path, base_dir, capsys):
    from collabui.training.dpo import load_team_model, team_adapters

    traces, labels, pairs, out = tmp_path / "t", tmp_path / "l.jsonl", tmp_path / "p.jsonl", tmp_path / "adapters"
    _record(traces)
    assert main(["train", "label", "--traces", str(traces), "--out", str(labels)]) == 0
    assert main(["train", "pairs", "--traces", str(traces), "--labels", str(labels), "--out", str(pairs)]) == 0
    assert main(["train", "dpo", "--pairs", str(pairs), "--model", f"hf:{base_dir}", "--out", str(out),
                 "--max_steps", "2", "--per_device_train_batch_size", "2", "--plot"]) == 0
    assert (out / "agent0" / "adapter_model.safetensors").exists() and (out / "agent1").is_dir()
    assert (out / "dpo_report.json").exists() and (out / "dpo_report.png").exists()
    # The runtime runs a team from the trained adapters: agent i's requests use adapter agent{i}.
    model = load_team_model(base_dir, out)
    team = CollabAgentTeam(model, n_agents=2, rounds=1, adapters=team_adapters(model, 2), max_new_tokens=8)
    step = team.step("Click OK.", Observation(text="<button[B]| OK>"))
    assert [p.adapter for row in step.proposals for p in row] == ["agent0", "agent1"]
    capsys.readouterr()


def test_dpo_command_rejects_unknown_option(tmp_path, capsys):
    assert main(["train", "dpo", "--pairs", "p.jsonl", "--out", str(tmp_path), "--no_such_option", "1"]) == 2
    assert "bad DPO option" in capsys.readouterr().err
