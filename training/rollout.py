"""Rollouts and evaluation for iterative MARL: run a team on a list of episodes, resumably.

Every finished episode is appended as one JSON line to a *manifest* (``rollouts.jsonl``), flushed
at once. A rerun skips the episodes in the manifest and reruns the others from scratch (a trace
left by an interrupted episode is deleted first): a trace file alone does not prove the episode
ended normally, because ``run_episode`` also writes an end record when it is interrupted.

Environments: :class:`EnvPool` opens devices lazily, so a fully resumed stage never starts
Chromium. With the default factory one MiniWoB++ browser serves every task (``reset(options=
{"task_name": ...})`` switches task in place); an injected factory (tests) gets one device per
task. :class:`TeamModels` serves the team's chat model for a set of per-agent adapters, loading
the base once and reloading only when a set of adapters must be replaced.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from collabui.devices.base import Device
from collabui.errors import TraceError
from collabui.models.base import ChatModel
from collabui.training._jsonl import iter_jsonl

__all__ = [
    "EpisodeSpec",
    "EnvFactory",
    "ModelFactory",
    "EnvPool",
    "TeamModels",
    "derive_seed",
    "episode_specs",
    "read_manifest",
    "run_episodes",
    "summarize",
]

#: ``env_factory("miniwob/click-button") -> Device``.
EnvFactory = Callable[[str], Device]
#: ``model_factory(base_dir, {"agent0": folder, ...}) -> ChatModel`` (adapters may be empty).
ModelFactory = Callable[[Path, Mapping[str, Path]], ChatModel]


def derive_seed(*parts: Any) -> int:
    """A stable 31-bit seed from ``parts`` (sha256 of their repr; never Python's salted hash)."""
    digest = hashlib.sha256(repr(parts).encode()).digest()
    return int.from_bytes(digest[:4], "big") % (2**31)


@dataclass(frozen=True)
class EpisodeSpec:
    """One episode to run: the task name (without env prefix), its seed and its episode id."""

    task: str
    seed: int
    episode_id: str


def episode_specs(tasks: Sequence[str], episodes: int, *, tag: str, seed_parts: tuple[Any, ...]) -> list[EpisodeSpec]:
    """``episodes`` episodes per task, ids ``<tag>-<task>-<e>``, seeds derived from
    ``(*seed_parts, task, e)`` so they are reproducible and distinct across tasks."""
    return [EpisodeSpec(task, derive_seed(*seed_parts, task, e), f"{tag}-{task}-{e}")
            for task in tasks for e in range(episodes)]


class EnvPool:
    """Devices by task, opened on first use and closed together.

    Args:
        prefix: the environment family (``miniwob`` or ``miniwob-mobile``).
        factory: builds a device from ``<prefix>/<task>``; None: ``make_env`` with one shared
            device for all tasks (the task is switched by ``reset`` options).
    """

    def __init__(self, prefix: str, factory: EnvFactory | None = None) -> None:
        self.prefix, self.factory = prefix, factory
        self._devices: dict[str, Device] = {}

    def get(self, task: str) -> Device:
        """The device for ``task`` (same object for every task with the default factory)."""
        key = task if self.factory is not None else "*"
        if key not in self._devices:
            if self.factory is not None:
                self._devices[key] = self.factory(f"{self.prefix}/{task}")
            else:
                from collabui.devices.registry import make_env

                self._devices[key] = make_env(f"{self.prefix}/{task}")
        return self._devices[key]

    def close(self) -> None:
        """Close every opened device (errors while closing are not worth a failed run)."""
        devices, self._devices = list(self._devices.values()), {}
        for device in devices:
            with contextlib.suppress(Exception):  # best effort on shutdown
                device.close()


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


def read_manifest(path: Path) -> dict[str, dict[str, Any]]:
    """Finished episodes by id (a torn last line from a killed process is ignored).

    Raises:
        TraceError: a line other than the last is not JSON.
    """
    if not path.exists():
        return {}
    fix = "delete that line to rerun its episode"
    return {str(record["episode_id"]): record
            for _, record in iter_jsonl(path, error=TraceError, fix=fix, torn_tail_ok=True)}


def _clean_partial(path: Path) -> None:
    """Cut a torn last line so appended records start on their own line."""
    if path.exists():
        text = path.read_text(encoding="utf-8")
        if text and not text.endswith("\n"):
            path.write_text(text[: text.rfind("\n") + 1], encoding="utf-8")


def run_episodes(team: Any, specs: Sequence[EpisodeSpec], envs: EnvPool, *, trace_dir: Path,
                 manifest: Path, label: str, progress: bool = True) -> list[dict[str, Any]]:
    """Run every episode of ``specs`` not yet in ``manifest``; return all records in order.

    A record: ``episode_id``, ``task``, ``seed``, ``success``, ``reward``, ``steps``, ``error``,
    ``seconds``, ``trace``. Each finished episode is appended to ``manifest`` before the next
    one starts.
    """
    trace_dir.mkdir(parents=True, exist_ok=True)
    manifest.parent.mkdir(parents=True, exist_ok=True)
    _clean_partial(manifest)
    done = read_manifest(manifest)
    records = []
    with manifest.open("a", encoding="utf-8") as fh:
        for k, spec in enumerate(specs):
            if spec.episode_id in done:
                records.append(done[spec.episode_id])
                continue
            record = _run_one(team, spec, envs, trace_dir)
            fh.write(json.dumps(record) + "\n")
            fh.flush()
            records.append(record)
            if progress:
                print(f"[{label} {k + 1}/{len(specs)}] {spec.task} seed {spec.seed}: "
                      f"{'success' if record['success'] else 'failure'} in {record['steps']} steps, "
                      f"{record['seconds']:.1f} s", file=sys.stderr, flush=True)
    return records


def _run_one(team: Any, spec: EpisodeSpec, envs: EnvPool, trace_dir: Path) -> dict[str, Any]:
    trace = trace_dir / f"{spec.episode_id}.jsonl"
    trace.unlink(missing_ok=True)  # left by an interrupted run: this episode starts over
    shutil.rmtree(trace_dir / spec.episode_id, ignore_errors=True)  # its screenshots
    device = envs.get(spec.task)
    started = time.perf_counter()
    device.reset(seed=spec.seed, options={"task_name": spec.task})  # switch task in place
    result = team.run(None, device, seed=spec.seed, trace=trace_dir, episode_id=spec.episode_id,
                      env_name=f"{envs.prefix}/{spec.task}")
    return {**asdict(spec), "success": bool(result.success), "reward": float(result.reward),
            "steps": result.n_steps, "error": result.error,
            "seconds": round(time.perf_counter() - started, 3), "trace": str(trace)}


def summarize(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Success counts and rates overall and per task."""
    def rate(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        wins = sum(bool(r["success"]) for r in rows)
        return {"episodes": len(rows), "successes": wins,
                "success_rate": round(wins / len(rows), 4) if rows else None}

    tasks = list(dict.fromkeys(r["task"] for r in records))
    return {**rate(records), "per_task": {t: rate([r for r in records if r["task"] == t]) for t in tasks},
            "errors": sum(1 for r in records if r.get("error"))}
