"""The navigation guard: a BrowserDevice stays on its site and never opens non-web URLs.

The site under test is served on 127.0.0.1, "another site" on 127.0.0.2 (another loopback
address, so another host). Every way off the site is tried: link click, server redirect,
``window.open``, a ``target=_blank`` new tab, an iframe, a meta refresh, ``jump_to`` (same tab and
new tab), and ``file:``, ``data:``, ``javascript:``, ``view-source:`` and ``chrome:`` URLs; ``data:``
and ``blob:`` documents a page script frames or opens, and ``srcdoc`` frames trying to leave. Each
is blocked, reported in the next observation's ``last_action_error``, and the other site never
receives a request; navigation inside the site keeps working.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from collabui.actions import web
from collabui.cli import main
from collabui.devices import BrowserDevice, browser, make_env
from collabui.devices.base import Observation
from collabui.devices.browser import start_refusal
from collabui.devices.navigation import NavigationGuard, site_of
from collabui.devices.simplify import parse_elements
from collabui.errors import ConfigError
from tests.local_site import LocalSite, serve

pytestmark = pytest.mark.security


def _pages(other: str) -> dict[str, str]:
    off = f"{other}/off.html"
    return {
        "index.html": f"""<html><head><title>Index</title></head><body>
<a href="{off}">offsite link</a>
<a href="/redirect?to={off}">redirect away</a>
<a href="/redirect?to=/second.html">redirect home</a>
<a href="second.html">second page</a>
<a href="{off}" target="_blank">new tab away</a>
<button onclick="window.open('{off}')">popup away</button>
<button onclick="window.open('second.html')">popup home</button>
</body></html>""",
        "second.html": "<html><head><title>Second</title></head><body><p>second page</p></body></html>",
        "meta.html": f'<html><head><title>Meta</title><meta http-equiv="refresh" content="0;url={off}">'
                     "</head><body><p>refreshing</p></body></html>",
        "frame.html": f'<html><head><title>Frame</title></head><body><p>framed</p><iframe src="{off}">'
                      "</iframe></body></html>",
        "off.html": "<html><head><title>OFFSITE</title></head><body><p>you left</p></body></html>",
        # An allowed host (this one) on a port nothing listens on: the popup's fetch fails.
        "dead_popup.html": "<html><head><title>Dead</title></head><body>"
                           "<button onclick=\"window.open('http://127.0.0.1:1/gone.html')\">popup dead</button>"
                           "</body></html>",
        # Documents Chromium loads without a request (routing never sees them), made by script.
        "data_frame.html": _scripted("DataFrame", "frame(DOC_DATA)"),
        "blob_frame.html": _scripted("BlobFrame", "frame(blobUrl())"),
        "blob_tab.html": _scripted("BlobTab", "") + '<button onclick="location.href = blobUrl()">go blob</button>'
                         '<button onclick="window.open(blobUrl())">pop blob</button>',
        # The page's own markup in an iframe: it tries to leave (script, target=_top link) and
        # to frame a data: document.
        "srcdoc.html": '<html><head><title>Srcdoc</title></head><body><iframe srcdoc="'
                       f"<a id=top target=_top href='{off}'>top</a><iframe src='data:text/html,<p>in</p>'></iframe>"
                       f"<script>setTimeout(() => {{ location.href = '{off}?script'; }}, 100)</script>"
                       '"></iframe></body></html>',
    }


#: A data: document, and a script making blob: documents and iframes.
DOC_DATA = "'data:text/html,<title>DATA</title><p>data frame</p>'"
_SCRIPT = """<script>
function blobUrl() {
  return URL.createObjectURL(new Blob(["<title>BLOB</title><p>blob page</p>"], {type: "text/html"}));
}
function frame(src) { const f = document.createElement("iframe"); f.src = src; document.body.appendChild(f); }
</script>"""


def _scripted(title: str, call: str) -> str:
    run = f"<script>{call.replace('DOC_DATA', DOC_DATA)}</script>" if call else ""
    return f"<html><head><title>{title}</title>{_SCRIPT}</head><body><p>home</p>{run}</body></html>"


@pytest.fixture(scope="module")
def sites(tmp_path_factory) -> Iterator[tuple[LocalSite, LocalSite]]:
    other_root, root = tmp_path_factory.mktemp("other"), tmp_path_factory.mktemp("home")
    with serve(other_root, "127.0.0.2") as other, serve(root, "127.0.0.1") as home:
        for folder in (root, other_root):
            for name, html in _pages(other.base).items():
                (folder / name).write_text(html)
        yield home, other


@pytest.fixture(scope="module")
def device() -> Iterator[BrowserDevice]:
    with BrowserDevice(action_timeout_s=2.0, navigation_timeout_s=5.0, task="stay home") as dev:
        yield dev


def _open(device: BrowserDevice, home: LocalSite, name: str = "index.html") -> Observation:
    observation = device.reset(options={"url": home.url(name)})
    assert observation.last_action_error is None
    return observation


def _click(device: BrowserDevice, observation: Observation, text: str):
    element = next(e.id for e in parse_elements(observation.text) if e.full_text == text)
    return device.act(web.Click(element))


def _blocked_error(device: BrowserDevice, first: Observation, expect: str = "was blocked") -> str:
    """The block report holding ``expect``: in ``first`` or, for navigations the page starts by
    itself a moment later (meta refresh), in an observation taken soon after."""
    error, deadline = first.last_action_error, time.monotonic() + 5
    while not (error and expect in error) and time.monotonic() < deadline:
        time.sleep(0.1)
        error = device.observe().last_action_error
    assert error and expect in error, error
    return error


@pytest.mark.browser
@pytest.mark.parametrize("link", ["offsite link", "redirect away", "new tab away", "popup away"])
def test_leaving_the_site_by_the_page_is_blocked(device, sites, link):
    home, other = sites
    outcome = _click(device, _open(device, home), link)
    error = _blocked_error(device, outcome.observation)
    assert "127.0.0.2 is not an allowed site (allowed: 127.0.0.1)" in error
    if outcome.observation.last_action_error:  # reported with the step (a loaded machine: a moment later)
        assert outcome.info["blocked_navigations"][0]["url"].startswith(other.base)
    now = device.observe()
    assert now.tabs == ("Index",) and now.url == home.url("index.html")  # stayed, no blank tab
    assert other.requests == []  # the other site never received a request


@pytest.mark.browser
@pytest.mark.parametrize("page", ["meta.html", "frame.html"])
def test_pages_that_load_another_site_by_themselves_are_blocked(device, sites, page):
    home, other = sites
    observation = device.reset(options={"url": home.url(page)})
    error = _blocked_error(device, observation)
    assert "127.0.0.2 is not an allowed site" in error
    assert device.observe().url == home.url(page)
    assert other.requests == []


def _frames_settle(device: BrowserDevice, unwanted: tuple[str, ...]) -> list[str]:
    """The URLs of the current tab's frames once none starts with ``unwanted`` (or after 20 s)."""
    deadline = time.monotonic() + 20
    urls = [f.url for f in device._current_page().frames]
    while any(u.startswith(unwanted) for u in urls) and time.monotonic() < deadline:
        time.sleep(0.1)
        urls = [f.url for f in device._current_page().frames]
    return urls


@pytest.mark.browser
@pytest.mark.parametrize(("page", "scheme"), [("data_frame.html", "data"), ("blob_frame.html", "blob")])
def test_script_made_data_and_blob_iframes_are_blocked(device, sites, page, scheme):
    """Request routing never sees these documents; each frame's URL is checked as it commits."""
    home, _ = sites
    observation = device.reset(options={"url": home.url(page)})
    error = _blocked_error(device, observation)
    assert f"{scheme}: URLs are never opened; only http(s) pages on 127.0.0.1" in error
    assert _frames_settle(device, ("data:", "blob:")) == [home.url(page), "about:blank"]
    now = device.observe()
    assert now.url == home.url(page) and now.last_action_error.count("was blocked") == 1  # once


@pytest.mark.browser
@pytest.mark.parametrize("button", ["go blob", "pop blob"])
def test_script_made_blob_pages_are_blocked(device, sites, button):
    home, _ = sites
    outcome = _click(device, _open(device, home, "blob_tab.html"), button)
    error = _blocked_error(device, outcome.observation)
    assert "blob: URLs are never opened" in error
    deadline = time.monotonic() + 20  # generous: a busy machine delays the undo, not the outcome
    while (now := device.observe()).tabs != ("BlobTab",) and time.monotonic() < deadline:
        time.sleep(0.1)  # the tab is sent back (a popup closed) as soon as it commits
    assert now.tabs == ("BlobTab",) and now.url == home.url("blob_tab.html")
    assert [f.url for f in device._current_page().frames] == [home.url("blob_tab.html")]


@pytest.mark.browser
def test_srcdoc_iframes_cannot_leave_the_site(device, sites):
    home, other = sites
    observation = device.reset(options={"url": home.url("srcdoc.html")})
    error = _blocked_error(device, observation, "127.0.0.2 is not an allowed site")  # its own script
    assert "data: URLs are never opened" in error  # the data: frame inside it
    frames = _frames_settle(device, ("data:",))
    assert frames == [home.url("srcdoc.html"), "about:srcdoc", "about:blank"]
    srcdoc = device._current_page().frames[1]
    device._call(lambda: srcdoc.click("#top"))  # a target=_top link inside the srcdoc
    deadline = time.monotonic() + 5
    while other.url("off.html") not in [e["url"] for e in device._blocked] and time.monotonic() < deadline:
        device.observe()  # collects what the guard blocked (the report lists the first three)
        time.sleep(0.1)
    assert other.url("off.html") in [e["url"] for e in device._blocked]
    assert device.observe().url == home.url("srcdoc.html") and other.requests == []


@pytest.mark.browser
@pytest.mark.parametrize("url", [
    "OTHER/off.html", "file:///etc/passwd", "data:text/html,<title>pwned</title>",
    "javascript:document.title='pwned'", "view-source:HOME/index.html", "chrome://version",
])
@pytest.mark.parametrize("new_tab", [False, True])
def test_jump_to_refuses_other_sites_and_non_web_urls(device, sites, url, new_tab):
    home, other = sites
    _open(device, home)
    url = url.replace("OTHER", other.base).replace("HOME", home.base)
    outcome = device.act(web.JumpTo(url, new_tab=new_tab))
    error = outcome.observation.last_action_error
    assert error.startswith(f"navigation to {url} was blocked (")
    assert ("is not an allowed site" in error) if url.startswith("http") else (
        "URLs are never opened; only http(s) pages on 127.0.0.1" in error)
    assert outcome.observation.tabs == ("Index",)  # no title changed, no tab opened
    assert outcome.info["blocked_navigations"] == [
        {"url": url, "reason": error.split(" was blocked (", 1)[1][:-1], "via": "jump_to"}]
    assert other.requests == []


@pytest.mark.browser
def test_navigation_inside_the_site_works(device, sites):
    home, _ = sites
    observation = _open(device, home)
    for link in ("second page", "redirect home"):
        outcome = _click(device, observation, link)
        assert outcome.observation.tabs == ("Second",) and outcome.observation.last_action_error is None
        assert "blocked_navigations" not in outcome.info
        observation = device.act(web.Go("backward")).observation
    popup = _click(device, observation, "popup home").observation
    assert popup.tabs == ("Index", "Second") and popup.current_tab == 1
    jumped = device.act(web.JumpTo(home.url("second.html"), new_tab=True)).observation
    assert jumped.last_action_error is None and len(jumped.tabs) == 3


@pytest.mark.browser
@pytest.mark.parametrize("button, tabs", [("popup home", ("Index", "Second")), ("popup away", ("Index",))])
def test_a_popup_whose_request_comes_late_is_in_the_steps_observation(device, sites, monkeypatch,
                                                                      button, tabs):
    """On a loaded machine a popup's request can reach the guard after the click returned;
    the step still waits for the popup (or its refusal), never reports the page without it."""
    home, _ = sites
    checked = NavigationGuard.route

    async def late(guard: NavigationGuard, route, **kwargs) -> None:
        if route.request.is_navigation_request():
            await asyncio.sleep(0.6)
        await checked(guard, route, **kwargs)

    observation = _open(device, home)
    monkeypatch.setattr(NavigationGuard, "route", late)
    outcome = _click(device, observation, button)
    assert outcome.observation.tabs == tabs
    assert ("blocked_navigations" in outcome.info) is (button == "popup away")


@pytest.mark.browser
def test_a_popup_the_guard_cannot_fetch_is_counted_blank(device, sites, monkeypatch):
    """An allowed popup whose page is unreachable gets no content: the guard counts it blank (the
    step's settle wait ends on that count instead of waiting for a page that never comes)."""
    home, _ = sites
    guards: list[NavigationGuard] = []  # the episode's guard, as reset() makes it

    def kept(url: str, allowed: tuple[str, ...] | None) -> NavigationGuard:
        guards.append(start_refusal(url, allowed))
        return guards[-1]

    monkeypatch.setattr(browser, "start_refusal", kept)
    observation = _open(device, home, "dead_popup.html")
    guard = guards[-1]
    blank, opened = guard.blank_pages, guard.new_pages
    outcome = _click(device, observation, "popup dead")
    assert (guard.blank_pages - blank, guard.new_pages - opened) == (1, 0)
    assert outcome.observation.tabs[0] == "Dead" and "blocked_navigations" not in outcome.info


@pytest.mark.browser
def test_explicit_allowed_domains_open_the_other_site(sites):
    home, other = sites
    with BrowserDevice(allowed_domains=["127.0.0.1", "127.0.0.2"]) as dev:
        observation = dev.reset(options={"url": home.url("index.html")})
        outcome = _click(dev, observation, "offsite link")
        assert outcome.observation.tabs == ("OFFSITE",)
    other.requests.clear()  # that visit was allowed
    with BrowserDevice(allowed_domains=["127.0.0.2"]) as dev, pytest.raises(
            ConfigError, match=r"refusing to open http://127.0.0.1:\d+/index.html: 127.0.0.1 is "
                               r"not an allowed site \(allowed: 127.0.0.2\); give an http\(s\) URL "
                               r"or allow its host"):
        dev.reset(options={"url": home.url("index.html")})


def test_start_urls_and_domains_are_checked_before_chromium_starts():
    for url in ("file:///etc/passwd", "data:text/html,hi", "javascript:alert(1)",
                "view-source:https://example.org", "chrome://settings"):
        with pytest.raises(ConfigError, match=r"^refusing to open .*URLs are never opened; only "
                                              r"http\(s\) pages"):
            make_env("web", url=url, task="read it")
    for bad in ("https://example.org/", "example.org:8080", "", "a b"):
        with pytest.raises(ConfigError, match=f"allowed domain {bad!r} is not a host name; give a "
                                              "bare host like 'example.org'"):
            BrowserDevice(allowed_domains=[bad])
    with pytest.raises(ConfigError, match="must be a list of host names, got the string"):
        BrowserDevice(allowed_domains="example.org")


def test_site_rules():
    assert site_of("https://www.example.org/a?b") == "example.org"
    assert site_of("https://shop.example.org") == "shop.example.org"  # not the registrable domain
    assert site_of("http://127.0.0.1:8000/x") == "127.0.0.1"
    guard = NavigationGuard(["example.org", "*.test.net", "10.0.0.1"])
    for ok in ("https://example.org/", "http://a.b.example.org:81/x", "https://test.net",
               "http://10.0.0.1:9/", "about:blank"):
        assert guard.refusal(ok) is None, ok
    for bad in ("https://example.org.evil.com/", "https://notexample.org/", "http://10.0.0.10/",
                "ftp://example.org/", "blob:https://example.org/x", "about:config"):
        assert guard.refusal(bad), bad
    only = NavigationGuard(origins=["http://127.0.0.1:8123"])
    assert only.refusal("http://127.0.0.1:8123/miniwob/x.html") is None
    assert only.refusal("http://127.0.0.1:8124/miniwob/x.html")


def test_cli_refuses_a_file_url_in_one_line(capsys):
    code = main(["run", "--url", "file:///etc/passwd", "--task", "read it", "--model", "lexical"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert err.startswith("error: refusing to open file:///etc/passwd: file: URLs are never opened")
    code = main(["run", "--env", "android", "--task", "x", "--allow-domain", "example.org"])
    assert code == 2 and "--allow-domain applies to web pages" in capsys.readouterr().err


@pytest.mark.browser
def test_miniwob_allows_its_own_files_only(sites):
    _, other = sites
    with make_env("miniwob/click-button") as env:
        env.reset(seed=0)
        outcome = env.act(web.JumpTo(other.url("off.html")))
        assert "127.0.0.2 is not an allowed site (allowed: http://127.0.0.1:" in \
            outcome.observation.last_action_error
        local = env.act(web.JumpTo(f"{env.url.rsplit(':', 1)[0]}:1/miniwob/click-button.html"))
        assert "is not an allowed site" in local.observation.last_action_error  # other port
    assert other.requests == []


def test_guard_module_has_no_playwright_import_at_load(tmp_path: Path):
    import subprocess
    import sys

    code = ("import sys, collabui.devices.navigation as n; "
            "print(any(m.startswith('playwright') for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
