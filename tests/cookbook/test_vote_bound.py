"""The vote bound tells a step the vote lost (a right proposal outvoted) from one no agent got
right: a real team step on a MiniWoB++ page, labelled by the verified critic."""

import re

import pytest

from tests.cookbook.scripts import load_script


def _script():
    return load_script("vote_bound")


def _one_agent_right(req):
    """Agent "right" clicks the button the task names, "garbled" answers no action; the others
    click another button."""
    if req.adapter == "garbled":
        return "I would rather not say."
    user = req.messages[-1]["content"]
    target = re.search(r'Click on the "(.+?)" button', user)[1]
    buttons = re.findall(r"<button\[(\w+)\]\| ([^>]*)>", user)
    pick = next(i for i, text in buttons if (text.strip() == target) == (req.adapter == "right"))
    return f'Action: {{"action": "click", "element_id": "{pick}"}}'


@pytest.mark.browser
def test_a_lost_step_with_a_right_proposal_counts_as_one_a_better_vote_could_win(tmp_path):
    from collabui import CollabAgentTeam
    from collabui.devices import make_env
    from collabui.models.fake import ScriptedChatModel
    from collabui.training.critic import make_critic
    from collabui.training.labels import label_traces

    team = CollabAgentTeam(ScriptedChatModel(_one_agent_right), n_agents=4, rounds=1, topology="independent",
                           adapters=("wrong", "wrong", "right", "garbled"), max_steps=1, seed=0)
    with make_env("miniwob/click-button") as env:
        result = team.run(None, env, seed=5, trace=tmp_path / "traces", env_name="miniwob/click-button")
    assert not result.success  # two wrong votes against one right
    critic = make_critic("verified")
    try:
        label_traces(tmp_path / "traces", critic, tmp_path / "labels.jsonl")
    finally:
        critic.close()
    found = _script().summarize(tmp_path, tmp_path / "labels.jsonl")
    assert found["episodes"] == 1 and found["won"] == 0
    assert found["steps"] == found["steps_wrong"] == found["steps_wrong_right_proposed"] == 1
    assert found["lost_with_a_right_proposal"] == found["lost_at_a_labelled_wrong_step"] == 1
    assert found["votes_of_the_right_action_when_outvoted"] == {1: 1}
    # The unparsed answer is no vote, as in the team's own vote.
    from collabui.trace import read_trace
    from collabui.training.labels import load_labels

    [step] = read_trace(next((tmp_path / "traces").glob("*.jsonl")), validate=False).steps
    [label] = load_labels(tmp_path / "labels.jsonl").values()
    assert sorted(_script().step_verdict(step, label)["votes"].values()) == [1, 2]
