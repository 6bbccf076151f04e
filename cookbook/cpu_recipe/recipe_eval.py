"""Stages 3-5 of the CPU recipe (``recipe.py``): the held-out rows, validation on the training
tasks, the verified critic's check, and the README table of results.json."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from recipe_marl import ABLATIONS
from recipe_sft import on_training_tasks

from collabui.config import TeamConfig
from collabui.errors import ConfigError
from collabui.evaluation.miniwob import MiniWoBEvalConfig

if TYPE_CHECKING:
    from recipe_config import RecipeConfig


def critic_check(config: RecipeConfig, out: Path) -> dict[str, Any]:
    """The verified critic's coverage and its agreement with the rule oracle, on random-policy
    rollouts (2 agents: right and wrong entries) of the oracle's tasks, all training tasks."""
    from collabui.evaluation.miniwob import evaluate_miniwob
    from collabui.training.critic import make_critic
    from collabui.training.critic_check import compare_critics
    from collabui.training.oracles import ORACLE_TASKS

    rollouts = MiniWoBEvalConfig(tasks=",".join(ORACLE_TASKS), episodes=config.critic_episodes, model="random",
                                 concurrency=2, team=TeamConfig(n_agents=2, rounds=1, max_steps=3,
                                                                seed=config.evaluation.team.seed + 1))
    evaluate_miniwob(rollouts, out / "rollouts", command="recipe.py critic check")
    verified = make_critic("verified")
    try:
        return compare_critics(out / "rollouts" / "traces", verified, make_critic("oracle"), out).to_dict()
    finally:
        verified.close()


def systems(config: RecipeConfig, trained: Path, marl: Path | None = None, *,
            marl_team: bool = True) -> dict[str, dict[str, Any]]:
    """The evaluated systems: eval config fields per row of results.json (``team``: the
    TeamConfig fields of the row; the baselines' default to a single agent). With
    ``--marl-iterations`` the trained team rows are the MARL teams in ``marl/<row>/bundle``
    (each in the DAG it was trained in: the bundle's own); ``marl_team=False`` (``--marl-gate``
    kept the SFT team): the SFT team's, the ablation rows still theirs."""
    rows: dict[str, dict[str, Any]] = {
        "random": {"model": "random", "episodes": config.baseline_episodes},
        "lexical": {"model": "lexical", "episodes": config.baseline_episodes},
        # 128 tokens: a grounded answer copies the target's line (long email or link texts) before the action.
        "trained_single": {"model": f"trained:{trained}", "team": {"n_agents": 1, "rounds": 1, "max_new_tokens": 128}},
        "base_single": {"model": "smollm2", "team": {"n_agents": 1, "rounds": 1, "prompt_style": "react"}},
    }
    # Pages in their own order and ids: a position or id habit would show as a gap to the row above.
    rows["trained_single_unshuffled"] = {**rows["trained_single"], "shuffle_elements": False}
    if config.teams:
        rows["base_team"] = {"model": "smollm2", "team": {"n_agents": 4, "rounds": 3, "prompt_style": "react"}}
        team = {"n_agents": 4, "rounds": 3, "max_new_tokens": 128}
        marl = marl if marl is not None else trained.parent / "marl"
        team_model = marl / "trained_team" / "bundle" if config.marl_iterations and marl_team else trained
        # The headline row: as many episodes as the baselines it is compared with (200 by default).
        rows["trained_team"] = {"model": f"trained:{team_model}", "team": team, "episodes": config.baseline_episodes}
        # Same team, pages in their own order and ids: a position habit would show as a gap.
        rows["trained_team_unshuffled"] = {"model": f"trained:{team_model}", "team": team, "shuffle_elements": False}
        # The same model as 12 independent draws (each agent but agent 0 reading the page in an order
        # of its own, nothing shown), and the lexical policy picking among them where it can: the
        # team that beat its single agent on the validation pages (section v33 of EXPERIMENTS.md).
        rows["trained_team_arbiter"] = {"model": f"trained:{team_model}", "episodes": config.baseline_episodes,
                                        "team": {**team, "topology": "independent", "memory": False,
                                                 "varied_order": True, "arbiter": "lexical"}}
        for name in ABLATIONS if config.ablations else ():
            rows[name] = {"model": f"trained:{marl / name / 'bundle'}", "team": team}
    return rows


#: The rows no training changes: the same held-out episodes give the same system in every run, so
#: ``--baselines-from RUN`` takes them from another run's ``eval/`` instead of running them again.
BASELINE_ROWS = ("random", "lexical", "base_single", "base_team")
#: In a row's folder that ``--baselines-from`` copied: where it came from.
CARRIED = "carried_from.txt"


def carry_baselines(config: RecipeConfig, rows: dict[str, dict[str, Any]], names: Iterable[str], run: Path,
                    out: Path, *, copy: bool = True) -> dict[str, str]:
    """``--baselines-from RUN``: each baseline row of ``names`` (:data:`BASELINE_ROWS`) that
    ``out`` (this run's ``eval/``) has not started, copied from ``RUN/eval/<row>`` after checking
    that its episodes were run at this row's settings (the fingerprint a resume checks: model,
    team, seed, page format, shuffling, max steps), so the row resumes there: nothing runs again
    but episodes this run asks for and RUN lacks. ``copy=False`` only checks (before training).
    Returns ``{row: where it came from}`` for results.json.

    Raises:
        ConfigError: RUN has not finished such a row, or ran it at other settings.
    """
    from collabui.evaluation.miniwob_folder import fingerprint_changes

    carried = {}
    for name in (n for n in names if n in BASELINE_ROWS):
        source, target = run / "eval" / name, out / name
        if (target / "run.json").exists():  # started here already: it resumes as any row does
            if (target / CARRIED).is_file():
                carried[name] = (target / CARRIED).read_text().strip()
            continue
        if not (source / "results.json").is_file():
            raise ConfigError(f"--baselines-from {run} has no finished {name} row ({source}/results.json); "
                              f"name a run that evaluated it, or drop --baselines-from to run it here")
        changed = fingerprint_changes(source, eval_config(config, rows[name]))
        if changed:
            raise ConfigError(f"--baselines-from {run}: its {name} row was run with other {', '.join(changed)} "
                              "than this run's; give both runs the same evaluation flags, or drop --baselines-from")
        carried[name] = f"{source} (--baselines-from)"
        if copy:
            shutil.copytree(source, target)
            (target / CARRIED).write_text(carried[name] + "\n")  # a resumed run still says where it came from
    return carried


def evaluate(config: RecipeConfig, folder: str, fields: dict[str, Any], out: Path) -> dict[str, Any]:
    """One row's held-out evaluation into ``out / folder`` (the row's name; a grown MARL team's
    with its ``-xN``), resumable there."""
    from collabui.evaluation.miniwob import evaluate_miniwob

    return evaluate_miniwob(eval_config(config, fields), out / folder, command=f"recipe.py system {folder}")


def eval_config(config: RecipeConfig, fields: dict[str, Any]) -> MiniWoBEvalConfig:
    """The held-out evaluation of one row: ``config.evaluation`` (shuffled pages unless the row
    says otherwise) with the row's model, episodes and team shape, in the row model's format."""
    from collabui.evaluation.miniwob import default_team

    fields = dict(fields)
    base = config.evaluation
    shape = fields.pop("team", {})
    # Only a team without an arbiter can stop once its vote is decided (the arbiter reads every entry).
    decided = base.team.stop_when_decided and shape.get("n_agents", 1) > 1 and not shape.get("arbiter")
    team_options = {"stop_when_decided": True} if decided else {}
    if base.team.skip_stale and shape.get("n_agents", 1) > 1:
        team_options["skip_stale"] = True
    if shape.get("n_agents", 1) > 1:
        team_options["tie_break"] = base.team.tie_break
    team = default_team(fields["model"], seed=base.team.seed, max_steps=base.team.max_steps, **team_options, **shape)
    row = dataclasses.replace(base, serve=False, serve_dtype="auto", serve_agents="lora", serve_backend="vllm",
                              element_format=_format(config, fields["model"]), team=team, **fields)
    if base.serve and not row.is_baseline:  # a server batches more episodes at once; baselines load no model
        row = dataclasses.replace(row, serve=True, serve_dtype=base.serve_dtype, serve_agents=base.serve_agents,
                                  serve_backend=base.serve_backend, concurrency=4)
    return row


#: The training pages of several steps before Submit (``--validate-forms``): two forms with fields
#: to fill, where updates too strong for the team type one text into field after field (as they do
#: on the held-out login forms), and a list of boxes to tick, where they submit before choosing
#: (v62t's team passed the two forms and clicked Submit first on every held-out click-option
#: page). An episode's seed depends on its task and number, so the forms' episodes are the ones
#: measured before the list was added.
FORM_TASKS = ("login-user-popup", "multi-layouts", "click-checkboxes")


def validate(config: RecipeConfig, trained: Path, out: Path, *, team: bool = False,
             forms: bool = False) -> dict[str, Any]:
    """The trained model (``team``: as the 4 x 3 team of the held-out team rows) on new seeds
    (team seed 100; demonstrations use 1000 on) of the training tasks: the figure to choose
    formats and hyperparameters by. ``forms``: the team on ``--validate-forms`` seeds (team seed
    200) of :data:`FORM_TASKS` alone, whose results count typing loops. On the vLLM server with
    ``--serve``, as the held-out rows."""
    from collabui.evaluation.miniwob import evaluate_miniwob

    command = "recipe.py --validate-forms" if forms else "recipe.py --validate"
    return evaluate_miniwob(validation_config(config, trained, team=team, forms=forms), out, command=command)


def validation_config(config: RecipeConfig, trained: Path, *, team: bool = False,
                      forms: bool = False) -> MiniWoBEvalConfig:
    """The evaluation :func:`validate` runs."""
    if forms:
        rollouts = on_training_tasks(config, trained, seed=200, episodes=config.validate_forms, team=True,
                                     tasks=FORM_TASKS)
    else:
        rollouts = on_training_tasks(config, trained, seed=100, episodes=config.validate, team=team)
    if not config.evaluation.serve:
        return rollouts
    return dataclasses.replace(rollouts, serve=True, serve_dtype=config.evaluation.serve_dtype,
                               serve_agents=config.evaluation.serve_agents,
                               serve_backend=config.evaluation.serve_backend, concurrency=4)


def _format(config: RecipeConfig, model: str) -> str:
    """Trained models read pages in the format they learned; the others in html (baselines do
    not care; the base model's ReAct prompt shows html)."""
    return config.element_format if model.startswith("trained:") else "html"


def row(results: dict[str, Any], folder: Path | None = None) -> dict[str, Any]:
    """A results.json row of one evaluation; with its run ``folder``, also each episode's outcome
    (:func:`outcomes`), so the row can be paired with another after the run folder is gone."""
    rate = results["overall"]["success_rate"]
    tokens = results.get("counts", {}).get("prompt_tokens_per_answer")  # none for the baselines
    loops = results["overall"].get("typing_loop_rate")  # none in results written before it was counted
    kept = outcomes(folder) if folder is not None else {}
    return {"successes": rate["successes"], "episodes": rate["n"], "rate": rate["value"],
            "ci95": rate["ci95"], **({"prompt_tokens": tokens} if tokens is not None else {}),
            **({"typing_loops": loops["successes"]} if loops is not None else {}),
            "per_task": {t: v["success_rate"]["value"] for t, v in results["breakdown"]["per_task"].items()},
            **({"outcomes": kept} if kept else {})}


def outcomes(folder: Path) -> dict[str, dict[str, Any]]:
    """Each episode's outcome in an evaluation folder, compactly: ``{task: {"seeds": [...],
    "solved": "0110..."}}`` (one character per seed, ``1`` solved; an episode an error ended is
    ``0``, as in the results). Empty when the folder has no ``episodes.jsonl``."""
    from collabui.evaluation.runner import read_manifest

    by_task: dict[str, list[tuple[int, bool]]] = {}
    for record in read_manifest(folder / "episodes.jsonl").values():
        by_task.setdefault(str(record["task"]), []).append((int(record["seed"]), bool(record.get("success"))))
    ordered = {task: sorted(done) for task, done in by_task.items()}
    return {task: {"seeds": [seed for seed, _ in done], "solved": "".join("01"[ok] for _, ok in done)}
            for task, done in ordered.items()}


def episode_records(row: dict[str, Any]) -> list[dict[str, Any]]:
    """A row's :func:`outcomes` as episode records (``task``, ``seed``, ``success``), the form
    ``collabui.evaluation.paired.paired_counts`` pairs (none when the row keeps no outcomes)."""
    return [{"task": task, "seed": seed, "success": solved == "1"}
            for task, kept in row.get("outcomes", {}).items()
            for seed, solved in zip(kept["seeds"], kept["solved"], strict=True)]


def paired_rows(results: dict[str, Any], a: str, b: str) -> dict[str, Any]:
    """``--paired A,B``: the exact McNemar counts of two rows of ``results`` on the episodes both
    played (``collabui.evaluation.paired.paired_counts``), from their kept outcomes.

    Raises:
        ConfigError: a name that is no row, a row without outcomes, or rows that share no episode.
    """
    from collabui.evaluation.paired import paired_counts

    rows = results.get("systems", {})
    for name in (a, b):
        if name not in rows:
            raise ConfigError(f"--paired: no row {name!r}; choose from {sorted(rows)}")
        if not rows[name].get("outcomes"):
            raise ConfigError(f"--paired: {name}: this row keeps no per-episode outcomes (published before rows "
                              "kept them); pair its run folders with `collabui eval compare A B` instead")
    found = paired_counts(episode_records(rows[a]), episode_records(rows[b]))
    if not found["episodes"]:
        raise ConfigError(f"--paired: {a} and {b} share no episode (another eval seed or task list?)")
    return found


def table(results: dict[str, Any]) -> str:
    """The README table of a results.json (with the rows' prompt tokens per agent answer when
    any row has them: the baselines read no tokens)."""
    rows = results["systems"]
    tokens = any("prompt_tokens" in row for row in rows.values())
    lines = ["| system | success (held-out; pages shuffled unless the row says unshuffled) | 95% CI | episodes |"
             + (" prompt tokens an answer |" if tokens else ""),
             "|---|---|---|---|" + ("---|" if tokens else "")]
    for name, row in rows.items():
        low, high = row["ci95"]
        lines.append(f"| {name} | {row['successes']}/{row['episodes']} = {100 * row['rate']:.1f}% | "
                     f"{100 * low:.1f}-{100 * high:.1f}% | {row['episodes']} |"
                     + (f" {row.get('prompt_tokens', '')} |" if tokens else ""))
    return "\n".join(lines)


def team_figures(folder: Path) -> dict[str, Any]:
    """How a team row reached its actions (``collabui eval team``): vote margins, kept answers."""
    from collabui.evaluation.team_dynamics import read_team_traces, team_dynamics

    found = team_dynamics(read_team_traces(folder))
    return {"steps": found.steps, **found.overall}



#: The shipped name of the MARL team row beside its ablations (``--publish-ablations``).
MARL_ROW = "trained_team_marl"

#: What ``--publish-row`` keeps of a run beside its trained team row (under ``runs.<row>``).
_RUN_FACTS = ("start", "marl", "minutes", "eval_minutes", "validation", "validation_team", "validation_forms_team",
              "marl_gate")


def check_row_name(name: str, taken: Iterable[str] = ()) -> None:
    """``--publish-row``'s NAME: a new row, not one the recipe writes itself.

    Raises:
        ConfigError: a name of the recipe's own rows, or not of lowercase letters, digits, ``_.-``.
    """
    _check_form("--publish-row", name, "e.g. trained_team_marl_anchor")
    if name in set(taken):
        raise ConfigError(f"--publish-row {name!r} is a row the recipe writes itself (--publish); name the "
                          "experiment, e.g. trained_team_marl_anchor")


def _check_form(flag: str, name: str, example: str) -> None:
    """A name that goes into results.json's row names: lowercase letters, digits, ``_.-``."""
    if not re.fullmatch(r"[a-z0-9][a-z0-9_.-]*", name):
        raise ConfigError(f"{flag} {name!r}: use lowercase letters, digits and _.- ({example})")


def publish_row(results: dict[str, Any], name: str, command: str, target: Path) -> None:
    """Add the run's ``trained_team`` row to the shipped ``target`` results as ``name`` (``from``:
    ``command``), and the run's MARL, validation and time figures as ``runs[name]``; every other
    row of ``target`` stays.

    Raises:
        ConfigError: the run has no trained_team row yet, or ``target`` is missing.
    """
    if "trained_team" not in results.get("systems", {}):
        raise ConfigError("--publish-row: this run has no trained_team row; evaluate it with --team "
                          "--systems trained_team")
    publish_rows(results, {name: "trained_team"}, command, target)


def publish_ablations(results: dict[str, Any], command: str, target: Path) -> list[str]:
    """``--publish-ablations``: the run's MARL team row as ``trained_team_marl`` and each of its
    ablation rows under its own name into the shipped ``target`` results, replacing the rows an
    earlier start made, so the table's MARL rows all branch from one SFT model. A run without
    its own MARL team row (an ablation rebuilt alone) publishes its ablation rows only when the
    shipped ``trained_team_marl`` was made by the same command. Returns the rows written.

    Raises:
        ConfigError: the run has no ablation row yet, ``target`` is missing, or the run has no
            trained_team row and the shipped MARL row came from another command.
    """
    have = results.get("systems", {})
    ablations = [name for name in ABLATIONS if name in have]
    if not ablations:
        raise ConfigError("--publish-ablations: this run has no ablation row yet; evaluate one with --systems "
                          "trained_team,ablation_no_cr (or another ablation)")
    if "trained_team" not in have:
        check_marl_row(target, command)
    rows = {**({MARL_ROW: "trained_team"} if "trained_team" in have else {}), **{name: name for name in ablations}}
    publish_rows(results, rows, command, target)
    return list(rows)


def check_marl_row(target: Path, command: str) -> None:
    """Ablation rows published without their run's MARL team row: the shipped ``trained_team_marl``
    must come from the same ``command`` (run folder and date aside), or they would branch from
    another start.

    Raises:
        ConfigError: it came from another command, or ``target`` is missing.
    """
    shipped = _read_shipped(target).get("systems", {}).get(MARL_ROW, {})
    if _command_of(shipped.get("from", "")) != _command_of(command):
        raise ConfigError(f"--publish-ablations: this run has no trained_team row, and the shipped {MARL_ROW} "
                          "was made by another command (the ablations would branch from another start): "
                          "evaluate --systems trained_team in this run too")


def _command_of(source: str) -> str:
    """A published row's ``from`` without its run folder and date (``runs/x (2026-12-06): CMD``)."""
    return source.split("): ", 1)[-1]


def _read_shipped(target: Path) -> dict[str, Any]:
    """The shipped results.json.

    Raises:
        ConfigError: it is missing (a checkout without the shipped results).
    """
    try:
        return json.loads(target.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"the shipped results {target} are missing: restore them (git checkout -- {target}) "
                          "and rerun; this run's rows are kept in its own results.json") from None


def publish_rows(results: dict[str, Any], rows: dict[str, str], command: str, target: Path) -> None:
    """Rows of the run (``{shipped name: run row}``) into the shipped ``target`` results, each with
    ``from`` (``command``) and the run's figures about it under ``runs[shipped name]``: the start,
    that row's MARL run, the evaluation's minutes, and for the trained team its validation and
    training minutes. Every other row of ``target`` stays.

    Raises:
        ConfigError: ``target`` is missing (a checkout without the shipped results).
    """
    shipped = _read_shipped(target)
    for name, source in rows.items():
        shipped["systems"][name] = {**results["systems"][source], "from": command}
        shipped.setdefault("runs", {})[name] = _row_facts(results, source)
    _write(target, shipped)


def publish_results(results: dict[str, Any], target: Path, *, previous: str | None, note: str) -> list[str]:
    """``--publish``: the run's results into the shipped ``target`` by :func:`merge_published` (the
    run's alone when there is no shipped file yet); returns the shipped rows dropped."""
    shipped = json.loads(target.read_text(encoding="utf-8")) if target.is_file() else {"systems": {}}
    merged, dropped = merge_published(shipped, results, previous=previous, note=note)
    _write(target, merged)
    return dropped


def _write(target: Path, results: dict[str, Any]) -> None:
    """Replace ``target`` at once: an interrupted write leaves the shipped results as they were."""
    tmp = target.with_name(f".{target.name}.tmp")
    tmp.write_text(json.dumps(results, indent=1), encoding="utf-8")
    tmp.replace(target)


def check_previous_name(previous: str) -> None:
    """``--publish-previous``'s NAME alone (before the shipped results are read): its form.

    Raises:
        ConfigError: not of lowercase letters, digits, ``_.-``.
    """
    _check_form("--publish-previous", previous, "the shipped model's name, e.g. v66")


def check_previous(shipped: dict[str, Any], previous: str) -> None:
    """``--publish-previous``'s NAME: a suffix that renames none of the shipped model's own rows onto
    a row the shipped results already have.

    Raises:
        ConfigError: not of lowercase letters, digits, ``_.-``, or a renamed row would overwrite one.
    """
    check_previous_name(previous)
    rows = shipped.get("systems", {})
    taken = sorted(f"{name}_{previous}" for name, row in rows.items()
                   if "from" not in row and f"{name}_{previous}" in rows)
    if taken:
        raise ConfigError(f"--publish-previous {previous}: the shipped results already have {', '.join(taken)}; "
                          "name the shipped model differently")


def merge_published(shipped: dict[str, Any], results: dict[str, Any], *, previous: str | None,
                    note: str) -> tuple[dict[str, Any], list[str]]:
    """``--publish``: the run's ``results`` with the shipped rows it lacks, and the rows dropped.

    A shipped row with ``from`` (a carried baseline, an experiment) stays unless the run evaluated
    a row of its name. The shipped model's own rows (no ``from``) give way to the run's; with
    ``previous`` they stay beside them as ``<row>_<previous>`` (``from``: ``previous`` and
    ``note``; the shipped file's figures about them under ``runs``), else they are dropped: a row
    of the model shipped before, under the new model's name, would misreport it. Order: the shipped
    file's, the run's new rows last.
    """
    if previous is not None:
        check_previous(shipped, previous)
    ran = results.get("systems", {})
    rows: dict[str, Any] = {}
    runs: dict[str, Any] = {}
    dynamics = dict(results.get("team_dynamics", {}))
    dropped: list[str] = []
    for name, row in shipped.get("systems", {}).items():
        if name in ran:
            rows[name] = ran[name]
        if "from" in row:
            if name not in ran:
                rows[name] = row
                if name in shipped.get("runs", {}):
                    runs[name] = shipped["runs"][name]
                if name in shipped.get("team_dynamics", {}):
                    dynamics[name] = shipped["team_dynamics"][name]
        elif previous is not None:
            rows[f"{name}_{previous}"] = {**row, "from": f"{previous}: {note}"}
            runs[f"{name}_{previous}"] = _row_facts(shipped, name)
        elif name not in ran:
            dropped.append(name)
    rows.update({name: row for name, row in ran.items() if name not in rows})
    merged = {**results, "systems": rows, **({"runs": runs} if runs else {})}
    return {**merged, **({"team_dynamics": dynamics} if dynamics else {})}, dropped


def _row_facts(results: dict[str, Any], source: str) -> dict[str, Any]:
    """What results.json says about the run row ``source`` beside its success (``runs.<row>``)."""
    keys = _RUN_FACTS if source == "trained_team" else ("start", "eval_minutes")
    facts = {key: results[key] for key in keys if key in results}
    if source in results.get("marl", {}):
        facts["marl"] = {source: results["marl"][source]}
    else:
        facts.pop("marl", None)
    dynamics = results.get("team_dynamics", {}).get(source)
    return {**facts, **({"team_dynamics": dynamics} if dynamics else {})}
