"""A scripted chat model for tests: deterministic answers, and a record of what it was asked."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from collabui.errors import ConfigError, ModelError
from collabui.models.base import ChatModel, ChatRequest, ChatResult

__all__ = ["ScriptedChatModel"]


class ScriptedChatModel(ChatModel):
    """Answers from a script, never from a network or weights.

    Args:
        answers: either a list of answers handed out by turn (the n-th request received, counted
            across all calls in arrival order, gets ``answers[n]``), or a callable
            ``(request) -> str`` that computes each answer.
        cycle: with a list, start over when it is exhausted instead of raising.
        name: the name recorded in traces.

    Attributes:
        requests: every request received, in arrival order.
        batch_sizes: the size of every ``generate`` call, so tests can assert batching.

    Token counts are whitespace word counts, so they are deterministic too. All methods are
    thread-safe.

    Raises:
        ConfigError: ``answers`` is an empty list or neither a list nor a callable.
    """

    def __init__(
        self,
        answers: Sequence[str] | Callable[[ChatRequest], str],
        *,
        cycle: bool = False,
        name: str = "scripted",
    ) -> None:
        if callable(answers):
            self._answer_fn: Callable[[ChatRequest], str] | None = answers
            self._answers: list[str] = []
        elif isinstance(answers, Sequence) and not isinstance(answers, str) and answers:
            self._answer_fn = None
            self._answers = [str(a) for a in answers]
        else:
            raise ConfigError(
                "ScriptedChatModel needs a non-empty list of answers or a callable(request) -> str"
            )
        self.cycle = cycle
        self.name = name
        self.requests: list[ChatRequest] = []
        self.batch_sizes: list[int] = []
        self._lock = threading.Lock()

    def generate(self, requests: Sequence[ChatRequest]) -> list[ChatResult]:
        """Answer each request from the script, in order."""
        requests = list(requests)
        with self._lock:
            self.batch_sizes.append(len(requests))
            results = []
            for request in requests:
                turn = len(self.requests)
                self.requests.append(request)
                text = self._answer(turn, request)
                prompt_words = sum(len(str(m.get("content", "")).split()) for m in request.messages)
                results.append(
                    ChatResult(
                        text=text,
                        prompt_tokens=prompt_words,
                        completion_tokens=len(text.split()),
                        latency_s=0.0,
                        extra={"turn": turn, "batch_size": len(requests)},
                    )
                )
            return results

    def reset(self) -> None:
        """Forget recorded requests and batch sizes; the next answer is the first again."""
        with self._lock:
            self.requests.clear()
            self.batch_sizes.clear()

    def _answer(self, turn: int, request: ChatRequest) -> str:
        if self._answer_fn is not None:
            return str(self._answer_fn(request))
        if turn < len(self._answers):
            return self._answers[turn]
        if self.cycle:
            return self._answers[turn % len(self._answers)]
        raise ModelError(
            f"ScriptedChatModel {self.name!r} ran out of answers after {len(self._answers)} "
            "requests; give more answers or pass cycle=True"
        )
