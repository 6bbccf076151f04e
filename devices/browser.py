"""A Chromium browser as a Device, driven by Playwright's async API on a private event loop.

Why a private loop: Playwright's sync API refuses to run inside a running asyncio loop (the
trap BrowserGym fell into), and its async API would tie the device to one caller's loop. The
device owns an event loop in a daemon thread; sync methods submit coroutines to it and block on
the result, async twins await the same future without blocking their own loop. One lock on the
private loop serialises operations, so concurrent callers cannot interleave half-actions.

Chromium comes from the system (Debian's ``/usr/bin/chromium``; ``COLLABUI_CHROMIUM`` or
``executable_path`` override it): Playwright's own browser download is not needed.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import dataclasses
import hashlib
import os
import shutil
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt

from collabui.actions import WEB, Action
from collabui.devices import simplify
from collabui.devices._screen import ScreenMask, capture_hidden
from collabui.devices.base import Device, Observation, StepOutcome
from collabui.devices.navigation import BlockedNavigation, NavigationGuard, check_domains, site_of
from collabui.errors import (
    ActionError,
    BrowserNotFoundError,
    ConfigError,
    DeviceClosedError,
    DeviceError,
)

__all__ = ["BrowserConfig", "BrowserDevice", "DEFAULT_CHROMIUM", "CHROMIUM_ARGS",
           "resolve_chromium"]

T = TypeVar("T")

DEFAULT_CHROMIUM = "/usr/bin/chromium"
#: Flags that keep a headless Chromium quiet, offline-friendly and container-safe.
CHROMIUM_ARGS = ("--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run", "--disable-sync",
                 "--disable-quic")
#: Longest wait (ms) before a read for the images that size elements (``js/images.js``): an icon
#: still loading has no width and the walk would drop it.
_IMAGE_WAIT_MS = 2000
_CLOSED_MARKERS = ("has been closed", "Target closed", "Browser closed", "browser has disconnected",
                   "Connection closed")


def resolve_chromium(executable_path: str | None) -> str:
    """The Chromium executable to launch: explicit path, else $COLLABUI_CHROMIUM, else Debian's.

    Raises:
        BrowserNotFoundError: nothing executable at that path.
    """
    path = executable_path or os.environ.get("COLLABUI_CHROMIUM") or DEFAULT_CHROMIUM
    found = path if os.sep in path else shutil.which(path)
    if not found or not os.path.isfile(found) or not os.access(found, os.X_OK):
        raise BrowserNotFoundError(
            f"Chromium not found at {path}; install it with `apt-get install -y chromium` or set "
            "COLLABUI_CHROMIUM / executable_path")
    return found


@dataclass(frozen=True)
class BrowserConfig:
    """How a BrowserDevice launches and drives Chromium.

    Attributes:
        executable_path: Chromium binary; None means $COLLABUI_CHROMIUM or /usr/bin/chromium.
        headless: run without a window.
        viewport: CSS pixel size (width, height) of every tab.
        start_url: page opened by ``reset()`` unless ``options={"url": ...}`` overrides it.
        task: task text reported in ``Observation.task`` (``options={"task": ...}`` overrides).
        screenshots: attach a PNG screenshot to every observation, and in ``extra["screenshot_area"]``
            the part of the viewport it shows (``[x, y, width, height]``, CSS pixels). Text given
            to ``hide_on_screen`` is replaced by ``***`` on the page while it is taken.
        action_timeout_s: longest wait for one element action (click, type, ...).
        navigation_timeout_s: longest wait for a page load.
        extra_args: more Chromium command-line flags.
        max_text: longest text run kept in the simplified HTML.
        element_format: how ``Observation.text`` shows the page: ``"html"`` (simplified HTML,
            ``<button[B]| Ok>``) or ``"text-first"`` (one line per item, ``button "Ok" [B]``).
        shuffle_elements: shuffle runs of sibling elements and draw ids at random, so no
            policy can win by position or id habits (see ``js/simplify.js``). Seeded: the same
            seed and the same calls since ``reset()`` give byte-identical observations.
        shuffle_seed: base seed of the shuffle, mixed with the number of observations taken
            since ``reset()`` (MiniWoB also mixes in the episode seed).
        allowed_domains: hosts the tabs may load pages from (each covers its subdomains;
            ``("*",)``: any host); None: the site of the page ``reset()`` opens (its host, a
            leading ``www.`` dropped, and its subdomains). Only http(s) pages ever load; see
            :mod:`collabui.devices.navigation`. MiniWoB++ allows its own local server only.
    """

    executable_path: str | None = None
    headless: bool = True
    viewport: tuple[int, int] = (1280, 720)
    start_url: str | None = None
    task: str | None = None
    screenshots: bool = False
    action_timeout_s: float = 5.0
    navigation_timeout_s: float = 30.0
    extra_args: tuple[str, ...] = ()
    max_text: int = 300
    element_format: str = "html"
    shuffle_elements: bool = False
    shuffle_seed: int = 0
    allowed_domains: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if self.allowed_domains is not None:
            object.__setattr__(self, "allowed_domains", check_domains(self.allowed_domains))
        if self.start_url is not None:
            start_refusal(str(self.start_url), self.allowed_domains)
        vp = self.viewport
        if (not isinstance(vp, tuple | list) or len(vp) != 2
                or not all(isinstance(v, int) and v > 0 for v in vp)):
            raise ConfigError(f"viewport must be (width, height) in positive pixels, got {vp!r}")
        object.__setattr__(self, "viewport", tuple(vp))
        object.__setattr__(self, "extra_args", tuple(self.extra_args))
        for name in ("action_timeout_s", "navigation_timeout_s"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or value <= 0:
                raise ConfigError(f"{name} must be a positive number of seconds, got {value!r}")
        simplify.check_element_format(self.element_format)
        if not isinstance(self.shuffle_elements, bool):
            raise ConfigError(f"shuffle_elements must be True or False, got {self.shuffle_elements!r}")
        if isinstance(self.shuffle_seed, bool) or not isinstance(self.shuffle_seed, int):
            raise ConfigError(f"shuffle_seed must be an integer, got {self.shuffle_seed!r}")

    @classmethod
    def build(cls, config: BrowserConfig | None = None, **overrides: Any) -> BrowserConfig:
        """``config`` (or the defaults) with ``overrides`` applied; unknown names raise."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise ConfigError(f"unknown browser option(s) {unknown}; valid options: {sorted(known)}")
        return dataclasses.replace(config or cls(), **overrides)


def start_refusal(url: str, allowed_domains: tuple[str, ...] | None) -> NavigationGuard:
    """The guard of an episode that starts on ``url``; ConfigError if ``url`` may not load."""
    url = _normalize_url(url)
    domains = allowed_domains if allowed_domains is not None else (site_of(url) or "*",)
    guard = NavigationGuard(domains)
    reason = guard.refusal(url)
    if reason:
        raise ConfigError(f"refusing to open {url[:200]}: {reason}; give an http(s) URL"
                          + ("" if allowed_domains is None else " or allow its host"))
    return guard


class _LoopThread:
    """An asyncio event loop running forever in a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="collabui-browser",
                                       daemon=True)
        self.thread.start()

    def submit(self, coro: Awaitable[T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)  # type: ignore[arg-type]

    def stop(self) -> None:
        if self.loop.is_closed():
            return

        async def _cancel_rest() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        if self.thread.is_alive():
            # Best effort: the loop is going away anyway.
            with contextlib.suppress(Exception):
                self.submit(_cancel_rest()).result(5)
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(5)
        if not self.thread.is_alive():
            self.loop.close()


_LIVE: weakref.WeakSet[BrowserDevice] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    # A forgotten device must not leave Chromium running after the interpreter exits.
    for device in list(_LIVE):
        with contextlib.suppress(Exception):  # exiting: nothing useful to report
            device.close()


class BrowserDevice(Device):
    """A Chromium tab set driven through the web action space (paper Table 6).

    Chromium starts on the first ``reset()`` and stops in ``close()`` (idempotent; no process is
    left behind). Recoverable action failures come back as ``last_action_error``; a crashed or
    closed browser raises ``DeviceClosedError``, and the next ``reset()`` starts a new browser
    after a crash (``relaunches`` counts them).
    """

    action_space = WEB
    #: CSS selectors of subtrees left out of the observation text.
    skip_selectors: tuple[str, ...] = ()
    #: Page globals read with every observation (into ``self._page_globals``).
    page_globals: tuple[str, ...] = ()

    def __init__(self, *, config: BrowserConfig | None = None, **overrides: Any) -> None:
        self.config = BrowserConfig.build(config, **overrides)
        self._executable = resolve_chromium(self.config.executable_path)
        self._runner: _LoopThread | None = None
        self._lock: asyncio.Lock | None = None
        self._pw: Any = None
        self._browser: Any = None
        self._context: Any = None
        self._page: Any = None
        self._closed = False
        self._dead: str | None = None
        #: Times a crashed browser was started again by ``reset()``.
        self.relaunches = 0
        self._task: str | None = self.config.task
        #: What the tabs may load (set by each reset); None until the first reset.
        self._guard: NavigationGuard | None = None
        #: Navigations blocked since the last observation (reported in ``StepOutcome.info``).
        self._blocked: list[BlockedNavigation] = []
        self._navigations_seen = 0
        #: Pages the context announced (its "page" events), and how many the last settle saw.
        self._pages_announced = self._pages_seen = self._new_pages_seen = 0
        #: Windows the pages opened (CDP ``Page.windowOpen``), and how many the last settle saw.
        self._windows_opened = self._windows_seen = self._blank_pages_seen = 0
        #: CDP sessions being set up on adopted pages (awaited before the next action).
        self._watching: set[asyncio.Future[None]] = set()
        #: Refused frames being undone (see ``_on_frame``).
        self._undoing: dict[Any, asyncio.Future[None]] = {}
        self._page_globals: dict[str, Any] = {}
        #: Observations taken since the last reset (one of the shuffle seed's parts).
        self._observations = 0
        #: Text no screenshot shows (``hide_on_screen``; see ``devices._screen``).
        self._screen_mask = ScreenMask()
        _LIVE.add(self)

    # ---- sync / async plumbing -------------------------------------------------------------

    @property
    def _op_timeout(self) -> float:
        c = self.config
        return c.navigation_timeout_s * 2 + c.action_timeout_s * 4 + 15

    def _submit(self, fn: Callable[..., Awaitable[T]], *args: Any) -> concurrent.futures.Future[T]:
        if self._closed:
            raise DeviceClosedError(f"{type(self).__name__} is closed; create a new device")
        if self._runner is None:
            self._runner = _LoopThread()
        if threading.current_thread() is self._runner.thread:
            raise DeviceError("a BrowserDevice method was called from its own event loop; call "
                              "it from your code, not from a Playwright callback")
        return self._runner.submit(self._guarded(fn, *args))

    def _call(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        future = self._submit(fn, *args)
        try:
            return future.result(self._op_timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise DeviceError(f"the browser did not answer within {self._op_timeout:.0f} s; "
                              "close() this device and create a new one") from None

    async def _acall(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        future = self._submit(fn, *args)
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), self._op_timeout)
        except asyncio.TimeoutError:
            future.cancel()
            raise DeviceError(f"the browser did not answer within {self._op_timeout:.0f} s; "
                              "close() this device and create a new one") from None

    async def _guarded(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        from playwright.async_api import Error as PlaywrightError

        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            self._check_alive()
            try:
                return await fn(*args)
            except PlaywrightError as exc:
                self._raise_if_dead(exc)
                raise DeviceError(f"browser operation failed: {_first_line(exc)}; retry, or "
                                  "close() and create a new device") from None

    def _check_alive(self) -> None:
        if self._closed:
            raise DeviceClosedError(f"{type(self).__name__} is closed; create a new device")
        if self._dead:
            raise DeviceClosedError(f"{self._dead}; the next reset() starts a new browser")

    def _raise_if_dead(self, exc: BaseException) -> None:
        message = str(exc)
        if self._dead or any(marker in message for marker in _CLOSED_MARKERS):
            self._dead = self._dead or "the browser or its page was closed"
            raise DeviceClosedError(f"{self._dead}; the next reset() starts a new browser") from None

    # ---- public API ------------------------------------------------------------------------

    def reset(self, *, seed: int | None = None, options: Mapping[str, Any] | None = None) -> Observation:
        self._relaunch_if_dead()
        try:
            return self._call(self._reset, seed, dict(options or {}))
        except DeviceClosedError:
            if not self._dead:
                raise  # closed on purpose
            # Killed just before this reset: the crash was noticed here, not before. No step
            # ran yet, so this episode can still start on a new browser.
            self._relaunch_if_dead()
            return self._call(self._reset, seed, dict(options or {}))

    def observe(self) -> Observation:
        return self._call(self._observe)

    def act(self, action: Action) -> StepOutcome:
        return self._call(self._act, _require_action(action))

    async def areset(self, *, seed: int | None = None, options: Mapping[str, Any] | None = None) -> Observation:
        if self._dead:
            await asyncio.to_thread(self._relaunch_if_dead)
        try:
            return await self._acall(self._reset, seed, dict(options or {}))
        except DeviceClosedError:
            if not self._dead:
                raise  # closed on purpose
            await asyncio.to_thread(self._relaunch_if_dead)  # killed just before: see reset()
            return await self._acall(self._reset, seed, dict(options or {}))

    def _relaunch_if_dead(self) -> None:
        """A new episode on a crashed browser starts a new one: the crash ended only the episode
        it happened in (its step raised DeviceClosedError). Counted in ``relaunches``."""
        if not self._dead or self._closed or self._runner is None:
            return
        with contextlib.suppress(Exception):  # what is left of the old browser
            self._runner.submit(self._drop_browser()).result(10)
        self._browser = self._context = self._page = None
        self._dead = None
        self.relaunches += 1

    async def aobserve(self) -> Observation:
        return await self._acall(self._observe)

    def hide_on_screen(self, values: Collection[str], *, words: Collection[str] = ()) -> None:
        self._screen_mask = ScreenMask.of(values, words)

    def screenshot(self) -> bytes | None:
        return self._call(self._screenshot_now)

    async def ascreenshot(self) -> bytes | None:
        return await self._acall(self._screenshot_now)

    async def aact(self, action: Action) -> StepOutcome:
        return await self._acall(self._act, _require_action(action))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        _LIVE.discard(self)
        runner, self._runner = self._runner, None
        if runner is None:
            return
        if threading.current_thread() is runner.thread:
            return  # cannot block our own loop; atexit/daemon teardown finishes the job
        with contextlib.suppress(Exception):  # shutting down: stop the loop regardless
            runner.submit(self._shutdown()).result(20)
        runner.stop()

    async def aclose(self) -> None:
        await asyncio.to_thread(self.close)

    # ---- coroutines run on the private loop --------------------------------------------------

    async def _launch(self) -> None:
        from playwright.async_api import Error as PlaywrightError
        from playwright.async_api import async_playwright

        c = self.config
        options = {"executable_path": self._executable, "headless": c.headless,
                   "args": [*CHROMIUM_ARGS, *c.extra_args], "timeout": c.navigation_timeout_s * 1000}
        if self._pw is not None:  # kept from a crashed browser (see _drop_browser)
            try:
                self._browser = await self._pw.chromium.launch(**options)
            except Exception:  # its driver died with the browser: start both anew
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(self._pw.stop(), 5)
                self._pw = None
        if self._browser is not None:
            self._browser.on("disconnected", lambda _b: self._mark_dead("the browser process exited"))
            return
        self._pw = await async_playwright().start()
        try:
            self._browser = await self._pw.chromium.launch(**options)
        except PlaywrightError as exc:
            await self._pw.stop()
            self._pw = None
            raise DeviceError(f"Chromium at {self._executable} failed to start: "
                              f"{_first_line(exc)}; check `{self._executable} --version`") from None
        self._browser.on("disconnected", lambda _b: self._mark_dead("the browser process exited"))

    async def _new_context(self) -> None:
        c = self.config
        if self._context is not None:
            await self._context.close()
        self._context = await self._browser.new_context(**self._context_options())
        self._context.set_default_timeout(c.action_timeout_s * 1000)
        self._context.set_default_navigation_timeout(c.navigation_timeout_s * 1000)
        await self._context.add_init_script(simplify.listener_script())
        await self._context.add_init_script(simplify.screen_hooks_script())
        # Context-level routing sees every tab, popup and iframe of this context.
        await self._context.route("**/*", self._route)
        # A page opened by the site (target=_blank, window.open) becomes the current tab, as in
        # a real browser.
        self._context.on("page", self._announced_page)
        self._page = await self._context.new_page()
        self._adopt_page(self._page)
        await self._watched()

    def _context_options(self) -> dict[str, Any]:
        """Keyword arguments of ``browser.new_context`` (subclasses emulate devices here)."""
        width, height = self.config.viewport
        return {"viewport": {"width": width, "height": height}}

    async def _route(self, route: Any) -> None:
        if self._guard is None:  # no episode yet: nothing may load
            await route.fulfill(status=204)
            return
        await self._guard.route(route, timeout_s=self.config.navigation_timeout_s)

    def _announced_page(self, page: Any) -> None:
        self._pages_announced += 1
        self._adopt_page(page)

    def _adopt_page(self, page: Any) -> None:
        self._page = page
        page.on("crash", lambda _p: self._mark_dead("the browser page crashed"))
        page.on("framenavigated", self._on_frame)
        self._on_frame(page.main_frame)  # a popup may have opened straight onto its URL
        watching = asyncio.ensure_future(self._watch_window_opens(page))
        self._watching.add(watching)
        watching.add_done_callback(self._watching.discard)

    async def _watch_window_opens(self, page: Any) -> None:
        """Count the windows ``page`` opens. CDP's ``Page.windowOpen`` comes as window.open or
        a target=_blank click runs, before the click returns; the popup's request and "page"
        event may come long after on a loaded machine, so ``_settle_navigations`` waits for
        each window counted here."""
        from playwright.async_api import Error as PlaywrightError

        def opened(_event: Any) -> None:
            self._windows_opened += 1

        try:
            session = await self._context.new_cdp_session(page)
            session.on("Page.windowOpen", opened)
            await session.send("Page.enable")
        except PlaywrightError:
            pass  # the page closed already: it opens nothing

    async def _watched(self) -> None:
        """Wait until every adopted page's window-open watch is set up."""
        if self._watching:
            await asyncio.gather(*self._watching, return_exceptions=True)

    def _on_frame(self, frame: Any) -> None:
        """A frame committed a URL: one routing never saw (data:, blob:) and the guard refuses
        is undone at once and reported (see collabui.devices.navigation)."""
        guard = self._guard
        how = "iframe" if frame.parent_frame is not None else "navigation"
        # Chromium may report one commit twice; the frame is undone (and reported) once.
        if guard is None or frame in self._undoing or not guard.refuse_commit(frame.url, how):
            return
        # Kept until done: a reference (or the task may be collected before it runs), and what
        # _settle_navigations waits for.
        self._undoing[frame] = asyncio.ensure_future(self._undo_frame(frame, guard))
        self._undoing[frame].add_done_callback(lambda _task: self._undoing.pop(frame, None))

    async def _undo_frame(self, frame: Any, guard: NavigationGuard) -> None:
        """Point a refused iframe at about:blank; send a refused tab back (or close a popup
        that has no page to go back to; the last tab shows about:blank instead)."""
        from playwright.async_api import Error as PlaywrightError

        # Right after a commit Chromium may still be attaching the new document ("Not attached
        # to an active page"): the undo is retried until the refused document is gone.
        deadline = time.monotonic() + self.config.action_timeout_s
        while True:
            try:
                await self._undo_once(frame, guard)
                return
            except PlaywrightError:
                if frame.is_detached() or guard.refusal(frame.url) is None or time.monotonic() > deadline:
                    return  # gone, already undone, or out of time (the block is reported anyway)
                await asyncio.sleep(0.1)

    @staticmethod
    async def _undo_once(frame: Any, guard: NavigationGuard) -> None:
        if frame.parent_frame is not None:
            element = await frame.frame_element()
            await element.evaluate("frame => { frame.src = 'about:blank'; }")
            return
        page = frame.page
        await page.go_back(wait_until="commit")
        if guard.refusal(page.url) is None and page.url != "about:blank":
            return
        if len(page.context.pages) > 1:
            await page.close()
        else:
            await page.goto("about:blank")

    def _mark_dead(self, reason: str) -> None:
        if not self._closed:
            self._dead = self._dead or reason

    async def _drop_browser(self) -> None:
        """Forget a crashed browser but keep Playwright's driver: a relaunch then costs one
        Chromium start (``_launch`` starts a new driver too if this one died)."""
        browser, self._browser = self._browser, None
        # close() on a browser whose process is gone waits for an answer that never comes.
        if browser is not None and browser.is_connected():
            with contextlib.suppress(Exception):
                await asyncio.wait_for(browser.close(), 5)

    async def _shutdown(self) -> None:
        try:
            if self._browser is not None:
                await self._browser.close()
        finally:
            self._browser = self._context = self._page = None
            if self._pw is not None:
                pw, self._pw = self._pw, None
                await pw.stop()

    async def _reset(self, seed: int | None, options: dict[str, Any]) -> Observation:
        url = options.get("url", self.config.start_url)
        if not url:
            raise ConfigError("no page to open: pass start_url=... (or url=... to make_env) or "
                              "reset(options={'url': ...})")
        guard = start_refusal(str(url), self.config.allowed_domains)  # before Chromium starts
        if self._browser is None:
            await self._launch()
        self._guard, self._navigations_seen = guard, 0
        self._pages_announced = self._pages_seen = self._new_pages_seen = 0
        self._windows_opened = self._windows_seen = self._blank_pages_seen = 0
        await self._new_context()
        self._observations = 0
        self._task = options.get("task", self.config.task)
        self._blocked = []
        error = await self._goto(_normalize_url(str(url)))
        blocked = guard.drain() if error else []  # e.g. the start page redirects off-site
        if blocked:
            raise DeviceError(f"{_blocked_sentence(blocked)}; start on a page of an allowed "
                              "site, or allow that host with allowed_domains / --allow-domain")
        if error:
            raise DeviceError(f"{error}; check the URL and your network")
        return await self._observe()

    async def _goto(self, url: str) -> str | None:
        from playwright.async_api import Error as PlaywrightError

        if self._refused(url):
            return None  # reported with the blocked navigations of the next observation
        try:
            await self._current_page().goto(url, wait_until="domcontentloaded")
        except PlaywrightError as exc:
            self._raise_if_dead(exc)
            return f"could not open {url}: {_first_line(exc)}"
        return None

    def _refused(self, url: str, via: str = "jump_to") -> bool:
        """True (and the block recorded) when the guard refuses to open ``url``."""
        refusal = self._guard.refusal(url) if self._guard else "no episode has started"
        if refusal:
            self._blocked.append({"url": url, "reason": refusal, "via": via})
        return refusal is not None

    def _current_page(self) -> Any:
        if self._context is None:
            raise DeviceError("no episode yet; call reset() before observe() or act()")
        if self._page is None or self._page.is_closed():
            pages = self._context.pages
            if not pages:
                self._dead = "every tab was closed"
                self._check_alive()
            self._page = pages[-1]
        return self._page

    async def _snapshot(self, page: Any, script: str, options: Any) -> dict[str, Any]:
        """The page's elements. A navigation in flight destroys the script's context, so a
        failed read is tried again, up to 3 reads; then a DeviceError (an observation the team
        can get again), never a crash."""
        from playwright.async_api import Error as PlaywrightError

        reads = AsyncRetrying(stop=stop_after_attempt(3), retry=retry_if_exception_type(PlaywrightError), reraise=True)
        try:
            return await reads(self._read_page, page, script, options)
        except PlaywrightError as exc:
            raise DeviceError(f"could not read the page: {_first_line(exc)}; retry observe()") from None

    async def _read_page(self, page: Any, script: str, options: Any) -> dict[str, Any]:
        """One read of the page's elements; a closed browser raises DeviceClosedError (no retry)."""
        from playwright.async_api import Error as PlaywrightError

        try:
            await page.wait_for_load_state("domcontentloaded")
            await page.evaluate(simplify.images_script(), _IMAGE_WAIT_MS)
            return await page.evaluate(script, options)
        except PlaywrightError as exc:
            self._raise_if_dead(exc)
            raise

    async def _observe(self, error: str | None = None) -> Observation:
        await self._settle_navigations()
        page = self._current_page()
        if self._guard is not None:
            self._blocked.extend(self._guard.drain())
        if self._blocked:
            # A blocked navigation is the agents' business (they tried to leave the site), so
            # it is reported like a failed action, never raised.
            error = "; ".join(e for e in (error, _blocked_sentence(self._blocked)) if e)
        script, options = self._walk()
        self._observations += 1
        snap = await self._snapshot(page, script, options)
        self._page_globals = snap.get("globals") or {}
        pages = self._context.pages
        titles = tuple([snap["title"] if p is page else await p.title() for p in pages])
        shot = await self._screenshot(page) if self.config.screenshots else None
        extra = self._snapshot_extra(snap)
        if shot is not None:
            # Element boxes are CSS pixels of the viewport; the image may have more pixels
            # (device scale) or fewer (a downscaled capture), so the area it shows is recorded
            # and a reader scales by the image's own size.
            extra["screenshot_area"] = self._screenshot_area(page, snap)
        return Observation(
            text=self._snapshot_text(snap), task=self._task, url=snap["url"], tabs=titles,
            current_tab=pages.index(page) if page in pages else 0,
            viewport=simplify.format_viewport(snap["scrollY"], snap["innerHeight"],
                                              snap["scrollHeight"]),
            last_action_error=error, screenshot=shot, extra=extra)

    def _walk(self) -> tuple[str, dict[str, Any]]:
        """The in-page walk (function source, argument) whose result ``_observe`` reads."""
        c = self.config
        return simplify.walk_script(), simplify.walk_options(
            skip=self.skip_selectors, globals_=self.page_globals, max_text=c.max_text,
            shuffle=c.shuffle_elements, seed=_mix_seed(*self._shuffle_key()))

    def _shuffle_key(self) -> tuple[Any, ...]:
        """What the shuffle seed of the next observation derives from (see BrowserConfig)."""
        return (self.config.shuffle_seed, self._observations)

    def _snapshot_text(self, snap: dict[str, Any]) -> str:
        """The observation text of one walk result, in ``config.element_format``."""
        return simplify.render(snap["tree"], self.config.element_format)

    def _snapshot_extra(self, snap: dict[str, Any]) -> dict[str, Any]:
        """``Observation.extra`` of one walk result: ``elements`` (how many interactive
        elements are listed) and ``tree`` (the walk's element tree, see ``simplify.Node``)."""
        extra: dict[str, Any] = {"elements": snap["count"]}
        if "tree" in snap:  # subclasses with their own walk have no tree
            extra["tree"] = snap["tree"]
            # Ids of password inputs (their text starts with the input type): what is typed
            # there is masked in traces and output (collabui.redaction).
            extra["password_fields"] = [
                e["id"] for e in simplify.flat_elements(snap["tree"])
                if e["tag"] == "input" and e["text"].split(";")[0].strip() == "password"]
        return extra

    async def _screenshot_now(self) -> bytes | None:
        return await self._screenshot(self._current_page()) if self.config.screenshots else None

    async def _screenshot(self, page: Any) -> bytes | None:
        """The screenshot of an observation, with ``hide_on_screen``'s text hidden; None when
        it could not be hidden (see ``devices._screen``)."""
        return await capture_hidden(page, self._screen_mask, self._capture)

    async def _capture(self, page: Any) -> bytes:
        """The PNG capture itself (subclasses clip it)."""
        return await page.screenshot()

    def _screenshot_area(self, page: Any, snap: dict[str, Any]) -> list[int]:
        """``[x, y, width, height]``: the part of the viewport ``_screenshot`` captures, in CSS
        pixels (``Observation.extra["screenshot_area"]``); here the whole viewport."""
        size = page.viewport_size or {}
        width = snap.get("innerWidth") or size.get("width") or 0
        return [0, 0, int(width), int(snap.get("innerHeight") or size.get("height") or 0)]

    async def _execute(self, action: Action) -> tuple[str | None, dict[str, Any]]:
        """Run ``action``: ``(error sentence or None, info)`` (see ``_web_actions``)."""
        from collabui.devices import _web_actions

        return await _web_actions.execute(self, action)

    async def _act(self, action: Action) -> StepOutcome:
        self._blocked = []
        await self._watched()  # a popup adopted since the last step: its window opens count too
        error, info = await self._execute(action)
        observation = await self._observe(error)
        if self._blocked:
            info = {**info, "blocked_navigations": list(self._blocked)}
        return StepOutcome(observation, 0.0, bool(action.terminal), info)

    async def _settle_navigations(self, timeout_s: float = 5.0) -> None:
        """Wait (bounded) for navigation requests the guard is still checking and refused
        frames being undone."""
        guard = self._guard
        if guard is None:
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        seen = self._navigations_seen
        while (guard.busy or self._undoing) and loop.time() < deadline:
            await asyncio.sleep(0.02)
        if guard.navigations != seen:
            # A popup's "page" event comes a moment after its first response is handed over:
            # wait for as many pages as navigations opened one (a loaded machine takes longer
            # than the 0.1 s that are always given).
            await asyncio.sleep(0.1)
        # Each window opened ends announced or blank (its request refused); each allowed
        # page-opening request ends announced. The request itself may not have reached the
        # guard yet when the action returns.
        while self._pages_pending(guard) and loop.time() < deadline:
            await asyncio.sleep(0.02)
        self._navigations_seen = guard.navigations
        self._new_pages_seen, self._pages_seen = guard.new_pages, self._pages_announced
        self._windows_seen, self._blank_pages_seen = self._windows_opened, guard.blank_pages

    def _pages_pending(self, guard: NavigationGuard) -> bool:
        """True while a popup the last action opened is not yet announced (or refused)."""
        announced = self._pages_announced - self._pages_seen
        allowed = guard.new_pages - self._new_pages_seen
        blank = guard.blank_pages - self._blank_pages_seen
        return announced < allowed or announced + blank < self._windows_opened - self._windows_seen


def _mix_seed(*parts: Any) -> int:
    """A stable 32-bit seed from ``parts`` (sha256 of their repr; never Python's salted hash)."""
    return int.from_bytes(hashlib.sha256(repr(parts).encode()).digest()[:4], "big")


def _require_action(action: Any) -> Action:
    if not isinstance(action, Action):
        raise ActionError(f"act() needs an Action, got {type(action).__name__}; build one with "
                          "collabui.actions.WEB.from_dict({...}) or a class like web.Click")
    return action


def _blocked_sentence(blocked: list[BlockedNavigation]) -> str:
    parts = [f"navigation to {e['url'][:160]} was blocked ({e['reason']})" for e in blocked[:3]]
    more = f" and {len(blocked) - 3} more" if len(blocked) > 3 else ""
    return "; ".join(parts) + more


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else type(exc).__name__


def _normalize_url(url: str) -> str:
    url = url.strip()
    if "://" in url or url.startswith(("about:", "data:", "file:", "javascript:")):
        return url
    return "https://" + url
