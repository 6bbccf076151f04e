"""The Device interface: what the team acts on (a browser tab, a MiniWoB++ task, a phone).

Contract (Gymnasium-like, but the observation is text for language agents):

* ``reset(seed=..., options=...) -> Observation`` starts an episode. For environments with a
  built-in task (MiniWoB++) the task text is ``Observation.task``.
* ``observe() -> Observation`` re-reads the current screen without acting.
* ``act(action) -> StepOutcome`` executes one action of ``device.action_space``. A recoverable
  failure (unknown element id, option not found) does *not* raise: it is reported in
  ``outcome.observation.last_action_error``. Infrastructure failures raise ``DeviceError``.
* ``close()`` releases every resource (processes, servers); it is idempotent.
* ``hide_on_screen(values, words=...)`` names text no screenshot may show from then on (secrets,
  typed passwords); ``screenshot()`` takes the current screen again, hiding it. Optional: the
  defaults hide nothing and take no screenshot (a device without screenshots).

Every method has an ``a``-prefixed async twin usable from asyncio code (``areset``, ``aobserve``,
``aact``, ``aclose``); the defaults run the sync method in a worker thread.
Devices are context managers (sync and async).
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from collabui.actions import Action, ActionSpace

__all__ = ["Observation", "StepOutcome", "Device"]


@dataclass(frozen=True)
class Observation:
    """What the agents see of the device at one moment.

    Attributes:
        text: the screen as the agents read it (simplified HTML for the web, an indexed element
            list for mobile).
        task: the task text when the environment defines one (MiniWoB++ utterance), else None.
        url: current URL (web) or foreground app package (mobile).
        tabs: titles of the open tabs (web), the current one marked by ``current_tab``.
        current_tab: index of the current tab.
        viewport: position of the viewport, e.g. ``"0 / 1.0"`` (pages scrolled / page count).
        last_action_error: why the previous action failed, if it did (recoverable failures).
        screenshot: PNG bytes when requested; never stored in graph state or trace lines.
        extra: device-specific details, JSON-serialisable.
    """

    text: str
    task: str | None = None
    url: str | None = None
    tabs: tuple[str, ...] = ()
    current_tab: int = 0
    viewport: str | None = None
    last_action_error: str | None = None
    screenshot: bytes | None = field(default=None, repr=False, compare=False)
    extra: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON form (without the screenshot bytes)."""
        return {
            "text": self.text,
            "task": self.task,
            "url": self.url,
            "tabs": list(self.tabs),
            "current_tab": self.current_tab,
            "viewport": self.viewport,
            "last_action_error": self.last_action_error,
            "extra": dict(self.extra),
        }


@dataclass(frozen=True)
class StepOutcome:
    """The result of ``Device.act``.

    ``reward`` is the environment's raw reward for this step (MiniWoB++: +1 success, -1
    failure, 0 while running); ``done`` is True when the environment ended the episode.
    """

    observation: Observation
    reward: float = 0.0
    done: bool = False
    info: Mapping[str, Any] = field(default_factory=dict)


class Device(ABC):
    """Abstract device. Subclasses implement the four sync methods and ``action_space``."""

    action_space: ActionSpace

    @abstractmethod
    def reset(self, *, seed: int | None = None, options: Mapping[str, Any] | None = None) -> Observation:
        """Start a new episode and return the first observation."""

    @abstractmethod
    def observe(self) -> Observation:
        """Return the current observation without acting."""

    @abstractmethod
    def act(self, action: Action) -> StepOutcome:
        """Execute one action and return what followed."""

    @abstractmethod
    def close(self) -> None:
        """Release all resources. Safe to call twice."""

    def hide_on_screen(self, values: Collection[str], *, words: Collection[str] = ()) -> None:  # noqa: B027
        """Hide text in every screenshot taken from now on: each of ``values`` wherever it
        occurs, each of ``words`` where it stands as a whole word. Replaces the previous set.
        The episode loop calls it with the episode's secrets and the passwords it knows
        (``collabui.redaction``). Default (optional, hence not abstract): a device that takes
        no screenshots, or cannot hide text in them, ignores it."""

    def screenshot(self) -> bytes | None:
        """The current screen as PNG, taken now with the hidden text hidden; None when the
        device takes no screenshots (the default)."""
        return None

    async def ascreenshot(self) -> bytes | None:
        return await asyncio.to_thread(self.screenshot)

    async def areset(self, *, seed: int | None = None, options: Mapping[str, Any] | None = None) -> Observation:
        return await asyncio.to_thread(self.reset, seed=seed, options=options)

    async def aobserve(self) -> Observation:
        return await asyncio.to_thread(self.observe)

    async def aact(self, action: Action) -> StepOutcome:
        return await asyncio.to_thread(self.act, action)

    async def aclose(self) -> None:
        await asyncio.to_thread(self.close)

    def __enter__(self) -> Device:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Device:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
