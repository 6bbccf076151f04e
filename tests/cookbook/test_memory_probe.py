"""The memory probe shows an agent exactly the block a team agent reads in its later rounds."""

import json

import pytest

from collabui.actions import get_action_space
from collabui.prompts import PeerOutput, build_messages
from tests.cookbook.scripts import load_script

PAGE = 'Location: /miniwob/click-button-sequence.html\nbutton "TWO" [E]\nbutton "ONE" [V]'


def _probe():
    return load_script("memory_probe")


TREE = {"tag": "", "id": None, "parts": [{"tag": "button", "id": "E", "parts": ["TWO"]},
                                        {"tag": "button", "id": "V", "parts": ["ONE"]}]}


@pytest.mark.parametrize("style", ["terse", "grounded", "named"])
def test_the_probe_prompt_is_the_team_agents_round_two_prompt(style):
    action = {"action": "click", "element_id": "E"}
    raw = f'Thought: click button "TWO" [E]\nAction: {json.dumps(action)}'
    proposal = {"action": action, "thought": 'click button "TWO" [E]', "raw": raw}
    common = dict(space=get_action_space("web"), task="Click button ONE, then click button TWO.",
                  observation=PAGE, history=['click(button "ONE")'], style=style)
    alone = [dict(m) for m in build_messages(**common)]
    named = 'click(button "TWO" [E])' if style == "named" else None
    own = PeerOutput(agent=0, round=0, thought=proposal["thought"], action_json=json.dumps(action), raw=raw,
                     named=named)
    in_team = [dict(m) for m in build_messages(**common, own_previous=own)]
    shown = _probe()._with_own_answer(alone, proposal, style, TREE)
    assert shown == in_team and shown != alone


def test_the_probe_skips_answers_a_team_would_not_show(tmp_path):
    # An unparsed answer reads as "(no valid action)" in a team, never as its action: not probed.
    def proposal(action, error):
        return {"action": action, "parse_error": error, "messages": [{"role": "user", "content": PAGE}],
                "raw": "x", "thought": None}

    steps = [{"type": "step", "t": t, "observation": {"extra": {"tree": TREE}}, "proposals": [[p]]}
             for t, p in enumerate([proposal({"action": "click", "element_id": "E"}, None),
                                    proposal({"action": "unknown", "raw": "x"}, "no Action: line")])]
    (tmp_path / "traces").mkdir()
    lines = [{"type": "episode", "team": {"prompt_style": "named"}}, *steps, {"type": "end"}]
    (tmp_path / "traces" / "e.jsonl").write_text("\n".join(json.dumps(r) for r in lines))
    found = list(_probe()._steps(tmp_path, episodes=5, seed=0))
    assert [(t, style, tree) for t, _, _, style, tree in found] == [(0, "named", TREE)]
