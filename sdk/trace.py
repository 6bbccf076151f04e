"""Episode traces: the contract between the runtime and training.

A trace is JSONL, one record per line, written and flushed as the episode runs (so a crash
leaves every finished step readable): an ``episode`` header, one ``step`` record per environment
step (observation, every agent's exact prompt messages, raw output and parsed action as the
n x m matrix, the DAG, the vote with counts, the executed action, reward, done, timings), and an
``end`` record. Screenshots are side files next to the JSONL, referenced by relative path. The
schema is versioned (``SCHEMA_VERSION``) and shipped as ``collabui/schemas/trace.schema.json``.
Never pickled.

Whatever a model writes, the trace stays readable: every line is valid UTF-8 JSON (lone
surrogates become U+FFFD), a line is written whole or not at all, raw answers longer than
``MAX_RAW_CHARS`` keep their first part (``raw_truncated`` holds the original length), and the
episode header is on disk before the environment is reset (see ``EpisodeRecorder.write``).
"""

from __future__ import annotations

import json
import os
import threading
import time
import weakref
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from collabui.errors import TraceError
from collabui.parsing import MAX_ANSWER_CHARS

__all__ = [
    "MAX_RAW_CHARS",
    "SCHEMA_NAME",
    "SCHEMA_VERSION",
    "Trace",
    "TraceStore",
    "EpisodeRecorder",
    "JsonlTraceStore",
    "MemoryTraceStore",
    "encode_record",
    "read_trace",
    "reopen_trace",
    "close_open_traces",
    "written_elsewhere",
    "end_trace_file",
    "validate_record",
    "trace_schema",
]

SCHEMA_NAME = "collabui.trace"
SCHEMA_VERSION = 1
#: A raw model answer is stored up to this many characters, all the parser reads of it: a model
#: stuck repeating itself would otherwise write megabytes per proposal, n x m times a step.
MAX_RAW_CHARS = MAX_ANSWER_CHARS


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


def encode_record(record: Mapping[str, Any]) -> bytes:
    """One trace line: ``record`` as UTF-8 JSON and a newline, raw answers capped.

    Lone surrogates (a model's broken UTF-16, ``"\\ud800"``) cannot be encoded as UTF-8; they
    become U+FFFD, and pairs of them the character they stand for, so no string in a record can
    keep it from being written. Raises TraceError when the record is invalid.
    """
    record = _cap_raw(record)
    validate_record(record)
    line = json.dumps(record, ensure_ascii=False) + "\n"
    try:
        return line.encode("utf-8")
    except UnicodeEncodeError:
        fixed = line.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
        return fixed.encode("utf-8")


def _cap_raw(record: Mapping[str, Any]) -> Mapping[str, Any]:
    """A step record whose raw answers (of proposals, and in ``unknown`` actions, which repeat
    them) are cut to MAX_RAW_CHARS, each with ``raw_truncated``: its original length."""
    if record.get("type") != "step" or not isinstance(record.get("proposals"), list):
        return record
    rows = [[_cap_proposal(p) for p in row] if isinstance(row, list) else row
            for row in record["proposals"]]
    out = {**record, "proposals": rows}
    if isinstance(record.get("executed"), Mapping):
        out["executed"] = _cap_field(record["executed"])
    if isinstance(record.get("vote"), Mapping) and isinstance(record["vote"].get("action"), Mapping):
        out["vote"] = {**record["vote"], "action": _cap_field(record["vote"]["action"])}
    return out


def _cap_proposal(prop: Any) -> Any:
    if not isinstance(prop, Mapping):
        return prop  # validation will say what is wrong
    out = _cap_field(prop)
    if isinstance(prop.get("action"), Mapping):
        out = {**out, "action": _cap_field(prop["action"])}
    return out


def _cap_field(data: Mapping[str, Any]) -> dict[str, Any]:
    raw = data.get("raw")
    if not isinstance(raw, str) or len(raw) <= MAX_RAW_CHARS:
        return dict(data)
    return {**data, "raw": raw[:MAX_RAW_CHARS], "raw_truncated": len(raw)}


class EpisodeRecorder(ABC):
    """Writes one episode's records as they happen."""

    @abstractmethod
    def write(self, record: Mapping[str, Any]) -> None:
        """Append one record (validated, see :func:`encode_record`) and make it durable.

        An ``episode`` record written while the header is the only record replaces it: the
        header goes to disk before the environment is reset, so that a process killed during
        the reset leaves a readable trace, and is written again once the environment has told
        the task.
        """

    @abstractmethod
    def add_screenshot(self, t: int, png: bytes) -> str:
        """Store a screenshot for step t; return the reference to put in the step record."""

    def replace_header(self, record: Mapping[str, Any]) -> None:  # noqa: B027 - optional hook
        """Swap the ``episode`` record for ``record`` once steps follow it (the episode loop
        masks a password in an environment's task this way, see ``collabui.episode``). The
        built-in stores do; a store that cannot keeps the first header (this default)."""

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
    """Appends lines to a file. Each line is encoded in full first, then handed to the OS in one
    write() of an unbuffered file (nothing waits in a Python buffer for a later write), and a
    failed write is cut off again: the file only ever holds whole records, but a torn last
    line when the process is killed in mid-write, which read_trace skips."""

    def __init__(self, path: Path, *, append_at: int | None = None, only_header: bool = False,
                 steps: int = 0) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._closed = False
        # What an end record written on the episode's behalf needs (close_open_traces).
        self._steps, self._outcome, self._started = steps, (0.0, False), time.monotonic()
        _OPEN.add(self)
        # A new trace's file appears with its first record (_create): a signal or kill between
        # the episode's start and that record leaves no file rather than a 0-byte one.
        self._fh: Any = None
        if append_at is not None:  # a resumed episode: cut what follows the kept records, then append
            self._fh = path.open("r+b", buffering=0)
            self._fh.truncate(append_at)
            self._fh.seek(append_at)
        self._size = append_at or 0  # bytes of whole records in the file
        self._only_header = only_header  # the header is the only record so far

    def write(self, record: Mapping[str, Any]) -> None:
        data = encode_record(record)
        with self._lock:
            if self._closed:
                raise TraceError(f"trace {self.path} is closed; start a new episode to record more")
            if self._fh is None:
                self._create(data)
            elif record.get("type") == "episode" and self._size:
                self._replace_header(data)
            else:
                self._append(data)
            self._only_header = record.get("type") == "episode"
            self._note(record)

    def _note(self, record: Mapping[str, Any]) -> None:
        """Count the steps written and keep the reward of one that ended the episode."""
        if record.get("type") == "step":
            self._steps += 1
            if record.get("done"):
                self._outcome = (float(record.get("reward") or 0.0), True)

    def _create(self, data: bytes) -> None:
        """The file, holding exactly its first record."""
        if self.path.exists():
            raise TraceError(f"trace {self.path} already exists; use another trace dir or episode id")
        self._write_whole(data)

    def _write_whole(self, data: bytes) -> None:
        """Make the file hold exactly ``data`` (written aside, then renamed over the trace, so a
        kill at any moment leaves it as it was or whole), then append after it."""
        part = self.path.with_name(self.path.name + ".part")
        try:
            part.write_bytes(data)
            os.replace(part, self.path)
        except OSError as exc:
            part.unlink(missing_ok=True)
            raise TraceError(f"cannot write trace {self.path}: {exc.strerror}") from None
        if self._fh is not None:
            self._fh.close()
        self._fh = self.path.open("ab", buffering=0)
        self._size = len(data)

    def _append(self, data: bytes) -> None:
        try:
            done = self._fh.write(data)
            while done < len(data):  # a short write (a full disk, a signal): finish or fail
                done += self._fh.write(data[done:])
        except OSError as exc:
            self._cut_back()
            raise TraceError(f"cannot write trace {self.path}: {exc.strerror}") from None
        self._size += len(data)

    def _cut_back(self) -> None:
        """Drop the part of a failed write, so that the next record starts a line."""
        try:
            self._fh.truncate(self._size)
            self._fh.seek(self._size)
        except OSError:
            pass  # the write error is the one to report

    def _replace_header(self, data: bytes) -> None:
        """Swap the file for one holding only the new header: written aside, then renamed over
        the trace, so a kill at any moment leaves the old header or the new one."""
        if not self._only_header:
            raise TraceError(f"trace {self.path} already has steps; its header cannot change")
        self._write_whole(data)

    def replace_header(self, record: Mapping[str, Any]) -> None:
        """The whole file again, its first line swapped (written aside, then renamed over the
        trace: a kill leaves the old file or the new one)."""
        data = encode_record(record)
        with self._lock:
            if self._closed or self._fh is None:
                raise TraceError(f"trace {self.path} is closed or has no header to replace")
            whole = self.path.read_bytes()[:self._size]  # whole records only
            self._write_whole(data + whole[whole.index(b"\n") + 1:])

    def add_screenshot(self, t: int, png: bytes) -> str:
        folder = self.path.with_suffix("")
        folder.mkdir(exist_ok=True)
        name = f"step_{t:04d}.png"
        (folder / name).write_bytes(png)
        return f"{folder.name}/{name}"

    def close(self) -> None:
        with self._lock:
            self._close()

    def _close(self) -> None:
        self._closed = True
        _OPEN.discard(self)
        if self._fh is not None and not self._fh.closed:
            self._fh.close()

    def abandon(self, error: str, *, wait_s: float) -> bool:
        """Write the ``end`` record the episode did not get to write (it carries ``error``),
        then close; False when the trace was closed already, has no header yet, or a write
        held the lock for ``wait_s`` seconds. A whole-record append like any other."""
        if not self._lock.acquire(timeout=wait_s):
            return False
        try:
            if self._closed or self._fh is None:
                return False
            reward, done = self._outcome
            self._append(encode_record({
                "type": "end", "reward": reward if done else 0.0, "success": done and reward > 0,
                "steps": self._steps, "error": error,
                "duration_s": round(time.monotonic() - self._started, 3)}))
            self._close()
            return True
        except TraceError:
            return False  # a full disk: the trace keeps its last whole record, as after a kill
        finally:
            self._lock.release()

    @property
    def location(self) -> str:
        return str(self.path)


#: Recorders of this process whose trace is not closed yet, for close_open_traces.
_OPEN: weakref.WeakSet[_JsonlRecorder] = weakref.WeakSet()


def close_open_traces(error: str, *, budget_s: float = 0.5) -> int:
    """Give every trace file this process still has open its ``end`` record (with ``error``)
    and close it, within ``budget_s`` seconds in all; return how many. For a process about to
    end without running its ``finally`` blocks (the stop watchdog of ``collabui.cli``): the
    episode loop writes the end record itself when it can, and a trace without one reads as a
    run that died. The traces of :func:`written_elsewhere` get theirs too (the watchdog has
    killed the workers writing them by then)."""
    deadline = time.monotonic() + budget_s
    closed = 0
    for recorder in list(_OPEN):
        closed += recorder.abandon(error, wait_s=max(0.0, deadline - time.monotonic()))
    for path in sorted(_ELSEWHERE):
        closed += end_trace_file(path, error, wait_s=max(0.0, deadline - time.monotonic())) is not None
    return closed


#: Trace files episode workers (other processes) write for this process, until they end.
_ELSEWHERE: set[Path] = set()
_ELSEWHERE_LOCK = threading.Lock()


def written_elsewhere(path: str | Path, *, done: bool = False) -> None:
    """Note that another process writes the trace at ``path`` for this one (``done=True``:
    it ended it), so that :func:`close_open_traces` ends it if this process must stop first."""
    with _ELSEWHERE_LOCK:
        (_ELSEWHERE.discard if done else _ELSEWHERE.add)(Path(path))


def end_trace_file(path: str | Path, error: str, *, wait_s: float = 5.0) -> int | None:
    """End the trace a process left when it died (killed in mid-episode): a torn last line is
    cut and an ``end`` record carrying ``error`` appended, unless it ends already. Returns its
    whole steps (None: no trace, or no header). Call it once its writer is gone."""
    path = Path(path)
    if not _ELSEWHERE_LOCK.acquire(timeout=wait_s):
        return None
    try:
        _ELSEWHERE.discard(path)
        data = path.read_bytes() if path.exists() else b""
        whole = data[:data.rfind(b"\n") + 1]
        records = [json.loads(line) for line in whole.splitlines() if line.strip()]
        if not records or records[0].get("type") != "episode":
            return None
        recorder = _JsonlRecorder(path, append_at=len(whole))
        for record in records[1:]:
            recorder._note(record)
        if records[-1].get("type") == "end":
            recorder.close()  # the torn tail (if any) cut, nothing added
        else:
            recorder._started -= _age_s(records[0])
            recorder.abandon(error, wait_s=wait_s)
        return sum(r.get("type") == "step" for r in records)
    finally:
        _ELSEWHERE_LOCK.release()


def _age_s(header: Mapping[str, Any]) -> float:
    """Seconds since the header's ``created`` time (0 when it has none)."""
    import datetime as dt

    try:
        created = dt.datetime.fromisoformat(str(header.get("created")))
    except ValueError:
        return 0.0
    now = dt.datetime.now(created.tzinfo) if created.tzinfo else dt.datetime.now()
    return max(0.0, (now - created).total_seconds())


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
        stored = json.loads(encode_record(record))  # as a JSONL trace would read back
        if stored["type"] == "episode" and self.records:
            if len(self.records) > 1:
                raise TraceError("the trace already has steps; its header cannot change")
            self.records[0] = stored
        else:
            self.records.append(stored)

    def replace_header(self, record: Mapping[str, Any]) -> None:
        if not self.records:
            raise TraceError("the trace has no header to replace")
        self.records[0] = json.loads(encode_record(record))

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


def reopen_trace(path: str | Path, *, keep_steps: int) -> tuple[EpisodeRecorder, dict[str, Any], int]:
    """Reopen a trace to append a resumed episode: ``(recorder, header, steps kept)``.

    Kept: the header and the first ``keep_steps`` step records (fewer if the file has fewer).
    Cut off: what follows them, i.e. the ``end`` record of a stopped episode, a line torn by a
    kill, and steps the caller will run again. Nothing before them is rewritten.
    """
    path = Path(path)
    if not path.is_file():
        raise TraceError(f"no trace at {path} to resume; it was moved or deleted")
    data = path.read_bytes()
    offset, header, steps = 0, None, 0
    for line in data.split(b"\n")[:-1]:  # whole lines only: the last piece has no newline
        try:
            record = json.loads(line.decode("utf-8"))
        except ValueError:
            break
        kind = record.get("type")
        if header is None and kind != "episode":
            break
        if kind == "step" and steps >= keep_steps or kind == "end":
            break
        if kind == "episode":
            header = record
        else:
            steps += 1
        offset += len(line) + 1
    if header is None:
        raise TraceError(f"{path} has no episode header; it cannot be resumed")
    return _JsonlRecorder(path, append_at=offset, only_header=steps == 0, steps=steps), header, steps


def read_trace(path: str | Path, *, validate: bool = True) -> Trace:
    """Read a JSONL trace. A truncated last line (the process died mid-write) is ignored."""
    path = Path(path)
    if not path.is_file():
        raise TraceError(f"no trace at {path}; pass the .jsonl file written by --trace-dir")
    # Split on "\n" only: str.splitlines() also splits at U+2028, U+0085... which JSON leaves
    # unescaped inside strings. Decoding per line lets a torn last line end mid-character.
    lines = path.read_bytes().split(b"\n")
    last = max((k for k, line in enumerate(lines) if line.strip()), default=-1)
    records: list[dict[str, Any]] = []
    for k, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line.decode("utf-8")))
        except ValueError:  # not UTF-8 or not JSON
            if k == last:  # a partial final line from a killed process
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
