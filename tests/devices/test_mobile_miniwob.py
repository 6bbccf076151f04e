"""Mobile MiniWoB++: phone emulation, the indexed element list, the MOBILE action space, rewards."""

from __future__ import annotations

import re

import pytest

from collabui.actions import MOBILE, Action, Unknown, mobile
from collabui.devices import MiniWoBMobileEnv, Observation, check_device, list_envs, make_env
from collabui.devices.ui_elements import parse_lines
from collabui.errors import ConfigError

TASKS = ["click-button", "click-link", "enter-text", "focus-text", "click-checkboxes"]


@pytest.fixture(scope="module")
def env():
    """One browser for the module; tests switch task with options={"task_name": ...}."""
    device = make_env("miniwob-mobile/click-button")
    yield device
    device.close()


def _find(lines: list[dict], label: str, types: tuple[str, ...] = ()) -> int:
    for line in lines:
        if line["label"] == label and "clickable" in line["flags"] and \
                (not types or line["type"] in types):
            return int(line["index"])
    raise AssertionError(f"no clickable element {label!r} in {lines}")


def scripted_policy(observation: Observation) -> Action:
    """A MOBILE action from the task text and the indexed element lines only."""
    task, lines = observation.task or "", parse_lines(observation.text)
    if m := re.fullmatch(r'Click on the "(.+)" button\.', task):
        return mobile.Tap(_find(lines, m.group(1), ("Button",)))
    if m := re.fullmatch(r'Click on the link "(.+)"\.', task):
        return mobile.Tap(_find(lines, m.group(1)))
    if m := re.fullmatch(r'Enter "(.+)" into the text field and press Submit\.', task):
        field = next(line for line in lines if line["type"] == "EditText")
        if field["label"] != m.group(1):
            return mobile.InputText(m.group(1), int(field["index"]))
        return mobile.Tap(_find(lines, "Submit", ("Button",)))
    if m := re.fullmatch(r"Select (.*) and click Submit\.", task):
        wanted = set() if m.group(1) == "nothing" else set(m.group(1).split(", "))
        for line in lines:
            if line["type"] == "CheckBox" and (line["label"] in wanted) != ("checked" in line["flags"]):
                return mobile.Tap(int(line["index"]))
        return mobile.Tap(_find(lines, "Submit", ("Button",)))
    if task == "Focus into the textbox.":
        return mobile.Tap(next(int(x["index"]) for x in lines if x["type"] == "EditText"))
    raise AssertionError(f"the scripted policy does not know task {task!r}")


@pytest.mark.browser
@pytest.mark.parametrize("task", TASKS)
def test_scripted_policy_solves_mobile_task(env, task):
    for seed in range(3):
        observation = env.reset(seed=seed, options={"task_name": task})
        for _ in range(10):
            action = scripted_policy(observation)
            assert action in MOBILE
            outcome = env.act(action)
            assert outcome.observation.last_action_error is None, outcome.observation.last_action_error
            if outcome.done:
                break
            observation = outcome.observation
        assert outcome.done and outcome.reward == 1.0, (task, seed, outcome.info)
        assert outcome.info["raw_reward"] == 1.0


@pytest.mark.browser
def test_phone_profile_and_observation_format(env):
    observation = env.reset(seed=0, options={"task_name": "click-button"})
    page = env._current_page()
    assert page.viewport_size == {"width": 412, "height": 839}
    assert env._call(_probe_phone, page) == [True, 2.625]
    lines = observation.text.splitlines()
    assert all(re.fullmatch(r'\d+: \w+( ".*")?( \(.*\))? \[\d+,\d+\]\[\d+,\d+\]', ln) for ln in lines)
    assert "okay" not in (observation.task or "") or any('Button "' in ln for ln in lines)
    assert "#query" not in observation.text and "Click on" not in observation.text
    assert observation.extra["task_name"] == "miniwob-mobile/click-button"
    assert observation.extra["ui_elements"] == parse_lines(observation.text)


@pytest.mark.browser
def test_password_fields_are_those_of_the_screen_observed(env):
    """The first screen of a password task names its own password fields (they were read from
    the previous snapshot once: none on a fresh device)."""
    observation = env.reset(seed=0, options={"task_name": "enter-password"})
    shown = [r["index"] for r in parse_lines(observation.text) if "password" in r["flags"]]
    assert len(shown) == 2 and observation.extra["password_fields"] == shown
    assert env.describe()["device"] == "Pixel 7"


async def _probe_phone(page):
    return await page.evaluate("() => ['ontouchstart' in window, window.devicePixelRatio]")


@pytest.mark.browser
def test_recoverable_errors_and_unsupported_actions(env):
    observation = env.reset(seed=1, options={"task_name": "click-button"})
    count = len(observation.text.splitlines())
    cases = [(mobile.Tap(99), f"no element 99; this screen lists elements 0 to {count - 1}"),
             (mobile.NavigateHome(), "no home screen"),
             (mobile.OpenApp("Settings"), "no apps"),
             (mobile.Scroll("up"), "already at its up edge"),
             (Unknown(raw="??", reason="bad json"), "bad json")]
    for action, message in cases:
        outcome = env.act(action)
        assert message in (outcome.observation.last_action_error or ""), action
        assert not outcome.done
    button = next(x for x in parse_lines(observation.text) if x["type"] == "Button")
    outcome = env.act(mobile.InputText("x", int(button["index"])))
    assert "not a text field" in outcome.observation.last_action_error


@pytest.mark.browser
def test_password_is_masked_and_status_ends_the_episode(env):
    observation = env.reset(seed=0, options={"task_name": "enter-password"})
    fields = [x for x in parse_lines(observation.text) if x["type"] == "EditText"]
    secret = re.search(r'"(.+?)"', observation.task).group(1)
    outcome = env.act(mobile.InputText(secret, int(fields[0]["index"])))
    assert outcome.info["masked_action"] == {"action": "input_text", "text": "***",
                                             "index": int(fields[0]["index"])}
    assert secret not in repr(outcome.info) and secret not in outcome.observation.text
    assert '"***"' in outcome.observation.text
    outcome = env.act(mobile.Status("complete"))
    assert outcome.done and outcome.reward == 0.0 and outcome.info["goal_status"] == "complete"


@pytest.mark.browser
def test_mobile_env_passes_check_device():
    check_device(make_env("miniwob-mobile/click-button"), probe_action=mobile.Tap(0))


def test_registry_names_and_bad_options():
    envs = list_envs()
    assert {f"miniwob-mobile/{t}" for t in TASKS} <= set(envs)
    with make_env("miniwob-mobile/click-button") as device:
        assert isinstance(device, MiniWoBMobileEnv)
    with pytest.raises(ConfigError, match="long_press_s"):
        MiniWoBMobileEnv("click-button", long_press_s=0)
    with pytest.raises(ConfigError, match="did you mean"):
        make_env("miniwob-mobile/clik-button")
