"""An Android phone as a Device, driven by uiautomator2 (extra ``[android]``).

Observation: the visible on-screen UI elements of ``dump_hierarchy()`` as indexed lines (see
:mod:`collabui.devices.ui_elements` and :mod:`collabui.devices.hierarchy`), the foreground
package in ``Observation.url``, optionally a PNG screenshot.

Actions (the MOBILE space, paper Table 5), addressed by the index of the last observation:

* ``click`` / ``double_tap`` / ``long_press``: at the centre of the element's visible bounds.
  The element is looked up again in a fresh dump first: if it is gone (the screen changed) or
  its centre is outside the screen, nothing is done and the next observation says why.
* ``input_text``: tap the element (focus), then clear the focused field and type. uiautomator2
  types through its own input method (AdbKeyboard); the user's input method is restored after.
* ``scroll``: direction is where the *content* comes from: "down" reveals what is below, so the
  finger moves up (AndroidWorld's convention). ``swipe``: direction is where the *finger* moves
  ("left" flicks to the next page on the right). Both act on the element's bounds, or the screen.
* ``navigate_home`` / ``navigate_back`` / ``keyboard_enter``: key presses.
* ``open_app``: app name -> package from the installed packages; refused when an allowlist is
  configured and the app is not on it.

With an allowlist, the app in front is checked after every action and at reset (a tap can fire
an intent or a deep link into another app, an allowed app can hand over to one): a package that
is neither allowed, the home screen nor a system one (``SYSTEM_PACKAGES``) is left by Back, then
by relaunching the last allowed app, then by Home; ``info["blocked_apps"]`` records it and the
next observation's ``last_action_error`` says so.
* ``wait``: until the screen changes, at most ``wait_s``. ``status`` and ``answer`` end the
  episode (reward 0: a phone has no reward function; ``info`` carries the verdict/answer).

After every action the device waits for the screen to settle: it dumps the hierarchy until two
consecutive dumps list the same elements (or ``settle_timeout_s`` passes). When adb drops, the
device reconnects once and retries the operation (a gesture may then run twice; tenacity); if
the phone is still unreachable it raises :class:`PhoneConnectionError`, and a retried call that
fails for another reason is a :class:`DeviceError`, as on the first try.

Passwords: text typed into a password field is never returned in ``StepOutcome.info`` or the
observation; ``info["masked_action"]`` then holds the action dict with ``text`` = ``"***"``:
traces must record it instead of the executed action.

Screenshots (``screenshots=True``, and ``screenshot()``) have opaque boxes painted over every
element whose text or content description holds what ``hide_on_screen`` named, and over every
password field that holds text, placed by the dump the observation was read from; when such an
element cannot be placed, the observation has no screenshot (``devices._android_screen``).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import threading
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, NoReturn, TypeVar

from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_attempt

from collabui.actions import MOBILE, Action, Unknown
from collabui.devices import _android_apps as apps
from collabui.devices._android_screen import hidden_boxes, masked_png
from collabui.devices._screen import ScreenMask
from collabui.devices.base import Device, Observation, StepOutcome
from collabui.devices.hierarchy import Screen, parse_hierarchy
from collabui.devices.ui_elements import PASSWORD_MASK, UIElement, element_record, render_elements
from collabui.errors import ActionError, ConfigError, DeviceClosedError, DeviceError

__all__ = ["AndroidConfig", "AndroidDevice", "PhoneConnectionError", "Connect", "SYSTEM_PACKAGES", "gesture_path"]

T = TypeVar("T")
#: Builds a connected ``uiautomator2.Device``-like object from a serial (None: the only phone).
Connect = Callable[[str | None], Any]
#: Packages that may be in front whatever the allowlist: the notification shade, the permission
#: dialogs an allowed app asks for, the system's own dialogs (app chooser, "not responding").
SYSTEM_PACKAGES = ("com.android.systemui", "com.android.permissioncontroller",
                   "com.google.android.permissioncontroller", "android")
#: The adb command naming the home screen's package (``pkg/activity`` on its last line).
_HOME_QUERY = ["cmd", "package", "resolve-activity", "--brief", "-a", "android.intent.action.MAIN",
               "-c", "android.intent.category.HOME"]


class PhoneConnectionError(DeviceError):
    """The phone cannot be reached over adb (never connected, or dropped and did not return)."""


@dataclass(frozen=True)
class AndroidConfig:
    """How an AndroidDevice observes and acts.

    Attributes:
        task: task text reported in ``Observation.task`` (``reset(options={"task": ...})``).
        screenshots: attach a PNG screenshot to every observation (and let ``screenshot()``
            take one), with what ``hide_on_screen`` names and password fields painted over.
        settle_timeout_s: longest wait for two equal consecutive hierarchy dumps.
        settle_poll_s: pause between two dumps while settling (not a fixed settle time).
        wait_s: longest time the ``wait`` action waits for the screen to change.
        home_on_reset: press Home at ``reset()`` (AndroidWorld episodes start there).
        app_allowlist: app names or packages ``open_app`` may launch; None allows every app.
        app_aliases: extra app name -> package mappings for ``open_app``.
        show_system_ui: also list status and navigation bar elements.
        restore_ime: switch back to the user's input method after typing.
        verify_elements: re-find the target element in a fresh dump before acting on it.
        long_press_s, scroll_s, swipe_s: gesture durations.
    """

    task: str | None = None
    screenshots: bool = False
    settle_timeout_s: float = 5.0
    settle_poll_s: float = 0.2
    wait_s: float = 2.0
    home_on_reset: bool = True
    app_allowlist: tuple[str, ...] | None = None
    app_aliases: Mapping[str, str] = field(default_factory=dict)
    show_system_ui: bool = False
    restore_ime: bool = True
    verify_elements: bool = True
    long_press_s: float = 1.0
    scroll_s: float = 0.5
    swipe_s: float = 0.15

    def __post_init__(self) -> None:
        for name in ("settle_timeout_s", "wait_s", "long_press_s", "scroll_s", "swipe_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                raise ConfigError(f"{name} must be a positive number of seconds, got {value!r}")
        poll = self.settle_poll_s
        if isinstance(poll, bool) or not isinstance(poll, int | float) or poll < 0:
            raise ConfigError(f"settle_poll_s must be >= 0 seconds, got {poll!r}")
        allow = self.app_allowlist
        if allow is not None:
            if isinstance(allow, str) or not all(isinstance(a, str) and a.strip() for a in allow):
                raise ConfigError("app_allowlist must be a list of app names or packages, e.g. "
                                  "['Settings', 'com.android.chrome']")
            object.__setattr__(self, "app_allowlist", tuple(allow))

    @classmethod
    def build(cls, config: AndroidConfig | None = None, **overrides: Any) -> AndroidConfig:
        """``config`` (or the defaults) with ``overrides`` applied; unknown names raise."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise ConfigError(f"unknown android option(s) {unknown}; valid options: {sorted(known)}")
        return dataclasses.replace(config or cls(), **overrides)


def _default_connect(serial: str | None) -> Any:
    try:
        import uiautomator2 as u2
    except ImportError:
        raise ConfigError("uiautomator2 is not installed; run `pip install "
                          "'collabui-agents[android]'`") from None
    try:
        return u2.connect(serial)
    except Exception as exc:  # noqa: BLE001 - any failure here means "no phone"
        raise PhoneConnectionError(
            f"cannot connect to phone {serial or '(the only attached one)'}: {_first_line(exc)}; "
            "check that `adb devices` lists it as 'device' (USB debugging allowed)") from None


def _is_connection_error(exc: BaseException) -> bool:
    """adb or the uiautomator2 server is unreachable (worth a reconnect), by exception type."""
    if isinstance(exc, OSError):  # ConnectionError, TimeoutError, requests' errors
        return True
    for module, names in (("adbutils.errors", ("AdbError",)),
                          ("uiautomator2.exceptions", ("ConnectError", "HTTPError",
                                                       "UiAutomationError", "AdbShellError"))):
        try:
            mod = __import__(module, fromlist=list(names))
        except ImportError:
            continue
        if any(isinstance(exc, getattr(mod, n)) for n in names if hasattr(mod, n)):
            return True
    return False


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else type(exc).__name__


def gesture_path(direction: str, box: tuple[int, int, int, int], *,
                 content: bool) -> tuple[int, int, int, int]:
    """Start and end points (fx, fy, tx, ty) of a finger gesture inside ``box``.

    With ``content=True`` (scroll) ``direction`` says which content to reveal, so the finger
    moves the opposite way; with ``content=False`` (swipe) the finger moves towards
    ``direction``. The finger travels half the box, centred, staying clear of its edges.
    """
    left, top, right, bottom = box
    cx, cy = (left + right) // 2, (top + bottom) // 2
    near_x, far_x = left + (right - left) // 4, left + 3 * (right - left) // 4
    near_y, far_y = top + (bottom - top) // 4, top + 3 * (bottom - top) // 4
    finger = {"up": "down", "down": "up", "left": "right", "right": "left"}[direction] \
        if content else direction
    return {"up": (cx, far_y, cx, near_y), "down": (cx, near_y, cx, far_y),
            "left": (far_x, cy, near_x, cy), "right": (near_x, cy, far_x, cy)}[finger]


class AndroidDevice(Device):
    """A real Android phone over adb + uiautomator2 (see the module docstring for the contract).

    Args:
        serial: adb serial (``adb devices``); None uses ``$ANDROID_SERIAL``, else the only phone.
        connect: factory ``serial -> uiautomator2.Device``-like object (tests inject a fake);
            defaults to ``uiautomator2.connect``.
        config, overrides: AndroidConfig and field overrides.

    The phone is connected on first use (``reset``/``observe``/``act``), not here.
    """

    action_space = MOBILE

    def __init__(self, serial: str | None = None, *, connect: Connect | None = None,
                 config: AndroidConfig | None = None, **overrides: Any) -> None:
        if serial is not None and (not isinstance(serial, str) or not serial.strip()):
            raise ConfigError(f"serial must be an adb serial like 'emulator-5554', got {serial!r}")
        self.config = AndroidConfig.build(config, **overrides)
        self.serial = serial or os.environ.get("ANDROID_SERIAL") or None
        self._connect = connect or _default_connect
        self._d: Any = None
        self._lock = threading.RLock()
        self._closed = False
        self._screen: Screen | None = None
        self._task = self.config.task
        self._done = False
        self._steps = 0
        self._seed: int | None = None
        self._apps: tuple[list[str], list[str]] | None = None
        #: (the allowlist's packages, home and system packages) once asked (see _front_rules).
        self._front: tuple[set[str], set[str]] | None = None
        self._last_allowed: str | None = None  # the last allowlisted app seen in front
        #: Text no screenshot shows (``hide_on_screen``; see ``devices._android_screen``).
        self._screen_mask = ScreenMask()

    # ---- connection ------------------------------------------------------------------------

    def _device(self) -> Any:
        if self._closed:
            raise DeviceClosedError("AndroidDevice is closed; create a new one")
        if self._d is None:
            self._d = self._connect(self.serial)
        return self._d

    def _u2(self, what: str, call: Callable[[Any], T]) -> T:
        """Run one uiautomator2 call; when adb dropped, reconnect and run it once more."""
        once_more = Retrying(stop=stop_after_attempt(2), retry=retry_if_exception(_is_connection_error),
                             before_sleep=self._forget_connection,
                             retry_error_callback=functools.partial(self._lost, what))
        return once_more(self._u2_once, what, call)

    def _u2_once(self, what: str, call: Callable[[Any], T]) -> T:
        """One try: a lost connection is raised as it is (retried); any other failure of the
        call becomes one DeviceError line."""
        try:
            return call(self._device())
        except (DeviceError, ConfigError):
            raise
        except Exception as exc:  # noqa: BLE001 - classified here
            if _is_connection_error(exc):
                raise
            raise DeviceError(f"phone operation '{what}' failed: {_first_line(exc)}; check "
                              "the phone screen (unlocked, no system dialog) and retry") from None

    def _forget_connection(self, state: RetryCallState) -> None:
        """adb dropped: the next call connects again, and asks again for what it cached."""
        self._d, self._apps, self._front = None, None, None

    def _lost(self, what: str, state: RetryCallState) -> NoReturn:
        exc = state.outcome.exception() if state.outcome is not None else None
        raise PhoneConnectionError(
            f"lost the phone {self.serial or ''} during '{what}' and reconnecting failed: "
            f"{_first_line(exc) if exc else 'no answer'}; check the cable or `adb connect`, then reset()") from None

    # ---- observing -------------------------------------------------------------------------

    def _dump(self) -> Screen:
        xml = self._u2("dump_hierarchy", lambda d: d.dump_hierarchy())
        return parse_hierarchy(xml, show_system_ui=self.config.show_system_ui)

    def _settle(self, timeout: float | None = None) -> tuple[Screen, bool]:
        """Dump until two consecutive dumps list the same elements, or the timeout passes."""
        deadline = time.monotonic() + (self.config.settle_timeout_s if timeout is None else timeout)
        previous = None
        while True:
            screen = self._dump()
            if previous is not None and previous == screen.elements:
                return screen, True
            if time.monotonic() >= deadline:
                return screen, False
            previous = screen.elements
            time.sleep(self.config.settle_poll_s)

    def _observation(self, screen: Screen, settled: bool, error: str | None) -> Observation:
        self._screen = screen
        current = self._foreground(screen)
        shot = self._screenshot(screen, settled) if self.config.screenshots else None
        extra = {"package": current.get("package"), "activity": current.get("activity"),
                 "screen_size": list(screen.size), "keyboard": screen.keyboard is not None,
                 "elements": len(screen.elements), "settled": settled, "serial": self.serial,
                 "seed": self._seed,
                 "password_fields": [i for i, e in enumerate(screen.elements) if e.password],
                 "ui_elements": [element_record(i, e) for i, e in enumerate(screen.elements)]}
        return Observation(text=render_elements(screen.elements), task=self._task,
                           url=current.get("package"), last_action_error=error,
                           screenshot=shot, extra=extra)

    def _foreground(self, screen: Screen) -> dict[str, Any]:
        try:
            current = dict(self._u2("app_current", lambda d: d.app_current()) or {})
        except PhoneConnectionError:
            raise
        except DeviceError:  # no focused app (lock screen, transition): use the hierarchy
            current = {}
        current.setdefault("package", screen.foreground)
        return current

    def _screenshot(self, screen: Screen, settled: bool) -> bytes | None:
        """A PNG of ``screen`` with what it must hide painted over; None when that cannot be
        done (an element to hide has no usable bounds: never an unmasked screenshot)."""
        boxes = hidden_boxes(screen, self._screen_mask)
        if boxes is None:
            return None
        image = self._u2("screenshot", lambda d: d.screenshot())
        if not settled:
            # The screen was still changing: the pixels may already show the next dump's
            # screen, so what that one shows is hidden as well.
            later = hidden_boxes(self._dump(), self._screen_mask)
            if later is None:
                return None
            boxes += later
        return masked_png(image, boxes, screen.size)

    # ---- public API ------------------------------------------------------------------------

    def reset(self, *, seed: int | None = None, options: Mapping[str, Any] | None = None) -> Observation:
        """Start an episode: optionally press Home and open ``options["app"]``; observe.

        Options: ``task`` (text), ``home`` (bool, default ``home_on_reset``), ``app`` (name).
        """
        with self._lock:
            self._device()
            options = dict(options or {})
            self._task = options.get("task", self.config.task)
            self._seed, self._done, self._steps = seed, False, 0
            if options.get("home", self.config.home_on_reset):
                self._u2("press home", lambda d: d.press("home"))
            if options.get("app"):
                error = self._open_app(str(options["app"]))
                if error:
                    raise ConfigError(f"reset option app: {error}")
            return self._observation(*self._keep_to_allowed_apps(*self._settle(), {}))

    def observe(self) -> Observation:
        with self._lock:
            self._device()
            return self._observation(*self._settle(), None)

    def act(self, action: Action) -> StepOutcome:
        if not isinstance(action, Action):
            raise ActionError(f"act() needs an Action, got {type(action).__name__}; build one "
                              "with collabui.actions.MOBILE.from_dict({...})")
        with self._lock:
            self._device()
            if self._screen is None:
                self._screen = self._settle()[0]
            self._steps += 1
            info: dict[str, Any] = {"step": self._steps}
            if self._done:
                error = "the episode is over; call reset() to start a new one"
                return StepOutcome(self._observation(*self._settle(), error), 0.0, True, info)
            error = self._execute(action, info)
            done = bool(action.terminal) and error is None
            self._done = done
            screen, settled, blocked = self._keep_to_allowed_apps(*self._settle(), info)
            error = "; ".join(e for e in (error, blocked) if e) or None
            return StepOutcome(self._observation(screen, settled, error), 0.0, done, info)

    def hide_on_screen(self, values: Collection[str], *, words: Collection[str] = ()) -> None:
        self._screen_mask = ScreenMask.of(values, words)

    def screenshot(self) -> bytes | None:
        """The screen now, read again (settled as for an observation) and captured with the
        hidden text and password fields painted over; None without ``screenshots`` or when it
        cannot be hidden."""
        if not self.config.screenshots:
            return None
        with self._lock:
            self._device()
            return self._screenshot(*self._settle())

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._d = None  # the uiautomator2 server stays on the phone, as u2 intends

    # ---- actions ---------------------------------------------------------------------------

    def _execute(self, action: Action, info: dict[str, Any]) -> str | None:
        if isinstance(action, Unknown):
            return f"no action was executed: {action.reason or 'the proposal was not understood'}"
        if action not in self.action_space:
            return f"'{action.name}' is not a mobile action; use one of {sorted(MOBILE.actions)}"
        from collabui.devices._android_actions import HANDLERS

        return HANDLERS[type(action)](self, action, info)

    def _target(self, index: int) -> tuple[UIElement | None, str | None]:
        """The listed element ``index`` as it is now on screen, or why it cannot be used."""
        listed = self._screen.elements if self._screen else ()
        if index >= len(listed):
            last = f"0 to {len(listed) - 1}" if listed else "none"
            return None, f"there is no element {index}; this screen lists elements {last}"
        wanted = listed[index]
        now = self._dump() if self.config.verify_elements else self._screen
        match = next((e for e in now.elements if e.identity() == wanted.identity()), None)
        match = match or next((e for e in now.elements if e.identity()[:4] == wanted.identity()[:4]),
                              None)
        if match is None:
            return None, (f"element {index} ({wanted.type} {wanted.label!r}) is gone: the screen "
                          "changed since it was listed; read the new screen")
        x, y = match.center
        width, height = now.size
        if not (0 <= x < width and 0 <= y < height):
            return None, f"element {index} is outside the screen; scroll to bring it into view"
        return match, None

    def _open_app(self, name: str) -> str | None:
        installed, launchable = self._app_catalog()
        aliases = self.config.app_aliases
        package = apps.resolve_app(name, installed, launchable, aliases)
        if package is None:
            some = ", ".join(p.rsplit(".", 1)[-1] for p in launchable[:10])
            return (f"no installed app matches {name!r}; use the app's name as shown on the "
                    f"launcher or its package name{f' (apps include: {some})' if some else ''}")
        allow = self.config.app_allowlist
        if allow is not None and package not in apps.allowed_packages(allow, installed,
                                                                       launchable, aliases):
            return f"opening {name!r} is not allowed on this phone; allowed apps: {', '.join(allow)}"
        self._u2("app_start", lambda d: d.app_start(package))
        return None

    def _front_rules(self) -> tuple[set[str], set[str]] | None:
        """(packages the allowlist admits, home screen and system packages); None without an
        allowlist."""
        allow = self.config.app_allowlist
        if allow is None:
            return None
        if self._front is None:
            installed, launchable = self._app_catalog()
            out = self._u2("query home activity", lambda d: d.shell(_HOME_QUERY))
            text = out if isinstance(out, str) else getattr(out, "output", "") or ""
            allowed = apps.allowed_packages(allow, installed, launchable, self.config.app_aliases)
            self._front = allowed, {*apps.parse_launchable(text), *SYSTEM_PACKAGES}
        return self._front

    def _keep_to_allowed_apps(self, screen: Screen, settled: bool,
                              info: dict[str, Any]) -> tuple[Screen, bool, str | None]:
        """``(screen, settled, error)``: with an allowlist, a package not allowed in front (an
        intent, a deep link or a launch brought it) is left by Back, then by relaunching the
        last allowed app, then by Home, and reported in ``info["blocked_apps"]`` and ``error``."""
        rules = self._front_rules()
        package = self._foreground(screen).get("package") if rules else None
        if rules is None or package is None or package in rules[0] | rules[1]:
            if rules is not None and package in rules[0]:
                self._last_allowed = package
            return screen, settled, None
        now, how, left = package, "", False
        for how, call in self._ways_back():
            self._u2(how, call)
            screen, settled = self._settle()
            now = self._foreground(screen).get("package")
            left = now is None or now in rules[0] | rules[1]
            if left:
                break
        info.setdefault("blocked_apps", []).append({"package": package, "undone_by": how, "now": now})
        outcome = f"{how} brought back {now}" if left else "Back, relaunching and Home did not leave it"
        return screen, settled, f"{package} came to the front but is not an allowed app ({outcome})"

    def _ways_back(self) -> list[tuple[str, Callable[[Any], Any]]]:
        """How to leave an app that is not allowed, gentlest first (named as _u2 reports them)."""
        ways: list[tuple[str, Callable[[Any], Any]]] = [("press back", lambda d: d.press("back"))]
        last = self._last_allowed
        if last is not None:
            ways.append((f"relaunch {last}", lambda d: d.app_start(last)))
        return [*ways, ("press home", lambda d: d.press("home"))]

    def _app_catalog(self) -> tuple[list[str], list[str]]:
        if self._apps is None:
            installed = list(self._u2("app_list", lambda d: d.app_list()))
            out = self._u2("query launcher activities", lambda d: d.shell(
                ["cmd", "package", "query-activities", "--brief", "-a",
                 "android.intent.action.MAIN", "-c", "android.intent.category.LAUNCHER"]))
            text = out if isinstance(out, str) else getattr(out, "output", "") or ""
            self._apps = (installed, apps.parse_launchable(text))
        return self._apps

    def masked(self, action: Action) -> dict[str, Any]:
        """``action.to_dict()`` with its text replaced by the password mask."""
        return {**action.to_dict(), "text": PASSWORD_MASK}
