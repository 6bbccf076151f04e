"""The client side against a fake vLLM: concurrent supersteps, per-agent adapters, retries,
and the guided-decoding request body."""

from __future__ import annotations

import asyncio
import json
import threading
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from collabui import CollabAgentTeam
from collabui.errors import ConfigError, EndpointError
from collabui.models.base import ChatRequest
from collabui.models.langchain import LangChainModel
from collabui.serving.schema import answer_schema

from .conftest import make_adapters

_OBS = "[A] text 'Click the button'\n[B] button 'Submit'"


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("use_async", [False, True])
def test_team_superstep_requests_overlap_and_use_each_agents_adapter(
    fake_server, tmp_path: Path, use_async: bool
) -> None:
    record = tmp_path / "requests.jsonl"
    adapters = make_adapters(tmp_path / "ad", 4)
    env = {"FAKE_VLLM_RECORD": str(record), "FAKE_VLLM_BARRIER": "4"}
    with fake_server("barrier", env=env, adapters=adapters) as server:
        team = CollabAgentTeam(server.client(timeout=30, max_retries=0), n_agents=4, rounds=3,
                               topology="independent", adapters=tuple(adapters))
        step = asyncio.run(team.astep("Click Submit", _OBS)) if use_async else team.step("Click Submit", _OBS)
    sent = _records(record)
    assert len(sent) == 12
    # The fake holds each request until four are in flight: all four of a superstep overlapped.
    assert [r["inflight"] for r in sent] == [4] * 12
    assert Counter(r["model"] for r in sent) == {name: 3 for name in adapters}
    assert [[p.adapter for p in row] for row in step.proposals] == [[f"agent{i}"] * 3 for i in range(4)]
    assert step.action.to_dict() == {"action": "click", "element_id": "B"}


def test_guided_json_sends_the_answer_schema(fake_server, tmp_path: Path) -> None:
    record = tmp_path / "requests.jsonl"
    with fake_server(env={"FAKE_VLLM_RECORD": str(record)}) as server:
        model = server.client(timeout=10, max_retries=0, guided_json="mobile")
        model.generate([ChatRequest(messages=({"role": "user", "content": "hi"},))])
        plain = server.client(timeout=10, max_retries=0)
        plain.generate([ChatRequest(messages=({"role": "user", "content": "hi"},))])
    guided, free = (r["body"] for r in _records(record))
    assert guided["structured_outputs"] == {"json": answer_schema("mobile")}
    assert "structured_outputs" not in free and "response_format" not in guided


def test_guided_json_needs_a_known_space_and_an_openai_model() -> None:
    from langchain_core.language_models.fake_chat_models import FakeListChatModel

    with pytest.raises(ConfigError, match="which actions"):
        LangChainModel.from_openai("m", "http://127.0.0.1:1/v1", guided_json=True)
    with pytest.raises(ConfigError, match="unknown action space"):
        LangChainModel.from_openai("m", "http://127.0.0.1:1/v1", guided_json="desktop")
    with pytest.raises(ConfigError, match="needs an OpenAI-compatible server"):
        LangChainModel(FakeListChatModel(responses=["x"]), guided_json="web")


class _Slow(BaseHTTPRequestHandler):
    tries = 0
    release = threading.Event()

    def do_POST(self) -> None:  # noqa: N802
        type(self).tries += 1
        self.release.wait(5)  # longer than the client's timeout: every try times out

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def slow_server() -> Iterator[str]:
    _Slow.tries = 0
    _Slow.release.clear()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Slow)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    _Slow.release.set()
    server.shutdown()
    server.server_close()


def test_timeouts_are_retried_then_one_clear_endpoint_error(slow_server: str) -> None:
    model = LangChainModel.from_openai("m", slow_server, timeout=0.3, max_retries=1)
    with pytest.raises(EndpointError) as info:
        model.generate([ChatRequest(messages=({"role": "user", "content": "hi"},))])
    message = str(info.value)
    assert "\n" not in message
    assert f"no answer from {slow_server} (timed out) after 2 tries" in message
    assert "raise timeout= (now 0.3 s)" in message
    assert _Slow.tries == 2
