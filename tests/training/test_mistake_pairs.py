"""Own-mistake preference pairs: rejected is what the agent really said, chosen is verified."""

from __future__ import annotations

import json

from collabui.training.mistake_pairs import mistake_pairs_for_step


def _prop(i: int, j: int, raw: str, action: dict) -> dict:
    return {"agent": i, "round": j, "raw": raw, "action": action,
            "messages": [{"role": "user", "content": f"ctx of agent {i} round {j}"}]}


CLICK_A = {"action": "click", "element_id": "A"}
CLICK_B = {"action": "click", "element_id": "B"}
UNKNOWN = {"action": "unknown", "raw": "??", "reason": "unparsable"}
HEADER = {"episode_id": "ep", "action_space": "web"}


def _answer(action: dict) -> str:
    return "Action: " + json.dumps(action)


def test_each_wrong_entry_is_rejected_against_the_best_known_right_answer():
    step = {"t": 3, "proposals": [
        [_prop(0, 0, _answer(CLICK_B), CLICK_B), _prop(0, 1, _answer(CLICK_A), CLICK_A)],
        [_prop(1, 0, "??", UNKNOWN), _prop(1, 1, _answer(CLICK_B), CLICK_B)],
    ]}
    label = {"rewards": [[0, 1], [0, 0]], "scores": [[0.0, 1.0], [0.0, 0.0]], "abstained": False}
    rows = mistake_pairs_for_step(HEADER, step, label)
    assert [(r["agent"], r["round"]) for r in rows] == [(0, 0), (1, 0), (1, 1)]
    by_entry = {(r["agent"], r["round"]): r for r in rows}
    # Agent 0 was right in round 1: its own words are the chosen answer for its round-0 mistake.
    assert by_entry[(0, 0)]["chosen_source"] == "self"
    assert '"A"' in by_entry[(0, 0)]["chosen"][0]["content"] and '"B"' in by_entry[(0, 0)]["rejected"][0]["content"]
    # Agent 1 was never right: the team's right answer; its unparsable text is the rejected one.
    assert by_entry[(1, 0)]["chosen_source"] == "team" and by_entry[(1, 0)]["rejected"][0]["content"] == "??"
    assert by_entry[(1, 1)]["prompt"] == [{"role": "user", "content": "ctx of agent 1 round 1"}]
    assert all(r["rejected_source"] == "own" and r["episode_id"] == "ep" and r["t"] == 3 for r in rows)


def test_when_nobody_was_right_the_verified_target_is_chosen():
    step = {"t": 0, "proposals": [[_prop(0, 0, _answer(CLICK_B), CLICK_B)]]}
    label = {"rewards": [[0]], "scores": [[0.0]], "abstained": False,
             "rationale": json.dumps({"verified_action": CLICK_A, "continuation": [CLICK_A]})}
    (row,) = mistake_pairs_for_step(HEADER, step, label)
    assert row["chosen_source"] == "verified"
    assert json.loads(row["chosen"][0]["content"].removeprefix("Action: ")) == CLICK_A


def test_no_pairs_without_knowledge_or_without_mistakes():
    step = {"t": 0, "proposals": [[_prop(0, 0, _answer(CLICK_B), CLICK_B)]]}
    assert mistake_pairs_for_step(HEADER, step, {"rewards": [[0]], "scores": [[0.0]], "abstained": False}) == []
    assert mistake_pairs_for_step(HEADER, step, {"rewards": [[None]], "scores": [[None]], "abstained": True}) == []
    assert mistake_pairs_for_step(HEADER, step, {"rewards": [[1]], "scores": [[1.0]], "abstained": False}) == []


def test_grounded_teams_get_the_targets_screen_line_in_the_verified_answer():
    tree = {"tag": "", "id": None, "parts": [{"tag": "button", "id": "A", "parts": ["Go"]},
                                            {"tag": "button", "id": "B", "parts": ["Stop"]}]}
    header = {**HEADER, "team": {"prompt_style": "grounded"}, "device": {"element_format": "text-first"}}
    step = {"t": 0, "observation": {"text": "", "extra": {"tree": tree}},
            "proposals": [[_prop(0, 0, 'Thought: click button "Stop" [B]\n' + _answer(CLICK_B), CLICK_B)]]}
    label = {"rewards": [[0]], "scores": [[0.0]], "abstained": False,
             "rationale": json.dumps({"verified_action": CLICK_A})}
    (row,) = mistake_pairs_for_step(header, step, label)
    assert row["chosen"][0]["content"] == 'Thought: click button "Go" [A]\nAction: {"action": "click", "element_id": "A"}'


def test_on_policy_sft_rows_keep_right_answers_and_correct_wrong_ones():
    from collabui.training.mistake_pairs import _sft_rows_for_step

    step = {"t": 2, "proposals": [[_prop(0, 0, _answer(CLICK_A) + "\nObservation: more", CLICK_A),
                                   _prop(0, 1, "??", UNKNOWN)]]}
    label = {"rewards": [[1, 0]], "scores": [[1.0, 0.0]], "abstained": False}
    rows = _sft_rows_for_step(HEADER, step, label)
    assert [(r["round"], r["source"]) for r in rows] == [(0, "own"), (1, "self")]
    # The right answer is kept cut after its action; the unparsable one is replaced by it.
    assert [r["completion"][0]["content"] for r in rows] == [_answer(CLICK_A)] * 2
    assert rows[1]["prompt"] == [{"role": "user", "content": "ctx of agent 0 round 1"}]
    wrong = {"t": 0, "proposals": [[_prop(0, 0, _answer(CLICK_B), CLICK_B)]]}
    verified = {"rewards": [[0]], "scores": [[0.0]], "abstained": False,
                "rationale": json.dumps({"verified_action": CLICK_A})}
    (row,) = _sft_rows_for_step(HEADER, wrong, verified)
    assert row["source"] == "verified" and json.loads(row["completion"][0]["content"][8:]) == CLICK_A
    assert _sft_rows_for_step(HEADER, wrong, {"rewards": [[0]], "scores": [[0.0]], "abstained": False}) == []
    assert _sft_rows_for_step(HEADER, wrong, {"rewards": [[None]], "abstained": True}) == []
