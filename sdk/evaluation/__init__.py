"""Evaluation harnesses: MiniWoB++ success rates and AutoWebBench step success, with baselines and reports.

Names load on first use (like ``collabui.training``), so importing this package stays cheap and
a harness module that fails to import does not break the others.
"""

from __future__ import annotations

import importlib
from typing import Any

from collabui.evaluation.stats import rate_entry, wilson_interval

_EXPORTS = {
    "EpisodeSpec": "runner", "EnvPool": "runner", "derive_seed": "runner", "episode_specs": "runner",
    "read_manifest": "runner", "run_episodes": "runner", "arun_episodes": "runner", "summarize": "runner",
    "EASY_TASKS": "miniwob", "SUITES": "miniwob", "MiniWoBEvalConfig": "miniwob",
    "resolve_tasks": "miniwob", "evaluate_miniwob": "miniwob", "default_team": "miniwob",
    "load_run_config": "miniwob_folder",
    "load_results": "report", "write_markdown": "report", "render_markdown": "report",
    "plot_results": "report", "compare": "report", "render_compare": "report", "write_compare": "report",
    "mcnemar_exact": "paired", "paired_counts": "paired", "paired_from_folders": "paired",
}

__all__ = ["rate_entry", "wilson_interval", *_EXPORTS]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'collabui.evaluation' has no attribute {name!r}")
    return getattr(importlib.import_module(f"collabui.evaluation.{module}"), name)
