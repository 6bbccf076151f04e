"""Preference pairs rebuilt from recorded traces equal what the agents were actually asked."""

import json

import pytest

from collabui import CollabAgentTeam
from collabui.devices.base import Observation
from collabui.devices.fake import FakeDevice
from collabui.errors import ConfigError, TraceError
from collabui.models.fake import ScriptedChatModel
from collabui.training.adversary import Adversary, Rejected, RuleAdversary
from collabui.training.critic import OutcomeCritic, ReferenceCritic
from collabui.training.labels import label_traces
from collabui.training.pairs import (
    PAIR_COLUMNS,
    build_pairs,
    load_pairs,
    pair_stats,
    pairs_for_agent,
    save_pairs,
)

N, M = 3, 2
GOLD = {"action": "click", "element_id": "B"}


def _model():
    """Agent i answers by its adapter a{i}; its k-th call is step k // M, round k % M.

    Agent 0 always clicks B; agent 1 clicks C in round 0 and then B; agent 2 rambles.
    """
    calls: dict[int, int] = {}

    def answer(req):
        i = int(req.adapter[1:])
        k = calls.get(i, 0)
        calls[i] = k + 1
        target = "B" if i == 0 or (i == 1 and k % M == 1) else "C"
        if i == 2:
            return f"I am not sure (call {k})."
        return f'Thought: agent {i} call {k}.\nAction: {{"action": "click", "element_id": "{target}"}}'

    return ScriptedChatModel(answer)


def _record(tmp_path, episode_id, steps=2):
    screens = [Observation(text=f"<button[B]| Submit {k}> <button[C]| Cancel>", task="Click Submit.")
               for k in range(steps)]
    device = FakeDevice(screens, max_steps=steps)
    model = _model()
    team = CollabAgentTeam(model, n_agents=N, rounds=M, topology="chain",
                           adapters=tuple(f"a{i}" for i in range(N)), batch_fallback_s=30)
    team.run(None, device, trace=tmp_path, episode_id=episode_id)
    return tmp_path / f"{episode_id}.jsonl", model


def _requests_by_entry(model):
    seen: dict[int, int] = {}
    out = {}
    for req in model.requests:
        i = int(req.adapter[1:])
        k = seen.get(i, 0)
        seen[i] = k + 1
        out[(i, k // M, k % M)] = [dict(m) for m in req.messages]
    return out


@pytest.fixture
def recorded(tmp_path):
    path, model = _record(tmp_path, "ep1")
    labels = tmp_path / "labels.jsonl"
    label_traces([path], ReferenceCritic(lambda ctx: GOLD), labels, progress=False)
    return path, model, labels


def test_pair_prompts_equal_the_requests_the_model_received(recorded):
    path, model, labels = recorded
    ds = build_pairs([path], labels, RuleAdversary())
    assert tuple(ds.column_names) == PAIR_COLUMNS
    # Rewarded: agent 0 in both rounds, agent 1 in round 1, at each of the 2 steps.
    assert sorted((r["agent"], r["t"], r["round"]) for r in ds) == sorted(
        [(0, t, 0) for t in range(2)] + [(0, t, 1) for t in range(2)] + [(1, t, 1) for t in range(2)])
    sent = _requests_by_entry(model)
    for row in ds:
        key = (row["agent"], row["t"], row["round"])
        assert row["prompt"] == sent[key]  # byte-for-byte what the model was asked
        k = row["t"] * M + row["round"]
        assert row["chosen"] == [{"role": "assistant", "content":
                                  f'Thought: agent {row["agent"]} call {k}.\nAction: {json.dumps(GOLD)}'}]
        rej = row["rejected"][0]
        assert rej["role"] == "assistant" and rej["content"].startswith("Thought: ")
        assert '"element_id": "B"}' not in rej["content"] or '"hover"' in rej["content"]
        assert row["score"] == 1.0 and row["rejected_source"] == "rule" and row["episode_id"] == "ep1"
    # Round 1 prompts carry the agent's own round-0 answer and its predecessor's (chain: 0 -> 1).
    prompt = next(r["prompt"] for r in ds if (r["agent"], r["round"]) == (1, 1))[-1]["content"]
    assert "Your answer in the previous round" in prompt and "[Agent 0]" in prompt


def test_stats_and_per_agent_split(recorded):
    path, _, labels = recorded
    ds = build_pairs(path, labels, RuleAdversary())
    stats = pair_stats(ds)
    assert stats == {"pairs": 6, "per_agent": {0: 4, 1: 2}, "per_round": {0: 2, 1: 4},
                     "rejected_source": {"rule": 6}, "episodes": 1, "steps": 2}
    assert set(pairs_for_agent(ds, 1)["agent"]) == {1} and len(pairs_for_agent(ds, 2)) == 0


class _Fixed(Adversary):
    def reject(self, ctx, i, j, chosen_action):
        return Rejected('Thought: no.\nAction: {"action": "click", "element_id": "Z"}',
                        {"action": "click", "element_id": "Z"}, "llm")


def test_dedupe_drops_identical_records(tmp_path):
    a, _ = _record(tmp_path, "a", steps=1)
    b, _ = _record(tmp_path, "b", steps=1)  # the same conversation in another episode
    labels = tmp_path / "labels.jsonl"
    label_traces([a, b], ReferenceCritic(lambda ctx: GOLD), labels, progress=False)
    full = build_pairs([a, b], labels, _Fixed(), dedupe=False)
    deduped = build_pairs([a, b], labels, _Fixed())
    assert len(full) == 6 and len(deduped) == 3 and set(deduped["episode_id"]) == {"a"}


def test_jsonl_round_trip(recorded, tmp_path):
    path, _, labels = recorded
    ds = build_pairs(path, labels, RuleAdversary())
    out = save_pairs(ds, tmp_path / "pairs" / "pairs.jsonl")
    back = load_pairs(out)
    assert back.features == ds.features and back.to_list() == ds.to_list()
    empty = build_pairs(path, labels, RuleAdversary()).select([])
    assert load_pairs(save_pairs(empty, tmp_path / "empty.jsonl")).features == ds.features
    (tmp_path / "bad.jsonl").write_text('{"prompt": []}\n')
    with pytest.raises(ConfigError, match="lacks pair columns"):
        load_pairs(tmp_path / "bad.jsonl")


def test_no_rewards_gives_an_empty_typed_dataset_and_bad_labels_fail(recorded, tmp_path):
    path, _, _ = recorded
    labels = tmp_path / "outcome.jsonl"
    label_traces(path, OutcomeCritic(), labels, progress=False)  # no end success: all 0
    ds = build_pairs(path, labels, RuleAdversary())
    assert len(ds) == 0 and tuple(ds.column_names) == PAIR_COLUMNS
    both = tmp_path / "both.jsonl"
    both.write_text(labels.read_text() + (tmp_path / "labels.jsonl").read_text())
    with pytest.raises(ConfigError, match="choose one with critic="):
        build_pairs(path, both, RuleAdversary())
    assert len(build_pairs(path, both, RuleAdversary(), critic="reference")) == 6
    record = json.loads(labels.read_text().splitlines()[0])
    record.update(scores=[[1.0]], rewards=[[1]], reasons=None)
    wrong = tmp_path / "wrong.jsonl"
    wrong.write_text(json.dumps(record) + "\n")
    with pytest.raises(TraceError, match="relabel"):
        build_pairs(path, wrong, RuleAdversary())


@pytest.mark.parametrize(("raw", "expected"), [
    ('Thought: E is Yes.\nAction: {"action": "click", "element_id": "E"}\nReply with a Thought line and',
     'Thought: E is Yes.\nAction: {"action": "click", "element_id": "E"}'),
    ('Thought: t\nAction: {"action": "type_string", "element_id": "A", "content": "a}b\\"c"}\n[Agent 2] x',
     'Thought: t\nAction: {"action": "type_string", "element_id": "A", "content": "a}b\\"c"}'),
    ("Thought: t\nAction: click('B')\nAnswers from other agents", "Thought: t\nAction: click('B')"),
    ('Thought: t\nAction: {"action": "click", "element_id": "E"}', 'Thought: t\nAction: {"action": "click", "element_id": "E"}'),
    ("no action at all", "no action at all"),
])
def test_chosen_answers_are_cut_after_the_action(raw, expected):
    """Prompt echoes after the action would be reinforced as 'chosen'; the action stays intact."""
    from collabui.training.pairs import clean_answer

    assert clean_answer(raw, "web") == expected


_ECHO = "\nReply with a Thought line and an Action line."


@pytest.mark.parametrize("action", [
    # Valid JSON, measured by the JSON decoder: braces inside strings and a nested object.
    '{"action": {"action": "type_string", "element_id": "A", "content": "{x}} {{y"}, "thought": "a } b"}',
    # Not JSON but read by the parser (single quotes, a brace inside a string; a trailing comma
    # over two lines): measured by the parser's own bracket scan.
    "{'action': 'type_string', 'element_id': 'A', 'content': 'a}b'}",
    '{"action": "click",\n "element_id": "B",}',
])
def test_chosen_answer_cut_ends_exactly_after_the_object(action):
    from collabui.parsing import parse_proposal
    from collabui.training.pairs import clean_answer

    answer = f"Thought: t\nAction: {action}"
    assert parse_proposal(answer + _ECHO, "web").error is None  # the cut is what is tested
    assert clean_answer(answer + _ECHO, "web") == answer


def test_chosen_answer_with_an_unclosed_brace_after_the_action_is_kept_whole():
    from collabui.parsing import parse_proposal
    from collabui.training.pairs import clean_answer

    # The action parses (call syntax), but the first brace after the marker opens a span that
    # neither decodes nor closes: no end to cut at, so the answer stays as the agent wrote it.
    raw = "Thought: t\nAction: click('B') {oops" + _ECHO
    assert parse_proposal(raw, "web").error is None
    assert clean_answer(raw, "web") == raw
