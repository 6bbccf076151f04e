"""Critics: tolerant reading of LLM critic output, Eq. 6 rewards, reference/outcome critics."""

import json
import logging

import pytest

from collabui import CollabAgentTeam
from collabui.actions.web import Click
from collabui.devices.base import Observation
from collabui.devices.fake import FakeDevice
from collabui.errors import ConfigError
from collabui.models.fake import ScriptedChatModel
from collabui.trace import read_trace
from collabui.training._critic_prompt import parse_scores
from collabui.training.critic import (
    LLMCritic,
    OutcomeCritic,
    ReferenceCritic,
    ScoreMatrix,
    StepContext,
    make_critic,
)
from collabui.training.labels import label_traces, read_labels

N, M = 3, 3
GOOD = {"agent0": [0.9, 0.2, 1.0], "agent1": [0.5, 0.4, 0.0], "agent2": [1, 0, 0.75]}


def _answer(scores, reasoning="agent0 is right."):
    return f"Reasoning: {reasoning}\nScores: {json.dumps({'scores': scores})}"


def _abstains(parsed):
    return {(i, j) for i in range(N) for j in range(M) if parsed.scores[i][j] is None}


ALL = {(i, j) for i in range(N) for j in range(M)}
CASES = [
    ("valid", _answer(GOOD), set(), {}),
    ("missing agent", _answer({"agent0": GOOD["agent0"], "agent1": GOOD["agent1"]}),
     {(2, 0), (2, 1), (2, 2)}, {"missing_agents": 1}),
    ("extra agent", _answer({**GOOD, "agent3": [1, 1, 1]}), set(), {"extra_agents": 1}),
    ("two rounds", _answer({**GOOD, "agent1": [0.5, 0.4]}), {(1, 0), (1, 1), (1, 2)},
     {"wrong_rounds": 1}),
    ("four rounds", _answer({**GOOD, "agent1": [0.5, 0.4, 0.1, 0.9]}), {(1, 0), (1, 1), (1, 2)},
     {"wrong_rounds": 1}),
    ("out of range", _answer({**GOOD, "agent0": [1.7, -0.2, 1.0]}), {(0, 0), (0, 1)},
     {"out_of_range": 2}),
    ("not numeric", _answer({**GOOD, "agent2": ["high", 0, 0.75]}), {(2, 0)}, {"not_numeric": 1}),
    ("scalar for 3 rounds", _answer({**GOOD, "agent2": 0.8}), {(2, 0), (2, 1), (2, 2)},
     {"wrong_rounds": 1}),
    ("prose", "All agents look fine to me, I would give them high marks.", ALL, {"not_json": 1}),
    ("truncated", 'Reasoning: ok\nScores: {"scores": {"agent0": [0.9, 0.2, 1.0], "agent1": [0.5,',
     ALL, {"not_json": 1}),
    ("python-ish literal", "Scores: ```json\n{'scores': {'Agent 0': [0.9, 0.2, 1.0], 'agent_1': [0.5, 0.4, 0.0],"
     " 'agent2': [1, 0, 0.75],},}\n```", set(), {}),
    ("bare table", json.dumps(GOOD), set(), {}),
]


@pytest.mark.parametrize("name,text,abstain,counts", CASES, ids=[c[0] for c in CASES])
def test_malformed_critic_output_becomes_counted_abstains(name, text, abstain, counts):
    parsed = parse_scores(text, N, M)
    assert _abstains(parsed) == abstain
    stats = parsed.stats.to_dict()
    assert stats.pop("outputs") == 1
    assert stats == {k: counts.get(k, 0) for k in stats}
    for i, j in abstain:
        assert parsed.reasons[i][j].startswith("abstain:")
    for i, j in ALL - abstain:  # what was readable is kept exactly, never zeroed
        assert parsed.scores[i][j] == pytest.approx(GOOD[f"agent{i}"][j])


def test_last_json_answer_wins_and_rationale_is_kept():
    text = 'Reasoning: draft {"scores": {"agent0": [0, 0, 0]}} then final.\nScores: ' + json.dumps({"scores": GOOD})
    parsed = parse_scores(text, N, M)
    assert not _abstains(parsed) and parsed.scores[0][0] == 0.9
    assert parsed.rationale.startswith("draft")


def test_reward_threshold_is_exactly_one_half():
    sm = ScoreMatrix([[0.5, 0.4999999, 1.0, 0.0, None]])
    assert sm.rewards == ((1, 0, 1, 0, None),)
    assert sm.abstained == 1
    label = sm.to_label("ep", 3, "x")
    assert label["rewards"] == [[1, 0, 1, 0, None]] and label["scores"][0][4] is None
    assert label == {**label, "episode_id": "ep", "t": 3, "critic": "x", "abstained": 1}
    with pytest.raises(ConfigError, match="outside"):
        ScoreMatrix([[1.2]])


def _by_adapter(answers):
    """Agent i (adapter a{i}) answers answers[i] every time."""
    return ScriptedChatModel(lambda req: answers[int(req.adapter[1:])])


CLICK = 'Thought: t\nAction: {{"action": "click", "element_id": "{}"}}'
ANSWERS = [CLICK.format("B"), CLICK.format("b"), CLICK.format("C"), "no idea"]


def _record(tmp_path, episode_id, *, success, n=4, m=2, extra=None):
    screen = Observation(text="<button[B]| Submit> <button[C]| Cancel>", task="Click Submit.",
                         extra=extra or {})
    device = FakeDevice([screen], success_when=(lambda a: a == Click("B")) if success else None,
                        max_steps=2)
    team = CollabAgentTeam(_by_adapter(ANSWERS), n_agents=n, rounds=m, topology="chain",
                           adapters=tuple(f"a{i}" for i in range(n)), batch_fallback_s=30)
    team.run(None, device, trace=tmp_path, episode_id=episode_id)
    return tmp_path / f"{episode_id}.jsonl"


def _contexts(path):
    trace = read_trace(path)
    return [StepContext.from_trace_step(trace.header, s, end=trace.end) for s in trace.steps]


def test_reference_critic_on_recorded_trace(tmp_path):
    (ctx,) = _contexts(_record(tmp_path, "ok", success=True))
    assert (ctx.n, ctx.m) == (4, 2) and ctx.task == "Click Submit." and ctx.gold is None
    sm = ReferenceCritic(lambda c: {"action": "click", "element_id": "b"}).score(ctx)
    assert sm.scores == ((1.0, 1.0), (1.0, 1.0), (0.0, 0.0), (0.0, 0.0))  # 'b' == 'B' canonically
    assert ReferenceCritic().score(ctx).abstained == 8  # no gold: abstain, never 0
    bad = ReferenceCritic(lambda c: {"action": "click"}).score(ctx)
    assert bad.abstained == 8 and "invalid" in bad.reasons[0][0]


def test_reference_critic_reads_gold_from_the_observation(tmp_path):
    path = _record(tmp_path, "gold", success=True, extra={"gold_action": {"action": "click", "element_id": "C"}})
    (ctx,) = _contexts(path)
    assert ctx.gold == {"action": "click", "element_id": "C"}
    assert ReferenceCritic().score(ctx).rewards == ((0, 0), (0, 0), (1, 1), (0, 0))


def test_outcome_critic_scores_episode_success(tmp_path):
    (won,) = _contexts(_record(tmp_path, "won", success=True))
    lost = _contexts(_record(tmp_path, "lost", success=False))
    assert won.success is True and len(lost) == 2 and lost[0].success is False
    assert OutcomeCritic().score(won).scores == ((1.0, 1.0),) * 3 + ((0.0, 0.0),)  # agent3 unparsable
    assert all(s == 0.0 for ctx in lost for row in OutcomeCritic().score(ctx).scores for s in row)


def test_llm_critic_end_to_end(tmp_path):
    path = _record(tmp_path, "ep", success=True)
    reply = _answer({"agent0": [0.9, 0.8], "agent1": [0.6, "high"], "agent2": [0.1, 0.0],
                     "agent3": [0.9, 0.9], "agent7": [1, 1]}, reasoning="B is Submit.")
    model = ScriptedChatModel([reply], cycle=True, name="judge")
    critic = LLMCritic(model)
    (ctx,) = _contexts(path)
    sm = critic.score(ctx)
    assert sm.scores == ((0.9, 0.8), (0.6, None), (0.1, 0.0), (0.0, 0.0))  # agent3 unparsable: 0
    assert sm.rewards == ((1, 1), (1, None), (0, 0), (0, 0))
    assert sm.rationale == "B is Submit." and sm.reasons[3][0] == "unparsable proposal"
    assert (critic.stats.not_numeric, critic.stats.extra_agents, critic.stats.outputs) == (1, 1, 1)
    req = model.requests[0]
    assert len(req.messages) == 4 and req.temperature == 0.1  # system + worked example + step
    user = req.messages[-1]["content"]
    assert "Click Submit." in user and "<button[B]| Submit>" in user
    assert 'agent2 round 1: {"action": "click", "element_id": "C"}' in user
    assert "agent3 round 0: (unparsable output: 'no idea')" in user
    assert len(LLMCritic(model, few_shot=False).request(ctx).messages) == 2
    stats = label_traces([path], critic, tmp_path / "labels.jsonl", progress=False)
    (label,) = read_labels(tmp_path / "labels.jsonl")
    assert label["critic"] == "llm:judge" and label["abstained"] == 1 and label["rationale"]
    assert (stats.labelled, stats.abstained, stats.parse.not_numeric) == (1, 1, 1)


class _Counting(OutcomeCritic):
    def __init__(self):
        self.seen = []

    def score(self, ctx):
        self.seen.append((ctx.episode_id, ctx.t))
        return super().score(ctx)


def test_label_traces_resume_skips_labelled_steps(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="collabui")
    paths = [_record(tmp_path, "a", success=False), _record(tmp_path, "b", success=True)]
    out = tmp_path / "labels" / "labels.jsonl"
    first = _Counting()
    stats = label_traces(tmp_path, first, out)  # a folder: only traces are picked up
    assert first.seen == [("a", 0), ("a", 1), ("b", 0)] and stats.labelled == 3
    assert any(m.startswith("[label 2/2] b") for m in caplog.messages)
    lines = out.read_text().splitlines()
    out.write_text("\n".join(lines[:1]) + "\n" + lines[1][:25])  # killed mid-write of record 2
    again = _Counting()
    stats = label_traces(paths, again, out)
    assert again.seen == [("a", 1), ("b", 0)] and (stats.skipped, stats.labelled) == (1, 2)
    assert [(r["episode_id"], r["t"]) for r in read_labels(out)] == [("a", 0), ("a", 1), ("b", 0)]
    fresh = _Counting()
    label_traces(paths, fresh, out, resume=False, progress=False)
    assert len(fresh.seen) == 3 and len(read_labels(out)) == 3


def test_make_critic_specs():
    assert isinstance(make_critic("outcome"), OutcomeCritic)
    assert isinstance(make_critic(" reference "), ReferenceCritic)
    for bad in ("judge", "llm:", "llm:nonsense"):
        with pytest.raises(ConfigError) as exc:
            make_critic(bad)
        assert "\n" not in str(exc.value)
