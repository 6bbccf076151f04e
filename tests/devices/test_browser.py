"""BrowserDevice on local pages: simplified HTML, every web action, errors, process hygiene."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator

import pytest

from collabui.actions import Unknown, web
from collabui.devices import BrowserConfig, BrowserDevice, make_env
from collabui.devices._screen import ScreenMask
from collabui.devices.simplify import (
    format_viewport,
    parse_elements,
    render_html,
    render_text_first,
)
from collabui.errors import (
    ActionError,
    BrowserNotFoundError,
    ConfigError,
    DeviceClosedError,
    DeviceError,
)
from tests.local_site import LocalSite, serve
from tests.processes import chromium_descendants

FORM = """<html><head><title>Form</title></head><body>
<h2>Sign in</h2>
<div><div>Amazon <a href="second.html"><span>Amazon</span></a></div></div>
<form onsubmit="document.title = 'sent ' + document.getElementById('q').value; return false;">
  <input id="q" placeholder="Search...">
</form>
<label><input type="checkbox" checked> Stay signed in</label>
<select id="color"><option value="r">Red</option><option value="b">Blue</option></select>
<div style="display:none"><button>Invisible</button></div>
<p>Some <b>bold</b> text</p>
<span id="pointer" style="cursor:pointer">pointy</span>
<div id="listened">listened</div>
<button id="vanish">Vanish</button>
<button onclick="document.title = 'clicked'">Submit</button>
<div onmouseover="document.title = 'hovered'">hover me</div>
<textarea>old text</textarea>
<div style="height:3000px"></div>
<script>document.getElementById('listened').addEventListener('click', () => {});</script>
</body></html>"""

SECOND = "<html><head><title>Second</title></head><body><p>second page</p></body></html>"
DISABLED = ("<html><head><title>Locked</title></head><body><input placeholder='name' disabled>"
            "<input placeholder='code' readonly value='42'><button disabled onclick=\"document.title='sent'\">Send</button>"
            "<button onclick=\"document.title='ok'\">Ok</button></body></html>")
MANY = "<html><body>" + "".join(f"<button onclick=\"document.title='b{i}'\">b{i}</button>"
                                for i in range(30)) + "</body></html>"

# MiniWoB's email icons: spans sized by a CSS image, made by script after load; the image comes
# 0.8 s late (the site's /slow redirect), as a loaded machine's first read of a fresh page saw.
ICONS = """<html><head><style>.star { content: url(/slow?s=0.8&to=star.png); height: 12px; }</style></head>
<body><div id="list"></div><script>
window.addEventListener('load', () => {
  const list = document.getElementById('list');
  list.appendChild(Object.assign(document.createElement('button'), {textContent: 'Reply'}));
  list.appendChild(Object.assign(document.createElement('span'), {className: 'star', onclick: () => {}}));
});
</script></body></html>"""


def _png(side: int) -> bytes:
    """A real ``side`` x ``side`` PNG (opaque red), so the browser decodes it and sizes the icon."""
    import io

    from PIL import Image  # the android extra (pillow), which make test installs

    out = io.BytesIO()
    Image.new("RGBA", (side, side), (255, 0, 0, 255)).save(out, "PNG")
    return out.getvalue()


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Iterator[LocalSite]:
    root = tmp_path_factory.mktemp("site")
    (root / "star.png").write_bytes(_png(12))
    for name, html in (("form.html", FORM), ("second.html", SECOND), ("many.html", MANY), ("disabled.html", DISABLED),
                       ("icons.html", ICONS)):
        (root / name).write_text(html)
    with serve(root) as local:  # pages load over http(s) only (the navigation guard)
        yield local


@pytest.fixture(scope="module")
def device():
    # 2 s: long enough for a click on a loaded CI machine (0.5 s once timed out a plain click under
    # four test workers), short enough that the timeout test stays quick.
    dev = BrowserDevice(action_timeout_s=2.0, task="test the browser")
    yield dev
    dev.close()


def _open(device, site, name="form.html"):
    return device.reset(options={"url": site.url(name)})


def _id(observation, text):
    return next(e.id for e in parse_elements(observation.text) if e.id and e.full_text == text)


@pytest.mark.browser
def test_an_icon_whose_image_is_still_loading_is_read_once_it_has_loaded(device, site):
    # Without the wait the walk read the span before its image gave it a width and dropped it.
    obs = _open(device, site, "icons.html")
    assert [e.full_text for e in parse_elements(obs.text) if e.id] == ["Reply", ".star"]


@pytest.mark.browser
def test_simplified_html_format(device, site):
    obs = _open(device, site)
    text = obs.text
    assert "<h2| Sign in>" in text
    assert "<div| Amazon <a[A]| <span| Amazon> > >" in text
    assert "<input[B]| placeholder: Search...>" in text
    assert "<label[C]| <input[D]| checkbox; true> Stay signed in>" in text
    assert "<select[E]| Red; options: Red | Blue>" in text
    assert "Invisible" not in text  # display:none subtree dropped
    assert "<p| Some bold text>" in text  # inline formatting merged into the text run
    assert "<span[F]| pointy>" in text  # cursor:pointer makes it interactive
    assert "<div[G]| listened>" in text  # a click listener makes it interactive
    assert "<button[I]| Submit>" in text and "<textarea[K]| old text>" in text
    assert (obs.task, obs.tabs, obs.current_tab) == ("test the browser", ("Form",), 0)
    assert obs.url.endswith("form.html") and obs.last_action_error is None
    assert obs.viewport.startswith("0 / ") and float(obs.viewport.split(" / ")[1]) > 3


@pytest.mark.browser
def test_ids_go_past_z(device, site):
    obs = _open(device, site, "many.html")
    ids = [e.id for e in parse_elements(obs.text) if e.id]
    assert ids[:3] == ["A", "B", "C"] and ids[25:] == ["Z", "AA", "AB", "AC", "AD"]
    outcome = device.act(web.Click("AB"))
    assert outcome.observation.last_action_error is None
    assert outcome.observation.tabs == ("b27",)


@pytest.mark.browser
def test_click_hover_type_and_enter(device, site):
    obs = _open(device, site)
    assert device.act(web.Click(_id(obs, "Submit"))).observation.tabs == ("clicked",)
    assert device.act(web.Hover(_id(obs, "hover me"))).observation.tabs == ("hovered",)
    typed = device.act(web.TypeString("K", "new words"))
    assert "<textarea[K]| new words>" in typed.observation.text  # cleared, then typed
    sent = device.act(web.TypeString("B", "shoes", press_enter=True)).observation
    assert sent.tabs == ("sent shoes",) and "<input[B]| shoes>" in sent.text
    checkbox = device.act(web.Click("D")).observation
    assert "<input[D]| checkbox; false>" in checkbox.text


@pytest.mark.browser
def test_select_by_label_or_value_and_its_errors(device, site):
    _open(device, site)
    assert "<select[E]| Blue;" in device.act(web.Select("E", "Blue")).observation.text
    assert "<select[E]| Red;" in device.act(web.Select("E", "r")).observation.text
    wrong_tag = device.act(web.Select("I", "Blue")).observation.last_action_error
    assert wrong_tag == "element [I] (<button>) is not a drop-down (<select>); use click instead"
    missing = device.act(web.Select("E", "Green")).observation.last_action_error
    assert "has no option 'Green'" in missing and "'Red', 'Blue'" in missing


@pytest.mark.browser
def test_recoverable_failures_never_raise(device, site):
    _open(device, site)
    assert "no element [ZZ]" in device.act(web.Click("ZZ")).observation.last_action_error
    device._call(_hide_vanish, device)  # the element disappears after it was listed
    error = device.act(web.Click("H")).observation.last_action_error
    assert error.startswith("clicking [H] timed out")
    assert "not a text field" in device.act(web.TypeString("E", "x")).observation.last_action_error
    unknown = device.act(Unknown(raw="???", reason="no JSON object found"))
    assert unknown.observation.last_action_error == "no action was executed: no JSON object found"
    assert not unknown.done


@pytest.mark.browser
def test_a_disabled_or_read_only_element_fails_at_once_and_says_why(device, site):
    obs = _open(device, site, "disabled.html")
    ids = {e.full_text: e.id for e in parse_elements(obs.text) if e.id}
    name, code = (next(i for t, i in ids.items() if word in t) for word in ("name", "42"))
    typed = device.act(web.TypeString(name, "Ann")).observation
    assert typed.last_action_error == f"typing into [{name}] failed: the element is disabled or read-only; try another element"
    assert "read-only" in device.act(web.TypeString(code, "7")).observation.last_action_error
    clicked = device.act(web.Click(ids["Send"])).observation
    assert clicked.last_action_error == f"clicking [{ids['Send']}] failed: the element is disabled; try another element"
    assert clicked.tabs == ("Locked",) and "42" in clicked.text  # nothing happened
    assert device.act(web.Click(ids["Ok"])).observation.tabs == ("ok",)  # an enabled one still works


async def _measured_boxes(device) -> dict[str, list[float]]:
    page = device._current_page()
    out = {}
    for element in await page.query_selector_all("[data-collabui-id]"):
        box = await element.bounding_box()
        out[await element.get_attribute("data-collabui-id")] = [box[k] for k in ("x", "y", "width", "height")]
    return out


def _nodes(node):
    if isinstance(node, dict):
        yield node
        for part in node["parts"]:
            yield from _nodes(part)


def _without(node, keys):
    if not isinstance(node, dict):
        return node
    return {k: _without(v, keys) if k != "parts" else [_without(p, keys) for p in v]
            for k, v in node.items() if k not in keys}


@pytest.mark.browser
def test_interactive_nodes_carry_their_box(device, site):
    """Each interactive node records its border box ([x, y, w, h], CSS px of the viewport,
    rounded) as Playwright measures the element; other nodes carry none; the text renders the
    same from the tree without the extra keys."""
    obs = _open(device, site)
    nodes = list(_nodes(obs.extra["tree"]))
    recorded = {n["id"]: n["box"] for n in nodes if n["id"]}
    measured = device._call(_measured_boxes, device)
    assert recorded.keys() == measured.keys() and len(recorded) > 5
    for element_id, box in recorded.items():
        assert all(isinstance(v, int) for v in box)
        assert all(abs(a - b) <= 0.51 for a, b in zip(box, measured[element_id], strict=True)), element_id
    assert all("box" not in n for n in nodes if not n["id"])
    bare = _without(obs.extra["tree"], {"box", "dom"})
    assert obs.text == render_html(bare) and render_text_first(obs.extra["tree"]) == render_text_first(bare)


async def _crash(device):
    from playwright.async_api import Error as PlaywrightError

    with contextlib.suppress(PlaywrightError):  # the crash aborts the navigation
        await device._current_page().goto("chrome://crash")


async def _hide_vanish(device):
    await device._current_page().evaluate(
        "document.getElementById('vanish').style.visibility = 'hidden'")


@pytest.mark.browser
def test_scroll_go_tabs(device, site):
    _open(device, site)
    assert device.act(web.ScrollPage("up")).observation.last_action_error.startswith(
        "the page is already at the top")
    down = device.act(web.ScrollPage("down")).observation
    assert down.viewport.startswith("1 / ") and down.last_action_error is None
    second = device.act(web.Click("A")).observation
    assert second.tabs == ("Second",) and "<p| second page>" in second.text
    back = device.act(web.Go("backward")).observation
    assert back.tabs == ("Form",) and back.last_action_error is None
    assert device.act(web.Go("forward")).observation.tabs == ("Second",)
    device.act(web.Go("backward"))
    no_history = device.act(web.Go("backward")).observation.last_action_error
    assert no_history == "there is no earlier page in this tab's history"
    tab = device.act(web.JumpTo(site.url("second.html"), new_tab=True)).observation
    assert tab.tabs == ("Form", "Second") and tab.current_tab == 1
    assert device.act(web.SwitchTab(0)).observation.current_tab == 0
    assert "no tab 5" in device.act(web.SwitchTab(5)).observation.last_action_error


@pytest.mark.browser
def test_terminal_actions_record_their_text(device, site):
    _open(device, site)
    asked = device.act(web.UserInput("please log in"))
    assert asked.done and asked.info == {"user_input": "please log in"}
    finished = device.act(web.Finish("42"))
    assert finished.done and finished.info == {"answer": "42"}


@pytest.mark.browser
def test_close_leaves_no_chromium_and_blocks_use(site):
    before = chromium_descendants()
    dev = BrowserDevice(start_url=site.url("second.html"))
    dev.reset()
    assert chromium_descendants() - before  # it really started Chromium
    dev.close()
    dev.close()  # idempotent
    assert chromium_descendants() - before == set()
    for call in (dev.observe, dev.reset, lambda: dev.act(web.Click("A"))):
        with pytest.raises(DeviceClosedError, match="closed; create a new device"):
            call()


@pytest.mark.browser
def test_crashed_page_raises_device_closed():
    with BrowserDevice(start_url="about:blank") as dev:
        dev.reset()
        with pytest.raises(DeviceClosedError):
            dev._call(_crash, dev)  # jump_to refuses chrome: URLs, so crash the tab directly
            dev.observe()


def test_missing_chromium_is_a_clear_error(monkeypatch):
    with pytest.raises(BrowserNotFoundError, match=r"Chromium not found at /nope/chromium; install it"
                                                   r" with `apt-get install -y chromium`"):
        BrowserDevice(executable_path="/nope/chromium")
    monkeypatch.setenv("COLLABUI_CHROMIUM", "/nope/env-chromium")
    with pytest.raises(BrowserNotFoundError, match="/nope/env-chromium.*COLLABUI_CHROMIUM"):
        make_env("web", url="https://example.org")


def test_config_validation():
    with pytest.raises(ConfigError, match="unknown browser option"):
        BrowserDevice(viewprot=(1, 1))
    with pytest.raises(ConfigError, match="viewport"):
        BrowserConfig(viewport=(0, 10))
    with pytest.raises(ConfigError, match="action_timeout_s"):
        BrowserConfig(action_timeout_s=-1)
    with pytest.raises(ConfigError, match="either url= or start_url="):
        make_env("web", url="a", start_url="b")


@pytest.mark.browser
def test_misuse_gives_one_line_errors():
    with BrowserDevice() as dev:
        with pytest.raises(ConfigError, match="no page to open"):
            dev.reset()
        with pytest.raises(DeviceError, match=r"call reset\(\) before observe"):
            dev.observe()
        with pytest.raises(ActionError, match="needs an Action, got dict"):
            dev.act({"action": "click", "element_id": "A"})


@pytest.mark.browser
def test_screen_mask_pattern_matches_alike_in_python_and_in_the_page(device, site):
    """ScreenMask's one pattern: what the page hides (conceal.js compiles it) is what the Android
    device looks for in its hierarchy (``ScreenMask.hides``), special characters included."""
    mask = ScreenMask.of(["a.b*c", "x&y", "p q", "[z]", "{1}", "d-e", "#~%", "back\\slash", "ü€"],
                         ["ab", "h$t"])
    texts = ["a.b*c", "aXbbc", "1x&y2", "p q", "z", "[z]", "{1}", "1", "d-e", "de", "#~%",
             "back\\slash", "backslash", "ü€!", "ab", "cab", "(ab)", "h$t", "ah$t", "ht"]
    _open(device, site)

    async def in_page(page):
        return await page.evaluate("([p, ts]) => ts.map((t) => new RegExp(p).test(t))",
                                   [mask.pattern, texts])

    found = device._call(in_page, device._current_page())
    assert found == [mask.hides(t) for t in texts] and any(found) and not all(found)


def test_viewport_format():
    assert format_viewport(0, 720, 720) == "0 / 1.0"
    assert format_viewport(720, 720, 2952) == "1 / 4.1"
    assert format_viewport(0, 720, 10) == "0 / 1.0"


def test_import_stays_light():
    code = ("import sys, collabui.devices as d; d.BrowserDevice; d.make_env; "
            "print(any(m.startswith('playwright') for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_a_slow_page_load_is_not_held_to_the_action_timeout(site):
    # The guard fetches each navigation itself: its fetch gets the navigation budget, not the
    # context's element-action timeout (0.2 s here), which a loaded machine's page loads exceed.
    dev = BrowserDevice(action_timeout_s=0.2, task="test the browser")
    try:
        obs = dev.reset(options={"url": site.url(f"slow?s=0.6&to={site.url('second.html')}")})
        assert obs.url.endswith("second.html") and obs.last_action_error is None
    finally:
        dev.close()
