"""Stage 6 of the CPU recipe (``recipe.py``): MARL from the SFT bundle (paper Sec. 3.2), the
paper's ablations at the same compute, and the facts results.json states about those runs."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from recipe_sft import ALL_LINEAR, demo_rows, demonstrate

from collabui.config import TeamConfig
from collabui.errors import ConfigError
from collabui.training.marl_bundle import bundle_tag
from collabui.training.marl_config import MARLConfig
from collabui.training.mistake_pairs import OWN_PAIR_OPTIONS
from collabui.training.task_lists import TRAIN_TASKS

if TYPE_CHECKING:
    from recipe import _Clock as Clock
    from recipe_config import RecipeConfig


#: The paper's ablations (its Table 4), each a MARL run from the same SFT model at the same compute.
#: Without CR every entry of an episode scores its outcome, so no step holds an agent's own
#: mistake beside a right answer: the adversary writes the rejected answers (the paper's own
#: way of making pairs), as many per agent as the full run had, and none says what was right
#: beside the team's own wrong proposal (``right_pairs``, which needs them).
ABLATIONS: dict[str, dict[str, Any]] = {"ablation_no_cr": {"critic": "outcome", "adversary": "rule",
                                                           **dict.fromkeys(OWN_PAIR_OPTIONS, False)},
                                        "ablation_no_edge_update": {"edge_update": False},
                                        "ablation_rft": {"objective": "rft"}}
#: MARLConfig's fields with recipe flags (``--marl-episodes``, ``--marl-mirror``...: recipe._RENAME);
#: the recipe sets the others (``marl_config``).
MARL_FLAGS = ("episodes_per_task", "task_episodes", *OWN_PAIR_OPTIONS, "max_pairs", "mirror_corrections", "element_kinds", "pool_pairs",
              "shared_adapter", "anchor", "rehearse", "interpolate")
#: Where a MARL run's rehearsal rows are written (in the run's marl/ folder): stage 1's SFT rows.
REHEARSAL_FILE = "rehearsal.jsonl"
#: Every MARL update's DPO, with an SFT term on chosen; small per-agent adapters (rank 8: four of
#: them and the SFT adapter stay under 40 MB in fp16). Learning rate and epochs: --dpo-lr, --marl-epochs.
_DPO = {"loss_type": ["sigmoid", "sft"], "beta": 0.1, "per_device_train_batch_size": 4, "lora_r": 8, "lora_alpha": 16,
        "lora_target_modules": list(ALL_LINEAR), "max_length": 512}


def marl_template() -> MARLConfig:
    """Stage 6's MARL run before the recipe sets its start, folder, team, iterations and serving
    (``marl_config``): the agents' own mistakes labelled by the verified critic on shuffled
    training pages, each against a verified-right answer."""
    return MARLConfig(train_tasks=TRAIN_TASKS, eval_tasks=(), eval_episodes_per_task=0, critic="verified",
                      adversary="own", shuffle_elements=True, dpo=_DPO)


def marl_config(config: RecipeConfig, start: Path, out: Path, **change: Any) -> MARLConfig:
    """The MARL run of the trained team (``change``: an ablation's): ``config.marl`` (its flags)
    with the 4 x 3 team of the held-out rows (their vote and tie rule with ``--marl-skip-stale``, else the
    paper's), the SFT bundle's prompt style and format, and the evaluation's serving."""
    team = TeamConfig(n_agents=4, rounds=3, max_new_tokens=128, prompt_style="auto",
                      max_steps=config.evaluation.team.max_steps, seed=config.evaluation.team.seed,
                      skip_stale=config.marl_skip_stale,
                      tie_break=config.evaluation.team.tie_break if config.marl_skip_stale else "lowest-id")
    dpo = {**config.marl.dpo, "learning_rate": config.dpo_lr, "num_train_epochs": config.marl_epochs}
    serving = config.evaluation
    if config.marl.rehearse:
        change = {"rehearsal": str(Path(out).parent / REHEARSAL_FILE), **change}
    return dataclasses.replace(config.marl, model=f"trained:{start}", iterations=config.marl_iterations, team=team,
                               out_dir=str(out), serve=serving.serve, serve_dtype=serving.serve_dtype,
                               serve_backend=serving.serve_backend, concurrency=4 if serving.serve else 2,
                               dpo=dpo, **change)


def train_marl(config: RecipeConfig, start: Path, out: Path, clock: Clock) -> dict[str, Path]:
    """Stage 6: MARL from the SFT bundle ``start`` (and the ablations): ``{row: team bundle}``."""
    from collabui.training.marl import run_marl

    runs = {"trained_team": {}, **trained_ablations(config)}
    found = {}
    if config.marl.rehearse:
        write_rehearsal(config, rehearsal_demo(config, out.parent / "demo", clock), out / REHEARSAL_FILE)
    if config.marl_rollouts_from is not None:
        reuse_rollouts(config, Path(config.marl_rollouts_from), start, out / "trained_team")
    for row, change in runs.items():
        if row != "trained_team":
            share_rollouts(out / "trained_team", out / row, change)
            change = same_pairs_as(out / "trained_team", change, config)
        clock.run(marl_stage(row, config.marl_iterations, config.marl.interpolate),
                  lambda r=row, c=change: run_marl(marl_config(config, start, out / r, **c)), once=True)
        found[row] = out / row / "bundle"
    return found


def rehearsal_demo(config: RecipeConfig, demo: Path, clock: Clock) -> Path:
    """The demonstrations ``--marl-rehearse`` reads: the run's own stage 1 (``demo``); in a
    ``--from-bundle`` run without one (the shipped bundle on a new machine has no start run to copy
    it from), the recipe's demonstration stage run now at its settings, resumable as in stage 1.
    The search is bounded in time, so those rows are rows like the ones the start trained on (the
    same tasks, seeds and format), not the same rows."""
    if not (demo / "demo_stats.json").is_file():
        clock.run("1 demonstrations", lambda: demonstrate(config, demo))
    return demo


def write_rehearsal(config: RecipeConfig, demo: Path, target: Path) -> Path:
    """``--marl-rehearse``: the SFT rows stage 1 trained on (the search's verified steps, in the
    agents' format), written once to ``target`` for the MARL update to rehearse.

    Raises:
        ConfigError: ``demo`` has no demonstrations (:func:`rehearsal_demo` makes them).
    """
    if target.is_file():
        return target
    if not (demo / "steps.jsonl").is_file():
        raise ConfigError(f"--marl-rehearse rehearses stage 1's rows but {demo} has no steps.jsonl; delete its "
                          "demo_stats.json to demonstrate again, copy the start run's demo/ folder there "
                          "(cp -r RUN/demo OUT/) or drop --marl-rehearse")
    rows = demo_rows(config, demo)[:config.sft_examples]
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".jsonl.tmp")
    tmp.write_text("".join(json.dumps({k: r[k] for k in ("prompt", "completion", "task_name", "seed", "t")}) + "\n"
                           for r in rows))
    tmp.replace(target)
    return target


def marl_suffix(iterations: int, interpolate: float = 1.0) -> str:
    """The folder suffix of what a MARL team of ``iterations`` at weight ``interpolate`` is
    measured into (its validation, its held-out rows): none for one iteration at full weight,
    ``-x2`` for two, ``-x2-w0.5`` for two at half weight. A run grown to more iterations
    (``--marl-iterations`` raised on a finished folder) or asked for another weight
    (``--marl-interpolate``) then measures that team beside the earlier one's figures instead of
    refusing their folders as another model's."""
    tag = bundle_tag(iterations, interpolate)
    return "" if tag == "x1" else "-" + tag.removeprefix("x1-")


def marl_stage(row: str, iterations: int, interpolate: float = 1.0) -> str:
    """The clock's name of a MARL run: a run grown to more iterations (``--marl-iterations``
    raised on a finished folder) or asked for another weight is a new stage, so what it adds is
    timed (a new weight alone: the bundle written again); its prefix stays ``6 marl <row>``,
    which the training minutes sum over."""
    return f"6 marl {row}" + marl_suffix(iterations, interpolate).replace("-", " ")


def trained_ablations(config: RecipeConfig) -> dict[str, dict[str, Any]]:
    """The ablations ``--ablations`` trains: those ``--systems`` names, or all when it names none
    (an ablation row costs ~25 min of MARL here, so a session can add one row at a time)."""
    if not config.ablations:
        return {}
    asked = {w.strip() for w in (config.systems or "").split(",")} & set(ABLATIONS)
    return {name: change for name, change in ABLATIONS.items() if not asked or name in asked}


def same_pairs_as(full: Path, change: dict[str, Any], config: RecipeConfig) -> dict[str, Any]:
    """An ablation whose pairs are not the agents' own mistakes (``adversary``) gets at most as
    many pairs per agent as the full run trained on: the same compute, not more data."""
    if "adversary" not in change or config.marl.max_pairs:
        return change
    report = json.loads((full / "marl_report.json").read_text())
    most = max((max(it["pairs"].get("per_agent", {}).values(), default=0) for it in report["iterations"]), default=0)
    return {**change, "max_pairs": most} if most else change


def share_rollouts(source: Path, target: Path, change: dict[str, Any], iterations: int = 1) -> None:
    """Iteration 0 of an ablation that keeps the DAG rolls out exactly the trained team's
    episodes (same model, DAG and seeds): copy them (and the labels when the critic is the same)
    instead of spending that compute twice; ``iterations`` > 1 copies later iterations' too (an
    update sweep on fixed data). The run's resume logic skips what is there."""
    if "edge_update" in change:
        return
    for k in range(iterations):
        done, into = source / f"iter{k}", target / f"iter{k}"
        if (into / "rollouts.jsonl").exists() or not (done / "rollouts.jsonl").is_file():
            continue
        into.mkdir(parents=True, exist_ok=True)
        shutil.copytree(done / "traces", into / "traces", dirs_exist_ok=True)
        if "critic" not in change and (done / "labels.jsonl").is_file():
            shutil.copyfile(done / "labels.jsonl", into / "labels.jsonl")
        shutil.copyfile(done / "rollouts.jsonl", into / "rollouts.jsonl")  # last: it marks them done


#: MARL settings that change no rollout of iteration 0: how it is labelled, paired and learnt
#: from, how many iterations follow, and where the episodes run.
_UPDATE_ONLY = ("dpo", "objective", "adversary", *OWN_PAIR_OPTIONS, "max_pairs", "mirror_corrections", "element_kinds",
                "anchor", "rehearse", "rehearsal", "critic", "shared_adapter", "pool_pairs",
                "iterations", "out_dir", "model", "eval_tasks", "eval_episodes_per_task")


def reuse_rollouts(config: RecipeConfig, run: Path, start: Path, target: Path) -> None:
    """``--marl-rollouts-from RUN``: the rollouts of RUN's MARL team's first
    ``--marl-reuse-iterations`` iterations copied into ``target`` (labels too when the critic is
    the same), so a sweep of the update compares updates on the same episodes.

    More episodes of a task here than there (``--marl-episodes``, ``--marl-task-episodes``) grow
    RUN's rollouts: an episode's seed depends on its task and number only, so RUN's episodes are
    this run's first ones, and the run rolls out (and labels) only the rest.

    Raises:
        ConfigError: RUN has not finished those iterations' rollouts, started from another bundle,
            rolled out other episodes (another team, tasks, seeds, page format or DAG) or more
            episodes of a task than this run asks for.
    """
    from collabui.training.marl import RESUMABLE_CHANGES, STATE_FILE
    from collabui.training.marl_config import MARLConfig, changed_fields, stored_fields

    source = run / "marl" / "trained_team"
    try:
        theirs = json.loads((source / STATE_FILE).read_text())["config"]
    except (OSError, ValueError, KeyError, TypeError):
        raise ConfigError(f"--marl-rollouts-from {run}: no MARL run in {source}; name a recipe run folder that "
                          "trained MARL (--marl-iterations)") from None
    missing = [k for k in range(config.marl_reuse_iterations) if not (source / f"iter{k}" / "rollouts.jsonl").is_file()]
    if missing:
        raise ConfigError(f"--marl-rollouts-from {run}: its MARL iteration {missing[0]} has not rolled out yet; "
                          "finish that run first, or lower --marl-reuse-iterations")
    built = marl_config(config, start, target)
    ours = json.loads(json.dumps(built.to_dict()))
    differ = changed_fields(theirs, ours, _UPDATE_ONLY + tuple(RESUMABLE_CHANGES) + _EPISODE_COUNTS)
    mine, other = stored_fields(ours), stored_fields(theirs)
    if differ:
        shown = ", ".join(f"{k}: {other.get(k)!r} there, {mine.get(k)!r} here" for k in differ[:3])
        raise ConfigError(f"--marl-rollouts-from {run}: its episodes differ ({shown}); use the same team and "
                          "MARL episode flags, or drop --marl-rollouts-from")
    reused = MARLConfig.from_dict(theirs)  # the same tasks: train_tasks is no episode count
    more = [(task, reused.episodes_of(task), built.episodes_of(task)) for task in built.rollout_tasks
            if reused.episodes_of(task) > built.episodes_of(task)]
    if more:
        task, there, here = more[0]
        raise ConfigError(f"--marl-rollouts-from {run}: it rolled out {there} episodes of {task}, more than the "
                          f"{here} asked for here; ask for at least as many (--marl-task-episodes {task}={there}) "
                          "or drop --marl-rollouts-from")
    if _fingerprint(run / "bundle") != _fingerprint(start):
        raise ConfigError(f"--marl-rollouts-from {run}: it trained MARL from another bundle than {start}; use the "
                          "same --from-bundle (or SFT flags), or drop --marl-rollouts-from")
    share_rollouts(source, target, {} if mine["critic"] == other["critic"] else {"critic": mine["critic"]},
                   config.marl_reuse_iterations)


#: The episode counts: a run that asks for more episodes of a task grows the reused rollouts.
_EPISODE_COUNTS = ("episodes_per_task", "task_episodes")


def _fingerprint(bundle_dir: Path) -> str:
    """The bundle's weights and manifest without ``made_by`` (a stamp, not the model)."""
    import hashlib

    digest = hashlib.sha256()
    for path in sorted(p for p in bundle_dir.rglob("*") if p.is_file()):
        data = path.read_bytes()
        if path.relative_to(bundle_dir) == Path("team.json"):
            data = json.dumps({k: v for k, v in json.loads(data).items() if k != "made_by"}, sort_keys=True).encode()
        digest.update(str(path.relative_to(bundle_dir)).encode() + b"\0" + data)
    return digest.hexdigest()


def marl_runs(folder: Path) -> dict[str, Any]:
    """``marl_facts`` of every MARL run in the folder (the team's and the ablations trained so far)."""
    return {row: marl_facts(folder / row) for row in ("trained_team", *ABLATIONS)
            if (folder / row / "marl_report.json").is_file()}


def marl_facts(folder: Path) -> dict[str, Any]:
    """A MARL run's pairs, training rollouts' success and minutes per iteration (marl_report.json)."""
    report = json.loads((folder / "marl_report.json").read_text())
    return {"minutes": round(report["seconds"]["total"] / 60, 1),
            "iterations": [{"train_success": it["train"].get("success_rate"),
                            "pairs_per_agent": it["pairs"].get("per_agent"),
                            "topology": it["topology"].get("edges")} for it in report["iterations"]]}

