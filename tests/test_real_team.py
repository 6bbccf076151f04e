"""The real thing, scaled down: SmolLM2 agents on real MiniWoB++ pages in headless Chromium."""

import re

import pytest

from collabui import MOBILE, WEB, CollabAgentTeam, make_env
from collabui.trace import read_trace

pytestmark = [pytest.mark.browser, pytest.mark.model, pytest.mark.slow]


@pytest.fixture(scope="module")
def smollm2():
    from collabui.models import LocalModel

    model = LocalModel.embedded()
    yield model
    model.close()


def _run_one_step(model, env_name, space, tmp_path):
    team = CollabAgentTeam(model, n_agents=2, rounds=2, topology="chain", action_space=space,
                           max_steps=1, max_new_tokens=40)
    with make_env(env_name) as env:
        result = team.run(None, env, seed=0, trace=tmp_path, episode_id="real")
    trace = read_trace(tmp_path / "real.jsonl")  # validates every record against the schema
    return result, trace


def test_smollm2_team_step_on_miniwob_writes_valid_trace(smollm2, tmp_path):
    result, trace = _run_one_step(smollm2, "miniwob/click-button", "web", tmp_path)
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
    assert step["executed"]["action"] in WEB.actions or step["executed"]["action"] == "unknown"


def test_smollm2_team_runs_on_mobile_miniwob(smollm2, tmp_path):
    result, trace = _run_one_step(smollm2, "miniwob-mobile/click-button", "mobile", tmp_path)
    assert result.n_steps == 1 and result.error is None
    step = trace.steps[0]
    lines = step["observation"]["text"].splitlines()
    assert lines and all(re.match(r"^\d+: ", line) for line in lines)  # an indexed element list
    assert step["executed"]["action"] in MOBILE.actions or step["executed"]["action"] == "unknown"
    assert '"index"' in step["proposals"][0][0]["messages"][0]["content"] or "index" in step["proposals"][0][0]["messages"][0]["content"]
