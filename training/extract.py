"""A fully fine-tuned model's weight change as a small LoRA adapter (a low-rank extract).

Full fine-tuning taught the CPU recipe's model more than LoRA on the same data (cookbook/cpu_recipe/
EXPERIMENTS.md, section v34ft), but it writes the whole model (~540 MB), which the package cannot ship.
Each weight's change is small and spread over many directions, yet its leading singular
directions carry the behaviour: the truncated SVD ``delta ~ U_r S_r Vh_r`` of every linear
layer (and, at its own rank, of the tied embedding) becomes a PEFT LoRA adapter with
``B = U_r sqrt(S_r)``, ``A = sqrt(S_r) Vh_r`` and scaling 1. Merged at load like any stage-1
adapter, it rebuilds ``base + low-rank delta``. Parameters outside the targets (the RMSNorm
gains) are not carried; the report names how much they moved.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from collabui.errors import ConfigError

__all__ = ["ExtractReport", "extract_adapter", "linear_module_names"]


@dataclass
class ExtractReport:
    """What an extract kept: ranks, the share of each kind's squared change kept (``energy``),
    the adapter's size, and the relative change of the parameters it did not carry."""

    rank: int
    embedding_rank: int
    target_modules: list[str]
    energy: dict[str, float] = field(default_factory=dict)
    adapter_bytes: int = 0
    not_carried: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def linear_module_names(model: Any) -> list[str]:
    """The leaf names of ``model``'s linear layers but the output head (``q_proj``, ... ``down_proj``)."""
    import torch

    head = model.get_output_embeddings()
    return sorted({name.rsplit(".", 1)[-1] for name, module in model.named_modules()
                   if isinstance(module, torch.nn.Linear) and module is not head})


def extract_adapter(base_model: str | Path, tuned_model: str | Path, out_dir: str | Path, *,
                    rank: int = 48, embedding_rank: int = 32) -> ExtractReport:
    """Write to ``out_dir`` a LoRA adapter (fp16 safetensors) of ``tuned_model``'s change from
    ``base_model``: rank ``rank`` on every linear layer, ``embedding_rank`` on the input
    embedding (0: not carried). Also writes ``extract.json`` (the report) beside it.

    Raises:
        ConfigError: a rank below 1 (or a negative embedding rank), or models of other shapes.
        ModelLoadError: a folder that is not a model.
    """
    from collabui.training._peft import fresh_tmp, load_base, publish

    if rank < 1 or embedding_rank < 0:
        raise ConfigError(f"extract ranks must be >= 1 (linear) and >= 0 (embedding), got {rank} and "
                          f"{embedding_rank}")
    _, base = load_base(Path(base_model))
    _, tuned = load_base(Path(tuned_model))
    tuned_weights = {name: p.detach().float().cpu() for name, p in tuned.named_parameters()}
    _check_same_shapes(base, tuned_weights, base_model, tuned_model)
    targets = linear_module_names(base)
    embed_name = _module_name(base, base.get_input_embeddings())
    report = ExtractReport(rank=rank, embedding_rank=embedding_rank, target_modules=targets)
    report.not_carried = _not_carried(base, tuned_weights, targets, embed_name if embedding_rank else None)
    peft_model = _lora_skeleton(base, targets, embed_name, rank, embedding_rank)
    report.energy = _fill(peft_model, tuned_weights)
    out = Path(out_dir)
    tmp = fresh_tmp(out)
    # save_embedding_layers=False: the adapter only, not a 56 MB copy of the targeted embedding.
    peft_model.half().save_pretrained(str(tmp), save_embedding_layers=False, safe_serialization=True)
    _sort_targets(tmp / "adapter_config.json")
    report.adapter_bytes = (tmp / "adapter_model.safetensors").stat().st_size
    (tmp / "extract.json").write_text(json.dumps(report.to_dict(), indent=1))
    publish(tmp, out)
    return report


def _sort_targets(config_path: Path) -> None:
    """PEFT writes ``target_modules`` in its set's order, which changes with Python's hash seed: sorted,
    the same extract writes the same file (a shipped adapter's diff shows only real changes)."""
    config = json.loads(config_path.read_text())
    config["target_modules"] = sorted(config["target_modules"])
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def _check_same_shapes(base: Any, tuned: dict[str, Any], base_path: Any, tuned_path: Any) -> None:
    own = {name: tuple(p.shape) for name, p in base.named_parameters()}
    theirs = {name: tuple(t.shape) for name, t in tuned.items()}
    if own != theirs:
        differ = sorted(set(own.items()) ^ set(theirs.items()))[:2]
        raise ConfigError(f"{tuned_path} is not a fine-tune of {base_path}: their weights differ in name or "
                          f"shape (e.g. {differ}); extract from a model trained from that base")


def _module_name(model: Any, module: Any) -> str:
    return next(name for name, m in model.named_modules() if m is module)


def _not_carried(base: Any, tuned: dict[str, Any], targets: list[str], embed_name: str | None) -> dict[str, float]:
    """Relative change (||delta|| / ||w||) of every parameter the adapter leaves out, by kind."""
    carried = {f"{embed_name}.weight"} if embed_name else set()
    worst: dict[str, float] = {}
    for name, p in base.named_parameters():
        module = name.rsplit(".", 1)[0]
        if name in carried or module.rsplit(".", 1)[-1] in targets:
            continue
        w = p.detach().float().cpu()
        change = float((tuned[name] - w).norm() / w.norm().clamp_min(1e-12))
        kind = module.rsplit(".", 1)[-1]
        worst[kind] = round(max(worst.get(kind, 0.0), change), 6)
    return worst


def _lora_skeleton(base: Any, targets: list[str], embed_name: str, rank: int, embedding_rank: int) -> Any:
    """The PEFT model whose LoRA factors :func:`_fill` overwrites: alpha = rank (scaling 1)."""
    from peft import LoraConfig, get_peft_model

    modules = [*targets, embed_name] if embedding_rank else list(targets)
    pattern = {embed_name: embedding_rank} if embedding_rank else {}
    config = LoraConfig(r=rank, lora_alpha=rank, target_modules=modules, lora_dropout=0.0,
                        rank_pattern=pattern, alpha_pattern=dict(pattern), task_type="CAUSAL_LM")
    with warnings.catch_warnings():
        # PEFT warns that the tied head shares the targeted embedding: intended, the full
        # fine-tune changed that one shared matrix too.
        warnings.filterwarnings("ignore", message=".*tie_word_embeddings.*", category=UserWarning)
        return get_peft_model(base, config)


def _fill(peft_model: Any, tuned: dict[str, Any]) -> dict[str, float]:
    """Set each LoRA layer's factors from the SVD of its weight's change; the share of the
    squared change kept, per module kind."""
    import torch

    kept: dict[str, list[float]] = {}
    with torch.no_grad():
        for name, module in peft_model.named_modules():
            if not hasattr(module, "lora_A") or "default" not in module.r:
                continue
            plain = name.removeprefix("base_model.model.")
            weight = module.base_layer.weight
            delta = tuned[f"{plain}.weight"] - weight.detach().float().cpu()
            u, s, vh = torch.linalg.svd(delta, full_matrices=False)
            r = module.r["default"]
            root = s[:r].sqrt()
            if isinstance(module.base_layer, torch.nn.Embedding):
                # PEFT's embedding delta is (B @ A)^T with A: r x vocab, B: dim x r.
                _set(module.lora_embedding_A["default"], root[:, None] * u[:, :r].T)
                _set(module.lora_embedding_B["default"], vh[:r].T * root)
            else:
                _set(module.lora_A["default"].weight, root[:, None] * vh[:r])
                _set(module.lora_B["default"].weight, u[:, :r] * root)
            total = float((s ** 2).sum())
            kind = plain.rsplit(".", 1)[-1]
            kept.setdefault(kind, []).append(float((s[:r] ** 2).sum()) / total if total else 1.0)
    return {kind: round(sum(v) / len(v), 4) for kind, v in sorted(kept.items())}


def _set(param: Any, value: Any) -> None:
    """Copy ``value`` into ``param``, zero-padded when the layer's rank exceeds the matrix's."""
    param.zero_()
    param[tuple(slice(0, n) for n in value.shape)] = value.to(param.device, param.dtype)
