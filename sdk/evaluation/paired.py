"""Paired comparison of two MiniWoB++ runs on the same episodes: who solves what the other does not.

Two systems evaluated on the same seeds differ by far less noise than their two intervals
suggest: most episodes are solved by both or by neither, and only the discordant ones (solved by
one system alone) carry the difference. The exact McNemar test asks whether those split evenly:
its two-sided p-value is the binomial probability of a split at least as uneven as the one seen.

Episodes are matched by ``(task, seed)`` from each run folder's ``episodes.jsonl`` (an episode an
error ended counts as a failure, as in the results); episodes only one run has are left out and
counted. Used by ``collabui eval compare A B`` when both results files sit in run folders.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["mcnemar_exact", "paired_counts", "paired_from_folders", "render_paired"]


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


def paired_from_folders(a_results: str | Path, b_results: str | Path) -> dict[str, Any] | None:
    """:func:`paired_counts` of two run folders (or the results files in them); None when either has
    no ``episodes.jsonl`` beside it or they share no episode."""
    from collabui.evaluation.runner import read_manifest

    folders = [Path(p).expanduser() for p in (a_results, b_results)]
    manifests = [(f if f.is_dir() else f.parent) / "episodes.jsonl" for f in folders]
    if not all(m.is_file() for m in manifests):
        return None
    found = paired_counts(*(list(read_manifest(m).values()) for m in manifests))
    return found if found["episodes"] else None


def render_paired(found: Mapping[str, Any]) -> str:
    """The paired counts as a plain-text table, overall last."""
    head = ["task", "episodes", "A", "B", "both", "only A", "only B", "neither", "McNemar p"]
    from collabui.evaluation.report import text_table

    rows = [[task, *_cells(c)] for task, c in found["per_task"].items()] + [["all", *_cells(found)]]
    note = f"({found['unmatched']} episodes only one run has were left out)\n" if found["unmatched"] else ""
    return "Paired, same (task, seed):\n" + text_table(head, rows) + note


def _cells(c: Mapping[str, Any]) -> list[str]:
    return [str(c[k]) for k in ("episodes", "a", "b", "both", "only_a", "only_b", "neither")] + [f"{c['p_value']:.4f}"]
