"""SFT rows whose page hides the fields' state, so the previous actions alone tell what is done
(``sft_rows(stateless_share=...)``, ``collabui.devices.simplify.without_state``)."""

import copy
import json

import pytest

from collabui.devices.simplify import empty_text_fields, render, text_field_values, without_state
from collabui.errors import ConfigError
from collabui.training.sft_data import sft_rows


def _field(tag: str, element_id: str, *parts: str) -> dict:
    return {"tag": tag, "id": element_id, "parts": list(parts), "dom": 0, "box": [0, 0, 10, 10]}


#: A login form half done: the username typed, a box ticked, the password (whose value the walk
#: never writes) typed too, a select with its options as its text.
TREE = {"tag": "", "id": None, "parts": [
    {"tag": "label", "id": None, "parts": ["Username"]}, _field("input", "U", "kim"),
    {"tag": "label", "id": None, "parts": ["Password"]}, _field("input", "P", "password; disabled"),
    {"tag": "label", "id": "L", "parts": [_field("input", "C", "checkbox; true"), "Remember me"]},
    _field("textarea", "T", "a note"), _field("select", "S", "red green"),
    _field("button", "B", "Login")]}

ROW = {"task_name": "login-user-popup", "seed": 1000, "t": 2, "steps": 4, "task": 'Log in as "kim".',
       "history": ["type_string(<input| > (Username), 'kim', False)"],
       "verified_reward": 1.0, "source": "search", "rendering": "page", "screen": render(TREE, "html"),
       "url": "/miniwob/login-user-popup.html", "viewport": "0 / 1.0", "tree": json.dumps(TREE),
       "action": {"action": "click", "element_id": "B"}}


def test_without_state_keeps_each_fields_kind_and_drops_what_it_holds():
    before = copy.deepcopy(TREE)
    text = render(without_state(TREE), "text-first")
    assert before == TREE  # a copy: the recorded tree is not touched
    assert 'input "" (Username) [U]' in text and 'input "password" (Password) [P]' in text
    assert 'input "checkbox" (Remember me) [C]' in text and 'textarea "" ' in text
    for state in ("kim", "disabled", "true", "a note"):
        assert state not in text
    # What is not a field's state stays: the select's options, labels, buttons, every id.
    assert 'select "red green"' in text and 'button "Login" [B]' in text
    assert [line.split("[")[-1] for line in text.splitlines() if "[" in line] == \
        [line.split("[")[-1] for line in render(TREE, "text-first").splitlines() if "[" in line]
    assert without_state(None) is None


def _rows(n: int, **change) -> list[dict]:
    return [{**ROW, "seed": 1000 + k, **change} for k in range(n)]


def test_a_share_of_the_rows_after_the_first_step_hides_the_state_and_keeps_the_target():
    rows = sft_rows(_rows(200), stateless_share=0.5, stateless_fields="all", style="terse",
                    element_format="text-first")
    hidden = [r for r in rows if 'input "" (Username) [U]' in r["prompt"][-1]["content"]]
    assert 70 < len(hidden) < 130
    for r in rows:
        # The target and its grounded thought stay the verified answer, its line the page's own.
        assert r["completion"][0]["content"].startswith('Thought: click button "Login" [B]')
        assert ("checkbox; true" in r["prompt"][-1]["content"]) == (r not in hidden)
        assert "Previous actions: 1. type_string" in r["prompt"][-1]["content"]
    # Seeded by the row: the same rows again hide the same pages; share 0 hides none.
    assert sft_rows(_rows(200), stateless_share=0.5, stateless_fields="all", style="terse",
                    element_format="text-first") == rows
    assert not any('input "" (Username) [U]' in r["prompt"][-1]["content"]
                   for r in sft_rows(_rows(50), style="terse", element_format="text-first"))


def test_first_steps_keep_their_page_whatever_the_share_and_a_bad_share_is_refused():
    first = _rows(20, t=0, history=[])
    rows = sft_rows(first, stateless_share=1.0, element_format="html")
    assert all("checkbox; true" in r["prompt"][-1]["content"] for r in rows)
    # On html pages too the hidden state is gone, at share 1 from every later step.
    assert all("checkbox; true" not in r["prompt"][-1]["content"]
               for r in sft_rows(_rows(20), stateless_share=1.0, stateless_fields="all", element_format="html"))
    with pytest.raises(ConfigError, match="stateless_share must be between 0 and 1"):
        sft_rows(first, stateless_share=-0.1)


def test_toggles_only_hides_ticks_and_keeps_typed_values_so_empty_fields_still_show():
    text = render(without_state(TREE, toggles_only=True), "text-first")
    # The ticked box loses its tick; the typed username, the password's marker and the note stay.
    assert 'input "checkbox" (Remember me) [C]' in text and "true" not in text
    assert 'input "kim" (Username) [U]' in text and "a note" in text and "password; disabled" in text
    radio = {"tag": "", "id": None, "parts": [_field("input", "R", "radio; true"), _field("input", "E", "")]}
    assert render(without_state(radio, toggles_only=True), "html") == render(
        {**radio, "parts": [_field("input", "R", "radio"), _field("input", "E", "")]}, "html")


def test_rows_hide_the_fields_the_option_names_and_a_bad_option_is_refused():
    rows = sft_rows(_rows(20), stateless_share=1.0, stateless_fields="toggles", style="terse",
                    element_format="text-first")
    for r in rows:
        page = r["prompt"][-1]["content"]
        assert 'input "kim" (Username) [U]' in page and "checkbox; true" not in page
    with pytest.raises(ConfigError, match="stateless_fields must be one of all, toggles, filled, got 'values'"):
        sft_rows(_rows(2), stateless_share=0.5, stateless_fields="values")


def test_empty_text_fields_and_values_read_the_walks_field_text():
    page = {"tag": "", "id": None, "parts": [
        _field("input", "A", "kim"), _field("input", "B", ""), _field("input", "C", "placeholder: Name"),
        _field("input", "D", "email; placeholder: you@x.org"), _field("input", "E", "email; kim@x.org"),
        _field("input", "F", "password; ***"), _field("input", "G", "password"), _field("input", "H", "disabled"),
        _field("textarea", "I", ""), _field("textarea", "J", "a note"), _field("input", "K", "checkbox; false"),
        _field("select", "L", "red"), _field("button", "M", "")]}
    # Only text-like fields count, and only those with no value after their type.
    assert empty_text_fields(page) == ["B", "C", "D", "G", "H", "I"]
    # The values are the runs after the type: stars for a password, nothing for a placeholder.
    assert text_field_values(page) == {"A": "kim", "B": "", "C": "", "D": "", "E": "kim@x.org", "F": "***",
                                       "G": "", "H": "", "I": "", "J": "a note"}
    # TREE's password field is disabled and shows no stars: nothing typed in it.
    assert empty_text_fields(TREE) == ["P"] and empty_text_fields(None) == []


def test_filled_hides_typed_values_only_where_no_text_field_is_left_empty():
    full = json.loads(json.dumps(TREE))
    full["parts"][3]["parts"] = ["password; ***"]
    half = {**full, "parts": [*full["parts"], _field("input", "N", "placeholder: Nickname")]}
    mixed = [{**ROW, "seed": 1000 + k, "tree": json.dumps(tree), "screen": render(tree, "html")}
             for k in range(20) for tree in ([full] if k < 10 else [half])]
    rows = sft_rows(mixed, stateless_share=1.0, stateless_fields="filled", style="terse", element_format="text-first")
    for r in rows:
        page = r["prompt"][-1]["content"]
        assert "checkbox; true" not in page  # ticks go on every stateless page
        if r["seed"] >= 1010:  # a field still empty: what was typed stays, so empty means "to fill"
            assert 'input "kim" (Username) [U]' in page and "placeholder: Nickname" in page
        else:  # every text field holds a value: the values go too
            assert 'input "" (Username) [U]' in page and "a note" not in page and "***" not in page
