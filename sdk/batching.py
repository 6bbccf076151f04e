"""Superstep batching: all (agent, round) nodes that LangGraph runs in one superstep send their
generation requests together, as one ``ChatModel.generate`` call.

The team knows statically how many nodes share a superstep (node (i, j) runs at superstep
``depth(i) + j``, or ``depth(i)`` without memory), so a group is flushed as soon as its last member arrives; no time window is
needed. A fallback timer flushes a partial group if members never arrive (for example when a
caller limits ``max_concurrency`` below the superstep width), so batching can only ever delay a
request by ``fallback_s``, never deadlock it.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Hashable
from concurrent.futures import Future
from dataclasses import dataclass, field

from collabui.models.base import ChatModel, ChatRequest, ChatResult

__all__ = ["SuperstepBatcher"]


@dataclass
class _Group:
    expected: int
    items: list[tuple[ChatModel, ChatRequest, Future]] = field(default_factory=list)
    timer: threading.Timer | None = None
    flushed: bool = False


class SuperstepBatcher:
    """Collects requests per group key and generates each group in one batched call per model."""

    def __init__(self, *, fallback_s: float = 5.0) -> None:
        self.fallback_s = fallback_s
        self._groups: dict[Hashable, _Group] = {}
        self._lock = threading.Lock()
        #: Sizes of the batches sent to models, for tests and benchmarks.
        self.batch_sizes: list[int] = []

    def _add(self, key: Hashable, expected: int, model: ChatModel, request: ChatRequest) -> tuple[Future, _Group | None]:
        fut: Future = Future()
        with self._lock:
            group = self._groups.setdefault(key, _Group(expected=expected))
            group.items.append((model, request, fut))
            if len(group.items) >= group.expected:
                self._take(key, group)
                return fut, group
            if group.timer is None:
                group.timer = threading.Timer(self.fallback_s, self._flush_partial, args=(key,))
                group.timer.daemon = True
                group.timer.start()
        return fut, None

    def _take(self, key: Hashable, group: _Group) -> None:
        group.flushed = True
        self._groups.pop(key, None)
        if group.timer is not None:
            group.timer.cancel()

    def _flush_partial(self, key: Hashable) -> None:
        with self._lock:
            group = self._groups.get(key)
            if group is None or group.flushed:
                return
            self._take(key, group)
        self._run_sync(group)

    @staticmethod
    def _by_model(group: _Group) -> list[tuple[ChatModel, list[tuple[ChatRequest, Future]]]]:
        out: dict[int, tuple[ChatModel, list[tuple[ChatRequest, Future]]]] = {}
        for model, req, fut in group.items:
            out.setdefault(id(model), (model, []))[1].append((req, fut))
        return list(out.values())

    def _run_sync(self, group: _Group) -> None:
        for model, items in self._by_model(group):
            self.batch_sizes.append(len(items))
            try:
                results = model.generate([r for r, _ in items])
            except BaseException as exc:  # delivered to every waiting node
                _deliver(items, exc=exc)
                continue
            _deliver(items, results)

    async def _run_async(self, group: _Group) -> None:
        for model, items in self._by_model(group):
            self.batch_sizes.append(len(items))
            try:
                results = await model.agenerate([r for r, _ in items])
            except BaseException as exc:
                _deliver(items, exc=exc)
                continue
            _deliver(items, results)

    def submit(self, key: Hashable, expected: int, model: ChatModel, request: ChatRequest) -> ChatResult:
        """Blocking: wait until the group is complete, generate, return this request's result."""
        fut, full = self._add(key, expected, model, request)
        if full is not None:
            self._run_sync(full)
        return fut.result()

    async def asubmit(self, key: Hashable, expected: int, model: ChatModel, request: ChatRequest) -> ChatResult:
        """Async twin of ``submit``: the last member of the group runs the batched call."""
        fut, full = self._add(key, expected, model, request)
        if full is not None:
            await self._run_async(full)
        return await asyncio.wrap_future(fut)


def _deliver(items: list[tuple[ChatRequest, Future]], results: list[ChatResult] | None = None, *,
             exc: BaseException | None = None) -> None:
    """Hand each waiting node its result (or the batch's exception). A node whose wait was
    cancelled (Ctrl-C, a graph being torn down) cancelled its future, which takes nothing more."""
    outcomes = [exc] * len(items) if exc is not None else list(results or [])
    for (_, fut), outcome in zip(items, outcomes, strict=True):
        if fut.done():
            continue
        if exc is not None:
            fut.set_exception(exc)
        else:
            fut.set_result(outcome)
