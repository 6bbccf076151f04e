"""AndroidDevice on a fake ``uiautomator2.Device`` serving recorded screens: the real driver code
runs; the exact uiautomator2 calls of every action are asserted."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from collabui.actions import Unknown, mobile
from collabui.devices import AndroidDevice, PhoneConnectionError, check_device, make_env
from collabui.devices.android import gesture_path
from collabui.devices.phones import PhoneInfo, list_phones
from collabui.devices.ui_elements import parse_lines
from collabui.errors import ConfigError, DeviceClosedError, DeviceError

FIXTURES = Path(__file__).parent / "fixtures"
USER_IME = "com.google.android.inputmethod.latin/com.android.inputmethod.latin.LatinIME"
ADB_IME = "com.github.uiautomator/.AdbKeyboard"
LAUNCHER_OUT = ("3 activities found:\n  com.android.settings/.Settings\n"
                "  com.android.chrome/com.google.android.apps.chrome.Main\n"
                "  net.gsantner.markor/.activity.MainActivity\n")
INSTALLED = ["com.android.settings", "com.android.providers.settings", "com.android.chrome",
             "net.gsantner.markor", "com.example.shop"]
#: What `cmd package resolve-activity ... HOME` prints (the fake's home screen is "launcher").
HOME_OUT = "priority=0 preferredOrder=0 match=0x108000 specificIndex=-1 isDefault=true\npkg.launcher/.Main\n"
READS = {"dump_hierarchy", "app_current", "current_ime", "app_list", "shell_query", "shell_home"}


class FakeU2:
    """Stands in for ``uiautomator2.Device``: serves fixture screens, records every call, moves
    to another screen when a recorded call matches a scripted transition."""

    def __init__(self, start: str, transitions: dict[tuple, str] | None = None) -> None:
        self.screen = start
        self.transitions = transitions or {}
        self.calls: list[tuple] = []
        self.ime = USER_IME
        self.failures: list[BaseException] = []  # raised by the next dump_hierarchy calls
        self.changing = False

    def _call(self, *call: Any) -> None:
        self.calls.append(call)
        if call in self.transitions:
            self.screen = self.transitions[call]

    def actions(self) -> list[tuple]:
        return [c for c in self.calls if c[0] not in READS]

    def dump_hierarchy(self) -> str:
        self.calls.append(("dump_hierarchy",))
        if self.failures:
            raise self.failures.pop(0)
        xml = (FIXTURES / f"{self.screen}.xml").read_text(encoding="utf-8")
        if self.changing:  # a screen that never settles (an animation)
            xml = xml.replace("10:42", str(len(self.calls))).replace(
                'text="Settings"', f'text="Settings {len(self.calls)}"')
        return xml

    def app_current(self) -> dict[str, Any]:
        self.calls.append(("app_current",))
        return {"package": f"pkg.{self.screen}", "activity": ".Main"}

    def click(self, x: int, y: int) -> None:
        self._call("click", x, y)

    def double_click(self, x: int, y: int) -> None:
        self._call("double_click", x, y)

    def long_click(self, x: int, y: int, duration: float) -> None:
        self._call("long_click", x, y, duration)

    def swipe(self, fx: int, fy: int, tx: int, ty: int, duration: float) -> None:
        self._call("swipe", fx, fy, tx, ty, duration)

    def press(self, key: str) -> None:
        self._call("press", key)

    def clear_text(self) -> None:
        self.ime = ADB_IME  # uiautomator2 switches to its own keyboard to type
        self._call("clear_text")

    def send_keys(self, text: str) -> None:
        self.ime = ADB_IME
        self._call("send_keys", text)

    def current_ime(self) -> str:
        self.calls.append(("current_ime",))
        return self.ime

    def app_start(self, package: str) -> None:
        self._call("app_start", package)

    def app_list(self) -> list[str]:
        self.calls.append(("app_list",))
        return list(INSTALLED)

    def shell(self, args: list[str]) -> Any:
        if args[:3] == ["cmd", "package", "query-activities"]:
            self.calls.append(("shell_query",))
            return type("ShellResponse", (), {"output": LAUNCHER_OUT, "exit_code": 0})()
        if args[:3] == ["cmd", "package", "resolve-activity"]:
            self.calls.append(("shell_home",))
            return type("ShellResponse", (), {"output": HOME_OUT, "exit_code": 0})()
        self._call("shell", *args)
        if args[:2] == ["ime", "set"]:
            self.ime = args[2]
        return type("ShellResponse", (), {"output": "", "exit_code": 0})()


def make(fake: FakeU2, **config: Any) -> tuple[AndroidDevice, list[str | None]]:
    serials: list[str | None] = []

    def connect(serial: str | None) -> FakeU2:
        serials.append(serial)
        return fake

    config = {"settle_poll_s": 0, "wait_s": 0.05, **config}
    return AndroidDevice("emulator-5554", connect=connect, **config), serials


def test_reset_observes_the_settled_screen():
    fake = FakeU2("settings_list", {("press", "home"): "launcher"})
    device, serials = make(fake, task="Open Chrome")
    observation = device.reset(seed=3)
    assert serials == ["emulator-5554"] and fake.actions() == [("press", "home")]
    assert observation.text.splitlines()[9] == ('9: TextView "Chrome" (clickable, long-clickable) '
                                                '[568,1950][784,2200]')
    assert observation.task == "Open Chrome" and observation.url == "pkg.launcher"
    assert observation.extra["settled"] and observation.extra["screen_size"] == [1080, 2400]
    assert observation.extra["seed"] == 3 and not observation.extra["keyboard"]
    assert fake.calls.count(("dump_hierarchy",)) == 2  # two equal dumps: settled
    # The structure beside the text: one record per line, saying what the line says.
    assert observation.extra["ui_elements"] == parse_lines(observation.text)


@pytest.mark.parametrize(("action", "expected"), [
    (mobile.Tap(3), [("click", 540, 545)]),
    (mobile.DoubleTap(3), [("double_click", 540, 545)]),
    (mobile.LongPress(3), [("long_click", 540, 545, 1.0)]),
    (mobile.Scroll("down"), [("swipe", 540, 1800, 540, 600, 0.5)]),
    (mobile.Scroll("up"), [("swipe", 540, 600, 540, 1800, 0.5)]),
    (mobile.Scroll("right"), [("swipe", 810, 1200, 270, 1200, 0.5)]),
    (mobile.Scroll("down", 0), [("swipe", 540, 1785, 540, 683, 0.5)]),
    (mobile.Swipe("left"), [("swipe", 810, 1200, 270, 1200, 0.15)]),
    (mobile.Swipe("up"), [("swipe", 540, 1800, 540, 600, 0.15)]),
    (mobile.Swipe("down", 0), [("swipe", 540, 683, 540, 1785, 0.15)]),
    (mobile.NavigateHome(), [("press", "home")]),
    (mobile.NavigateBack(), [("press", "back")]),
    (mobile.KeyboardEnter(), [("press", "enter")]),
    (mobile.OpenApp("Settings"), [("app_start", "com.android.settings")]),
    (mobile.OpenApp("markor"), [("app_start", "net.gsantner.markor")]),
    (mobile.OpenApp("com.android.chrome"), [("app_start", "com.android.chrome")]),
    (mobile.Wait(), []),
])
def test_every_action_makes_exactly_these_calls(action, expected):
    fake = FakeU2("settings_list")
    device, _ = make(fake, home_on_reset=False)
    device.reset()
    outcome = device.act(action)
    assert outcome.observation.last_action_error is None
    assert fake.actions() == expected and not outcome.done


def test_input_text_focuses_clears_types_and_restores_the_keyboard():
    fake = FakeU2("form", {("click", 540, 480): "form_email_focused"})
    device, _ = make(fake, home_on_reset=False)
    device.reset()
    outcome = device.act(mobile.InputText("Zoë ada@example.com", 2))
    assert outcome.observation.last_action_error is None
    assert fake.actions() == [("click", 540, 480), ("clear_text",),
                              ("send_keys", "Zoë ada@example.com"), ("shell", "ime", "set", USER_IME)]
    assert fake.ime == USER_IME and "masked_action" not in outcome.info


def test_password_typing_is_masked():
    fake = FakeU2("form", {("click", 540, 680): "form_filled"})
    device, _ = make(fake, home_on_reset=False)
    device.reset()
    outcome = device.act(mobile.InputText("hunter2", 3))
    assert ("send_keys", "hunter2") in fake.actions()
    assert outcome.info["masked_action"] == {"action": "input_text", "text": "***", "index": 3}
    seen = repr(outcome.info) + repr(outcome.observation.to_dict())
    assert "hunter2" not in seen and 'EditText "***"' in outcome.observation.text


def test_end_actions_finish_the_episode():
    fake = FakeU2("launcher")
    device, _ = make(fake, home_on_reset=False)
    device.reset()
    outcome = device.act(mobile.Answer("It is 14°C"))
    assert outcome.done and outcome.reward == 0.0 and outcome.info["answer"] == "It is 14°C"
    again = device.act(mobile.Tap(3))
    assert again.done and "episode is over" in again.observation.last_action_error
    device.reset()
    outcome = device.act(mobile.Status("infeasible"))
    assert outcome.done and outcome.info["goal_status"] == "infeasible" and fake.actions() == []


def test_recoverable_failures_come_back_in_the_observation():
    fake = FakeU2("form")
    device, _ = make(fake, home_on_reset=False, app_allowlist=["Settings", "pkg.form"])
    device.reset()
    cases = [(mobile.Tap(40), "no element 40; this screen lists elements 0 to 6"),
             (mobile.InputText("x", 4), "not a text field"),
             (mobile.OpenApp("Chrome"), "not allowed on this phone; allowed apps: Settings"),
             (mobile.OpenApp("Nonexistent Thing"), "no installed app matches"),
             (Unknown(raw="?", reason="no JSON found"), "no JSON found")]
    for action, message in cases:
        outcome = device.act(action)
        assert message in (outcome.observation.last_action_error or ""), action
        assert not outcome.done
    assert [c for c in fake.actions() if c[0] != "click"] == []  # only the focusing tap ran
    assert device.act(mobile.OpenApp("com.android.settings")).observation.last_action_error is None


#: Tapping element 3 of settings_list (a link, an intent) brings the "webview" app to front.
_TAP = ("click", 540, 545)


@pytest.mark.parametrize(("ways_back", "undone_by", "calls"), [
    ({("press", "back"): "settings_list"}, "press back", [_TAP, ("press", "back")]),
    ({("app_start", "pkg.settings_list"): "settings_list"}, "relaunch pkg.settings_list",
     [_TAP, ("press", "back"), ("app_start", "pkg.settings_list")]),
    ({("press", "home"): "launcher"}, "press home",
     [_TAP, ("press", "back"), ("app_start", "pkg.settings_list"), ("press", "home")]),
])
def test_an_app_not_allowed_brought_to_front_is_left_and_reported(ways_back, undone_by, calls):
    """After any action the app in front is checked: Back, then the last allowed app
    relaunched, then Home, until an allowed one (or the home screen) is in front."""
    fake = FakeU2("settings_list", {_TAP: "webview", **ways_back})
    device, _ = make(fake, home_on_reset=False, app_allowlist=["pkg.settings_list"])
    assert device.reset().last_action_error is None
    outcome = device.act(mobile.Tap(3))
    now = "pkg.launcher" if undone_by == "press home" else "pkg.settings_list"
    assert fake.actions() == calls and outcome.observation.url == now
    assert outcome.info["blocked_apps"] == [{"package": "pkg.webview", "undone_by": undone_by, "now": now}]
    assert outcome.observation.last_action_error == (
        f"pkg.webview came to the front but is not an allowed app ({undone_by} brought back {now})")


def test_app_front_checks_need_an_allowlist_and_cover_launches_and_reset():
    fake = FakeU2("settings_list", {_TAP: "webview"})
    device, _ = make(fake, home_on_reset=False)
    device.reset()
    outcome = device.act(mobile.Tap(3))  # no allowlist: any app may come to front
    assert outcome.observation.url == "pkg.webview" and "blocked_apps" not in outcome.info
    # An allowed launch that lands in another app (it handed over at once), and a reset
    # whose app shows one that is not allowed: both are left.
    fake = FakeU2("launcher", {("app_start", "com.android.settings"): "webview", ("press", "back"): "launcher"})
    device, _ = make(fake, home_on_reset=False, app_allowlist=["Settings"])
    outcome = device.act(mobile.OpenApp("Settings"))
    assert outcome.info["blocked_apps"][0]["package"] == "pkg.webview" and outcome.observation.url == "pkg.launcher"
    observation = device.reset(options={"app": "Settings"})
    assert observation.url == "pkg.launcher" and "pkg.webview came to the front" in observation.last_action_error
    fake = FakeU2("webview")  # nothing leaves it: said so, never a loop
    device, _ = make(fake, home_on_reset=False, app_allowlist=["Settings"])
    observation = device.reset()
    assert observation.last_action_error.endswith("(Back, relaunching and Home did not leave it)")
    assert fake.actions() == [("press", "back"), ("press", "home")]


def test_the_team_reads_a_left_app_as_blocked_in_its_history(tmp_path):
    from collabui import CollabAgentTeam
    from collabui.models.fake import ScriptedChatModel
    from collabui.trace import read_trace

    fake = FakeU2("settings_list", {_TAP: "webview", ("press", "back"): "settings_list"})
    device, _ = make(fake, home_on_reset=False, app_allowlist=["pkg.settings_list"], task="Read it")
    model = ScriptedChatModel(['Action: {"action": "click", "index": 3}', 'Action: {"action": "navigate_home"}'])
    team = CollabAgentTeam(model, n_agents=1, rounds=1, max_steps=2, action_space="mobile")
    result = team.run(None, device, trace=tmp_path)
    assert "Previous actions: 1. click(3) [blocked: app not allowed]" in str(model.requests[1].messages[-1]["content"])
    assert read_trace(result.trace_path).steps[0]["info"]["blocked_apps"][0]["package"] == "pkg.webview"


def test_element_gone_since_the_last_observation_is_not_tapped():
    fake = FakeU2("settings_list")
    device, _ = make(fake, home_on_reset=False)
    device.reset()
    fake.screen = "dialog"  # the screen changed by itself (a notification, a dialog)
    outcome = device.act(mobile.Tap(5))
    assert "is gone: the screen changed" in outcome.observation.last_action_error
    assert fake.actions() == []
    assert "Delete" in outcome.observation.text  # the new screen is shown


def test_keyboard_screen_and_screenshots():
    class Image:
        def save(self, buffer: Any, format: str) -> None:
            buffer.write(b"\x89PNG" + format.encode())

    fake = FakeU2("keyboard")
    fake.screenshot = Image  # type: ignore[attr-defined]
    device, _ = make(fake, home_on_reset=False, screenshots=True)
    observation = device.reset()
    assert observation.extra["keyboard"] and observation.screenshot == b"\x89PNGPNG"
    assert '"q"' not in observation.text and "screenshot" not in observation.to_dict()


def test_settling_gives_up_after_the_timeout():
    fake = FakeU2("launcher")
    fake.changing = True
    device, _ = make(fake, home_on_reset=False, show_system_ui=True, settle_timeout_s=0.05)
    observation = device.reset()
    assert observation.extra["settled"] is False and fake.calls.count(("dump_hierarchy",)) >= 2


def test_reconnects_once_when_adb_drops_then_raises_a_typed_error():
    fake = FakeU2("launcher")
    device, serials = make(fake, home_on_reset=False)
    fake.failures = [ConnectionResetError("adb connection reset")]
    assert "Chrome" in device.reset().text and serials == ["emulator-5554"] * 2
    fake.failures = [ConnectionResetError("gone"), ConnectionResetError("still gone")]
    with pytest.raises(PhoneConnectionError, match="reconnecting failed.*adb connect"):
        device.observe()
    fake.failures = [RuntimeError("UiAutomation confused")]
    with pytest.raises(DeviceError, match="phone operation 'dump_hierarchy' failed"):
        device.observe()


def test_a_reconnect_is_tried_once_and_its_own_failure_is_raised_as_it_is():
    """The retry after a drop is one more try, not more: a connect that fails then, or a
    call that fails then for another reason, is the error raised."""
    fake = FakeU2("launcher")
    serials: list[str | None] = []

    def connect(serial):
        serials.append(serial)
        if len(serials) == 2:
            raise PhoneConnectionError("cannot connect to phone emulator-5554: offline")
        return fake

    device = AndroidDevice("emulator-5554", connect=connect, home_on_reset=False, settle_poll_s=0)
    fake.failures = [ConnectionResetError("adb connection reset")]
    with pytest.raises(PhoneConnectionError, match="cannot connect to phone emulator-5554: offline"):
        device.observe()
    assert len(serials) == 2 and fake.calls.count(("dump_hierarchy",)) == 1
    fake.failures = [ConnectionResetError("gone"), RuntimeError("UiAutomation confused")]
    with pytest.raises(DeviceError, match="phone operation 'dump_hierarchy' failed: UiAutomation") as info:
        device.observe()
    assert not isinstance(info.value, PhoneConnectionError) and len(serials) == 4


def test_android_device_passes_check_device():
    device, _ = make(FakeU2("settings_list"), home_on_reset=False)
    check_device(device, probe_action=mobile.Tap(3))
    with pytest.raises(DeviceClosedError):
        device.observe()


def test_make_env_and_config_errors(monkeypatch):
    monkeypatch.setenv("ANDROID_SERIAL", "R5CT1234")
    device = make_env("android", connect=lambda s: FakeU2("launcher"), app_allowlist=["Chrome"],
                      task="t")
    assert isinstance(device, AndroidDevice) and device.serial == "R5CT1234"
    assert device.config.app_allowlist == ("Chrome",)
    with pytest.raises(ConfigError, match="unknown android option"):
        make_env("android", serail="x")
    with pytest.raises(ConfigError, match="app_allowlist"):
        AndroidDevice(app_allowlist="Chrome")
    with pytest.raises(ConfigError, match="settle_timeout_s"):
        AndroidDevice(settle_timeout_s=0)


def test_gesture_path_convention():
    box = (0, 0, 1000, 2000)
    assert gesture_path("down", box, content=True) == (500, 1500, 500, 500)  # finger moves up
    assert gesture_path("down", box, content=False) == (500, 500, 500, 1500)


def test_list_phones_reads_adb_and_fails_cleanly():
    class Info:
        def __init__(self, serial: str, state: str, tags: dict[str, str]) -> None:
            self.serial, self.state, self.tags = serial, state, tags

    class Client:
        def list(self, extended: bool = False) -> list[Info]:
            assert extended
            return [Info("emulator-5554", "device", {"model": "sdk_gphone64_x86_64"}),
                    Info("192.168.1.7:5555", "unauthorized", {})]

    phones = list_phones(client=Client())
    assert phones == [PhoneInfo("192.168.1.7:5555", "", "unauthorized"),
                      PhoneInfo("emulator-5554", "sdk gphone64 x86 64", "device")]
    assert [p.ready for p in phones] == [False, True]

    class Broken:
        def list(self, extended: bool = False) -> list[Info]:
            raise ConnectionRefusedError("connect to adb server failed")

    with pytest.raises(DeviceError, match="adb is not available.*adb devices"):
        list_phones(client=Broken())


@pytest.mark.device
def test_real_phone_when_attached():
    serial = os.environ.get("ANDROID_SERIAL")
    if not serial:
        pytest.skip("ANDROID_SERIAL is not set: no phone attached to run the real-device test")
    device = AndroidDevice(serial)
    try:
        observation = device.reset()
        assert observation.text.splitlines()[0].startswith("0: ") and observation.url
        outcome = device.act(mobile.Wait())
        assert outcome.observation.last_action_error is None
    finally:
        device.close()
