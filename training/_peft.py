"""Model loading, LoRA set-up and clean-up shared by the DPO and SFT trainers.

Both trainers load the base once, hand it to a TRL trainer with a fresh (or continued) LoRA
adapter, save the adapter atomically and unload the LoRA layers so the untouched base serves the
next adapter. Everything here is package-internal; torch, transformers and PEFT load lazily.
"""

from __future__ import annotations

import copy
import hashlib
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from collabui.errors import ConfigError, ModelError, ModelLoadError

__all__ = [
    "LoraConfigMixin",
    "adapter_name",
    "common_prefix",
    "default_bf16",
    "fingerprint",
    "first_line",
    "fit_lora",
    "fresh_tmp",
    "init_lora_config",
    "load_base",
    "load_init_weights",
    "publish",
    "restore_base",
    "settle_bf16",
    "tokens",
    "trainer_args",
]


def adapter_name(agent: int) -> str:
    """The adapter name (and folder name) of agent ``agent``: ``agent{i}``."""
    return f"agent{int(agent)}"


def default_bf16(fp16: bool = False) -> bool:
    """bf16 mixed precision by default where the hardware computes it: CUDA, or a CPU with
    AVX512-BF16 or AMX (:func:`collabui._hardware.cpu_has_native_bf16`). On such a CPU a full
    fine-tuning step of SmolLM2-135M (batch 8, ~200-token rows) took 31.6-36.3 s for 6 steps
    against 48.9-59.1 s in float32, at the same loss; where bf16 is emulated it is slower, so
    float32 stays the default there. Never with ``fp16``."""
    import torch

    from collabui._hardware import cpu_has_native_bf16

    return not fp16 and (bool(torch.cuda.is_available()) or cpu_has_native_bf16())


def settle_bf16(config: Any) -> None:
    """Resolve a trainer config's ``bf16=None`` to :func:`default_bf16`, and let bf16 train on a
    machine without CUDA: transformers refuses it there ("Your setup doesn't support bf16/gpu")
    unless ``use_cpu`` is set, and then autocasts the forward pass to bf16 on the CPU (the
    weights and optimizer stay float32)."""
    import torch

    if config.bf16 is None:
        config.bf16 = default_bf16(config.fp16)
    if config.bf16 and not torch.cuda.is_available():
        config.use_cpu = True


def first_line(exc: BaseException) -> str:
    """The first line of ``exc`` (at most 300 characters), or its type name if it has no text."""
    lines = str(exc).strip().splitlines()
    return lines[0][:300] if lines else type(exc).__name__


class LoraConfigMixin:
    """Shared behaviour of trainer configs that declare ``lora_r``, ``lora_alpha``,
    ``lora_dropout`` and ``lora_target_modules`` dataclass fields.

    The fields themselves stay on each config: their defaults and help texts differ per stage,
    and transformers' ``HfArgumentParser`` reads them from the dataclass.
    """

    def check_lora_fields(self, example_rank: int) -> None:
        """Reject a rank < 1 (naming ``example_rank`` as the fix) and make the modules a list."""
        if self.lora_r < 1:  # type: ignore[attr-defined]
            raise ConfigError(
                f"lora_r must be >= 1, got {self.lora_r}; "  # type: ignore[attr-defined]
                f"pass a positive rank such as {example_rank}"
            )
        modules = self.lora_target_modules  # type: ignore[attr-defined]
        self.lora_target_modules = [modules] if isinstance(modules, str) else list(modules)

    def lora_config(self, layers: int | None = None) -> Any:
        """The ``peft.LoraConfig`` of a fresh adapter; on the decoder layers from the config's
        ``lora_from_layer`` up when it declares one above 0 (``layers``: the model's layer count).

        Raises:
            ConfigError: ``lora_from_layer`` leaves no layer of the ``layers`` the model has.
        """
        from peft import LoraConfig

        first = int(getattr(self, "lora_from_layer", 0) or 0)
        which: dict[str, Any] = {}
        if first:
            if layers is None or first >= layers:
                raise ConfigError(f"lora_from_layer={first} leaves no decoder layer to train (the model has "
                                  f"{layers if layers is not None else 'an unknown number of'} layers); "
                                  "pass a smaller index, or 0 for every layer")
            which = {"layers_to_transform": list(range(first, layers)), "layers_pattern": "layers"}
        return LoraConfig(
            r=self.lora_r,  # type: ignore[attr-defined]
            lora_alpha=self.lora_alpha,  # type: ignore[attr-defined]
            lora_dropout=self.lora_dropout,  # type: ignore[attr-defined]
            target_modules=list(self.lora_target_modules),  # type: ignore[attr-defined]
            task_type="CAUSAL_LM",
            **which,
        )


# -- tokens ------------------------------------------------------------------------------------


def tokens(
    tokenizer: Any, messages: list[dict[str, str]], add_generation_prompt: bool = False
) -> list[int]:
    """Token ids of ``messages`` through the tokenizer's chat template (as TRL tokenizes)."""
    out = tokenizer.apply_chat_template(
        list(messages), tokenize=True, return_dict=True, add_generation_prompt=add_generation_prompt
    )
    return list(out["input_ids"])


def common_prefix(a: list[int], b: list[int]) -> int:
    """The length of the longest common prefix of ``a`` and ``b``."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


# -- the base model ----------------------------------------------------------------------------


def load_base(path: Path) -> tuple[Any, Any]:
    """``(tokenizer, model)`` of the model folder ``path`` (CUDA bf16 if present, else CPU fp32).

    Raises:
        ModelLoadError: not a model folder, unloadable, or its tokenizer has no chat template.
    """
    if not (path / "config.json").is_file():
        raise ModelLoadError(
            f"{path} is not a model folder (no config.json); pass the base model folder"
        )
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(device)
    except Exception as exc:
        raise ModelLoadError(
            f"could not load the base model in {path} ({type(exc).__name__}: {first_line(exc)}); "
            "pass a folder written by save_pretrained"
        ) from exc
    if not getattr(tokenizer, "chat_template", None):
        raise ModelLoadError(
            f"the tokenizer in {path} has no chat template; use an instruct/chat model"
        )
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer, model


def fingerprint(model: Any) -> str:
    """sha256 over every base parameter and buffer (names and bytes), LoRA excluded."""
    import torch

    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        if "lora_" in name:
            continue
        digest.update(name.encode())
        flat = tensor.detach().cpu().contiguous().reshape(-1)
        digest.update(flat.view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def restore_base(peft_model: Any, base: Any) -> None:
    """Remove the LoRA layers (no merge) and TRL's per-run patches so the next agent starts clean."""
    unloaded = peft_model.unload()
    if unloaded is not base:
        raise ModelError(
            "PEFT returned a different base model after unload; this is a bug, please report it"
        )
    # TRL patches forward (fused LM head) on the instance and hooks the input embeddings.
    base.__dict__.pop("forward", None)
    if hasattr(base, "disable_input_require_grads"):
        base.disable_input_require_grads()
    # transformers 5.23 renamed gradient to activation checkpointing (old names warn).
    if hasattr(type(base), "is_activation_checkpointing"):
        if base.is_activation_checkpointing:
            base.activation_checkpointing_disable()
    elif getattr(base, "is_gradient_checkpointing", False):
        base.gradient_checkpointing_disable()
    base.eval()


# -- adapters ----------------------------------------------------------------------------------


def init_lora_config(init: Path) -> Any:
    """The ``LoraConfig`` of the adapter folder ``init``, made trainable again."""
    from peft import LoraConfig

    try:
        lora = LoraConfig.from_pretrained(str(init))
    except Exception as exc:
        raise ModelLoadError(
            f"initial adapter {init} is unreadable ({exc}); pass a PEFT LoRA folder"
        ) from exc
    lora.inference_mode = False
    return lora


def load_init_weights(peft_model: Any, init: Path) -> None:
    """Copy the weights of the adapter folder ``init`` into ``peft_model``'s default adapter."""
    from peft.utils import load_peft_weights, set_peft_model_state_dict

    weights = load_peft_weights(str(init))
    result = set_peft_model_state_dict(peft_model, weights, adapter_name="default")
    missing = [k for k in getattr(result, "missing_keys", []) if "lora_" in k]
    if missing:
        raise ModelLoadError(
            f"initial adapter {init} does not fit the base ({len(missing)} LoRA weights "
            "missing); train it on this base model or drop init_adapters_dir"
        )


def trainer_args(config: Any, name: str, progress: bool) -> Any:
    """A copy of ``config`` whose TRL scratch folder is ``<output_dir>/<name>``."""
    args = copy.copy(config)  # TrainingArguments is mutable: never touch the caller's config
    args.output_dir = str(Path(config.output_dir) / name)
    args.disable_tqdm = not progress
    return args


def fit_lora(
    make_trainer: Callable[[Any], Any],
    model: Any,
    init: Path | None,
    peft_config: Any,
    *,
    what: str,
    hint: str,
) -> Any:
    """Build ``make_trainer(peft_config)`` (its LM head scoring the answer tokens only:
    :func:`~collabui.training._compact_head.compact_lm_head`), continue from ``init`` if given,
    train; the trainer.

    Args:
        make_trainer: builds the TRL trainer around ``model`` with the given ``peft_config``.
        model: the shared base; on failure its LoRA layers are removed again.
        init: an adapter folder whose weights the fresh adapter starts from, or None.
        peft_config: the ``LoraConfig`` of the adapter to train.
        what: names the run in the error (``"DPO of agent0"``).
        hint: the fix the error suggests.

    Raises:
        ConfigError, ModelLoadError: as raised while building or training.
        ModelError: any other failure, with ``what`` and ``hint`` in its one-line message.
    """
    from collabui.training._compact_head import compact_lm_head

    trainer = None
    try:
        trainer = make_trainer(peft_config)
        compact_lm_head(trainer)  # on a CPU, TRL's head would score every page token too
        if init is not None:
            load_init_weights(trainer.model, init)
        trainer.train()
    except Exception as exc:
        if trainer is not None:  # leave a clean base behind for the caller
            restore_base(trainer.accelerator.unwrap_model(trainer.model), model)
        if isinstance(exc, (ConfigError, ModelLoadError)):
            raise
        raise ModelError(
            f"{what} failed ({type(exc).__name__}: {first_line(exc)}); {hint}"
        ) from exc
    return trainer


def fresh_tmp(target: Path) -> Path:
    """An emptied temp sibling of ``target`` (``.<name>.tmp``) to build it in before :func:`publish`."""
    tmp = target.parent / f".{target.name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    return tmp


def publish(tmp: Path, target: Path) -> None:
    """Replace ``target`` by the finished folder ``tmp`` (a rename: readers never see half)."""
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)
