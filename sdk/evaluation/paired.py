"""Paired comparison of two runs on the same episodes: who solves what the other does not.

Two systems evaluated on the same seeds differ by far less noise than their two intervals
suggest: most episodes are solved by both or by neither, and only the discordant ones (solved by
one system alone) carry the difference. The exact McNemar test asks whether those split evenly:
its two-sided p-value is the binomial probability of a split at least as uneven as the one seen.

Episodes are matched by ``(task, seed)`` from each run folder's ``episodes.jsonl`` (an episode an
error ended counts as a failure, as in the results); episodes only one run has are left out and
counted. AutoWebBench folders pair the same way, record by record: each element record (by its
index, its "task" the language and target action type, ``en/click``) succeeds when the prediction
scores the published step success. Used by ``collabui eval compare A B`` when both results files
sit in run folders, pooled with more pairs of folders by ``--also A2 B2`` (the same two systems on
other eval seeds, or AutoWebBench's other language).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["mcnemar_exact", "paired_counts", "paired_from_folders", "render_paired", "plot_paired"]


def mcnemar_exact(only_a: int, only_b: int) -> float:
    """Two-sided exact McNemar p-value for ``only_a`` episodes solved by A alone and ``only_b``
    by B alone (1.0 when there is no discordant episode).

    Raises:
        ValueError: a negative count.
    """
    if only_a < 0 or only_b < 0:
        raise ValueError(f"counts must be >= 0, got {only_a} and {only_b}")
    n = only_a + only_b
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(min(only_a, only_b) + 1)) / 2**n
    return round(min(1.0, 2 * tail), 4)


def _outcomes(records: Sequence[Mapping[str, Any]]) -> dict[tuple[str, int], bool]:
    return {(str(r["task"]), int(r["seed"])): bool(r.get("success")) for r in records}


def _counts(pairs: Sequence[tuple[bool, bool]]) -> dict[str, Any]:
    only_a = sum(a and not b for a, b in pairs)
    only_b = sum(b and not a for a, b in pairs)
    return {"episodes": len(pairs), "a": sum(a for a, _ in pairs), "b": sum(b for _, b in pairs),
            "both": sum(a and b for a, b in pairs), "only_a": only_a, "only_b": only_b,
            "neither": sum(not a and not b for a, b in pairs), "p_value": mcnemar_exact(only_a, only_b)}


def paired_counts(a: Sequence[Mapping[str, Any]], b: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The paired counts of two runs' episode records (``task``, ``seed``, ``success``): overall
    and ``per_task``, each ``{episodes, a, b, both, only_a, only_b, neither, p_value}``, plus
    ``unmatched`` (episodes only one run has)."""
    ra, rb = _outcomes(a), _outcomes(b)
    keys = [k for k in ra if k in rb]
    tasks = list(dict.fromkeys(task for task, _ in keys))
    return {**_counts([(ra[k], rb[k]) for k in keys]),
            "per_task": {t: _counts([(ra[k], rb[k]) for k in keys if k[0] == t]) for t in tasks},
            "unmatched": len(ra) + len(rb) - 2 * len(keys)}


def paired_from_folders(a_results: str | Path | Sequence[str | Path],
                        b_results: str | Path | Sequence[str | Path]) -> dict[str, Any] | None:
    """:func:`paired_counts` of two run folders (or the results files in them); None when either has
    no ``episodes.jsonl`` beside it or they share no episode. Each side may be several folders (the
    same system on other eval seeds): their episodes are pooled, so the counts and the p-value are
    those of every paired episode at once.

    Raises:
        ConfigError: one side's folders hold the same episode twice (a folder given twice).
    """
    sides = [[a_results] if isinstance(a_results, (str, Path)) else list(a_results),
             [b_results] if isinstance(b_results, (str, Path)) else list(b_results)]
    records = [_pooled(folders, side) for folders, side in zip(sides, "AB", strict=True)]
    if any(r is None for r in records):
        return None
    found = paired_counts(*records)  # type: ignore[arg-type]
    if any(r.get("record") for r in records[0] or ()):  # AutoWebBench: "seed" is the record's index
        found["matched_by"] = "(action type, record)"
    return found if found["episodes"] else None


def _pooled(folders: Sequence[str | Path], side: str) -> list[Mapping[str, Any]] | None:
    """The episode records of ``folders`` (run folders or their results files), or None when one has
    no ``episodes.jsonl``."""
    from collabui.errors import ConfigError
    from collabui.evaluation.runner import read_manifest

    records: list[Mapping[str, Any]] = []
    seen: dict[tuple[str, int], Path] = {}
    for given in folders:
        folder = Path(given).expanduser()
        folder = folder if folder.is_dir() else folder.parent
        manifest = folder / "episodes.jsonl"
        if manifest.is_file():
            found = list(read_manifest(manifest).values())
        elif (folder / "predictions.jsonl").is_file():
            found = _record_outcomes(folder)
        else:
            return None
        for record in found:
            key = (str(record["task"]), int(record["seed"]))
            if key in seen:
                raise ConfigError(f"{side}'s runs {seen[key].parent} and {manifest.parent} both hold episode "
                                  f"{key[0]} seed {key[1]}: give each run once (pooled runs differ in eval seed)")
            seen[key] = manifest
            records.append(record)
    return records


def _record_outcomes(folder: Path) -> list[dict[str, Any]]:
    """An AutoWebBench folder's element records as episode records: ``task`` the language and the
    target's action type (``en/click``), ``seed`` the record's index, ``success`` the published step
    success; records without an element (``finish``, ``scroll_page``...) have no such score and are left out."""
    from collabui._jsonl import read_json
    from collabui.errors import ConfigError
    from collabui.evaluation.autowebbench import read_predictions

    results = folder / "results.json"
    # The project's reader: a cut-short results.json is one error line naming the file, not a traceback.
    data = read_json(results, error=ConfigError, fix="run its evaluation again to rewrite it") if results.is_file() else {}
    language = data.get("data", {}).get("language")
    return [{"task": f"{language or 'awb'}/{row.get('kind')}", "seed": index, "success": bool(row["ssr_published"]),
             "record": True}
            for index, row in read_predictions(folder).items() if row.get("ssr_published") is not None]


def render_paired(found: Mapping[str, Any]) -> str:
    """The paired counts as a plain-text table, overall last."""
    head = ["task", "episodes", "A", "B", "both", "only A", "only B", "neither", "McNemar p"]
    from collabui.evaluation.report import text_table

    rows = [[task, *_cells(c)] for task, c in found["per_task"].items()] + [["all", *_cells(found)]]
    note = f"({found['unmatched']} episodes only one run has were left out)\n" if found["unmatched"] else ""
    return f"Paired, same {found.get('matched_by', '(task, seed)')}:\n" + text_table(head, rows) + note


def _cells(c: Mapping[str, Any]) -> list[str]:
    return [str(c[k]) for k in ("episodes", "a", "b", "both", "only_a", "only_b", "neither")] + [f"{c['p_value']:.4f}"]


def plot_paired(found: Mapping[str, Any], path: str | Path, *, a_label: str = "A", b_label: str = "B") -> Path:
    """Per task (and all), the discordant episodes as bars either side of zero: solved by A alone to
    the left, by B alone to the right, each row labelled with its agreeing episodes and McNemar p;
    write a PNG to ``path``. What a paired comparison rests on, seen at once.

    Raises:
        ConfigError: matplotlib is not installed.
    """
    from collabui._plotting import figure

    target = Path(path).expanduser()
    with figure(target, figsize=(8.0, 1.8 + 0.42 * (len(found["per_task"]) + 1)), dpi=120) as (fig, ax):
        _draw_paired(fig, ax, found, a_label, b_label)
    return target


def _draw_paired(fig: Any, ax: Any, found: Mapping[str, Any], a_label: str, b_label: str) -> Any:
    """:func:`plot_paired`'s drawing on ``ax``; returns the legend (its place is tested)."""
    from matplotlib.transforms import offset_copy

    rows = [*found["per_task"].items(), ("all", found)]
    ys = list(range(len(rows)))[::-1]  # the first task on top, "all" last
    ax.barh(ys, [-c["only_a"] for _, c in rows], color="tab:orange", label=f"only A: {a_label}")
    ax.barh(ys, [c["only_b"] for _, c in rows], color="tab:blue", label=f"only B: {b_label}")
    widest = max([1, *(max(c["only_a"], c["only_b"]) for _, c in rows)])
    for y, (_, c) in zip(ys, rows, strict=True):
        ax.text(widest * 1.05, y, f"both {c['both']}, neither {c['neither']} of {c['episodes']}; "
                f"p = {c['p_value']:.3g}", va="center", fontsize=7)
    ax.axvline(0, color="black", linewidth=0.8)
    ax.set_yticks(ys, [task for task, _ in rows], fontsize=8)
    ax.set_xlim(-widest * 1.1, widest * 2.6)  # room on the right for the labels
    ax.xaxis.set_major_formatter(lambda x, _: f"{abs(x):g}")  # counts both ways, none negative
    ax.set_xlabel("episodes solved by one system alone (A to the left, B to the right)")
    ax.set_title(f"paired: {found['episodes']} episodes, only A {found['only_a']}, only B {found['only_b']} "
                 f"(exact McNemar p = {found['p_value']:.3g})", fontsize=9)
    # Below the x label (inside the axes it would cover a row's bars or its label): a fixed
    # distance in points under the axes, whatever their height, so no row count moves it onto the label.
    below = offset_copy(ax.transAxes, fig=fig, y=-34, units="points")
    return ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, 0.0), bbox_transform=below)
