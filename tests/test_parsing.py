"""Tests for collabui.parsing: never raises, round trips, small-model outputs, AutoWebBench."""

from __future__ import annotations

import json
import re
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collabui.actions import MOBILE, WEB, Action, Unknown, get_action_space, mobile, web
from collabui.parsing import (
    MAX_ANSWER_CHARS,
    ParsedProposal,
    parse_action,
    parse_proposal,
    render_answer,
)
from tests.shared_data import AUTOWEBBENCH

# --------------------------------------------------------------------------- strategies

ids = st.from_regex(r"[A-Za-z0-9_]{1,8}", fullmatch=True)
texts = st.text(max_size=40)
nonblank = st.text(min_size=1, max_size=40).filter(str.strip)
indices = st.integers(min_value=0, max_value=500)
dirs4 = st.sampled_from(mobile.DIRECTIONS)

web_actions = st.one_of(
    st.builds(web.Click, element_id=ids),
    st.builds(web.Hover, element_id=ids),
    st.builds(web.Select, element_id=ids, option=nonblank),
    st.builds(web.TypeString, element_id=ids, content=texts, press_enter=st.booleans()),
    st.builds(web.ScrollPage, direction=st.sampled_from(["up", "down"])),
    st.builds(web.Go, direction=st.sampled_from(["forward", "backward"])),
    st.builds(web.JumpTo, url=nonblank, new_tab=st.booleans()),
    st.builds(web.SwitchTab, tab_index=st.integers(0, 50)),
    st.builds(web.UserInput, message=texts),
    st.builds(web.Finish, answer=st.none() | texts),
)
mobile_actions = st.one_of(
    st.builds(mobile.Tap, index=indices),
    st.builds(mobile.DoubleTap, index=indices),
    st.builds(mobile.LongPress, index=indices),
    st.builds(mobile.Scroll, direction=dirs4, index=st.none() | indices),
    st.builds(mobile.Swipe, direction=dirs4, index=st.none() | indices),
    st.builds(mobile.InputText, text=texts, index=indices),
    st.just(mobile.NavigateHome()),
    st.just(mobile.NavigateBack()),
    st.just(mobile.KeyboardEnter()),
    st.builds(mobile.OpenApp, app_name=nonblank),
    st.builds(mobile.Status, goal_status=st.sampled_from(["complete", "infeasible"])),
    st.just(mobile.Wait()),
    st.builds(mobile.Answer, text=texts),
)
spaces_and_actions = st.one_of(
    st.tuples(st.just(WEB), web_actions), st.tuples(st.just(MOBILE), mobile_actions)
)

# Pieces of the formats the parser looks for, so random text reaches its deeper paths.
fragments = st.sampled_from([
    "Action:", "action :", "ACTION：", "Thought:", "Reason:", "{", "}", "(", ")", "[", "]", "'",
    '"', "\\", ",", ":", "\n", "```json", "```", '"action"', "'click'", "click(", "click",
    "type_string(", "input_text(", "finish()", "True", "null", "-", "element_id", "index", "3",
    '"B"', " ", "中文", "action_type", '"arguments"', "scroll_page", "navigate_back", "=",
])
adversarial = st.lists(st.one_of(fragments, st.text(max_size=6)), max_size=40).map("".join)


def _check_contract(text: str, space) -> None:
    proposal = parse_proposal(text, space)
    assert isinstance(proposal, ParsedProposal)
    action = proposal.action
    assert isinstance(action, Action)
    assert action in space
    if isinstance(action, Unknown):
        assert action.raw == text
        assert isinstance(action.reason, str) and action.reason
        assert not action.reason.startswith("internal parser error"), action.reason
        assert proposal.error == action.reason
    else:
        assert proposal.error is None
    assert parse_action(text, space) == action


# --------------------------------------------------------------------------- properties


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.text(max_size=200) | adversarial, space=st.sampled_from([WEB, MOBILE]))
def test_never_raises_and_stays_in_space(text: str, space) -> None:
    _check_contract(text, space)


@settings(max_examples=300, deadline=None)
@given(pair=spaces_and_actions)
def test_round_trip_json_after_marker(pair) -> None:
    space, action = pair
    assert parse_action(f"Thought: x\nAction: {action.to_json()}", space) == action


@settings(max_examples=300, deadline=None)
@given(pair=spaces_and_actions)
def test_round_trip_call_syntax(pair) -> None:
    space, action = pair
    parsed = parse_action(action.to_call(), space)
    assert parsed.key() == action.key()
    assert parsed == action


@settings(max_examples=100, deadline=None)
@given(pair=spaces_and_actions, prose=st.text(max_size=60))
def test_round_trip_with_prose_and_fences(pair, prose: str) -> None:
    space, action = pair
    text = f"Thought: {prose}\nAction:\n```json\n{action.to_json()}\n```\nDone."
    assert parse_action(text, space) == action


@pytest.mark.parametrize("text", [
    "[" * 100_000,
    "{" * 30_000 + "}" * 30_000,
    '{"a": ' * 5_000 + "1" + "}" * 5_000,
    "Action: " + "(" * 50_000,
    "click(" * 10_000,
    "Action: {" + '"k": "v", ' * 50_000 + '"action": "click", "element_id": "B"}',
    "x" * 2_000_000,
    "\x00{'action': 'click', 'element_id': 'B'\x00}",
    "Action: {'action': 'click', 'element_id': " + "-" * 10_000 + "1}",
    "Action: {'action': 'click', 'index': '" + "9" * 5_000 + "', 'element_id': " + "9" * 5_000 + "}",
])
def test_huge_and_deep_inputs_give_unknown(text: str) -> None:
    for space in (WEB, MOBILE):
        _check_contract(text, space)
        assert isinstance(parse_action(text, space), Unknown)


def test_action_beyond_scan_cap_is_not_read() -> None:
    text = " " * MAX_ANSWER_CHARS + 'Action: {"action": "click", "element_id": "B"}'
    action = parse_action(text, WEB)
    assert isinstance(action, Unknown)
    assert str(MAX_ANSWER_CHARS) in action.reason


# --------------------------------------------------------------------------- linear time

# Adversarial answers as (start, repeated unit, end), each aimed at a pattern or a scan that was
# (or could become) super-linear: whitespace runs inside calls and objects (the integer pattern
# once took 1.2 s on 16 kB of them), deep nesting, unclosed quotes, repeated action keys, digit
# and backslash runs, and braces that each start a new candidate to rescan.
ADVERSARIAL = {
    "whitespace in call": ('switch_tab("1', " ", 'x")'),
    "whitespace in object": ('Action: {"action": "switch_tab", "tab_index": "1', " \t", 'x"}'),
    "whitespace after marker": ("Action:", " ", "click('B'"),
    "parentheses": ("Action: ", "((((", ""),
    "call nesting": ("", "click(", ""),
    "brace nesting": ("", '{"a": [', ""),
    "unclosed double quote": ('Action: {"action": "type_string", "content": "', "a b ", ""),
    "unclosed single quotes": ("click('", "B' '", ""),
    "action key repeated": ("", '{"action": ', ""),
    "marker and object repeated": ("", 'Action: {"action": "click", "element_id": ', ""),
    "markers": ("", "Action: ", ""),
    "digits in call": ("Action: switch_tab(", "9", ")"),
    "digits in string": ('{"action": "switch_tab", "tab_index": "', "9", '"}'),
    "backslashes": ('Action: {"action": "click", "element_id": "', "\\", '"}'),
    "escaped braces": ("", "{" + "\\" * 31, ""),
    "quoted braces": ("", "{'", ""),
    "dotted names": ("", "a.", "b"),
    "raw newlines in string": ("Action: {'action': 'type_string', 'content': '", "\n", "'}"),
    "observation lines": ("Action: x\n", " >* Observation ", ""),
    "thought labels": ("", "\n# Thought ", ""),
    "empty objects": ("", "{} ", 'click("B")'),
}


def _adversarial(shape: tuple[str, str, str], size: int) -> str:
    start, unit, end = shape
    return start + unit * max(1, (size - len(start) - len(end)) // len(unit)) + end


def _parse_seconds(*texts: str, repeat: int = 15) -> list[float]:
    """For each text, its slower space's best of ``repeat`` parses. The texts take turns, so a
    burst of other load slows them alike; the minimum is the run least disturbed by it."""
    best = [[float("inf")] * len(texts) for _ in (WEB, MOBILE)]
    for _ in range(repeat):
        for k, text in enumerate(texts):
            for s, space in enumerate((WEB, MOBILE)):
                t0 = time.perf_counter()
                parse_proposal(text, space)
                best[s][k] = min(best[s][k], time.perf_counter() - t0)
    return [max(web_s, mobile_s) for web_s, mobile_s in zip(*best, strict=True)]


def test_adversarial_answers_parse_in_linear_time() -> None:
    # The target is < 50 ms per 16 kB answer (a few ms here); the bound is looser so that a
    # loaded 2-core CI machine does not fail it, yet far below the seconds a backtracking
    # pattern takes. 16 kB answers are cut to MAX_ANSWER_CHARS = 8 kB, 4x the 2 kB ones: linear
    # parsing takes about 4x as long, quadratic 16x; 8x (plus 2 ms for timer noise) tells them
    # apart.
    rows = [(name, *_parse_seconds(_adversarial(shape, 2048), _adversarial(shape, 16384)))
            for name, shape in ADVERSARIAL.items()]
    print("\nadversarial answer               2 kB       16 kB")
    for name, small, big in rows:
        print(f"{name:28s} {small * 1e3:7.2f} ms {big * 1e3:8.2f} ms")
    assert [name for name, _, big in rows if big >= 0.25] == []
    assert [name for name, small, big in rows if big > 8 * small + 0.002] == []
    assert sum(big for *_, big in rows) < 8 * sum(small for _, small, _ in rows)


def test_answer_is_cut_at_max_answer_chars() -> None:
    action = 'Action: {"action": "click", "element_id": "B"}'
    assert parse_action(" " * (MAX_ANSWER_CHARS - len(action)) + action, WEB) == web.Click("B")
    late = parse_action(" " * (MAX_ANSWER_CHARS - len(action) + 1) + action, WEB)
    assert isinstance(late, Unknown) and "truncated" in late.reason


def test_valid_action_followed_by_megabytes_of_chatter() -> None:
    text = 'Action: {"action": "click", "element_id": "B"}\n' + "blah " * 400_000
    assert parse_action(text, "web") == web.Click("B")


def test_non_string_input_is_unknown() -> None:
    action = parse_action(None, WEB)  # type: ignore[arg-type]
    assert isinstance(action, Unknown) and "text" in action.reason


def test_space_by_name_and_bad_space_name() -> None:
    assert parse_action("click(3)", "mobile") == mobile.Tap(3)
    from collabui.errors import ConfigError

    with pytest.raises(ConfigError):
        parse_action("click(3)", "desktop")


# --------------------------------------------------------------------------- proposals


def test_proposal_splits_thought_and_action() -> None:
    p = parse_proposal("Thought: the Submit button has id B.\nAction: {\"action\": \"click\", "
                       "\"element_id\": \"B\"}", WEB)
    assert p == ParsedProposal("the Submit button has id B.", web.Click("B"), None)


def test_proposal_reason_label_and_unknown_error() -> None:
    p = parse_proposal("Reason: nothing fits\nAction: {\"action\": \"dance\"}", WEB)
    assert p.thought == "nothing fits"
    assert isinstance(p.action, Unknown) and p.error == p.action.reason and "dance" in p.error


def test_proposal_unlabelled_prose_and_thought_key() -> None:
    p = parse_proposal("I should go back.\nAction: navigate_back", MOBILE)
    assert p == ParsedProposal("I should go back.", mobile.NavigateBack(), None)
    p = parse_proposal('{"thought": "open it", "action": "open_app", "app_name": "Clock"}', MOBILE)
    assert p == ParsedProposal("open it", mobile.OpenApp("Clock"), None)
    assert parse_proposal("click('B')", WEB).thought is None


def test_parsed_proposal_is_frozen() -> None:
    p = parse_proposal("finish()", WEB)
    with pytest.raises(AttributeError):
        p.thought = "x"  # type: ignore[misc]


# --------------------------------------------------------------------------- AutoWebBench

_QUOTED = re.compile(r"'((?:[^'\\]|\\.)*)'", re.S)


def _quoted_args(target: str) -> list[str]:
    """The target's quoted arguments, unescaped: an oracle independent of the parser."""
    return [re.sub(r"\\(.)", r"\1", s, flags=re.S) for s in _QUOTED.findall(target)]


def _autowebbench_targets() -> list[str]:
    out: list[str] = []
    for lang in ("en", "zh"):
        path = AUTOWEBBENCH / lang / "ind.json"
        # A failure, not a skip: CI has shared/ beside the clone, so a missing file is a bug.
        assert path.is_file(), f"{path} not found; AutoWebBench data lives in shared/data beside the repository"
        out += [r["target"] for r in json.loads(path.read_text(encoding="utf-8"))]
    return out


def test_every_autowebbench_target_parses_exactly() -> None:
    targets = _autowebbench_targets()
    assert len(targets) == 349 + 392
    failures = []
    for target in targets:
        action = parse_action(target, WEB)
        if isinstance(action, Unknown):
            failures.append((target[:80], action.reason))
            continue
        expected_text = dict(
            select=lambda a: a.option, type_string=lambda a: a.content,
            finish=lambda a: a.answer, user_input=lambda a: a.message,
        ).get(action.name)
        quoted = _quoted_args(target)
        if action.name != target.split("(", 1)[0]:
            failures.append((target[:80], f"parsed as {action.name}"))
        elif expected_text is not None and quoted[-1:] != [expected_text(action)] and not (
            action.name == "finish" and not quoted and action.answer is None
        ):
            failures.append((target[:80], f"text differs: {expected_text(action)[:60]!r}"))
        elif action.name in ("click", "hover", "select", "type_string") and action.element_id != quoted[0]:
            failures.append((target[:80], f"element {action.element_id!r}"))
        elif parse_action(action.to_call(), WEB) != action:
            failures.append((target[:80], "to_call() does not round-trip"))
    assert not failures, f"{len(failures)} of {len(targets)} targets failed: {failures[:5]}"


# --------------------------------------------------------------------------- small-model outputs


class R(str):
    """Expected: ``Unknown`` whose reason contains this text."""


# (id, space, model output, expected action or R(reason fragment)). The kinds of text a 135M
# instruct model writes; the first rows are verbatim SmolLM2-135M-Instruct outputs (untrained).
SMALL_MODEL_OUTPUTS = [
    ("real-js-instead-of-action", "web",
     "You can use the `<input>` element to create a form with a drop-down menu. Here's how you "
     "can modify the previous example:\n\n```javascript\nconst form = document.createElement('form');"
     "\nconst input = document.createElement('input');\n\ninput.addEventListener('change', () => {\n"
     "  const inputText = input.value", R("no action found")),
    ("real-select-in-js", "web",
     "You can use the `select` method to create a drop-down list with a specific value. Here's how "
     "you can do it:\n\n```javascript\nconst options = document.querySelectorAll('[K]');\n",
     R("no action found")),
    ("real-echo-page", "web",
     "The task is to create a new user with a specified email address and password.\n\nThe user's "
     "email address is:\n<a[S]| Amazon>\nThe user's email address is:\n<a[", R("no action found")),
    ("real-js-destructuring", "web",
     "You can use the following code to create a weather API endpoint:\n```\nconst "
     "{formatWeatherData} = require('../utils/weather');\n\nconst {getWeatherData} = "
     "require('../utils/weather');\n\n", R("no action found")),
    ("real-repetition", "web", "You're ready to proceed.\n\n" * 10, R("no action found")),
    ("canonical", "web",
     'Thought: the task asks to click the Submit button, which has id B.\n'
     'Action: {"action": "click", "element_id": "B"}', web.Click("B")),
    ("marker-spacing-case", "web", 'thought: ok\naction : {"action": "hover", "element_id": "CC"}',
     web.Hover("CC")),
    ("one-line", "web", 'Thought: type it. Action: {"action": "type_string", "element_id": "C", '
     '"content": "hello world", "press_enter": true}', web.TypeString("C", "hello world", True)),
    ("fenced-after-marker", "web",
     'Thought: submit.\nAction:\n```json\n{\n  "action": "click",\n  "element_id": "J"\n}\n```',
     web.Click("J")),
    ("fenced-no-marker", "web", 'Sure! Here is the action:\n```json\n{"action": "scroll_page", '
     '"direction": "down"}\n```\nLet me know if you need anything else.', web.ScrollPage("down")),
    ("repeated-same", "web", 'Action: {"action": "click", "element_id": "B"}\n'
     'Action: {"action": "click", "element_id": "B"}\nAction: {"action": "click", "element_id": "B"}',
     web.Click("B")),
    ("repeated-last-wins", "web", 'Action: {"action": "click", "element_id": "B"}\nWait, the '
     'button is D.\nAction: {"action": "click", "element_id": "D"}', web.Click("D")),
    ("repeat-truncated-tail", "web", 'Action: {"action": "click", "element_id": "B"}\n'
     'Action: {"action": "click", "elem', web.Click("B")),
    ("truncated", "web", 'Thought: I need to type the email.\nAction: {"action": "type_string", '
     '"element_id": "E", "content": "bob@exa', R("truncated")),
    ("truncated-brace", "mobile", 'Action: {"action_type": "click", "index": 3', R("truncated")),
    ("run-on-observation", "web", 'Thought: click sign in.\nAction: {"action": "click", '
     '"element_id": "J"}\nObservation: the page shows your inbox.\nThought: done.\n'
     'Action: {"action": "finish"}', web.Click("J")),
    ("hallucinated-name", "web", 'Action: {"action": "search", "query": "weather"}',
     R("unknown web action 'search'")),
    ("hallucinated-mobile", "mobile", 'Action: {"action_type": "press_key", "key": "enter"}',
     R("unknown mobile action 'press_key'")),
    ("chatter-after", "web", 'Action: {"action": "click", "element_id": "X"}\n\nI hope this '
     'helps! The Flights link {is} the first one.', web.Click("X")),
    ("chinese-content", "web", 'Thought：需要在搜索框输入天气预报。\nAction：{"action": '
     '"type_string", "element_id": "AG", "content": "天气预报", "press_enter": true}',
     web.TypeString("AG", "天气预报", True)),
    ("chinese-truncated", "web", 'Action: {"action": "type_string", "element_id": "AG", '
     '"content": "天气', R("truncated")),
    ("single-quotes", "web", "Action: {'action': 'click', 'element_id': 'SD'}", web.Click("SD")),
    ("trailing-comma", "web", 'Action: {"action": "go", "direction": "backward",}',
     web.Go("backward")),
    ("unquoted-keys", "web", "Action: {action: \"click\", element_id: \"K\"}", web.Click("K")),
    ("bare-words", "web", "Action: {action: click, element_id: K}", web.Click("K")),
    ("python-literals", "web", "Action: {'action': 'type_string', 'element_id': 'E', 'content': "
     "'bob', 'press_enter': True}", web.TypeString("E", "bob", True)),
    ("bool-as-string", "web", 'Action: {"action": "type_string", "element_id": "E", "content": '
     '"x", "press_enter": "false"}', web.TypeString("E", "x", False)),
    ("androidworld-style", "mobile", '{"action_type": "click", "index": "3"}', mobile.Tap(3)),
    ("type-key-bracket-id", "web", 'Action: {"type": "click", "element": "[SD]"}',
     web.Click("SD")),
    ("tool-call-style", "web", '{"name": "select", "arguments": {"element_id": "K", "option": '
     '"Blue"}}', web.Select("K", "Blue")),
    ("tool-call-json-string", "web", '{"function": "hover", "arguments": "{\\"target\\": \\"C\\"}"}',
     web.Hover("C")),
    ("select-text-alias", "web", 'Action: {"action": "select", "id": "K", "text": "Blue"}',
     web.Select("K", "Blue")),
    ("type-value-alias", "web", 'Action: {"action": "type_string", "target": "F", "value": '
     '"hunter2"}', web.TypeString("F", "hunter2", False)),
    ("mobile-content-alias", "mobile", 'Action: {"action": "input_text", "index": 0, "content": '
     '"pizza near me"}', mobile.InputText("pizza near me", 0)),
    ("call-positional", "web", "Action: type_string('LF', 'some text', False)",
     web.TypeString("LF", "some text", False)),
    ("call-keywords", "web", 'Action: click(element_id="B")', web.Click("B")),
    ("call-upper", "web", "Action: CLICK('b')", web.Click("B")),
    ("call-in-prose", "web", "I will scroll down to read the rest. scroll_page('down')",
     web.ScrollPage("down")),
    ("call-in-backticks", "web", "**Action:** `hover('CC')`", web.Hover("CC")),
    ("call-dict-arg", "web", 'Action: click({"element_id": "Q"})', web.Click("Q")),
    ("web-index", "web", 'Action: {"action": "click", "index": 2}', R("not by 'index'")),
    ("missing-option", "web", 'Action: {"action": "select", "element_id": "K"}',
     R("missing required argument 'option'")),
    ("missing-index", "mobile", 'Action: {"action": "input_text", "text": "hi"}',
     R("missing required argument 'index'")),
    ("missing-in-call", "web", "Action: click()", R("missing required argument 'element_id'")),
    ("finish-empty", "web", "Thought: the task is done.\nAction: finish()", web.Finish()),
    ("finish-answer", "web", "finish('The weather today is sunny, 25C.')",
     web.Finish("The weather today is sunny, 25C.")),
    ("awb-escaped-quote", "web", "finish('As Germany\\'s agency')", web.Finish("As Germany's agency")),
    ("awb-literal-newline", "web", "type_string('AC', '央视网消息：据报道。\n\n\u3000\u3000考虑到', False)",
     web.TypeString("AC", "央视网消息：据报道。\n\n\u3000\u3000考虑到", False)),
    ("prose-only", "web", "The task is to search for the weather forecast for the day.",
     R("no action found")),
    ("empty", "mobile", "   \n", R("empty output")),
    ("status", "mobile", 'Thought: all set.\nAction: {"action_type": "status", "goal_status": '
     '"complete"}', mobile.Status("complete")),
    ("status-synonym", "mobile", 'Action: {"action": "status", "goal_status": "done"}',
     mobile.Status("complete")),
    ("bare-name", "mobile", "Thought: go back.\nAction: navigate_back", mobile.NavigateBack()),
    ("bare-name-missing-arg", "web", "Action: click B", R("missing required argument 'element_id'")),
    ("open-app-alias", "mobile", 'Action: {"action": "open_app", "app": "Settings"}',
     mobile.OpenApp("Settings")),
    ("scroll-upper-dir", "mobile", 'Action: {"action": "scroll", "direction": "DOWN", "index": "1"}',
     mobile.Scroll("down", 1)),
    ("nested-action-object", "web", '{"thought": "submit", "action": {"name": "click", '
     '"element_id": "B"}}', web.Click("B")),
    ("langchain-action-input", "web", 'Action: click\nAction Input: {"element_id": "B"}',
     web.Click("B")),
    ("numeric-content", "web", 'Action: {"action": "type_string", "element_id": "E", "content": '
     '12345}', web.TypeString("E", "12345", False)),
    ("tap-synonym", "mobile", 'Action: {"action": "tap", "index": 2}', mobile.Tap(2)),
    ("extra-keys", "web", 'Action: {"action": "click", "element_id": "B", "reason": "it is the '
     'submit button", "confidence": 0.9}', web.Click("B")),
    ("switch-tab-index", "web", 'Action: {"action": "switch_tab", "index": 1}', web.SwitchTab(1)),
    ("switch-tab-bracketed-string", "web", '{"action": "switch_tab", "tab_index": " [ 3 ] "}',
     web.SwitchTab(3)),
    ("switch-tab-spaced-junk", "web", 'switch_tab("1   x")', R("tab_index must be an integer")),
    ("dotted-call", "web", "Action: page.click('B')", web.Click("B")),
    ("dotted-call-bad-name", "web", "Action: a..click('B')", R("nothing readable")),
    ("go-back-synonym", "web", 'Action: {"action": "go", "direction": "back"}', web.Go("backward")),
    ("bad-direction", "web", 'Action: {"action": "scroll_page", "direction": "sideways"}',
     R("direction")),
    ("first-object-without-action", "web", 'The page is {"title": "Login"}. So I do '
     '{"action": "click", "element_id": "J"}', web.Click("J")),
    ("non-action-type-key-first", "web", 'Fill the field {"type": "email"} like this: '
     '{"action": "type_string", "element_id": "E", "content": "a@b.c"}',
     web.TypeString("E", "a@b.c", False)),
    ("list-wrapped", "web", '[{"action": "click", "element_id": "B"}]', web.Click("B")),
    ("echoed-examples-then-marker", "web", 'Available: {"action": "click", "element_id": "B"}  '
     'click an element\n{"action": "hover", "element_id": "B"}\nThought: hover the menu.\n'
     'Action: {"action": "hover", "element_id": "M"}', web.Hover("M")),
    ("marker-text-inside-answer", "web", '{"action": "finish", "answer": "Call to action: '
     'click(\'Z\') now"}', web.Finish("Call to action: click('Z') now")),
    ("mobile-web-confusion", "mobile", 'Action: {"action": "click", "element_id": "B"}',
     R("index must be an element number")),
]


@pytest.mark.parametrize(("space", "text", "expected"),
                         [c[1:] for c in SMALL_MODEL_OUTPUTS],
                         ids=[c[0] for c in SMALL_MODEL_OUTPUTS])
def test_small_model_outputs(space: str, text: str, expected) -> None:
    action = parse_action(text, space)
    if isinstance(expected, R):
        assert isinstance(action, Unknown), action
        assert action.raw == text
        assert expected in action.reason
    else:
        assert action == expected


@pytest.mark.parametrize("thought", [None, "", 'click button "Ok" [B]'])
def test_render_answer_reads_back_to_its_action_and_thought(thought: str | None) -> None:
    action = get_action_space("web").from_dict({"action": "type_string", "element_id": "U",
                                                "content": "Action: x", "press_enter": False})
    text = render_answer(action.to_json(), thought)
    parsed = parse_proposal(text, "web")
    assert parsed.action == action
    assert (parsed.thought or None) == (thought or None)
    assert text.startswith("Thought: ") == bool(thought)


def test_without_heads_keeps_the_screen_lines_only():
    from collabui.parsing import without_heads

    text = 'Location: /miniwob/x.html\nTabs: [0] X\nViewport (pages): 1 of 2\nPassword\ninput "" [K]'
    assert without_heads(text) == 'Password\ninput "" [K]'
    assert without_heads('button "Location: here" [B]') == 'button "Location: here" [B]'
