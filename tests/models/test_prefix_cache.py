"""Prefix KV-cache reuse in LocalModel: same tokens as without it, fewer prompt tokens computed."""

from __future__ import annotations

from pathlib import Path

import pytest

from collabui.errors import ConfigError
from collabui.models import ChatRequest
from collabui.models.prefix_cache import (
    PrefixKVCache,
    common_prefix_length,
    crop_layers,
    unique_prefix_tokens,
)

SYSTEM = {"role": "system", "content": "You operate a web page for the user. " * 12}
SCREEN = "Current screen:\n[1] button OK\n[2] link Home\n[3] textbox Name\n"
TAILS = [
    "Reply.",
    "Your answer in the previous round: click 2. Reply with a Thought line and an Action line.",
    "Answers from other agents: [Agent 0] type 'hello world' into 3; [Agent 1] click 1. Reply now.",
]


def _ask(tail: str, **kwargs: object) -> ChatRequest:
    kwargs.setdefault("max_new_tokens", 10)
    return ChatRequest((SYSTEM, {"role": "user", "content": SCREEN + tail}), **kwargs)


def _tokens(results) -> list[tuple[str, int | None]]:
    return [(r.text, r.completion_tokens) for r in results]


@pytest.fixture(scope="module")
def plain(tiny_model_dir: Path, adapter_dirs: dict[str, Path]):
    from collabui.models.local import LocalModel

    return LocalModel(tiny_model_dir, device="cpu", adapters=adapter_dirs, prefix_cache=False)


@pytest.fixture()
def cached(tiny_model_dir: Path, adapter_dirs: dict[str, Path]):
    from collabui.models.local import LocalModel

    return LocalModel(tiny_model_dir, device="cpu", adapters=adapter_dirs, prefix_cache_size=4)


def test_greedy_outputs_equal_without_reuse_for_mixed_suffix_lengths(plain, cached) -> None:
    batch = [_ask(t) for t in TAILS]
    assert cached.prefix_cache and not plain.prefix_cache
    with_reuse = cached.generate(batch)
    assert _tokens(with_reuse) == _tokens(plain.generate(batch))
    assert len({r.text for r in with_reuse}) == 3
    assert [r.prompt_tokens for r in with_reuse] == [r.prompt_tokens for r in plain.generate(batch)]


def test_two_adapters_and_base_in_one_batch(plain, cached) -> None:
    batch = [
        _ask(TAILS[0]),
        _ask(TAILS[1], adapter="a1"),
        _ask(TAILS[2], adapter="a2"),
        _ask(TAILS[1], adapter="a2"),
        _ask(TAILS[1]),
    ]
    got = _tokens(cached.generate(batch))
    assert got == _tokens(plain.generate(batch))
    assert got[1] != got[4], "adapter a1 must change the answer to the same prompt"
    assert got[3] != got[1], "a2 must not reuse a1's prefix states"
    # Once per adapter group: base, a1, a2 each computed the shared prefix once.
    assert len(cached._prefixes) == 3


def test_prefix_reused_across_calls_of_one_step(plain, cached) -> None:
    # Superstep 0 has one node, superstep 1 two: the second call reuses the first's prefix.
    first = cached.generate([_ask(TAILS[0])])
    second = cached.generate([_ask(TAILS[1]), _ask(TAILS[2])])
    assert _tokens(first + second) == _tokens(plain.generate([_ask(TAILS[0])]) + plain.generate([_ask(TAILS[1]), _ask(TAILS[2])]))
    stats = cached.stats
    total = sum(r.prompt_tokens for r in first + second)
    assert stats.prompt_tokens_total == total
    assert stats.prefix_tokens_reused > 0
    assert stats.prompt_tokens_computed < total
    unique = cached.unique_prompt_tokens([_ask(t) for t in TAILS])
    assert stats.prompt_tokens_computed == unique, "each distinct prefix token computed exactly once"


def test_switched_off_computes_every_prompt_token(plain) -> None:
    plain.stats.reset()
    results = plain.generate([_ask(t) for t in TAILS])
    assert plain.stats.prompt_tokens_computed == plain.stats.prompt_tokens_total == sum(r.prompt_tokens for r in results)
    assert plain.stats.prefix_tokens_reused == 0


def test_seeded_sampled_rows_unchanged_by_reuse(plain, cached) -> None:
    batch = [_ask(TAILS[0], temperature=1.2, seed=5), _ask(TAILS[2]), _ask(TAILS[1], temperature=0.8, seed=9, adapter="a1")]
    assert _tokens(cached.generate(batch)) == _tokens(plain.generate(batch))


def test_cache_eviction_is_bounded(cached) -> None:
    for k in range(7):
        cached.generate([_ask(f"distinct tail number {k}" * (k + 1))])
        assert len(cached._prefixes) <= 4
    assert len(cached._prefixes) == 4


def test_short_shared_prefix_falls_back_to_plain_batch(cached) -> None:
    short = [ChatRequest(({"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}), max_new_tokens=4),
             ChatRequest(({"role": "system", "content": "Act."}, {"role": "user", "content": "go"}), max_new_tokens=4)]
    cached.stats.reset()
    cached.generate(short)
    # The chat template alone shares a few tokens: below the threshold nothing is cached.
    assert cached.stats.prompt_tokens_computed == cached.stats.prompt_tokens_total
    assert len(cached._prefixes) == 0


# -- the pure helpers --------------------------------------------------------------------------


def test_common_prefix_and_unique_tokens() -> None:
    assert common_prefix_length([]) == 0
    assert common_prefix_length([[1, 2, 3], [1, 2, 4], [1, 2]]) == 2
    assert common_prefix_length([[5], [6]]) == 0
    assert unique_prefix_tokens([[1, 2, 3], [1, 2, 4], [1, 2]]) == 4
    assert unique_prefix_tokens([[1, 2], [1, 2]]) == 2
    assert unique_prefix_tokens([[1], [2, 1]]) == 3


def test_lru_longest_match_per_adapter_and_eviction() -> None:
    import torch

    def layers(n: int):
        t = torch.arange(n, dtype=torch.float32).view(1, 1, n, 1)
        return ((t, t + 100),)

    lru = PrefixKVCache(max_entries=2)
    lru.put("base", [1, 2, 3, 4], layers(4))
    n, found = lru.longest_match("base", [1, 2, 9])
    assert n == 2 and found[0][0].flatten().tolist() == [0.0, 1.0]
    assert lru.longest_match("a1", [1, 2, 3]) == (0, None), "never across adapters"
    lru.put("base", [1, 2, 3, 4, 5], layers(5))
    assert len(lru) == 1, "an entry that is a prefix of the new one is replaced"
    lru.put("a1", [7], layers(1))
    lru.put("a2", [8], layers(1))
    assert len(lru) == 2
    assert lru.longest_match("base", [1, 2]) == (0, None), "least recently used evicted"
    assert crop_layers(layers(5), 3)[0][1].flatten().tolist() == [100.0, 101.0, 102.0]
    with pytest.raises(ConfigError, match="prefix cache size"):
        PrefixKVCache(0)


def test_only_full_attention_models_use_prefix_reuse() -> None:
    from transformers import AutoConfig

    from collabui.models._loading import plain_cache_model as _plain_cache_model

    assert _plain_cache_model(AutoConfig.for_model("llama"))
    assert not _plain_cache_model(AutoConfig.for_model("mistral", sliding_window=4096))
    assert _plain_cache_model(AutoConfig.for_model("qwen2"))  # sliding window declared but off
