"""The real thing, scaled down: SmolLM2 agents on real MiniWoB++ pages in headless Chromium."""

import re

import pytest

from collabui import MOBILE, WEB, CollabAgentTeam, make_env
from collabui.trace import read_trace

pytestmark = [pytest.mark.browser, pytest.mark.model, pytest.mark.slow]

# Guided decoding starts every answer with the action object (serving.schema, action first).
GUIDED_START = '{"action":{"action":"'


def _run_one_step(env_name, space, tmp_path):
    from collabui.models import LocalModel

    # Guided JSON: the untrained model may write free text nothing can parse, so without it
    # "the executed action is unknown" would be a legitimate outcome and the test could not
    # tell a broken parse/vote pipeline from a confused model. Guided, every proposal is a
    # well-formed action of the space, and the executed one must be a real action.
    model = LocalModel.embedded(guided_json=space)
    try:
        team = CollabAgentTeam(model, n_agents=2, rounds=2, topology="chain", action_space=space,
                               max_steps=1, max_new_tokens=48)
        with make_env(env_name) as env:
            result = team.run(None, env, seed=0, trace=tmp_path, episode_id="real")
    finally:
        model.close()
    trace = read_trace(tmp_path / "real.jsonl")  # validates every record against the schema
    return result, trace


def _assert_executed_a_parsed_proposal(step, actions):
    proposals = [p for row in step["proposals"] for p in row]
    assert all(p["raw"].startswith(GUIDED_START) for p in proposals), [p["raw"] for p in proposals]
    parsed = [p["action"] for p in proposals if p["parse_error"] is None]
    assert step["vote"]["parsed"] == len(parsed) >= 1, [p["raw"] for p in proposals]
    executed = step["executed"]
    assert executed["action"] in actions, executed
    # The vote executes one of the team's own parsed proposals, never an invented action.
    assert executed in parsed and executed == step["vote"]["action"], (executed, parsed)


def test_smollm2_team_step_on_miniwob_writes_valid_trace(tmp_path):
    result, trace = _run_one_step("miniwob/click-button", "web", tmp_path)
    assert result.n_steps == 1 and result.error is None
    step = trace.steps[0]
    assert "<button[" in step["observation"]["text"]
    assert trace.header["task"].startswith("Click on the")
    # 2 agents x 2 rounds, each with its exact prompt and the model's raw output.
    assert [[(p["agent"], p["round"]) for p in row] for row in step["proposals"]] == [[(0, 0), (0, 1)], [(1, 0), (1, 1)]]
    assert all(p["raw"] and p["completion_tokens"] for row in step["proposals"] for p in row)
    # Agent 1 reads agent 0's same-round output (chain 0 -> 1); agent 0 reads no peer.
    assert "[Agent 0]" in step["proposals"][1][0]["messages"][-1]["content"]
    assert "[Agent" not in step["proposals"][0][0]["messages"][-1]["content"]
    _assert_executed_a_parsed_proposal(step, WEB.actions)


def test_smollm2_team_runs_on_mobile_miniwob(tmp_path):
    result, trace = _run_one_step("miniwob-mobile/click-button", "mobile", tmp_path)
    assert result.n_steps == 1 and result.error is None
    step = trace.steps[0]
    lines = step["observation"]["text"].splitlines()
    assert lines and all(re.match(r"^\d+: ", line) for line in lines)  # an indexed element list
    _assert_executed_a_parsed_proposal(step, MOBILE.actions)
    # The mobile prompt demonstrates index-addressed actions, not web element ids.
    assert '"index"' in step["proposals"][0][0]["messages"][0]["content"]
