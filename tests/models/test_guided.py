"""Schema-guided decoding on the local backend: tiny random models emit only schema-valid JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from collabui.errors import ConfigError
from collabui.models import ChatRequest
from collabui.parsing import parse_proposal

YES_NO = {"enum": ["yes", "no"]}


def _ask(text: str, **kwargs: object) -> ChatRequest:
    return ChatRequest(({"role": "user", "content": text},), **kwargs)


@pytest.fixture(scope="module")
def yes_no_model(tiny_model_dir: Path):
    from collabui.models.local import LocalModel

    return LocalModel(tiny_model_dir, device="cpu", guided_json=YES_NO)


def test_a_random_model_only_answers_the_enum_and_stops(yes_no_model, tiny_model) -> None:
    requests = [_ask("Answer yes or no.", max_new_tokens=12),
                _ask("Is the sky green? " * 5, max_new_tokens=12, temperature=1.5, seed=1),
                _ask("hi", max_new_tokens=12, temperature=1.5, seed=2)]
    free = tiny_model.generate(requests)
    assert not any(r.text in ('"yes"', '"no"') for r in free), "unguided, the random model babbles"
    guided = yes_no_model.generate(requests)
    assert [r.text for r in guided] == [r.text for r in guided if r.text in ('"yes"', '"no"')]
    assert all(r.extra["finished"] for r in guided), "once the JSON is complete the stop token is forced"
    assert all(r.completion_tokens < 12 for r in guided)


def test_guided_answers_with_and_without_prefix_cache_agree(tiny_model_dir: Path) -> None:
    from collabui.models.local import LocalModel

    shared = "You are one agent of a team. The page: [1] button OK [2] link Help. " * 3
    requests = [_ask(shared + f"Agent {i}: answer.", max_new_tokens=24) for i in range(3)]
    with_cache = LocalModel(tiny_model_dir, device="cpu", guided_json="web")
    without = LocalModel(tiny_model_dir, device="cpu", guided_json="web", prefix_cache=False)
    a, b = with_cache.generate(requests), without.generate(requests)
    assert with_cache.stats.prompt_tokens_computed < with_cache.stats.prompt_tokens_total, "the prefix was shared"
    assert [r.text for r in a] == [r.text for r in b]


def test_web_schema_answers_are_valid_json_prefixes(tiny_model_dir: Path) -> None:
    from collabui.models.local import LocalModel

    model = LocalModel(tiny_model_dir, device="cpu", guided_json="web")
    results = model.generate([_ask("Click OK.", max_new_tokens=60, temperature=1.0, seed=s) for s in range(4)])
    for result in results:
        # Action first, no whitespace: the first tokens are forced whatever the model prefers.
        assert result.text.startswith('{"action":{"action":"'), result.text
        tokens = model.tokenizer(result.text, add_special_tokens=False)["input_ids"]
        assert model._guide.valid_prefix(tokens) == len(tokens), result.text
        if result.extra["finished"]:
            answer = json.loads(result.text)
            assert parse_proposal(result.text, "web").error is None, answer


def test_guided_rows_mix_with_adapters(tiny_model_dir: Path, adapter_dirs: dict[str, Path]) -> None:
    from collabui.models.local import LocalModel

    model = LocalModel(tiny_model_dir, device="cpu", adapters=adapter_dirs, guided_json=YES_NO)
    results = model.generate([_ask("Yes?", max_new_tokens=8, adapter=a) for a in (None, "a1", "a2")])
    assert all(r.text in ('"yes"', '"no"') for r in results), [r.text for r in results]


def test_bad_guided_json_is_one_line(tiny_model_dir: Path) -> None:
    from collabui.models.local import LocalModel

    with pytest.raises(ConfigError, match="unknown|action space") as info:
        LocalModel(tiny_model_dir, device="cpu", guided_json="desk")
    assert "\n" not in str(info.value)
    with pytest.raises(ConfigError, match="does not say which actions"):
        LocalModel(tiny_model_dir, device="cpu", guided_json=True)
    with pytest.raises(ConfigError, match="does not compile"):
        LocalModel(tiny_model_dir, device="cpu", guided_json={"type": "no-such-type"})
