"""LangChainModel: fakes, a stub OpenAI-compatible server, and a dead endpoint."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from langchain_core.language_models import BaseChatModel
from langchain_core.language_models.fake_chat_models import FakeListChatModel, GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_core.outputs import ChatGeneration, ChatResult

from collabui.errors import ConfigError, EndpointError, ModelError
from collabui.models import ChatRequest, LangChainModel, check_chat_model


def _ask(text: str, **kwargs: Any) -> ChatRequest:
    return ChatRequest(({"role": "system", "content": "be brief"}, {"role": "user", "content": text}), **kwargs)


class EchoChat(BaseChatModel):
    """Answers with the last message, upper-cased, and reports word counts as usage."""

    @property
    def _llm_type(self) -> str:
        return "echo"

    def _generate(self, messages, stop=None, run_manager=None, **kwargs: Any) -> ChatResult:
        text = str(messages[-1].content).upper()
        usage = {"input_tokens": len(messages), "output_tokens": len(text.split()), "total_tokens": 0}
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=text, usage_metadata=usage))])


def test_fake_models_pass_conformance() -> None:
    check_chat_model(LangChainModel(FakeListChatModel(responses=["a", "b"])))
    check_chat_model(LangChainModel(GenericFakeChatModel(messages=iter(["x", "y", "z", "w"]))))
    check_chat_model(LangChainModel(EchoChat()), deterministic=True)


def test_order_usage_and_ignored_fields() -> None:
    model = LangChainModel(EchoChat())
    assert model.name == "langchain:echo"
    results = model.generate([_ask(f"answer {i}", temperature=0.5, seed=i) for i in range(5)])
    assert [r.text for r in results] == [f"ANSWER {i}" for i in range(5)]
    assert results[0].prompt_tokens == 2 and results[0].completion_tokens == 2
    assert results[0].extra["ignored"] == ["temperature", "max_new_tokens", "seed"]


def test_native_async_keeps_order() -> None:
    model = LangChainModel(EchoChat())
    results = asyncio.run(model.agenerate([_ask("one"), _ask("two")]))
    assert [r.text for r in results] == ["ONE", "TWO"]


def test_adapter_on_model_without_adapters_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="cannot switch adapters"):
        LangChainModel(EchoChat()).generate([_ask("x", adapter="a1")])


def test_rejects_non_chat_models_and_bad_roles() -> None:
    with pytest.raises(ConfigError, match="BaseChatModel"):
        LangChainModel(object())
    bad = ChatRequest(({"role": "robot", "content": "x"},))
    with pytest.raises(ConfigError, match="unknown message role 'robot'"):
        LangChainModel(EchoChat()).generate([bad])


class _StubOpenAI(BaseHTTPRequestHandler):
    """A minimal /v1/chat/completions: echoes the model name, 404 for model 'missing'."""

    bodies: list[dict[str, Any]] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server API
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.bodies.append(body)
        if body["model"] == "missing":
            self._send(404, {"error": {"message": "The model `missing` does not exist.", "type": "NotFoundError"}})
            return
        answer = f"{body['model']}:{body['messages'][-1]['content']}"
        self._send(200, {
            "id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": answer}}],
            "usage": {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14},
        })

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture()
def stub_server() -> Iterator[str]:
    _StubOpenAI.bodies = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _StubOpenAI)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def test_openai_binds_per_request_params(stub_server: str) -> None:
    model = LangChainModel.from_openai("base-model", stub_server, timeout=5, max_retries=0)
    assert model.name == "openai:base-model" and model.base_url == stub_server
    requests = [_ask("hi"), _ask("yo", temperature=0.8, max_new_tokens=7, adapter="a1", seed=5)]
    results = model.generate(requests)
    assert [r.text for r in results] == ["base-model:hi", "a1:yo"]
    assert (results[1].prompt_tokens, results[1].completion_tokens) == (11, 3)
    assert "ignored" not in results[1].extra
    sent = {b["messages"][-1]["content"]: b for b in _StubOpenAI.bodies}
    assert sent["yo"]["temperature"] == 0.8 and sent["yo"]["seed"] == 5
    assert sent["yo"]["max_completion_tokens"] == 7
    assert sent["hi"]["temperature"] == 0.0 and sent["hi"]["model"] == "base-model"
    async_results = asyncio.run(model.agenerate(requests))
    assert [r.text for r in async_results] == ["base-model:hi", "a1:yo"]
    check_chat_model(model)


def test_unserved_model_is_a_model_error(stub_server: str) -> None:
    model = LangChainModel.from_openai("base", stub_server, timeout=5, max_retries=0)
    with pytest.raises(ModelError, match="does not serve the requested model.*lora-modules"):
        model.generate([_ask("x", adapter="missing")])


def _dead_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_dead_endpoint_raises_endpoint_error() -> None:
    url = f"http://127.0.0.1:{_dead_port()}/v1"
    model = LangChainModel.from_openai("m", url, timeout=2, max_retries=0)
    with pytest.raises(EndpointError, match=rf"no answer from {url} \(connection refused\).*collabui serve"):
        model.generate([_ask("x"), _ask("y")])
    with pytest.raises(EndpointError, match="connection refused"):
        asyncio.run(model.agenerate([_ask("x")]))
