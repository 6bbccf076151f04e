"""text-first-typed: a text box of a type other than text reads its type as its tag, so its
quoted text is its value alone (``password ""``, not ``input "password"``, which read as a field
holding the word); on trees, in history entries, and on a real MiniWoB++ login form."""

from __future__ import annotations

import re

from collabui.actions import web
from collabui.devices import make_env
from collabui.devices.simplify import (
    TYPED_FIELDS,
    element_line,
    flat_elements,
    observation_format,
    parse_elements,
    render,
    typed_name,
    untyped_name,
)
from collabui.prompts import history_in_format


def _field(eid, text):
    return {"tag": "input", "id": eid, "parts": [text] if text else []}


TREE = {"tag": "", "id": None, "parts": [
    {"tag": "label", "id": None, "parts": ["Username"]}, _field("U", "kim"),
    {"tag": "label", "id": None, "parts": ["Password"]}, _field("P", "password"),
    {"tag": "label", "id": None, "parts": ["PIN"]}, _field("Q", "password; ****"),
    {"tag": "label", "id": None, "parts": ["Age"]}, _field("N", "number; 42"),
    _field("K", "checkbox; true"),
    {"tag": "button", "id": "B", "parts": ["OK"]},
]}


def test_typed_fields_read_their_type_as_tag_and_only_their_value_quoted():
    lines = render(TREE, "text-first-typed").splitlines()
    assert 'password "" (Password) [P]' in lines  # empty: nothing typed yet
    assert 'password "****" (PIN) [Q]' in lines
    assert 'number "42" (Age) [N]' in lines
    # Plain text boxes, checkboxes and buttons read as in text-first.
    assert 'input "kim" (Username) [U]' in lines and 'button "OK" [B]' in lines
    assert 'input "checkbox; true" (Age) [K]' in lines
    # text-first keeps writing the type inside the quotes (what shipped models were trained on).
    assert 'input "password" (Password) [P]' in render(TREE, "text-first").splitlines()


def test_element_lines_and_history_names_agree_with_the_page():
    page = render(TREE, "text-first-typed").splitlines()
    for node in flat_elements(TREE):
        assert element_line(TREE, node["id"], "text-first-typed") in page
    assert element_line(TREE, "Q", "text-first-typed", with_id=False) == 'password "****"'
    assert element_line(TREE, "Q", "text-first", with_id=False) == 'input "password; ****"'


def test_a_typed_page_reads_back_as_the_fields_the_walk_saw():
    typed, plain = render(TREE, "text-first-typed"), render(TREE, "text-first")
    assert observation_format(typed) == "text-first-typed"
    assert observation_format(plain) == "text-first"
    assert parse_elements(typed) == parse_elements(plain)
    # A page without typed fields reads the same in both formats.
    login_free = {"tag": "", "id": None, "parts": [_field("U", "kim")]}
    assert render(login_free, "text-first-typed") == render(login_free, "text-first")


def test_typed_names_round_trip_and_leave_other_elements_alone():
    for kind in TYPED_FIELDS:
        for value in ("", "x; y"):
            text = f"{kind}; {value}" if value else kind
            assert untyped_name(*typed_name("input", text)) == ("input", text)
    assert typed_name("input", "checkbox; true") == ("input", "checkbox; true")
    assert typed_name("button", "password") == ("button", "password")
    assert typed_name("input", "passwords") == ("input", "passwords")


def test_history_entries_convert_between_the_formats():
    typed = "type_string(password \"\" (Password), 'x', False)"
    plain = "type_string(input \"password\" (Password), 'x', False)"
    html = "type_string(<input| password> (Password), 'x', False)"
    assert history_in_format(plain, "text-first-typed") == typed
    assert history_in_format(html, "text-first-typed") == typed
    assert history_in_format(typed, "text-first") == plain
    assert history_in_format(typed, "html") == html
    assert history_in_format("click(button \"OK\")", "text-first-typed") == "click(button \"OK\")"


def test_a_real_login_form_shows_the_password_field_empty_then_filled():
    """login-user-popup in Chromium, shuffled: the password box reads ``password ""`` until the
    password is typed, then its masked value (never the word password)."""
    with make_env("miniwob/login-user-popup", shuffle_elements=True, element_format="text-first-typed") as env:
        observation = env.reset(seed=3)
        assert observation_format(observation.text) == "text-first-typed"
        user, password = re.findall(r'"([^"]+)"', observation.task)[:2]
        box = re.search(r'^password "" \(Password\) \[([A-Z]+)\]$', observation.text, re.M).group(1)
        field = re.search(r'^input "" \(Username\) \[([A-Z]+)\]$', observation.text, re.M).group(1)
        observation = env.act(web.TypeString(element_id=field, content=user)).observation
        observation = _close_popup(env, observation)
        box = re.search(r'^password "" \(Password\) \[([A-Z]+)\]$', observation.text, re.M).group(1)
        observation = env.act(web.TypeString(element_id=box, content=password)).observation
        observation = _close_popup(env, observation)
        assert re.search(r'^password "\*+" \(Password\) \[[A-Z]+\]$', observation.text, re.M)
        assert "password" not in re.search(r'^password "(.*)"', observation.text, re.M).group(1)


def _close_popup(env, observation):
    """login-user-popup may open a dialog over the form: Cancel keeps the form as it is."""
    cancel = re.search(r'^button "Cancel" \[([A-Z]+)\]$', observation.text, re.M)
    return env.act(web.Click(element_id=cancel.group(1))).observation if cancel else observation
