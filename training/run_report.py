"""One report for a whole training run: stage-1 SFT and DPO, MARL iterations and every evaluation.

``collect_training_report(run_dir)`` reads what the training commands already leave behind, so
it works on any folder tree (the CPU recipe's, a hand-run ``train sft`` + ``train marl``...):

* every ``eval.jsonl`` manifest (standalone evaluations and MARL's ``before/`` / ``iter{k}/``):
  success counts with 95% Wilson intervals, overall and per task, in the order they were
  finished (file modification time), which is the order of the stages;
* every ``sft_metrics.json`` (SFT loss curve, steps, rows dropped as over-long);
* every ``dpo_report.json`` (per agent: pairs, rows dropped, steps, loss, reward margins);
* every ``marl_report.json`` (per iteration: training success, labels, pairs per agent, seconds).

``write_training_report`` renders it as ``training_report.json``, ``training_report.md`` and
``training_report.png`` (success per evaluation with intervals, loss curves, reward margins).
Labels are paths relative to ``run_dir``, e.g. ``stage1/sft`` or ``marl/iter0``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from collabui.errors import ConfigError
from collabui.evaluation.stats import wilson_interval
from collabui.training.rollout import read_manifest, summarize

__all__ = ["collect_training_report", "write_training_report", "render_markdown", "plot_training_report"]


def _label(path: Path, root: Path) -> str:
    rel = path.parent.relative_to(root).as_posix()
    return rel if rel != "." else "(run)"


def _evaluation(path: Path, root: Path) -> dict[str, Any] | None:
    records = list(read_manifest(path).values())
    if not records:
        return None
    summary = summarize(records)
    summary["ci95"] = list(wilson_interval(summary["successes"], summary["episodes"]))
    for entry in summary["per_task"].values():
        entry["ci95"] = list(wilson_interval(entry["successes"], entry["episodes"]))
    seconds = sum(float(r.get("seconds") or 0.0) for r in records)
    return {"label": _label(path, root), "path": str(path), "seconds": round(seconds, 1), **summary}


def _last(points: list[Any]) -> float | None:
    return float(points[-1][1]) if points else None


def _dpo(path: Path, root: Path) -> dict[str, Any]:
    data = json.loads(path.read_text(encoding="utf-8"))
    agents = [{
        "agent": a.get("agent"), "status": a.get("status"), "n_pairs": a.get("n_pairs", 0),
        "n_used": a.get("n_used", 0), "n_dropped": a.get("n_dropped", 0), "steps": a.get("steps", 0),
        "seconds": a.get("seconds", 0.0), "final_loss": a.get("final_loss"),
        "final_margin": _last(a.get("margins") or []), "final_accuracy": _last(a.get("accuracies") or []),
        "loss": a.get("loss") or [], "margins": a.get("margins") or [],
    } for a in data.get("agents", [])]
    return {"label": _label(path, root), "path": str(path), "seconds": data.get("seconds", 0.0), "agents": agents}


def _sft(path: Path, root: Path) -> dict[str, Any]:
    data = json.loads(path.read_text(encoding="utf-8"))
    keys = ("status", "n_rows", "n_used", "n_dropped", "steps", "seconds", "final_loss", "merged_path")
    return {"label": _label(path, root), "path": str(path), **{k: data.get(k) for k in keys},
            "loss": data.get("loss") or []}


def _marl(path: Path, root: Path) -> dict[str, Any]:
    data = json.loads(path.read_text(encoding="utf-8"))
    iterations = []
    for it in data.get("iterations", []):
        labels = it.get("labels", {})
        iterations.append({
            "iteration": it.get("iteration"), "train_success_rate": it.get("train", {}).get("success_rate"),
            "eval_success_rate": it.get("eval", {}).get("success_rate"),
            "entries": labels.get("entries"), "rewarded": labels.get("rewarded"),
            "abstained": labels.get("abstained"), "pairs": it.get("pairs", {}).get("per_agent", {}),
            "edges": it.get("topology", {}).get("edges"), "seconds": it.get("seconds", {}),
        })
    return {"label": _label(path, root), "path": str(path), "complete": data.get("complete"),
            "config": data.get("config", {}), "iterations": iterations,
            "seconds": data.get("seconds", {}).get("total")}


def _by_mtime(paths: list[Path]) -> list[Path]:
    return sorted(paths, key=lambda p: (p.stat().st_mtime, str(p)))


def collect_training_report(run_dir: str | Path) -> dict[str, Any]:
    """Gather every evaluation, SFT, DPO and MARL result under ``run_dir`` (see module doc).

    Raises:
        ConfigError: ``run_dir`` does not exist or holds none of those files.
    """
    root = Path(run_dir).expanduser()
    if not root.is_dir():
        raise ConfigError(f"{root} is not a folder; give the run folder of a training command (its --out)")
    evaluations = [e for p in _by_mtime(list(root.rglob("eval.jsonl"))) if (e := _evaluation(p, root))]
    report = {
        "run_dir": str(root),
        "evaluations": evaluations,
        "sft": [_sft(p, root) for p in _by_mtime(list(root.rglob("sft_metrics.json")))],
        "dpo": [_dpo(p, root) for p in _by_mtime(list(root.rglob("dpo_report.json")))],
        "marl": [_marl(p, root) for p in _by_mtime(list(root.rglob("marl_report.json")))],
    }
    if not any(report[k] for k in ("evaluations", "sft", "dpo", "marl")):
        raise ConfigError(f"{root} holds no evaluation, SFT, DPO or MARL results; point at the --out "
                          "folder of collabui train sft|dpo|marl or of the recipe")
    return report


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def _fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def render_markdown(report: dict[str, Any]) -> str:
    """The report as Markdown tables (what ``collabui train report`` prints)."""
    lines = [f"# Training report: {report['run_dir']}", ""]
    if report["evaluations"]:
        tasks = list(dict.fromkeys(t for e in report["evaluations"] for t in e["per_task"]))
        lines += ["## Success rate per evaluation (95% Wilson interval)", "",
                  "| evaluation | success | 95% CI | " + " | ".join(tasks) + " |",
                  "|---|---|---|" + "---|" * len(tasks)]
        for e in report["evaluations"]:
            cells = [f"{e['per_task'][t]['successes']}/{e['per_task'][t]['episodes']}" if t in e["per_task"]
                     else "-" for t in tasks]
            lo, hi = e["ci95"]
            lines.append(f"| {e['label']} | {e['successes']}/{e['episodes']} ({_pct(e['success_rate'])}) | "
                         f"{_pct(lo)}-{_pct(hi)} | " + " | ".join(cells) + " |")
        lines.append("")
    if report["sft"]:
        lines += ["## SFT", "", "| run | rows used | dropped (too long) | steps | final loss | seconds |",
                  "|---|---|---|---|---|---|"]
        lines += [f"| {s['label']} | {s['n_used']} | {s['n_dropped']} | {s['steps']} | {_fmt(s['final_loss'])} | "
                  f"{_fmt(s['seconds'], 0)} |" for s in report["sft"]]
        lines.append("")
    if report["dpo"]:
        lines += ["## DPO per agent", "",
                  "| run | agent | status | pairs | dropped | steps | final loss | final margin | seconds |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for d in report["dpo"]:
            lines += [f"| {d['label']} | {a['agent']} | {a['status']} | {a['n_pairs']} | {a['n_dropped']} | "
                      f"{a['steps']} | {_fmt(a['final_loss'])} | {_fmt(a['final_margin'])} | {_fmt(a['seconds'], 0)} |"
                      for a in d["agents"]]
        lines.append("")
    for m in report["marl"]:
        lines += [f"## MARL: {m['label']}", "",
                  "| iteration | train success | held-out success | rewarded / scored entries | pairs per agent | DAG edges |",
                  "|---|---|---|---|---|---|"]
        for it in m["iterations"]:
            pairs = ", ".join(f"{k}:{v}" for k, v in sorted(it["pairs"].items()))
            lines.append(f"| {it['iteration']} | {_pct(it['train_success_rate'])} | {_pct(it['eval_success_rate'])} | "
                         f"{it['rewarded'] if it['rewarded'] is not None else '-'} / "
                         f"{it['entries'] if it['entries'] is not None else '-'} | {pairs or '-'} | {it['edges']} |")
        lines.append("")
    return "\n".join(lines)


def plot_training_report(report: dict[str, Any], path_png: str | Path) -> Path:
    """Success per evaluation (with intervals), every loss curve, every reward-margin curve."""
    from collabui._plotting import figure, tidy

    path = Path(path_png)
    with figure(path, 3, figsize=(15, 4.2)) as (_, (ax_ok, ax_loss, ax_margin)):
        evals = report["evaluations"]
        if evals:
            xs = list(range(len(evals)))
            rates = [e["success_rate"] or 0.0 for e in evals]
            err = [[r - e["ci95"][0] for r, e in zip(rates, evals, strict=True)],
                   [e["ci95"][1] - r for r, e in zip(rates, evals, strict=True)]]
            ax_ok.bar(xs, rates, yerr=err, capsize=4, color="#4c72b0")
            ax_ok.set_xticks(xs, [e["label"] for e in evals], rotation=30, ha="right", fontsize="small")
        ax_ok.set_ylim(0, 1.05)
        ax_ok.set_title("success rate per evaluation (95% CI)")
        for s in report["sft"]:
            if s["loss"]:
                ax_loss.plot(*zip(*s["loss"], strict=True), label=f"SFT {s['label']}")
        for d in report["dpo"]:
            for a in d["agents"]:
                name = f"DPO {d['label']} a{a['agent']}"
                if a["loss"]:
                    ax_loss.plot(*zip(*a["loss"], strict=True), linestyle="--", marker=".", label=name)
                if a["margins"]:
                    ax_margin.plot(*zip(*a["margins"], strict=True), marker=".", label=name)
        ax_loss.set_title("training loss per step")
        ax_margin.set_title("DPO reward margin (chosen - rejected)")
        tidy((ax_loss, ax_margin), xlabel="step", legend_size="x-small")
    return path


def write_training_report(run_dir: str | Path, out_dir: str | Path | None = None, *,
                          plot: bool = True) -> dict[str, Path]:
    """Collect the report and write ``training_report.{json,md,png}`` into ``out_dir`` (default
    ``run_dir``); return the written paths by kind."""
    report = collect_training_report(run_dir)
    out = Path(out_dir or run_dir).expanduser()
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "training_report.json", "md": out / "training_report.md"}
    paths["json"].write_text(json.dumps(report, indent=1), encoding="utf-8")
    paths["md"].write_text(render_markdown(report), encoding="utf-8")
    if plot:
        paths["png"] = plot_training_report(report, out / "training_report.png")
    return paths
