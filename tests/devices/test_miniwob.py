"""MiniWoB++ through BrowserDevice: a scripted policy that reads only the Observation solves
five tasks; rewards, episode ends, the registry and async use."""

from __future__ import annotations

import asyncio
import re
import struct

import pytest

from collabui.actions import Action, Unknown, web
from collabui.devices import MiniWoBEnv, Observation, check_device, list_envs, make_env
from collabui.devices.simplify import parse_elements
from collabui.errors import ConfigError, EnvNotFoundError
from collabui.training.oracles import miniwob_gold_action

TASKS = ["click-button", "click-link", "enter-text", "click-checkboxes", "focus-text"]


@pytest.fixture(scope="module")
def env():
    """One browser for the whole module; tests switch task with options={"task_name": ...}."""
    device = make_env("miniwob/click-button")
    yield device
    device.close()


def scripted_policy(observation: Observation) -> Action:
    """Pick a WEB action from the task text and the simplified HTML only (the library's
    MiniWoB++ oracle, which the training critic ``oracle`` uses too)."""
    action = miniwob_gold_action(observation.task or "", observation.text)
    assert action is not None, f"the oracle does not know task {observation.task!r}"
    return action


def _run_episode(env: MiniWoBEnv, task: str, seed: int):
    observation = env.reset(seed=seed, options={"task_name": task})
    for _ in range(10):
        outcome = env.act(scripted_policy(observation))
        assert outcome.observation.last_action_error is None, outcome.observation.last_action_error
        if outcome.done:
            return outcome
        observation = outcome.observation
    raise AssertionError(f"{task} seed {seed} did not finish in 10 steps")


@pytest.mark.browser
@pytest.mark.parametrize("task", TASKS)
def test_scripted_policy_solves_task(env, task):
    for seed in range(3):
        outcome = _run_episode(env, task, seed)
        assert outcome.reward == 1.0, (task, seed, outcome.info)
        assert outcome.info["raw_reward"] == 1.0
        assert outcome.info["time_scaled_reward"] > 0.9  # the 10-minute timer barely scales


@pytest.mark.browser
def test_observation_shows_task_area_not_banner(env):
    observation = env.reset(seed=0, options={"task_name": "click-button"})
    target = re.fullmatch(r'Click on the "(.+)" button\.', observation.task).group(1)
    assert f"| {target}>" in observation.text
    assert "Click on the" not in observation.text  # the instruction is Observation.task
    assert observation.viewport == "0 / 1.0"
    assert observation.extra["task_name"] == "miniwob/click-button"
    assert observation.extra["done"] is False


@pytest.mark.browser
def test_seed_fixes_the_problem(env):
    first = env.reset(seed=7, options={"task_name": "click-button"})
    env.act(web.Click("A"))
    env.reset(seed=8)
    again = env.reset(seed=7)
    assert (again.task, again.text) == (first.task, first.text)
    # No run-specific server port in what agents read: identical runs get identical prompts.
    assert first.url == "/miniwob/click-button.html"


@pytest.mark.browser
def test_bad_element_id_is_recoverable(env):
    env.reset(seed=0, options={"task_name": "click-button"})
    outcome = env.act(web.Click("ZZ"))
    assert not outcome.done and outcome.reward == 0.0
    assert "no element [ZZ]" in outcome.observation.last_action_error
    unknown = env.act(Unknown(raw="blah", reason="not JSON"))
    assert unknown.observation.last_action_error == "no action was executed: not JSON"


@pytest.mark.browser
def test_wrong_click_fails_and_episode_then_stays_over(env):
    observation = env.reset(seed=0, options={"task_name": "click-button"})
    target = re.fullmatch(r'Click on the "(.+)" button\.', observation.task).group(1)
    wrong = next(e for e in parse_elements(observation.text)
                 if e.tag == "button" and e.full_text != target)
    outcome = env.act(web.Click(wrong.id))
    assert outcome.done and outcome.reward == -1.0 and outcome.info["raw_reward"] == -1.0
    after = env.act(web.Click("A"))
    assert after.done and after.reward == 0.0
    assert "episode is over" in after.observation.last_action_error


@pytest.mark.browser
def test_finish_ends_an_unsolved_episode_with_zero(env):
    env.reset(seed=0, options={"task_name": "enter-text"})
    outcome = env.act(web.Finish("done?"))
    assert outcome.done and outcome.reward == 0.0 and outcome.info["answer"] == "done?"


@pytest.mark.browser
def test_episode_that_times_out_by_itself():
    with MiniWoBEnv("click-button", episode_max_time_s=0.3, screenshots=True) as device:
        observation = device.reset(seed=0)
        png = observation.screenshot
        assert png[:8] == b"\x89PNG\r\n\x1a\n"
        assert struct.unpack(">II", png[16:24]) == (160, 210)  # the task area only
        for _ in range(200):  # poll the page's own timer (no fixed sleep)
            if device.observe().extra["done"]:
                break
        else:
            raise AssertionError("the 0.3 s MiniWoB timer never fired")
        outcome = device.act(web.Click("A"))
        assert outcome.done and outcome.reward == -1.0
        assert outcome.info["reason"] == "timed out"
        assert "already ended (timed out)" in outcome.observation.last_action_error


@pytest.mark.browser
def test_async_twins_do_not_block_the_callers_loop():
    events: list[str] = []

    async def ticker() -> None:
        await asyncio.sleep(0)
        events.append("tick")

    async def main() -> float:
        device = make_env("miniwob/focus-text")
        tick = asyncio.create_task(ticker())
        observation = await device.areset(seed=0)
        events.append("reset done")
        await tick
        outcome = await device.aact(web.Click(parse_elements(observation.text)[0].id))
        again = device.reset(seed=1)  # the sync API also works inside a running loop
        assert again.task == "Focus into the textbox."
        await device.aclose()
        return outcome.reward

    assert asyncio.run(main()) == 1.0
    assert events == ["tick", "reset done"]


@pytest.mark.browser
def test_miniwob_env_passes_check_device():
    check_device(make_env("miniwob/click-button"), probe_action=web.Click("A"))


def test_list_envs_is_sorted_and_complete():
    envs = list_envs()
    assert envs == sorted(envs) and len(envs) > 100
    assert {f"miniwob/{t}" for t in TASKS} <= set(envs)


def test_unknown_env_suggests_close_matches():
    with pytest.raises(EnvNotFoundError, match=r"did you mean 'miniwob/click-button'.*collabui envs"):
        make_env("miniwob/clik-button")
    with pytest.raises(EnvNotFoundError, match="collabui envs"):
        make_env("atari/pong")


def test_bad_miniwob_options_are_config_errors():
    with pytest.raises(ConfigError, match="episode_max_time_s"):
        MiniWoBEnv("click-button", episode_max_time_s=0)
    with pytest.raises(ConfigError, match="unknown browser option"):
        make_env("miniwob/click-button", headles=True)
