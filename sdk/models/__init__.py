"""Chat models: the interface, the embedded local model, LangChain adapters, and fakes.

Light names (the interface, the scripted fake, the spec loader, the conformance check) import
at once; ``LocalModel``, ``LangChainModel`` and ``embedded_model_dir`` load their modules on
first access so ``import collabui.models`` never pulls in torch or LangChain integrations.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from collabui.models.base import ChatModel, ChatRequest, ChatResult, Message
from collabui.models.checks import check_chat_model
from collabui.models.fake import ScriptedChatModel
from collabui.models.spec import load_model

if TYPE_CHECKING:
    from collabui.models.embedded import embedded_model_dir
    from collabui.models.langchain import LangChainModel
    from collabui.models.local import LocalModel

__all__ = [
    "ChatModel",
    "ChatRequest",
    "ChatResult",
    "Message",
    "ScriptedChatModel",
    "check_chat_model",
    "load_model",
    "LocalModel",
    "LangChainModel",
    "embedded_model_dir",
]

_LAZY = {
    "LocalModel": "collabui.models.local",
    "LangChainModel": "collabui.models.langchain",
    "embedded_model_dir": "collabui.models.embedded",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'collabui.models' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
