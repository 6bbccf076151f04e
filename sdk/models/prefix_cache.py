"""Prompt-prefix KV-cache reuse for :class:`collabui.models.local.LocalModel`.

The prompts of one team step share a long prefix (system prompt, demonstration turn, task,
observation); only the tail differs (peers' answers, the agent's previous answer). This module
keeps the key/value states of such prefixes in a small LRU so that the prefix is computed once
per step (per adapter) instead of once per request.

An entry is keyed by ``(adapter, token ids)``: a LoRA adapter on the attention projections
changes keys and values, so a prefix computed with one adapter is never reused for another.
A lookup returns the cached entry sharing the longest token prefix with the query; the caller
crops it to that length and extends it with the missing tokens.

Entries hold plain per-layer ``(key, value)`` tensors of batch size 1, shaped
``[1, heads, tokens, head_dim]``. They are never written in place (transformers' dynamic cache
grows by concatenation, which allocates new tensors), so cropping is a cheap slice.

torch is not imported here; the tensors come from the caller.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from collabui.errors import ConfigError

__all__ = [
    "PrefixCacheStats",
    "PrefixKVCache",
    "common_prefix_length",
    "unique_prefix_tokens",
    "crop_layers",
]

#: Per-layer ``(key, value)`` tensors of one cached prefix.
Layers = tuple[tuple[Any, Any], ...]


@dataclass
class PrefixCacheStats:
    """Cumulative prompt accounting of a model (reset with :meth:`reset`).

    Attributes:
        prompt_tokens_total: tokens of every prompt requested (what a model without any
            sharing would run through its prefill).
        prompt_tokens_computed: prompt tokens that actually went through a forward pass.
        prefix_tokens_reused: prompt tokens served from the prefix cache (per adapter group).
        batches: batched ``generate`` calls made.
    """

    prompt_tokens_total: int = 0
    prompt_tokens_computed: int = 0
    prefix_tokens_reused: int = 0
    batches: int = 0

    def reset(self) -> None:
        """Zero every counter."""
        self.prompt_tokens_total = self.prompt_tokens_computed = 0
        self.prefix_tokens_reused = self.batches = 0

    def as_dict(self) -> dict[str, int]:
        """The counters as a plain dict (for JSON reports)."""
        return asdict(self)


def common_prefix_length(sequences: Sequence[Sequence[int]]) -> int:
    """Length of the longest token prefix shared by every sequence (0 for no sequences)."""
    if not sequences:
        return 0
    first = sequences[0]
    length = min(len(s) for s in sequences)
    for other in sequences[1:]:
        k = 0
        while k < length and other[k] == first[k]:
            k += 1
        length = k
    return length


def unique_prefix_tokens(sequences: Sequence[Sequence[int]]) -> int:
    """Distinct token prefixes among ``sequences``: the nodes of their token trie.

    This is the least number of prompt tokens any prefix-sharing engine must compute to
    answer all the sequences (a token is new when the prefix ending at it is new).
    """
    root: dict[int, dict] = {}
    nodes = 0
    for seq in sequences:
        node = root
        for token in seq:
            child = node.get(token)
            if child is None:
                child = node[token] = {}
                nodes += 1
            node = child
    return nodes


def crop_layers(layers: Layers, length: int) -> Layers:
    """The first ``length`` positions of every layer's key and value (views, no copy)."""
    return tuple((k[:, :, :length, :], v[:, :, :length, :]) for k, v in layers)


class PrefixKVCache:
    """An LRU of ``(adapter, token prefix) -> per-layer (key, value)`` tensors.

    Args:
        max_entries: entries kept; the least recently used one is evicted beyond this. Each
            entry costs ``2 x layers x kv_heads x head_dim x tokens`` floats (SmolLM2-135M in
            fp32: ~46 KB per token, ~27 MB for a 600-token prompt).

    Not thread-safe: ``LocalModel`` calls it under its own lock.

    Raises:
        ConfigError: ``max_entries`` < 1.
    """

    def __init__(self, max_entries: int = 8) -> None:
        if max_entries < 1:
            raise ConfigError(f"prefix cache size must be >= 1, got {max_entries}; pass 1 or more")
        self.max_entries = max_entries
        self._entries: OrderedDict[tuple[str, tuple[int, ...]], Layers] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        """Drop every entry."""
        self._entries.clear()

    def longest_match(self, adapter: str, tokens: Sequence[int]) -> tuple[int, Layers | None]:
        """The entry of ``adapter`` sharing the longest prefix with ``tokens``.

        Returns:
            ``(n, layers)``: ``layers`` cropped to the ``n`` shared tokens (``n`` never exceeds
            ``len(tokens)``), or ``(0, None)`` when no entry shares a token. The entry found
            becomes the most recently used one.
        """
        best_len, best_key = 0, None
        tokens = tuple(tokens)
        for key in self._entries:
            if key[0] != adapter:
                continue
            n = common_prefix_length((key[1], tokens))
            if n > best_len:
                best_len, best_key = n, key
        if best_key is None:
            return 0, None
        self._entries.move_to_end(best_key)
        return best_len, crop_layers(self._entries[best_key], best_len)

    def put(self, adapter: str, tokens: Sequence[int], layers: Layers) -> None:
        """Store ``layers`` (the states of exactly ``tokens``) and evict beyond ``max_entries``.

        An entry that is a prefix of the new one is dropped: the new one answers its lookups.
        """
        tokens = tuple(tokens)
        for key in [k for k in self._entries if k[0] == adapter and tokens[: len(k[1])] == k[1]]:
            del self._entries[key]
        self._entries[(adapter, tokens)] = layers
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)
