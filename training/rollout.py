"""Rollouts and evaluation for iterative MARL: run a team on a list of episodes, resumably.

The generic runner (episode specs and seeds, the JSONL manifest that makes a stage resumable,
:class:`EnvPool`, ``run_episodes``, ``summarize``) lives in :mod:`collabui.evaluation.runner`,
shared with the evaluation harnesses, and is re-exported here. This module adds what only
training needs: :class:`TeamModels` serves the team's chat model for a set of per-agent
adapters, loading the base once and reloading only when a set of adapters must be replaced;
:func:`worker_model` and :class:`ModelOwningTeam` give each rollout worker process
(``run_episodes_on``, local or Ray) its own copy of that model.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from collabui.evaluation.runner import (
    EnvFactory,
    EnvPool,
    EpisodeSpec,
    derive_seed,
    episode_specs,
    finished_records,
    read_manifest,
    run_episodes,
    run_episodes_on,
    summarize,
)
from collabui.models.base import ChatModel

__all__ = [
    "EpisodeSpec",
    "EnvFactory",
    "ModelFactory",
    "ModelOwningTeam",
    "EnvPool",
    "TeamModels",
    "derive_seed",
    "episode_specs",
    "finished_records",
    "read_manifest",
    "run_episodes",
    "run_episodes_on",
    "summarize",
    "worker_model",
]

#: ``model_factory(base_dir, {"agent0": folder, ...}) -> ChatModel`` (adapters may be empty).
ModelFactory = Callable[[Path, Mapping[str, Path]], ChatModel]


def _default_model_factory(base_dir: Path, adapters: Mapping[str, Path]) -> ChatModel:
    from collabui.models.local import LocalModel

    return LocalModel(base_dir, adapters=dict(adapters))


class TeamModels:
    """The rollout model for a given set of per-agent adapters, base weights loaded once.

    ``get(adapters)`` returns the current model when the set is unchanged; when the current
    model serves no adapter yet (the base), the new ones are added in place with
    ``LocalModel.add_adapter``; otherwise the old model is closed and a fresh one is loaded, so
    adapters of finished iterations never pile up and names stay ``agent{i}``.

    Args:
        base_dir: the base model folder.
        factory: an alternative model builder (tests); it is called for every new set.
    """

    def __init__(self, base_dir: Path, factory: ModelFactory | None = None) -> None:
        self.base_dir, self.factory = base_dir, factory
        self.model: ChatModel | None = None
        self._current: dict[str, str] | None = None
        self.loads = 0

    def get(self, adapters: Mapping[str, Path]) -> ChatModel:
        wanted = {name: str(path) for name, path in adapters.items()}
        if self.model is not None and wanted == self._current:
            return self.model
        can_add = (self.factory is None and self.model is not None and not self._current
                   and hasattr(self.model, "add_adapter"))
        if can_add:
            for name, path in wanted.items():
                self.model.add_adapter(name, path)  # type: ignore[union-attr]
        else:
            self.close()
            build = self.factory or _default_model_factory
            self.model = build(self.base_dir, {k: Path(v) for k, v in wanted.items()})
            self.loads += 1
        self._current = wanted
        return self.model  # type: ignore[return-value]

    def close(self) -> None:
        if self.model is not None:
            self.model.close()
        self.model, self._current = None, None


def worker_model(base_dir: str | Path, factory: ModelFactory | None, adapters: Mapping[str, str]) -> ChatModel:
    """A rollout worker's own model: the base with these adapters (``{"agent0": folder}``).
    Built in the worker, so ``factory`` (None: ``LocalModel``) must pickle."""
    return (factory or _default_model_factory)(Path(base_dir), {k: Path(v) for k, v in adapters.items()})


class ModelOwningTeam:
    """A team that owns its model: what a rollout worker runs, closing the model with the worker."""

    def __init__(self, team: Any, model: ChatModel) -> None:
        self.team, self.model = team, model

    def run(self, *args: Any, **kwargs: Any) -> Any:
        return self.team.run(*args, **kwargs)

    def close(self) -> None:
        self.model.close()
