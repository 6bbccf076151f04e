"""text-first-ordinal: like form fields read their place on the screen, which a page listed in
shuffled order no longer shows (on trees, and on real MiniWoB++ pages in Chromium)."""

from __future__ import annotations

import re

import pytest

from collabui.actions import web
from collabui.devices import make_env
from collabui.devices.simplify import (
    element_line,
    element_ordinals,
    flat_elements,
    observation_format,
    parse_elements,
    render,
    reorder,
)


def _field(eid, text, box):
    return {"tag": "input", "id": eid, "parts": [text] if text else [], "box": box}


#: Listed out of screen order: three text boxes (two share a row), two checkboxes, one password
#: (a text box too), one select (alone of its kind) and one field with no box.
TREE = {"tag": "", "id": None, "parts": [
    _field("C", "", [10, 200, 100, 20]),
    _field("A", "", [120, 52, 100, 20]),
    _field("B", "", [10, 50, 100, 20]),
    _field("K", "checkbox; false", [10, 300, 12, 12]),
    _field("J", "checkbox; true", [10, 280, 12, 12]),
    _field("P", "password", [10, 400, 100, 20]),
    {"tag": "select", "id": "S", "parts": ["Red; options: Red | Blue"], "box": [10, 500, 80, 20]},
    _field("N", "", None),
    {"tag": "button", "id": "G", "parts": ["Go"], "box": [10, 600, 40, 20]},
]}


def test_places_follow_the_screen_rows_then_columns_within_each_kind():
    assert element_ordinals(TREE) == {"B": "1st", "A": "2nd", "C": "3rd", "P": "4th",
                                      "J": "1st", "K": "2nd"}


def test_places_name_teens_and_twenties_as_people_write_them():
    fields = [_field(chr(65 + k), "checkbox; false", [0, 20 * k, 10, 10]) for k in range(23)]
    places = element_ordinals({"tag": "", "id": None, "parts": fields})
    assert [places[chr(65 + k)] for k in (0, 1, 2, 3, 10, 11, 12, 13, 20, 21, 22)] == \
        ["1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "14th", "21st", "22nd", "23rd"]


def test_the_ordinal_format_writes_places_before_the_id_and_reads_back():
    text = render(TREE, "text-first-ordinal")
    assert text.splitlines()[:3] == ['input "" 3rd [C]', 'input "" 2nd [A]', 'input "" 1st [B]']
    assert 'select "Red; options: Red | Blue" [S]' in text and 'input "" [N]' in text
    assert render(TREE, "text-first") == re.sub(r" \d+(st|nd|rd|th) \[", " [", text)
    assert observation_format(text) == "text-first-ordinal"
    assert observation_format(render(TREE, "text-first")) == "text-first"
    assert [e.id for e in parse_elements(text) if e.id] == [e["id"] for e in flat_elements(TREE)]
    assert element_line(TREE, "A", "text-first-ordinal") == 'input "" 2nd [A]'
    # A history entry names the element without id or place (the text formats agree there).
    assert element_line(TREE, "A", "text-first-ordinal", with_id=False) == 'input ""'


def test_places_are_the_same_in_every_order_of_the_page():
    for seed in range(5):
        assert element_ordinals(reorder(TREE, seed)) == element_ordinals(TREE)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_field_read_as_2nd_is_the_one_focus_text_2_asks_for(seed):
    """On the real page, shuffled: focusing the field the screen calls "2nd" finishes the task."""
    with make_env("miniwob/focus-text-2", shuffle_elements=True,
                  element_format="text-first-ordinal") as env:
        observation = env.reset(seed=seed)
        wanted = re.search(r"(\d+(?:st|nd|rd|th)) input", observation.task).group(1)
        target = re.search(rf'^input "" {wanted} \[([A-Z]+)\]$', observation.text, re.M).group(1)
        outcome = env.act(web.Click(element_id=target))
        assert outcome.reward == 1.0 and outcome.done
