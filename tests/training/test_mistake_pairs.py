"""Own-mistake preference pairs: rejected is what the agent really said, chosen is verified."""

from __future__ import annotations

import json

import pytest

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


@pytest.mark.parametrize("style", ["grounded", "terse"])
def test_grounded_teams_get_the_targets_screen_line_in_the_verified_answer(style: str):
    tree = {"tag": "", "id": None, "parts": [{"tag": "button", "id": "A", "parts": ["Go"]},
                                            {"tag": "button", "id": "B", "parts": ["Stop"]}]}
    header = {**HEADER, "team": {"prompt_style": style}, "device": {"element_format": "text-first"}}
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


TYPE_A = {"action": "type_string", "element_id": "A", "content": "bob", "press_enter": False}


def _tree(*elements: tuple[str, str, int]) -> dict:
    """A page of labelled fields and buttons: (tag, id, dom rank)."""
    parts = [{"tag": "", "id": None, "parts": [{"tag": "label", "id": None, "parts": ["Name"]},
                                              {"tag": tag, "id": i, "parts": [], "dom": dom}]}
             for tag, i, dom in elements]
    return {"tag": "", "id": None, "parts": parts}


def test_right_answers_are_paired_with_the_teams_mistake_and_with_typing_again():
    from collabui.training.mistake_pairs import right_pairs_for_step

    # The previous page typed "bob" into field A; this page lists that field as Q (ids reshuffle).
    previous = {"t": 0, "executed": TYPE_A, "observation": {"text": "", "extra": {"tree": _tree(("input", "A", 0))}}}
    step = {"t": 1, "observation": {"text": "", "extra": {"tree": _tree(("input", "Q", 0), ("button", "S", 1))}},
            "proposals": [[_prop(0, 0, _answer({"action": "click", "element_id": "S"}), {"action": "click", "element_id": "S"}),
                           _prop(0, 1, _answer(CLICK_B), CLICK_B)],
                          [_prop(1, 0, "??", UNKNOWN), _prop(1, 1, _answer(CLICK_B), CLICK_B)]]}
    label = {"rewards": [[1, 0], [0, 0]], "scores": [[1.0, 0.0], [0.0, 0.0]], "abstained": False}
    rows = right_pairs_for_step(HEADER, step, label, previous)
    # Only the right entry (0, 0) is chosen; against the most common wrong proposal, and against
    # typing "bob" into the same field (found by its dom rank) again.
    assert [(r["agent"], r["round"], r["rejected_source"], r["chosen_source"]) for r in rows] == [
        (0, 0, "team", "own"), (0, 0, "repeat", "own")]
    assert json.loads(rows[0]["rejected"][0]["content"].removeprefix("Action: ")) == CLICK_B
    assert json.loads(rows[1]["rejected"][0]["content"].removeprefix("Action: ")) == {**TYPE_A, "element_id": "Q"}
    assert '"S"' in rows[0]["chosen"][0]["content"]


def test_no_repeat_pair_when_typing_again_was_right_or_the_field_is_gone():
    from collabui.training.mistake_pairs import right_pairs_for_step

    previous = {"t": 0, "executed": TYPE_A, "observation": {"text": "", "extra": {"tree": _tree(("input", "A", 0))}}}
    again = {**TYPE_A, "element_id": "Q"}
    step = {"t": 1, "observation": {"text": "", "extra": {"tree": _tree(("input", "Q", 0))}},
            "proposals": [[_prop(0, 0, _answer(again), again), _prop(0, 1, _answer(CLICK_B), CLICK_B)]]}
    label = {"rewards": [[1, 1]], "scores": [[1.0, 1.0]], "abstained": False}
    assert right_pairs_for_step(HEADER, step, label, previous) == []  # the critic called it right
    gone = {**step, "observation": {"text": "", "extra": {"tree": _tree(("input", "Q", 5))}}}
    label = {"rewards": [[0, 1]], "scores": [[0.0, 1.0]], "abstained": False}
    rows = right_pairs_for_step(HEADER, gone, label, previous)
    assert [r["rejected_source"] for r in rows] == ["team"]  # no field of that rank: no repeat


def test_repeat_clicks_pair_the_right_answer_against_clicking_the_previous_element_again():
    from collabui.training.mistake_pairs import right_pairs_for_step

    # The previous step clicked button A (dom rank 0); on this page it is R, and S is right.
    previous = {"t": 0, "executed": CLICK_A, "observation": {"text": "", "extra": {"tree": _tree(("button", "A", 0))}}}
    step = {"t": 1, "observation": {"text": "", "extra": {"tree": _tree(("button", "R", 0), ("button", "S", 1))}},
            "proposals": [[_prop(0, 0, _answer({"action": "click", "element_id": "S"}), {"action": "click", "element_id": "S"})]]}
    label = {"rewards": [[1]], "scores": [[1.0]], "abstained": False}
    assert right_pairs_for_step(HEADER, step, label, previous) == []  # typing repeats only, by default
    (row,) = right_pairs_for_step(HEADER, step, label, previous, repeat_clicks=True)
    assert row["rejected_source"] == "repeat" and '"S"' in row["chosen"][0]["content"]
    assert json.loads(row["rejected"][0]["content"].removeprefix("Action: ")) == {"action": "click", "element_id": "R"}
    # Clicking it again was what the critic called right: no repeat pair.
    again = {"action": "click", "element_id": "R"}
    step["proposals"] = [[_prop(0, 0, _answer(again), again)]]
    assert right_pairs_for_step(HEADER, step, label, previous, repeat_clicks=True) == []


def _typing(field: str, text: str) -> dict:
    return {"action": "type_string", "element_id": field, "content": text, "press_enter": False}


def test_swap_texts_pair_a_right_typing_against_another_of_the_tasks_texts_in_that_field():
    from collabui.redaction import PASSWORD_MASK, TASK_PASSWORD
    from collabui.training.mistake_pairs import right_pairs_for_step

    # The name field N takes "Mercado"; the search still has the genre and the password to type,
    # and the previous step typed the year.
    plan = [_typing("N", "Mercado"), _typing("G", "paranoid"), _typing("P", TASK_PASSWORD), {"action": "click", "element_id": "S"}]
    label = {"rewards": [[1, 1, 1], [1, 0, 1]], "scores": [[1.0] * 3, [1.0, 0.0, 1.0]], "abstained": False,
             "rationale": json.dumps({"verified_action": plan[0], "continuation": plan})}
    previous = {"t": 0, "executed": _typing("Y", "1981")}
    right, wrong = _typing("N", "Mercado"), _typing("N", "mercado ")
    step = {"t": 1, "proposals": [[_prop(0, j, _answer(right), right) for j in range(3)],
                                  [_prop(1, 0, _answer(right), right), _prop(1, 1, _answer(wrong), wrong),
                                   _prop(1, 2, _answer(right), right)]]}
    assert all(r["rejected_source"] == "team" for r in right_pairs_for_step(HEADER, step, label, previous))  # off by default
    rows = [r for r in right_pairs_for_step(HEADER, step, label, previous, swap_texts=True) if r["rejected_source"] == "swap"]
    typed = {(r["agent"], r["round"]): json.loads(r["rejected"][0]["content"].removeprefix("Action: ")) for r in rows}
    # One swap per right entry, the other texts in turn by round; all into the name field; the
    # password as the trace writes it (masked), never the stand-in.
    assert typed == {(0, 0): _typing("N", "paranoid"), (0, 1): _typing("N", PASSWORD_MASK), (0, 2): _typing("N", "1981"),
                     (1, 0): _typing("N", "paranoid"), (1, 2): _typing("N", "1981")}
    assert all(r["chosen_source"] == "own" and '"Mercado"' in r["chosen"][0]["content"] for r in rows)


def test_no_swap_pair_without_another_text_or_when_the_other_text_was_right_there():
    from collabui.training.mistake_pairs import right_pairs_for_step

    one = _typing("N", "Mercado")
    label = {"rewards": [[1, 1]], "scores": [[1.0, 1.0]], "abstained": False,
             "rationale": json.dumps({"verified_action": one, "continuation": [one, {"action": "click", "element_id": "S"}]})}
    # Only its own text to type (another case of it counts as the same text): nothing to swap in.
    step = {"t": 0, "proposals": [[_prop(0, 0, _answer(one), one), _prop(0, 1, _answer(one), one)]]}
    assert right_pairs_for_step(HEADER, step, label, {"executed": _typing("Y", "MERCADO")}, swap_texts=True) == []
    # The field takes either text (the critic rewarded both): neither is a swap of the other.
    other = _typing("N", "Lopez")
    label["rationale"] = json.dumps({"verified_action": one, "continuation": [one, _typing("M", "Lopez")]})
    step = {"t": 0, "proposals": [[_prop(0, 0, _answer(one), one), _prop(0, 1, _answer(other), other)]]}
    assert right_pairs_for_step(HEADER, step, label, None, swap_texts=True) == []
    # A click has no text to swap.
    click = {"action": "click", "element_id": "S"}
    step = {"t": 0, "proposals": [[_prop(0, 0, _answer(click), click)]]}
    assert right_pairs_for_step(HEADER, step, {**label, "rewards": [[1]], "scores": [[1.0]]}, None, swap_texts=True) == []


def test_balance_pairs_draws_each_agent_evenly_over_the_kinds_of_correction():
    from datasets import Dataset

    from collabui.training.mistake_pairs import balance_pairs, correction_counts

    def pair(agent: int, rejected: dict, chosen: dict) -> dict:
        return {"agent": agent, "rejected": [{"role": "assistant", "content": _answer(rejected)}],
                "chosen": [{"role": "assistant", "content": _answer(chosen)}]}

    rows = ([pair(0, CLICK_A, CLICK_B)] * 10 + [pair(0, CLICK_A, TYPE_A)] * 2 + [pair(0, TYPE_A, CLICK_A)] * 3
            + [pair(1, CLICK_B, CLICK_A)] * 2)
    ds = Dataset.from_list([{**r, "k": k} for k, r in enumerate(rows)])
    assert correction_counts(ds, "web") == {"click -> click": 12, "click -> type_string": 2, "type_string -> click": 3}
    kept = balance_pairs(ds, 6, "web", seed=1)
    # Agent 0: 2 of each kind (the rare kinds are not crowded out); agent 1 keeps what it has.
    assert [r["agent"] for r in kept].count(0) == 6 and [r["agent"] for r in kept].count(1) == 2
    assert correction_counts(kept.filter(lambda r: r["agent"] == 0), "web") == {
        "click -> click": 2, "click -> type_string": 2, "type_string -> click": 2}
    assert kept["k"] == sorted(kept["k"])  # the dataset's order is kept
    assert balance_pairs(ds, 6, "web", seed=1)["k"] == kept["k"]  # seeded


def test_mirror_corrections_keeps_no_more_of_one_cross_action_correction_than_of_its_reverse():
    from datasets import Dataset

    from collabui.training.mistake_pairs import correction_counts, mirror_corrections

    def pair(agent: int, rejected: dict | str, chosen: dict) -> dict:
        text = rejected if isinstance(rejected, str) else _answer(rejected)
        return {"agent": agent, "rejected": [{"role": "assistant", "content": text}],
                "chosen": [{"role": "assistant", "content": _answer(chosen)}]}

    rows = ([pair(0, TYPE_A, CLICK_A)] * 5 + [pair(0, CLICK_A, TYPE_A)] * 2 + [pair(0, CLICK_A, CLICK_B)] * 3
            + [pair(0, "no action here", CLICK_A)] + [pair(1, TYPE_A, CLICK_A)] * 4 + [pair(1, CLICK_B, CLICK_A)])
    ds = Dataset.from_list([{**r, "k": k} for k, r in enumerate(rows)])
    kept = mirror_corrections(ds, "web", seed=3)
    # Agent 0: typing rejected for a click only as often as the reverse; same-action corrections
    # and the unparsable answer all stay. Agent 1 has no reverse: none of its cross pairs stay.
    assert correction_counts(kept.filter(lambda r: r["agent"] == 0), "web") == {
        "click -> click": 3, "click -> type_string": 2, "type_string -> click": 2, "unknown -> click": 1}
    assert correction_counts(kept.filter(lambda r: r["agent"] == 1), "web") == {"click -> click": 1}
    assert kept["k"] == sorted(kept["k"]) and mirror_corrections(ds, "web", seed=3)["k"] == kept["k"]
    assert mirror_corrections(ds, "web", seed=4)["k"] != kept["k"]  # which of the five stay is drawn



def test_element_kinds_name_the_tag_and_mirror_submit_against_ticking_a_box():
    """A checkbox page in both page formats: with ``elements`` the kinds name the tag each id has
    on the prompt's screen, and mirroring then cuts "Submit rejected, a box chosen" to as many as
    its reverse, which action-level kinds (click -> click) leave alone."""
    from datasets import Dataset

    from collabui.training.mistake_pairs import (
        correction_counts,
        mirror_corrections,
        with_correction_kinds,
    )

    text_first = ('Task: Select Sz and click Submit.\nCurrent screen:\nlabel "Sz" [L]\n'
                  'input "checkbox; false" (Sz) [M]\nlabel "azMa" [X]\nbutton "Submit" [P]')
    html = "Task: Select Sz and click Submit.\nCurrent screen:\n<div| <label[L]| Sz> <label[X]| azMa> <button[P]| Submit>>"
    box, other, submit, ghost = ({"action": "click", "element_id": i} for i in ("L", "X", "P", "Z"))

    def pair(screen: str, rejected: dict, chosen: dict, k: int) -> dict:
        return {"k": k, "agent": 0, "prompt": [{"role": "system", "content": "You operate a web browser."},
                                               {"role": "user", "content": screen}],
                "rejected": [{"role": "assistant", "content": _answer(rejected)}],
                "chosen": [{"role": "assistant", "content": _answer(chosen)}]}

    rows = ([(text_first, submit, box)] * 3 + [(html, submit, box)] * 2 + [(text_first, box, submit)] * 2
            + [(html, other, box)] * 2 + [(text_first, ghost, box)] + [(text_first, TYPE_A, submit)])
    ds = Dataset.from_list([pair(screen, r, c, k) for k, (screen, r, c) in enumerate(rows)])
    tagged = with_correction_kinds(ds, "web", elements=True)
    assert correction_counts(tagged, "web") == {
        "click(?) -> click(label)": 1, "click(button) -> click(label)": 5, "click(label) -> click(button)": 2,
        "click(label) -> click(label)": 2, "type_string(?) -> click(button)": 1}
    kept = correction_counts(mirror_corrections(tagged, "web", seed=0), "web")
    # Submit rejected for a box: cut to the 2 of its reverse; a box for another box and an id the
    # screen does not list stay; typing into a field the page lacks names no tag to mirror against.
    assert kept == {"click(?) -> click(label)": 1, "click(button) -> click(label)": 2,
                    "click(label) -> click(button)": 2, "click(label) -> click(label)": 2,
                    "type_string(?) -> click(button)": 1}
    plain = with_correction_kinds(ds, "web")
    assert correction_counts(mirror_corrections(plain, "web", seed=0), "web")["click -> click"] == 10


def test_with_texts_a_correction_of_the_text_alone_is_its_own_kind_and_is_never_mirrored_away():
    from datasets import Dataset

    from collabui.training.mistake_pairs import (
        balance_pairs,
        correction_counts,
        mirror_corrections,
        with_correction_kinds,
    )

    screen = 'Task: Enter "Mercado" as the name.\nCurrent screen:\ninput "" (Name) [N]\ninput "" (Genre) [G]\nbutton "Submit" [S]'
    name, genre, swapped = _typing("N", "Mercado"), _typing("G", "Mercado"), _typing("N", "paranoid")

    def pair(k: int, rejected: dict, chosen: dict) -> dict:
        return {"k": k, "agent": 0, "prompt": [{"role": "user", "content": screen}],
                "rejected": [{"role": "assistant", "content": _answer(rejected)}],
                "chosen": [{"role": "assistant", "content": _answer(chosen)}]}

    # Other text in the right field (3), the right text in another field (3), Submit too early (1).
    rows = [pair(k, swapped, name) for k in range(3)] + [pair(k, genre, name) for k in range(3, 6)] + \
        [pair(6, {"action": "click", "element_id": "S"}, name)]
    ds = Dataset.from_list(rows)
    tagged = with_correction_kinds(ds, "web", elements=True, texts=True)
    assert correction_counts(tagged, "web") == {"click(button) -> type_string(input)": 1,
                                                "type_string(input) -> type_string(input)": 3,
                                                "type_string(input, text) -> type_string(input, text)": 3}
    assert correction_counts(with_correction_kinds(ds, "web", texts=True), "web")["type_string(text) -> type_string(text)"] == 3
    assert correction_counts(with_correction_kinds(ds, "web", elements=True), "web") == {
        "click(button) -> type_string(input)": 1, "type_string(input) -> type_string(input)": 6}  # off: one kind
    # Within one action, as a field for a field: the mirror cut keeps them all.
    assert correction_counts(mirror_corrections(tagged, "web"), "web")["type_string(input, text) -> type_string(input, text)"] == 3
    # The even draw takes from it as from any kind: 4 pairs are one of each kind and one more.
    drawn = correction_counts(balance_pairs(tagged, 4, "web"), "web")
    assert set(drawn) == set(correction_counts(tagged, "web")) and sorted(drawn.values()) == [1, 1, 2]


def test_draws_on_a_dataset_with_its_kinds_parse_each_answer_once(monkeypatch):
    from datasets import Dataset

    from collabui.training import mistake_pairs
    from collabui.training.mistake_pairs import balance_pairs, correction_counts, mirror_corrections

    def pair(agent: int, rejected: dict, chosen: dict) -> dict:
        return {"agent": agent, "rejected": [{"role": "assistant", "content": _answer(rejected)}],
                "chosen": [{"role": "assistant", "content": _answer(chosen)}]}

    rows = [pair(0, TYPE_A, CLICK_A)] * 4 + [pair(0, CLICK_A, TYPE_A)] * 2 + [pair(0, CLICK_A, CLICK_B)] * 5
    ds = Dataset.from_list([{**r, "k": k} for k, r in enumerate(rows)])
    plain = balance_pairs(mirror_corrections(ds, "web", seed=2), 4, "web", seed=2)
    calls = []
    parse = mistake_pairs.correction_kind
    monkeypatch.setattr(mistake_pairs, "correction_kind",
                        lambda row, space, **kw: calls.append(1) or parse(row, space, **kw))
    tagged = mistake_pairs.with_correction_kinds(ds, "web")
    drawn = balance_pairs(mirror_corrections(tagged, "web", seed=2), 4, "web", seed=2)
    counts = correction_counts(drawn, "web")
    assert len(calls) == len(rows)  # once each, in with_correction_kinds; none in the draws or counts
    assert drawn["k"] == plain["k"]  # the same draw as parsing at every step
    assert counts == correction_counts(plain, "web") and sum(counts.values()) == 4
    assert mistake_pairs.with_correction_kinds(tagged, "web") is tagged

def test_anchor_pairs_are_rewarded_answers_as_both_sides_drawn_a_step_at_a_time(tmp_path):
    """Recorded by a real team on a FakeDevice: agent 0 is right in both rounds of both steps,
    agent 1 in round 1 only, agent 2 never."""
    from collabui.training.critic import ReferenceCritic
    from collabui.training.labels import label_traces
    from collabui.training.mistake_pairs import anchor_pairs
    from tests.training.test_pairs import GOLD, _record, _requests_by_entry

    path, model = _record(tmp_path, "ep1")
    label_traces([path], ReferenceCritic(lambda ctx: GOLD), tmp_path / "labels.jsonl", progress=False)
    rows = anchor_pairs([path], tmp_path / "labels.jsonl", {0: 3, 1: 5, 2: 2}, seed=0).to_list()
    by_agent = {a: [r for r in rows if r["agent"] == a] for a in (0, 1, 2)}
    # Agent 0: 4 right entries, 3 asked: both steps give one before either gives a second.
    assert len(by_agent[0]) == 3 and {r["t"] for r in by_agent[0][:2]} == {0, 1}
    # Agent 1: all its 2 right entries (round 1); agent 2 was never right: none.
    assert [(r["t"], r["round"]) for r in sorted(by_agent[1], key=lambda r: r["t"])] == [(0, 1), (1, 1)]
    assert by_agent[2] == []
    asked = _requests_by_entry(model)
    for r in rows:
        assert r["chosen"] == r["rejected"] and '"element_id": "B"' in r["chosen"][0]["content"]
        assert r["prompt"] == asked[(r["agent"], r["t"], r["round"])]  # the exact context it saw
        assert r["chosen_source"] == r["rejected_source"] == "anchor"
    again = anchor_pairs([path], tmp_path / "labels.jsonl", {0: 3, 1: 5, 2: 2}, seed=0).to_list()
    assert again == rows  # seeded


def test_rehearsal_pairs_draw_each_task_and_step_in_turn_and_refuse_other_rows(tmp_path):
    from collabui.errors import ConfigError
    from collabui.training.mistake_pairs import rehearsal_pairs

    rows = [{"prompt": [{"role": "user", "content": f"{task} {t} {k}"}],
             "completion": [{"role": "assistant", "content": f"answer {task} {t} {k}"}],
             "task_name": task, "seed": k, "t": t} for task in ("a", "b") for t in (0, 1) for k in range(5)]
    path = tmp_path / "rows.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    drawn = rehearsal_pairs(path, {0: 6, 1: 4, 2: 0}, seed=3).to_list()
    first = [r for r in drawn if r["agent"] == 0]
    assert len(first) == 6 and len([r for r in drawn if r["agent"] == 1]) == 4
    groups = [tuple(r["prompt"][0]["content"].split()[:2]) for r in first]
    assert len(set(groups[:4])) == 4  # every (task, step) gives one before any gives a second
    for r in drawn:
        assert r["chosen"] == r["rejected"] and r["chosen"][0]["content"] == "answer " + r["prompt"][0]["content"]
        assert r["chosen_source"] == r["rejected_source"] == "rehearsal" and r["round"] == 0
    assert rehearsal_pairs(path, {0: 6, 1: 4, 2: 0}, seed=3).to_list() == drawn  # seeded
    # each agent draws its own rows (its own seeded order), not the same few for all
    assert [r["prompt"] for r in first][:4] != [r["prompt"] for r in drawn if r["agent"] == 1]
    path.write_text(json.dumps(rows[0]) + "\n\n" + json.dumps({"prompt": "not chat", "completion": []}) + "\n")
    with pytest.raises(ConfigError, match="line 3 is not a prompt-completion row"):  # numbered as in the file
        rehearsal_pairs(path, {0: 1})
    with pytest.raises(ConfigError, match="cannot read"):
        rehearsal_pairs(tmp_path / "missing.jsonl", {0: 1})


def test_lost_only_keeps_the_pairs_of_the_episodes_the_team_did_not_win(tmp_path):
    """Two episodes recorded by the same real team on FakeDevices: one rewards the voted click on
    B (won), the other runs out of steps (lost); with lost_only only the lost one's mistakes pair."""
    from collabui import CollabAgentTeam
    from collabui.devices.base import Observation
    from collabui.devices.fake import FakeDevice
    from collabui.trace import read_trace
    from collabui.training.critic import ReferenceCritic
    from collabui.training.labels import label_traces
    from collabui.training.mistake_pairs import build_mistake_pairs
    from tests.training.test_pairs import GOLD, M, N, _model

    for episode_id, won in (("won", lambda a: a.element_id == "B"), ("lost", None)):
        # pages apart: identical prompts would be one pair, kept from the first episode read
        screens = [Observation(text=f"<button[B]| Submit {episode_id} {k}> <button[C]| Cancel>", task="Click Submit.")
                   for k in range(2)]
        team = CollabAgentTeam(_model(), n_agents=N, rounds=M, topology="chain",
                               adapters=tuple(f"a{i}" for i in range(N)), batch_fallback_s=30)
        team.run(None, FakeDevice(screens, success_when=won, max_steps=2), trace=tmp_path, episode_id=episode_id)
    assert [read_trace(tmp_path / f"{e}.jsonl").end["success"] for e in ("won", "lost")] == [True, False]
    labels = tmp_path / "labels.jsonl"
    label_traces(tmp_path, ReferenceCritic(lambda ctx: GOLD), labels, progress=False)

    every = build_mistake_pairs(tmp_path, labels, right_pairs=True).to_list()
    lost = build_mistake_pairs(tmp_path, labels, right_pairs=True, lost_only=True).to_list()
    assert {r["episode_id"] for r in every} == {"won", "lost"}
    assert lost == [r for r in every if r["episode_id"] == "lost"] and lost


def test_pair_options_are_refused_where_they_would_change_nothing():
    from collabui.errors import ConfigError
    from collabui.training.mistake_pairs import OWN_PAIR_OPTIONS, check_pair_options

    every = dict.fromkeys(OWN_PAIR_OPTIONS, True)
    check_pair_options("own", **every)  # all of them at once is a valid run
    for name in OWN_PAIR_OPTIONS:  # each one alone needs the own adversary
        flag = "--" + name.replace("_", "-")
        with pytest.raises(ConfigError, match=f"^{flag} .*: use it with --adversary own$"):
            check_pair_options("rule", **{name: True})
    for name in ("repeat_clicks", "swap_texts"):  # the right answers' extra negatives need them
        with pytest.raises(ConfigError, match="use it with --right-pairs"):
            check_pair_options("own", **{name: True})
    check_pair_options("own", lost_only=True)
    with pytest.raises(TypeError, match="repeat_click"):
        check_pair_options("own", repeat_click=True)  # a misspelt option is a bug, not a quiet no-op
