"""``check_device``: does a Device keep the contract the team relies on? (cf. Gymnasium's
``check_env``). Run it on your own device in a test before handing it to a team."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable
from typing import Any, TypeVar

from collabui.actions import Action, ActionSpace, Unknown
from collabui.devices.base import Device, Observation, StepOutcome
from collabui.errors import ConfigError, DeviceClosedError

__all__ = ["check_device"]

T = TypeVar("T")
_PROBE = Unknown(raw="<conformance probe>", reason="check_device sent an unparsable action")


def check_device(device: Device, *, probe_action: Action | None = None) -> None:
    """Check ``device`` against the Device contract; it is closed afterwards.

    Checked, in order: ``action_space`` is an ActionSpace; ``reset(seed=0)`` and ``observe()``
    return Observations with ``str`` text; ``act(Unknown(...))`` returns a StepOutcome whose
    observation has ``last_action_error`` set, without raising; ``probe_action`` (if given, e.g.
    a click on a known element) returns a StepOutcome; ``areset``/``aobserve``/``aact`` work
    inside ``asyncio.run``; ``close()`` twice is fine; ``observe``/``act``/``reset`` after close
    raise DeviceClosedError.

    Raises:
        ConfigError: naming the first property that does not hold.
    """
    _expect(isinstance(device, Device), "device is a collabui.devices.Device")
    _expect(isinstance(getattr(device, "action_space", None), ActionSpace),
            "device.action_space is an ActionSpace")
    _observation("reset(seed=0)", _run("reset(seed=0)", lambda: device.reset(seed=0)))
    _observation("observe()", _run("observe()", device.observe))
    _error_outcome("act(Unknown)", _run("act(Unknown)", lambda: device.act(_PROBE)))
    if probe_action is not None:
        _expect(probe_action in device.action_space,
                f"probe_action {probe_action} belongs to device.action_space")
        _outcome("act(probe_action)", _run("act(probe_action)", lambda: device.act(probe_action)))
    _run("the async twins inside asyncio.run", lambda: _in_fresh_loop(device))
    _run("close()", device.close)
    _run("a second close()", device.close)
    for what, call in (("observe()", device.observe), ("act()", lambda: device.act(_PROBE)),
                       ("reset()", device.reset)):
        try:
            call()
        except DeviceClosedError:
            continue
        except Exception as exc:  # noqa: BLE001 - reported as the failed property
            _fail(f"{what} after close() raises DeviceClosedError (it raised "
                  f"{type(exc).__name__}: {exc})")
        _fail(f"{what} after close() raises DeviceClosedError (it returned normally)")


def _in_fresh_loop(device: Device) -> None:
    async def probe() -> None:
        _observation("areset(seed=1)", await device.areset(seed=1))
        _observation("aobserve()", await device.aobserve())
        _error_outcome("aact(Unknown)", await device.aact(_PROBE))

    # A thread of its own: the caller may itself be running inside an event loop.
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, probe()).result(300)


def _run(what: str, call: Callable[[], T]) -> T:
    try:
        return call()
    except ConfigError as exc:
        if str(exc).startswith("check_device:"):
            raise
        _fail(f"{what} does not raise (it raised ConfigError: {exc})")
    except Exception as exc:  # noqa: BLE001 - any exception is the finding
        _fail(f"{what} does not raise (it raised {type(exc).__name__}: {exc})")
    raise AssertionError("unreachable")  # pragma: no cover - _fail always raises


def _observation(what: str, value: Any) -> None:
    _expect(isinstance(value, Observation), f"{what} returns an Observation (got "
            f"{type(value).__name__})")
    _expect(isinstance(value.text, str), f"{what} returns an Observation whose text is a str")


def _outcome(what: str, value: Any) -> None:
    _expect(isinstance(value, StepOutcome), f"{what} returns a StepOutcome (got "
            f"{type(value).__name__})")
    _observation(what, value.observation)


def _error_outcome(what: str, value: Any) -> None:
    _outcome(what, value)
    error = value.observation.last_action_error
    _expect(isinstance(error, str) and bool(error.strip()),
            f"{what} reports the failure in observation.last_action_error")


def _expect(condition: bool, prop: str) -> None:
    if not condition:
        _fail(prop)


def _fail(prop: str) -> None:
    raise ConfigError(f"check_device: failed: {prop}; fix the device so it keeps the Device "
                      "contract (see collabui.devices.base)")
