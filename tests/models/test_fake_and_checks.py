"""ScriptedChatModel and the check_chat_model conformance check."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence

import pytest

from collabui.errors import ConfigError, ModelError
from collabui.models import ChatModel, ChatRequest, ChatResult, ScriptedChatModel, check_chat_model


def _ask(text: str) -> ChatRequest:
    return ChatRequest(({"role": "user", "content": text},))


def test_answers_by_turn_across_calls_and_records_batches() -> None:
    model = ScriptedChatModel(["a", "b c", "d"])
    first = model.generate([_ask("one two"), _ask("three")])
    second = model.generate([_ask("four")])
    assert [r.text for r in first + second] == ["a", "b c", "d"]
    assert model.batch_sizes == [2, 1]
    assert [r.messages[0]["content"] for r in model.requests] == ["one two", "three", "four"]
    assert (first[0].prompt_tokens, first[1].completion_tokens) == (2, 2)
    assert second[0].extra == {"turn": 2, "batch_size": 1}
    with pytest.raises(ModelError, match="ran out of answers after 3.*cycle=True"):
        model.generate([_ask("five")])


def test_cycle_reset_and_callable() -> None:
    cycling = ScriptedChatModel(["x", "y"], cycle=True)
    assert [r.text for r in cycling.generate([_ask(str(i)) for i in range(5)])] == list("xyxyx")
    cycling.reset()
    assert cycling.requests == [] and cycling.batch_sizes == []
    assert cycling.generate([_ask("again")])[0].text == "x"
    echo = ScriptedChatModel(lambda r: r.messages[-1]["content"][::-1])
    assert [r.text for r in echo.generate([_ask("abc"), _ask("xy")])] == ["cba", "yx"]


def test_bad_scripts() -> None:
    for bad in ([], "just a string", 42):
        with pytest.raises(ConfigError, match="non-empty list of answers or a callable"):
            ScriptedChatModel(bad)  # type: ignore[arg-type]


def test_thread_safe_recording() -> None:
    model = ScriptedChatModel(lambda r: r.messages[0]["content"])
    barrier = threading.Barrier(8)

    def worker(i: int) -> None:
        barrier.wait()
        for j in range(25):
            assert model.generate([_ask(f"{i}-{j}")])[0].text == f"{i}-{j}"

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(model.requests) == 200 and model.batch_sizes == [1] * 200
    assert sorted({r.messages[0]["content"] for r in model.requests}) == sorted(
        f"{i}-{j}" for i in range(8) for j in range(25)
    )


def test_scripted_model_passes_check_also_inside_a_running_loop() -> None:
    check_chat_model(ScriptedChatModel(["ok"], cycle=True))

    async def inside() -> None:
        check_chat_model(ScriptedChatModel(lambda r: "fine"))

    asyncio.run(inside())


class _Broken(ChatModel):
    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.name = "broken"

    def generate(self, requests: Sequence[ChatRequest]) -> list[ChatResult]:
        if self.mode == "short":
            return [ChatResult("x")][: len(requests)]
        if self.mode == "bytes":
            return [ChatResult(b"x") for _ in requests]  # type: ignore[arg-type]
        if self.mode == "empty" and not requests:
            return [ChatResult("x")]
        if self.mode == "raises":
            raise RuntimeError("boom")
        if self.mode == "reversed":
            return [ChatResult(r.messages[-1]["content"]) for r in reversed(requests)]
        return [ChatResult("x") for _ in requests]

    async def agenerate(self, requests: Sequence[ChatRequest]) -> list[ChatResult]:
        if self.mode == "async":
            return []
        return self.generate(requests)


@pytest.mark.parametrize(
    ("mode", "message"),
    [
        ("short", "one result per request"),
        ("bytes", "returns str text"),
        ("empty", r"generate\(\[\]\) returns \[\]"),
        ("raises", "does not raise.*boom"),
        ("async", r"agenerate\(batch of 2\) returns one result per request"),
    ],
)
def test_check_names_the_failed_property(mode: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        check_chat_model(_Broken(mode))


def test_check_order_only_when_deterministic() -> None:
    check_chat_model(_Broken("reversed"))
    with pytest.raises(ConfigError, match="in request order"):
        check_chat_model(_Broken("reversed"), deterministic=True)


def test_check_rejects_empty_name() -> None:
    model = ScriptedChatModel(["x"], cycle=True, name="")
    with pytest.raises(ConfigError, match="name is a non-empty str"):
        check_chat_model(model)
