"""What the trace viewer shows, read from disk: episodes, screenshots, labels, pairs, run summary.

Nothing here renders HTML; :mod:`collabui.viewer.render` turns these plain structures into the
page. Every string read from a trace is kept as is (model output is untrusted: the renderer
escapes it). Secrets are masked in traces when they are written; nothing here unmasks them.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from collabui.errors import ConfigError, TraceError
from collabui.trace import Trace, read_trace

__all__ = ["Episode", "RunSummary", "TaskRate", "ViewInput", "action_call", "action_key",
           "load_input", "find_side_files", "read_labels", "read_pairs", "screenshot_uri",
           "element_box", "topological_order"]

StepKey = tuple[str, int]


@dataclass
class Episode:
    """One trace with what was found for it (labels and pairs keyed by step ``t``)."""

    trace: Trace
    anchor: str
    labels: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    pairs: dict[int, list[dict[str, Any]]] = field(default_factory=dict)

    @property
    def episode_id(self) -> str:
        return str(self.trace.header.get("episode_id", ""))


@dataclass
class TaskRate:
    """Success of one task over a run folder's episodes, with the 95% Wilson interval."""

    task: str
    successes: int
    episodes: int
    ci95: tuple[float, float]


@dataclass
class RunSummary:
    """A run folder's success per task (from its episodes) and the overall line."""

    folder: Path
    tasks: list[TaskRate]
    overall: TaskRate
    results: dict[str, Any] | None = None


@dataclass
class ViewInput:
    """Everything one page shows: a single trace, or a run folder (``run`` set)."""

    source: Path
    episodes: list[Episode]
    run: RunSummary | None = None
    label_files: list[Path] = field(default_factory=list)
    pair_files: list[Path] = field(default_factory=list)


def _natural(path: Path) -> list[Any]:
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", path.name)]


def _anchor(episode_id: str, used: set[str]) -> str:
    base = "ep-" + (re.sub(r"[^A-Za-z0-9_-]+", "-", episode_id).strip("-") or "episode")
    anchor, k = base, 1
    while anchor in used:
        k += 1
        anchor = f"{base}-{k}"
    used.add(anchor)
    return anchor


def _trace_files(folder: Path) -> list[Path]:
    traces = folder / "traces"
    root = traces if traces.is_dir() else folder
    files = sorted(root.glob("*.jsonl"), key=_natural)
    return [f for f in files if not f.name.startswith(("labels", "pairs", "episodes"))
            and "pairs" not in f.stem]


def find_side_files(folder: Path, kind: str) -> list[Path]:
    """``labels*.jsonl`` (kind "labels") or ``*pairs*.jsonl`` (kind "pairs") in ``folder`` and
    its parent (a trace's folder is often ``RUN/traces``)."""
    pattern = "labels*.jsonl" if kind == "labels" else "*pairs*.jsonl"
    found: list[Path] = []
    for place in (folder, folder.parent):
        found.extend(sorted(p for p in place.glob(pattern) if p.is_file()))
    return list(dict.fromkeys(found))


def _jsonl(path: Path, what: str) -> Iterable[dict[str, Any]]:
    if not path.is_file():
        raise ConfigError(f"no {what} file at {path}; pass an existing JSONL file")
    for k, line in enumerate(path.read_text("utf-8", errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            raise ConfigError(f"{path}:{k} is not JSON; is it a {what} file?") from None
        if isinstance(record, dict):
            yield record


def read_labels(paths: Iterable[Path]) -> dict[StepKey, list[dict[str, Any]]]:
    """Critic labels (``collabui train label`` output) keyed by ``(episode_id, t)``; one entry
    per critic, the later record of a critic winning."""
    out: dict[StepKey, dict[str, dict[str, Any]]] = {}
    for path in paths:
        for rec in _jsonl(path, "labels"):
            if "episode_id" not in rec or "t" not in rec or not isinstance(rec.get("scores"), list):
                raise ConfigError(f"{path} holds a record without episode_id, t and scores; "
                                  "pass a labels file written by collabui train label")
            out.setdefault((str(rec["episode_id"]), int(rec["t"])), {})[str(rec.get("critic", "?"))] = rec
    return {key: list(by_critic.values()) for key, by_critic in out.items()}


def read_pairs(paths: Iterable[Path]) -> dict[StepKey, list[dict[str, Any]]]:
    """Preference pairs (``collabui train pairs`` output) keyed by ``(episode_id, t)``."""
    out: dict[StepKey, list[dict[str, Any]]] = {}
    for path in paths:
        for rec in _jsonl(path, "pairs"):
            if "episode_id" not in rec or "t" not in rec or "chosen" not in rec:
                raise ConfigError(f"{path} holds a record without episode_id, t and chosen; "
                                  "pass a pairs file written by collabui train pairs")
            out.setdefault((str(rec["episode_id"]), int(rec["t"])), []).append(rec)
    return out


def _read(path: Path) -> Trace:
    with path.open("rb") as fh:
        first = fh.readline(1 << 20)
    try:
        head = json.loads(first.decode("utf-8"))
    except ValueError:
        head = None
    if not isinstance(head, dict) or head.get("type") != "episode":
        raise ConfigError(f"{path} is not a collabui trace (its first line is no episode record); "
                          "pass a .jsonl written by --trace-dir or a run folder")
    try:
        return read_trace(path, validate=False)
    except TraceError as exc:
        raise ConfigError(str(exc)) from None


def _success(trace: Trace) -> bool:
    return bool(trace.end and trace.end.get("success"))


def _task_of(trace: Trace) -> str:
    env = str(trace.header.get("env") or "?")
    return env.split("/", 1)[1] if "/" in env else env


def _rate(task: str, wins: int, n: int) -> TaskRate:
    from collabui.evaluation.stats import wilson_interval

    return TaskRate(task, wins, n, wilson_interval(wins, n))


def _summary(folder: Path, traces: list[Trace]) -> RunSummary:
    per_task: dict[str, list[bool]] = {}
    for trace in traces:
        per_task.setdefault(_task_of(trace), []).append(_success(trace))
    rates = [_rate(task, sum(v), len(v)) for task, v in per_task.items()]
    wins = sum(_success(t) for t in traces)
    results = None
    if (folder / "results.json").is_file():
        try:
            results = json.loads((folder / "results.json").read_text("utf-8"))
        except ValueError:
            results = None
    return RunSummary(folder, rates, _rate("all", wins, len(traces)), results)


def load_input(path: str | Path, *, labels: Iterable[str | Path] = (),
               pairs: Iterable[str | Path] = ()) -> ViewInput:
    """Read a trace file or a run folder, and the labels and pairs for its steps.

    Labels and pairs given explicitly are used as they are; otherwise ``labels*.jsonl`` and
    ``*pairs*.jsonl`` beside the traces (or one folder up) are picked up.

    Raises:
        ConfigError: the path does not exist, holds no trace, or a file is not what it claims.
    """
    source = Path(path)
    if not source.exists():
        raise ConfigError(f"no trace or run folder at {source}; pass a trace .jsonl or a folder "
                          "written by collabui run --trace-dir / collabui eval --out")
    if source.is_dir():
        files = _trace_files(source)
        if not files:
            raise ConfigError(f"{source} holds no trace (*.jsonl, or traces/*.jsonl); pass a run folder "
                              "or a trace file")
        traces = [_read(f) for f in files]
        side = files[0].parent
    else:
        traces = [_read(source)]
        side = source.parent
    label_files = [Path(p) for p in labels] or find_side_files(side, "labels")
    pair_files = [Path(p) for p in pairs] or find_side_files(side, "pairs")
    by_label, by_pair = read_labels(label_files), read_pairs(pair_files)
    used: set[str] = set()
    episodes = []
    for trace in traces:
        ep = Episode(trace, _anchor(str(trace.header.get("episode_id", "")), used))
        for step in trace.steps:
            key = (ep.episode_id, int(step.get("t", 0)))
            if key in by_label:
                ep.labels[key[1]] = by_label[key]
            if key in by_pair:
                ep.pairs[key[1]] = by_pair[key]
        episodes.append(ep)
    run = _summary(source, traces) if source.is_dir() else None
    return ViewInput(source, episodes, run, label_files, pair_files)


# -- per-step helpers ------------------------------------------------------------------------


def action_call(action: Any, space: str | None) -> str:
    """``click('B')`` for a recorded action dict (its own rendering when it does not validate)."""
    if not isinstance(action, Mapping):
        return "none"
    from collabui.actions import get_action_space
    from collabui.errors import CollabUIError

    try:
        return get_action_space(space or "web").from_dict(action).to_call()
    except CollabUIError:
        name = action.get("action", "?")
        args = ", ".join(repr(v) for k, v in action.items() if k != "action" and v is not None)
        return f"{name}({args})"


def action_key(action: Any, space: str | None) -> str:
    """What the vote compares (type and arguments, text case-insensitive), as a string."""
    if not isinstance(action, Mapping):
        return "none"
    from collabui.actions import get_action_space
    from collabui.errors import CollabUIError

    try:
        return repr(get_action_space(space or "web").from_dict(action).key())
    except CollabUIError:
        return json.dumps(action, sort_keys=True)


def screenshot_uri(trace: Trace, ref: Any) -> tuple[str | None, tuple[int, int] | None, str | None]:
    """``(data URI, (width, height), note)`` of a step's screenshot side file; the note says why
    there is none."""
    if not ref:
        return None, None, "no screenshot recorded (record with screenshots on: --screenshots)"
    if trace.path is None:
        return None, None, "screenshot stored outside a file trace"
    file = (trace.path.parent / str(ref)).resolve()
    if trace.path.parent.resolve() not in file.parents or not file.is_file():
        return None, None, f"screenshot file {ref} is missing"
    data = file.read_bytes()
    size = None
    if data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) >= 24:
        size = (int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big"))
    return "data:image/png;base64," + base64.b64encode(data).decode("ascii"), size, None


Rect = tuple[float, float, float, float]


def element_box(trace: Trace, step: Mapping[str, Any],
                image: tuple[int, int] | None) -> tuple[Rect | None, str]:
    """The executed action's element as ``(left, top, right, bottom)`` in screenshot pixels,
    or None and why not.

    Web traces: the element's ``box`` in the observation's tree (CSS pixels of the viewport),
    scaled by the screenshot's pixel size over ``extra["screenshot_area"]``, the viewport part
    it shows. Mobile MiniWoB++: the element's bounds (CSS pixels), scaled the same way. Phones
    (``android``): the bounds, already screen pixels. Traces recorded before boxes and areas
    were kept say so; nothing is guessed.
    """
    executed = step.get("executed")
    if not isinstance(executed, Mapping) or (executed.get("element_id") is None and executed.get("index") is None):
        return None, "the executed action names no element"
    if image is None:
        return None, "no screenshot to outline the element on"
    observation = step.get("observation") or {}
    extra = observation.get("extra") or {}
    if executed.get("element_id") is not None:
        name = f"element {executed['element_id']}"
        rect, why = _web_rect(extra.get("tree"), str(executed["element_id"]))
    else:
        name = f"element {executed['index']}"
        rect, why = _indexed_rect(str(observation.get("text") or ""), extra.get("ui_elements"),
                                  int(executed["index"]))
    if rect is None:
        return None, f"{name} {why}"
    if str(trace.header.get("env") or "").startswith("android"):
        area: Any = [0, 0, image[0], image[1]]  # phone bounds are screen pixels, as the screenshot
    else:
        area = extra.get("screenshot_area")
    if not (isinstance(area, list) and len(area) == 4 and area[2] > 0 and area[3] > 0):
        return None, (f"{name} has a box in page pixels, but the trace does not record which part of "
                      "the page the screenshot shows (recorded before screenshot_area); not outlined")
    return _on_image(rect, area, image, name)


def _web_rect(tree: Any, element_id: str) -> tuple[Rect | None, str]:
    node = _find_node(tree, element_id)
    if node is None:
        return None, "is not in the observation's element tree"
    box = node.get("box")
    if not (isinstance(box, list) and len(box) == 4):
        return None, "has no recorded box (traces recorded before element boxes); not outlined"
    x, y, w, h = (float(v) for v in box)
    return (x, y, x + w, y + h), ""


def _find_node(node: Any, element_id: str) -> Mapping[str, Any] | None:
    if not isinstance(node, Mapping):
        return None
    if node.get("id") == element_id:
        return node
    for part in node.get("parts") or []:
        found = _find_node(part, element_id)
        if found is not None:
            return found
    return None


def _indexed_rect(text: str, records: Any, index: int) -> tuple[Rect | None, str]:
    from collabui.devices.ui_elements import screen_records

    bounds = {e["index"]: e["bounds"] for e in screen_records(text, records)}
    box = bounds.get(index)
    if not box or len(box) != 4:
        return None, "has no bounds in the observation"
    left, top, right, bottom = (float(v) for v in box)
    return (left, top, right, bottom), ""


def _on_image(rect: Rect, area: list[Any], image: tuple[int, int], name: str) -> tuple[Rect | None, str]:
    """``rect`` (page units) on the image that shows ``area`` = [x, y, w, h] of the page."""
    ax, ay, aw, ah = (float(v) for v in area)
    sx, sy = image[0] / aw, image[1] / ah
    left, top, right, bottom = (rect[0] - ax) * sx, (rect[1] - ay) * sy, (rect[2] - ax) * sx, (rect[3] - ay) * sy
    clipped = (max(left, 0.0), max(top, 0.0), min(right, float(image[0])), min(bottom, float(image[1])))
    if clipped[2] <= clipped[0] or clipped[3] <= clipped[1]:
        return None, f"{name} lies outside the screenshot (scrolled away or off the captured area); not outlined"
    scale = "" if abs(sx - 1) < 1e-9 and abs(sy - 1) < 1e-9 else f" (scaled {sx:g} x {sy:g} to the image)"
    cut = "" if clipped == (left, top, right, bottom) else ", cut at the screenshot's edge"
    return clipped, f"{name} outlined from its recorded box{scale}{cut}"


def topological_order(n: int, edges: Iterable[Iterable[int]]) -> tuple[list[int], dict[int, int]]:
    """Kahn's order (lowest id first among ready agents) and each agent's depth (longest path
    from a source), the superstep at which its round-0 node runs."""
    pairs = [tuple(e)[:2] for e in edges]
    preds: dict[int, list[int]] = {i: [] for i in range(n)}
    for a, b in pairs:
        if a in preds and b in preds:
            preds[b].append(a)
    order: list[int] = []
    depth: dict[int, int] = {}
    remaining = set(range(n))
    while remaining:
        ready = sorted(i for i in remaining if all(p in depth for p in preds[i]))
        if not ready:  # a cycle (not a valid trace): list the rest in id order
            ready = sorted(remaining)
        i = ready[0]
        depth[i] = max((depth.get(p, 0) + 1 for p in preds[i]), default=0)
        order.append(i)
        remaining.discard(i)
    return order, depth
