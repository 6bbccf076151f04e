"""The chat-model interface the team talks to.

A ``ChatModel`` answers a *batch* of requests in one call, so the team can send all nodes of a
superstep together (one batched ``generate`` locally; concurrent requests to a server).
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

__all__ = ["Message", "ChatRequest", "ChatResult", "ChatModel"]

#: One chat message: ``{"role": "system"|"user"|"assistant", "content": str}``.
Message = Mapping[str, str]


@dataclass(frozen=True)
class ChatRequest:
    """One generation request.

    Attributes:
        messages: the chat messages, oldest first.
        temperature: 0 means greedy decoding.
        max_new_tokens: generation budget.
        adapter: name of the LoRA adapter (per-agent policy) to use; None for the base model.
        seed: optional sampling seed for reproducible rollouts.
        structure: the screen in the prompt as the device structured it (``Observation.extra``'s
            ``tree`` of a web page, ``ui_elements`` of a phone screen), for policies that act on
            elements rather than text (the baselines); language models ignore it. None when only
            the text is known. Not compared or hashed.
    """

    messages: tuple[Message, ...]
    temperature: float = 0.0
    max_new_tokens: int = 256
    adapter: str | None = None
    seed: int | None = None
    structure: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class ChatResult:
    """One generation: the text and its accounting."""

    text: str
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    latency_s: float = 0.0
    extra: Mapping[str, object] = field(default_factory=dict)


class ChatModel(ABC):
    """Abstract chat model. Implement ``generate``; override ``agenerate`` for native async."""

    #: A short human-readable name, recorded in traces.
    name: str = "chat-model"
    #: TeamConfig fields this model was trained for (``prompt_style``, ``adapters``...): a team
    #: applies them where its own config says ``auto`` / None. Empty for untrained models.
    team_defaults: Mapping[str, Any] = MappingProxyType({})

    @abstractmethod
    def generate(self, requests: Sequence[ChatRequest]) -> list[ChatResult]:
        """Answer every request; results in request order."""

    async def agenerate(self, requests: Sequence[ChatRequest]) -> list[ChatResult]:
        return await asyncio.to_thread(self.generate, requests)

    def close(self) -> None:  # noqa: B027 - optional hook, no-op by default
        """Release resources (servers, GPU memory). Safe to call twice."""
