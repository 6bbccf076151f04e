"""SFT rows read as an agent of a team reads them: drawn answers of the other agents beside
the page, right or a plausible mistake on that page, with the verified answer as the target."""

import json
import random
import re

import pytest

from collabui.errors import ConfigError
from collabui.prompts import build_messages
from collabui.training.sft_data import sft_rows
from collabui.training.team_context import PageFacts, team_context, wrong_action

from .test_hindsight import ROW

IDS = ["A", "B", "C", "D", "E", "F"]
CLICK = {"action": "click", "element_id": "A"}


def _rows(n: int) -> list[dict]:
    return [{**ROW, "seed": 1000 + k} for k in range(n)]


def test_a_mistake_acts_on_another_element_of_the_page_and_typing_keeps_its_value():
    rng = random.Random(0)
    typed = {"action": "type_string", "element_id": "E", "content": "kim", "press_enter": False}
    for _ in range(50):
        click = wrong_action(CLICK, IDS, rng)
        assert click["action"] == "click" and click["element_id"] in IDS and click["element_id"] != "A"
        wrong = wrong_action(typed, IDS, rng)
        assert wrong["content"] == "kim" and wrong["element_id"] != "E"
    assert wrong_action(CLICK, ["A"], rng) is None


def test_contexts_follow_the_team_shape_and_are_right_as_often_as_asked():
    rng = random.Random(1)
    contexts = [team_context(CLICK, IDS, rng, p_right=0.6) for _ in range(2000)]
    answers = [o for c in contexts for o in (*c.peers, *([c.own_previous] if c.own_previous else []))]
    right = sum(json.loads(o.action_json) == CLICK for o in answers) / len(answers)
    assert 0.55 < right < 0.65
    # Round 0 has no previous answer; later rounds do; 0-3 predecessors, never the agent itself.
    assert {len(c.peers) for c in contexts} == {0, 1, 2, 3}
    assert any(c.own_previous is None for c in contexts) and any(c.own_previous for c in contexts)
    for c in contexts:
        assert len({p.agent for p in c.peers}) == len(c.peers)
        if c.own_previous:
            assert c.own_previous.agent not in {p.agent for p in c.peers}
            assert all(p.round == c.own_previous.round + 1 for p in c.peers)


def test_team_rows_show_the_sections_a_team_prompt_has_and_keep_the_verified_target():
    rows = sft_rows(_rows(200), team_share=0.5)
    with_team = [r for r in rows if "Answers from other agents" in r["prompt"][-1]["content"]
                 or "Your answer in the previous round" in r["prompt"][-1]["content"]]
    assert 70 < len(with_team) < 130
    assert all(r["completion"][0]["content"] == 'Action: {"action": "click", "element_id": "A"}' for r in rows)
    # The sections are written exactly as the runtime writes them (same builder, same order).
    text = with_team[0]["prompt"][-1]["content"]
    assert text.index("Current screen:") < text.index("Action:")
    for element in re.findall(r'"element_id": "(\w+)"', text):
        assert element in IDS
    # Seeded by the row: the same rows again give the same prompts; at share 0 every row is
    # the single agent's prompt.
    assert sft_rows(_rows(200), team_share=0.5) == rows
    assert all(r["prompt"] == _single_agent_prompt() for r in sft_rows(_rows(5)))
    with pytest.raises(ConfigError, match="team_share"):
        sft_rows(_rows(1), team_share=1.5)


def _single_agent_prompt() -> list[dict]:
    from collabui.actions import get_action_space
    from collabui.devices.base import Observation
    from collabui.prompts import render_observation

    obs = Observation(text=ROW["screen"], task=ROW["task"], url=ROW["url"], viewport=ROW["viewport"])
    return [dict(m) for m in build_messages(space=get_action_space("web"), task=ROW["task"],
                                            observation=render_observation(obs), history=[], style="trained")]



def test_grounded_team_rows_show_each_answer_with_the_screen_line_of_its_element(style: str = "grounded"):
    # A grounded team's agents write "Thought: click <screen line>" before each action, and
    # their peers read it so: rows without those lines would teach a prompt no team shows.
    rows = sft_rows(_rows(100), team_share=1.0, style=style, element_format="text-first")
    screen = re.split(r"Your (?:answer|previous)|Answers from|Other agents", rows[0]["prompt"][-1]["content"])[0]
    shown = [m for r in rows for m in re.finditer(r'Thought: (\w+) (.*\[(\w+)\])\nAction: (\{.*\})',
                                                  r["prompt"][-1]["content"])]
    assert len(shown) > 100
    for m in shown:
        action = json.loads(m.group(4))
        # The thought names the shown action's kind and the line of the element it acts on.
        assert m.group(1) == action["action"] and m.group(3) == action["element_id"]
        assert "\n" + m.group(2) + "\n" in screen
    assert {json.loads(m.group(4))["element_id"] for m in shown} > {"A"}


def test_terse_team_rows_show_the_answers_as_actions_alone():
    # terse agents read their peers' actions without the thoughts (the prompt the team shows).
    rows = sft_rows(_rows(100), team_share=1.0, style="terse", element_format="text-first")
    prompts = [r["prompt"][-1]["content"] for r in rows]
    shown = [json.loads(m) for p in prompts for m in re.findall(r'\[Agent \d\] (\{.*\})', p)]
    assert len(shown) > 100 and all(a["element_id"] in IDS for a in shown if "element_id" in a)
    assert not any("Thought:" in p for p in prompts)
    assert any("Your previous answer:\n{" in p for p in prompts)


def test_named_team_rows_show_each_answer_as_a_call_naming_its_element():
    # named agents read each shown answer as a call with its element's screen line and id.
    rows = sft_rows(_rows(100), team_share=1.0, style="named", element_format="text-first")
    prompts = [r["prompt"][-1]["content"] for r in rows]
    shown = [m for p in prompts for m in re.finditer(r'(?:\[Agent \d\] |Your previous answer:\n)(\w+)\((.*\[(\w+)\])', p)]
    assert len(shown) > 100 and all(m.group(3) in IDS for m in shown)
    for p in prompts:
        screen = p.split("Your previous")[0].split("Other agents")[0]
        for m in re.finditer(r'(?:\[Agent \d\] |Your previous answer:\n)\w+\((.*\[\w+\])', p):
            assert "\n" + m.group(1) + "\n" in screen + "\n"  # the element's own line on this page
    assert not any("Thought:" in p or '"element_id"' in p for p in prompts)
    # The targets stay grounded answers with the JSON action.
    assert all(r["completion"][0]["content"].startswith("Thought: ") for r in rows)


def test_mistakes_of_the_other_kind_click_a_clickable_or_type_a_shown_value_again():
    page = PageFacts(clickables=("S", "T"), field_values={"E": "kim", "F": "", "P": "***"})
    typed = {"action": "type_string", "element_id": "E", "content": "kim", "press_enter": False}
    submit = {"action": "click", "element_id": "S"}
    rng = random.Random(2)
    beside_typing = [wrong_action(typed, IDS, rng, page=page, other_kind=0.5) for _ in range(400)]
    clicks = [w for w in beside_typing if w["action"] == "click"]
    # About half click a clickable (never a field), the rest type the same value into another field.
    assert 150 < len(clicks) < 250 and {w["element_id"] for w in clicks} == {"S", "T"}
    assert all(w["content"] == "kim" and w["element_id"] != "E" for w in beside_typing if w not in clicks)
    beside_click = [wrong_action(submit, IDS, rng, page=page, other_kind=1.0) for _ in range(50)]
    # Only the filled field is typed again: not the empty one, not the password's stars.
    assert all(w == {"action": "type_string", "element_id": "E", "content": "kim", "press_enter": False}
               for w in beside_click)
    # A page with nothing for such a mistake falls back to one of the same kind; 0 keeps the old draws.
    assert wrong_action(submit, IDS, rng, page=PageFacts(clickables=("S",)), other_kind=1.0)["action"] == "click"
    assert [wrong_action(typed, IDS, random.Random(3), page=page) for _ in range(5)] == \
        [wrong_action(typed, IDS, random.Random(3)) for _ in range(5)]


def test_page_facts_read_a_tree_and_rows_draw_them_only_when_asked():
    from .test_stateless_rows import TREE

    facts = PageFacts.of(TREE)
    # Every listed element but a form field (the label wrapping the checkbox is one), in page order.
    assert facts.clickables == ("L", "B")
    assert facts.field_values == {"U": "kim", "P": "", "T": "a note"}
    plain = sft_rows(_rows(200), team_share=0.5)
    assert sft_rows(_rows(200), team_share=0.5, team_other_kind=0.0) == plain
    with pytest.raises(ConfigError, match="team_other_kind"):
        sft_rows(_rows(1), team_share=0.5, team_other_kind=2.0)
