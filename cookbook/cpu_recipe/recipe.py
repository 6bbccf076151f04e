"""The CPU recipe: verified demonstrations -> SFT -> held-out evaluation, with results.json.

Run (one command, resumable: rerun it after a crash or Ctrl-C and finished work is kept):

    ./.venv/bin/python cookbook/cpu_recipe/recipe.py --out runs/recipe [--publish]

Stages (see README.md next to this file for what each one measured):

1. ``demo/``: search verified trajectories on the training tasks (the environment's reward
   keeps only what works; element order and ids shuffled by the device), ``--demo-minutes``.
2. ``sft/``: SFT of every SmolLM2 weight (completion-only loss) on those steps in the
   ``terse`` prompt style; ``extract/``: its weight change as a 32.5 MB low-rank LoRA adapter,
   which ``bundle/`` merges at load (``--no-full-finetune``: a LoRA adapter, rank 32 on every
   linear layer, instead).
3. ``eval/<system>/``: every system on the held-out tasks with shuffled pages and fixed seeds:
   random and lexical baselines, the base model and the trained model as single agents (and
   the team rows when ``--team`` is given).
4. ``results.json`` (and with ``--publish`` ``cookbook/cpu_recipe/results.json``): success per
   system with 95% Wilson intervals; ``--table`` prints the README's table from it.

Train and tune only on ``TRAIN_TASKS``; ``HELDOUT_TASKS`` are evaluation only.
"""

import datetime
import json
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# The settings and the stages, in modules beside this file (a script's folder is on sys.path).
from recipe_config import RecipeConfig, flag_values, made_by_command, parse_args
from recipe_eval import (
    MARL_ROW,
    carry_baselines,
    check_marl_row,
    check_previous,
    check_row_name,
    critic_check,
    evaluate,
    paired_rows,
    publish_ablations,
    publish_results,
    publish_row,
    systems,
    table,
    team_figures,
    validate,
)
from recipe_eval import row as _row
from recipe_marl import ABLATIONS, marl_runs, marl_suffix, train_marl
from recipe_plots import plot, plot_timeline
from recipe_sft import (
    demonstrate,
    extract,
    full_bundle,
    onpolicy_dpo,
    onpolicy_round,
    sft,
    soup,
    start_bundle,
)

from collabui.errors import ConfigError, ModelLoadError
from collabui.evaluation.paired import render_paired
from collabui.training.task_lists import HELDOUT_TASKS, TRAIN_TASKS

HERE = Path(__file__).resolve().parent
#: Where ``--publish`` puts the trained team inside the package (served as ``smollm2-trained``).
SHIPPED = HERE.parents[1] / "sdk" / "trained" / "smollm2"


def _stop_if_signalled() -> None:
    """Stop at a stage's edge when a SIGINT/SIGTERM came and its Interrupted was swallowed inside
    the stage (an import lock's callback ignores exceptions: seen in CI) and nothing failed after:
    the recipe has no watchdog, so without this check it would run on to its end."""
    from collabui.cli import stopping

    if (signum := stopping.received()) is not None:
        raise stopping.Interrupted(signum)


class _Clock:
    """Seconds per stage, kept in ``recipe.json`` across resumed runs."""

    def __init__(self, path: Path, config: RecipeConfig) -> None:
        self.path = path
        self.data: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {"seconds": {}}
        self.data["args"] = flag_values(config)

    def run(self, name: str, fn: Callable[[], Any], once: bool = False) -> Any:
        """Run a stage and add its seconds. ``once``: the stage's output is final once made
        (a trained model), so a resumed run that finds it only reloads it and adds no time;
        an interrupted stage's seconds count either way (the resumed run finishes it)."""
        _stop_if_signalled()
        finished = once and name in self.data.setdefault("finished", [])
        print(f"[recipe] {name} ...", file=sys.stderr, flush=True)
        started = time.perf_counter()
        try:
            result = fn()
            if once and not finished:
                self.data["finished"].append(name)
        finally:
            spent = time.perf_counter() - started
            if not finished:
                self.data["seconds"][name] = round(self.data["seconds"].get(name, 0.0) + spent, 1)
            self.path.write_text(json.dumps(self.data, indent=1))
        print(f"[recipe] {name}: {spent:.0f} s{' (finished earlier; not counted)' if finished else ''}",
              file=sys.stderr, flush=True)
        _stop_if_signalled()
        return result

    def minutes(self, *prefixes: str) -> float:
        return round(sum(v for k, v in self.data["seconds"].items() if k.startswith(prefixes)) / 60, 1)


def marl(config: RecipeConfig, start: Path, out: Path, clock: _Clock) -> dict[str, Path]:
    """Stage 6 (``recipe_marl.train_marl``), the MARL team's bundle stamped with this command."""
    found = train_marl(config, start, out, clock)
    _stamp(found["trained_team"], made_by_command(config, marl=True))
    return found


def _stamp(bundle_dir: Path, made_by: str) -> None:
    """The recipe's own command as the bundle's ``made_by`` (what reproduces it)."""
    path = bundle_dir / "team.json"
    manifest = json.loads(path.read_text())
    manifest["made_by"] = made_by
    path.write_text(json.dumps(manifest, indent=1) + "\n")


def bundle(config: RecipeConfig, sft_dir: Path, out: Path, dpo_dir: Path | None = None) -> Path:
    """The trained team as a bundle (``trained:FOLDER``): SmolLM2 + the SFT adapter (fp16; with
    full fine-tuning its extract, or with ``--extract-rank 0`` the whole model),
    answering in the taught prompt style; ``--publish`` makes it ``smollm2-trained``."""
    from collabui.models.bundle import write_bundle

    made_by = made_by_command(config)
    team = {"prompt_style": config.style, "max_new_tokens": 128, "element_format": config.element_format}
    if config.sft.full_finetune and not config.extract_rank:
        return full_bundle(sft_dir, out, team=team, made_by=made_by)
    agents = {"agent0": dpo_dir} if dpo_dir is not None else {}
    return write_bundle(out, base="smollm2", merge={"stage1": sft_dir}, agents=agents, team=team,
                        made_by=made_by, train_tasks=list(TRAIN_TASKS))


def train(config: RecipeConfig, out: Path, clock: _Clock) -> Path:
    """Stages 1-2 (demonstrations unless done, SFT, the optional on-policy round): the trained
    model's bundle."""
    if not (out / "demo" / "demo_stats.json").is_file():
        clock.run("1 demonstrations", lambda: demonstrate(config, out / "demo"))
    sft_dir = model_dir = clock.run("2 sft", lambda: sft(config, out / "demo", out / "sft"), once=True)
    if config.sft_draws > 1:
        sft_dir = model_dir = soup(config, model_dir, out, clock)
    if config.sft.full_finetune and config.extract_rank:  # the shipped form of the whole model's change
        sft_dir = clock.run("2 extract", lambda: extract(config, model_dir, out / "extract"))
    if not config.onpolicy_episodes:
        return bundle(config, sft_dir, out / "bundle")
    # With an on-policy round the SFT model is only the round's starting point (bundle-sft/); a
    # fully fine-tuned one continues from its whole weights, not from its extract.
    start = bundle(config, sft_dir, out / "bundle-sft")
    init = model_dir if config.sft.full_finetune else sft_dir
    sft_dir = clock.run("2b on-policy round",
                        lambda: onpolicy_round(config, start, out / "demo", init, out / "onpolicy"), once=True)
    dpo_dir = (clock.run("2c on-policy DPO", lambda: onpolicy_dpo(config, sft_dir, out / "onpolicy"), once=True)
               if config.onpolicy_dpo else None)
    return bundle(config, sft_dir, out / "bundle", dpo_dir)


def checks(config: RecipeConfig, trained: Path, out: Path, clock: _Clock,
           teams: dict[str, Path] | None = None) -> dict[str, Any]:
    """Validation on the training tasks (with ``--validate``; with ``--team`` the trained team's
    too: the MARL team of ``teams`` when there is one) and the verified critic's check: the
    results.json fields they fill."""
    found: dict[str, Any] = {}
    if config.validate:
        # Its own folder per model: the SFT model's figure stays when a round is added later.
        folder = out / ("validation-round" if config.onpolicy_episodes else "validation")
        val = found["validation"] = _row(clock.run("5 validation", lambda: validate(config, trained, folder)))
        print(f"[recipe] validation (training tasks, new seeds): {val['successes']}/{val['episodes']} "
              f"{json.dumps(val['per_task'])}", file=sys.stderr)
    team = (teams or {}).get("trained_team", trained)
    name = f"marl-team{marl_suffix(config.marl_iterations, config.marl.interpolate)}" if team != trained else "team"
    if config.validate and config.teams:
        val = found["validation_team"] = _team_validation(config, team, out, name, clock, "5 validation team")
        print(f"[recipe] validation of the trained team (training tasks, new seeds): {val['successes']}/"
              f"{val['episodes']} {json.dumps(val['per_task'])}", file=sys.stderr)
    if config.validate_forms:
        val = found["validation_forms_team"] = _team_validation(config, team, out, name, clock, "5 validation forms",
                                                                forms=True)
        print(f"[recipe] validation of the trained team on the training forms (new seeds): {val['successes']}/"
              f"{val['episodes']}, typing loops in {val.get('typing_loops')} {json.dumps(val['per_task'])}",
              file=sys.stderr)
    if config.marl_gate and team != trained:
        found["marl_gate"] = marl_gate(config, trained, out, clock, found)
    check = found["critic_check"] = clock.run("4 critic check", lambda: critic_check(config, out / "critic_check"))
    print(f"[recipe] verified critic: coverage {check['coverage_a']}, agreement with the oracle "
          f"{check['agreement']} over {check['entries_both']} entries", file=sys.stderr)
    return found


def _team_validation(config: RecipeConfig, model: Path, out: Path, name: str, clock: _Clock, stage: str, *,
                     forms: bool = False) -> dict[str, Any]:
    """``model`` as the 4 x 3 team on the validation pages (``forms``: ``--validate-forms``') into
    ``validation[-forms]-<name>/``, timed as ``stage``: its results.json row."""
    folder = out / f"validation-{'forms-' if forms else ''}{name}"
    return _row(clock.run(stage, lambda: validate(config, model, folder, team=True, forms=forms)))


def marl_gate(config: RecipeConfig, trained: Path, out: Path, clock: _Clock, found: dict[str, Any]) -> dict[str, Any]:
    """``--marl-gate``: the SFT team on the pages the MARL team was just validated on (``found``),
    and the team the run keeps: the MARL team unless it is below the SFT team on either validation
    (the forms are where too strong an update shows first, as typing loops)."""
    sft = {"validation": _team_validation(config, trained, out, "team", clock, "5 validation sft team"),
           "forms": _team_validation(config, trained, out, "team", clock, "5 validation sft forms", forms=True)}
    marl = {"validation": found["validation_team"], "forms": found["validation_forms_team"]}
    figures = {who: {k: v["successes"] for k, v in rows.items()} for who, rows in (("sft_team", sft), ("marl_team", marl))}
    kept = "marl" if all(figures["marl_team"][k] >= figures["sft_team"][k] for k in marl) else "sft"
    episodes = {k: v["episodes"] for k, v in marl.items()}
    print(f"[recipe] MARL gate: the MARL team {figures['marl_team']} against the SFT team's {figures['sft_team']} "
          f"(of {episodes}): the run keeps the {kept.upper()} team", file=sys.stderr)
    return {**figures, "episodes": episodes, "kept": kept}


def run_facts(config: RecipeConfig, out: Path, clock: _Clock) -> dict[str, Any]:
    """What results.json says about the run beside its rows: tasks, format, data, minutes."""
    if config.from_bundle is not None:
        return _bundle_facts(config, out, clock)
    demo = {k: v for k, v in json.loads((out / "demo" / "demo_stats.json").read_text()).items() if k != "per_task"}
    facts = {**_task_facts(config, config.element_format), "demo": demo,
             # Training time: the search's own clock (kept across resumes) plus SFT.
             "minutes": round(demo["seconds"] / 60 + clock.minutes("2 ", "2b ", "2c ", "6 marl trained_team"), 1)}
    if config.marl_iterations:
        facts["marl"] = marl_runs(out / "marl")
    if config.onpolicy_episodes:
        facts["onpolicy_round"] = json.loads((out / "onpolicy" / "round.json").read_text())
    return facts


def _task_facts(config: RecipeConfig, element_format: str) -> dict[str, Any]:
    """The facts every results.json states: the task lists, shuffled pages, page format, step cap."""
    return {"train_tasks": list(TRAIN_TASKS), "heldout_tasks": list(HELDOUT_TASKS), "shuffled": True,
            "element_format": element_format, "max_steps": config.evaluation.team.max_steps}


def _bundle_facts(config: RecipeConfig, out: Path, clock: _Clock) -> dict[str, Any]:
    """run_facts of a run from a trained bundle: the start and its ``made_by``, MARL's minutes."""
    from collabui.models.bundle import read_bundle

    manifest = read_bundle(out / "bundle")
    facts = {**_task_facts(config, manifest.get("team", {}).get("element_format", config.element_format)),
             "start": {"bundle": config.from_bundle, "made_by": manifest.get("made_by")},
             "minutes": clock.minutes("6 marl trained_team")}
    if config.marl_iterations:
        facts["marl"] = marl_runs(out / "marl")
    return facts


def wanted_rows(config: RecipeConfig, rows: dict[str, Any]) -> list[str]:
    """The rows ``--systems`` asks for (all by default), in the recipe's order.

    Raises:
        ConfigError: a name that is not a row (``--team`` adds the teams).
    """
    if not config.systems:
        return list(rows)
    wanted = {w.strip() for w in config.systems.split(",")} - {"", "none"}
    unknown = sorted(wanted - set(rows))
    if unknown:
        raise ConfigError(f"unknown system(s) {unknown}; choose from {sorted(rows)} (--team adds the teams)")
    return [name for name in rows if name in wanted]


def main(argv: list[str] | None = None) -> int:
    """The recipe's command. Run as a script, SIGINT and SIGTERM stop it through every ``finally``
    (as ``collabui train`` stops): the stopped stage's seconds reach recipe.json, its servers
    and browsers close, and the exit is 130 / 143; the same command resumes the run."""
    from collabui.cli import stopping
    from collabui.cli._log import configure

    config = parse_args(argv)
    configure()  # the stages' progress (episodes, labels, MARL stages) on stderr, bars on a tty
    if argv is None:  # no time bound: a stop may come while a stage saves a model
        stopping.install(watchdog=False)
    out = Path(config.out_dir)
    if config.timeline is not None:
        return _timeline(out / "recipe.json", config.timeline)
    if config.table or config.paired is not None or config.plot is not None:
        path = out / "results.json" if (out / "results.json").is_file() else HERE / "results.json"
        try:
            return _show(config, json.loads(path.read_text()), path)
        except BrokenPipeError:  # `--table | head`: the reader left; no traceback
            return stopping.quiet_broken_pipe()
    out.mkdir(parents=True, exist_ok=True)
    try:  # before hours of training, not after
        rows = systems(config, out / "bundle")
        names = wanted_rows(config, rows)
        if config.publish_row is not None:
            check_row_name(config.publish_row, taken={*rows, *ABLATIONS, MARL_ROW})
            if not _will_have(out, names, ["trained_team"]):
                raise ConfigError("--publish-row copies the run's trained_team row, which neither --systems nor "
                                  "an earlier run into this folder gives: add trained_team to --systems")
        if config.publish_previous is not None and (HERE / "results.json").is_file():
            check_previous(json.loads((HERE / "results.json").read_text()), config.publish_previous)
        if config.publish_ablations and not _will_have(out, names, list(ABLATIONS)):
            raise ConfigError("--publish-ablations copies the run's ablation rows (and its trained_team row), which "
                              "neither --systems nor an earlier run into this folder gives: add them to --systems")
        if config.publish_ablations and not _will_have(out, names, ["trained_team"]):
            check_marl_row(HERE / "results.json", _ablations_command(config, out))
        if config.baselines_from is not None:
            carry_baselines(config, rows, names, Path(config.baselines_from), out / "eval", copy=False)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        _run(config, out, names)
    except KeyboardInterrupt as exc:  # SIGTERM too (collabui.cli.stopping.Interrupted)
        print(f"stopped ({exc or 'SIGINT'}); the same command resumes the run in {out}", file=sys.stderr)
        return stopping.exit_code(exc)
    except (ConfigError, ModelLoadError) as exc:  # e.g. a stage's folder holds another run: one line, not a trace
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:
        # A signal whose Interrupted was swallowed (raised inside an import lock's callback, or
        # a thread pool's) leaves a half-made step that fails next: the stop's aftermath, as in
        # `collabui` (collabui.cli.stopping.received), not a failure of the run.
        if (signum := stopping.received()) is None:
            raise
        print(f"while stopping: {type(exc).__name__}: {exc}", file=sys.stderr)
        stop = stopping.Interrupted(signum)
        print(f"stopped ({stop}); the same command resumes the run in {out}", file=sys.stderr)
        return stopping.exit_code(stop)
    return 0


def _show(config: RecipeConfig, results: dict[str, Any], path: Path) -> int:
    """``--table`` / ``--paired A,B`` / ``--plot PNG``: show ``results`` (read from ``path``) and exit."""
    if config.table:
        print(table(results))
        return 0
    if config.plot is not None:
        try:
            drawn = plot(results, config.plot)
        except ConfigError as exc:
            print(f"error: {exc} ({path})", file=sys.stderr)
            return 2
        print(f"{config.plot}: {len(drawn)} rows of {path}")
        return 0
    names = [n.strip() for n in (config.paired or "").split(",")]
    try:
        if len(names) != 2 or not all(names):
            raise ConfigError(f"--paired takes two row names, A,B; got {config.paired!r}")
        found = paired_rows(results, *names)
    except ConfigError as exc:
        print(f"error: {exc} ({path})", file=sys.stderr)
        return 2
    print(f"A = {names[0]}, B = {names[1]} ({path})")
    print(render_paired(found), end="")
    return 0


def _timeline(recipe_json: Path, png: str) -> int:
    """``--timeline PNG``: draw the stage minutes of a run folder's recipe.json and exit."""
    if not recipe_json.is_file():
        print(f"error: no {recipe_json}; give --out a run folder of this recipe", file=sys.stderr)
        return 2
    try:
        total = plot_timeline(json.loads(recipe_json.read_text()).get("seconds", {}), png)
    except ConfigError as exc:
        print(f"error: {exc} ({recipe_json})", file=sys.stderr)
        return 2
    print(f"{png}: {total:.1f} min of stages in {recipe_json}")
    return 0


def _draw(results: dict[str, Any], out: Path, seconds: dict[str, float]) -> None:
    """The run's pictures beside its results.json (results.png, timeline.png); a run that
    trained and evaluated does not fail for want of a picture."""
    for name, draw in (("results.png", lambda p: plot(results, p)),
                       ("timeline.png", lambda p: plot_timeline(seconds, p))):
        try:
            draw(out / name)
        except ConfigError as exc:
            print(f"[recipe] no {name}: {exc}", file=sys.stderr)


def _ablations_command(config: RecipeConfig, out: Path) -> str:
    """``from`` of the rows --publish-ablations writes: each ablation row is the MARL team's
    command with the one change its name says."""
    return f"{out} ({datetime.date.today()}): {made_by_command(config, marl=True)} --ablations"


def _will_have(out: Path, names: list[str], rows: list[str]) -> bool:
    """Whether the folder's results.json will hold one of ``rows`` after this run: evaluated now
    (``names``) or by an earlier run into the folder."""
    earlier = out / "results.json"
    done = json.loads(earlier.read_text()).get("systems", {}) if earlier.is_file() else {}
    return any(row in names or row in done for row in rows)


def _reads_marl(fields: dict[str, Any], out: Path) -> bool:
    """Whether a row evaluates a MARL team of this run (its folder then says how many iterations
    trained it: ``eval/trained_team-x2``)."""
    return str(fields["model"]).startswith(f"trained:{out / 'marl'}")


def _is_team(fields: dict[str, Any]) -> bool:
    """Whether a row of :func:`systems` evaluates a team (more than one agent)."""
    return fields.get("team", {}).get("n_agents", 1) > 1


def _row_folder(config: RecipeConfig, name: str, fields: dict[str, Any], out: Path, trained: Path) -> str:
    """Where a row is evaluated (in ``eval/``): its name, with the MARL team's ``-xN`` (iterations)
    or, for a team row that ``--marl-gate`` gave the SFT team (``trained``), ``-sft`` (the MARL
    team's folder of an earlier run stays)."""
    if _reads_marl(fields, out):
        return name + marl_suffix(config.marl_iterations, config.marl.interpolate)
    sft_team = fields["model"] == f"trained:{trained}" and _is_team(fields)
    if config.marl_iterations and sft_team:
        return name + "-sft"
    return name


def _run(config: RecipeConfig, out: Path, names: list[str]) -> None:
    """The stages :func:`main` runs: training (or the bundle's copy), MARL, checks, the rows."""
    clock = _Clock(out / "recipe.json", config)
    trained = start_bundle(config, out / "bundle") if config.from_bundle is not None else train(config, out, clock)
    teams = marl(config, trained, out / "marl", clock) if config.marl_iterations else {}
    found = checks(config, trained, out, clock, teams)
    kept_marl = found.get("marl_gate", {}).get("kept") != "sft"
    if not kept_marl:  # the team rows and --publish take the SFT team
        teams = {name: team for name, team in teams.items() if name != "trained_team"}
    rows = systems(config, trained, out / "marl", marl_team=kept_marl)
    path = out / "results.json"
    # Rows of earlier runs into this folder stay: --systems can add rows one session at a time.
    results: dict[str, Any] = json.loads(path.read_text()) if path.is_file() else {"systems": {}}
    results.update({**found, **run_facts(config, out, clock)})
    carried = {} if config.baselines_from is None else \
        carry_baselines(config, rows, names, Path(config.baselines_from), out / "eval")
    for name in names:
        folder = _row_folder(config, name, rows[name], out, trained)
        done = clock.run(f"3 eval {folder}", lambda n=name, f=folder: evaluate(config, f, rows[n], out / "eval"))
        results["systems"][name] = _row(done, out / "eval" / folder)
        if name in carried:
            results["systems"][name]["carried_from"] = carried[name]
        if _is_team(rows[name]):
            results.setdefault("team_dynamics", {})[name] = team_figures(out / "eval" / folder)
        results["eval_minutes"] = clock.minutes("3 ")
        path.write_text(json.dumps(results, indent=1))  # after every row: an interrupted run keeps them
    results["eval_minutes"] = clock.minutes("3 ")
    path.write_text(json.dumps(results, indent=1))  # also when no row was evaluated this time
    if config.publish_row is not None:
        command = f"{out} ({datetime.date.today()}): {made_by_command(config, marl=bool(config.marl_iterations))}"
        command += " --marl-gate" if config.marl_gate else ""  # the row may then be the SFT team's (runs.<row>.marl_gate)
        publish_row(results, config.publish_row, command, HERE / "results.json")
    if config.publish_ablations:
        # Each ablation row is the MARL team's command with the one change its name says.
        written = publish_ablations(results, _ablations_command(config, out), HERE / "results.json")
        print(f"[recipe] published {', '.join(written)} to {HERE / 'results.json'}", file=sys.stderr)
    if config.publish:
        note = f"the model shipped until {out} replaced it ({datetime.date.today()})"
        dropped = publish_results(results, HERE / "results.json", previous=config.publish_previous, note=note)
        if dropped:
            print(f"[recipe] dropped the shipped model's rows this run did not evaluate: {', '.join(dropped)} "
                  "(--publish-previous NAME keeps them as <row>_NAME)", file=sys.stderr)
        shutil.rmtree(SHIPPED, ignore_errors=True)
        # collabui/trained/smollm2: the smollm2-trained spec (the MARL team when there is one)
        shutil.copytree(teams.get("trained_team", trained), SHIPPED)
    print(table(results))
    _draw(results, out, clock.data["seconds"])
    print(f"[recipe] training {results['minutes']} min, evaluation {results['eval_minutes']} min; "
          f"{out / 'results.json'}", file=sys.stderr)


if __name__ == "__main__":
    raise SystemExit(main())
