"""Reward matrices on disk: ``labels.jsonl``, one JSON object per labelled step.

Record (the training contract)::

    {"episode_id": str, "t": int, "critic": name,
     "scores": n x m floats in [0, 1] or null (abstain),
     "rewards": n x m 0/1/null (score >= 0.5), "reasons": n x m strings or null,
     "abstained": int, "rationale": optional str}

:func:`label_traces` runs a critic over recorded traces and appends one record per step,
flushed as it goes; with ``resume=True`` steps already labelled by the same critic are skipped,
so an interrupted run continues where it stopped. Never pickled.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from collabui._jsonl import iter_jsonl
from collabui._progress import progress_bar
from collabui.errors import ConfigError, TraceError
from collabui.trace import Trace, read_trace
from collabui.training.critic import (
    REWARD_THRESHOLD,
    Critic,
    ParseStats,
    StepContext,
    task_password_stand_in,
)

__all__ = [
    "LabelStats",
    "expand_trace_paths",
    "iter_step_contexts",
    "validate_label",
    "read_labels",
    "load_labels",
    "label_traces",
]

log = logging.getLogger(__name__)

PathLike = str | Path
LabelKey = tuple[str, int]


def expand_trace_paths(paths: PathLike | Iterable[PathLike]) -> list[Path]:
    """Trace files from files and folders (a folder gives its ``*.jsonl`` files that start
    with an episode record, sorted; labels/pairs files next to them are left out).

    Raises:
        TraceError: a path does not exist, or nothing was found.
    """
    items = [paths] if isinstance(paths, str | Path) else list(paths)
    out: list[Path] = []
    for item in map(Path, items):
        if item.is_dir():
            out += [p for p in sorted(item.glob("*.jsonl")) if _is_trace(p)]
        elif item.is_file():
            out.append(item)
        else:
            raise TraceError(f"no trace file or folder at {item}; pass traces written by --trace-dir")
    if not out:
        raise TraceError(f"no traces found in {[str(p) for p in items]}; record episodes with --trace-dir first")
    return out


def _is_trace(path: Path) -> bool:
    try:
        with path.open(encoding="utf-8") as fh:
            return json.loads(fh.readline() or "{}").get("type") == "episode"
    except (OSError, ValueError, AttributeError):
        return False


def iter_step_contexts(trace: Trace) -> Iterator[StepContext]:
    """One StepContext per step of ``trace`` (with the episode's outcome when it ended)."""
    executed: list[dict[str, Any]] = []
    for step in trace.steps:
        yield StepContext.from_trace_step(trace.header, step, end=trace.end, prefix=executed)
        done = dict(step.get("executed") or {"action": "unknown"})
        # The task's own password, recorded masked, is typed again by a replay from the live task.
        executed.append(task_password_stand_in(done) if (step.get("task_password") or {}).get("executed") else done)


def validate_label(record: Any, where: str = "label") -> dict[str, Any]:
    """Check one labels.jsonl record; return it.

    Raises:
        TraceError: a field is missing, the matrices are not n x m, or values are out of range.
    """
    if not isinstance(record, dict):
        raise TraceError(f"{where} is not a JSON object; regenerate it with label_traces")
    for key, kind in (("episode_id", str), ("t", int), ("critic", str), ("scores", list), ("rewards", list)):
        if not isinstance(record.get(key), kind):
            raise TraceError(f"{where}: field {key!r} is missing or not a {kind.__name__}; regenerate it")
    scores, rewards = record["scores"], record["rewards"]
    shape = [len(row) if isinstance(row, list) else -1 for row in scores]
    if not scores or -1 in shape or len(set(shape)) != 1 or \
            [len(r) if isinstance(r, list) else -1 for r in rewards] != shape:
        raise TraceError(f"{where}: scores and rewards must be the same n x m matrix; regenerate it")
    for srow, rrow in zip(scores, rewards, strict=True):
        for s, r in zip(srow, rrow, strict=True):
            ok = (s is None and r is None) or (
                isinstance(s, int | float) and not isinstance(s, bool) and 0 <= s <= 1
                and r == int(s >= REWARD_THRESHOLD))
            if not ok:
                raise TraceError(f"{where}: score {s!r} with reward {r!r} is invalid (scores in "
                                 "[0, 1] or null, reward = score >= 0.5); regenerate it")
    return record


def read_labels(path: PathLike) -> list[dict[str, Any]]:
    """All records of a labels file (a missing file reads as empty). A truncated last line
    (the labelling process was killed mid-write) is ignored.

    Raises:
        TraceError: a line other than the last is not a valid record.
    """
    path = Path(path)
    if not path.exists():
        return []
    fix = "delete the line or relabel"
    return [validate_label(record, where)
            for where, record in iter_jsonl(path, error=TraceError, fix=fix, torn_tail_ok=True)]


def load_labels(path: PathLike, *, critic: str | None = None) -> dict[LabelKey, dict[str, Any]]:
    """Labels keyed by ``(episode_id, t)``, from one critic (the later record wins).

    Raises:
        ConfigError: the file holds several critics' labels and ``critic`` is not given,
            or none from ``critic``.
    """
    records = read_labels(path)
    names = sorted({r["critic"] for r in records})
    if critic is None and len(names) > 1:
        raise ConfigError(f"{path} holds labels from critics {names}; choose one with critic=")
    if critic is not None and records and critic not in names:
        raise ConfigError(f"{path} has no labels from critic {critic!r} (found {names}); "
                          "label the traces with it first")
    return {(r["episode_id"], r["t"]): r for r in records if critic is None or r["critic"] == critic}


@dataclass
class LabelStats:
    """What ``label_traces`` did."""

    episodes: int = 0
    steps: int = 0
    labelled: int = 0
    skipped: int = 0
    entries: int = 0
    rewarded: int = 0
    abstained: int = 0
    parse: ParseStats = field(default_factory=ParseStats)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k != "parse"}
        out["parse"] = self.parse.to_dict()
        return out


def _prepare(out_path: Path, resume: bool) -> None:
    """Start fresh, or (resume) cut a torn last line so appended records start on a new line."""
    out_path.parent.mkdir(parents=True, exist_ok=True)
    if not resume or not out_path.exists():
        out_path.write_text("", encoding="utf-8")
        return
    text = out_path.read_text(encoding="utf-8")
    if text and not text.endswith("\n"):
        out_path.write_text(text[: text.rfind("\n") + 1], encoding="utf-8")


def label_traces(trace_paths: PathLike | Iterable[PathLike], critic: Critic, out_path: PathLike, *,
                 resume: bool = True, batch_size: int = 8, progress: bool = True) -> LabelStats:
    """Score every step of every trace with ``critic``; append the records to ``out_path``.

    Args:
        trace_paths: trace files and/or folders of traces.
        critic: the critic; its ``name`` is recorded.
        out_path: the labels.jsonl file.
        resume: keep existing records and skip steps this critic already labelled; False
            overwrites the file.
        batch_size: steps scored per critic call (one batched model call for LLM critics).
        progress: log one line per episode (INFO) and show a bar (when stderr is a TTY).

    Raises:
        TraceError: an unreadable trace, or two traces with the same episode id.
    """
    started = time.perf_counter()
    out_path = Path(out_path)
    paths = expand_trace_paths(trace_paths)
    _prepare(out_path, resume)
    done = {(r["episode_id"], r["t"]) for r in read_labels(out_path) if r["critic"] == critic.name}
    stats, seen = LabelStats(), set()
    with out_path.open("a", encoding="utf-8") as fh, \
            progress_bar(len(paths), "labelling traces", enabled=progress) as advance:
        for k, path in enumerate(paths):
            trace = read_trace(path)
            eid = str(trace.header["episode_id"])
            if eid in seen:
                raise TraceError(f"two traces have episode id {eid!r} ({path}); give episodes unique ids")
            seen.add(eid)
            todo = [ctx for ctx in iter_step_contexts(trace) if (eid, ctx.t) not in done]
            before = (stats.labelled, stats.rewarded, stats.abstained)
            stats.episodes += 1
            stats.steps += len(trace.steps)
            stats.skipped += len(trace.steps) - len(todo)
            for start in range(0, len(todo), max(1, batch_size)):
                batch = todo[start:start + max(1, batch_size)]
                _write_batch(fh, critic, batch, stats)
            advance()
            if progress:
                _progress(k + 1, len(paths), eid, len(trace.steps), stats, before)
    stats.seconds = round(time.perf_counter() - started, 3)
    return stats


def _write_batch(fh: IO[str], critic: Critic, batch: list[StepContext], stats: LabelStats) -> None:
    for ctx, matrix in zip(batch, critic.score_many(batch), strict=True):
        if (matrix.n, matrix.m) != (ctx.n, ctx.m):
            raise ConfigError(f"critic {critic.name} returned a {matrix.n}x{matrix.m} matrix for a "
                              f"{ctx.n}x{ctx.m} step; fix the critic")
        fh.write(json.dumps(matrix.to_label(ctx.episode_id, ctx.t, critic.name), ensure_ascii=False) + "\n")
        stats.labelled += 1
        stats.entries += ctx.n * ctx.m
        stats.rewarded += sum(r == 1 for row in matrix.rewards for r in row)
        stats.abstained += matrix.abstained
        if matrix.parse is not None:
            stats.parse = stats.parse + matrix.parse
    fh.flush()  # a crash loses at most the batch in flight


def _progress(k: int, total: int, eid: str, steps: int, stats: LabelStats, before: tuple[int, int, int]) -> None:
    labelled, rewarded, abstained = (a - b for a, b in zip(
        (stats.labelled, stats.rewarded, stats.abstained), before, strict=True))
    log.info("[label %d/%d] %s: %d/%d steps labelled (%d already done), %d rewarded, %d abstained", k, total, eid,
             labelled, steps, steps - labelled, rewarded, abstained)
