"""MiniWoB++ tasks (from the ``miniwob`` PyPI package) as a BrowserDevice.

The package's ``html/`` folder is served on 127.0.0.1 by a small threaded HTTP server owned by
the environment (an ephemeral port, stopped in ``close()``). Each ``reset(seed=...)`` reuses the
loaded task page (reloading it only if needed), seeds ``Math.random``, lengthens MiniWoB's 10 s
episode timer (a team of LLM agents takes far longer per step than the benchmark's humans) and starts
the episode. Rewards follow MiniWoB: raw +1 success / -1 failure when the episode ends.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import threading
from collections.abc import Mapping
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from collabui.actions import Action
from collabui.devices.base import Observation, StepOutcome
from collabui.devices.browser import BrowserConfig, BrowserDevice
from collabui.devices.navigation import NavigationGuard
from collabui.errors import ConfigError, DeviceError, EnvNotFoundError

__all__ = ["MiniWoBEnv", "miniwob_html_dir", "miniwob_tasks", "synthetic_tasks", "TASK_AREA"]

#: The MiniWoB++ task area in CSS pixels (width, height).
TASK_AREA = (160, 210)
#: Browser defaults for MiniWoB: the official harness's 500x320 window, short local timeouts.
_DEFAULTS: dict[str, Any] = {"viewport": (500, 320), "action_timeout_s": 2.0,
                             "navigation_timeout_s": 10.0}
_GLOBALS = ("WOB_DONE_GLOBAL", "WOB_RAW_REWARD_GLOBAL", "WOB_REWARD_GLOBAL", "WOB_REWARD_REASON")

_START = """({seed, maxTime}) => {
  if (document.activeElement && document.activeElement.blur) document.activeElement.blur();
  core.EPISODE_MAX_TIME = maxTime;
  if (seed !== null) Math.seedrandom(seed);
  core.startEpisodeReal();
  const u = core.getUtterance();
  if (typeof u === 'string') return {utterance: u, fields: null};
  return {utterance: (u && u.utterance) || JSON.stringify(u), fields: (u && u.fields) || null};
}"""
_READY = ("() => typeof core !== 'undefined' && core.cover_div !== null && "
          "typeof genProblem === 'function'")
_READ_GLOBALS = "(names) => names.map((n) => window[n] === undefined ? null : window[n])"


def miniwob_html_dir() -> Path:
    """The installed ``miniwob`` package's ``html`` folder (found without importing it).

    Raises:
        ConfigError: the package is not installed.
    """
    spec = importlib.util.find_spec("miniwob")
    locations = list(spec.submodule_search_locations or []) if spec else []
    if not locations:
        raise ConfigError("the MiniWoB++ tasks are not installed; run `pip install "
                          "'collabui-agents[web]'` (or `pip install miniwob`)")
    return Path(locations[0]) / "html"


def miniwob_tasks() -> list[str]:
    """Names of every MiniWoB++ task page, sorted (e.g. ``click-button``)."""
    return sorted(p.stem for p in (miniwob_html_dir() / "miniwob").glob("*.html"))


#: collabui's own MiniWoB-style pages (``devices/pages``), served under this URL folder.
_PAGES_DIR = Path(__file__).parent / "pages"
_PAGES_URL = "/collabui/"
#: The synthetic page kinds (``synth.generate(kind)`` in ``pages/synth.js``); one html
#: file, ``pages/synth.html``, serves them all.
_SYNTHETIC_KINDS = ("choices", "fields", "forms")


def synthetic_tasks() -> list[str]:
    """collabui's synthetic form pages (``synth-fields``, ``synth-choices``, ``synth-forms``).

    MiniWoB-style pages shipped with this package: a seeded generator of small forms and the
    instruction that fills them, rewarded by MiniWoB's own core, so every MiniWoB tool (the
    environment, the verified search, the evaluation) drives them unchanged. Training data only:
    they are not MiniWoB++ tasks and no benchmark figure includes them.
    """
    return [f"synth-{kind}" for kind in _SYNTHETIC_KINDS]


def _task_name(task: str) -> str:
    if not isinstance(task, str):
        raise EnvNotFoundError(f"task must be a string like 'click-button', got {task!r}")
    name = task.removeprefix("miniwob/").removeprefix("miniwob-mobile/")
    if name not in miniwob_tasks() and name not in synthetic_tasks():
        from collabui.devices.registry import env_not_found

        raise env_not_found(f"miniwob/{name}")
    return name


class _QuietHandler(SimpleHTTPRequestHandler):
    def translate_path(self, path: str) -> str:
        # /collabui/... comes from the package's own pages; everything else (core.js, the
        # MiniWoB tasks) from the miniwob package, so the pages' ../core/ links resolve.
        if path.startswith(_PAGES_URL):
            name = path[len(_PAGES_URL):].split("?", 1)[0].split("#", 1)[0]
            if name.removesuffix(".html") in synthetic_tasks():
                name = "synth.html"
            if "/" not in name and (_PAGES_DIR / name).is_file():
                return str(_PAGES_DIR / name)
            return str(_PAGES_DIR / "missing")
        return super().translate_path(path)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass  # one line per file request would drown the user's logs


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a browser dropping a connection mid-reply (BrokenPipe) is not worth a traceback


class _TaskServer:
    """Serves the MiniWoB html folder on 127.0.0.1:<ephemeral port> from a daemon thread."""

    def __init__(self, root: Path) -> None:
        handler = functools.partial(_QuietHandler, directory=str(root))
        self.httpd = _QuietServer(("127.0.0.1", 0), handler)
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                       name="collabui-miniwob-http", daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)


class MiniWoBEnv(BrowserDevice):
    """One MiniWoB++ task (``make_env("miniwob/click-button")``).

    ``Observation.text`` covers the task area only; the instruction is ``Observation.task``.
    ``StepOutcome.reward`` is the raw reward (+1/-1) on the step the episode ends, else 0; ``info``
    carries ``raw_reward``, ``time_scaled_reward`` and ``reason``. An episode that ends by itself
    (a task's own timer) is reported on the next ``act``, which then executes nothing. A terminal
    action (finish, user_input) on an unfinished episode ends it with reward 0.

    ``reset(options={"task_name": "enter-text"})`` switches task in place (same browser).

    Args:
        task: task name, with or without the ``miniwob/`` prefix.
        episode_max_time_s: MiniWoB's episode timer (default 10 minutes instead of 10 s).
        config, overrides: browser settings (see BrowserConfig); MiniWoB defaults to a 500x320
            viewport and 2 s action timeouts.
    """

    skip_selectors = ("#query", "#reward-display", "#sync-task-cover", "#click-canvas",
                      "#attention-canvas")
    page_globals = _GLOBALS
    #: Environment-name prefix reported in observations and ``describe()``.
    env_prefix = "miniwob"

    def __init__(self, task: str, *, episode_max_time_s: float = 600.0,
                 config: BrowserConfig | None = None, **overrides: Any) -> None:
        self.task_name = _task_name(task)
        if not isinstance(episode_max_time_s, int | float) or episode_max_time_s <= 0:
            raise ConfigError(f"episode_max_time_s must be a positive number, got {episode_max_time_s!r}")
        if config is None:
            overrides = {**_DEFAULTS, **overrides}
        super().__init__(config=config, **overrides)
        self.episode_max_time_s = float(episode_max_time_s)
        self._server: _TaskServer | None = None
        self._seed: int | None = None
        self._fields: Any = None
        self._reported = False

    def _switch_task(self, task: str) -> None:
        # Same browser and server, another task: cheaper than a new environment per task.
        self.task_name = _task_name(task)

    def close(self) -> None:
        try:
            super().close()
        finally:
            server, self._server = self._server, None
            if server is not None:
                server.stop()

    @property
    def url(self) -> str | None:
        """The task page URL (None until the first reset)."""
        if self._server is None:
            return None
        folder = _PAGES_URL if self.task_name.startswith("synth-") else "/miniwob/"
        return f"{self._server.base_url}{folder}{self.task_name}.html"

    async def _reset(self, seed: int | None, options: dict[str, Any]) -> Observation:
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise ConfigError(f"seed must be an integer or None, got {seed!r}")
        if options.get("task_name"):
            self._switch_task(str(options["task_name"]))
        if self._browser is None:
            await self._launch()
        if self._server is None:
            self._server = _TaskServer(miniwob_html_dir())
        # The task's own local files only (plus hosts the caller allowed explicitly).
        self._guard = NavigationGuard(self.config.allowed_domains or (), (self._server.base_url,))
        self._blocked, self._navigations_seen = [], 0
        page = await self._task_page()
        started = await page.evaluate(_START, {"seed": seed,
                                               "maxTime": int(self.episode_max_time_s * 1000)})
        # Starting a task is a page-level wait, not an element action: a loaded machine can
        # take longer than the 2 s action timeout (seen when evaluations share the CPU).
        await page.wait_for_function("() => WOB_TASK_READY !== false", timeout=self._page_timeout_ms)
        self._task = options.get("task") or started["utterance"]
        self._fields, self._seed, self._reported = started["fields"], seed, False
        self._observations = 0
        return await self._observe()

    @property
    def _page_timeout_ms(self) -> float:
        return self.config.navigation_timeout_s * 1000

    async def _task_page(self) -> Any:
        """The task page, ready for a new episode.

        Like the official harness, episodes reuse the loaded page (``genProblem`` rebuilds the
        task; the seed alone fixes it): a reload costs 0.2-0.5 s per episode on 2 cores. The page
        is reloaded only when the agents navigated away or broke it; extra tabs are closed.
        """
        from playwright.async_api import Error as PlaywrightError

        if self._context is None:
            await self._new_context()
        pages = self._context.pages
        for extra in pages[1:]:
            await extra.close()
        self._page = pages[0] if pages else None
        page = self._current_page()
        try:
            ready = page.url == self.url and await page.evaluate(_READY)
        except PlaywrightError as exc:
            self._raise_if_dead(exc)
            ready = False
        if not ready:
            try:
                await page.goto(str(self.url), wait_until="load")
                await page.wait_for_function(_READY, timeout=self._page_timeout_ms)
            except PlaywrightError as exc:
                self._raise_if_dead(exc)
                raise DeviceError(f"the MiniWoB task page did not load: {str(exc).splitlines()[0]}; "
                                  "check the miniwob package install") from None
        return page

    async def _observe(self, error: str | None = None) -> Observation:
        observation = await super()._observe(error)
        extra = {**observation.extra, "task_name": f"{self.env_prefix}/{self.task_name}", "seed": self._seed,
                 **self._state()}
        if self._fields:
            extra["fields"] = self._fields
        url = observation.url
        if url and self._server and url.startswith(self._server.base_url):
            # The local server's port changes every run: left in, it would make every prompt
            # (and so sampling, seeded baselines and evaluations) differ between identical runs.
            url = url[len(self._server.base_url):]
        return dataclasses.replace(observation, extra=extra, url=url)

    def _shuffle_key(self) -> tuple[Any, ...]:
        # The task and episode seed too: every episode gets its own order, and a replay of one
        # seed with the same actions sees the same observations (an environment-verified critic
        # relies on that).
        return (self.config.shuffle_seed, self.task_name, self._seed, self._observations)

    async def _capture(self, page: Any) -> bytes:
        x, y, width, height = self._screenshot_area(page, {})
        return await page.screenshot(clip={"x": x, "y": y, "width": width, "height": height})

    def _screenshot_area(self, page: Any, snap: dict[str, Any]) -> list[int]:
        return [0, 0, *TASK_AREA]  # the task area only: the rest of the page is blank

    def _state(self) -> dict[str, Any]:
        g = self._page_globals
        return {"done": bool(g.get("WOB_DONE_GLOBAL")),
                "raw_reward": float(g.get("WOB_RAW_REWARD_GLOBAL") or 0.0),
                "time_scaled_reward": float(g.get("WOB_REWARD_GLOBAL") or 0.0),
                "reason": g.get("WOB_REWARD_REASON")}

    async def _read_globals(self) -> None:
        values = await self._current_page().evaluate(_READ_GLOBALS, list(_GLOBALS))
        self._page_globals = dict(zip(_GLOBALS, values, strict=True))

    async def _act(self, action: Action) -> StepOutcome:
        await self._read_globals()
        if self._reported:
            observation = await self._observe("the episode is over; call reset() to start a new one")
            return StepOutcome(observation, 0.0, True, self._info())
        if self._page_globals.get("WOB_DONE_GLOBAL"):
            # Ended by itself between steps (a task timer): report it, execute nothing.
            self._reported = True
            state = self._state()
            observation = await self._observe(
                f"the episode had already ended ({state['reason'] or 'no reason given'}); "
                "nothing was executed")
            return StepOutcome(observation, state["raw_reward"], True, self._info())
        outcome = await super()._act(action)
        state = self._state()
        done = state["done"] or bool(action.terminal)
        self._reported = done
        reward = state["raw_reward"] if state["done"] else 0.0
        return StepOutcome(outcome.observation, reward, done, {**outcome.info, **self._info()})

    def _info(self) -> dict[str, Any]:
        state = self._state()
        return {"raw_reward": state["raw_reward"], "time_scaled_reward": state["time_scaled_reward"],
                "reason": state["reason"], "env_done": state["done"]}

    def describe(self) -> Mapping[str, Any]:
        """Identity of the environment, for traces."""
        return {"env": f"{self.env_prefix}/{self.task_name}", "episode_max_time_s": self.episode_max_time_s,
                "viewport": list(self.config.viewport), "element_format": self.config.element_format,
                "shuffle_elements": self.config.shuffle_elements, "shuffle_seed": self.config.shuffle_seed}
