"""Loading a transformers causal LM for :class:`~collabui.models.local.LocalModel`: torch
import, device and dtype choice, the folder checks, stop tokens; each failure is one line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from collabui.errors import ConfigError, ModelLoadError


def import_torch() -> Any:
    try:
        import torch
    except ImportError:
        raise ModelLoadError(
            "local models need torch and transformers; run `make setup` (torch==2.13.0 first, then "
            "`pip install 'collabui-agents[local]'`; on a CPU machine take torch's CPU wheel)"
        ) from None
    return torch


def resolve_device(torch: Any, device: str) -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"device {device!r} requested but CUDA is not available; use device='cpu'")
    return device


def resolve_dtype(torch: Any, dtype: Any, device: str) -> Any:
    if dtype == "auto":
        return torch.bfloat16 if device.startswith("cuda") else torch.float32
    if isinstance(dtype, str):
        resolved = getattr(torch, dtype, None)
        if not isinstance(resolved, torch.dtype):
            raise ConfigError(f"unknown dtype {dtype!r}; use 'auto', 'float32', 'bfloat16' or 'float16'")
        return resolved
    return dtype


def load(path: Path, device: str, dtype: Any) -> tuple[Any, Any]:
    """Load tokenizer and model from ``path`` or raise one actionable ModelLoadError."""
    if not path.is_dir():
        raise ModelLoadError(
            f"model folder {path} does not exist; pass a folder with config.json and weights "
            "(or use the embedded model: `smollm2`)"
        )
    if not (path / "config.json").is_file():
        raise ModelLoadError(
            f"{path} is not a transformers model folder (no config.json); pass the folder written "
            "by save_pretrained"
        )
    try:
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError:
        raise ModelLoadError("local models need transformers; run `pip install 'collabui-agents[local]'`") from None
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, padding_side="left")
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(device)
    except Exception as exc:
        raise ModelLoadError(
            f"could not load the model in {path} ({type(exc).__name__}: {first_line(exc)}); "
            "check that the folder holds a complete causal LM and its tokenizer"
        ) from exc
    if not getattr(tokenizer, "chat_template", None):
        raise ModelLoadError(f"the tokenizer in {path} has no chat template; use an instruct/chat model")
    tokenizer.padding_side = "left"  # decoder-only batching: prompts must end at the same column
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    model.eval()
    return tokenizer, model


def plain_cache_model(config: Any) -> bool:
    """True when the model's cache is full attention only (what prefix reuse assumes)."""
    text = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
    if getattr(text, "sliding_window", None) and getattr(text, "use_sliding_window", True):
        return False
    layer_types = getattr(text, "layer_types", None) or ()
    return all(t == "full_attention" for t in layer_types)


def stop_token_ids(tokenizer: Any) -> list[int]:
    """The ids that end an answer: EOS and the ChatML end-of-turn token when present."""
    ids: list[int] = []
    if tokenizer.eos_token_id is not None:
        ids.append(int(tokenizer.eos_token_id))
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    if isinstance(im_end, int) and im_end != tokenizer.unk_token_id and im_end not in ids:
        ids.append(im_end)
    if not ids:
        raise ModelLoadError("the tokenizer has no end-of-sequence token; use a chat model")
    return ids


def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__
