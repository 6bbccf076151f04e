"""AndroidDevice screenshots never show a secret or a password field's text: on recorded screens
(the fake ``uiautomator2.Device`` of ``test_android``) with a known image as the capture, every
pixel inside the bounds of an element to hide is the mask colour and every other pixel is the
capture's own, decoded from the PNG the device returns."""

from __future__ import annotations

import io
from functools import cache
from typing import Any

import pytest
from PIL import Image  # the android extra (pillow), which make test installs

from collabui.actions import mobile
from collabui.devices import check_device
from collabui.devices._android_screen import MASK_FILL
from collabui.devices._screen import ScreenMask
from tests.devices.test_android import FakeU2, make

pytestmark = pytest.mark.security

SIZE = (1080, 2400)  # the recorded screens' display
SECRET = "XK9-4471"
# Bounds in form_secrets.xml: the password field (it holds text), the text and the content
# description that name the secret, the keyboard's suggestion of it (a node the agents never
# read, drawn all the same), and the two lines that tell whole words from parts of words.
PASSWORD = (66, 600, 1014, 760)
CODE, QR, SUGGESTION = (66, 1240, 1014, 1310), (340, 1330, 740, 1480), (360, 1900, 720, 2000)
SIGNED_IN_AS_AB, CAB = (66, 1500, 1014, 1570), (66, 1600, 1014, 1670)
EMAIL = (66, 400, 1014, 560)


@cache
def _capture() -> Any:
    """A capture with no pixel of the mask colour (blue is never 0), each pixel told apart."""
    gradient = Image.linear_gradient("L").resize(SIZE)
    return Image.merge("RGB", (gradient, gradient.transpose(Image.Transpose.ROTATE_180),
                               Image.new("L", SIZE, 128)))


class Phone(FakeU2):
    """FakeU2 that captures ``_capture()``; ``edit`` rewrites each dump (a phone that reports
    other bounds), ``on_capture`` is the screen shown from the capture on (a change)."""

    def __init__(self, start: str, edit: tuple[str, str] | None = None) -> None:
        super().__init__(start)
        self.edit, self.on_capture = edit, None

    def dump_hierarchy(self) -> str:
        xml = super().dump_hierarchy()
        return xml.replace(*self.edit) if self.edit else xml

    def screenshot(self) -> Any:
        self.calls.append(("screenshot",))
        self.screen = self.on_capture or self.screen
        return _capture().copy()  # a phone's capture is a new image each time


def _decoded(png: bytes | None) -> Any:
    assert png is not None and png.startswith(b"\x89PNG")
    return Image.open(io.BytesIO(png)).convert("RGB")


def assert_hidden(png: bytes | None, *boxes: tuple[int, int, int, int]) -> None:
    """Inside every box each pixel is the mask colour; with the boxes put back from the capture,
    the image is the capture, pixel for pixel (so nothing else changed)."""
    shot, capture = _decoded(png), _capture()
    for left, top, right, bottom in boxes:
        inside = shot.crop((left, top, right, bottom))
        assert inside.getextrema() == tuple((c, c) for c in MASK_FILL), (left, top, right, bottom)
        shot.paste(capture.crop((left, top, right, bottom)), (left, top))
    assert shot.tobytes() == capture.tobytes()


def test_observation_screenshot_hides_the_password_field_and_the_secret():
    phone = Phone("form_secrets")
    device, _ = make(phone, home_on_reset=False, screenshots=True)
    device.hide_on_screen([SECRET])
    observation = device.reset()
    assert 'EditText "ada@example.com"' in observation.text and SECRET in observation.text
    assert_hidden(observation.screenshot, PASSWORD, CODE, QR, SUGGESTION)  # the email shows
    outcome = device.act(mobile.Wait())
    assert_hidden(outcome.observation.screenshot, PASSWORD, CODE, QR, SUGGESTION)


def test_hide_on_screen_called_later_changes_the_next_screenshot():
    phone = Phone("form_secrets")
    device, _ = make(phone, home_on_reset=False, screenshots=True)
    assert_hidden(device.reset().screenshot, PASSWORD)  # nothing named yet: the password field
    device.hide_on_screen([], words=["ab"])
    taken = phone.calls.count(("screenshot",))
    assert_hidden(device.screenshot(), PASSWORD, SIGNED_IN_AS_AB)  # a word: not in "cab"
    assert phone.calls.count(("screenshot",)) == taken + 1  # taken again, not the old one
    device.hide_on_screen(["ab"])  # a value: anywhere, "cab" too
    assert_hidden(device.screenshot(), PASSWORD, SIGNED_IN_AS_AB, CAB)
    device.hide_on_screen([SECRET, "ada@example.com"])  # replaces the previous set
    assert_hidden(device.observe().screenshot, PASSWORD, EMAIL, CODE, QR, SUGGESTION)


@pytest.mark.parametrize(("text", "hidden"), [
    ("Signed in as ab", True), ("ab", True), ("(ab)", True), ("ab-12", True),
    ("Your cab is booked", False), ("abc", False), ("ab1", False), ("xab", False)])
def test_words_hide_whole_words_only(text, hidden):
    """The matching is ScreenMask's, the browser's rule (``conceal.js`` gets its pattern)."""
    assert ScreenMask.of([], ["ab"]).hides(text) is hidden
    assert ScreenMask.of(["ab"]).hides(text) is ("ab" in text)
    assert not ScreenMask().hides(text)


@pytest.mark.parametrize("bounds", ['bounds="[66,1240][1014,1240]"', 'bounds="[66,1240]"', ""])
def test_a_secret_without_usable_bounds_means_no_screenshot(bounds):
    """Empty, malformed or missing bounds: where the secret is drawn is unknown, so no
    screenshot rather than an unmasked one; the same screen without a secret named keeps it."""
    phone = Phone("form_secrets", ('bounds="[66,1240][1014,1310]"', bounds))
    device, _ = make(phone, home_on_reset=False, screenshots=True)
    assert_hidden(device.reset().screenshot, PASSWORD)
    device.hide_on_screen([SECRET])
    assert device.screenshot() is None and device.observe().screenshot is None
    assert device.observe().text  # the observation itself is unaffected


def test_a_password_field_without_usable_bounds_means_no_screenshot():
    phone = Phone("form_secrets", ('bounds="[66,600][1014,760]"', 'bounds=""'))
    device, _ = make(phone, home_on_reset=False, screenshots=True)
    assert device.reset().screenshot is None


def test_an_empty_password_field_and_no_secret_leave_the_capture_as_it_is():
    phone = Phone("form")  # the password field shows only its hint
    device, _ = make(phone, home_on_reset=False, screenshots=True)
    device.hide_on_screen([SECRET], words=["hunter2"])
    assert_hidden(device.reset().screenshot)


def test_a_capture_smaller_than_the_screen_is_dropped():
    """A scaled capture: the hierarchy's bounds would miss the pixels they name."""
    phone = Phone("form_secrets")
    phone.screenshot = lambda: _capture().resize((540, 1200))  # type: ignore[method-assign]
    device, _ = make(phone, home_on_reset=False, screenshots=True)
    assert device.reset().screenshot is None
    assert make(Phone("form"), home_on_reset=False, screenshots=True)[0].reset().screenshot


def test_a_screen_that_changes_during_the_capture_hides_what_both_dumps_show():
    """Unsettled (the clock keeps changing the listed system bar): the capture may already show
    the next screen, so it hides that dump's secrets too."""
    phone = Phone("form")
    phone.changing, phone.on_capture = True, "form_secrets"
    device, _ = make(phone, home_on_reset=False, screenshots=True, show_system_ui=True,
                     settle_timeout_s=0.01)
    device.hide_on_screen([SECRET])
    observation = device.reset()
    assert observation.extra["settled"] is False and SECRET not in observation.text
    assert_hidden(observation.screenshot, PASSWORD, CODE, QR, SUGGESTION)


def test_no_screenshot_without_screenshots():
    phone = Phone("form_secrets")
    device, _ = make(phone, home_on_reset=False)
    assert device.reset().screenshot is None and device.screenshot() is None
    assert ("screenshot",) not in phone.calls


def test_android_device_with_hidden_screenshots_passes_check_device():
    device, _ = make(Phone("form_secrets"), home_on_reset=False, screenshots=True)
    device.hide_on_screen([SECRET], words=["ab"])
    check_device(device, probe_action=mobile.Tap(5))
