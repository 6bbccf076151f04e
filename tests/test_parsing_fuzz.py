"""Fuzzing collabui.parsing: no generated answer makes the parser raise or return anything but
an action of the space or the documented failure, ``Unknown(raw=text, reason=...)``.

Each strategy feeds one kind of text models really write (or break): arbitrary Unicode with
lone surrogates, near-miss JSON, call syntax with random tails, quote and bracket soup, and huge
strings. Every answer is parsed in both action spaces; 10,500 answers in all. The runs are
derandomized (the same examples each time, so CI is reproducible) and use no example database.
"""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collabui.actions import MOBILE, WEB, Action, Unknown
from collabui.parsing import MAX_ANSWER_CHARS, ParsedProposal, parse_action, parse_proposal

SPACES = (WEB, MOBILE)


def _fuzz(n: int) -> settings:
    return settings(max_examples=n, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.large_base_example])


def _check(text: str) -> None:
    """The contract of parse_action/parse_proposal, in both spaces."""
    for space in SPACES:
        proposal = parse_proposal(text, space)
        assert isinstance(proposal, ParsedProposal)
        action = proposal.action
        assert isinstance(action, Action) and action in space
        if isinstance(action, Unknown):
            assert action.raw == text  # the failure keeps the whole answer
            assert isinstance(action.reason, str) and action.reason
            assert not action.reason.startswith("internal parser error"), action.reason
            assert proposal.error == action.reason
        else:
            assert proposal.error is None
            assert type(action) is space.actions[action.name]
        assert parse_action(text, space) == action


# --------------------------------------------------------------------------- strategies

SURROGATES = ["\ud800", "\udbff", "\udc00", "\udfff", "\ud83d", "\ude00"]
# Every code point, surrogates included (the default alphabet leaves them out).
any_char = st.characters(exclude_categories=()) | st.sampled_from(SURROGATES)
any_text = st.text(any_char, max_size=300)

NAMES = sorted({*WEB.actions, *MOBILE.actions, "tap", "type", "scroll", "search", "press_key"})
KEYS = ["action", "action_type", "type", "name", "function", "element_id", "index", "content",
        "text", "direction", "arguments", "thought", "answer", "goal_status", "app_name", "url"]
json_scalar = st.one_of(
    st.sampled_from(NAMES), st.text(any_char, max_size=12), st.integers(-10**20, 10**20),
    st.sampled_from([0.5, 1e308, float("inf"), float("nan"), True, False, None, "B", "3", "[B]"]),
)
json_value = json_scalar | st.lists(json_scalar, max_size=2) | st.dictionaries(
    st.sampled_from(KEYS), json_scalar, max_size=2)
action_object = st.builds(
    lambda name, args: {"action": name, **args},
    st.sampled_from(NAMES), st.dictionaries(st.sampled_from(KEYS[4:]), json_value, max_size=3))
PREFIXES = ["", "Action: ", "Thought: ok.\nAction: ", "```json\n", "action：", "**Action:** "]


@st.composite
def near_miss_json(draw) -> str:
    """A valid action object, cut somewhere and given a random tail: ``{"action": "click",
    "element_id": `` + anything."""
    obj = draw(action_object)
    text = json.dumps(obj, ensure_ascii=draw(st.booleans()))
    if draw(st.booleans()):  # the forms small models write: single quotes, bare words
        text = text.replace('"', draw(st.sampled_from(["'", "", '"'])))
    cut = draw(st.integers(0, len(text)))
    tail = draw(st.sampled_from(["", "}", '"}', "'}", "]}", "}}", ",}", "\n", "\\", '\\"']))
    noise = draw(st.text(any_char, max_size=20))
    return draw(st.sampled_from(PREFIXES)) + text[:cut] + tail + noise


TAIL_PIECES = [*"()[]{}'\",=\\ \n", ")\nAction: ", "', ", "\\'", "中", "\ud800", "\U0001f600", "\x00"]


@st.composite
def call_syntax(draw) -> str:
    """``click('B'`` with random arguments and a random tail."""
    name = draw(st.sampled_from(NAMES) | st.text(st.sampled_from("aZ_.9é"), max_size=8))
    args = draw(st.lists(st.sampled_from(["'B'", '"B"', "3", "-1", "True", "None", "'a, b'",
                                          "element_id='B'", "index=3", "[1]", "{'x': 1}", "'",
                                          '"', "(", "*a", "**k", "1e999", "'\\'", "x=", ""]),
                         max_size=4))
    tail = draw(st.lists(st.sampled_from(TAIL_PIECES), max_size=10).map("".join))
    return draw(st.sampled_from(PREFIXES)) + f"{name}({', '.join(args)}" + tail


BRACKET_PIECES = [*"{}[]()'\"\\:,` \n", "Action:", '"action"', "'click'", "click(", "''", '""',
                  '{"action": ', '\\"', "\\'", "element_id", "3", "B"]
quotes_and_brackets = st.lists(st.sampled_from(BRACKET_PIECES), max_size=120).map("".join)

HUGE_UNITS = [" ", "\n", "(", "((((", "{", "[", '"', "'", "\\", "9", "a.", "{'", "click(",
              '{"action": ', "Action: ", '"action": "click", ', "\ud800", "中", "\t ", "`"]


@st.composite
def huge(draw) -> str:
    """8-20 kB of one repeated unit around a plausible start and end."""
    unit = draw(st.sampled_from(HUGE_UNITS))
    size = draw(st.integers(MAX_ANSWER_CHARS // 2, 20_000))
    head = draw(st.sampled_from(["", "Action: ", 'switch_tab("1', "click('", '{"action": "',
                                 '{"action": "switch_tab", "tab_index": "1']))
    tail = draw(st.sampled_from(["", "x", '")', "')", '"}', 'Action: click("B")']))
    return head + unit * (size // len(unit)) + tail


# --------------------------------------------------------------------------- properties


@_fuzz(3500)
@given(text=any_text)
def test_random_unicode_text(text: str) -> None:
    _check(text)


@_fuzz(2500)
@given(text=near_miss_json())
def test_near_miss_json(text: str) -> None:
    _check(text)


@_fuzz(2000)
@given(text=call_syntax())
def test_call_syntax_with_random_tails(text: str) -> None:
    _check(text)


@_fuzz(2000)
@given(text=quotes_and_brackets)
def test_nested_quotes_and_brackets(text: str) -> None:
    _check(text)


@_fuzz(500)
@given(text=huge())
def test_huge_answers(text: str) -> None:
    _check(text)
