"""Any LangChain chat model (OpenAI-compatible servers such as vLLM, hosted APIs, fakes).

A batch becomes concurrent requests (``batch`` with ``max_concurrency`` = batch size, or
``asyncio.gather`` in ``agenerate``) so a server can batch them itself. Per-request settings are
bound per request when the wrapped model is an OpenAI chat model (``ChatOpenAI`` and kin):
temperature, max tokens, seed, and the adapter as the *model name* (vLLM serves each
``--lora-modules NAME=PATH`` adapter under ``NAME``). Other models run with their own settings;
each result then lists the ignored request fields in ``extra["ignored"]``.

``guided_json`` turns on schema-guided decoding on vLLM servers (its structured outputs, sent
as ``extra_body``): every answer is then ``{"action": {...}, "thought": ...}`` valid under
:func:`collabui.serving.schema.answer_schema`, which ``parse_proposal`` reads.
"""

from __future__ import annotations

import asyncio
import socket
import sys
import time
from collections.abc import Sequence
from typing import Any

from collabui.errors import ConfigError, EndpointError, ModelError, ModelLoadError
from collabui.models.base import ChatModel, ChatRequest, ChatResult
from collabui.redaction import redact_url
from collabui.serving.schema import guided_schema

__all__ = ["LangChainModel", "DEFAULT_TIMEOUT_S", "DEFAULT_MAX_RETRIES"]

DEFAULT_TIMEOUT_S = 60.0
DEFAULT_MAX_RETRIES = 1


class LangChainModel(ChatModel):
    """Adapt a langchain-core ``BaseChatModel`` to the batched ChatModel interface.

    Args:
        chat: the LangChain chat model.
        name: name recorded in traces (default: the model name or LangChain type).
        base_url: shown in connection errors (default: read from ``chat`` when it has one).
        per_request_params: bind temperature/max tokens/seed/adapter per request; ``None``
            means "only for OpenAI chat models", whose parameters we know.
        guided_json: constrain every answer to a JSON schema (vLLM structured outputs): an
            action space (``"web"``, ``"mobile"``, an ActionSpace) for its answer schema, or a
            schema dict; None (default) decodes freely. Needs per-request parameters.

    Raises (from generate/agenerate):
        EndpointError: the server did not answer (refused, timed out, unknown host).
        ConfigError: a request names an adapter but the model cannot switch adapters.
        ModelError: the server answered with an error.
    """

    def __init__(
        self,
        chat: Any,
        *,
        name: str | None = None,
        base_url: str | None = None,
        per_request_params: bool | None = None,
        guided_json: Any = None,
    ) -> None:
        from langchain_core.language_models import BaseChatModel

        if not isinstance(chat, BaseChatModel):
            raise ConfigError(
                f"LangChainModel wraps a langchain-core BaseChatModel, got {type(chat).__name__}; "
                "pass e.g. ChatOpenAI(...)"
            )
        self.chat = chat
        is_openai = _is_openai_chat(chat)
        self.per_request_params = is_openai if per_request_params is None else per_request_params
        # Shown in errors only (the client keeps the real one): credentials in it are masked.
        self.base_url = redact_url(base_url or _base_url_of(chat))
        model_name = getattr(chat, "model_name", None) or getattr(chat, "model", None)
        self.name = name or (f"openai:{model_name}" if is_openai else f"langchain:{chat._llm_type}")
        self.guided_schema = guided_schema(guided_json)
        if self.guided_schema is not None and not self.per_request_params:
            raise ConfigError(
                f"guided_json needs an OpenAI-compatible server (vLLM); {self.name} cannot take a "
                "schema per request: drop guided_json or use --model openai:MODEL@URL"
            )

    @classmethod
    def from_openai(
        cls,
        model: str,
        base_url: str | None = None,
        *,
        api_key: str | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        max_retries: int = DEFAULT_MAX_RETRIES,
        guided_json: Any = None,
        **kwargs: Any,
    ) -> LangChainModel:
        """Build a ``ChatOpenAI`` client for an OpenAI-compatible server and wrap it.

        ``api_key`` defaults to ``$OPENAI_API_KEY``, else ``"EMPTY"`` (what local vLLM accepts).
        ``timeout`` (seconds per try) and ``max_retries`` (tries after the first, with backoff,
        on connection errors, timeouts and 5xx answers) apply to every call; ``guided_json`` is
        as in the constructor; extra kwargs go to ``ChatOpenAI``.

        Raises:
            ModelLoadError: langchain-openai is not installed.
        """
        import os

        try:
            from langchain_openai import ChatOpenAI
        except ImportError:
            raise ModelLoadError(
                "openai: models need langchain-openai; run `pip install 'collabui-agents[openai]'`"
            ) from None
        key = api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY"
        chat = ChatOpenAI(
            model=model, base_url=base_url, api_key=key, timeout=timeout, max_retries=max_retries, **kwargs
        )
        return cls(chat, name=f"openai:{model}", base_url=base_url, guided_json=guided_json)

    def generate(self, requests: Sequence[ChatRequest]) -> list[ChatResult]:
        """Send all requests concurrently; results in request order."""
        requests = list(requests)
        if not requests:
            return []
        from langchain_core.runnables import RunnableLambda

        runner = RunnableLambda(self._invoke_one)
        outcomes = runner.batch(requests, config={"max_concurrency": len(requests)}, return_exceptions=True)
        return self._collect(outcomes)

    async def agenerate(self, requests: Sequence[ChatRequest]) -> list[ChatResult]:
        """Native async: one ``ainvoke`` per request, gathered."""
        requests = list(requests)
        outcomes = await asyncio.gather(*(self._ainvoke_one(r) for r in requests), return_exceptions=True)
        return self._collect(outcomes)

    # -- internals ---------------------------------------------------------------------------

    def _runnable(self, request: ChatRequest) -> tuple[Any, list[str]]:
        """The runnable for ``request`` and the request fields it cannot honour."""
        if not self.per_request_params:
            if request.adapter is not None:
                raise ConfigError(
                    f"request asks for adapter {request.adapter!r} but {self.name} cannot switch "
                    "adapters; serve them from an OpenAI-compatible server (vLLM --lora-modules)"
                )
            ignored = ["temperature", "max_new_tokens"] + (["seed"] if request.seed is not None else [])
            return self.chat, ignored
        params: dict[str, Any] = {"temperature": request.temperature, "max_tokens": request.max_new_tokens}
        if request.seed is not None:
            params["seed"] = request.seed
        if request.adapter is not None:
            params["model"] = request.adapter
        if self.guided_schema is not None:
            # vLLM >= 0.11 reads structured outputs from the request body; unlike OpenAI's
            # response_format this makes the client parse nothing, so a cut-off answer still
            # reaches our tolerant parser instead of raising.
            params["extra_body"] = {"structured_outputs": {"json": self.guided_schema}}
        return self.chat.bind(**params), []

    def _invoke_one(self, request: ChatRequest) -> ChatResult:
        runnable, ignored = self._runnable(request)
        started = time.perf_counter()
        message = runnable.invoke(_to_messages(request))
        return _result(message, time.perf_counter() - started, ignored)

    async def _ainvoke_one(self, request: ChatRequest) -> ChatResult:
        runnable, ignored = self._runnable(request)
        started = time.perf_counter()
        message = await runnable.ainvoke(_to_messages(request))
        return _result(message, time.perf_counter() - started, ignored)

    def _collect(self, outcomes: Sequence[Any]) -> list[ChatResult]:
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise self._translate(outcome) from outcome
        return list(outcomes)

    def _translate(self, exc: BaseException) -> Exception:
        """Turn a dependency's exception into one of our one-line errors."""
        if isinstance(exc, (ConfigError, ModelError)):
            return exc
        reason = _connection_failure(exc)
        if reason is not None:
            retries = getattr(self.chat, "max_retries", None)
            tries = f" after {retries + 1} {'try' if retries == 0 else 'tries'}" if isinstance(retries, int) else ""
            timeout = getattr(self.chat, "request_timeout", None)
            more = f", or raise timeout= (now {timeout} s)" if reason == "timed out" and timeout else ""
            return EndpointError(
                f"no answer from {self.base_url} ({reason}){tries}; start the server (e.g. `collabui "
                f"serve`) or check --model openai:MODEL@URL{more}"
            )
        if getattr(exc, "status_code", None) == 404:
            return ModelError(
                f"{self.base_url} does not serve the requested model ({_first_line(exc)}); check the "
                "model name, or start vLLM with --lora-modules NAME=PATH for adapters"
            )
        return ModelError(f"{self.name} failed ({type(exc).__name__}: {_first_line(exc)}); check the server logs")


def _to_messages(request: ChatRequest) -> list[Any]:
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

    kinds = {"system": SystemMessage, "user": HumanMessage, "human": HumanMessage, "assistant": AIMessage, "ai": AIMessage}
    messages = []
    for message in request.messages:
        kind = kinds.get(str(message.get("role", "")))
        if kind is None:
            raise ConfigError(f"unknown message role {message.get('role')!r}; use system, user or assistant")
        messages.append(kind(content=str(message.get("content", ""))))
    return messages


def _result(message: Any, latency: float, ignored: list[str]) -> ChatResult:
    content = getattr(message, "content", message)
    if isinstance(content, list):  # content blocks: keep the text ones
        content = "".join(b if isinstance(b, str) else str(b.get("text", "")) for b in content)
    usage = getattr(message, "usage_metadata", None) or {}
    extra: dict[str, Any] = {"ignored": ignored} if ignored else {}
    return ChatResult(
        text=str(content),
        prompt_tokens=usage.get("input_tokens"),
        completion_tokens=usage.get("output_tokens"),
        latency_s=latency,
        extra=extra,
    )


def _is_openai_chat(chat: Any) -> bool:
    # Only look if langchain_openai is already imported: a ChatOpenAI instance implies it is,
    # and this keeps wrapping other models from importing openai.
    module = sys.modules.get("langchain_openai.chat_models.base")
    base = getattr(module, "BaseChatOpenAI", None)
    return base is not None and isinstance(chat, base)


def _base_url_of(chat: Any) -> str:
    for attr in ("openai_api_base", "base_url", "api_base", "endpoint"):
        value = getattr(chat, attr, None)
        if isinstance(value, str) and value:
            return value
    return "https://api.openai.com/v1" if _is_openai_chat(chat) else f"the {chat._llm_type} model"


def _connection_failure(exc: BaseException) -> str | None:
    """A short reason if ``exc`` (or its causes) is a connection failure, else None."""
    seen: set[int] = set()
    current: BaseException | None = exc
    found: str | None = None
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        found = _reason(current) or found
        if isinstance(current, (socket.gaierror, ConnectionRefusedError)):
            return found
        current = current.__cause__ or current.__context__
    return found


def _reason(exc: BaseException) -> str | None:
    name = type(exc).__name__
    text = str(exc).lower()
    if isinstance(exc, socket.gaierror) or "name or service not known" in text or "nodename" in text:
        return "unknown host"
    if isinstance(exc, ConnectionRefusedError) or "connection refused" in text:
        return "connection refused"
    if isinstance(exc, TimeoutError) or "timeout" in name.lower() or "timed out" in text:
        return "timed out"
    if isinstance(exc, ConnectionError) or name in {"APIConnectionError", "ConnectError", "ConnectTimeout"}:
        return "connection failed"
    return None


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0][:300] if lines else type(exc).__name__
