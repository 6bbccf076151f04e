"""Serving a trained team: one base model with every agent's LoRA adapter (``agent{i}/``).

Re-exported by :mod:`collabui.training.dpo`. Needs no TRL: the adapters are served by
:class:`collabui.models.LocalModel`, which loads transformers and PEFT lazily.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from collabui.errors import ModelLoadError
from collabui.training._peft import adapter_name

__all__ = ["load_team_model", "team_adapters"]


def _adapter_folders(adapters_dir: Path) -> dict[str, Path]:
    found: dict[int, Path] = {}
    for folder in adapters_dir.glob("agent*"):
        suffix = folder.name[len("agent") :]
        if suffix.isdigit() and (folder / "adapter_config.json").is_file():
            found[int(suffix)] = folder
    return {adapter_name(i): found[i] for i in sorted(found)}


def load_team_model(base_model: str | Path, adapters_dir: str | Path, **local_kwargs: Any) -> Any:
    """A ``LocalModel`` of ``base_model`` serving every ``<adapters_dir>/agent{i}/`` as ``agent{i}``.

    ``local_kwargs`` go to :class:`collabui.models.LocalModel` (device, dtype, max_batch_size...).

    Raises:
        ModelLoadError: no adapter folder was found, or one does not fit the base.
    """
    from collabui.models.local import LocalModel

    folder = Path(adapters_dir).expanduser()
    adapters = _adapter_folders(folder)
    if not adapters:
        raise ModelLoadError(
            f"no agent adapters (agent0/, agent1/, ...) in {folder}; run `collabui train dpo` first"
        )
    return LocalModel(base_model, adapters=adapters, **local_kwargs)


def team_adapters(model: Any, n_agents: int) -> tuple[str | None, ...]:
    """Per-agent adapter names for ``CollabAgentTeam(model, adapters=...)``: ``agent{i}`` when
    ``model`` serves it, else None (that agent uses the base model)."""
    loaded = set(getattr(model, "adapters", ()))
    return tuple(adapter_name(i) if adapter_name(i) in loaded else None for i in range(n_agents))
