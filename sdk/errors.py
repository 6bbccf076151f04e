"""Every error collabui raises on purpose.

Infrastructure failures (a browser that will not start, a model that will not load, an endpoint
that does not answer) raise one of these. Recoverable action failures (an element id that does
not exist, a click that missed) do *not* raise: they come back in the next observation as
``Observation.last_action_error`` so the agents can react.

Every message is one line that names the problem and says how to fix it.
"""

from __future__ import annotations

__all__ = [
    "CollabUIError",
    "ConfigError",
    "TopologyError",
    "ActionError",
    "DeviceError",
    "BrowserNotFoundError",
    "DeviceClosedError",
    "EnvNotFoundError",
    "ModelError",
    "ModelLoadError",
    "EndpointError",
    "TraceError",
]


class CollabUIError(Exception):
    """Base class of all collabui errors."""


class ConfigError(CollabUIError, ValueError):
    """A configuration value is invalid."""


class TopologyError(ConfigError):
    """A message graph is not a valid DAG over the team's agents."""


class ActionError(CollabUIError, ValueError):
    """An action was constructed with invalid arguments."""


class DeviceError(CollabUIError):
    """A device (browser, phone) failed in a way the agents cannot recover from."""


class BrowserNotFoundError(DeviceError):
    """No Chromium executable was found."""


class DeviceClosedError(DeviceError):
    """The device was used after it was closed, or it died."""


class EnvNotFoundError(ConfigError):
    """An environment or task name is unknown."""


class ModelError(CollabUIError):
    """A chat model failed to generate."""


class ModelLoadError(ModelError):
    """A model could not be loaded."""


class EndpointError(ModelError):
    """A remote chat endpoint did not answer."""


class TraceError(CollabUIError):
    """A trace file is missing, malformed or of an unsupported schema version."""
