"""Serving a trained team: one base model with every agent's LoRA adapter (``agent{i}/``).

Re-exported by :mod:`collabui.training.dpo`. Needs no TRL: the adapters are served by
:class:`collabui.models.LocalModel`, which loads transformers and PEFT lazily.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from collabui.models.spec import agent_adapter_folders
from collabui.training._peft import adapter_name

__all__ = ["load_team_model", "team_adapters"]


def load_team_model(base_model: str | Path, adapters_dir: str | Path, **local_kwargs: Any) -> Any:
    """A ``LocalModel`` of ``base_model`` serving every ``<adapters_dir>/agent{i}/`` as ``agent{i}``.

    ``local_kwargs`` go to :class:`collabui.models.LocalModel` (device, dtype, max_batch_size...).

    Raises:
        ConfigError: ``adapters_dir`` is not a folder.
        ModelLoadError: no adapter folder was found, or one does not fit the base.
    """
    from collabui.models.local import LocalModel

    return LocalModel(base_model, adapters=agent_adapter_folders(adapters_dir), **local_kwargs)


def team_adapters(model: Any, n_agents: int) -> tuple[str | None, ...]:
    """Per-agent adapter names for ``CollabAgentTeam(model, adapters=...)``: ``agent{i}`` when
    ``model`` serves it, else None (that agent uses the base model)."""
    loaded = set(getattr(model, "adapters", ()))
    return tuple(adapter_name(i) if adapter_name(i) in loaded else None for i in range(n_agents))
