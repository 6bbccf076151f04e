"""A transformers chat model that answers a whole batch of requests in one ``generate`` call.

Per-request settings that ``transformers.generate`` only knows per batch are handled by one
logits processor (:func:`_row_processor_class`), so a batch never has to be split:

* **temperature**: rows with temperature 0 stay greedy; other rows are sampled from
  ``softmax(logits / temperature)`` with their own ``torch.Generator``.
* **seed**: each sampled row owns a generator seeded with the request's seed. A request's
  sampled tokens thus depend only on its seed and its own logits, not on its neighbours in the
  batch (up to the tiny float differences that left padding can cause). Requests without a seed
  draw a fresh random seed.
* **max_new_tokens**: the batch runs for the largest budget; a row that used its own budget is
  forced to emit the stop token.
* **adapter**: named LoRA adapters are loaded once through PEFT and selected per row with PEFT's
  ``adapter_names`` (``"__base__"`` for requests without an adapter).

**Prefix KV-cache reuse** (``prefix_cache=True``, the default): the prompts of a batch are
split into their longest common token prefix and per-row suffixes. The prefix's keys and values
are taken from a small LRU (:mod:`collabui.models.prefix_cache`, keyed by adapter and token ids,
so it survives across the supersteps of a team step) or computed once per adapter, then
expanded to the batch; only the suffixes (left-padded *between* prefix and suffix, masked out,
with positions from the attention mask) go through prefill, and the batch decodes together.
``model.stats`` counts prompt tokens requested against prompt tokens computed.

torch, transformers and peft are imported inside functions so importing this module is cheap.
"""

from __future__ import annotations

import logging
import threading
import time
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from collabui.errors import ConfigError, ModelError, ModelLoadError
from collabui.models._loading import (
    first_line,
    import_torch,
    load,
    plain_cache_model,
    resolve_device,
    resolve_dtype,
    stop_token_ids,
)
from collabui.models._sampling import row_processor_class
from collabui.models.base import ChatModel, ChatRequest, ChatResult
from collabui.models.prefix_cache import (
    PrefixCacheStats,
    PrefixKVCache,
    common_prefix_length,
    unique_prefix_tokens,
)
from collabui.serving.schema import guided_schema

__all__ = ["LocalModel", "BASE_ADAPTER"]

log = logging.getLogger(__name__)

#: The adapter name PEFT uses for "no adapter" rows in a mixed batch.
BASE_ADAPTER = "__base__"
#: Shorter shared prefixes are not worth a separate forward pass.
_MIN_PREFIX = 8


class LocalModel(ChatModel):
    """A local causal LM (a folder with ``config.json``, weights and a chat-template tokenizer).

    Args:
        path_or_dir: the model folder.
        device: ``"auto"`` (CUDA when available, else CPU), or any torch device string.
        dtype: ``"auto"`` (bfloat16 on CUDA, float32 on CPU), a dtype name, or a torch dtype.
        adapters: optional ``{name: adapter_folder}`` of PEFT LoRA adapters to serve.
        max_batch_size: the largest batch one ``generate`` call of transformers receives;
            longer request lists are answered chunk by chunk.
        threads: if given, ``torch.set_num_threads(threads)`` (process-wide).
        prefix_cache: reuse the KV cache of the prompts' shared prefix within a batch and
            across calls (see the module docstring); False runs every prompt in full.
            Ignored (off) for models whose cache is not a plain full-attention one.
        prefix_cache_size: cached prefixes kept (LRU), across adapters.
        guided_json: constrain every answer to a JSON schema (``"web"``, ``"mobile"``: that
            space's answer schema; or a schema dict): tokens that would break the JSON are
            masked (llguidance; see :mod:`collabui.models.guided`). None: free text.
        merge: LoRA adapter folders merged into the base weights at load, in order, before
            ``adapters`` are loaded on top (a shared stage-1 adapter under per-agent ones).
        team_defaults: TeamConfig fields this model was trained for (e.g. its prompt style
            and per-agent adapter names); a team applies them where its config says ``auto``.

    Attributes:
        stats: cumulative :class:`PrefixCacheStats` (``prompt_tokens_total``,
            ``prompt_tokens_computed``, ...); ``stats.reset()`` zeroes them.

    ``generate`` is thread-safe: calls from several threads are serialized by a lock.

    Raises:
        ModelLoadError: the folder or an adapter folder is missing or not loadable.
        ConfigError: an argument is invalid.
    """

    def __init__(
        self,
        path_or_dir: str | Path,
        *,
        device: str = "auto",
        dtype: Any = "auto",
        adapters: Mapping[str, str | Path] | None = None,
        max_batch_size: int = 8,
        threads: int | None = None,
        prefix_cache: bool = True,
        prefix_cache_size: int = 8,
        guided_json: Any = None,
        merge: Sequence[str | Path] = (),
        team_defaults: Mapping[str, Any] | None = None,
    ) -> None:
        if max_batch_size < 1:
            raise ConfigError(f"max_batch_size must be >= 1, got {max_batch_size}; pass 1 or more")
        self.path = Path(path_or_dir).expanduser()
        self.name = f"local:{self.path.name}"
        self.max_batch_size = max_batch_size
        self._lock = threading.Lock()
        self._adapters: dict[str, Path] = {}
        self._prefixes = PrefixKVCache(prefix_cache_size)
        self.stats = PrefixCacheStats()
        started = time.perf_counter()
        torch = import_torch()
        if threads is not None:
            torch.set_num_threads(int(threads))
        self.device = resolve_device(torch, device)
        self.dtype = resolve_dtype(torch, dtype, self.device)
        self.tokenizer, self.model = load(self.path, self.device, self.dtype)
        for folder in merge:
            self._merge_adapter(Path(folder).expanduser())
        self.team_defaults = dict(team_defaults or {})
        self._stop_ids = stop_token_ids(self.tokenizer)
        self.prefix_cache = bool(prefix_cache) and plain_cache_model(self.model.config)
        self.guided_schema = guided_schema(guided_json)
        self._guide = self._guided_decoder() if self.guided_schema is not None else None
        for adapter_name, adapter_dir in (adapters or {}).items():
            self._load_adapter(adapter_name, adapter_dir)
        self.load_seconds = time.perf_counter() - started
        log.info("loaded %s on %s (%s) in %.1f s", self.path, self.device, self.dtype, self.load_seconds)

    @classmethod
    def embedded(cls, name: str = "smollm2", **kwargs: Any) -> LocalModel:
        """Load the embedded model (converted once into the user cache dir); kwargs as ``__init__``."""
        from collabui.models.embedded import embedded_model_dir

        model = cls(embedded_model_dir(name), **kwargs)
        model.name = name
        return model

    def _guided_decoder(self) -> Any:
        from collabui.models.guided import GuidedDecoder

        vocab = int(self.model.get_output_embeddings().weight.shape[0])
        return GuidedDecoder(self.tokenizer, self.guided_schema, self._stop_ids, vocab)

    @property
    def adapters(self) -> tuple[str, ...]:
        """Names of the loaded LoRA adapters, in load order."""
        return tuple(self._adapters)

    def add_adapter(self, name: str, path: str | Path) -> None:
        """Load one more LoRA adapter (e.g. one just trained) under ``name``."""
        with self._lock:
            self._load_adapter(name, path)

    def unique_prompt_tokens(self, requests: Sequence[ChatRequest]) -> int:
        """Distinct prompt-token prefixes of ``requests`` (the least any prefix sharing computes)."""
        with self._lock:
            return unique_prefix_tokens(self._token_ids(list(requests)))

    def clear_prefix_cache(self) -> None:
        """Forget every cached prompt prefix (benchmarks start each phase cold)."""
        with self._lock:
            self._prefixes.clear()

    def generate(self, requests: Sequence[ChatRequest]) -> list[ChatResult]:
        """Answer ``requests`` in order, ``max_batch_size`` at a time in one batched generate."""
        requests = list(requests)
        for request in requests:
            self._check_adapter(request.adapter)
        results: list[ChatResult] = []
        with self._lock:
            for start in range(0, len(requests), self.max_batch_size):
                results.extend(self._generate_chunk(requests[start : start + self.max_batch_size]))
        return results

    def close(self) -> None:
        """Drop the weights; the object is unusable afterwards. Safe to call twice."""
        with self._lock:
            self.model = None
            self.tokenizer = None
            self._prefixes.clear()

    # -- internals ---------------------------------------------------------------------------

    def _merge_adapter(self, folder: Path) -> None:
        PeftModel = _peft_model_class()
        _check_adapter_folder("merged", folder)
        try:
            with warnings.catch_warnings():
                # A tied embedding's delta merges into the one shared matrix, so the output head
                # changes with it: what a full fine-tune of a tied model did (training.extract).
                warnings.filterwarnings("ignore", message=".*tie_word_embeddings.*", category=UserWarning)
                self.model = PeftModel.from_pretrained(self.model, str(folder)).merge_and_unload()
        except Exception as exc:
            raise ModelLoadError(
                f"adapter {folder} cannot be merged into {self.path} ({type(exc).__name__}: "
                f"{first_line(exc)}); train the adapter on this base model"
            ) from exc
        self.model.eval()

    def _load_adapter(self, name: str, path: str | Path) -> None:
        if not name or name == BASE_ADAPTER:
            raise ConfigError(f"invalid adapter name {name!r}; use a non-empty name other than {BASE_ADAPTER}")
        folder = Path(path).expanduser()
        _check_adapter_folder(repr(name), folder)
        PeftModel = _peft_model_class()
        try:
            if isinstance(self.model, PeftModel):
                self.model.load_adapter(str(folder), adapter_name=name)
            else:
                self.model = PeftModel.from_pretrained(self.model, str(folder), adapter_name=name)
        except Exception as exc:
            raise ModelLoadError(
                f"adapter {name!r} from {folder} does not fit {self.path} ({type(exc).__name__}: "
                f"{first_line(exc)}); train the adapter on this base model"
            ) from exc
        self.model.eval()
        self._adapters[name] = folder
        self._prefixes.clear()  # a name loaded again must not reuse the old weights' prefixes

    def _check_adapter(self, adapter: str | None) -> None:
        if adapter is not None and adapter not in self._adapters:
            loaded = ", ".join(self._adapters) or "none"
            raise ConfigError(
                f"unknown adapter {adapter!r} for {self.name}; loaded adapters: {loaded} "
                "(pass adapters={name: folder} to LocalModel)"
            )

    def _generate_chunk(self, batch: list[ChatRequest]) -> list[ChatResult]:
        if not batch:
            return []
        if self.model is None:
            raise ModelError(f"{self.name} was closed; create a new LocalModel")
        torch = import_torch()
        from transformers import GenerationConfig, LogitsProcessorList

        started = time.perf_counter()
        inputs, prompt_counts = self._inputs(batch)
        prompt_len = int(inputs["input_ids"].shape[1])
        budgets = [max(1, r.max_new_tokens) for r in batch]
        processors = [row_processor_class()(batch, budgets, prompt_len, self._stop_ids[0], self.device)]
        if self._guide is not None:  # masks first, so rows sample among valid tokens only
            processors.insert(0, self._guide.processor(len(batch), prompt_len))
        config = GenerationConfig(
            max_new_tokens=max(budgets),
            do_sample=False,  # sampling happens per row inside the processor
            eos_token_id=self._stop_ids,
            pad_token_id=self.tokenizer.pad_token_id,
        )
        extra: dict[str, Any] = {}
        if self._adapters:
            extra["adapter_names"] = [r.adapter or BASE_ADAPTER for r in batch]
        try:
            with torch.inference_mode():
                output = self.model.generate(
                    **inputs,
                    generation_config=config,
                    logits_processor=LogitsProcessorList(processors),
                    **extra,
                )
        except Exception as exc:
            raise ModelError(
                f"{self.name} failed to generate ({type(exc).__name__}: {first_line(exc)}); "
                "try a smaller max_batch_size or shorter prompts"
            ) from exc
        latency = time.perf_counter() - started
        return [
            self._result(output[row, prompt_len:].tolist(), budgets[row], int(prompt_counts[row]), latency, batch[row], len(batch))
            for row in range(len(batch))
        ]

    def _inputs(self, batch: list[ChatRequest]) -> tuple[dict[str, Any], list[int]]:
        """``generate`` inputs for ``batch`` (with a prefix cache when one applies) and each
        row's prompt length; updates ``stats``."""
        ids = self._token_ids(batch)
        counts = [len(row) for row in ids]
        self.stats.batches += 1
        self.stats.prompt_tokens_total += sum(counts)
        if self.prefix_cache:
            inputs = self._prefix_inputs(batch, ids)
            if inputs is not None:
                return inputs, counts
        self.stats.prompt_tokens_computed += sum(counts)
        return self._padded(ids), counts

    def _padded(self, ids: list[list[int]]) -> dict[str, Any]:
        torch = import_torch()
        width = max(len(row) for row in ids)
        pad = self.tokenizer.pad_token_id
        rows = [[pad] * (width - len(row)) + row for row in ids]
        masks = [[0] * (width - len(row)) + [1] * len(row) for row in ids]
        return {
            "input_ids": torch.tensor(rows, dtype=torch.long, device=self.device),
            "attention_mask": torch.tensor(masks, dtype=torch.long, device=self.device),
        }

    def _prefix_inputs(self, batch: list[ChatRequest], ids: list[list[int]]) -> dict[str, Any] | None:
        """Inputs whose shared prefix is already in ``past_key_values``, or None if too short.

        Layout per row: ``prefix | pad ... | suffix``. The attention mask hides the pads and
        transformers derives position ids from the mask's cumulative sum, so every suffix token
        sits at the position it has in its unpadded prompt.
        """
        torch = import_torch()
        # Each row keeps at least one suffix token: generate needs it to produce first logits.
        length = min(common_prefix_length(ids), min(len(row) for row in ids) - 1)
        if length < _MIN_PREFIX:
            return None
        prefix = ids[0][:length]
        names = [r.adapter or BASE_ADAPTER for r in batch]
        states = {name: self._prefix_states(name, prefix) for name in dict.fromkeys(names)}
        suffixes = [row[length:] for row in ids]
        self.stats.prompt_tokens_computed += sum(len(s) for s in suffixes)
        inputs = self._padded(suffixes)
        prefix_ids = torch.tensor([prefix] * len(batch), dtype=torch.long, device=self.device)
        inputs["input_ids"] = torch.cat([prefix_ids, inputs["input_ids"]], dim=1)
        inputs["attention_mask"] = torch.cat([torch.ones_like(prefix_ids), inputs["attention_mask"]], dim=1)
        inputs["past_key_values"] = self._batch_cache([states[name] for name in names])
        return inputs

    def _prefix_states(self, adapter: str, prefix: list[int]) -> Any:
        """Per-layer key/value states of ``prefix`` under ``adapter``: cached, extended or new."""
        have, layers = self._prefixes.longest_match(adapter, prefix)
        self.stats.prefix_tokens_reused += have
        if have == len(prefix):
            return layers
        layers = self._extend(adapter, layers, prefix[have:])
        self.stats.prompt_tokens_computed += len(prefix) - have
        self._prefixes.put(adapter, prefix, layers)
        return layers

    def _extend(self, adapter: str, layers: Any, tokens: list[int]) -> Any:
        """Run ``tokens`` after the cached ``layers`` (None: from scratch); the new layers."""
        torch = import_torch()
        from transformers import DynamicCache

        config = self.model.config
        cache = DynamicCache(ddp_cache_data=layers, config=config) if layers else DynamicCache(config=config)
        extra: dict[str, Any] = {"adapter_names": [adapter]} if self._adapters else {}
        ids = torch.tensor([tokens], dtype=torch.long, device=self.device)
        try:
            with torch.inference_mode():
                # logits_to_keep=1: the prefix's logits are never used; skip the vocab matmul.
                out = self.model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1, **extra)
        except Exception as exc:
            raise ModelError(
                f"{self.name} failed on a prompt prefix ({type(exc).__name__}: {first_line(exc)}); "
                "pass prefix_cache=False to LocalModel"
            ) from exc
        return tuple((layer.keys, layer.values) for layer in out.past_key_values.layers)

    def _batch_cache(self, rows: list[Any]) -> Any:
        """One DynamicCache holding row r's prefix states in batch row r."""
        torch = import_torch()
        from transformers import DynamicCache

        data = [
            (torch.cat([row[k][0] for row in rows]), torch.cat([row[k][1] for row in rows]))
            for k in range(len(rows[0]))
        ]
        return DynamicCache(ddp_cache_data=data, config=self.model.config)

    def _token_ids(self, batch: list[ChatRequest]) -> list[list[int]]:
        # The template already holds the special tokens; adding BOS again would shift the prompt.
        encoded = self.tokenizer(self._texts(batch), add_special_tokens=False)
        return [list(row) for row in encoded["input_ids"]]

    def _texts(self, batch: list[ChatRequest]) -> list[str]:
        texts = []
        for request in batch:
            messages = [dict(m) for m in request.messages]
            try:
                texts.append(
                    self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
                )
            except Exception as exc:
                raise ConfigError(
                    f"the chat template of {self.name} rejected the messages ({first_line(exc)}); "
                    "send {'role', 'content'} messages with roles system/user/assistant"
                ) from exc
        return texts

    def _result(
        self, tokens: list[int], budget: int, prompt_tokens: int, latency: float, request: ChatRequest, size: int
    ) -> ChatResult:
        stop_at = next((i for i, t in enumerate(tokens) if t in self._stop_ids), len(tokens))
        # A stop token emitted within the budget was generated by the model and counts; one
        # forced at the budget (or pad after it) does not.
        completion = min(stop_at + 1, budget) if stop_at < len(tokens) else len(tokens)
        text = self.tokenizer.decode(tokens[:stop_at], skip_special_tokens=True).strip()
        extra = {"batch_size": size, "adapter": request.adapter, "finished": stop_at < budget}
        return ChatResult(text, prompt_tokens, completion, latency, extra)


def _check_adapter_folder(what: str, folder: Path) -> None:
    if not (folder / "adapter_config.json").is_file():
        raise ModelLoadError(
            f"adapter {what}: {folder} is not a PEFT adapter folder (no adapter_config.json); "
            "pass the folder written by save_pretrained of a PEFT model"
        )


def _peft_model_class() -> Any:
    try:
        from peft import PeftModel
    except ImportError:
        raise ModelLoadError("LoRA adapters need peft; run `pip install 'collabui-agents[train]'`") from None
    return PeftModel
