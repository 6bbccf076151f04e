"""Agents that read the page differently: per-agent prompt styles and page formats, on a real
MiniWoB++ page (the device's element tree is what the other format is rendered from)."""

import asyncio
import re

import pytest

from collabui import CollabAgentTeam, make_env
from collabui.actions.web import Click
from collabui.config import TeamConfig
from collabui.errors import ConfigError
from collabui.models.baselines import RandomPolicyModel
from collabui.models.fake import ScriptedChatModel
from collabui.prompts import history_entry
from collabui.vote import majority_vote


def _clicks_the_first_button(req):
    user = req.messages[-1]["content"]
    found = re.search(r'<button\[(\w+)\]|button "[^"]*" \[(\w+)\]', user)
    return f'Action: {{"action": "click", "element_id": "{found[1] or found[2]}"}}'


@pytest.mark.browser
def test_each_agent_reads_the_page_in_its_own_format_and_style():
    model = ScriptedChatModel(_clicks_the_first_button)
    team = CollabAgentTeam(model, n_agents=2, rounds=1, topology="independent", adapters=("v12", "v14"),
                           agent_styles=("trained", "grounded"), agent_formats=("html", "text-first"))
    with make_env("miniwob/click-dialog", shuffle_elements=True) as env:
        obs = env.reset(seed=3)
        button = re.search(r"<button\[(\w+)\]\| (\w+)>", obs.text)
        done = history_entry(Click(button[1]), obs)  # as an episode records it, on the device's html page
        step = team.step(obs.task, obs, [done])
    html, text_first = (req.messages[-1]["content"] for req in sorted(model.requests, key=lambda r: r.adapter))
    assert f"<button[{button[1]}]| {button[2]}>" in html and f'button "{button[2]}" [{button[1]}]' not in html
    assert f'button "{button[2]}" [{button[1]}]' in text_first and "<button[" not in text_first  # same ids
    assert f"1. {done}" in html and f'1. click(button "{button[2]}")' in text_first  # the history too
    systems = {req.adapter: req.messages[0]["content"] for req in model.requests}
    assert systems["v12"] != systems["v14"]  # trained vs grounded instructions
    assert step.action == Click(button[1])  # both formats name the same element


def test_per_agent_settings_are_checked_and_cycled_from_a_bundle():
    with pytest.raises(ConfigError, match="agent_formats has 1 values for 4 agents"):
        TeamConfig(agent_formats=("html",))
    with pytest.raises(ConfigError, match=r"agent_styles has unknown values \['fancy'\]"):
        TeamConfig(n_agents=1, agent_styles=("fancy",))

    class Mixed:  # what a bundle of two models tells the team (models.bundle team_defaults)
        team_defaults = {"prompt_style": "trained", "adapters": ["v12", "v14"],
                         "agent_styles": ["trained", "grounded"], "agent_formats": ["html", "text-first"]}

    config = TeamConfig().for_model(Mixed())
    assert config.adapters == ("v12", "v14", "v12", "v14")
    assert [config.agent_style(i) for i in range(4)] == ["trained", "grounded"] * 2
    assert [config.agent_format(i) for i in range(4)] == ["html", "text-first"] * 2
    assert TeamConfig(prompt_style="react").agent_style(3) == "react" and TeamConfig().agent_format(0) is None


@pytest.mark.browser
def test_named_agents_read_the_team_answers_as_calls_naming_the_element_on_their_own_page():
    model = ScriptedChatModel(_clicks_the_first_button)
    team = CollabAgentTeam(model, n_agents=2, rounds=2, topology="chain", adapters=("a", "b"),
                           prompt_style="named", agent_formats=("html", "text-first"))
    with make_env("miniwob/click-dialog", shuffle_elements=True) as env:
        obs = env.reset(seed=3)
        button = re.search(r"<button\[(\w+)\]\| (\w+)>", obs.text)
        team.step(obs.task, obs, [])
    by_agent = {a: [r.messages[-1]["content"] for r in model.requests if r.adapter == a] for a in "ab"}
    # Agent b reads a's answer of this round on its text-first page; a reads its own on html.
    assert f'[Agent 0] click(button "{button[2]}" [{button[1]}])' in by_agent["b"][0]
    assert f"Your previous answer:\nclick(<button[{button[1]}]| {button[2]}>)" in by_agent["a"][1]
    assert '"element_id"' not in by_agent["a"][1] + by_agent["b"][1]  # no answer reads as JSON


@pytest.mark.browser
def test_varied_order_shows_each_agent_but_the_first_the_page_in_an_order_of_its_own():
    model = ScriptedChatModel(_clicks_the_first_button)
    team = CollabAgentTeam(model, n_agents=4, rounds=1, topology="independent", adapters=("a", "b", "c", "d"),
                           prompt_style="terse", varied_order=True)
    with make_env("miniwob/click-button", element_format="text-first") as env:
        obs = env.reset(seed=0)
        team.step(obs.task, obs, [])
        first = {r.adapter: r.messages[-1]["content"] for r in model.requests}
        model.requests.clear()
        step = team.step(obs.task, obs, [])  # the same page again: the same orders
    again = {r.adapter: r.messages[-1]["content"] for r in model.requests}
    assert first == again
    assert obs.text in first["a"]  # agent 0 reads the device's page
    pages = [set(first[a].splitlines()) for a in "abcd"]
    assert all(p == pages[0] for p in pages)  # the same lines (elements and ids) ...
    assert len({first[a] for a in "abcd"}) > 1  # ... in other orders
    # Each agent clicked its own first button, so the 4 proposals need not agree.
    assert len({a for row in step.action_matrix() for a in row}) > 1


@pytest.mark.browser
def test_an_arbiter_executes_its_own_answer_when_an_agent_proposed_it_else_the_vote():
    team = CollabAgentTeam(RandomPolicyModel(seed=3), n_agents=4, rounds=3, topology="independent",
                           arbiter="lexical")
    seen = {True: 0, False: 0}
    with make_env("miniwob/click-button", element_format="text-first", shuffle_elements=True) as env:
        for seed in range(8):
            obs = env.reset(seed=seed)
            step = team.step(obs.task, obs, []) if seed % 2 else asyncio.run(team.astep(obs.task, obs, []))
            record = step.vote.arbiter
            wanted = next(line for line in obs.text.splitlines() if f'"{obs.task.split(chr(34))[1]}"' in line)
            assert record["model"] == "lexical" and record["answer"] == f"click('{wanted.split('[')[-1][:-1]}')"
            proposed = {a.to_call() for row in step.action_matrix() for a in row}
            assert record["chose"] == (record["answer"] in proposed)
            counted = majority_vote(step.action_matrix()).action.to_call()
            assert step.action.to_call() == (record["answer"] if record["chose"] else counted)
            assert record["overruled"] == (record["chose"] and record["answer"] != counted)
            seen[record["chose"]] += 1
    assert seen[True] and seen[False], seen  # both cases met on these seeds


def test_a_bad_arbiter_spec_is_one_error_naming_the_arbiter():
    with pytest.raises(ConfigError, match=r"^arbiter: unknown model spec 'nosuch'; use one of"):
        CollabAgentTeam(ScriptedChatModel(_clicks_the_first_button), n_agents=2, rounds=1, arbiter="nosuch")
    with pytest.raises(ConfigError, match="arbiter must be a model spec"):
        TeamConfig(arbiter=" ")


def test_a_team_closes_the_arbiter_it_loaded_and_leaves_a_shared_one_open(monkeypatch):
    from collabui.models.baselines import LexicalPolicyModel

    closed: list[object] = []
    monkeypatch.setattr(LexicalPolicyModel, "close", lambda self: closed.append(self))
    model = ScriptedChatModel(_clicks_the_first_button)
    with CollabAgentTeam(model, n_agents=2, rounds=1, arbiter="lexical") as team:
        loaded = team.arbiter
    assert closed == [loaded]
    team.close()  # twice is safe: nothing more is closed
    shared = LexicalPolicyModel()
    with CollabAgentTeam(model, n_agents=2, rounds=1, arbiter="lexical", arbiter_model=shared) as team:
        assert team.arbiter is shared
    assert closed == [loaded]
