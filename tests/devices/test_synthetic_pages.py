"""collabui's synthetic form pages (``miniwob/synth-*``) in real Chromium: seeded, rewarded by
what the instruction asked and nothing else, and solvable by the verified search, which keeps
no detour in what it returns."""

from __future__ import annotations

import pytest

from collabui.actions import web
from collabui.devices.miniwob import miniwob_tasks, synthetic_tasks
from collabui.devices.registry import list_envs
from collabui.devices.simplify import flat_elements
from collabui.evaluation.miniwob import resolve_tasks
from collabui.training.verified import Replayer, SearchConfig, search

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def replayer():
    with Replayer(action_timeout_s=0.5) as rep:
        yield rep


def _elements(obs, tag: str) -> list[dict]:
    return [e for e in flat_elements(obs.extra["tree"]) if e["tag"] == tag and e["id"]]


def test_the_pages_are_environments_but_no_benchmark_suite_holds_them():
    assert synthetic_tasks() == ["synth-choices", "synth-fields", "synth-forms"]
    assert not set(synthetic_tasks()) & set(miniwob_tasks())
    assert "miniwob/synth-forms" in list_envs()
    assert resolve_tasks("synth-forms,click-button") == ["synth-forms", "click-button"]
    assert not set(resolve_tasks("all")) & set(synthetic_tasks())


def test_a_seed_rebuilds_the_same_page_and_other_seeds_differ(replayer):
    for task in synthetic_tasks():
        first, again = replayer.start(task, 7), replayer.start(task, 7)
        assert (first.task, first.text) == (again.task, again.text)
        others = {replayer.start(task, s).task for s in range(8, 12)}
        assert len(others | {first.task}) >= 4


def test_the_search_completes_every_page_without_detours(replayer):
    for task in synthetic_tasks():
        for seed in (3, 4):
            found = search(replayer, task, seed, config=SearchConfig())
            assert found.found, (task, seed, found.reason)
            assert len(found.observations) == len(found.actions)
            replayer.start(task, seed)
            outcomes = [replayer.act(a) for a in found.actions]
            assert outcomes[-1].done and outcomes[-1].reward == 1.0
            # No step can go: dropping any one of them (not the final click) loses the reward.
            for i in range(len(found.actions) - 1):
                replayer.start(task, seed)
                rest = [replayer.act(a) for a in found.actions[:i] + found.actions[i + 1:]]
                assert not (rest[-1].done and rest[-1].reward > 0), (task, seed, i)


def test_a_detour_is_cut_from_what_the_search_returns(replayer):
    from collabui.training.verified import _shortest

    task, seed = "synth-fields", 3
    found = search(replayer, task, seed, config=SearchConfig())
    obs = replayer.start(task, seed)
    # Focusing a field changes nothing the reward reads.
    detour = [web.Click(_elements(obs, "input")[0]["id"])]
    padded = detour + found.actions
    kept, seen = _shortest(replayer, task, seed, (), padded, [])
    assert kept == found.actions and len(seen) == len(kept)


def test_submitting_at_once_a_distractor_or_an_extra_value_fails(replayer):
    for seed in range(20):
        obs = replayer.start("synth-fields", seed)
        buttons = _elements(obs, "button")
        if len(buttons) > 1:
            break
    found = search(replayer, "synth-fields", seed, config=SearchConfig())
    submit = found.actions[-1]
    # Every page asks for something: submitting the untouched form is wrong.
    replayer.start("synth-fields", seed)
    out = replayer.act(submit)
    assert out.done and out.reward == -1.0 and out.info["reason"].startswith("wrong:")
    other = next(b["id"] for b in buttons if b["id"] != submit.element_id)
    replayer.start("synth-fields", seed)
    out = replayer.act(web.Click(other))
    assert out.done and out.reward == -1.0 and out.info["reason"].startswith("clicked ")
    # A field the task never named must stay empty.
    for seed2 in [seed, *range(20, 40)]:
        found = search(replayer, "synth-fields", seed2, config=SearchConfig())
        obs = replayer.start("synth-fields", seed2)
        typed = {a.element_id for a in found.actions if isinstance(a, web.TypeString)}
        spare = [e["id"] for e in _elements(obs, "input") if e["id"] not in typed]
        if spare:
            break
    assert spare, "no page with a field the task does not name in 21 seeds"
    replayer.start("synth-fields", seed2)
    outs = [replayer.act(a) for a in [web.TypeString(spare[0], "extra"), *found.actions]]
    assert outs[-1].done and outs[-1].reward == -1.0
