"""The MiniWoB++ oracle behind the `oracle` critic: what it knows, and that it is right."""

import json

import pytest

from collabui import CollabAgentTeam
from collabui.actions.web import Click
from collabui.devices.base import Observation
from collabui.devices.fake import FakeDevice
from collabui.devices.registry import make_env
from collabui.models.fake import ScriptedChatModel
from collabui.prompts import render_observation
from collabui.training.critic import make_critic
from collabui.training.labels import label_traces
from collabui.training.oracles import ORACLE_TASKS, miniwob_gold_action

SCREEN = "< <div| lorem> <button[A]| cancel> <button[B]| okay> <input[C]| > >"


def test_gold_actions_from_task_and_screen():
    assert miniwob_gold_action('Click on the "okay" button.', SCREEN) == Click("B")
    assert miniwob_gold_action("Focus into the textbox.", SCREEN) == Click("C")
    assert miniwob_gold_action('Click on the "nope" button.', SCREEN) is None
    assert miniwob_gold_action("Book the cheapest flight.", SCREEN) is None  # unknown task: abstain


def test_gold_actions_read_the_screens_tree_when_there_is_one(tmp_path):
    tree = {"tag": "", "id": None, "parts": [{"tag": "button", "id": "K", "parts": ["okay"]}]}
    assert miniwob_gold_action('Click on the "okay" button.', SCREEN, tree) == Click("K")
    # Through a trace: the step's observation keeps the tree, the critic's context carries it.
    model = ScriptedChatModel(lambda r: 'Action: {"action": "click", "element_id": "K"}')
    device = FakeDevice([Observation(text=SCREEN, task='Click on the "okay" button.', extra={"tree": tree})])
    CollabAgentTeam(model, n_agents=1, rounds=1, max_steps=1).run(None, device, trace=tmp_path / "traces")
    out = tmp_path / "labels.jsonl"
    label_traces(tmp_path / "traces", make_critic("oracle"), out, progress=False)
    assert json.loads(out.read_text())["rewards"] == [[1]]  # by the text alone, K is no element


def test_oracle_critic_rewards_the_right_entries_and_abstains_elsewhere(tmp_path):
    answers = {0.1: "B", 0.3: "A"}
    model = ScriptedChatModel(lambda r: f'Action: {{"action": "click", "element_id": "{answers[r.temperature]}"}}')
    team = CollabAgentTeam(model, n_agents=2, rounds=2, topology="independent", max_steps=1)
    for eid, task in [("known", 'Click on the "okay" button.'), ("unknown", "Book a flight.")]:
        device = FakeDevice([Observation(text=SCREEN, task=task, url="http://127.0.0.1/x")])
        team.run(None, device, trace=tmp_path / "traces", episode_id=eid)
    out = tmp_path / "labels.jsonl"
    label_traces(tmp_path / "traces", make_critic("oracle"), out, progress=False)
    labels = {r["episode_id"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert labels["known"]["critic"] == "oracle"
    assert labels["known"]["rewards"] == [[1, 1], [0, 0]]  # agent 0 clicked okay, agent 1 cancel
    assert labels["unknown"]["rewards"] == [[None, None], [None, None]]


@pytest.mark.browser
@pytest.mark.parametrize("task", ORACLE_TASKS)
def test_oracle_solves_real_pages_from_what_agents_read(task):
    with make_env(f"miniwob/{task}") as env:
        for seed in range(3):
            obs = env.reset(seed=seed)
            for _ in range(8):
                action = miniwob_gold_action(obs.task, render_observation(obs), obs.extra["tree"])
                assert action == miniwob_gold_action(obs.task, render_observation(obs))  # tree = text
                assert action is not None
                outcome = env.act(action)
                if outcome.done:
                    break
                obs = outcome.observation
            assert outcome.reward == 1, (task, seed)
