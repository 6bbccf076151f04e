"""Hindsight relabelling: a first-step click on the element the task quotes also teaches the
clicks on the page's other elements of that kind, each under the instruction quoting its text."""

import json

from collabui.training.hindsight import hindsight_rows
from collabui.training.sft_data import sft_rows


def _button(element_id: str, text: str) -> dict:
    return {"tag": "button", "id": element_id, "parts": [text], "dom": ord(element_id) - 65}


TREE = {"tag": "", "id": None, "parts": [
    {"tag": "div", "id": None, "parts": ["Pick one:"]},
    _button("A", "yes"), _button("B", "no"), _button("C", "maybe"), _button("D", "no"),
    {"tag": "input", "id": "E", "parts": [], "dom": 4}, _button("F", 'say "hi"')]}
ROW = {"task_name": "click-button", "seed": 1000, "t": 0, "steps": 1, "task": 'Click on the "yes" button.',
       "history": [], "verified_reward": 1.0, "source": "search", "rendering": "page",
       "screen": "<div| Pick one:> <button[A]| yes> <button[B]| no> <button[C]| maybe> <button[D]| no> "
                 "<input[E]| > <button[F]| say \"hi\">",
       "url": "/miniwob/click-button.html", "viewport": "0 / 1.0", "tree": json.dumps(TREE),
       "action": {"action": "click", "element_id": "A"}}


def test_a_first_step_click_is_relabelled_to_each_other_uniquely_named_element_of_its_kind():
    rows = hindsight_rows([ROW], per_row=5)
    # "no" names two buttons (which one the instruction means is unknown) and 'say "hi"' cannot
    # be quoted: only "maybe" is left.
    assert [(r["task"], r["action"]) for r in rows] == [
        ('Click on the "maybe" button.', {"action": "click", "element_id": "C"})]
    assert rows[0]["source"] == "hindsight" and rows[0]["verified_reward"] is None
    assert rows[0]["screen"] == ROW["screen"] and rows[0]["relabelled_from"] == "A"
    prompt = sft_rows(rows)[0]
    assert 'Click on the "maybe" button.' in prompt["prompt"][-1]["content"]
    assert prompt["completion"][0]["content"] == 'Action: {"action": "click", "element_id": "C"}'


def test_per_row_draws_at_most_that_many_and_is_seeded():
    tree = {"tag": "", "id": None, "parts": [_button(c, f"word{c}") for c in "ABCDEFG"]}
    row = {**ROW, "task": 'Click on the "wordA" button.', "tree": tree}
    two = hindsight_rows([row], per_row=2, seed=3)
    assert len(two) == 2 and two == hindsight_rows([row], per_row=2, seed=3)
    assert {r["action"]["element_id"] for r in hindsight_rows([row], per_row=9)} == set("BCDEFG")
    assert hindsight_rows([row], per_row=0) == []


def test_rows_that_cannot_be_relabelled_are_left_alone():
    later = {**ROW, "t": 1, "history": ["1. click(<button| no>)"]}
    typing = {**ROW, "action": {"action": "type_string", "element_id": "E", "content": "yes"}}
    unquoted = {**ROW, "task": "Click the button."}
    twice = {**ROW, "task": 'Click on the "yes" button, then on "yes" again.'}
    other_target = {**ROW, "action": {"action": "click", "element_id": "B"}}  # not the quoted text
    assert hindsight_rows([later, typing, unquoted, twice, other_target], per_row=5) == []
