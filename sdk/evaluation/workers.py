"""Episode workers: run episodes on N processes, on this machine or as Ray actors on a cluster.

Each worker is a process with its own team and its own devices (one browser), built from a
picklable :class:`WorkerSetup` when its first episode arrives: its model is a local copy (CPU) or
a client of one shared server (an ``openai:`` spec such as a vLLM server), whichever the setup
builds. :func:`collabui.evaluation.runner.run_episodes_on` hands one episode at a time to
whichever worker is free and keeps the manifest, the traces and the progress lines itself, with
the same scheduler as the in-process ``concurrency`` pool; an episode's outcome depends on its
seed only, never on the worker that ran it.

Backends, one handle interface (``run(spec)`` awaitable, ``close()``):

* processes (``ray=None``): one ``ProcessPoolExecutor(max_workers=1)`` per worker, spawned
  (forking a driver that runs threads, e.g. torch's, is unsafe);
* Ray (``ray=ADDRESS``): one actor per worker on the cluster at ADDRESS (``host:port`` of a
  ``ray start --head``, ``auto``, ``ray://host:port``; ``local`` starts a private one-node
  cluster for this run), each holding one logical CPU (``ray start --num-cpus`` sets how many
  a node takes), spread over the nodes. Ray's own settings apply: with Ray >= 2.5x a
  private cluster turns token authentication on and saves a token in ``~/.ray`` unless
  ``RAY_AUTH_MODE=disabled``; every node and this process must agree on ``RAY_AUTH_MODE``.

A worker process on this machine writes an episode's trace and screenshots straight into the
run's trace folder, one flushed record per step. A Ray worker writes them into its own temporary
folder and streams each whole trace line to the driver as it is written (a Ray generator), the
screenshots coming back with the record, so the nodes of a cluster need no shared filesystem.
Either way what a worker finished survives it: a worker that dies in mid-episode (killed, out of
memory, its node lost) leaves its trace in the run's folder with every whole step, the driver
ends it with an ``end`` record (``WorkerDied: ...``), records the episode as an error in the
manifest and starts a new worker (process or actor) for the next episodes. A run stopped by
SIGINT / SIGTERM ends the traces of the episodes its workers were running when it closes them,
or its stop watchdog does after killing them (``collabui.trace.close_open_traces``); those
episodes are not in the manifest and run again on resume, as in-process ones.

Closing waits for the episodes in flight (each is bounded by ``max_steps``) up to
``close_timeout`` seconds, so every worker closes its browser itself; a worker still busy after
that is killed (Playwright's driver then closes its browser when its parent pipe closes).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import multiprocessing
import os
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures.process import BrokenProcessPool
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from collabui._processes import kill_tree
from collabui.errors import ConfigError
from collabui.evaluation.runner import EnvFactory, EnvPool, EpisodeSpec, RecordExtra, _run_one
from collabui.trace import end_trace_file, written_elsewhere

__all__ = ["WorkerSetup", "EpisodeWorker", "WorkerHandle", "WorkerPool", "RAY_EXTRA_HINT"]

#: How to install the optional dependency (said by every error about it).
RAY_EXTRA_HINT = "pip install 'collabui-agents[ray]'"
#: A worker's answer: the manifest record and the episode's files (trace, screenshots) by
#: path relative to the trace folder.
WorkerResult = tuple[dict[str, Any], dict[str, bytes]]


@dataclass(frozen=True)
class WorkerSetup:
    """What a worker needs to build its own team and devices; pickled to every worker.

    Args:
        team: called once in each worker, on its first episode; returns anything with
            ``run(task, device, *, seed, trace, episode_id, env_name)`` (and optionally
            ``close()``, called when the worker closes). A module-level function or a
            ``functools.partial`` of one, so it pickles.
        env: the environment family (``miniwob`` or ``miniwob-mobile``).
        env_options: keyword arguments for ``make_env``.
        env_factory: builds a device from ``<env>/<task>`` instead of ``make_env`` (tests).
        extra: more manifest fields from an episode result (runs in the worker, where the
            result is).
    """

    team: Callable[[], Any]
    env: str
    env_options: Mapping[str, Any] = field(default_factory=dict)
    env_factory: EnvFactory | None = None
    extra: RecordExtra | None = None


class EpisodeWorker:
    """One worker's state: its team (built on the first episode) and its devices."""

    def __init__(self, setup: WorkerSetup) -> None:
        self.setup, self.team = setup, None
        self.envs = EnvPool(setup.env, setup.env_factory, options=dict(setup.env_options))
        self.where = _where()
        self._episodes: concurrent.futures.ThreadPoolExecutor | None = None

    def run(self, spec: EpisodeSpec, folder: str) -> WorkerResult:
        """Run one episode, its trace written into ``folder`` as it runs; return its record
        (with ``worker``: node and pid) and no files (they are in ``folder``)."""
        if self.team is None:
            self.team = self.setup.team()
        record = _run_one(self.team, spec, self.envs, Path(folder), self.setup.extra)
        return {**record, "worker": self.where}, {}

    def stream(self, spec: EpisodeSpec, poll_s: float = 0.2) -> Iterator[tuple[str, Any]]:
        """Run one episode in a temporary folder, yielding tagged items as it goes: ``where``
        (this worker's place), then ``append`` (bytes: new whole trace lines) as they are
        written, or ``rewrite`` (bytes: the whole trace, when its writer swapped the header),
        last ``done`` with ``(record, files)``, the files being the rest (screenshots). A driver
        that applies them keeps every finished step should this worker die (a Ray generator
        streams them)."""
        yield "where", self.where
        if self._episodes is None:  # one thread for every episode: devices and models stay on it
            self._episodes = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="collabui-episode")
        with tempfile.TemporaryDirectory(prefix="collabui-episode-") as tmp:
            folder = Path(tmp)
            trace, sent = folder / f"{spec.episode_id}.jsonl", b""
            future = self._episodes.submit(self.run, spec, tmp)
            while True:
                finished = future.done()  # read before the file: the last lines are then on disk
                data = trace.read_bytes() if trace.exists() else b""
                whole = data[:data.rfind(b"\n") + 1]
                if whole.startswith(sent) and len(whole) > len(sent):
                    yield "append", whole[len(sent):]
                elif not whole.startswith(sent):
                    yield "rewrite", whole
                sent = whole
                if finished:
                    break
                concurrent.futures.wait([future], timeout=poll_s)
            record, _ = future.result()  # the episode's own exception, if it raised one
            files = {p.relative_to(folder).as_posix(): p.read_bytes()
                     for p in sorted(folder.rglob("*")) if p.is_file() and p != trace}
        yield "done", (record, files)

    def close(self) -> None:
        """Close the devices, then the team's model."""
        if self._episodes is not None:
            self._episodes.shutdown(wait=True)
            self._episodes = None
        self.envs.close()
        close = getattr(self.team, "close", None)
        self.team = None
        if close is not None:
            close()


def _where() -> dict[str, Any]:
    """This worker's node (inside a Ray actor: Ray's node id and the node's address; else the
    host name) and pid."""
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        return {"node": ray.get_runtime_context().get_node_id(), "ip": ray.util.get_node_ip_address(),
                "pid": os.getpid()}
    return {"node": socket.gethostname(), "pid": os.getpid()}


class WorkerHandle(Protocol):
    """The driver's side of one worker."""

    async def run(self, spec: EpisodeSpec, trace_dir: Path) -> WorkerResult:
        """Run one episode; its files come back in the result or are in ``trace_dir`` already."""
        ...

    def close(self, timeout: float) -> None: ...


# -- processes on this machine ------------------------------------------------------------------

#: The worker of a pool child process (each child is one worker for its whole life).
_CHILD_WORKER: EpisodeWorker | None = None


def _child_init(setup: WorkerSetup) -> None:
    global _CHILD_WORKER
    _CHILD_WORKER = EpisodeWorker(setup)


def _child_run(spec: EpisodeSpec, folder: str) -> WorkerResult:
    if _CHILD_WORKER is None:  # the pool's initializer sets it before any task; never expected
        raise RuntimeError("episode worker process was not initialized")
    return _CHILD_WORKER.run(spec, folder)


def _child_close() -> None:
    if _CHILD_WORKER is not None:
        _CHILD_WORKER.close()


#: The end record's error of an episode whose worker was closed before it ended (a stopped run).
STOPPED = "Interrupted: the run stopped while a worker ran this episode"


class _ProcessHandle:
    """One worker process (restarted when it dies); it writes traces into the run's folder."""

    def __init__(self, setup: WorkerSetup) -> None:
        self.setup = setup
        self.pool = self._new_pool()
        #: The trace of the episode in flight, until it returns (see close()).
        self.running: Path | None = None

    def _new_pool(self) -> concurrent.futures.ProcessPoolExecutor:
        return concurrent.futures.ProcessPoolExecutor(
            max_workers=1, mp_context=multiprocessing.get_context("spawn"),
            initializer=_child_init, initargs=(self.setup,))

    async def run(self, spec: EpisodeSpec, trace_dir: Path) -> WorkerResult:
        self.running = trace_dir / f"{spec.episode_id}.jsonl"
        written_elsewhere(self.running)
        started = time.perf_counter()
        future = self.pool.submit(_child_run, spec, str(trace_dir))
        process = next(iter(getattr(self.pool, "_processes", {}).values()), None)
        try:
            result = await asyncio.wrap_future(future)
        except BrokenProcessPool:  # the process died (killed, out of memory) in mid-episode
            return self._died(spec, process, time.perf_counter() - started)
        written_elsewhere(self.running, done=True)
        self.running = None
        return result

    def _died(self, spec: EpisodeSpec, process: Any, seconds: float) -> WorkerResult:
        """The dead worker's episode as an error: its trace ended, a new process for the next."""
        trace, self.running = self.running, None
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.pool = self._new_pool()
        where = {"node": socket.gethostname(), "pid": getattr(process, "pid", None)}
        return _died_record(spec, _death(process), trace, seconds, where), {}

    def close(self, timeout: float) -> None:
        try:
            self.pool.submit(_child_close).result(timeout=timeout)
        except Exception:  # a broken or stuck worker: ending its process is all we can do
            # (ProcessPoolExecutor has no public handle on its processes), with its browser:
            # killing the worker alone would orphan the Chromium it started.
            for process in list(getattr(self.pool, "_processes", {}).values()):
                kill_tree(process.pid)
        finally:
            self.pool.shutdown(wait=True, cancel_futures=True)
            if self.running is not None:  # stopped in mid-episode: the worker is gone now
                end_trace_file(self.running, STOPPED)
                self.running = None


def _died_record(spec: EpisodeSpec, death: str, trace: Path | None, seconds: float,
                 where: Mapping[str, Any], why: str = "") -> dict[str, Any]:
    """The manifest record of an episode whose worker died (``death``: how; ``why``: what the
    backend said), its trace ended."""
    said = f" ({why.rstrip('.')})" if why else ""
    error = f"WorkerDied: {death} during this episode{said}; its trace keeps the steps it finished"
    steps = end_trace_file(trace, error) if trace is not None else None
    return {**asdict(spec), "success": False, "reward": 0.0, "steps": steps or 0, "error": error,
            "seconds": round(seconds, 3), "worker": dict(where)}


def _death(process: Any) -> str:
    """How a worker process ended: ``the worker process (pid N) was killed by SIGKILL``."""
    pid = getattr(process, "pid", None)
    # The pool's own thread may be reaping the same process: a join that loses that race
    # reads no exit code although the process is gone, so ask again until that thread is done.
    deadline = time.monotonic() + 5
    while process is not None and process.exitcode is None and time.monotonic() < deadline:
        process.join(timeout=0.1)
    code = getattr(process, "exitcode", None)
    if code is not None and code < 0:
        return f"the worker process (pid {pid}) was killed by {signal.Signals(-code).name}"
    return f"the worker process (pid {pid}) ended" + (f" with exit code {code}" if code is not None else "")


# -- Ray actors ---------------------------------------------------------------------------------


class _RayHandle:
    """One actor (replaced when it dies); its trace lines stream into the run's folder."""

    def __init__(self, new_actor: Callable[[], Any]) -> None:
        self.new_actor = new_actor
        self.actor = new_actor()

    async def run(self, spec: EpisodeSpec, trace_dir: Path) -> WorkerResult:
        from ray.exceptions import RayActorError, RayTaskError

        trace = trace_dir / f"{spec.episode_id}.jsonl"
        written_elsewhere(trace)
        started, where, result = time.perf_counter(), {}, None
        try:
            async for ref in self.actor.stream.remote(spec):
                kind, item = await ref
                if kind == "where":
                    where = item
                elif kind == "done":
                    result = item
                else:
                    _apply(trace, kind, item)
        except RayActorError as exc:  # killed, out of memory, its node lost: a new actor
            self._replace()
            return _died_record(spec, f"the Ray worker ({_place(where)}) died", trace,
                                time.perf_counter() - started, where, why=_first_line(exc)), {}
        except RayTaskError as exc:  # the worker's own exception, not Ray's multi-line wrapper
            written_elsewhere(trace, done=True)
            cause = getattr(exc, "cause", None)
            if isinstance(cause, BaseException):
                raise cause from None
            raise
        written_elsewhere(trace, done=True)
        if result is None:  # a generator that ended without its record: never expected
            raise RuntimeError(f"the Ray worker ({_place(where)}) returned no record for {spec.episode_id}")
        return result

    def _replace(self) -> None:
        import ray

        with contextlib.suppress(Exception):  # usually dead already
            ray.kill(self.actor)
        self.actor = self.new_actor()

    def close(self, timeout: float) -> None:
        import ray

        try:
            ray.get(self.actor.close.remote(), timeout=timeout)
        except Exception:  # dead or stuck: ray.kill below ends it either way
            pass
        finally:
            ray.kill(self.actor)


def _apply(trace: Path, kind: str, data: bytes) -> None:
    """One streamed change to a trace: lines appended, or the whole file (written aside, then
    renamed over it, so a kill leaves the old file or the new one)."""
    if kind == "append":
        with trace.open("ab") as sink:
            sink.write(data)
        return
    part = trace.with_name(trace.name + ".part")
    part.write_bytes(data)
    os.replace(part, trace)


def _place(where: Mapping[str, Any]) -> str:
    """``pid 123 on 127.0.0.2`` from a worker's place (``place unknown``: it died before telling)."""
    return " on ".join(str(where[k]) if k != "pid" else f"pid {where[k]}"
                       for k in ("pid", "ip") if where.get(k) is not None) or "place unknown"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _import_ray(address: str) -> Any:
    try:
        import ray
    except ImportError:
        raise ConfigError(f"--ray {address} needs Ray, which is not installed; {RAY_EXTRA_HINT}") from None
    return ray


def _check_reachable(address: str) -> None:
    """Fail in seconds on a ``host:port`` nobody listens on (``ray.init`` retries for minutes)."""
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit():
        return  # auto, local, or a form Ray resolves itself
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as exc:
        raise ConfigError(f"no Ray cluster answers at {address} ({exc.strerror or exc}); start one with "
                          "`ray start --head --port PORT` there, or pass --ray local") from None


def _connect_ray(address: str, workers: int) -> bool:
    """Connect this process to the cluster; True when this call started the connection. A
    private (``local``) cluster gets at least one logical CPU per worker."""
    ray = _import_ray(address)
    if ray.is_initialized():
        return False  # the caller's own session: use it and leave it open
    _check_reachable(address)
    from ray.exceptions import AuthenticationError

    try:
        if address == "local":
            ray.init(num_cpus=max(os.cpu_count() or 1, workers), log_to_driver=False, configure_logging=False)
        else:
            ray.init(address=address, log_to_driver=False, configure_logging=False)
    except AuthenticationError:
        raise ConfigError(f"the Ray cluster at {address} refused this process's token; set RAY_AUTH_MODE "
                          "(and the token, for token mode) the same on every node and here") from None
    except (ConnectionError, RuntimeError) as exc:
        raise ConfigError(f"cannot join the Ray cluster at {address}: {_first_line(exc)}; check the address "
                          "(`ray status` on the head prints it)") from None
    return True


def _ray_actors(setup: WorkerSetup, n: int, address: str) -> list[_RayHandle]:
    import ray

    # One logical CPU held per worker: the nodes' --num-cpus say how many browsers each takes,
    # and the workers really spread (actors holding nothing all landed on one node). A worker
    # that can never be placed would hold its episode forever, hence the check.
    total = ray.cluster_resources().get("CPU", 0)
    if total < n:
        raise ConfigError(f"{n} Ray workers need {n} CPUs on the cluster at {address} (one each), it has "
                          f"{total:g}; lower --workers or start the nodes with a larger --num-cpus")
    remote = ray.remote(EpisodeWorker).options(num_cpus=1, scheduling_strategy="SPREAD", max_restarts=0)
    return [_RayHandle(lambda: remote.remote(setup)) for _ in range(n)]


class WorkerPool:
    """Up to ``workers`` episode workers, started on demand and closed together.

    Args:
        setup: how each worker builds its team and devices.
        workers: the most workers to start (>= 1).
        ray: a Ray cluster address (see the module docstring); None: processes on this machine.
        close_timeout: seconds to wait for each worker to close itself.

    Raises:
        ConfigError: ``workers`` < 1; with ``ray``: Ray not installed or the cluster unreachable
            (raised by :meth:`start`).
    """

    def __init__(self, setup: WorkerSetup, workers: int, *, ray: str | None = None,
                 close_timeout: float = 300.0) -> None:
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ConfigError(f"workers must be an integer >= 1, got {workers!r}")
        if ray is not None and not str(ray).strip():
            raise ConfigError("--ray needs a cluster address (host:port, auto, or local)")
        self.setup, self.workers, self.ray, self.close_timeout = setup, workers, ray, close_timeout
        self.handles: list[WorkerHandle] = []
        self._owns_ray = False

    @property
    def backend(self) -> str:
        return "processes" if self.ray is None else "ray"

    def start(self, n: int) -> list[WorkerHandle]:
        """Start ``min(n, workers)`` workers (at least one) and return their handles."""
        count = max(1, min(n, self.workers))
        if self.ray is None:
            self.handles = [_ProcessHandle(self.setup) for _ in range(count)]
        else:
            self._owns_ray = _connect_ray(self.ray, count)
            self.handles = list(_ray_actors(self.setup, count, self.ray))
        return self.handles

    def close(self) -> None:
        """Close every started worker (each closes its devices and model), then Ray if ours."""
        handles, self.handles = self.handles, []
        try:
            for handle in handles:
                handle.close(self.close_timeout)
        finally:
            if self._owns_ray:
                import ray

                ray.shutdown()
                self._owns_ray = False

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
