"""Per-row sampling for batched ``generate``: the logits processor behind :class:`LocalModel`'s
per-request temperature, seed and token budget (see :mod:`collabui.models.local`)."""

from __future__ import annotations

import functools
import secrets
from typing import Any

from collabui.models.base import ChatRequest

__all__ = ["row_processor_class"]


@functools.cache
def row_processor_class() -> type:
    """Build the per-row logits processor class (lazily, as it subclasses a transformers class)."""
    import torch
    from transformers import LogitsProcessor

    class RowProcessor(LogitsProcessor):
        """Per-row temperature, seed and budget; turns sampled rows into one-hot scores.

        Generation itself runs greedily, so the token a row gets is the argmax of what this
        processor returns: the argmax of the raw logits for greedy rows, the sampled token for
        sampled rows, the stop token for rows past their budget.
        """

        def __init__(self, batch: list[ChatRequest], budgets: list[int], prompt_len: int, stop_id: int, device: str) -> None:
            self.temperatures = [float(r.temperature) for r in batch]
            self.budgets = budgets
            self.prompt_len = prompt_len
            self.stop_id = stop_id
            self.generators: list[Any] = []
            for request in batch:
                seed = request.seed if request.seed is not None else secrets.randbits(63)
                self.generators.append(torch.Generator(device=device).manual_seed(int(seed)))

        def __call__(self, input_ids: Any, scores: Any) -> Any:
            step = int(input_ids.shape[1]) - self.prompt_len
            scores = scores.clone()  # never write into a tensor transformers may still hold
            for row, temperature in enumerate(self.temperatures):
                if step >= self.budgets[row]:
                    self._one_hot(scores, row, self.stop_id)
                elif temperature > 0:
                    probs = torch.softmax(scores[row].float() / temperature, dim=-1)
                    token = torch.multinomial(probs, 1, generator=self.generators[row])
                    self._one_hot(scores, row, int(token))
            return scores

        @staticmethod
        def _one_hot(scores: Any, row: int, token: int) -> None:
            scores[row].fill_(float("-inf"))
            scores[row, token] = 0.0

    return RowProcessor
