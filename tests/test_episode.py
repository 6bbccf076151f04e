"""Episodes end cleanly when the device dies: the error is recorded, the trace stays valid."""

import asyncio
import contextlib
import json
import signal
import subprocess
import sys

import pytest

from collabui import CollabAgentTeam
from collabui.actions.web import Click
from collabui.devices.base import Observation
from collabui.devices.fake import FakeDevice
from collabui.devices.registry import make_env
from collabui.errors import ConfigError, DeviceClosedError
from collabui.models.fake import ScriptedChatModel
from collabui.trace import read_trace

CLICK_B = 'Action: {"action": "click", "element_id": "B"}'


class _DyingDevice(FakeDevice):
    """A fake whose connection drops on the second action."""

    def act(self, action):
        if len(self.actions) >= 1:
            raise DeviceClosedError("the browser died; create a new device")
        return super().act(action)


def test_device_death_ends_episode_with_recorded_error(tmp_path):
    device = _DyingDevice([Observation(text="<button[B]| Next>", task="Keep clicking.")] * 3)
    team = CollabAgentTeam(ScriptedChatModel([CLICK_B], cycle=True), n_agents=2, rounds=2, max_steps=5)
    result = team.run(None, device, trace=tmp_path, episode_id="dies")
    assert not result.success and "DeviceClosedError" in result.error
    assert result.n_steps == 2  # the step whose action failed is recorded too
    trace = read_trace(tmp_path / "dies.jsonl")
    assert trace.complete and "DeviceClosedError" in trace.end["error"]
    assert trace.steps[-1]["error"].startswith("DeviceClosedError")
    assert [s["t"] for s in trace.steps] == [0, 1]


def test_model_failure_is_recorded_then_raised(tmp_path):
    device = FakeDevice([Observation(text="<button[B]| Next>", task="Click.")])
    team = CollabAgentTeam(ScriptedChatModel([CLICK_B] * 2), n_agents=2, rounds=2, max_steps=3)
    with pytest.raises(Exception, match="ran out of answers"):
        team.run(None, device, trace=tmp_path, episode_id="model-dies")
    trace = read_trace(tmp_path / "model-dies.jsonl")
    assert trace.complete and "ran out of answers" in trace.end["error"]


def test_async_episode_and_space_mismatch():
    device = FakeDevice([Observation(text="<button[B]| OK>", task="Click OK.")], success_when=lambda a: a == Click("B"))
    team = CollabAgentTeam(ScriptedChatModel([CLICK_B], cycle=True), n_agents=2, rounds=1)
    result = asyncio.run(team.arun(None, device))
    assert result.success and result.n_steps == 1
    mobile_team = CollabAgentTeam(ScriptedChatModel([CLICK_B], cycle=True), n_agents=2, rounds=1, action_space="mobile")
    with pytest.raises(ConfigError, match="action_space='web'"):
        mobile_team.run(None, device)


@pytest.mark.browser
def test_real_browser_crash_mid_episode_keeps_trace(tmp_path):
    async def crash_tab(env):
        from playwright.async_api import Error as PlaywrightError

        with contextlib.suppress(PlaywrightError):  # the crash aborts the navigation
            await env._current_page().goto("chrome://crash")

    def answer(request):
        # jump_to refuses chrome: URLs (the navigation guard), so the tab is crashed directly
        # while the team deliberates.
        if len(model.requests) == 2:
            env._call(crash_tab, env)
        return CLICK_B

    model = ScriptedChatModel(answer)
    team = CollabAgentTeam(model, n_agents=2, rounds=1, max_steps=4)
    with make_env("miniwob/click-button") as env:
        result = team.run(None, env, seed=0, trace=tmp_path, episode_id="crash")
    assert result.error and "DeviceClosedError" in result.error
    trace = read_trace(tmp_path / "crash.jsonl")
    assert trace.complete and trace.steps and trace.end["error"] == result.error


class _PasswordDevice(FakeDevice):
    """Reports the typed text masked, as devices do for password fields."""

    def act(self, action):
        outcome = super().act(action)
        masked = {**action.to_dict(), "content": "***"}
        return type(outcome)(outcome.observation, outcome.reward, outcome.done, {**outcome.info, "masked_action": masked})


def test_password_typed_is_masked_in_trace_and_history(tmp_path):
    typing = 'Action: {"action": "type_string", "element_id": "P", "content": "hunter2"}'
    device = _PasswordDevice([Observation(text="<input[P]| password; ***>", task="Log in.")] * 3)
    team = CollabAgentTeam(ScriptedChatModel([typing], cycle=True), n_agents=1, rounds=1, max_steps=2)
    team.run("Log in.", device, trace=tmp_path, episode_id="pw")
    trace = read_trace(tmp_path / "pw.jsonl")
    assert trace.steps[0]["executed"]["content"] == "***"
    assert trace.steps[1]["history"] == ["type_string('P', '***', False)"]
    assert "hunter2" not in trace.steps[1]["proposals"][0][0]["messages"][-1]["content"].split("Previous actions:")[1].split("\n")[0]


@pytest.mark.browser
def test_screenshots_are_side_files(tmp_path):
    click = 'Action: {"action": "click", "element_id": "Z"}'
    team = CollabAgentTeam(ScriptedChatModel([click], cycle=True), n_agents=1, rounds=1, max_steps=1)
    with make_env("miniwob/click-button", screenshots=True) as env:
        team.run(None, env, seed=0, trace=tmp_path, episode_id="shots")
    trace = read_trace(tmp_path / "shots.jsonl")
    ref = trace.steps[0]["screenshot"]
    assert ref and (tmp_path / ref).read_bytes().startswith(b"\x89PNG")


# --------------------------------------------------------------------------- the header comes first


class _ResetFails(FakeDevice):
    def reset(self, *, seed=None, options=None):
        raise DeviceClosedError("the browser did not start")


class _PeeksAtReset(FakeDevice):
    """Reads the trace during reset: what a process killed at that moment would leave."""

    def __init__(self, path, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.path, self.seen = path, None

    def reset(self, *, seed=None, options=None):
        self.seen = read_trace(self.path)
        return super().reset(seed=seed, options=options)


def test_trace_of_a_failed_reset_is_readable_and_says_why(tmp_path):
    team = CollabAgentTeam(ScriptedChatModel([CLICK_B], cycle=True), n_agents=1, rounds=1)
    result = team.run("Click OK.", _ResetFails(["<button[B]| OK>"]), trace=tmp_path, episode_id="r")
    assert result.error.startswith("DeviceClosedError") and result.n_steps == 0
    assert result.trace_path == str(tmp_path / "r.jsonl")
    trace = read_trace(tmp_path / "r.jsonl")
    assert trace.header["task"] == "Click OK." and trace.steps == []
    assert trace.complete and "did not start" in trace.end["error"]


def test_header_is_on_disk_during_reset_and_completed_with_the_env_task(tmp_path):
    screens = [Observation(text="<button[B]| OK>", task="Click OK.")]
    device = _PeeksAtReset(tmp_path / "p.jsonl", screens, success_when=lambda a: a == Click("B"))
    team = CollabAgentTeam(ScriptedChatModel([CLICK_B], cycle=True), n_agents=1, rounds=1)
    result = team.run(None, device, seed=7, trace=tmp_path, episode_id="p")
    assert result.success
    # During the reset the task was not known yet: the header has it empty, and the rest.
    assert device.seen.header["task"] == "" and device.seen.header["seed"] == 7
    assert device.seen.steps == [] and not device.seen.complete
    trace = read_trace(tmp_path / "p.jsonl")
    assert trace.header["task"] == "Click OK." and trace.header["created"] == device.seen.header["created"]
    records = [json.loads(line) for line in (tmp_path / "p.jsonl").read_text().splitlines()]
    assert [r["type"] for r in records] == ["episode", "step", "end"]


_KILLED_IN_RESET = """
import os, signal, sys
from collabui import CollabAgentTeam
from collabui.devices.fake import FakeDevice
from collabui.models.fake import ScriptedChatModel

class Dies(FakeDevice):
    def reset(self, *, seed=None, options=None):
        os.kill(os.getpid(), signal.SIGKILL)  # as the OOM killer or a `kill -9` would

team = CollabAgentTeam(ScriptedChatModel(["finish()"], cycle=True), n_agents=1, rounds=1)
team.run("Click OK.", Dies(["<button[B]| OK>"]), trace=sys.argv[1], episode_id="killed")
"""


def test_kill_9_during_reset_leaves_a_readable_trace(tmp_path):
    proc = subprocess.run([sys.executable, "-c", _KILLED_IN_RESET, str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    trace = read_trace(tmp_path / "killed.jsonl")
    assert trace.header["task"] == "Click OK." and trace.steps == [] and not trace.complete


def test_surrogates_and_huge_answers_do_not_cost_the_step(tmp_path):
    answers = ['Thought: \ud800\nAction: {"action": "click", "element_id": "B"}',
               "Action: " + "click(" * 20_000]
    device = FakeDevice([Observation(text="<button[B]| OK>", task="Click OK.")],
                        success_when=lambda a: a == Click("B"))
    team = CollabAgentTeam(ScriptedChatModel(answers, cycle=True), n_agents=2, rounds=1)
    assert team.run(None, device, trace=tmp_path, episode_id="s").success
    (first,), (second,) = read_trace(tmp_path / "s.jsonl").steps[0]["proposals"]
    assert first["thought"] == "\ufffd" and first["action"] == {"action": "click", "element_id": "B"}
    assert len(second["raw"]) == 8192 and second["raw_truncated"] == len(answers[1])
