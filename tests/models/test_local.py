"""LocalModel on tiny random Llama models: batching, per-row sampling, adapters, errors."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from collabui.errors import ConfigError, ModelLoadError
from collabui.models import ChatRequest, check_chat_model


def _ask(text: str, **kwargs: object) -> ChatRequest:
    return ChatRequest(({"role": "user", "content": text},), **kwargs)


PROMPTS = [
    "hi",
    "Click the button labelled OK on the page.",
    "A much longer prompt, so that left padding matters: " + "the quick brown fox " * 12,
]


def test_batched_equals_one_by_one_greedy(tiny_model) -> None:
    requests = [_ask(p, max_new_tokens=12) for p in PROMPTS]
    batched = tiny_model.generate(requests)
    alone = [tiny_model.generate([r])[0] for r in requests]
    assert [r.text for r in batched] == [r.text for r in alone]
    assert all(r.text for r in batched), "the tiny model should print visible tokens"
    assert len({r.text for r in batched}) == 3
    assert [r.extra["batch_size"] for r in batched] == [3, 3, 3]
    assert [r.prompt_tokens for r in batched] == [r.prompt_tokens for r in alone]
    assert batched[0].prompt_tokens < batched[2].prompt_tokens
    assert all(r.completion_tokens == 12 for r in batched)
    assert all(r.latency_s > 0 for r in batched)


def test_empty_batch(tiny_model) -> None:
    assert tiny_model.generate([]) == []


def test_zero_temperature_rows_stay_greedy_in_sampled_batch(tiny_model) -> None:
    greedy = [tiny_model.generate([_ask(p, max_new_tokens=10)])[0].text for p in PROMPTS[:2]]
    batch = [
        _ask(PROMPTS[0], max_new_tokens=10),
        _ask(PROMPTS[0], max_new_tokens=10, temperature=1.5, seed=7),
        _ask(PROMPTS[1], max_new_tokens=10),
        _ask(PROMPTS[0], max_new_tokens=10, temperature=1.5, seed=8),
    ]
    first = tiny_model.generate(batch)
    assert first[0].text == greedy[0]
    assert first[2].text == greedy[1]
    assert first[1].text != greedy[0], "a hot row should not reproduce the greedy answer"
    assert first[1].text != first[3].text, "different seeds should sample differently"
    again = tiny_model.generate(batch)
    assert [r.text for r in again] == [r.text for r in first], "seeded sampling is reproducible"


def test_seeded_row_does_not_depend_on_its_neighbours(tiny_model) -> None:
    hot = _ask(PROMPTS[1], max_new_tokens=10, temperature=1.0, seed=3)
    alone = tiny_model.generate([hot])[0].text
    mixed = tiny_model.generate([_ask(PROMPTS[0], max_new_tokens=4), hot])[1].text
    assert mixed == alone


def test_per_row_token_budgets(tiny_model) -> None:
    short, long = tiny_model.generate(
        [_ask(PROMPTS[1], max_new_tokens=3), _ask(PROMPTS[1], max_new_tokens=12)]
    )
    assert short.completion_tokens == 3
    assert long.completion_tokens == 12
    assert long.text.startswith(short.text)
    assert len(short.text) < len(long.text)


def test_chunks_by_max_batch_size(tiny_model) -> None:
    saved = tiny_model.max_batch_size
    tiny_model.max_batch_size = 2
    try:
        results = tiny_model.generate([_ask(p, max_new_tokens=4) for p in PROMPTS])
    finally:
        tiny_model.max_batch_size = saved
    assert [r.extra["batch_size"] for r in results] == [2, 2, 1]


def test_concurrent_callers_get_their_own_answers(tiny_model) -> None:
    expected = [tiny_model.generate([_ask(p, max_new_tokens=6)])[0].text for p in PROMPTS]
    got: dict[int, str] = {}

    def worker(index: int) -> None:
        got[index] = tiny_model.generate([_ask(PROMPTS[index], max_new_tokens=6)])[0].text

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(PROMPTS))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [got[i] for i in range(len(PROMPTS))] == expected


def test_passes_conformance_check(tiny_model) -> None:
    check_chat_model(tiny_model, deterministic=True)


def test_mixed_adapter_batch_equals_single_calls(tiny_adapter_model) -> None:
    model = tiny_adapter_model
    assert model.adapters == ("a1", "a2")
    batch = [
        _ask(PROMPTS[1], max_new_tokens=10),
        _ask(PROMPTS[1], max_new_tokens=10, adapter="a1"),
        _ask(PROMPTS[1], max_new_tokens=10, adapter="a2"),
        _ask(PROMPTS[2], max_new_tokens=10, adapter="a1"),
    ]
    mixed = [r.text for r in model.generate(batch)]
    alone = [model.generate([r])[0].text for r in batch]
    assert mixed == alone
    assert mixed[1] != mixed[0], "adapter a1 should change the base model's answer"
    assert mixed[2] != mixed[1], "the two adapters should differ"
    assert model.generate(batch[1:2])[0].extra["adapter"] == "a1"


def test_base_rows_of_adapter_model_match_plain_model(tiny_model, tiny_adapter_model) -> None:
    request = _ask(PROMPTS[2], max_new_tokens=10)
    assert tiny_adapter_model.generate([request])[0].text == tiny_model.generate([request])[0].text


def test_unknown_adapter_names_loaded_ones(tiny_adapter_model, tiny_model) -> None:
    with pytest.raises(ConfigError, match=r"unknown adapter 'nope'.*a1, a2"):
        tiny_adapter_model.generate([_ask("hi", adapter="nope")])
    with pytest.raises(ConfigError, match="loaded adapters: none"):
        tiny_model.generate([_ask("hi", adapter="a1")])


def test_bad_adapter_folder(tiny_model_dir: Path, tmp_path: Path) -> None:
    from collabui.models.local import LocalModel

    with pytest.raises(ModelLoadError, match="not a PEFT adapter folder"):
        LocalModel(tiny_model_dir, adapters={"x": tmp_path})
    with pytest.raises(ConfigError, match="invalid adapter name"):
        LocalModel(tiny_model_dir, adapters={"__base__": tmp_path})


def test_missing_path_and_non_model_folder(tmp_path: Path) -> None:
    from collabui.models.local import LocalModel

    with pytest.raises(ModelLoadError, match="does not exist"):
        LocalModel(tmp_path / "missing")
    (tmp_path / "notes.txt").write_text("not a model")
    with pytest.raises(ModelLoadError, match="no config.json"):
        LocalModel(tmp_path)
    (tmp_path / "config.json").write_text("{broken")
    with pytest.raises(ModelLoadError, match="could not load the model"):
        LocalModel(tmp_path)


def test_bad_arguments(tiny_model_dir: Path) -> None:
    from collabui.models.local import LocalModel

    with pytest.raises(ConfigError, match="max_batch_size"):
        LocalModel(tiny_model_dir, max_batch_size=0)
    with pytest.raises(ConfigError, match="unknown dtype"):
        LocalModel(tiny_model_dir, dtype="float99")
