"""The vote bound tells a step the vote lost (a right proposal outvoted) from one no agent got
right: a real team step on a MiniWoB++ page, labelled by the verified critic."""

import pytest

from tests.cookbook.scripts import labelled_click_button_step, load_script


def _script():
    return load_script("vote_bound")


@pytest.mark.browser
def test_a_lost_step_with_a_right_proposal_counts_as_one_a_better_vote_could_win(tmp_path):
    result = labelled_click_button_step(tmp_path, ("wrong", "wrong", "right", "garbled"))
    assert not result.success  # two wrong votes against one right
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
