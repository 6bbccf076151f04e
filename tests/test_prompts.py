"""Prompt styles: what each one puts in front of the model."""

import pytest

from collabui.actions import WEB
from collabui.devices.base import Observation
from collabui.errors import ConfigError
from collabui.prompts import (
    PeerOutput,
    answer_call,
    build_messages,
    history_entry,
    render_observation,
)


def _messages(style: str, **kw):
    return build_messages(space=WEB, task='Click the "Ok" button.', observation="<button[C]| Ok>",
                          history=["click('A')"], style=style, **kw)


def test_trained_style_has_no_demonstration_and_asks_for_an_action_line():
    trained = _messages("trained")
    react = _messages("react")
    assert [m["role"] for m in trained] == ["system", "user"]
    # react carries a demonstration turn (user, assistant) before the real user turn
    assert [m["role"] for m in react] == ["system", "user", "assistant", "user"]
    assert "Action:" in trained[0]["content"] and "Thought" not in trained[0]["content"]
    assert "<button[C]| Ok>" in trained[1]["content"] and "1. click('A')" in trained[1]["content"]
    # Far shorter than the demonstration prompt: the point of the style.
    assert sum(len(m["content"]) for m in trained) * 3 < sum(len(m["content"]) for m in react)


def test_trained_style_still_shows_peers():
    peer = PeerOutput(agent=2, round=0, thought=None, action_json='{"action": "click", "element_id": "C"}', raw="")
    text = _messages("trained", peers=[peer])[1]["content"]
    assert "[Agent 2]" in text and '"element_id": "C"' in text


def test_unknown_style_is_refused():
    with pytest.raises(ConfigError, match="unknown prompt style"):
        _messages("chatty")


def test_grounded_style_is_trained_with_a_line_naming_the_target():
    grounded = _messages("grounded")
    assert [m["role"] for m in grounded] == ["system", "user"]
    assert "Thought: <action name> <the screen line" in grounded[0]["content"]
    assert grounded[1] == _messages("trained")[1]  # same reading, only the answer differs


def test_terse_style_reads_as_grounded_with_the_shortest_prompt():
    peer = PeerOutput(agent=2, round=0, thought='click button "Ok" [C]',
                      action_json='{"action": "click", "element_id": "C"}', raw="")
    own = PeerOutput(agent=1, round=0, thought=None, action_json='{"action": "click", "element_id": "A"}', raw="")
    terse = _messages("terse", peers=[peer], own_previous=own)
    grounded = _messages("grounded", peers=[peer], own_previous=own)
    assert [m["role"] for m in terse] == ["system", "user"]
    assert terse[0]["content"] == "You operate a web browser to complete the user's task."
    # The same page, history and actions, under shorter headings and without the thoughts.
    for text in ("<button[C]| Ok>", "1. click('A')", '[Agent 2] {"action": "click", "element_id": "C"}',
                 'Your previous answer:\n{"action": "click", "element_id": "A"}'):
        assert text in terse[1]["content"]
    assert "Thought" not in terse[1]["content"] and 'Thought: click button "Ok" [C]' in grounded[1]["content"]
    assert len(terse[0]["content"]) + 60 < len(grounded[0]["content"])
    assert len(terse[1]["content"]) + 60 < len(grounded[1]["content"])


def test_named_style_shows_the_team_answers_as_calls_naming_their_element():
    from collabui.actions.web import Click, TypeString
    from collabui.devices.simplify import render

    screen = render(_TREE, "text-first")
    peer = PeerOutput(agent=2, round=0, thought='click button "Log in" [D]',
                      action_json='{"action": "click", "element_id": "D"}', raw="",
                      named=answer_call(Click("D"), _TREE))
    own = PeerOutput(agent=1, round=0, thought=None, action_json='{"action": "type_string", "element_id": "Q"}',
                     raw="", named=answer_call(TypeString("Q", "kvu", False), _TREE))
    common = dict(space=WEB, task="Log in as kvu.", observation=screen, history=[], peers=[peer], own_previous=own)
    named = build_messages(**common, style="named")
    terse = build_messages(**common, style="terse")
    assert named[0] == terse[0]  # the terse prompt: only the team's answers read otherwise
    assert 'Your previous answer:\ntype_string(input "" (Username) [Q], \'kvu\', False)' in named[1]["content"]
    assert '[Agent 2] click(button "Log in" [D])' in named[1]["content"]
    assert named[1]["content"].split("Your previous")[0] == terse[1]["content"].split("Your previous")[0]
    # An answer given without its call (a phone's, a text's) reads as its JSON, as in terse.
    plain = PeerOutput(agent=0, round=0, thought=None, action_json='{"action": "click", "element_id": "D"}', raw="")
    assert plain.render(style="named") == plain.render(style="terse") == plain.action_json


def test_answer_call_names_the_element_with_its_id_in_either_format():
    from collabui.actions.web import Click, TypeString

    assert answer_call(Click("D"), _TREE) == 'click(button "Log in" [D])'
    assert answer_call(Click("D"), _TREE, "html") == "click(<button[D]| Log in>)"
    assert answer_call(TypeString("Q", "kvu", True), _TREE) == "type_string(input \"\" (Username) [Q], 'kvu', True)"
    # The history's form: no id, the field by its label.
    assert answer_call(Click("D"), _TREE, with_id=False) == 'click(button "Log in")'
    # No tree, or an id not on it: the plain call.
    assert answer_call(Click("D"), None) == "click('D')"
    assert answer_call(Click("Z"), _TREE) == "click('Z')"


@pytest.mark.parametrize(("viewport", "kept"), [("0 / 1.0", False), ("0 / 2.5", True), ("1 / 2.0", True)])
def test_terse_style_leaves_out_only_a_viewport_with_nothing_to_scroll(viewport, kept):
    screen = render_observation(Observation(text="<button[C]| Ok>", url="/miniwob/x.html", viewport=viewport))
    terse = build_messages(space=WEB, task="t", observation=screen, history=[], style="terse")[1]["content"]
    grounded = build_messages(space=WEB, task="t", observation=screen, history=[], style="grounded")[1]["content"]
    assert f"Viewport (pages): {viewport}" in grounded
    assert (f"Viewport (pages): {viewport}" in terse) is kept
    assert "Location: /miniwob/x.html\n" in terse and "<button[C]| Ok>" in terse


def _page(text: str, tree):
    from collabui.devices.base import Observation

    return Observation(text=text, extra={"tree": tree})


_TREE = {"tag": "", "id": None, "parts": [
    {"tag": "label", "id": None, "parts": ["Username"]},
    {"tag": "input", "id": "Q", "parts": []},
    {"tag": "button", "id": "D", "parts": ["Log in"]},
]}


def test_history_names_the_element_by_its_screen_line_not_its_id():
    from collabui.actions.web import Click, TypeString
    from collabui.devices.simplify import render

    html = _page(render(_TREE, "html"), _TREE)
    assert history_entry(Click("D"), html) == "click(<button| Log in>)"
    assert history_entry(TypeString("Q", "kvu", False), html) == "type_string(<input| > (Username), 'kvu', False)"
    text_first = _page(render(_TREE, "text-first"), _TREE)
    assert history_entry(Click("D"), text_first) == 'click(button "Log in")'
    # No tree (a phone, a stored text) or an id not on the page: the call form stays.
    assert history_entry(Click("D")) == "click('D')"
    assert history_entry(Click("Z"), html) == "click('Z')"
    # A label written after its field names that field, not the next one.
    after = {"tag": "", "id": None, "parts": [
        {"tag": "", "id": None, "parts": [{"tag": "input", "id": "A", "parts": []},
                                          {"tag": "div", "id": None, "parts": ["Genre"]}]},
        {"tag": "", "id": None, "parts": [{"tag": "input", "id": "B", "parts": []},
                                          {"tag": "div", "id": None, "parts": ["Year"]}]}]}
    assert history_entry(TypeString("B", "1991", False), _page(render(after, "html"), after)) == \
        "type_string(<input| > (Year), '1991', False)"


def test_history_marks_an_action_that_did_not_happen():
    from collabui.actions.web import Click
    from collabui.devices.simplify import render

    html = _page(render(_TREE, "html"), _TREE)
    assert history_entry(Click("D"), html, note="refused") == "click(<button| Log in>) [refused]"
    assert history_entry(Click("Z"), note="blocked: off-site") == "click('Z') [blocked: off-site]"
    assert history_entry(Click("D"), html, note=None) == "click(<button| Log in>)"


def test_a_history_entry_reads_in_either_page_format():
    from collabui.actions.web import Click, Select, TypeString
    from collabui.devices.simplify import render
    from collabui.prompts import history_in_format

    tree = {"tag": "", "id": None, "parts": [
        {"tag": "label", "id": None, "parts": ["Name (first)"]},
        {"tag": "input", "id": "Q", "parts": ["a > b, c)"]},
        {"tag": "button", "id": "D", "parts": ['Say "hi", then go']},
        {"tag": "select", "id": "S", "parts": ["Red; options: Red | Blue"]},
    ]}
    html, text_first = (_page(render(tree, fmt), tree) for fmt in ("html", "text-first"))
    actions = [Click("D"), TypeString("Q", "x) y", True), Select("S", "Blue"), Click("Z")]
    for action in actions:
        for note in (None, "refused"):
            written = {fmt: history_entry(action, page, note=note) for fmt, page in
                       (("html", html), ("text-first", text_first))}
            assert history_in_format(written["html"], "text-first") == written["text-first"]
            assert history_in_format(written["text-first"], "html") == written["html"]
            assert history_in_format(written["html"], "html") == written["html"]
    assert history_in_format("click('D')", "text-first") == "click('D')"
    assert history_in_format("tap(3)", "html") == "tap(3)"
    with pytest.raises(ValueError, match="element_format"):
        history_in_format("click('D')", "xml")


def test_training_rows_show_the_history_in_the_page_format_they_teach():
    from collabui.devices.simplify import parse_tree
    from collabui.training.sft_data import prompt_messages

    screen = "< <input[Q]| kim> <button[D]| Go> >"
    row = {"task": "Enter kim.", "screen": screen, "tree": parse_tree(screen)[0],
           "history": ["type_string(<input| > (Username), 'kim', False)"], "url": "/x.html"}
    text_first = prompt_messages(row, element_format="text-first")[-1]["content"]
    assert "1. type_string(input \"\" (Username), 'kim', False)" in text_first
    assert "<input|" not in text_first
    assert "1. type_string(<input| > (Username), 'kim', False)" in prompt_messages(row)[-1]["content"]
