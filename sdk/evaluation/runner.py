"""A resumable episode runner: run a team on a list of episodes, K at a time, never twice.

Every finished episode is appended as one JSON line to a *manifest*, flushed at once. A rerun
skips the episodes in the manifest and reruns the others from scratch (a trace left by an
interrupted episode is deleted first): a trace file alone does not prove the episode ended
normally, because ``run_episode`` also writes an end record when it is interrupted.

Concurrency: with ``concurrency=1`` (the default) episodes run one after another on the
caller's thread with the sync team API, exactly as the training rollouts always have. With
``concurrency=K > 1`` an asyncio loop runs K workers; each worker owns its own :class:`EnvPool`
(so its own browser) and runs ``team.arun`` on it, and all workers share the one chat model
(``LocalModel`` serializes ``generate`` with a lock; the gain is overlapping browser and model
time). Asyncio rather than threads because cancellation is then exact: an exception or a
KeyboardInterrupt cancels every worker at its next await, each unfinished episode's trace is
closed by ``run_episode``'s own handler, no record of it reaches the manifest, and every device
opened by the run is closed before the exception leaves :func:`run_episodes`.

Worker processes: :func:`run_episodes_on` runs the same scheduler, manifest and resume over
the workers of a :class:`~collabui.evaluation.workers.WorkerPool` (local processes or Ray
actors, each with its own model and browser) instead of in-process slots on one shared model.
``concurrency`` overlaps one model's time with K browsers; workers multiply the models.

Environments: :class:`EnvPool` opens devices lazily, so a fully resumed run never starts
Chromium. With the default factory one MiniWoB++ browser serves every task of a pool
(``reset(options={"task_name": ...})`` switches task in place); an injected factory (tests)
gets one device per task.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import shutil
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
)

from collabui._progress import Advance, progress_bar
from collabui.devices.base import Device
from collabui.errors import ConfigError, DeviceError, TraceError

__all__ = [
    "EpisodeSpec",
    "EnvFactory",
    "EnvPool",
    "RecordExtra",
    "derive_seed",
    "episode_specs",
    "finished_records",
    "read_manifest",
    "run_episodes",
    "run_episodes_on",
    "arun_episodes",
    "summarize",
]

log = logging.getLogger(__name__)

#: ``env_factory("miniwob/click-button") -> Device``.
EnvFactory = Callable[[str], Device]
#: ``extra(episode_result) -> {field: value}``: more fields for an episode's manifest record.
RecordExtra = Callable[[Any], Mapping[str, Any]]


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
        options: keyword arguments for ``make_env`` (e.g. ``screenshots=True``).
    """

    def __init__(self, prefix: str, factory: EnvFactory | None = None, *, options: dict[str, Any] | None = None) -> None:
        self.prefix, self.factory, self.options = prefix, factory, dict(options or {})
        self._devices: dict[str, Device] = {}

    def get(self, task: str) -> Device:
        """The device for ``task`` (same object for every task with the default factory)."""
        key = task if self.factory is not None else "*"
        if key not in self._devices:
            if self.factory is not None:
                self._devices[key] = self.factory(f"{self.prefix}/{task}")
            else:
                from collabui.devices.registry import make_env

                self._devices[key] = make_env(f"{self.prefix}/{task}", **self.options)
        return self._devices[key]

    def replace(self, task: str) -> Device:
        """Close the device ``task`` uses (after an infrastructure failure) and open a new one."""
        key = task if self.factory is not None else "*"
        device = self._devices.pop(key, None)
        if device is not None:
            with contextlib.suppress(Exception):  # it already failed; closing is best effort
                device.close()
        return self.get(task)

    def sibling(self) -> EnvPool:
        """An empty pool of the same family and factory (one per concurrent worker)."""
        return EnvPool(self.prefix, self.factory, options=self.options)

    def close(self) -> None:
        """Close every opened device (errors while closing are not worth a failed run)."""
        devices, self._devices = list(self._devices.values()), {}
        for device in devices:
            with contextlib.suppress(Exception):  # best effort on shutdown
                device.close()


def read_manifest(path: Path) -> dict[str, dict[str, Any]]:
    """Finished episodes by id (a torn last line from a killed process is ignored).

    Raises:
        TraceError: a line other than the last is not JSON.
    """
    from collabui._jsonl import iter_jsonl

    if not path.exists():
        return {}
    fix = "delete that line to rerun its episode"
    return {str(record["episode_id"]): record
            for _, record in iter_jsonl(path, error=TraceError, fix=fix, torn_tail_ok=True)}


def finished_records(specs: Sequence[EpisodeSpec], manifest: Path) -> list[dict[str, Any]] | None:
    """Every record of ``specs`` in order when ``manifest`` already holds them all (a finished
    run resumed: nothing to load or serve), else None."""
    done = read_manifest(manifest)
    if any(spec.episode_id not in done for spec in specs):
        return None
    return [done[spec.episode_id] for spec in specs]


def _clean_partial(path: Path) -> None:
    """Cut a torn last line so appended records start on their own line."""
    if path.exists():
        text = path.read_text(encoding="utf-8")
        if text and not text.endswith("\n"):
            path.write_text(text[: text.rfind("\n") + 1], encoding="utf-8")


class _Manifest:
    """Appends finished records (flushed at once), logs the progress lines, moves the bar."""

    def __init__(self, fh: IO[str], total: int, label: str, progress: bool, advance: Advance) -> None:
        self.fh, self.total, self.label, self.progress, self.advance = fh, total, label, progress, advance

    def add(self, k: int, spec: EpisodeSpec, record: dict[str, Any]) -> None:
        self.fh.write(json.dumps(record) + "\n")
        self.fh.flush()
        self.advance()
        if self.progress:
            log.info("[%s %d/%d] %s seed %s: %s in %s steps, %.1f s", self.label, k + 1, self.total, spec.task,
                     spec.seed, "success" if record["success"] else "failure", record["steps"], record["seconds"])


@contextlib.contextmanager
def _sink(manifest: Path, specs: Sequence[EpisodeSpec], pending: Sequence[Any], label: str,
          progress: bool) -> Iterator[_Manifest]:
    """The open manifest, with a bar over all ``specs`` (the resumed ones count as done)."""
    with manifest.open("a", encoding="utf-8") as fh, \
            progress_bar(len(specs), f"{label} episodes", done=len(specs) - len(pending), enabled=progress) as advance:
        yield _Manifest(fh, len(specs), label, progress, advance)


def run_episodes(team: Any, specs: Sequence[EpisodeSpec], envs: EnvPool, *, trace_dir: Path,
                 manifest: Path, label: str, progress: bool = True, concurrency: int = 1,
                 extra: RecordExtra | None = None) -> list[dict[str, Any]]:
    """Run every episode of ``specs`` not yet in ``manifest``; return all records in order.

    A record: ``episode_id``, ``task``, ``seed``, ``success``, ``reward``, ``steps``, ``error``,
    ``seconds``, ``trace`` (plus ``extra(result)``). Each finished episode is appended to
    ``manifest`` as soon as it ends.

    Args:
        team: anything with ``run(task, device, **kw)`` (and ``arun`` when concurrency > 1),
            such as a ``CollabAgentTeam``; it is shared by all concurrent episodes.
        envs: the devices of the first worker. The caller closes it; pools of further
            workers (``envs.sibling()``) are closed here, even on an exception.
        concurrency: episodes in flight at once (>= 1). 1 runs on this thread, in order.

    Raises:
        ConfigError: ``concurrency`` < 1, or concurrency > 1 called inside a running event loop
            (await :func:`arun_episodes` there instead).
    """
    _check_concurrency(concurrency)
    pending, done, records = _prepare(specs, trace_dir, manifest)
    with _sink(manifest, specs, pending, label, progress) as sink:
        if concurrency == 1:
            for k, spec in pending:
                record = _run_one(team, spec, envs, trace_dir, extra)
                sink.add(k, spec, record)
                done[spec.episode_id] = record
        else:
            with contextlib.suppress(RuntimeError):
                asyncio.get_running_loop()
                raise ConfigError("run_episodes(concurrency>1) was called inside a running event "
                                  "loop; await arun_episodes(...) there instead")
            pools = _pools(envs, concurrency, len(pending))
            try:
                asyncio.run(_run_pool(team, pending, pools, trace_dir, sink, done, extra))
            finally:  # also when asyncio.run is left by a KeyboardInterrupt
                for pool in pools[1:]:
                    pool.close()
    return records(done)


async def arun_episodes(team: Any, specs: Sequence[EpisodeSpec], envs: EnvPool, *, trace_dir: Path,
                        manifest: Path, label: str, progress: bool = True, concurrency: int = 1,
                        extra: RecordExtra | None = None) -> list[dict[str, Any]]:
    """Async twin of :func:`run_episodes` (always through ``team.arun``), same contract."""
    _check_concurrency(concurrency)
    pending, done, records = _prepare(specs, trace_dir, manifest)
    with _sink(manifest, specs, pending, label, progress) as sink:
        pools = _pools(envs, concurrency, len(pending))
        try:
            await _run_pool(team, pending, pools, trace_dir, sink, done, extra)
        finally:
            for pool in pools[1:]:
                await asyncio.to_thread(pool.close)
    return records(done)


def _check_concurrency(concurrency: int) -> None:
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise ConfigError(f"concurrency must be an integer >= 1, got {concurrency!r}")


def _prepare(specs: Sequence[EpisodeSpec], trace_dir: Path, manifest: Path):
    """Folders, the finished records, the episodes still to run and a final-order collector."""
    trace_dir.mkdir(parents=True, exist_ok=True)
    manifest.parent.mkdir(parents=True, exist_ok=True)
    _clean_partial(manifest)
    done = read_manifest(manifest)
    pending = [(k, spec) for k, spec in enumerate(specs) if spec.episode_id not in done]

    def records(finished: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
        return [finished[s.episode_id] for s in specs if s.episode_id in finished]

    return pending, done, records


def _pools(envs: EnvPool, concurrency: int, pending: int) -> list[EnvPool]:
    """The caller's pool, then one empty sibling per further worker (never more than needed)."""
    return [envs] + [envs.sibling() for _ in range(min(concurrency, pending) - 1)]


#: One slot of the scheduler: runs an episode to its manifest record.
_Slot = Callable[[EpisodeSpec], Awaitable[dict[str, Any]]]


def _local_slots(team: Any, pools: list[EnvPool], trace_dir: Path, extra: RecordExtra | None) -> list[_Slot]:
    """In-process slots: one per pool, all on the one shared team."""
    def slot(pool: EnvPool) -> _Slot:
        return lambda spec: _arun_one(team, spec, pool, trace_dir, extra)

    return [slot(pool) for pool in pools]


async def _run_pool(team: Any, pending: list[tuple[int, EpisodeSpec]], pools: list[EnvPool],
                    trace_dir: Path, sink: _Manifest, done: dict[str, dict[str, Any]],
                    extra: RecordExtra | None) -> None:
    await _schedule(_local_slots(team, pools, trace_dir, extra), pending, sink, done)


async def _schedule(slots: Sequence[_Slot], pending: list[tuple[int, EpisodeSpec]], sink: _Manifest,
                    done: dict[str, dict[str, Any]]) -> None:
    """Each slot pulls episodes from one queue; the first failure cancels the others."""
    work: Iterator[tuple[int, EpisodeSpec]] = iter(pending)

    async def worker(run: _Slot) -> None:
        for k, spec in work:  # one event-loop thread: sharing the iterator is safe
            record = await run(spec)
            sink.add(k, spec, record)
            done[spec.episode_id] = record

    tasks = [asyncio.ensure_future(worker(run)) for run in slots]
    try:
        await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
        # Let cancelled episodes close their traces before their browsers go away.
        await asyncio.gather(*tasks, return_exceptions=True)


def run_episodes_on(workers: Any, specs: Sequence[EpisodeSpec], *, trace_dir: Path, manifest: Path,
                    label: str, progress: bool = True) -> list[dict[str, Any]]:
    """:func:`run_episodes` on worker processes: same manifest, resume and records.

    Each worker (a :class:`~collabui.evaluation.workers.WorkerPool` handle: a local process or
    a Ray actor) builds its own team and devices and runs one episode at a time; its trace
    files come back with the record and are written into ``trace_dir`` here. Records also get
    ``worker`` (``node``, ``pid``). At most ``min(workers, episodes to run)`` workers start;
    none for a fully resumed run. The caller closes ``workers``.
    """
    pending, done, records = _prepare(specs, trace_dir, manifest)
    if not pending:
        return records(done)
    with contextlib.suppress(RuntimeError):
        asyncio.get_running_loop()
        raise ConfigError("run_episodes_on was called inside a running event loop; call it from a "
                          "thread (asyncio.to_thread) there")
    handles = workers.start(len(pending))
    with _sink(manifest, specs, pending, label, progress) as sink:
        slots = [_remote_slot(handle, trace_dir) for handle in handles]
        asyncio.run(_schedule(slots, pending, sink, done))
    return records(done)


def _remote_slot(handle: Any, trace_dir: Path) -> _Slot:
    async def run(spec: EpisodeSpec) -> dict[str, Any]:
        _clear(spec, trace_dir)
        record, files = await handle.run(spec, trace_dir)
        for name, data in files.items():
            path = trace_dir / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        return {**record, "trace": str(trace_dir / f"{spec.episode_id}.jsonl")}

    return run


def _clear(spec: EpisodeSpec, trace_dir: Path) -> None:
    """Delete what an interrupted run left of this episode: it starts over."""
    (trace_dir / f"{spec.episode_id}.jsonl").unlink(missing_ok=True)
    shutil.rmtree(trace_dir / spec.episode_id, ignore_errors=True)  # its screenshots


def _start(spec: EpisodeSpec, envs: EnvPool, trace_dir: Path) -> Device:
    _clear(spec, trace_dir)
    return envs.get(spec.task)


def _record(spec: EpisodeSpec, result: Any, started: float, trace_dir: Path,
            extra: RecordExtra | None) -> dict[str, Any]:
    record = {**asdict(spec), "success": bool(result.success), "reward": float(result.reward),
              "steps": result.n_steps, "error": result.error,
              "seconds": round(time.perf_counter() - started, 3),
              "trace": str(trace_dir / f"{spec.episode_id}.jsonl")}
    if extra is not None:
        record.update(extra(result))
    return record


def _run_one(team: Any, spec: EpisodeSpec, envs: EnvPool, trace_dir: Path,
             extra: RecordExtra | None) -> dict[str, Any]:
    device = _start(spec, envs, trace_dir)
    started = time.perf_counter()
    for attempt in Retrying(**_reset_policy(spec)):
        with attempt:
            if attempt.retry_state.attempt_number > 1:
                device = envs.replace(spec.task)
            device.reset(seed=spec.seed, options={"task_name": spec.task})  # switch task in place
    result = team.run(None, device, seed=spec.seed, trace=trace_dir, episode_id=spec.episode_id,
                      env_name=f"{envs.prefix}/{spec.task}")
    return _record(spec, result, started, trace_dir, extra)


async def _arun_one(team: Any, spec: EpisodeSpec, envs: EnvPool, trace_dir: Path,
                    extra: RecordExtra | None) -> dict[str, Any]:
    device = _start(spec, envs, trace_dir)  # building a device is cheap; Chromium starts in reset
    started = time.perf_counter()
    async for attempt in AsyncRetrying(**_reset_policy(spec)):
        with attempt:
            if attempt.retry_state.attempt_number > 1:
                device = envs.replace(spec.task)
            await device.areset(seed=spec.seed, options={"task_name": spec.task})
    result = await team.arun(None, device, seed=spec.seed, trace=trace_dir,
                             episode_id=spec.episode_id, env_name=f"{envs.prefix}/{spec.task}")
    return _record(spec, result, started, trace_dir, extra)


def _reset_policy(spec: EpisodeSpec) -> dict[str, Any]:
    """A failed reset is tried once more on a fresh device (the second try replaces it); a
    second failure is real and raised as it is."""
    def say(state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome is not None else None
        log.warning("[%s] reset failed (%s); retrying on a fresh browser", spec.episode_id, exc)

    return {"stop": stop_after_attempt(2), "retry": retry_if_exception_type(DeviceError), "before_sleep": say,
            "reraise": True}


def summarize(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Success counts and rates overall and per task."""
    def rate(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        wins = sum(bool(r["success"]) for r in rows)
        return {"episodes": len(rows), "successes": wins,
                "success_rate": round(wins / len(rows), 4) if rows else None}

    tasks = list(dict.fromkeys(r["task"] for r in records))
    return {**rate(records), "per_task": {t: rate([r for r in records if r["task"] == t]) for t in tasks},
            "errors": sum(1 for r in records if r.get("error"))}
