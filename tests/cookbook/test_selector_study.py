"""The selector study scores each rule at the steps where the choice matters: a real team step
on a MiniWoB++ page labelled by the verified critic, and the learned selector on hand-made steps."""

import pytest

from tests.cookbook.scripts import labelled_click_button_step, load_script


@pytest.mark.browser
def test_the_vote_loses_the_step_the_lexical_arbiter_wins(tmp_path):
    labelled_click_button_step(tmp_path, ("wrong", "wrong", "right", "wrong"))
    study = load_script("selector_study")
    [choice] = study.choices(tmp_path)
    assert choice.votes == [3, 1] and choice.right == [0, 1] and choice.lexical == choice.keys[1]
    counts = study.study([choice])
    assert counts["vote"] == 0 and counts["lexical arbiter"] == 1
    assert "learned (leave one task out)" not in counts  # one task: nothing to learn from


def test_the_learned_selector_finds_the_feature_that_marks_the_right_proposal():
    study = load_script("selector_study")

    def step(task, right_first):
        # Feature 0 marks the right proposal; feature 1 (the vote share) favours the wrong one.
        right, wrong = [1.0, 0.25], [0.0, 0.75]
        features = [right, wrong] if right_first else [wrong, right]
        return study.Choice(task, ["a", "b"], [1, 3], features, [1, 0] if right_first else [0, 1],
                            None, "b" if right_first else "a", -1.0, False)

    steps = [step(f"task{k}", k % 2 == 0) for k in range(6)]
    counts = study.study(steps)
    assert counts["learned (leave one task out)"] == 6
    assert counts["vote"] == counts["lexical arbiter"] == 0


def test_a_folder_without_traces_is_one_line_and_exit_code_2(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        load_script("selector_study").main([str(tmp_path / "nosuch")])
    assert stop.value.code == 2
    assert capsys.readouterr().err.startswith("selector_study: no trace file or folder at ")
