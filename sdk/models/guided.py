"""Schema-guided decoding for the local backend (the counterpart of vLLM's structured outputs).

A :class:`GuidedDecoder` holds one JSON schema compiled for one tokenizer (with `llguidance
<https://github.com/guidance-ai/llguidance>`_, the grammar engine vLLM also ships). For each
``generate`` call it makes a logits processor that keeps one matcher per batch row: before
every token it masks the logits of tokens that would break the row's JSON, and once the JSON
is complete it lets only the stop token through. The mask runs before the per-row sampling
processor, so greedy rows take the best *valid* token and sampled rows sample among valid ones.

A row that runs out of ``max_new_tokens`` mid-JSON is still cut there: guidance makes every
emitted prefix valid, not every answer complete, so budgets must leave room for the action
(:data:`collabui.serving.schema.THOUGHT_MAX_CHARS` caps the thought for that reason).

Whitespace between JSON tokens is not allowed, as on our vLLM server (``compact_json``): a small
model otherwise spends its budget on newlines.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Sequence
from typing import Any

from collabui.errors import ConfigError, ModelLoadError

__all__ = ["GuidedDecoder"]

log = logging.getLogger(__name__)


class GuidedDecoder:
    """One JSON schema compiled for one tokenizer; makes a logits processor per batch.

    Args:
        tokenizer: a fast Hugging Face tokenizer.
        schema: the JSON schema every answer must follow.
        stop_ids: the tokens that end an answer (the first is forced once the JSON is complete).
        vocab_size: the model's logits width (may exceed the tokenizer's vocabulary).

    Raises:
        ModelLoadError: llguidance is not installed.
        ConfigError: the tokenizer is not a fast one, or the schema does not compile.
    """

    def __init__(self, tokenizer: Any, schema: dict[str, Any], stop_ids: Sequence[int], vocab_size: int) -> None:
        llguidance, llguidance_hf = _import_llguidance()
        self.stop_ids = [int(t) for t in stop_ids]
        self.vocab_size = int(vocab_size)
        try:
            self._tokenizer = llguidance_hf.from_tokenizer(tokenizer, n_vocab=self.vocab_size, eos_token=self.stop_ids)
        except ValueError as exc:
            raise ConfigError(f"guided decoding needs a fast tokenizer ({exc}); load the model's tokenizer.json") from None
        self.grammar = llguidance.LLMatcher.grammar_from_json_schema(
            json.dumps(schema), overrides={"whitespace_flexible": False}
        )
        error = llguidance.LLMatcher.validate_grammar(self.grammar, self._tokenizer)
        if error and not error.startswith("WARNING"):
            raise ConfigError(f"the guided_json schema does not compile ({error.splitlines()[0]}); fix the schema")
        self._matcher_class = llguidance.LLMatcher

    def matcher(self) -> Any:
        """A fresh matcher at the start of an answer."""
        return self._matcher_class(self._tokenizer, self.grammar, log_level=0)

    def processor(self, rows: int, prompt_len: int) -> Any:
        """The logits processor for a batch of ``rows`` whose prompts end at column ``prompt_len``."""
        return _processor_class()([self.matcher() for _ in range(rows)], prompt_len, self.stop_ids)

    def valid_prefix(self, tokens: Sequence[int]) -> int:
        """How many of ``tokens`` (an answer, stop token excluded) the schema accepts in a row."""
        return int(self.matcher().validate_tokens([int(t) for t in tokens]))


def _import_llguidance() -> tuple[Any, Any]:
    try:
        import llguidance
        import llguidance.hf
    except ImportError:
        raise ModelLoadError(
            "guided_json on a local model needs llguidance; run `pip install 'collabui-agents[local]'`"
        ) from None
    return llguidance, llguidance.hf


@functools.cache
def _processor_class() -> type:
    """Build the processor class lazily (it subclasses a transformers class)."""
    import torch
    from transformers import LogitsProcessor

    class GuidedProcessor(LogitsProcessor):
        """Masks each row's logits to the tokens its matcher allows next."""

        def __init__(self, matchers: list[Any], prompt_len: int, stop_ids: list[int]) -> None:
            self.matchers = matchers
            self.prompt_len = prompt_len
            self.stop_ids = set(stop_ids)
            self.stop_id = stop_ids[0]
            self.done = [False] * len(matchers)

        def __call__(self, input_ids: Any, scores: Any) -> Any:
            step = int(input_ids.shape[1]) - self.prompt_len
            scores = scores.clone()
            for row, matcher in enumerate(self.matchers):
                if self.done[row]:
                    continue  # finished rows are padded by generate; nothing to constrain
                if step > 0 and not self._consume(row, int(input_ids[row, -1])):
                    continue
                if matcher.is_stopped():
                    scores[row].fill_(float("-inf"))
                    scores[row, self.stop_id] = 0.0
                    continue
                allowed = torch.frombuffer(bytearray(matcher.compute_logit_bias()), dtype=torch.uint8)
                width = min(int(scores.shape[1]), int(allowed.shape[0]))
                scores[row, :width].masked_fill_(allowed[:width] == 0, float("-inf"))
                scores[row, width:] = float("-inf")
            return scores

        def _consume(self, row: int, token: int) -> bool:
            """Feed the row's last token to its matcher; False when the row needs no mask."""
            if token in self.stop_ids:
                self.done[row] = True
                return False
            if not self.matchers[row].consume_token(token):
                # Cannot happen with our mask in place (another processor forced a token, e.g.
                # the budget's stop token); leave the row unconstrained rather than fail.
                log.warning("guided decoding: row %d left the grammar (%s)", row, self.matchers[row].get_error())
                self.done[row] = True
                return False
            return True

    return GuidedProcessor
