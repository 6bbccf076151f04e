"""Adversary (Eq. 7): wrong actions that always differ from the chosen one."""

import pytest

from collabui.actions import MOBILE, WEB, get_action_space
from collabui.models.fake import ScriptedChatModel
from collabui.parsing import parse_proposal
from collabui.training.adversary import LLMAdversary, RuleAdversary, screen_ids, screen_indices
from collabui.training.critic import StepContext

WEB_SCREEN = "<form| <input[A]| name; Ada> <button[B]| Submit> <select[C]| Color> <a[D]| Help> >"
MOBILE_SCREEN = '0: TextView "Settings"\n1: Switch "Wi-Fi" (checkable)\n2: EditText "Search"\n3: Button "OK"'

WEB_ACTIONS = [
    {"action": "click", "element_id": "B"},
    {"action": "hover", "element_id": "D"},
    {"action": "select", "element_id": "C", "option": "Blue"},
    {"action": "type_string", "element_id": "A", "content": "Ada", "press_enter": True},
    {"action": "scroll_page", "direction": "down"},
    {"action": "scroll_page", "direction": "up"},
    {"action": "go", "direction": "backward"},
    {"action": "go", "direction": "forward"},
    {"action": "jump_to", "url": "https://example.org", "new_tab": False},
    {"action": "switch_tab", "tab_index": 0},
    {"action": "user_input", "message": "please log in"},
    {"action": "finish"},
    {"action": "finish", "answer": "Ada"},
]
MOBILE_ACTIONS = [
    {"action": "click", "index": 1},
    {"action": "double_tap", "index": 3},
    {"action": "long_press", "index": 0},
    {"action": "input_text", "text": "wifi", "index": 2},
    {"action": "scroll", "direction": "down"},
    {"action": "swipe", "direction": "left", "index": 1},
    {"action": "navigate_home"},
    {"action": "navigate_back"},
    {"action": "keyboard_enter"},
    {"action": "open_app", "app_name": "settings"},
    {"action": "status", "goal_status": "complete"},
    {"action": "status", "goal_status": "infeasible"},
    {"action": "wait"},
    {"action": "answer", "text": "Settings"},
]


def _ctx(space, screen, chosen, *, messages=()):
    return StepContext(episode_id="ep", t=2, task="Do it.", action_space=space, observation=screen,
                       history=("click('A')",), actions=((chosen,),), raws=(("",),), messages=messages)


def test_every_action_type_is_covered():
    assert {a["action"] for a in WEB_ACTIONS} == set(WEB.actions)
    assert {a["action"] for a in MOBILE_ACTIONS} == set(MOBILE.actions)


@pytest.mark.parametrize("space,actions,screens", [
    ("web", WEB_ACTIONS, [WEB_SCREEN, "<div| nothing to click>", "<button[B]| only one>"]),
    ("mobile", MOBILE_ACTIONS, [MOBILE_SCREEN, "(no visible elements)", '1: Button "OK"']),
])
def test_rule_adversary_always_differs_and_reads_like_an_agent(space, actions, screens):
    sp = get_action_space(space)
    adversary = RuleAdversary()
    for screen in screens:
        for data in actions:
            chosen = sp.from_dict(data)
            for i, j in [(0, 0), (1, 2), (3, 1)]:
                rej = adversary.reject(_ctx(space, screen, data), i, j, data)
                assert rej.source == "rule"
                assert sp.from_dict(rej.action).key() != chosen.key(), (screen, data, rej)
                parsed = parse_proposal(rej.text, sp)
                assert parsed.error is None and parsed.action.to_dict() == rej.action
                assert rej.text.startswith("Thought: ") and "\nAction: {" in rej.text


def test_rule_adversary_is_deterministic_and_uses_screen_elements():
    data = {"action": "click", "element_id": "B"}
    ctx = _ctx("web", WEB_SCREEN, data)
    runs = [RuleAdversary(seed=1).reject(ctx, 0, 0, data) for _ in range(3)]
    assert runs[0] == runs[1] == runs[2]
    picked = {RuleAdversary(seed=s).reject(ctx, 0, 0, data).action.get("element_id") for s in range(40)}
    assert picked - {None} <= {"A", "C", "D", "B"} and len(picked - {"B", None}) >= 2
    assert screen_ids(WEB_SCREEN) == ["A", "B", "C", "D"]
    assert screen_indices(MOBILE_SCREEN) == [0, 1, 2, 3]


def test_llm_answer_equal_to_chosen_after_canonicalisation_is_replaced():
    model = ScriptedChatModel(['Thought: Submit.\nAction: {"action": "CLICK", "element_id": "b"}'])
    adversary = LLMAdversary(model)
    data = {"action": "click", "element_id": "B"}
    rej = adversary.reject(_ctx("web", WEB_SCREEN, data), 0, 0, data)
    assert rej.source == "rule" and rej.action != data and rej == RuleAdversary().reject(
        _ctx("web", WEB_SCREEN, data), 0, 0, data)
    assert adversary.stats == {"llm": 0, "unparsable": 0, "same_as_chosen": 1}


def test_unparsable_llm_answer_is_replaced_and_good_ones_kept():
    model = ScriptedChatModel(["I would rather not.",
                               'Thought:  Cancel  looks right.\nAction: {"action": "click", "element_id": "d"}'])
    adversary = LLMAdversary(model)
    data = {"action": "click", "element_id": "B"}
    messages = (({"role": "system", "content": "s"}, {"role": "user", "content": "AGENT VIEW"}),)
    ctx = _ctx("web", WEB_SCREEN, data, messages=(messages,))
    bad, good = adversary.reject_many([(ctx, 0, 0, data), (ctx, 0, 0, data)])
    assert bad.source == "rule" and bad.action != data
    assert good.source == "llm" and good.action == {"action": "click", "element_id": "D"}
    assert good.text == 'Thought: Cancel looks right.\nAction: {"action": "click", "element_id": "D"}'
    assert adversary.stats == {"llm": 1, "unparsable": 1, "same_as_chosen": 0}
    assert model.batch_sizes == [2]  # one batched call
    user = model.requests[0].messages[-1]["content"]
    assert user.startswith("AGENT VIEW") and 'Correct next action: {"action": "click", "element_id": "B"}' in user


def test_rule_rejection_mirrors_the_chosen_thought():
    """The pair differs in the target and the action, not in the wording."""
    chosen = {"action": "click", "element_id": "B"}
    raw = 'Thought: The Submit button has id B.\nAction: {"action": "click", "element_id": "B"}'
    ctx = StepContext(episode_id="ep", t=0, task="Click Submit.", action_space="web", observation=WEB_SCREEN,
                      history=(), actions=((chosen,),), raws=((raw,),))
    rejected = RuleAdversary(seed=3).reject(ctx, 0, 0, chosen)
    parsed = parse_proposal(rejected.text, WEB)
    assert parsed.action.to_dict() != chosen
    target = parsed.action.to_dict().get("element_id")
    if target is not None:  # "Button" keeps its B: only the whole-token id is swapped
        assert parsed.thought == f"The Submit button has id {target}."
    else:
        assert parsed.thought == "The Submit button has id B."
    # No thought to mirror: the template reason is used.
    bare = StepContext(episode_id="ep", t=0, task="t", action_space="web", observation=WEB_SCREEN, history=(),
                       actions=((chosen,),), raws=(('{"action": "click", "element_id": "B"}',),))
    assert "looks like the right one" in RuleAdversary(seed=3).reject(bare, 0, 0, chosen).text


TEXT_FIRST_SCREEN = ('Location: /miniwob/click-button-sequence.html\nClick in order\nbutton "ONE" [Q]\n'
                     'input "" (Name) [K]\nbutton "TWO" [D]')


def test_rule_rejection_on_a_text_first_page_names_a_screen_element_by_its_own_line():
    """A text-first page's ids are read as the device writes them, and a grounded thought gets
    the wrong element's whole line (not the chosen line with another id: DPO on those taught a
    team to write a button's text as its id)."""
    assert screen_ids(TEXT_FIRST_SCREEN) == ["Q", "K", "D"]
    chosen = {"action": "click", "element_id": "Q"}
    raw = 'Thought: click button "ONE" [Q]\nAction: {"action": "click", "element_id": "Q"}'
    lines = {"Q": 'button "ONE" [Q]', "K": 'input "" (Name) [K]', "D": 'button "TWO" [D]'}
    seen = set()
    for seed in range(12):
        ctx = StepContext(episode_id=f"ep{seed}", t=0, task="Click button ONE, then click button TWO.",
                          action_space="web", observation=TEXT_FIRST_SCREEN, history=(), actions=((chosen,),),
                          raws=((raw,),))
        parsed = parse_proposal(RuleAdversary(seed=seed).reject(ctx, 0, 0, chosen).text, WEB)
        target = parsed.action.to_dict()["element_id"]
        assert target in lines  # never an id the page does not show
        assert parsed.thought == f"click {lines[target]}"
        seen.add(target)
    assert seen >= {"K", "D"}  # other elements of the screen, each named by its own line


def test_rule_rejection_on_a_one_element_page_names_no_absent_element():
    screen = 'Location: /miniwob/click-test.html\nbutton "Click Me!" [D]'
    chosen = {"action": "click", "element_id": "D"}
    for seed in range(8):
        ctx = StepContext(episode_id=f"ep{seed}", t=0, task="Click the button.", action_space="web",
                          observation=screen, history=(), actions=((chosen,),), raws=(("",),))
        rejected = RuleAdversary(seed=seed).reject(ctx, 0, 0, chosen).action
        assert rejected.get("element_id", "D") == "D" and rejected != chosen


def test_rule_adversarys_wrong_text_is_a_word_of_the_page_not_of_the_headers_or_markup():
    """A wrong typed text is another word the page shows: never a word of the observation's head
    lines (``Viewport (pages)``) or the element markup (``button``, ``input``)."""
    screen = ('Location: /miniwob/enter-password.html\nViewport (pages): 1 of 1\nVerify the password Kiwi\n'
              'input "" (Password) [K]\nbutton "Submit" [D]')
    chosen = {"action": "type_string", "element_id": "K", "content": "Kiwi"}
    typed = set()
    for seed in range(40):
        ctx = StepContext(episode_id=f"ep{seed}", t=0, task="Enter the password Kiwi.", action_space="web",
                          observation=screen, history=(), actions=((chosen,),), raws=(("",),))
        action = RuleAdversary(seed=seed).reject(ctx, 0, 0, chosen).action
        if action["action"] == "type_string" and action["element_id"] == "K":
            typed.add(action["content"])
    assert typed and typed <= {"Verify", "the", "password", "Submit"}, typed
    phone = '0: TextView "Airplane mode" [0,0][9,9]\n1: Switch "Bluetooth" (unchecked) [0,9][9,18]'
    chosen = {"action": "input_text", "text": "Airplane", "index": 1}
    for seed in range(10):
        ctx = StepContext(episode_id=f"ep{seed}", t=0, task="Type Airplane.", action_space="mobile",
                          observation=phone, history=(), actions=((chosen,),), raws=(("",),))
        action = RuleAdversary(seed=seed).reject(ctx, 0, 0, chosen).action
        if action["action"] == "input_text" and action["index"] == 1:
            assert action["text"] in {"mode", "Bluetooth"}, action
