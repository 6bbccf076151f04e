"""collabui: a team of role-free LLM agents that operates web browsers and Android phones.

The public surface is re-exported here lazily, so ``import collabui`` stays light: LangGraph,
torch, transformers and Playwright load only when the names that need them are used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "CollabAgentTeam": "collabui.team",
    "TeamStep": "collabui.team",
    "Proposal": "collabui.team",
    "TeamConfig": "collabui.config",
    "EpisodeResult": "collabui.episode",
    "ApprovalRequest": "collabui.approval",
    "EpisodeStore": "collabui.durable",
    "StepRecord": "collabui.episode",
    "Event": "collabui.events",
    "EpisodeStarted": "collabui.events",
    "StepStarted": "collabui.events",
    "ProposalMade": "collabui.events",
    "VoteDecided": "collabui.events",
    "ActionExecuted": "collabui.events",
    "StepEnded": "collabui.events",
    "EpisodeEnded": "collabui.events",
    "EpisodeStream": "collabui.streaming",
    "AsyncEpisodeStream": "collabui.streaming",
    "VoteResult": "collabui.vote",
    "majority_vote": "collabui.vote",
    "parse_action": "collabui.parsing",
    "parse_proposal": "collabui.parsing",
    "Action": "collabui.actions",
    "ActionSpace": "collabui.actions",
    "WEB": "collabui.actions",
    "MOBILE": "collabui.actions",
    "ChatModel": "collabui.models",
    "ChatRequest": "collabui.models",
    "ChatResult": "collabui.models",
    "load_model": "collabui.models.spec",
    "Device": "collabui.devices",
    "Observation": "collabui.devices",
    "StepOutcome": "collabui.devices",
    "make_env": "collabui.devices.registry",
    "list_envs": "collabui.devices.registry",
    "read_trace": "collabui.trace",
    "JsonlTraceStore": "collabui.trace",
    "MemoryTraceStore": "collabui.trace",
    "TraceStore": "collabui.trace",
}

__all__ = [
    "Action",
    "ActionExecuted",
    "ActionSpace",
    "ApprovalRequest",
    "AsyncEpisodeStream",
    "ChatModel",
    "ChatRequest",
    "ChatResult",
    "CollabAgentTeam",
    "Device",
    "EpisodeEnded",
    "EpisodeResult",
    "EpisodeStarted",
    "EpisodeStore",
    "EpisodeStream",
    "Event",
    "JsonlTraceStore",
    "MOBILE",
    "MemoryTraceStore",
    "Observation",
    "Proposal",
    "ProposalMade",
    "StepEnded",
    "StepOutcome",
    "StepRecord",
    "StepStarted",
    "TeamConfig",
    "TeamStep",
    "TraceStore",
    "VoteDecided",
    "VoteResult",
    "WEB",
    "list_envs",
    "load_model",
    "majority_vote",
    "make_env",
    "parse_action",
    "parse_proposal",
    "read_trace",
    "__version__",
]

if TYPE_CHECKING:  # pragma: no cover
    from collabui.actions import MOBILE, WEB, Action, ActionSpace
    from collabui.approval import ApprovalRequest
    from collabui.config import TeamConfig
    from collabui.devices import Device, Observation, StepOutcome
    from collabui.devices.registry import list_envs, make_env
    from collabui.durable import EpisodeStore
    from collabui.episode import EpisodeResult, StepRecord
    from collabui.events import (
        ActionExecuted,
        EpisodeEnded,
        EpisodeStarted,
        Event,
        ProposalMade,
        StepEnded,
        StepStarted,
        VoteDecided,
    )
    from collabui.models import ChatModel, ChatRequest, ChatResult
    from collabui.models.spec import load_model
    from collabui.parsing import parse_action, parse_proposal
    from collabui.streaming import AsyncEpisodeStream, EpisodeStream
    from collabui.team import CollabAgentTeam, Proposal, TeamStep
    from collabui.trace import JsonlTraceStore, MemoryTraceStore, TraceStore, read_trace
    from collabui.vote import VoteResult, majority_vote


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'collabui' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
