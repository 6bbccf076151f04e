"""FakeDevice behaviour and check_device's verdicts (no browser needed)."""

from __future__ import annotations

import asyncio

import pytest

from collabui.actions import MOBILE, Unknown, mobile, web
from collabui.devices import FakeDevice, Observation, StepOutcome, check_device
from collabui.devices.base import Device
from collabui.errors import ActionError, ConfigError, DeviceClosedError, DeviceError


def _device(**kwargs) -> FakeDevice:
    return FakeDevice(["<button[A]| OK>", Observation(text="<div| page 2>"), "<div| page 3>"],
                      task="Click OK", **kwargs)


def test_screens_advance_and_actions_are_recorded():
    device = _device()
    first = device.reset(seed=3)
    assert (first.text, first.task) == ("<button[A]| OK>", "Click OK")
    second = device.act(web.Click("A"))
    assert second.observation.text == "<div| page 2>" and second.observation.task == "Click OK"
    assert (second.reward, second.done, second.info) == (0.0, False, {"step": 1, "screen": 1})
    device.act(web.ScrollPage("down"))
    last = device.act(web.ScrollPage("down"))
    assert last.observation.text == "<div| page 3>"  # the last screen repeats
    assert device.observe().text == "<div| page 3>"
    assert device.actions == [web.Click("A"), web.ScrollPage("down"), web.ScrollPage("down")]
    device.reset()
    assert device.actions == [] and device.seeds == [3, None]


def test_success_and_failure_predicates():
    device = _device(success_when=lambda a: a == web.Click("A"),
                     failure_when=lambda a: isinstance(a, web.Click))
    device.reset()
    assert device.act(web.Click("A")) == StepOutcome(device.screens[0], 1.0, True,
                                                     {"step": 1, "screen": 0})
    over = device.act(web.Click("A"))
    assert over.done and over.reward == 0.0 and "episode is over" in over.observation.last_action_error
    device.reset()
    failed = device.act(web.Click("B"))
    assert (failed.reward, failed.done) == (-1.0, True)


def test_unknown_and_foreign_actions_do_not_advance():
    device = _device()
    device.reset()
    unknown = device.act(Unknown(raw="x", reason="bad JSON"))
    assert unknown.observation.last_action_error == "no action was executed: bad JSON"
    foreign = device.act(mobile.NavigateHome())
    assert foreign.observation.last_action_error == "'navigate_home' is not a web action"
    assert device.observe().text == "<button[A]| OK>" and not foreign.done


def test_terminal_actions_and_step_cap():
    device = _device(max_steps=2)
    device.reset()
    assert device.act(web.Finish("yes")).done
    device.reset()
    device.act(web.Click("A"))
    capped = device.act(web.Click("A"))
    assert capped.done and capped.info["truncated"] is True


def test_mobile_action_space_and_async_twins():
    device = FakeDevice(["0: Button 'OK'"], action_space=MOBILE)

    async def main() -> StepOutcome:
        await device.areset(seed=0)
        return await device.aact(mobile.Tap(index=0))

    assert asyncio.run(main()).observation.text == "0: Button 'OK'"
    assert device.actions == [mobile.Tap(index=0)]


def test_bad_construction_and_use():
    with pytest.raises(ConfigError, match="non-empty list of screens"):
        FakeDevice([])
    with pytest.raises(ConfigError, match="screen 1 is a int"):
        FakeDevice(["a", 3])
    device = _device()
    with pytest.raises(DeviceError, match="call reset"):
        device.observe()
    device.reset()
    with pytest.raises(ActionError, match="needs an Action"):
        device.act("click A")  # type: ignore[arg-type]
    device.close()
    device.close()
    with pytest.raises(DeviceClosedError):
        device.reset()


def test_fake_device_passes_check_device():
    device = _device()
    check_device(device, probe_action=web.Click("A"))
    assert device.closed


def test_check_device_passes_inside_a_running_loop():
    async def main() -> None:
        check_device(_device())

    asyncio.run(main())


class _RaisesOnUnknown(FakeDevice):
    def act(self, action):
        if isinstance(action, Unknown):
            raise ValueError("cannot parse")
        return super().act(action)


class _SilentOnUnknown(FakeDevice):
    def act(self, action):
        outcome = super().act(action)
        return StepOutcome(Observation(text=outcome.observation.text), 0.0, False)


class _UsableAfterClose(FakeDevice):
    def close(self) -> None:
        pass


class _NoActionSpace(FakeDevice):
    def __init__(self, screens):
        super().__init__(screens)
        self.action_space = "web"


@pytest.mark.parametrize(("device", "prop"), [
    (_RaisesOnUnknown(["a"]), r"act\(Unknown\) does not raise \(it raised ValueError: cannot parse\)"),
    (_SilentOnUnknown(["a"]), r"act\(Unknown\) reports the failure in observation.last_action_error"),
    (_UsableAfterClose(["a"]), r"observe\(\) after close\(\) raises DeviceClosedError"),
    (_NoActionSpace(["a"]), r"device.action_space is an ActionSpace"),
])
def test_check_device_names_the_broken_property(device, prop):
    with pytest.raises(ConfigError, match=r"^check_device: failed: " + prop):
        check_device(device)


def test_check_device_rejects_non_devices():
    with pytest.raises(ConfigError, match="is a collabui.devices.Device"):
        check_device(object())  # type: ignore[arg-type]
    assert issubclass(FakeDevice, Device)
