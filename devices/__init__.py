"""Devices the team acts on."""

from __future__ import annotations

from collabui.devices.base import Device, Observation, StepOutcome

__all__ = ["Device", "Observation", "StepOutcome"]
