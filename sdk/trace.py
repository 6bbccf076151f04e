"""Episode traces: the contract between the runtime and training.

A trace is JSONL, one record per line, written and flushed as the episode runs (so a crash
leaves every finished step readable): an ``episode`` header, one ``step`` record per environment
step (observation, every agent's exact prompt messages, raw output and parsed action as the
n x m matrix, the DAG, the vote with counts, the executed action, reward, done, timings), and an
``end`` record. Screenshots are side files next to the JSONL, referenced by relative path. The
schema is versioned (``SCHEMA_VERSION``) and shipped as ``collabui/schemas/trace.schema.json``.
Never pickled.
"""

from __future__ import annotations

import json
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from collabui.errors import TraceError

__all__ = [
    "SCHEMA_NAME",
    "SCHEMA_VERSION",
    "Trace",
    "TraceStore",
    "EpisodeRecorder",
    "JsonlTraceStore",
    "MemoryTraceStore",
    "read_trace",
    "validate_record",
    "trace_schema",
]

SCHEMA_NAME = "collabui.trace"
SCHEMA_VERSION = 1


@lru_cache(maxsize=1)
def trace_schema() -> dict[str, Any]:
    """The JSON schema of one trace line."""
    text = resources.files("collabui").joinpath("schemas/trace.schema.json").read_text("utf-8")
    return json.loads(text)


def validate_record(record: Mapping[str, Any]) -> None:
    """Raise TraceError when ``record`` does not follow the trace schema."""
    import jsonschema

    kind = record.get("type")
    defs = {"episode", "step", "end"}
    if kind not in defs:
        raise TraceError(f"trace record has type {kind!r}; expected one of {sorted(defs)}")
    schema = {**trace_schema(), "oneOf": None}
    schema.pop("oneOf")
    schema["$ref"] = f"#/$defs/{kind}"
    try:
        jsonschema.validate(dict(record), schema)
    except jsonschema.ValidationError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "(top)"
        raise TraceError(f"invalid {kind} record at {where}: {exc.message}") from None


class EpisodeRecorder(ABC):
    """Writes one episode's records as they happen."""

    @abstractmethod
    def write(self, record: Mapping[str, Any]) -> None:
        """Append one record (validated) and make it durable."""

    @abstractmethod
    def add_screenshot(self, t: int, png: bytes) -> str:
        """Store a screenshot for step t; return the reference to put in the step record."""

    def close(self) -> None:  # noqa: B027 - optional hook, no-op by default
        """Finish the episode. Safe to call twice."""

    @property
    def location(self) -> str | None:
        """Where the trace lives (a path), if anywhere."""
        return None


class TraceStore(ABC):
    """Where episodes are recorded. ``JsonlTraceStore`` writes files; ``MemoryTraceStore`` is
    the fake for tests."""

    @abstractmethod
    def start(self, episode_id: str) -> EpisodeRecorder:
        """Begin recording one episode."""


class _JsonlRecorder(EpisodeRecorder):
    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._fh = path.open("x", encoding="utf-8")

    def write(self, record: Mapping[str, Any]) -> None:
        validate_record(record)
        line = json.dumps(record, ensure_ascii=False)
        with self._lock:
            if self._fh.closed:
                raise TraceError(f"trace {self.path} is closed; start a new episode to record more")
            self._fh.write(line + "\n")
            self._fh.flush()

    def add_screenshot(self, t: int, png: bytes) -> str:
        folder = self.path.with_suffix("")
        folder.mkdir(exist_ok=True)
        name = f"step_{t:04d}.png"
        (folder / name).write_bytes(png)
        return f"{folder.name}/{name}"

    def close(self) -> None:
        with self._lock:
            if not self._fh.closed:
                self._fh.close()

    @property
    def location(self) -> str:
        return str(self.path)


class JsonlTraceStore(TraceStore):
    """Writes ``<root>/<episode_id>.jsonl`` (+ ``<root>/<episode_id>/step_NNNN.png``)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise TraceError(f"cannot create trace dir {self.root}: {exc.strerror}; pass a writable --trace-dir") from None

    def start(self, episode_id: str) -> EpisodeRecorder:
        path = self.root / f"{episode_id}.jsonl"
        if path.exists():
            raise TraceError(f"trace {path} already exists; use another trace dir or episode id")
        return _JsonlRecorder(path)


class _MemoryRecorder(EpisodeRecorder):
    def __init__(self, store: MemoryTraceStore, episode_id: str) -> None:
        self.records: list[dict[str, Any]] = []
        self.screenshots: dict[str, bytes] = {}
        store.episodes[episode_id] = self

    def write(self, record: Mapping[str, Any]) -> None:
        validate_record(record)
        self.records.append(json.loads(json.dumps(record)))

    def add_screenshot(self, t: int, png: bytes) -> str:
        ref = f"step_{t:04d}.png"
        self.screenshots[ref] = png
        return ref


class MemoryTraceStore(TraceStore):
    """Keeps validated records in memory (``store.episodes[id].records``); for tests."""

    def __init__(self) -> None:
        self.episodes: dict[str, _MemoryRecorder] = {}

    def start(self, episode_id: str) -> EpisodeRecorder:
        return _MemoryRecorder(self, episode_id)


@dataclass
class Trace:
    """A parsed trace: header, steps, and the end record (None if the run died)."""

    header: dict[str, Any]
    steps: list[dict[str, Any]] = field(default_factory=list)
    end: dict[str, Any] | None = None
    path: Path | None = None

    @property
    def complete(self) -> bool:
        return self.end is not None

    def proposals(self) -> Iterator[tuple[int, dict[str, Any]]]:
        """Yield ``(t, proposal)`` for every agent, round and step."""
        for step in self.steps:
            for row in step["proposals"]:
                for prop in row:
                    yield step["t"], prop


def read_trace(path: str | Path, *, validate: bool = True) -> Trace:
    """Read a JSONL trace. A truncated last line (the process died mid-write) is ignored."""
    path = Path(path)
    if not path.is_file():
        raise TraceError(f"no trace at {path}; pass the .jsonl file written by --trace-dir")
    lines = path.read_text(encoding="utf-8").splitlines()
    records: list[dict[str, Any]] = []
    for k, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            if k == len(lines) - 1:  # a partial final line from a killed process
                break
            raise TraceError(f"{path}:{k + 1} is not JSON; the trace is corrupt") from None
    if not records or records[0].get("type") != "episode":
        raise TraceError(f"{path} does not start with an episode record; is it a collabui trace?")
    header = records[0]
    if header.get("version") != SCHEMA_VERSION:
        raise TraceError(
            f"{path} has trace schema version {header.get('version')!r}; this collabui reads "
            f"version {SCHEMA_VERSION}: upgrade collabui or re-record the trace"
        )
    trace = Trace(header=header, path=path)
    for rec in records:
        if validate:
            validate_record(rec)
        if rec["type"] == "step":
            trace.steps.append(rec)
        elif rec["type"] == "end":
            trace.end = rec
    return trace
