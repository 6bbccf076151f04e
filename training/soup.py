"""A uniform model soup: the element-wise mean of models fine-tuned from the same base.

Models fine-tuned from one pretrained model often stay in one basin of the loss, so their
average is a working model too, and on distribution shifts it often does at least as well as its
parts (Wortsman et al., 2022, "Model soups"). On the CPU recipe's held-out pages it did not: two
SFT seeds got 67 and 44 of 104, their soup 49 (cookbook/cpu_recipe/EXPERIMENTS.md, section v41). The soup is a plain
model folder (the first source's config and tokenizer, the mean of every weight), so everything
that reads a fully fine-tuned model reads it: :func:`collabui.training.extract.extract_adapter`,
a bundle, ``--model trained:``.

Tensors are read one at a time (``safe_open``): a soup of k models holds the output and one
tensor per source in memory, not k models.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from collabui.errors import ConfigError, ModelLoadError

__all__ = ["SoupReport", "average_models"]

_REPORT = "soup.json"
#: config.json keys that name where a model came from, not what it is.
_PROVENANCE_KEYS = ("_name_or_path", "transformers_version", "torch_dtype", "dtype")


@dataclass
class SoupReport:
    """What a soup averaged: its sources (in order), the number of tensors and parameters, and
    how far the sources were apart (the mean relative distance of each source to the soup)."""

    sources: list[str]
    tensors: int
    parameters: int
    spread: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def average_models(sources: list[str | Path], out_dir: str | Path) -> SoupReport:
    """Write to ``out_dir`` the uniform average of ``sources`` (two or more model folders of one
    architecture, with safetensors weights) and ``soup.json`` (the :class:`SoupReport`).

    Raises:
        ConfigError: fewer than two sources, ``out_dir`` among them, or models that differ in
            architecture, weight files, tensor names or shapes.
        ModelLoadError: a source that is not a model folder with safetensors weights.
    """
    paths = [Path(s).expanduser() for s in sources]
    out = Path(out_dir).expanduser()
    if len(paths) < 2:
        raise ConfigError(f"a soup averages two or more models, got {len(paths)}; name every model folder")
    if any(p.resolve() == out.resolve() for p in paths):
        raise ConfigError(f"the soup's folder {out} is one of its sources; write it somewhere else")
    files = _weight_files(paths)
    _check_same_config(paths)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(paths[0], tmp, ignore=shutil.ignore_patterns("*.safetensors", "trl", "checkpoint-*", _REPORT))
    tensors = parameters = 0
    distance = 0.0
    try:
        for name in files:
            n, p, d = _average_file([src / name for src in paths], tmp / name)
            tensors, parameters, distance = tensors + n, parameters + p, distance + d
    except BaseException:  # a half-written soup must not look like a model
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    report = SoupReport(sources=[str(p) for p in paths], tensors=tensors, parameters=parameters,
                        spread=round(distance / max(tensors, 1), 6))
    (tmp / _REPORT).write_text(json.dumps(report.to_dict(), indent=1), encoding="utf-8")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return report


def _weight_files(paths: list[Path]) -> list[str]:
    found = []
    for path in paths:
        names = sorted(f.name for f in path.glob("*.safetensors")) if path.is_dir() else []
        if not names:
            raise ModelLoadError(f"no *.safetensors weights in {path}; a soup averages model folders saved by "
                                 "transformers (a fully fine-tuned model, not a LoRA adapter)")
        found.append(names)
    if any(names != found[0] for names in found[1:]):
        raise ConfigError(f"the models' weight files differ ({found[0]} against {found[1:]}); average models of "
                          "one architecture saved the same way")
    return found[0]


def _check_same_config(paths: list[Path]) -> None:
    def config(path: Path) -> dict[str, Any]:
        file = path / "config.json"
        data = json.loads(file.read_text(encoding="utf-8")) if file.is_file() else {}
        return {k: v for k, v in data.items() if k not in _PROVENANCE_KEYS}

    first = config(paths[0])
    for path in paths[1:]:
        if config(path) != first:
            raise ConfigError(f"{path} is another architecture than {paths[0]} (config.json differs); a soup "
                              "averages models fine-tuned from one base")


def _average_file(files: list[Path], out: Path) -> tuple[int, int, float]:
    """Average one safetensors file of each source into ``out``: (tensors, parameters, the sum
    over tensors of the sources' mean relative distance to the average)."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    handles = [safe_open(str(f), framework="pt") for f in files]
    keys = sorted(handles[0].keys())
    for f, h in zip(files[1:], handles[1:], strict=True):
        if sorted(h.keys()) != keys:
            raise ConfigError(f"{f} holds other tensors than {files[0]}; average models of one architecture")
    averaged: dict[str, Any] = {}
    distance = 0.0
    for key in keys:
        parts = [h.get_tensor(key) for h in handles]
        if any(p.shape != parts[0].shape for p in parts):
            raise ConfigError(f"tensor {key} has shapes {[tuple(p.shape) for p in parts]}; average models of one "
                              "architecture")
        mean = sum(p.double() for p in parts) / len(parts)
        norm = float(mean.norm()) or 1.0
        distance += sum(float((p.double() - mean).norm()) / norm for p in parts) / len(parts)
        averaged[key] = mean.to(parts[0].dtype).contiguous()
    metadata = handles[0].metadata() or {"format": "pt"}
    save_file(averaged, str(out), metadata=metadata)
    return len(keys), sum(t.numel() for t in averaged.values()), distance
