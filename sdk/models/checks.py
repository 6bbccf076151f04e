"""A conformance check any ChatModel implementation should pass before the team uses it."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable, Sequence
from typing import NoReturn, TypeVar

from collabui.errors import CollabUIError, ConfigError
from collabui.models.base import ChatModel, ChatRequest, ChatResult

__all__ = ["check_chat_model"]

T = TypeVar("T")

_PROBES = (
    ChatRequest(({"role": "user", "content": "Say the word apple."},), max_new_tokens=8),
    ChatRequest(
        (
            {"role": "system", "content": "You answer in one word."},
            {"role": "user", "content": "What colour is the sky?"},
        ),
        max_new_tokens=8,
    ),
)


def check_chat_model(model: ChatModel, *, deterministic: bool = False) -> None:
    """Check that ``model`` honours the ChatModel contract.

    Checked properties: ``name`` is a non-empty string; ``generate`` on a batch of two different
    requests returns two ``ChatResult`` with ``str`` text; ``generate([])`` returns ``[]``;
    ``agenerate`` works inside ``asyncio.run``. With ``deterministic=True`` (for greedy models
    whose answer depends only on the request) it also checks that batch results come back in
    request order, by comparing each with the answer to the request sent alone.

    Raises:
        ConfigError: naming the first property that failed.
    """
    label = f"chat model {getattr(model, 'name', type(model).__name__)!r}"
    if not isinstance(getattr(model, "name", None), str) or not model.name:
        _fail(label, "name is a non-empty str", f"got {getattr(model, 'name', None)!r}")
    batch = _call(label, "generate(batch of 2)", lambda: model.generate(list(_PROBES)))
    _check_results(label, "generate(batch of 2)", batch, 2)
    empty = _call(label, "generate([])", lambda: model.generate([]))
    if empty != []:
        _fail(label, "generate([]) returns []", f"got {empty!r}")
    async_batch = _call(label, "agenerate(batch of 2)", lambda: _run_async(model, list(_PROBES)))
    _check_results(label, "agenerate(batch of 2)", async_batch, 2)
    if deterministic:
        alone = [_call(label, "generate(one request)", lambda p=p: model.generate([p]))[0] for p in _PROBES]
        if [r.text for r in batch] != [r.text for r in alone]:
            _fail(label, "batch results are in request order", "batched answers differ from single ones")


def _run_async(model: ChatModel, requests: Sequence[ChatRequest]) -> list[ChatResult]:
    """Run ``agenerate`` in a fresh event loop, in a worker thread if a loop is already running."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(model.agenerate(requests))
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, model.agenerate(requests)).result()


def _call(label: str, what: str, fn: Callable[[], T]) -> T:
    # Our own typed errors (an endpoint that is down...) pass through: they are not a
    # conformance failure and already say how to fix them.
    try:
        return fn()
    except CollabUIError:
        raise
    except Exception as exc:
        _fail(label, f"{what} does not raise", f"{type(exc).__name__}: {exc}")
        raise  # unreachable: _fail raises


def _check_results(label: str, what: str, results: object, expected: int) -> None:
    if not isinstance(results, list):
        _fail(label, f"{what} returns a list", f"got {type(results).__name__}")
    if len(results) != expected:
        _fail(label, f"{what} returns one result per request", f"got {len(results)} for {expected}")
    for index, result in enumerate(results):
        if not isinstance(result, ChatResult):
            _fail(label, f"{what} returns ChatResult items", f"item {index} is {type(result).__name__}")
        if not isinstance(result.text, str):
            _fail(label, f"{what} returns str text", f"item {index} text is {type(result.text).__name__}")


def _fail(label: str, prop: str, detail: str) -> NoReturn:
    raise ConfigError(f"{label} fails the check '{prop}' ({detail}); fix its implementation")
