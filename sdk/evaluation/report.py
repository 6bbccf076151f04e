"""Reports over the common results JSON of every harness: Markdown, plots, and compare.

A results dict (``schema: collabui.eval``) has ``overall: {metric: entry}`` and
``breakdown: {group: {key: {metric: entry}}}``, an entry being ``{value, n, successes, ci95}``.
Nothing here knows a harness: MiniWoB++ (``success_rate`` per task) and AutoWebBench
(``ssr_published`` / ``exact_match`` per action type) render the same way.

``compare(a, b)`` gives one row per metric present in both, overall and per breakdown key, with
``delta = b - a``: the paper's Delta-Generalization when a and b are one system in two settings,
or the gain of system b over system a on one setting.
"""

from __future__ import annotations

import datetime as _dt
import json
import re
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from collabui.errors import ConfigError, TraceError

__all__ = ["load_results", "RunClock", "write_markdown", "render_markdown", "plot_results", "compare",
           "render_compare", "write_compare", "text_table", "PRIMARY_METRICS"]

#: The metric plotted when none is named, first one present wins.
PRIMARY_METRICS = ("success_rate", "ssr_published", "exact_match")
_OVERALL = "overall"


def load_results(path: str | Path) -> dict[str, Any]:
    """Read a results JSON file (or the ``results.json`` of an eval run's folder) and check it is ours.

    Raises:
        TraceError: missing, not JSON, or not a ``collabui.eval`` results file.
    """
    file = Path(path).expanduser()
    if file.is_dir():  # an eval run's folder: its results.json
        if not (file / "results.json").is_file():
            raise TraceError(f"{file} is a folder without results.json; pass an eval run's folder or its results.json")
        file = file / "results.json"
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise TraceError(f"{file} does not exist; pass the results.json an eval run wrote") from None
    except ValueError:
        raise TraceError(f"{file} is not JSON; pass the results.json an eval run wrote") from None
    if not isinstance(data, dict) or data.get("schema") != "collabui.eval":
        raise TraceError(f"{file} is not a collabui eval results file (schema collabui.eval); "
                         "pass the results.json an eval run wrote")
    return data


class RunClock:
    """The clock of an evaluation folder: ``started`` (ISO time) and :meth:`seconds` so far.

    A run resumed in a folder an earlier invocation finished (a rerun, or one grown by more tasks,
    episodes or records) keeps that invocation's start and adds its own wall time to that
    invocation's ``seconds``, so its results never claim the few milliseconds a rerun over finished
    work takes. Time spent by an invocation that was killed is not counted: it wrote no results.
    An unreadable earlier results file counts as none: it is about to be rewritten.
    """

    def __init__(self, out_dir: str | Path) -> None:
        self._t0 = time.perf_counter()
        try:
            found = load_results(Path(out_dir).expanduser() / "results.json")
        except TraceError:
            found = {}
        started, seconds = found.get("started"), found.get("seconds")
        self.started: str = started if isinstance(started, str) else \
            _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        self._earlier = float(seconds) if isinstance(seconds, (int, float)) and seconds >= 0 else 0.0

    def seconds(self) -> float:
        """Wall seconds of the finished earlier invocations plus this one's so far."""
        return self._earlier + time.perf_counter() - self._t0


def _label(results: Mapping[str, Any]) -> str:
    system = results.get("system") or {}
    label = str(system.get("label") or system.get("model") or "system")
    # A server's address says nothing about the system and crowds legends: openai:m@URL -> openai:m
    return re.sub(r"@https?://\S+", "", label)


def _fmt(value: Any, digits: int = 3) -> str:
    return "-" if value is None else f"{float(value):.{digits}f}"


def _ci(entry: Mapping[str, Any]) -> str:
    lo, hi = entry.get("ci95") or (None, None)
    return "-" if lo is None else f"[{lo:.2f}, {hi:.2f}]"


def _metric_table(rows: Mapping[str, Mapping[str, Mapping[str, Any]]], first: str) -> list[str]:
    """Rows ``key -> {metric: entry}`` as one Markdown table (metrics as column groups)."""
    metrics = list(dict.fromkeys(m for metrics in rows.values() for m in metrics))
    head = [first] + [f"{m} | 95% CI | n" for m in metrics]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * (1 + 3 * len(metrics))]
    for key, entries in rows.items():
        cells = [str(key)]
        for m in metrics:
            e = entries.get(m)
            cells += [_fmt(e.get("value")), _ci(e), str(e.get("n", "-"))] if e else ["-", "-", "-"]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def render_markdown(results: Mapping[str, Any]) -> str:
    """The Markdown summary of one results dict."""
    system, data = results.get("system") or {}, results.get("data") or {}
    lines = [f"# {results.get('harness', 'eval')}: {_label(results)}", ""]
    lines += [f"- model: `{system.get('model')}`" + (f", adapters `{system['adapters']}`" if system.get("adapters") else ""),
              f"- team: {system.get('n_agents')} agents x {system.get('rounds')} rounds, topology {system.get('topology')}",
              f"- data: {json.dumps({k: v for k, v in data.items() if k != 'tasks'}, ensure_ascii=False)}",
              f"- started {results.get('started')}, {_fmt(results.get('seconds'), 1)} s"]
    if results.get("command"):
        lines.append(f"- command: `{results['command']}`")
    lines += ["", "## Overall", ""] + _metric_table({_OVERALL: results.get("overall") or {}}, "scope")
    for group, rows in (results.get("breakdown") or {}).items():
        lines += ["", f"## {group}", ""] + _metric_table(rows, group.removeprefix("per_"))
    counts = results.get("counts") or {}
    if counts:
        lines += ["", "## Counts", "", ", ".join(f"{k}: {v}" for k, v in counts.items())]
    return "\n".join(lines) + "\n"


def write_markdown(results: Mapping[str, Any], path: str | Path) -> Path:
    """Write :func:`render_markdown` of ``results`` to ``path``; return the path."""
    target = Path(path).expanduser()
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(render_markdown(results), encoding="utf-8")
    return target


def _primary(all_results: Sequence[Mapping[str, Any]]) -> str:
    for metric in PRIMARY_METRICS:
        if all(metric in (r.get("overall") or {}) for r in all_results):
            return metric
    found = [set(r.get("overall") or {}) for r in all_results]
    shared = sorted(set.intersection(*found)) if found else []
    if not shared:
        raise ConfigError("these results share no metric; plot results of the same harness")
    return shared[0]


def plot_results(all_results: Sequence[Mapping[str, Any]], path: str | Path, *, metric: str | None = None,
                 group: str | None = None) -> Path:
    """Grouped bars of ``metric`` per breakdown key (plus "overall"), one colour per system,
    with 95% CI error bars; write a PNG to ``path``.

    Args:
        all_results: one or more results dicts (e.g. single agent vs team).
        metric: the metric to plot; None: the first of PRIMARY_METRICS present in all.
        group: the breakdown group; None: the first group of the first results.

    Raises:
        ConfigError: no results, no shared metric, or matplotlib missing.
    """
    if not all_results:
        raise ConfigError("plot_results needs at least one results dict")
    from collabui._plotting import figure

    metric = metric or _primary(all_results)
    group = group or next(iter(all_results[0].get("breakdown") or {}), None)
    keys = list(dict.fromkeys(k for r in all_results for k in ((r.get("breakdown") or {}).get(group) or {})))
    keys.append(_OVERALL)
    width = 0.8 / len(all_results)
    target = Path(path).expanduser()
    size = (max(6.0, 0.5 * len(keys) * max(1, len(all_results)) + 2), 4.5)
    with figure(target, figsize=size, dpi=120) as (_, ax):
        for s, results in enumerate(all_results):
            values, low, high = _bars(results, group, keys, metric)
            xs = [k + (s - (len(all_results) - 1) / 2) * width for k in range(len(keys))]
            ax.bar(xs, values, width, yerr=[low, high], capsize=2, label=_label(results))
        ax.set_xticks(range(len(keys)), keys, rotation=60, ha="right", fontsize=8)
        ax.set_ylim(0, 1.05)
        ax.set_ylabel(f"{metric} (95% CI)")
        ax.set_title(f"{all_results[0].get('harness', 'eval')}: {metric} per {str(group).removeprefix('per_')}")
        ax.legend(fontsize=8)
    return target


def _bars(results: Mapping[str, Any], group: str | None, keys: Sequence[str], metric: str,
          ) -> tuple[list[float], list[float], list[float]]:
    """Bar heights and error-bar extents (below, above) of ``metric`` for ``keys``."""
    rows = {**((results.get("breakdown") or {}).get(group) or {}), _OVERALL: results.get("overall") or {}}
    values, low, high = [], [], []
    for key in keys:
        entry = (rows.get(key) or {}).get(metric) or {}
        value = entry.get("value")
        lo, hi = entry.get("ci95") or (value, value)
        values.append(value or 0.0)
        low.append(max(0.0, (value or 0.0) - (lo if lo is not None else 0.0)))
        high.append(max(0.0, (hi if hi is not None else 0.0) - (value or 0.0)))
    return values, low, high


def compare(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Rows ``{scope, key, metric, a, b, delta, a_n, b_n}`` for every metric present in both,
    overall first (scope ``overall``), then per breakdown group and key (in a's order, then
    b's). ``delta = b - a``; None when either value is None."""
    rows: list[dict[str, Any]] = []
    scopes = [(_OVERALL, _OVERALL, a.get("overall") or {}, b.get("overall") or {})]
    groups_a, groups_b = a.get("breakdown") or {}, b.get("breakdown") or {}
    for group in [g for g in groups_a if g in groups_b]:
        keys = list(dict.fromkeys([*groups_a[group], *groups_b[group]]))
        scopes += [(group, k, groups_a[group][k], groups_b[group][k]) for k in keys
                   if k in groups_a[group] and k in groups_b[group]]
    for scope, key, ea, eb in scopes:
        for metric in [m for m in ea if m in eb]:
            va, vb = ea[metric].get("value"), eb[metric].get("value")
            delta = None if va is None or vb is None else round(vb - va, 4)
            rows.append({"scope": scope, "key": key, "metric": metric, "a": va, "b": vb, "delta": delta,
                         "a_n": ea[metric].get("n"), "b_n": eb[metric].get("n")})
    return rows


def _signed(value: Any) -> str:
    return "-" if value is None else f"{float(value):+.3f}"


def render_compare(rows: Sequence[Mapping[str, Any]], a_label: str = "A", b_label: str = "B", *,
                   markdown: bool = False) -> str:
    """The compare rows as a plain-text table (or Markdown with ``markdown=True``)."""
    head = ["scope", "key", "metric", a_label, b_label, "B - A", "n A", "n B"]
    body = [[r["scope"], r["key"], r["metric"], _fmt(r["a"]), _fmt(r["b"]), _signed(r["delta"]),
             str(r["a_n"]), str(r["b_n"])] for r in rows]
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in body]) + "\n"
    return text_table(head, body)


def text_table(head: Sequence[str], body: Sequence[Sequence[Any]]) -> str:
    """Rows as a plain-text table, columns padded to their widest cell, two spaces apart."""
    widths = [max(len(str(x)) for x in col) for col in zip(head, *body, strict=False)]
    return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
                     for row in [head, *body]) + "\n"


def write_compare(rows: Sequence[Mapping[str, Any]], path: str | Path, *, a: Mapping[str, Any],
                  b: Mapping[str, Any], paired: Mapping[str, Any] | None = None) -> Path:
    """Write the comparison: JSON when ``path`` ends in ``.json``, else Markdown; ``paired``
    (``collabui.evaluation.paired``) is added when given."""
    target = Path(path).expanduser()
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.suffix.lower() == ".json":
        payload = {"schema": "collabui.eval.compare", "version": 1, "a": a.get("system"),
                   "b": b.get("system"), "rows": list(rows), "paired": paired}
        target.write_text(json.dumps(payload, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    else:
        from collabui.evaluation.paired import render_paired

        title = f"# Compare: B = {_label(b)} vs A = {_label(a)}\n\n"
        tail = "\n```\n" + render_paired(paired) + "```\n" if paired else ""
        target.write_text(title + render_compare(rows, "A", "B", markdown=True) + tail, encoding="utf-8")
    return target
