"""Screenshots never show a secret or a password the page writes as text.

Chromium draws a password field's value as dots, but a task that names the password, a page
that echoes a value, a secret typed into a plain field are drawn in clear. The device hides what
the episode tells it (``Device.hide_on_screen``) while it takes each screenshot. Proved without
OCR, two ways: a masked screenshot is pixel for pixel the screenshot of the same page written
with ``***`` in place of the value (so not one pixel of it depends on the value), and in whole
episodes every screenshot the trace keeps was taken while the page's text and fields held no
trace of the value (read in the page at the moment of the capture), the page getting it back
after.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from collabui import CollabAgentTeam
from collabui.devices import BrowserDevice, make_env
from collabui.models.fake import ScriptedChatModel
from collabui.trace import read_trace
from tests.local_site import LocalSite, serve
from tests.security.test_secrets import LOGIN, PASSWORD, SEED, WELCOME, _form_filler

pytestmark = [pytest.mark.security, pytest.mark.browser]

SECRET = "Tr0ub4dor&3"
PAGE = """<html><head><title>Shown</title><style>body {{ font: 16px sans-serif; }}</style></head>
<body><p id="task">Enter the password "{v}" and press the button.</p>
<p>Echo: you typed {v}, code abc{v}x stays whole-word safe.</p>
<input id="plain" value="{v}"> <input id="hint" placeholder="{v}">
<textarea id="area">{v}</textarea>
<div id="host"></div>
<iframe srcdoc="&lt;p&gt;in a frame: {v}&lt;/p&gt;" width="300" height="60"></iframe>
<script>document.getElementById('host').attachShadow({{mode: 'open'}}).innerHTML =
  '<b>shadow {v}</b>';</script>
</body></html>"""
ESCAPED = SECRET.replace("&", "&amp;")
INSIDE = f"abc{ESCAPED}x"  # the value inside a longer word
#: The page with the value; the same page written by hand with ``***`` wherever the value
#: occurs (what ``values`` hide), and where it stands as a whole word (what ``words`` hide, as the
#: trace masks passwords: not inside a longer word).
SHOWN = PAGE.format(v=ESCAPED)
MASKED_ANYWHERE = SHOWN.replace(ESCAPED, "***")
MASKED_WORDS = SHOWN.replace(INSIDE, "@KEEP@").replace(ESCAPED, "***").replace("@KEEP@", INSIDE)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Iterator[LocalSite]:
    root = tmp_path_factory.mktemp("shown")
    pages = {"shown": SHOWN, "anywhere": MASKED_ANYWHERE, "words": MASKED_WORDS,
             "plain": SHOWN.replace(ESCAPED, "nothing"), "login": LOGIN, "welcome": WELCOME}
    for name, html in pages.items():
        (root / f"{name}.html").write_text(html)
    with serve(root) as site:
        yield site


def _pixels(png: bytes) -> bytes:
    from PIL import Image  # the android extra (pillow), which make test installs

    return Image.open(io.BytesIO(png)).convert("RGB").tobytes()


def _page_text(device: BrowserDevice) -> str:
    return device._call(_read_all, device._current_page())


async def _read_all(page: Any) -> str:
    """Everything the page draws as text, every frame, fields and shadow roots included."""
    parts = []
    for frame in page.frames:
        parts.append(await frame.evaluate("""() => {
            const out = [document.body.innerText];
            for (const el of document.querySelectorAll('input, textarea'))
                out.push(el.value, el.placeholder);
            for (const el of document.querySelectorAll('*'))
                if (el.shadowRoot) out.push(el.shadowRoot.textContent);
            return out.join('\\n'); }"""))
    return "\n".join(parts)


def _shots(device: BrowserDevice, site: LocalSite, page: str, **hide: list[str]) -> tuple[bytes, str]:
    """(screenshot of ``page`` hiding ``hide``, the page's text read right after)."""
    device.reset(options={"url": site.url(f"{page}.html")})
    device.hide_on_screen(hide.get("values", ()), words=hide.get("words", ()))
    return device.screenshot(), _page_text(device)


@pytest.mark.parametrize(("hide", "reference"), [({"values": [SECRET]}, "anywhere"),
                                                 ({"words": [SECRET]}, "words")])
def test_masked_screenshot_is_the_page_written_without_the_value(site, hide, reference):
    """The masked capture is pixel for pixel the page written by hand without the value (text,
    a field's value and placeholder, a textarea, an iframe, a shadow root); the page has every
    value back right after, and the observation text (which the redactor masks) reads it."""
    with BrowserDevice(start_url=site.url("shown.html"), screenshots=True) as device:
        clear, before = _shots(device, site, "shown")
        hidden, after = _shots(device, site, "shown", **hide)
        observed = device.observe()
        expected, _ = _shots(device, site, reference)
        plain, _ = _shots(device, site, "plain")
        untouched, _ = _shots(device, site, "plain", **hide)  # nothing to hide there
    assert _pixels(clear) != _pixels(expected)  # the value is drawn: the comparison can fail
    assert _pixels(hidden) == _pixels(expected)
    assert _pixels(untouched) == _pixels(plain)
    assert SECRET in before and after == before
    assert SECRET in observed.text and observed.screenshot is not None
    assert _pixels(observed.screenshot) == _pixels(expected)  # the observation's own capture


class _CaptureSpy:
    """Wraps a device's capture: every PNG it takes, with what the page's text and fields held
    at that very moment (read in the page, hidden values replaced or not)."""

    def __init__(self, device: BrowserDevice) -> None:
        self.seen: dict[bytes, str] = {}
        original = type(device)._capture

        async def capture(page: Any) -> bytes:
            text = await _read_all(page)
            png = await original(device, page)
            self.seen[png] = text
            return png

        device._capture = capture  # type: ignore[method-assign]


def _trace_shots(folder: Path) -> tuple[Any, list[bytes]]:
    trace = read_trace(next(folder.glob("*.jsonl")))
    return trace, [(folder / s["screenshot"]).read_bytes() for s in trace.steps]


def test_enter_password_screenshots_never_show_the_task_password(tmp_path):
    """MiniWoB++ enter-password writes its task ("Enter the password "D91YP" ...") on the page;
    no secrets are given. The task names the password, so it is known from the reset: the
    reset's screenshot is taken again hiding it, and so is every later one."""
    team = CollabAgentTeam(ScriptedChatModel(_form_filler), n_agents=2, rounds=2, topology="chain",
                           max_steps=5, seed=0)
    with make_env("miniwob/enter-password", screenshots=True) as env:
        spy = _CaptureSpy(env)
        result = team.run(None, env, seed=SEED, trace=tmp_path)
    assert result.success  # the page got the password, twice
    trace, shots = _trace_shots(tmp_path)
    assert len(shots) == len(trace.steps) == 3
    assert any(PASSWORD in text for text in spy.seen.values())  # the page does show it
    for t, png in enumerate(shots):
        assert png in spy.seen, t  # taken by the device, in this episode
        assert PASSWORD not in spy.seen[png] and 'password "***"' in spy.seen[png], t
    assert trace.header["task"] == 'Enter the password "***" into both text fields and press submit.'


def test_secret_echoed_by_a_page_is_hidden_in_every_screenshot(tmp_path, site):
    """Secrets are hidden from the first screenshot: the login page's plain user field (typed
    in clear) and the welcome page that writes both values into its text."""
    user, password = "alice.w", "Tr0ub4dor&3"
    script = [
        'Action: {"action": "type_string", "element_id": "A", "content": "<secret:user>"}',
        'Action: {"action": "type_string", "element_id": "B", "content": "<secret:pw>"}',
        'Action: {"action": "click", "element_id": "C"}',
        'Action: {"action": "finish", "answer": "logged in"}',
    ]
    team = CollabAgentTeam(ScriptedChatModel([a for a in script for _ in range(2)]), n_agents=2,
                           rounds=1, topology="independent", max_steps=4)
    with BrowserDevice(start_url=site.url("login.html"), screenshots=True) as device:
        spy = _CaptureSpy(device)
        result = team.run("Log in as <secret:user> with <secret:pw>.", device, trace=tmp_path,
                          secrets={"user": user, "pw": password}, approve="always")
        final = _page_text(device)
    assert "got ?user=<secret:user>" in result.steps[-1].observation.text
    assert user in final and "Tr0ub4dor%263" in final  # the page holds them (restored)
    _, shots = _trace_shots(tmp_path)
    assert len(shots) == 4 and len(spy.seen) == 4  # nothing to take again: known from the start
    for t, png in enumerate(shots):
        for value in (user, password, "Tr0ub4dor%263"):
            assert value not in spy.seen[png], (t, value)
    assert "got ?user=***&pw=***" in spy.seen[shots[-1]]


HIDDEN_PLACES = """<html><head><title>Hidden places</title><style>body {{ font: 16px sans-serif; }}</style></head>
<body><div id="closed"></div>
<canvas id="drawn" width="220" height="40"></canvas> <canvas id="typed" width="220" height="40"></canvas>
<canvas id="chart" width="120" height="40"></canvas>
<script>
document.getElementById('closed').attachShadow({{mode: 'closed'}}).innerHTML = '<i>closed {v}</i>';
const draw = (id, texts) => {{
  const g = document.getElementById(id).getContext('2d');
  g.font = '16px sans-serif';
  texts.forEach((t, k) => g.fillText(t, 4 + 11 * k, 24));
}};
draw('drawn', ['pw: {v}']);
draw('typed', Array.from('{v}'));  // one character at a time, as a text editor on canvas does
draw('chart', ['Chart {chart}']);
</script></body></html>"""


@pytest.mark.parametrize("hide", [{"values": ["Hunter22"]}, {"words": ["Hunter22"]}])
def test_closed_shadow_roots_and_canvas_text_are_hidden_too(tmp_path, hide):
    """Where the DOM does not show the text (a closed shadow root, a canvas given the value to
    draw, whole or a character at a time), the masked screenshot does not depend on the value:
    the page showing one value and the page showing another give the same pixels; unmasked,
    they differ. A canvas that never drew it (the chart) is not covered: its own text shows."""
    pages = {"a": {"v": "Hunter22", "chart": "42"}, "b": {"v": "Zebra987", "chart": "42"},
             "c": {"v": "Hunter22", "chart": "97"}}
    for name, fields in pages.items():
        (tmp_path / f"{name}.html").write_text(HIDDEN_PLACES.format(**fields))
    other = {k: [w.replace("Hunter22", "Zebra987") for w in v] for k, v in hide.items()}
    with serve(tmp_path) as site, BrowserDevice(start_url=site.url("a.html"), screenshots=True) as device:
        clear_a, _ = _shots(device, site, "a")
        clear_b, _ = _shots(device, site, "b")
        hidden_a, _ = _shots(device, site, "a", **hide)
        hidden_b, _ = _shots(device, site, "b", **other)
        clear_c, _ = _shots(device, site, "c")
        hidden_c, _ = _shots(device, site, "c", **hide)
        again_c = device._call(device._capture, device._current_page())  # restored after the capture
    assert _pixels(clear_a) != _pixels(clear_b)  # the value is drawn: the comparison can fail
    assert _pixels(hidden_a) == _pixels(hidden_b)
    assert _pixels(hidden_c) != _pixels(hidden_a)  # the chart's text is not covered
    assert _pixels(again_c) == _pixels(clear_c)
