"""AutoWebBench step-level evaluation: one team (or single-agent) step per record, two metrics.

A record is ``{"source": str, "target": str}`` (AutoWebBench; Mind2Web files of the same format
load the same way). ``source`` is AutoWebGLM's whole prompt: the simplified page, the function
list, then ``#Previous commands:``, ``#Window tabs:``, ``#Current viewport (pages):`` and
``#Task:`` sections. :func:`parse_source` turns it into OUR inputs - task, history (the previous
commands as call strings, like the runtime's history) and an :class:`Observation` - so the team
sees exactly the prompt it sees at run time (``CollabAgentTeam.step(task, observation, history)``).

Scoring (:func:`score_prediction`), predictions and targets both parsed into the WEB space:

* ``ssr_published`` - function and element id match, over records whose target acts on an
  element (click, hover, select, type_string): the published AutoWebBench step success rate.
  Unlike the published scripts, an unparsable prediction counts as a failure (and is counted).
* ``exact_match`` - strict match over all records: function, element id and arguments
  (``Action.key()``: text compared case- and whitespace-insensitively; booleans exactly).

:func:`evaluate_autowebbench` is resumable: every finished record is appended to
``predictions.jsonl`` in the output folder at once, and a rerun skips the records already there.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from collabui._jsonl import read_json
from collabui._progress import progress_bar
from collabui.actions import WEB, Action, Unknown
from collabui.actions.web import ElementAction
from collabui.devices import simplify
from collabui.devices.base import Observation
from collabui.errors import CollabUIError, ConfigError
from collabui.evaluation.report import RunClock, write_markdown
from collabui.evaluation.stats import rate_entry
from collabui.parsing import parse_action

__all__ = [
    "Record",
    "METRICS",
    "load_records",
    "parse_source",
    "parse_record",
    "score_prediction",
    "summarize",
    "evaluate_autowebbench",
    "check_resumable",
    "read_predictions",
    "PREDICTIONS_FILE",
    "RESULTS_FILE",
    "SUMMARY_FILE",
]

log = logging.getLogger(__name__)

METRICS = ("ssr_published", "exact_match")
PREDICTIONS_FILE = "predictions.jsonl"
RESULTS_FILE = "results.json"
SUMMARY_FILE = "summary.md"
_RUN_FILE = "run.json"

_FUNCTIONS = tuple(WEB.actions)
_PAGE_END = ("\nYou are a helpful assistant", "#Provided functions:", "#Previous commands:")
_SECTION = re.compile(r"^#(Previous commands|Window tabs|Current viewport \(pages\)|Task):", re.M)
_TASK_END = re.compile(r"\n\s*\nYou should output one command")
_COMMAND_START = re.compile(rf"^\s*(?:{'|'.join(_FUNCTIONS)})\s*\(", re.M)
_SEGMENT = " #HTML Segment:"
_TAB = re.compile(r"(\d+)\.\s+(.*?)(?=\s+\d+\.\s|$)", re.S)
_CURRENT = "<-- current tab"


@dataclass(frozen=True)
class Record:
    """One benchmark record, read into our inputs.

    Attributes:
        index: position in the file (0-based).
        task: the task text.
        history: previous commands as call strings, oldest first.
        observation: the page, tabs and viewport as our Observation.
        target_raw: the record's target text.
        target: the target parsed into the WEB space (``Unknown`` if it does not parse).
    """

    index: int
    task: str
    history: tuple[str, ...]
    observation: Observation
    target_raw: str
    target: Action

    @property
    def kind(self) -> str:
        """The target's action type (``unknown`` when it did not parse)."""
        return self.target.name

    @property
    def on_element(self) -> bool:
        """Whether the target acts on an element (counts for ``ssr_published``)."""
        return isinstance(self.target, ElementAction)


# --------------------------------------------------------------------------- reading records


def load_records(path: str | Path) -> list[dict[str, str]]:
    """Read a file of ``[{"source": str, "target": str}, ...]``.

    Raises:
        ConfigError: the file is missing, not JSON, or not a list of such objects.
    """
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"AutoWebBench data file {str(file)!r} not found; pass --data PATH to a JSON "
                          "list of {source, target} records (e.g. ../shared/data/autowebbench/en/ind.json)")
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{file} is not valid UTF-8 JSON ({type(exc).__name__}); pass a JSON list "
                          "of {source, target} records") from None
    if not isinstance(data, list) or not data:
        raise ConfigError(f"{file} must hold a non-empty JSON list of {{source, target}} records")
    for k, rec in enumerate(data):
        if not (isinstance(rec, dict) and isinstance(rec.get("source"), str)
                and isinstance(rec.get("target"), str)):
            raise ConfigError(f"{file}: record {k} is not an object with string 'source' and "
                              "'target'; fix the file (AutoWebBench/Mind2Web record format)")
    return data


def _sections(source: str) -> dict[str, str]:
    marks = list(_SECTION.finditer(source))
    out = {}
    for k, m in enumerate(marks):
        end = marks[k + 1].start() if k + 1 < len(marks) else len(source)
        out[m.group(1)] = source[m.end():end]
    return out


def _history(text: str) -> tuple[str, ...]:
    text = text.strip()
    if not text or text == "None":
        return ()
    starts = [m.start() for m in _COMMAND_START.finditer(text)] or [0]
    out = []
    for a, b in zip(starts, [*starts[1:], len(text)], strict=True):
        command = text[a:b].split(_SEGMENT, 1)[0].strip()
        action = parse_action(command, WEB)
        # The runtime's history holds canonical call strings; keep the raw text if it won't parse.
        out.append(command if isinstance(action, Unknown) else action.to_call())
    return tuple(out)


def _tabs(text: str) -> tuple[tuple[str, ...], int]:
    titles, current = [], 0
    for m in _TAB.finditer(text.strip()):
        title = m.group(2).strip()
        if _CURRENT in title:
            current = len(titles)
            title = title.replace(_CURRENT, "").strip()
        titles.append(title)
    return tuple(titles), current


def parse_source(source: str, element_format: str = "html") -> tuple[str, tuple[str, ...], Observation]:
    """Split one record's ``source`` into (task, history, observation).

    The page is everything before the assistant instructions; the observation carries the
    tabs (``1. Default <-- current tab`` becomes ``("Default",)``, current 0) and the viewport.
    The record's page is simplified HTML; ``element_format="text-first"`` reads it back into an
    element tree and renders it in that format (what a model trained on text-first pages reads),
    the tree kept in ``extra["tree"]`` as a browser observation keeps it.

    Raises:
        ConfigError: the source has no ``#Task:`` section (not an AutoWebBench-style prompt).
    """
    cut = min((k for k in (source.find(m) for m in _PAGE_END) if k >= 0), default=len(source))
    sections = _sections(source[cut:])
    if "Task" not in sections:
        raise ConfigError("record source has no '#Task:' line; expected the AutoWebBench prompt format")
    task = _TASK_END.split(sections["Task"], maxsplit=1)[0].strip()
    tabs, current = _tabs(sections.get("Window tabs", ""))
    viewport = sections.get("Current viewport (pages)", "").strip() or None
    text, extra = _page(source[:cut].strip(), element_format)
    observation = Observation(text=text, task=task, tabs=tabs, current_tab=current, viewport=viewport,
                              extra=extra)
    return task, _history(sections.get("Previous commands", "")), observation


def _page(html: str, element_format: str) -> tuple[str, dict[str, Any]]:
    """The record's page in ``element_format``, and the observation's extra (its tree when read)."""
    if element_format == "html":
        return html, {}
    roots = simplify.parse_tree(html)
    tree = roots[0] if len(roots) == 1 else {"tag": "", "id": None, "parts": roots}
    return simplify.render(tree, element_format), {"tree": tree}


def parse_record(index: int, record: dict[str, str], element_format: str = "html") -> Record:
    """Read one ``{source, target}`` record (see :func:`parse_source`)."""
    task, history, observation = parse_source(record["source"], element_format)
    target = parse_action(record["target"], WEB)
    return Record(index, task, history, observation, record["target"], target)


# --------------------------------------------------------------------------- scoring


def _strict_key(action: Action) -> tuple[Any, ...]:
    # finish() and finish('') both mean "stop without an answer".
    return tuple("" if v is None else v for v in action.key())


def score_prediction(prediction: Action, target: Action) -> dict[str, bool | None]:
    """Both metrics for one record: ``ssr_published`` is None when the target is not on an element.

    Unparsable predictions (``Unknown``) and unparsable targets never match.
    """
    if isinstance(prediction, Unknown) or isinstance(target, Unknown):
        return {"ssr_published": False if isinstance(target, ElementAction) else None,
                "exact_match": False}
    ssr = None
    if isinstance(target, ElementAction):
        ssr = (prediction.name == target.name and isinstance(prediction, ElementAction)
               and prediction.element_id == target.element_id)
    return {"ssr_published": ssr, "exact_match": _strict_key(prediction) == _strict_key(target)}


def summarize(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Overall metrics, the per-action-type breakdown and counts from prediction rows.

    Each row needs ``kind`` (target type), ``ssr_published`` (bool or None), ``exact_match``,
    ``unparsable`` and ``error``.
    """
    def entries(group: Sequence[dict[str, Any]]) -> dict[str, Any]:
        out = {}
        element = [r for r in group if r["ssr_published"] is not None]
        if element:
            out["ssr_published"] = rate_entry(sum(bool(r["ssr_published"]) for r in element), len(element))
        out["exact_match"] = rate_entry(sum(bool(r["exact_match"]) for r in group), len(group))
        return out

    kinds = sorted({r["kind"] for r in rows})
    overall = entries(rows) if rows else {}
    if rows and "ssr_published" not in overall:
        overall["ssr_published"] = rate_entry(0, 0)
    return {
        "overall": overall,
        "breakdown": {"per_action_type": {k: entries([r for r in rows if r["kind"] == k]) for k in kinds}},
        "counts": {
            "records": len(rows),
            "element_records": sum(r["ssr_published"] is not None for r in rows),
            "unparsable": sum(bool(r["unparsable"]) for r in rows),
            "errors": sum(bool(r.get("error")) for r in rows),
        },
    }


# --------------------------------------------------------------------------- running


def read_predictions(folder: str | Path) -> dict[int, dict[str, Any]]:
    """An AutoWebBench run folder's predictions by record index (``predictions.jsonl``: each row's
    ``kind``, ``target``, ``prediction`` and its ``ssr_published`` / ``exact_match`` scores; the
    first is None on records without an element); empty when it has none."""
    return _read_rows(Path(folder) / PREDICTIONS_FILE)


def _read_rows(path: Path) -> dict[int, dict[str, Any]]:
    rows: dict[int, dict[str, Any]] = {}
    if not path.exists():
        return rows
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue  # a line cut by an interrupted run: that record is simply rerun
        if isinstance(row, dict) and isinstance(row.get("index"), int):
            rows[row["index"]] = row
    return rows


def _identity(data: str | Path, system: dict[str, Any] | None, element_format: str) -> dict[str, Any]:
    """What a folder's predictions depend on (``run.json``): the data file and the system."""
    system = dict(system or {})
    if element_format != "html":  # part of the run's identity; html folders of earlier runs still resume
        system["element_format"] = element_format
    return {"data": str(Path(data).resolve()), "system": system}


def check_resumable(out_dir: str | Path, data: str | Path, system: dict[str, Any] | None,
                    element_format: str = "html") -> None:
    """Refuse, before any model loads or server starts, an ``out_dir`` that holds another run's
    predictions (what :func:`evaluate_autowebbench` would refuse only then). Writes nothing.

    Raises:
        ConfigError: ``out_dir`` holds predictions of another run.
    """
    _check_run(Path(out_dir), _identity(data, system, element_format), write=False)


def _check_run(out: Path, identity: dict[str, Any], *, write: bool = True) -> None:
    run_file = out / _RUN_FILE
    if run_file.exists():
        previous = read_json(run_file, error=ConfigError,
                             fix="delete it to go on with this folder using these flags, or pass another --out")
        if previous != identity:
            raise ConfigError(f"{out} holds predictions of another run ({previous}); use a new --out "
                              "folder or delete it to start over")
    elif write:
        run_file.write_text(json.dumps(identity, ensure_ascii=False, indent=1), encoding="utf-8")


def _predict(team: Any, record: Record) -> dict[str, Any]:
    row: dict[str, Any] = {"index": record.index, "kind": record.kind, "target": record.target_raw}
    try:
        step = team.step(record.task, record.observation, record.history, t=record.index)
    except CollabUIError as exc:  # a model/endpoint failure: recorded, retried on the next run
        prediction: Action = Unknown(reason=str(exc))
        row.update(raw=None, error=f"{type(exc).__name__}: {exc}")
    else:
        prediction = step.action
        # The latest round's wording of the prediction (entries skipped by stop_when_decided asked no model).
        ran = sorted((p for r in step.proposals for p in r if not p.skipped), key=lambda p: -p.round)
        chosen = next((p for p in ran if p.action.key() == prediction.key()), ran[0])
        row.update(raw=chosen.raw, error=None,
                   proposals=[[None if p.skipped else p.action.to_call() for p in r] for r in step.proposals])
    row["prediction"] = None if isinstance(prediction, Unknown) else prediction.to_dict()
    row["unparsable"] = isinstance(prediction, Unknown) and row["error"] is None
    row.update(score_prediction(prediction, record.target))
    return row


def evaluate_autowebbench(
    data: str | Path,
    team: Any,
    out_dir: str | Path,
    *,
    start: int = 0,
    limit: int | None = None,
    system: dict[str, Any] | None = None,
    command: str | None = None,
    progress: bool = True,
    element_format: str = "html",
) -> dict[str, Any]:
    """Run ``team`` (a ``CollabAgentTeam`` on the web space) on records ``start .. start+limit``.

    Writes ``predictions.jsonl`` (one row per record, appended as made), ``results.json`` (the
    common results format) and ``summary.md`` into ``out_dir``, and returns the results dict.
    Records already in ``predictions.jsonl`` without an error are not rerun. ``progress``: log
    one line per record (INFO) and show a bar (on a terminal). ``element_format``: the page
    format the team reads (:func:`parse_source`).

    Raises:
        ConfigError: bad data file, bad range, the team is not on the web space, or ``out_dir``
            holds another run's predictions.
    """
    simplify.check_element_format(element_format)
    if team.space.name != "web":
        raise ConfigError(f"AutoWebBench needs web actions, the team proposes {team.space.name} "
                          "actions; build the team with action_space='web'")
    raw = load_records(data)
    if start < 0 or start >= len(raw) or (limit is not None and limit < 1):
        raise ConfigError(f"--start must be in [0, {len(raw) - 1}] and --limit >= 1; got start={start}, limit={limit}")
    chosen = range(start, len(raw) if limit is None else min(len(raw), start + limit))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    identity = _identity(data, system, element_format)
    _check_run(out, identity)
    system = identity["system"]  # the results name the format the team read too
    pred_path = out / PREDICTIONS_FILE
    done = {k: r for k, r in _read_rows(pred_path).items() if not r.get("error")}
    clock = RunClock(out)
    todo = [k for k in chosen if k not in done]
    if progress and len(todo) < len(chosen):
        log.info("resuming: %d of %d records already done", len(chosen) - len(todo), len(chosen))
    with pred_path.open("a", encoding="utf-8") as sink, \
            progress_bar(len(chosen), "AutoWebBench records", done=len(chosen) - len(todo), enabled=progress) as advance:
        for n, k in enumerate(todo, 1):
            row = _predict(team, parse_record(k, raw[k], element_format))
            sink.write(json.dumps(row, ensure_ascii=False) + "\n")
            sink.flush()  # resumable: a finished record survives an interrupted run
            done[k] = row
            advance()
            if progress:
                _log_record(n, len(todo), k, row)
    rows = [done[k] for k in chosen if k in done]
    results = {
        "schema": "collabui.eval", "version": 1, "harness": "autowebbench", "system": system,
        "data": {"path": str(data), "language": _language(Path(data), raw), "records_in_file": len(raw),
                 "start": start, "limit": limit, "records": len(rows)},
        **summarize(rows),
        "started": clock.started, "seconds": round(clock.seconds(), 2),
        "command": command or " ".join(sys.argv),
    }
    (out / RESULTS_FILE).write_text(json.dumps(results, ensure_ascii=False, indent=1), encoding="utf-8")
    write_markdown(results, out / SUMMARY_FILE)
    return results


def _log_record(n: int, total: int, k: int, row: dict[str, Any]) -> None:
    ok = "ok" if row["exact_match"] or row["ssr_published"] else "--"
    got = row["prediction"] and str(WEB.from_dict(row["prediction"]))
    log.info("[%d/%d] record %d %s: %s (target %r) %s", n, total, k, row["kind"], got or "unparsable",
             row["target"][:60], ok)


def _language(path: Path, raw: Sequence[dict[str, str]]) -> str:
    for part in reversed(path.parts):
        if part in {"en", "zh"}:
            return part
    cjk = sum(bool(re.search(r"[\u4e00-\u9fff]", r["target"] + r["source"][-400:])) for r in raw[:50])
    return "zh" if cjk > len(raw[:50]) / 2 else "en"
