"""Chat models: the interface, the embedded local model, LangChain adapters, and fakes."""

from __future__ import annotations

from collabui.models.base import ChatModel, ChatRequest, ChatResult, Message

__all__ = ["ChatModel", "ChatRequest", "ChatResult", "Message"]
