"""A scripted device for tests: serves fixed screens and records the actions it receives.

Example::

    device = FakeDevice(["<button[A]| OK>", "<div| done>"], task="Click OK",
                        success_when=lambda a: a == Click("A"))
    device.reset()
    outcome = device.act(Click("A"))   # reward 1.0, done
    device.actions                     # [Click(element_id='A')]
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from collabui.actions import WEB, Action, ActionSpace, Unknown
from collabui.devices.base import Device, Observation, StepOutcome
from collabui.errors import ActionError, ConfigError, DeviceClosedError, DeviceError

__all__ = ["FakeDevice"]

ActionTest = Callable[[Action], bool]


class FakeDevice(Device):
    """Scripted screens in a fixed order; each executed action advances to the next screen.

    Contract (the same as real devices, so ``check_device`` passes):

    * ``reset`` shows screen 0 and clears ``actions``; ``seeds`` records every reset's seed.
    * ``act`` records the action. ``Unknown`` actions and actions outside ``action_space`` do
      not advance and come back with ``last_action_error``. Otherwise: ``success_when(action)``
      ends the episode with ``success_reward``, ``failure_when(action)`` with
      ``failure_reward``, a terminal action (finish, status...) with 0; else the next screen
      (the last one repeats). ``max_steps`` truncates (done, ``info["truncated"]``).
    * ``close`` is idempotent; any use afterwards raises DeviceClosedError.

    Args:
        screens: the screens, as Observations or plain text.
        task: task text set on screens that have none.
        action_space: the space the device accepts (WEB by default).
        success_when, failure_when: predicates on the executed action.
        success_reward, failure_reward: rewards of those outcomes.
        max_steps: episode step cap (None: no cap).
    """

    def __init__(self, screens: Sequence[Observation | str], *, task: str | None = None,
                 action_space: ActionSpace = WEB, success_when: ActionTest | None = None,
                 failure_when: ActionTest | None = None, success_reward: float = 1.0,
                 failure_reward: float = -1.0, max_steps: int | None = None) -> None:
        if isinstance(screens, str) or not screens:
            raise ConfigError("FakeDevice needs a non-empty list of screens (Observations or "
                              "strings)")
        self.screens = [_as_observation(s, task, i) for i, s in enumerate(screens)]
        self.action_space = action_space
        self.success_when, self.failure_when = success_when, failure_when
        self.success_reward, self.failure_reward = float(success_reward), float(failure_reward)
        self.max_steps = max_steps
        self.actions: list[Action] = []
        self.seeds: list[int | None] = []
        self.closed = False
        self._index: int | None = None
        self._done = False

    def _check(self) -> None:
        if self.closed:
            raise DeviceClosedError("FakeDevice is closed; create a new one")
        if self._index is None:
            raise DeviceError("no episode yet; call reset() before observe() or act()")

    def reset(self, *, seed: int | None = None, options: Mapping[str, Any] | None = None) -> Observation:
        if self.closed:
            raise DeviceClosedError("FakeDevice is closed; create a new one")
        self.seeds.append(seed)
        self.actions = []
        self._index, self._done = 0, False
        return self.screens[0]

    def observe(self) -> Observation:
        self._check()
        return self.screens[self._index or 0]

    def act(self, action: Action) -> StepOutcome:
        self._check()
        if not isinstance(action, Action):
            raise ActionError(f"act() needs an Action, got {type(action).__name__}; build one "
                              "with device.action_space.from_dict({...})")
        self.actions.append(action)
        info: dict[str, Any] = {"step": len(self.actions)}
        if self._done:
            return self._stay("the episode is over; call reset() to start a new one", True, info)
        if isinstance(action, Unknown):
            reason = action.reason or "the proposal was not understood"
            return self._stay(f"no action was executed: {reason}", False, info)
        if action not in self.action_space:
            return self._stay(f"'{action.name}' is not a {self.action_space.name} action", False, info)
        reward, done = 0.0, bool(action.terminal)
        if self.success_when is not None and self.success_when(action):
            reward, done = self.success_reward, True
        elif self.failure_when is not None and self.failure_when(action):
            reward, done = self.failure_reward, True
        if not done:
            self._index = min((self._index or 0) + 1, len(self.screens) - 1)
            if self.max_steps is not None and len(self.actions) >= self.max_steps:
                done, info["truncated"] = True, True
        self._done = done
        info["screen"] = self._index
        return StepOutcome(self.screens[self._index or 0], reward, done, info)

    def _stay(self, error: str, done: bool, info: dict[str, Any]) -> StepOutcome:
        info["screen"] = self._index
        screen = dataclasses.replace(self.screens[self._index or 0], last_action_error=error)
        return StepOutcome(screen, 0.0, done, info)

    def close(self) -> None:
        self.closed = True


def _as_observation(screen: Observation | str, task: str | None, index: int) -> Observation:
    if isinstance(screen, str):
        return Observation(text=screen, task=task)
    if not isinstance(screen, Observation):
        raise ConfigError(f"FakeDevice screen {index} is a {type(screen).__name__}; pass an "
                          "Observation or a string")
    return screen if screen.task or task is None else dataclasses.replace(screen, task=task)
