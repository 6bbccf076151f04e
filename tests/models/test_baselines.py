"""The random and lexical baselines: specs, reproducibility, valid actions, and real team steps."""

from __future__ import annotations

import pytest

from collabui.actions import MOBILE, WEB, Unknown
from collabui.actions.mobile import InputText, Tap
from collabui.actions.web import Click, TypeString
from collabui.devices.fake import FakeDevice
from collabui.errors import ConfigError
from collabui.models import load_model
from collabui.models.base import ChatRequest
from collabui.models.baselines import (
    LexicalPolicyModel,
    RandomPolicyModel,
    candidate_actions,
    quoted_strings,
    read_prompt,
    tokenize,
)
from collabui.parsing import parse_action
from collabui.prompts import build_messages
from collabui.team import CollabAgentTeam

# What the browser's DOM walk renders for a MiniWoB++ click-link-like page.
MINIWOB_PAGE = (
    "< <div| <p| Lorem <a[A]| ipsum> dolor sit amet, <a[B]| consectetur> adipiscing elit. "
    "Nunc <a[C]| tortor> luctus, <a[D]| Egestas> nisl.> > >"
)
FORM_PAGE = (
    "< <div| <label| First name> <input[A]| placeholder: First name> <label| Last name> "
    "<input[B]| placeholder: Last name> <button[C]| Submit> > >"
)
MOBILE_SCREEN = "\n".join([
    '0: TextView "Settings" [0,0][1080,120]',
    '1: LinearLayout "Bluetooth" (clickable) [0,120][1080,240]',
    '2: LinearLayout "Wi-Fi" (clickable) [0,240][1080,360]',
    '3: EditText "" hint="Search settings" (clickable, editable) [0,360][1080,480]',
    '4: RecyclerView id=list (scrollable) [0,480][1080,2000]',
])


def _request(task: str, screen: str, space=WEB, history=(), seed: int | None = None) -> ChatRequest:
    messages = build_messages(space=space, task=task, observation=screen, history=list(history))
    return ChatRequest(messages=messages, seed=seed)


def _act(model, request: ChatRequest, space=WEB):
    action = parse_action(model.generate([request])[0].text, space)
    assert not isinstance(action, Unknown), action
    return action


def test_specs_load_the_baselines() -> None:
    assert isinstance(load_model("random"), RandomPolicyModel) and load_model("random").seed == 0
    assert load_model("random:7").seed == 7 and load_model("random:7").name == "random:7"
    assert isinstance(load_model(" lexical "), LexicalPolicyModel)
    for bad in ("random:x", "random:", "lexical:3"):
        with pytest.raises(ConfigError, match="random|lexical"):
            load_model(bad)


def test_read_prompt_finds_space_task_history_and_screen() -> None:
    view = read_prompt(_request('Click "tortor".', MINIWOB_PAGE, history=["click('A')"]).messages)
    assert view.space is WEB and view.task == 'Click "tortor".'
    assert view.history == "1. click('A')" and view.screen == MINIWOB_PAGE
    assert read_prompt(_request("Open Wi-Fi", MOBILE_SCREEN, space=MOBILE).messages).space is MOBILE


@pytest.mark.parametrize("style", ["react", "grounded", "terse", "named"])
def test_read_prompt_stops_the_screen_at_the_team_answers_of_every_style(style) -> None:
    from collabui.prompts import PeerOutput

    peer = PeerOutput(agent=1, round=0, thought="click <a[C]| tortor>",
                      action_json='{"action": "click", "element_id": "C"}', raw="", named="click(<a[C]| tortor>)")
    messages = build_messages(space=WEB, task='Click "tortor".', observation=MINIWOB_PAGE, history=[],
                              peers=[peer], own_previous=peer, style=style)
    assert read_prompt(messages).screen == MINIWOB_PAGE  # the answers are not page elements


def test_tokenize_handles_cjk_and_quotes() -> None:
    assert tokenize("搜索洗衣机") == ["搜索", "索洗", "洗衣", "衣机"]
    assert tokenize("Click the Sign-Up button of GitHub") == ["sign", "up", "github"]
    assert quoted_strings('Enter "Juan" and “洗衣机” in 《防卫白皮书》; NCR\'s menu') == ["Juan", "洗衣机", "防卫白皮书"]


@pytest.mark.parametrize("space,screen", [(WEB, MINIWOB_PAGE), (WEB, FORM_PAGE), (MOBILE, MOBILE_SCREEN)])
def test_random_is_reproducible_valid_and_covers_candidates(space, screen) -> None:
    request = _request('Enter "Juan" somewhere', screen, space=space, seed=3)
    candidates = candidate_actions(read_prompt(request.messages))
    model = RandomPolicyModel(seed=1)
    first = model.generate([request])[0].text
    assert all(model.generate([request])[0].text == first for _ in range(3))  # same seeds, same answer
    assert RandomPolicyModel(seed=1).generate([request])[0].text == first  # a fresh instance too
    seen = {parse_action(RandomPolicyModel(seed=s).generate([request])[0].text, space) for s in range(60)}
    assert seen <= set(candidates)  # always a valid candidate of this screen
    assert len(seen) >= min(6, len(candidates))  # and the seed really varies the choice


def test_random_candidates_respect_element_kinds() -> None:
    web = candidate_actions(read_prompt(_request('Type "x"', FORM_PAGE).messages))
    typed = {a.element_id for a in web if isinstance(a, TypeString)}
    assert typed == {"A", "B"} and all(a.content == "x" for a in web if isinstance(a, TypeString))
    mobile = candidate_actions(read_prompt(_request('Type "x"', MOBILE_SCREEN, space=MOBILE).messages))
    assert {a.index for a in mobile if isinstance(a, InputText)} == {3}
    assert {a.index for a in mobile if isinstance(a, Tap)} == {0, 1, 2, 3, 4}


def test_lexical_picks_the_matching_element() -> None:
    model = LexicalPolicyModel()
    assert _act(model, _request("Click on the link \"tortor\".", MINIWOB_PAGE)) == Click("C")
    assert _act(model, _request("Click on the egestas link.", MINIWOB_PAGE)) == Click("D")
    # A quoted string with a typing verb goes into the best-matching input, once.
    typed = _act(model, _request('Enter "Juan" as the first name.', FORM_PAGE))
    assert typed == TypeString("A", "Juan", False)
    again = _act(model, _request('Enter "Juan" as the first name.', FORM_PAGE, history=["type_string('A', 'Juan', False)"]))
    assert isinstance(again, Click)
    # The runtime names acted-on elements by their screen line: the clicked link is not clicked again.
    both = "Click on the links tortor and tortor egestas."
    assert _act(model, _request(both, MINIWOB_PAGE)) == Click("C")
    assert _act(model, _request(both, MINIWOB_PAGE, history=["click(<a| tortor>)"])) == Click("D")
    zh_page = "< <a[A]| 首页> <a[B]| 体育新闻> <a[C]| 财经> <input[D]| 请输入关键字> >"
    assert _act(model, _request("请访问体育新闻板块。", zh_page)) == Click("B")
    assert _act(model, _request("搜索“洗衣机”商品", zh_page)) == TypeString("D", "洗衣机", False)
    assert _act(model, _request("Open the Wi-Fi settings", MOBILE_SCREEN, space=MOBILE), MOBILE) == Tap(2)
    # No overlap at all: scroll for more rather than click at random.
    assert _act(model, _request("Buy bananas", MINIWOB_PAGE)).name == "scroll_page"


@pytest.mark.parametrize("spec", ["lexical", "random:5"])
def test_baselines_run_in_a_real_team_step(spec: str) -> None:
    device = FakeDevice([MINIWOB_PAGE], task='Click on the link "tortor".',
                        success_when=lambda a: a == Click("C"), max_steps=1)
    team = CollabAgentTeam(load_model(spec), n_agents=1, rounds=1, topology="independent")
    result = team.run(None, device)
    executed = device.actions[0]
    assert not isinstance(executed, Unknown) and executed in WEB
    if spec == "lexical":
        assert executed == Click("C") and result.reward == 1.0


#: The tree behind FORM_PAGE-like screen, as a browser's walk gives it.
_FORM_TREE = {"tag": "", "id": None, "parts": [
    {"tag": "label", "id": None, "parts": ["Last name"]},
    {"tag": "input", "id": "K", "parts": []},
    {"tag": "button", "id": "M", "parts": ["Submit"]},
]}


def test_baselines_read_the_screens_structure_when_the_request_has_it() -> None:
    """With ``ChatRequest.structure`` the elements come from the device's tree (web) or records
    (phone), not from the prompt's text: here the text lists other ids than the structure."""
    lexical = load_model("lexical")
    typed = _request('Enter "Kim" as the last name', FORM_PAGE)
    with_tree = ChatRequest(messages=typed.messages, structure={"tree": _FORM_TREE})
    assert _act(lexical, typed) == TypeString("B", "Kim")  # text only: read back from the text
    assert _act(lexical, with_tree) == TypeString("K", "Kim")
    clicked = _request('Click "Submit".', FORM_PAGE, history=["type_string('K', 'Kim')"])
    assert _act(lexical, ChatRequest(messages=clicked.messages, structure={"tree": _FORM_TREE})) == Click("M")
    view = read_prompt(with_tree.messages, with_tree.structure)
    assert {a.element_id for a in candidate_actions(view) if hasattr(a, "element_id")} == {"K", "M"}
    records = [{"index": 7, "type": "Switch", "label": "Wi-Fi", "flags": ["clickable"], "bounds": (0, 0, 1, 1)}]
    phone = _request("Open the Wi-Fi settings", MOBILE_SCREEN, space=MOBILE)
    assert _act(lexical, ChatRequest(messages=phone.messages, structure={"ui_elements": records}), MOBILE) == Tap(7)


def test_the_team_hands_the_devices_structure_to_the_models() -> None:
    from collabui.devices.base import Observation
    from collabui.models.fake import ScriptedChatModel

    screen = Observation(text="<button[Z]| text only>", task='Click "Submit".',
                         extra={"tree": _FORM_TREE, "elements": 2})
    model = ScriptedChatModel(lambda request: 'Action: {"action": "click", "element_id": "M"}')
    CollabAgentTeam(model, n_agents=2, rounds=1, max_steps=1).run(None, FakeDevice([screen], max_steps=1))
    assert [r.structure for r in model.requests] == [{"tree": _FORM_TREE}] * 2
    lexical_team = CollabAgentTeam(load_model("lexical"), n_agents=1, rounds=1, max_steps=1)
    device = FakeDevice([screen], max_steps=1)
    lexical_team.run(None, device)
    assert device.actions == [Click("M")]  # an id only the structure has


def test_lexical_runs_in_a_mobile_team_step() -> None:
    device = FakeDevice([MOBILE_SCREEN], task="Open the Wi-Fi settings", action_space=MOBILE,
                        success_when=lambda a: a == Tap(2), max_steps=1)
    team = CollabAgentTeam(load_model("lexical"), n_agents=1, rounds=1, topology="independent",
                           action_space="mobile")
    result = team.run(None, device)
    assert device.actions == [Tap(2)] and result.reward == 1.0
