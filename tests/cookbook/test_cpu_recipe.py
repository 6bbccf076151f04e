"""The CPU recipe's configuration: valid and disjoint task lists, every evaluated system a valid
evaluation on shuffled held-out pages, and the README table rendered from results.json."""

import dataclasses
import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from collabui.devices.miniwob import miniwob_tasks
from collabui.errors import ConfigError
from collabui.training._peft import default_bf16
from collabui.training.task_lists import HELDOUT_TASKS, TRAIN_TASKS
from tests.cookbook.scripts import CPU_RECIPE, load_script, stage_module

RECIPE = CPU_RECIPE / "recipe.py"
SFT_STAGE, MARL_STAGE, EVAL_STAGE = (stage_module(f"recipe_{s}") for s in ("sft", "marl", "eval"))


def _recipe():
    return load_script("recipe")


def test_task_lists_are_real_and_disjoint():
    known = set(miniwob_tasks())
    assert set(TRAIN_TASKS) <= known and set(HELDOUT_TASKS) <= known
    assert not set(TRAIN_TASKS) & set(HELDOUT_TASKS)
    assert len(TRAIN_TASKS) == 20 and len(HELDOUT_TASKS) == 8


def test_every_system_is_a_valid_shuffled_heldout_evaluation(tmp_path):
    recipe = _recipe()
    args = recipe.parse_args(["--team"])
    rows = recipe.systems(args, tmp_path / "merged")
    assert {"random", "lexical", "base_single", "trained_single", "base_team", "trained_team"} <= set(rows)
    assert {"trained_team_unshuffled", "trained_single_unshuffled"} <= set(rows)
    for name, fields in rows.items():
        config = EVAL_STAGE.eval_config(args, fields)
        assert config.shuffle_elements == (not name.endswith("_unshuffled"))
        assert config.tasks.split(",") == list(HELDOUT_TASKS)
        # Trained models read the format they learned; the others the html their prompts show.
        assert config.element_format == (args.element_format if name.startswith("trained") else "html")
    # Trained rows load the recipe's bundle, whose own prompt style the team applies (auto).
    assert rows["trained_single"]["model"] == f"trained:{tmp_path / 'merged'}"
    assert "prompt_style" not in rows["trained_single"]["team"] and rows["base_single"]["team"]["prompt_style"] == "react"
    assert rows["random"]["episodes"] >= 25 and args.evaluation.episodes * len(HELDOUT_TASKS) >= 100
    # The episode counts: >= 200 for random, lexical and the trained team, >= 100 for the others.
    counts = {n: EVAL_STAGE.eval_config(args, f).episodes * len(HELDOUT_TASKS) for n, f in rows.items()}
    assert min(counts[n] for n in ("random", "lexical", "trained_team")) >= 200 and min(counts.values()) >= 100
    shapes = {name: (c.team.n_agents, c.team.rounds) for name, c in
              ((n, EVAL_STAGE.eval_config(args, f)) for n, f in rows.items())}
    assert shapes["random"] == shapes["lexical"] == shapes["trained_single"] == (1, 1)  # baselines: one agent
    assert shapes["trained_team"] == shapes["trained_team_arbiter"] == (4, 3)
    arbiter = EVAL_STAGE.eval_config(args, rows["trained_team_arbiter"]).team
    assert (arbiter.arbiter, arbiter.topology, arbiter.memory, arbiter.varied_order) == ("lexical", "independent",
                                                                                         False, True)
    assert counts["trained_team_arbiter"] >= 200 and rows["trained_team_arbiter"]["model"] == rows["trained_team"]["model"]
    team = EVAL_STAGE.eval_config(args, rows["trained_single"]).team
    assert (team.seed, team.max_steps, team.max_new_tokens) == (args.evaluation.team.seed, args.evaluation.team.max_steps, 128)
    rollouts = SFT_STAGE.on_training_tasks(args, tmp_path / "merged", seed=5000, episodes=2)
    assert (rollouts.team.seed, rollouts.team.n_agents, rollouts.team.max_new_tokens) == (5000, 1, 96)
    assert not any(EVAL_STAGE.eval_config(args, f).serve for f in rows.values())


def test_serve_puts_the_model_rows_on_vllm_and_keeps_the_baselines_here(tmp_path):
    recipe = _recipe()
    args = recipe.parse_args(["--team", "--serve"])
    rows = {name: EVAL_STAGE.eval_config(args, fields) for name, fields in recipe.systems(args, tmp_path / "merged").items()}
    assert {name for name, c in rows.items() if c.serve} == set(rows) - {"random", "lexical"}
    assert rows["trained_team"].concurrency == 4 and rows["lexical"].concurrency == args.evaluation.concurrency
    # The validations (the figures to tune on: training tasks, new seeds) run where the rows do.
    args = recipe.parse_args(["--team", "--serve", "--validate", "5"])
    single, team = (EVAL_STAGE.validation_config(args, tmp_path / "b", team=t) for t in (False, True))
    assert single.serve and team.serve and team.concurrency == 4
    assert (single.team.n_agents, single.team.rounds, team.team.n_agents, team.team.rounds) == (1, 1, 4, 3)
    assert team.tasks.split(",") == list(recipe.TRAIN_TASKS) and team.episodes == 5 and team.team.seed == 100
    assert not EVAL_STAGE.validation_config(recipe.parse_args(["--validate", "5"]), tmp_path / "b").serve
    # --validate-forms: the team on its own seeds of the multi-step training pages, served likewise.
    forms = EVAL_STAGE.validation_config(recipe.parse_args(["--team", "--serve", "--validate-forms", "20"]), tmp_path / "b",
                                         forms=True)
    assert forms.tasks.split(",") == list(EVAL_STAGE.FORM_TASKS) and set(EVAL_STAGE.FORM_TASKS) < set(recipe.TRAIN_TASKS)
    assert (forms.episodes, forms.team.seed, forms.team.n_agents, forms.serve) == (20, 200, 4, True)
    # --serve-dtype reaches every served row and the validations; the baselines run here, as always.
    args = recipe.parse_args(["--team", "--serve", "--serve-dtype", "float32", "--validate", "5"])
    rows = {name: EVAL_STAGE.eval_config(args, fields) for name, fields in recipe.systems(args, tmp_path / "m").items()}
    assert {n: c.serve_dtype for n, c in rows.items() if c.serve_dtype != "auto"}.keys() == set(rows) - {"random", "lexical"}
    assert EVAL_STAGE.validation_config(args, tmp_path / "b", team=True).serve_dtype == "float32"
    marl = MARL_STAGE.marl_config(recipe.parse_args(["--team", "--serve", "--serve-dtype", "float32", "--marl-iterations", "1"]),
                              tmp_path / "b", tmp_path / "m")
    assert marl.serve and marl.serve_dtype == "float32"  # MARL's rollouts too
    # --serve-agents merged: the model rows and the validations; baselines load no model.
    args = recipe.parse_args(["--team", "--serve", "--serve-agents", "merged", "--validate", "5"])
    rows = {name: EVAL_STAGE.eval_config(args, fields) for name, fields in recipe.systems(args, tmp_path / "m").items()}
    assert {n for n, c in rows.items() if c.serve_agents == "merged"} == set(rows) - {"random", "lexical"}
    assert EVAL_STAGE.validation_config(args, tmp_path / "b", team=True).serve_agents == "merged"
    # --serve-backend llamacpp: the same rows and validations on llama.cpp's servers.
    args = recipe.parse_args(["--team", "--serve", "--serve-backend", "llamacpp", "--validate", "5"])
    rows = {name: EVAL_STAGE.eval_config(args, fields) for name, fields in recipe.systems(args, tmp_path / "m").items()}
    assert {n for n, c in rows.items() if c.serve_backend == "llamacpp"} == set(rows) - {"random", "lexical"}
    assert EVAL_STAGE.validation_config(args, tmp_path / "b", team=True).serve_backend == "llamacpp"


def test_table_is_generated_from_results(tmp_path):
    recipe = _recipe()
    results = {"systems": {"lexical": {"successes": 41, "episodes": 200, "rate": 0.205, "ci95": [0.155, 0.266]}}}
    text = recipe.table(results)
    assert "| lexical | 41/200 = 20.5% | 15.5-26.6% | 200 |" in text
    assert "prompt tokens" not in text  # no row counted them
    (tmp_path / "results.json").write_text(json.dumps(results))
    assert recipe.main(["--out", str(tmp_path), "--table"]) == 0
    results["systems"]["trained_team"] = {"successes": 62, "episodes": 200, "rate": 0.31, "ci95": [0.25, 0.377],
                                          "prompt_tokens": 181.2}
    text = recipe.table(results)
    assert "| lexical | 41/200 = 20.5% | 15.5-26.6% | 200 |  |" in text
    assert "| trained_team | 62/200 = 31.0% | 25.0-37.7% | 200 | 181.2 |" in text


def test_plot_draws_the_headline_rows_in_order_and_refuses_a_file_without_them(tmp_path, capsys):
    recipe = _recipe()
    row = {"successes": 41, "episodes": 200, "rate": 0.205, "ci95": [0.155, 0.266]}
    results = {"systems": {"trained_team": row, "experiment_x": row, "ablation_rft": row, "lexical": row}}
    png = tmp_path / "plots" / "results.png"
    assert recipe.plot(results, png) == ["lexical", "trained_team", "ablation_rft"]  # experiments left out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    (tmp_path / "results.json").write_text(json.dumps({"systems": {"experiment_x": row}}))
    assert recipe.main(["--out", str(tmp_path), "--plot", str(tmp_path / "x.png")]) == 2
    assert capsys.readouterr().err.startswith("error: no row to plot: results.json has none of random, lexical")
    assert not (tmp_path / "x.png").exists()
    with pytest.raises(SystemExit) as stop:  # argparse's usage error
        recipe.main(["--out", str(tmp_path), "--plot", str(png), "--table"])
    assert stop.value.code == 2
    assert "--table, --paired, --plot and --timeline each read a file and exit" in capsys.readouterr().err


def test_timeline_draws_a_runs_stage_minutes_and_refuses_a_folder_without_them(tmp_path, capsys):
    recipe = _recipe()
    seconds = {"1 demonstrations": 600.0, "2 sft": 2700.0, "6 marl trained_team": 1740.0, "3 eval trained_team": 1030.0}
    png = tmp_path / "timeline.png"
    assert recipe.plot_timeline(seconds, png) == pytest.approx(6070 / 60)
    assert png.read_bytes()[:4] == b"\x89PNG"
    (tmp_path / "recipe.json").write_text(json.dumps({"seconds": seconds}))
    assert recipe.main(["--out", str(tmp_path), "--timeline", str(tmp_path / "t.png")]) == 0
    assert capsys.readouterr().out == f"{tmp_path / 't.png'}: 101.2 min of stages in {tmp_path / 'recipe.json'}\n"
    assert recipe.main(["--out", str(tmp_path / "none"), "--timeline", str(png)]) == 2
    assert capsys.readouterr().err == f"error: no {tmp_path / 'none' / 'recipe.json'}; give --out a run folder of this recipe\n"
    (tmp_path / "recipe.json").write_text(json.dumps({"seconds": {}}))
    assert recipe.main(["--out", str(tmp_path), "--timeline", str(png)]) == 2
    assert "no stage to draw: recipe.json records none yet" in capsys.readouterr().err


def test_the_readme_results_table_is_the_shipped_results_json():
    """The cookbook README's Results table is ``recipe.py --table`` of the shipped results.json, and
    the shipped bundle was made by the recipe's defaults (a figure edited by hand, or a results.json
    published without its README, fails here)."""
    recipe = _recipe()
    shipped = json.loads((CPU_RECIPE / "results.json").read_text())
    readme = (CPU_RECIPE / "README.md").read_text()
    results_section = readme[readme.index("## Results (shipped model"):]
    assert recipe.table(shipped).strip() in results_section.split("\n## ")[0]
    team = json.loads((recipe.SHIPPED / "team.json").read_text())
    # --bf16's default depends on the CPU (collabui.training._peft.default_bf16), the rest does not
    assert team["made_by"].replace(" --bf16", "") == recipe.made_by_command(recipe.parse_args([])).replace(" --bf16", "")


RANDOM_ROW = {"successes": 3, "episodes": 25, "rate": 0.12, "ci95": [0.04, 0.3], "per_task": {}}


def _fake_results(successes: int) -> dict:
    return {"overall": {"success_rate": {"successes": successes, "n": 10, "value": successes / 10,
                                         "ci95": [0.0, 1.0]},
                        "typing_loop_rate": {"successes": successes // 2, "n": 10, "value": successes / 20,
                                             "ci95": [0.0, 1.0]}},
            "counts": {"prompt_tokens_per_answer": 150.5} if successes % 2 else {},
            "breakdown": {"per_task": {"click-test": {"success_rate": {"value": successes / 10}}}}}


def test_main_adds_the_asked_rows_to_the_folders_results_and_refuses_unknown_ones_first(tmp_path, monkeypatch,
                                                                                         capsys):
    """main's orchestration, its stages replaced: an unknown --systems name is refused before
    any training; asked rows are evaluated against the trained bundle and added beside the rows
    of earlier runs; validation and the critic check land in results.json."""
    recipe = _recipe()
    monkeypatch.setattr(recipe, "train", lambda *a: pytest.fail("trained before checking --systems"))
    assert recipe.main(["--out", str(tmp_path), "--systems", "lexical,trained_sngle"]) == 2
    assert "unknown system(s) ['trained_sngle']" in capsys.readouterr().err
    (tmp_path / "results.json").write_text(json.dumps({"systems": {"random": RANDOM_ROW}}))
    evaluated = []
    monkeypatch.setattr(recipe, "train", lambda config, out, clock: out / "bundle-x")
    monkeypatch.setattr(recipe, "checks", lambda *a: {"validation": {"successes": 7}, "critic_check": {"c": 1}})
    monkeypatch.setattr(recipe, "run_facts", lambda *a: {"minutes": 1.0})
    monkeypatch.setattr(recipe, "evaluate", lambda config, name, fields, out: (
        evaluated.append((name, fields["model"])) or _fake_results(len(evaluated))))
    assert recipe.main(["--out", str(tmp_path), "--systems", "trained_single,lexical"]) == 0
    # In the recipe's row order, the trained row reading the bundle train() returned.
    assert evaluated == [("lexical", "lexical"), ("trained_single", f"trained:{tmp_path / 'bundle-x'}")]
    results = json.loads((tmp_path / "results.json").read_text())
    assert list(results["systems"]) == ["random", "lexical", "trained_single"]
    assert results["systems"]["random"] == RANDOM_ROW and results["systems"]["trained_single"]["successes"] == 2
    # A row's prompt tokens come with it when its backend counted them (evaluated first: odd, counted).
    assert results["systems"]["lexical"]["prompt_tokens"] == 150.5
    assert "prompt_tokens" not in results["systems"]["trained_single"]
    assert results["validation"] == {"successes": 7} and results["minutes"] == 1.0
    assert "eval_minutes" in results and "| trained_single | 2/10 = 20.0% |" in capsys.readouterr().out


def test_publish_row_adds_one_experiment_row_to_the_shipped_results(tmp_path, monkeypatch, capsys):
    """--publish-row NAME: the run's trained_team row joins the shipped results.json as NAME with
    the command that made it; every shipped row stays; the recipe's own row names are refused
    before any training."""
    recipe = _recipe()
    monkeypatch.setattr(recipe, "train", lambda *a: pytest.fail("trained before checking --publish-row"))
    out = tmp_path / "run"
    assert recipe.main(["--out", str(out), "--team", "--publish-row", "trained_team"]) == 2
    assert "is a row the recipe writes itself" in capsys.readouterr().err
    assert recipe.main(["--out", str(out), "--team", "--systems", "lexical", "--publish-row", "trained_team_x"]) == 2
    assert "add trained_team to --systems" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        recipe.parse_args(["--team", "--publish-row", "My Row"])
    assert "use lowercase letters, digits and _.-" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        recipe.parse_args(["--publish-row", "trained_team_x"])
    assert "give --team with it" in capsys.readouterr().err
    shipped = tmp_path / "ship"
    shipped.mkdir()
    (shipped / "results.json").write_text(json.dumps({"systems": {"random": RANDOM_ROW}, "minutes": 30.0}))
    monkeypatch.setattr(recipe, "HERE", shipped)
    monkeypatch.setattr(recipe, "train", lambda config, out, clock: out / "bundle-x")
    monkeypatch.setattr(recipe, "checks", lambda *a: {"validation_team": {"successes": 40, "episodes": 60}})
    monkeypatch.setattr(recipe, "run_facts", lambda *a: {"minutes": 12.5})
    monkeypatch.setattr(recipe, "team_figures", lambda folder: {"winner_share": 0.9})
    monkeypatch.setattr(recipe, "evaluate", lambda *a: _fake_results(7))
    assert recipe.main(["--out", str(out), "--team", "--systems", "trained_team", "--dpo-lr", "2e-4",
                        "--publish-row", "trained_team_x"]) == 0
    results = json.loads((shipped / "results.json").read_text())
    assert list(results["systems"]) == ["random", "trained_team_x"] and results["minutes"] == 30.0
    row = results["systems"]["trained_team_x"]
    assert row["successes"] == 7 and row["from"].startswith(f"{out} (")
    assert "cookbook/cpu_recipe/recipe.py" in row["from"] and "--dpo-lr 0.0002" in row["from"]
    facts = results["runs"]["trained_team_x"]
    assert facts.pop("eval_minutes") >= 0
    assert facts == {"minutes": 12.5, "validation_team": {"successes": 40, "episodes": 60},
                     "team_dynamics": {"winner_share": 0.9}}


def test_publish_keeps_the_shipped_rows_the_run_lacks_and_renames_the_shipped_models_own(tmp_path, monkeypatch,
                                                                                         capsys):
    """--publish: published rows (with ``from``) the run did not evaluate stay, in their place, with
    their figures; the shipped model's own rows give way to the run's, and with --publish-previous
    NAME stay beside them as <row>_NAME; a NAME that would overwrite a shipped row is refused
    before any training."""
    recipe = _recipe()
    with pytest.raises(SystemExit):
        recipe.parse_args(["--publish-previous", "v1"])
    assert "give --publish with it" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        recipe.parse_args(["--publish", "--publish-previous", "V 1"])
    assert "use lowercase letters, digits and _.-" in capsys.readouterr().err
    shipped = tmp_path / "ship"
    shipped.mkdir()
    old_team = {"successes": 2, "episodes": 10, "rate": 0.2, "ci95": [0.0, 1.0], "per_task": {}}
    experiment = {**old_team, "successes": 5, "from": "runs/x1: an experiment"}
    before = {"systems": {"random": {**RANDOM_ROW, "from": "v0: carried"}, "trained_team": old_team,
                          "trained_team_x1": experiment, "trained_single": old_team},
              "runs": {"trained_team_x1": {"minutes": 3.0}}, "team_dynamics": {"trained_team": {"winner_share": 0.5},
                                                                              "trained_team_x1": {"winner_share": 0.7}},
              "validation_team": {"successes": 30, "episodes": 60}, "minutes": 50.0}
    (shipped / "results.json").write_text(json.dumps(before))
    monkeypatch.setattr(recipe, "HERE", shipped)
    monkeypatch.setattr(recipe, "SHIPPED", shipped / "smollm2")

    def fake_train(config, out, clock):
        (out / "bundle-x").mkdir(parents=True, exist_ok=True)
        (out / "bundle-x" / "team.json").write_text("{}")
        return out / "bundle-x"

    monkeypatch.setattr(recipe, "train", fake_train)
    monkeypatch.setattr(recipe, "checks", lambda *a: {"validation_team": {"successes": 40, "episodes": 60}})
    monkeypatch.setattr(recipe, "run_facts", lambda *a: {"minutes": 12.5})
    monkeypatch.setattr(recipe, "team_figures", lambda folder: {"winner_share": 0.9})
    monkeypatch.setattr(recipe, "evaluate", lambda *a: _fake_results(7))
    flags = ["--team", "--systems", "trained_team", "--publish"]
    (shipped / "results.json").write_text(json.dumps({**before, "systems": {**before["systems"],
                                                                            "trained_team_v1": experiment}}))
    monkeypatch.setattr(recipe, "train", lambda *a: pytest.fail("trained before checking --publish-previous"))
    assert recipe.main(["--out", str(tmp_path / "refused"), *flags, "--publish-previous", "v1"]) == 2
    assert "already have trained_team_v1" in capsys.readouterr().err

    (shipped / "results.json").write_text(json.dumps(before))
    monkeypatch.setattr(recipe, "train", fake_train)
    assert recipe.main(["--out", str(tmp_path / "plain"), *flags]) == 0
    assert "dropped the shipped model's rows this run did not evaluate: trained_single" in capsys.readouterr().err
    results = json.loads((shipped / "results.json").read_text())
    assert list(results["systems"]) == ["random", "trained_team", "trained_team_x1"]
    assert results["systems"]["trained_team"]["successes"] == 7 and results["systems"]["random"]["from"] == "v0: carried"
    assert results["runs"] == {"trained_team_x1": {"minutes": 3.0}}
    assert results["team_dynamics"] == {"trained_team": {"winner_share": 0.9}, "trained_team_x1": {"winner_share": 0.7}}
    assert (results["minutes"], results["validation_team"]["successes"]) == (12.5, 40)
    assert (shipped / "smollm2" / "team.json").is_file()

    (shipped / "results.json").write_text(json.dumps(before))
    assert recipe.main(["--out", str(tmp_path / "kept"), *flags, "--publish-previous", "v1"]) == 0
    results = json.loads((shipped / "results.json").read_text())
    assert list(results["systems"]) == ["random", "trained_team", "trained_team_v1", "trained_team_x1",
                                        "trained_single_v1"]
    kept = results["systems"]["trained_team_v1"]
    assert kept["successes"] == 2 and kept["from"].startswith(f"v1: the model shipped until {tmp_path / 'kept'}")
    assert results["runs"]["trained_team_v1"] == {"minutes": 50.0, "validation_team": {"successes": 30, "episodes": 60},
                                                  "team_dynamics": {"winner_share": 0.5}}


def test_publish_ablations_replaces_the_shipped_marl_rows_with_one_starts(tmp_path, monkeypatch, capsys):
    """--publish-ablations: the run's MARL team (as trained_team_marl) and its ablation rows replace
    the shipped ones, each with its own MARL facts; a run without those rows is refused before any
    training, and a missing shipped file is one line, the run's own results kept."""
    recipe = _recipe()
    with pytest.raises(SystemExit):
        recipe.parse_args(["--team", "--publish-ablations"])
    assert "give --ablations with it" in capsys.readouterr().err
    flags = ["--team", "--marl-iterations", "1", "--ablations", "--publish-ablations"]
    out = tmp_path / "run"
    monkeypatch.setattr(recipe, "train", lambda *a: pytest.fail("trained before checking --publish-ablations"))
    assert recipe.main(["--out", str(out), *flags, "--systems", "trained_team"]) == 2
    assert "copies the run's ablation rows (and its trained_team row)" in capsys.readouterr().err
    shipped = tmp_path / "ship"
    shipped.mkdir()
    old = {"from": "v29m", "successes": 1, "episodes": 104}
    (shipped / "results.json").write_text(json.dumps({"systems": {
        "random": RANDOM_ROW, "trained_team_marl": old, "ablation_no_cr": old, "ablation_rft": old}}))
    monkeypatch.setattr(recipe, "HERE", shipped)
    monkeypatch.setattr(recipe, "train", lambda config, out, clock: out / "bundle-x")
    monkeypatch.setattr(recipe, "marl", lambda *a: {})
    monkeypatch.setattr(recipe, "checks", lambda *a: {"validation_team": {"successes": 40, "episodes": 60}})
    marl_facts = {"trained_team": {"minutes": 30.0}, "ablation_no_cr": {"minutes": 20.0}}
    monkeypatch.setattr(recipe, "run_facts", lambda *a: {"minutes": 30.0, "marl": marl_facts})
    monkeypatch.setattr(recipe, "team_figures", lambda folder: {"winner_share": 0.9})
    monkeypatch.setattr(recipe, "evaluate", lambda config, name, *a: _fake_results(6 if name == "trained_team" else 4))
    assert recipe.main(["--out", str(out), *flags, "--systems", "trained_team,ablation_no_cr"]) == 0
    assert "published trained_team_marl, ablation_no_cr" in capsys.readouterr().err
    results = json.loads((shipped / "results.json").read_text())
    rows = results["systems"]
    assert (rows["trained_team_marl"]["successes"], rows["ablation_no_cr"]["successes"]) == (6, 4)
    assert "--marl-iterations 1" in rows["ablation_no_cr"]["from"] and "--ablations" in rows["ablation_no_cr"]["from"]
    assert rows["ablation_rft"] == old  # not run here: kept
    assert rows["random"] == RANDOM_ROW
    assert results["runs"]["ablation_no_cr"]["marl"] == {"ablation_no_cr": {"minutes": 20.0}}
    assert "validation_team" not in results["runs"]["ablation_no_cr"]  # the start's team, not the ablation's
    assert results["runs"]["trained_team_marl"]["validation_team"] == {"successes": 40, "episodes": 60}
    # An ablation rebuilt alone joins the shipped MARL row only when that row's command is this run's.
    alone = tmp_path / "alone"
    monkeypatch.setattr(recipe, "evaluate", lambda *a: pytest.fail("evaluated before checking the shipped row"))
    rows["trained_team_marl"]["from"] = "runs/v1 (2026-01-01): cookbook/cpu_recipe/recipe.py --dpo-lr 9 --ablations"
    (shipped / "results.json").write_text(json.dumps(results))
    assert recipe.main(["--out", str(alone), *flags, "--systems", "ablation_no_cr"]) == 2
    assert "evaluate --systems trained_team in this run too" in capsys.readouterr().err
    same = rows["ablation_no_cr"]["from"].split("): ", 1)[1]
    rows["trained_team_marl"]["from"] = f"runs/v1 (2026-01-01): {same}"
    (shipped / "results.json").write_text(json.dumps(results))
    monkeypatch.setattr(recipe, "evaluate", lambda *a: _fake_results(3))
    assert recipe.main(["--out", str(alone), *flags, "--systems", "ablation_no_cr"]) == 0
    assert "published ablation_no_cr to" in capsys.readouterr().err
    again = json.loads((shipped / "results.json").read_text())["systems"]
    assert again["ablation_no_cr"]["successes"] == 3 and again["ablation_no_cr"]["from"].startswith(str(alone))
    assert again["trained_team_marl"] == rows["trained_team_marl"]  # the full run's row stays
    (shipped / "results.json").unlink()
    assert recipe.main(["--out", str(out), *flags, "--systems", "none"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "results.json are missing: restore them" in err[0]
    assert json.loads((out / "results.json").read_text())["systems"]["ablation_no_cr"]["successes"] == 4


def test_negative_counts_are_refused_with_the_flag_named(capsys):
    recipe = _recipe()
    with pytest.raises(SystemExit):
        recipe.parse_args(["--validate", "-2"])
    assert "--validate must be >= 0, got -2" in capsys.readouterr().err
    for flag in ("--team-share", "--team-other-kind", "--stateless-share"):  # before any stage runs
        with pytest.raises(SystemExit):
            recipe.parse_args([flag, "2"])
        assert f"{flag} must be between 0 and 1, got 2.0" in capsys.readouterr().err


#: recipe.json's "args" at the defaults, as the recipe wrote them before RecipeConfig existed
#: (its --no-balance flag is now --balance/--no-balance, recorded as balance); since v35 full
#: fine-tuning at lr 1e-4, shipped as a rank-48 extract; since v66 3,200 SFT rows.
DEFAULT_ARGS = {"out": "runs/recipe", "from_bundle": None, "demo_minutes": 10.0, "demo_workers": 4, "demo_seeds": 400, "sft_examples": 3200,
                "synthetic_pages": False, "team_share": 0.5, "team_other_kind": 0.0, "stateless_share": 0.5, "stateless_fields": "filled", "sft_epochs": 1.0, "balance": True, "balance_steps": True, "hindsight": 0, "lr": 1e-4, "lora_r": 32,
                "batch": 8, "lora_dropout": 0.0, "lora_from_layer": 0, "length_window": 32, "full_finetune": True, "sft_seed": 0, "sft_draws": 1,
                "extract_rank": 48, "extract_embedding_rank": 32, "element_format": "text-first", "style": "terse", "episodes": 13,
                "baseline_episodes": 25, "max_steps": 6, "eval_seed": 0, "stop_when_decided": True, "skip_stale": True, "tie_break": "independent", "critic_episodes": 6, "team": False,
                "serve": False, "serve_dtype": "auto", "serve_agents": "lora", "serve_backend": "vllm", "systems": None, "onpolicy_episodes": 0, "round2_demo_rows": 400, "onpolicy_dpo": True,
                "dpo_lr": 5e-5, "marl_iterations": 0, "marl_episodes": 2, "marl_task_episodes": (), "marl_pairs": 0, "marl_right_pairs": False,
                "marl_lost_only": False, "marl_repeat_clicks": False, "marl_skip_stale": False, "marl_swap_texts": False,
                "marl_mirror": False, "marl_element_kinds": False, "marl_pool": False, "marl_shared": False, "marl_anchor": 0.0, "marl_rehearse": 0.0, "marl_interpolate": 1.0, "marl_epochs": 1.0, "marl_rollouts_from": None,
                "marl_reuse_iterations": 1, "marl_gate": False,
                # bf16 mixed precision where this machine computes it natively (AVX512-BF16/AMX, CUDA)
                "bf16": default_bf16(),
                "ablations": False, "validate": 0, "validate_forms": 0,
                "baselines_from": None, "publish": False, "publish_previous": None, "publish_row": None, "publish_ablations": False, "table": False, "paired": None,
                "plot": None, "timeline": None}


def test_flags_and_defaults_are_the_recipes_and_land_in_the_composed_configs(tmp_path):
    recipe = _recipe()
    assert recipe.parse_args([]) == recipe.RecipeConfig()
    assert recipe.flag_values(recipe.parse_args([])) == DEFAULT_ARGS
    config = recipe.parse_args(["--demo-minutes", "1.5", "--demo-workers", "2", "--demo-seeds", "24", "--sft-epochs", "2", "--lr", "1e-4",
                           "--batch", "4", "--no-full-finetune", "--lora-r", "8", "--lora-dropout", "0.1", "--lora-from-layer", "3",
                           "--length-window", "0",
                           "--episodes", "5", "--eval-seed", "3", "--max-steps", "4", "--no-balance", "--team",
                           "--no-onpolicy-dpo", "--out", "runs/x"])
    assert (config.demo.minutes, config.demo.workers, config.demo.seeds) == (1.5, 2, 24)
    sft = config.sft
    assert (sft.num_train_epochs, sft.learning_rate, sft.per_device_train_batch_size, sft.lora_r, sft.lora_dropout,
            sft.lora_from_layer, sft.length_window) == (2.0, 1e-4, 4, 8, 0.1, 3, 0)
    assert (config.evaluation.episodes, config.evaluation.team.seed, config.evaluation.team.max_steps) == (5, 3, 4)
    assert config.evaluation.tasks.split(",") == list(HELDOUT_TASKS)
    assert (config.balance, config.teams, config.onpolicy_dpo, config.out_dir) == (False, True, False, "runs/x")
    assert recipe.flag_values(config)["lr"] == 1e-4 and recipe.flag_values(config)["team"] is True
    # SFT and the held-out team both have a seed: each flag reaches its own.
    seeded = recipe.parse_args(["--sft-seed", "1", "--eval-seed", "3"])
    assert (seeded.sft.seed, seeded.evaluation.team.seed) == (1, 3)
    assert {k: recipe.flag_values(seeded)[k] for k in ("sft_seed", "eval_seed")} == {"sft_seed": 1, "eval_seed": 3}
    # bf16 follows the machine by default; --bf16 asks for it, and SFT then trains it on the CPU.
    assert recipe.parse_args([]).sft.bf16 is default_bf16()
    forced = SFT_STAGE._sft_config(recipe.parse_args(["--bf16"]), tmp_path / "sft")
    assert forced.bf16 is True and forced.use_cpu is True  # no CUDA here
    if default_bf16():  # the switch is --bf16/--no-bf16 where it is on by default
        assert SFT_STAGE._sft_config(recipe.parse_args(["--no-bf16"]), tmp_path / "sft").bf16 is False


def test_stage_configs_are_the_ones_the_recipe_always_built(tmp_path, monkeypatch):
    """The SFT, demonstration and bundle settings at the defaults, written out as the recipe
    built them before its config was composed: a training run's behaviour does not change."""
    from collabui.training.demonstrate import DemoConfig
    from collabui.training.sft import AgentSFTConfig

    recipe = _recipe()
    config = recipe.parse_args([])
    old_sft = AgentSFTConfig(output_dir=str(tmp_path / "sft" / "trl"), num_train_epochs=1.0, learning_rate=1e-4,
                             full_finetune=True, per_device_train_batch_size=8, lora_r=32, lora_alpha=64, lora_dropout=0.0,
                             lora_target_modules=list(SFT_STAGE.ALL_LINEAR), max_length=512, seed=0,
                             lr_scheduler_type="cosine", warmup_steps=10, length_window=32,
                             train_sampling_strategy="group_by_length")
    assert SFT_STAGE._sft_config(config, tmp_path / "sft").to_dict() == old_sft.to_dict()
    window0 = SFT_STAGE._sft_config(recipe.parse_args(["--length-window", "0", "--lora-r", "8"]), tmp_path)
    assert (window0.train_sampling_strategy, window0.lora_alpha) == ("group_by_length", 16)
    seen = {}
    monkeypatch.setattr("collabui.training.demonstrate.generate_demonstrations", lambda c: seen.update(demo=c))
    monkeypatch.setattr("collabui.models.bundle.write_bundle", lambda out, **kw: seen.update(bundle=kw))
    recipe.demonstrate(config, tmp_path / "demo")
    assert seen["demo"] == DemoConfig(out_dir=str(tmp_path / "demo"), tasks=TRAIN_TASKS, seeds=400, minutes=10.0,
                                      workers=4)
    from collabui.devices.miniwob import synthetic_tasks

    recipe.demonstrate(recipe.parse_args(["--synthetic-pages"]), tmp_path / "demo")
    assert seen["demo"].tasks == (*TRAIN_TASKS, *synthetic_tasks()) and len(synthetic_tasks()) == 3
    recipe.bundle(config, tmp_path / "extract", tmp_path / "bundle")
    assert seen["bundle"]["merge"] == {"stage1": tmp_path / "extract"} and seen["bundle"]["base"] == "smollm2"
    assert seen["bundle"]["made_by"] == (
        "cookbook/cpu_recipe/recipe.py --balance-steps --batch 8" + (" --bf16" if default_bf16() else "")
        + " --demo-minutes 10.0 --demo-seeds 400 --dpo-lr 5e-05 "
        "--element-format text-first --extract-embedding-rank 32 --extract-rank 48 --full-finetune --hindsight 0 "
        "--length-window 32 --lora-dropout 0.0 --lora-from-layer 0 "
        "--lora-r 32 --lr 0.0001 --onpolicy-dpo --onpolicy-episodes 0 --round2-demo-rows 400 --sft-draws 1 --sft-epochs 1.0 "
        "--sft-examples 3200 --sft-seed 0 --stateless-fields filled --stateless-share 0.5 --style terse --team-other-kind 0.0 --team-share 0.5")
    clock = recipe._Clock(tmp_path / "recipe.json", config)
    clock.run("x", lambda: None)
    assert json.loads((tmp_path / "recipe.json").read_text())["args"] == json.loads(json.dumps(DEFAULT_ARGS))  # tuples read back as lists


def test_a_whole_model_bundle_is_never_published_and_an_extract_is(tmp_path, capsys):
    recipe = _recipe()
    with pytest.raises(SystemExit):
        recipe.parse_args(["--extract-rank", "0", "--publish"])
    assert "--extract-rank 0 bundles the whole model" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        recipe.parse_args(["--extract-rank", "0", "--onpolicy-episodes", "2"])
    assert "--extract-rank 0 makes none" in capsys.readouterr().err
    assert recipe.parse_args(["--publish"]).publish and recipe.parse_args(["--no-full-finetune", "--onpolicy-episodes", "2"])
    assert recipe.parse_args(["--onpolicy-episodes", "2"]).sft.full_finetune
    config = recipe.parse_args(["--extract-rank", "0"])
    assert config.sft.full_finetune and "--full-finetune" in recipe.made_by_command(config).split()
    model = tmp_path / "sft"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(b"w")
    out = recipe.bundle(config, model, tmp_path / "bundle")
    manifest = json.loads((out / "team.json").read_text())
    assert (manifest["base"], manifest["merge"], manifest["agents"]) == ("hf:model", [], [])
    assert (out / "model" / "model.safetensors").read_bytes() == b"w"


def test_made_by_is_a_command_the_recipe_accepts():
    """The bundle's ``made_by`` parses back to the settings that trained it (switches as
    ``--x``/``--no-x``, not ``--x True``)."""
    recipe = _recipe()
    config = recipe.parse_args(["--balance-steps", "--no-onpolicy-dpo", "--hindsight", "2", "--lr", "1e-4"])
    words = recipe.made_by_command(config).split()
    assert "--balance-steps" in words and "--no-onpolicy-dpo" in words and "True" not in words
    again = recipe.parse_args(words[1:])
    assert {k: recipe.flag_values(again)[k] for k in stage_module("recipe_config").TAUGHT} == \
        {k: recipe.flag_values(config)[k] for k in stage_module("recipe_config").TAUGHT}
    # The MARL team's, list flags included (items comma-separated; an empty list left out).
    for more in ([], ["--marl-task-episodes", "login-user-popup=18,form-sequence=9"],
                 ["--marl-right-pairs", "--marl-repeat-clicks", "--marl-swap-texts", "--marl-lost-only", "--marl-skip-stale"]):
        config = recipe.parse_args(["--team", "--marl-iterations", "1", "--marl-shared", *more])
        words = recipe.made_by_command(config, marl=True).split()
        again = recipe.parse_args(words[1:])
        assert {k: recipe.flag_values(again)[k] for k in stage_module("recipe_config").TAUGHT_MARL} == \
            {k: recipe.flag_values(config)[k] for k in stage_module("recipe_config").TAUGHT_MARL}
        assert ("--marl-task-episodes" in words) == ("--marl-task-episodes" in more)
        assert ("--marl-lost-only" in words) == ("--marl-lost-only" in more)
        assert ("--marl-swap-texts" in words) == ("--marl-swap-texts" in more)


def test_recipe_runs_as_a_script(tmp_path):
    results = {"systems": {"random": {"successes": 1, "episodes": 8, "rate": 0.125, "ci95": [0.02, 0.47]}}}
    (tmp_path / "results.json").write_text(json.dumps(results))
    done = subprocess.run([sys.executable, str(RECIPE), "--out", str(tmp_path), "--table"], capture_output=True,
                          text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert "| random | 1/8 = 12.5% |" in done.stdout


def _pair(k: int, agent: int) -> dict:
    right, wrong = "ABC"[k % 3], "ABC"[(k + 1) % 3]
    answer = 'Action: {{"action": "click", "element_id": "{}"}}'
    return {"prompt": [{"role": "user", "content": f"Task: Click button {right}.\n"
                        "< <button[A]| a> <button[B]| b> <button[C]| c> >"}],
            "chosen": [{"role": "assistant", "content": answer.format(right)}],
            "rejected": [{"role": "assistant", "content": answer.format(wrong)}],
            "agent": agent, "episode_id": f"ep{k}", "t": 0, "round": 0, "score": 1.0,
            "rejected_source": "own", "chosen_source": "verified"}


@pytest.mark.slow
def test_onpolicy_dpo_trains_one_shared_adapter_on_the_rounds_pairs(tmp_path, monkeypatch, tiny_model_dir):
    """The glue of stage 2c: the round's own-mistake pairs (whatever agent made them) train one
    adapter, agent0, on top of the round's merged SFT model; the pair count lands in round.json;
    no pair, no adapter."""
    from datasets import Dataset
    from safetensors.torch import load_file

    import collabui.models.embedded as embedded
    import collabui.training.mistake_pairs as mistake_pairs
    from collabui.training.sft import AgentSFTConfig, train_sft

    recipe = _recipe()
    monkeypatch.setattr(embedded, "embedded_model_dir", lambda: tiny_model_dir)
    sft_rows = [{"prompt": p["prompt"], "completion": p["chosen"]} for p in map(_pair, range(4), [0] * 4)]
    round_sft = tmp_path / "onpolicy" / "sft"
    train_sft(Dataset.from_list(sft_rows), base_model=tiny_model_dir, out_dir=round_sft, progress=False,
              config=AgentSFTConfig(output_dir=str(tmp_path / "trl"), max_steps=1, lora_r=4,
                                    per_device_train_batch_size=2, lora_target_modules=["q_proj"]))
    (tmp_path / "onpolicy" / "round.json").write_text(json.dumps({"visited_rows": 4}))
    pairs = [_pair(k, agent=2) for k in range(4)]
    seen = {}

    def fake_pairs(traces, labels, critic):
        seen.update(traces=traces, labels=labels, critic=critic)
        return Dataset.from_list(pairs)

    monkeypatch.setattr(mistake_pairs, "build_mistake_pairs", fake_pairs)
    args = recipe.parse_args(["--no-full-finetune", "--onpolicy-episodes", "1"])
    adapter = recipe.onpolicy_dpo(args, round_sft, tmp_path / "onpolicy")
    assert adapter == tmp_path / "onpolicy" / "dpo" / "agent0"
    assert seen == {"traces": tmp_path / "onpolicy" / "rollouts" / "traces",
                    "labels": tmp_path / "onpolicy" / "labels.jsonl", "critic": "verified"}
    assert sorted(p.name for p in (tmp_path / "onpolicy" / "dpo").iterdir() if p.name.startswith("agent")) == ["agent0"]
    lora_b = [v for k, v in load_file(str(adapter / "adapter_model.safetensors")).items() if "lora_B" in k]
    assert lora_b and any(float(v.abs().max()) > 0 for v in lora_b)  # it trained (B starts at 0)
    assert (round_sft / "merged").is_dir()  # the reference: the round's SFT model, merged
    assert json.loads((tmp_path / "onpolicy" / "round.json").read_text()) == {"visited_rows": 4, "dpo_pairs": 4}
    monkeypatch.setattr(mistake_pairs, "build_mistake_pairs", lambda *a, **k: Dataset.from_list(pairs).select([]))
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "round.json").write_text("{}")
    assert recipe.onpolicy_dpo(args, round_sft, tmp_path / "empty") is None
    assert json.loads((tmp_path / "empty" / "round.json").read_text()) == {"dpo_pairs": 0}
    assert not (tmp_path / "empty" / "dpo").exists()


def test_marl_rows_use_the_marl_teams_and_ablations_need_a_team(tmp_path, capsys):
    recipe = _recipe()
    config = recipe.parse_args(["--team", "--marl-iterations", "1", "--ablations"])
    rows = recipe.systems(config, tmp_path / "bundle", tmp_path / "marl")
    assert rows["trained_team"]["model"] == f"trained:{tmp_path / 'marl' / 'trained_team' / 'bundle'}"
    assert rows["trained_team_unshuffled"]["model"] == rows["trained_team"]["model"]
    assert rows["trained_single"]["model"] == f"trained:{tmp_path / 'bundle'}"  # the SFT model alone
    for name in ("ablation_no_cr", "ablation_no_edge_update", "ablation_rft"):
        assert rows[name]["model"] == f"trained:{tmp_path / 'marl' / name / 'bundle'}"
        assert EVAL_STAGE.eval_config(config, rows[name]).team.n_agents == 4
        assert EVAL_STAGE.eval_config(config, rows[name]).shuffle_elements
    assert "ablation_rft" not in recipe.systems(recipe.parse_args(["--team", "--marl-iterations", "1"]), tmp_path)
    for argv in (["--ablations", "--team"], ["--marl-iterations", "1", "--ablations"], ["--marl-episodes", "0"]):
        with pytest.raises(SystemExit):
            recipe.parse_args(argv)
    assert "--marl-episodes must be an integer >= 1, got 0" in capsys.readouterr().err  # MARLConfig's check
    with pytest.raises(SystemExit):  # refused before any stage runs, naming the flag
        recipe.parse_args(["--critic-episodes", "0"])
    assert "--critic-episodes must be >= 1, got 0" in capsys.readouterr().err
    full = MARL_STAGE.marl_config(config, tmp_path / "bundle", tmp_path / "marl" / "x")
    assert full.model == f"trained:{tmp_path / 'bundle'}" and full.train_tasks == TRAIN_TASKS
    assert (full.critic, full.adversary, full.objective, full.edge_update) == ("verified", "own", "dpo", True)
    assert (full.team.n_agents, full.team.rounds, full.shuffle_elements, full.eval_episodes_per_task) == (4, 3, True, 0)
    assert full.dpo["loss_type"] == ["sigmoid", "sft"] and full.dpo["lora_r"] == 8
    for name, change in MARL_STAGE.ABLATIONS.items():
        ablated = MARL_STAGE.marl_config(config, tmp_path / "bundle", tmp_path / name, **change)
        keys = ("critic", "adversary", "edge_update", "objective")
        differs = {k for k in keys if getattr(ablated, k) != getattr(full, k)}
        # one thing changed (no CR: the critic, so its pairs' source, and no own-pair options), the rest kept
        assert differs == set(change) - {"right_pairs", "repeat_clicks", "swap_texts", "lost_only"}


@pytest.mark.slow
def test_marl_stage_trains_the_team_and_each_ablation_from_one_sft_bundle(tmp_path, monkeypatch, tiny_model_dir,
                                                                          adapter_dirs):
    """The glue of stage 6 on fake pages (the reference critic stands in for the verified one,
    which needs MiniWoB++): one bundle per row, the ablations sharing iteration 0's rollouts
    where their DAG is the trained team's, the team's bundle stamped with the recipe command."""
    import collabui.training.marl as marl
    from collabui.models.bundle import read_bundle, write_bundle
    from tests.training.marl_kit import factories, new_log

    recipe = _recipe()
    start = write_bundle(tmp_path / "bundle", base=f"hf:{tiny_model_dir}", merge={"stage1": adapter_dirs["a1"]}, agents={},
                         team={"prompt_style": "trained", "max_new_tokens": 8, "element_format": "html"}, made_by="t")
    real_run, runs = marl.run_marl, []

    def small_run(config, **kw):
        import dataclasses

        from collabui.training.critic import make_critic

        runs.append(config)
        small = dataclasses.replace(config, train_tasks=("task-a",), episodes_per_task=1, concurrency=1,
                                    team=dataclasses.replace(config.team, max_steps=1, rounds=1, max_new_tokens=4),
                                    dpo={**config.dpo, "max_steps": 1, "per_device_train_batch_size": 1})
        model_factory, env_factory = factories(new_log())
        critic = make_critic("outcome" if config.critic == "outcome" else "reference")
        return real_run(small, progress=False, env_factory=env_factory, model_factory=model_factory, critic=critic)

    monkeypatch.setattr(marl, "run_marl", small_run)
    config = recipe.parse_args(["--team", "--marl-iterations", "1", "--ablations"])
    clock = recipe._Clock(tmp_path / "recipe.json", config)
    found = recipe.marl(config, start, tmp_path / "marl", clock)
    assert set(found) == {"trained_team", *MARL_STAGE.ABLATIONS} and [c.critic for c in runs] == \
        ["verified", "outcome", "verified", "verified"]
    for row, folder in found.items():
        manifest = read_bundle(folder)
        assert manifest["merge"] == ["stage1"] and len(manifest["agents"]) == 4, row
    assert "--marl-iterations 1" in read_bundle(found["trained_team"])["made_by"]
    assert runs[1].adversary == "rule"  # without CR the adversary writes the rejected answers
    assert read_bundle(found["ablation_rft"])["marl"]["objective"] == "rft"
    # No-CR and RFT reused the team's iteration-0 episodes; the fixed-DAG ablation ran its own.
    team_trace = (tmp_path / "marl" / "trained_team" / "iter0" / "traces").glob("*.jsonl")
    name = next(team_trace).name
    for row in ("ablation_no_cr", "ablation_rft"):
        assert (tmp_path / "marl" / row / "iter0" / "traces" / name).read_bytes() == \
            (tmp_path / "marl" / "trained_team" / "iter0" / "traces" / name).read_bytes()
    assert (tmp_path / "marl" / "ablation_rft" / "iter0" / "labels.jsonl").read_bytes() == \
        (tmp_path / "marl" / "trained_team" / "iter0" / "labels.jsonl").read_bytes()
    dags = {row: read_bundle(found[row])["team"]["topology"] for row in found}
    assert dags["ablation_no_edge_update"] != dags["trained_team"] == dags["ablation_rft"]
    assert set(json.loads((tmp_path / "recipe.json").read_text())["seconds"]) == {f"6 marl {r}" for r in found}
    # Grown to 2 iterations on the finished folder: the iteration it adds is timed, as its own stage.
    grown = recipe.parse_args(["--team", "--marl-iterations", "2"])
    recipe.marl(grown, start, tmp_path / "marl", recipe._Clock(tmp_path / "recipe.json", grown))
    assert (tmp_path / "marl" / "trained_team" / "iter1" / "pairs.jsonl").is_file()
    seconds = json.loads((tmp_path / "recipe.json").read_text())["seconds"]
    assert seconds["6 marl trained_team x2"] > 0 and "6 marl ablation_rft x2" not in seconds


def test_an_ablation_with_written_pairs_trains_on_as_many_per_agent_as_the_full_run(tmp_path):
    recipe = _recipe()
    report = {"iterations": [{"pairs": {"per_agent": {"0": 40, "1": 42, "2": 38, "3": 40}}}]}
    (tmp_path / "marl_report.json").write_text(json.dumps(report))
    no_cr = MARL_STAGE.ABLATIONS["ablation_no_cr"]
    assert MARL_STAGE.same_pairs_as(tmp_path, no_cr, recipe.parse_args([])) == {**no_cr, "max_pairs": 42}
    # Own-mistake ablations keep the full run's pairs as they are; a cap given by flag stays.
    assert MARL_STAGE.same_pairs_as(tmp_path, {"edge_update": False}, recipe.parse_args([])) == {"edge_update": False}
    assert MARL_STAGE.same_pairs_as(tmp_path, no_cr, recipe.parse_args(["--marl-pairs", "10"])) == no_cr


def test_clock_counts_a_finished_stage_once_and_an_interrupted_one(tmp_path, monkeypatch):
    recipe = _recipe()
    config = recipe.parse_args([])
    ticks = iter([0.0, 30.0, 100.0, 101.0, 200.0, 220.0, 300.0, 310.0, 400.0, 402.0])
    monkeypatch.setattr(recipe.time, "perf_counter", lambda: next(ticks))
    clock = recipe._Clock(tmp_path / "recipe.json", config)
    clock.run("2 sft", lambda: "model", once=True)  # trains: 30 s

    def interrupted():
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        clock.run("3 eval lexical", interrupted)  # 1 s before the interruption
    resumed = recipe._Clock(tmp_path / "recipe.json", config)
    assert resumed.run("2 sft", lambda: "model", once=True) == "model"  # only reloads: 20 s not counted
    resumed.run("3 eval lexical", lambda: None)  # finishes: 10 s
    resumed.run("3 eval lexical", lambda: None)  # not a once-stage: more episodes, 2 s
    seconds = json.loads((tmp_path / "recipe.json").read_text())["seconds"]
    assert seconds == {"2 sft": 30.0, "3 eval lexical": 13.0}


def test_full_finetune_ships_an_extract_made_once_per_model_and_ranks(tmp_path, monkeypatch, tiny_model_dir):
    """Stage 2's whole model becomes a rank-R adapter (real SVD on a tiny model); a resumed run
    reuses it, new ranks or a newer model make it again; the bundle merges it as stage1."""
    import os
    import shutil

    import collabui.training.extract as extract_module

    recipe = _recipe()
    monkeypatch.setattr("collabui.models.embedded.embedded_model_dir", lambda *a: tiny_model_dir)
    model = tmp_path / "sft"
    shutil.copytree(tiny_model_dir, model)
    made = []
    real = extract_module.extract_adapter
    monkeypatch.setattr(extract_module, "extract_adapter", lambda *a, **k: made.append(k) or real(*a, **k))
    config = recipe.parse_args(["--extract-rank", "4", "--extract-embedding-rank", "2"])
    out = recipe.extract(config, model, tmp_path / "extract")
    assert json.loads((out / "adapter_config.json").read_text())["r"] == 4 and made == [{"rank": 4, "embedding_rank": 2}]
    recipe.extract(config, model, tmp_path / "extract")
    assert len(made) == 1  # resumed: the same ranks, the same model
    recipe.extract(recipe.parse_args(["--extract-rank", "3", "--extract-embedding-rank", "2"]), model, tmp_path / "extract")
    assert len(made) == 2
    later = (tmp_path / "extract" / "extract.json").stat().st_mtime + 5
    os.utime(model / "model.safetensors", (later, later))
    recipe.extract(recipe.parse_args(["--extract-rank", "3", "--extract-embedding-rank", "2"]), model, tmp_path / "extract")
    assert len(made) == 3
    bundle = recipe.bundle(config, out, tmp_path / "bundle")
    manifest = json.loads((bundle / "team.json").read_text())
    assert (manifest["base"], manifest["merge"]) == ("smollm2", ["stage1"])
    assert (bundle / "stage1" / "adapter_model.safetensors").is_file()


@pytest.mark.slow
def test_a_fully_fine_tuned_round_continues_the_whole_model_and_ships_its_extract(tmp_path, monkeypatch,
                                                                                 tiny_model_dir):
    """Stage 2b with full fine-tuning (real SFT steps and a real extract on a tiny model; the
    rollouts and labels stubbed): training starts from stage 2's whole weights, not from its
    extract, changes them, and the round returns its own extract for 2c and the bundle."""
    import shutil

    from safetensors.torch import load_file

    import collabui.evaluation.miniwob as miniwob
    import collabui.models.embedded as embedded
    import collabui.training.critic as critic
    import collabui.training.labels as labels
    import collabui.training.mistake_pairs as mistake_pairs

    recipe = _recipe()
    monkeypatch.setattr(embedded, "embedded_model_dir", lambda *a: tiny_model_dir)
    monkeypatch.setattr(miniwob, "evaluate_miniwob", lambda *a, **k: None)
    monkeypatch.setattr(critic, "make_critic", lambda name: type("C", (), {"close": lambda self: None})())
    monkeypatch.setattr(labels, "label_traces", lambda *a, **k: None)
    visited = [{**_pair(k, agent=0), "completion": _pair(k, agent=0)["chosen"], "source": "verified"}
               for k in range(4)]
    monkeypatch.setattr(mistake_pairs, "verified_sft_rows", lambda *a, **k: visited)
    monkeypatch.setattr(SFT_STAGE, "demo_rows", lambda *a: [])
    model = tmp_path / "sft"
    shutil.copytree(tiny_model_dir, model)
    config = recipe.parse_args(["--onpolicy-episodes", "1", "--extract-rank", "4", "--extract-embedding-rank", "2",
                           "--batch", "2", "--lr", "1e-3", "--round2-demo-rows", "0"])
    (tmp_path / "onpolicy").mkdir()  # the rollouts' folder, made by the evaluation this test stubs
    out = recipe.onpolicy_round(config, tmp_path / "bundle-sft", tmp_path / "demo", model, tmp_path / "onpolicy")
    assert out == tmp_path / "onpolicy" / "extract"
    assert json.loads((out / "adapter_config.json").read_text())["r"] == 4
    start = load_file(str(model / "model.safetensors"))
    after = load_file(str(tmp_path / "onpolicy" / "sft" / "model.safetensors"))
    assert any(not after[k].equal(v) for k, v in start.items())  # the whole model trained on
    assert json.loads((tmp_path / "onpolicy" / "round.json").read_text())["visited_rows"] == 4


def test_sft_draws_average_each_seeds_model_once_and_need_full_finetuning(tmp_path, monkeypatch, tiny_model_dir,
                                                                         capsys):
    """--sft-draws K trains K seeds and ships their mean (real averaging of tiny models whose
    weights each seed moved); a resumed run averages again only when a draw is newer."""
    import os

    import torch
    from safetensors.torch import load_file

    import collabui.training.soup as soup_module
    from tests.tiny_models import moved_copy

    recipe = _recipe()
    seeds = []

    def fake_sft(config, demo, out):  # a "trained" model: the tiny one moved by the draw's seed
        if (out / "model.safetensors").is_file():  # train_sft's resume: a finished model is kept
            return out
        seeds.append(config.sft.seed)
        return moved_copy(tiny_model_dir, out, seed=config.sft.seed)

    monkeypatch.setattr(SFT_STAGE, "sft", fake_sft)
    made = []
    real = soup_module.average_models
    monkeypatch.setattr(soup_module, "average_models", lambda *a, **k: made.append(a) or real(*a, **k))
    config = recipe.parse_args(["--sft-draws", "3", "--sft-seed", "5"])
    clock = recipe._Clock(tmp_path / "recipe.json", config)
    first = fake_sft(config, tmp_path / "demo", tmp_path / "sft")
    target = recipe.soup(config, first, tmp_path, clock)
    assert seeds == [5, 6, 7] and len(made) == 1
    soup, parts = load_file(str(target / "model.safetensors")), [
        load_file(str(d / "model.safetensors")) for d in (first, tmp_path / "sft-draw2", tmp_path / "sft-draw3")]
    for key, weight in soup.items():
        assert torch.allclose(weight, sum(p[key] for p in parts) / 3, atol=1e-6), key
    recipe.soup(config, first, tmp_path, clock)
    assert len(made) == 1  # resumed: the draws are finished (clock) and the soup is newer than them
    later = (target / "soup.json").stat().st_mtime + 5
    os.utime(tmp_path / "sft-draw2" / "model.safetensors", (later, later))
    recipe.soup(config, first, tmp_path, clock)
    assert len(made) == 2
    assert "--sft-draws 3" in recipe.made_by_command(config)
    for bad, message in ((["--sft-draws", "0"], "--sft-draws must be >= 1, got 0"),
                         (["--sft-draws", "2", "--no-full-finetune"], "averages fully fine-tuned models")):
        with pytest.raises(SystemExit):
            recipe.parse_args(bad)
        assert message in capsys.readouterr().err


def _team_bundle(folder, base, *, agents=None, made_by="recipe.py --sft-seed 3"):
    from collabui.models.bundle import write_bundle

    return write_bundle(folder, base=f"hf:{base}", merge={}, agents=agents or {}, made_by=made_by,
                        team={"prompt_style": "terse", "max_new_tokens": 8, "element_format": "text-first"})


def test_from_bundle_trains_marl_on_a_copy_of_the_bundle_and_no_sft(tmp_path, monkeypatch, tiny_model_dir, capsys):
    """--from-bundle: stages 1-2 never run; MARL starts from OUT/bundle, a copy of the given
    bundle (the source is never the run's folder), and results.json names the start and its
    made_by; the MARL team's made_by is a command the recipe accepts."""
    from collabui.models.bundle import read_bundle

    recipe = _recipe()
    source = _team_bundle(tmp_path / "shipped", tiny_model_dir)
    out = tmp_path / "run"
    started = []

    def fake_marl(config, start, where, clock):
        started.append(start)
        team = _team_bundle(where / "trained_team" / "bundle", tiny_model_dir, made_by="x")
        (where / "trained_team" / "marl_report.json").write_text(json.dumps({"seconds": {"total": 90.0},
                                                                             "iterations": []}))
        recipe._stamp(team, recipe.made_by_command(config, marl=True))
        return {"trained_team": team}

    monkeypatch.setattr(recipe, "train", lambda *a: pytest.fail("--from-bundle trained an SFT model"))
    monkeypatch.setattr(recipe, "marl", fake_marl)
    monkeypatch.setattr(recipe, "checks", lambda *a: {})
    evaluated = []
    monkeypatch.setattr(recipe, "evaluate", lambda config, name, fields, where: (
        evaluated.append(fields["model"]) or _fake_results(4)))
    monkeypatch.setattr(recipe, "team_figures", lambda folder: {})
    argv = ["--out", str(out), "--from-bundle", str(source), "--team", "--marl-iterations", "1",
            "--systems", "trained_team"]
    assert recipe.main(argv) == 0
    assert started == [out / "bundle"] and read_bundle(out / "bundle")["made_by"] == "recipe.py --sft-seed 3"
    assert (out / "bundle" / "team.json").read_text() == (source / "team.json").read_text()
    assert evaluated == [f"trained:{out / 'marl' / 'trained_team' / 'bundle'}"]
    results = json.loads((out / "results.json").read_text())
    assert results["start"] == {"bundle": str(source), "made_by": "recipe.py --sft-seed 3"}
    assert results["element_format"] == "text-first" and results["systems"]["trained_team"]["successes"] == 4
    assert "demo" not in results and results["marl"]["trained_team"]["minutes"] == 1.5
    made_by = read_bundle(out / "marl" / "trained_team" / "bundle")["made_by"].split()
    assert made_by[1:3] == ["--from-bundle", str(source)] and "--marl-iterations" in made_by
    assert "--sft-examples" not in made_by  # the SFT settings were the start's, not this run's
    assert recipe.parse_args(made_by[1:]).from_bundle == str(source)


def test_a_marl_team_grown_to_more_iterations_is_measured_into_folders_of_its_own(tmp_path, monkeypatch,
                                                                                 tiny_model_dir):
    """--marl-iterations raised on a finished folder: the grown team's validation and held-out
    rows go to -x2 folders beside the first team's (which stay), and the run's row is the grown
    team's; the rows of other models keep their folders."""
    recipe = _recipe()
    source = _team_bundle(tmp_path / "shipped", tiny_model_dir)
    out = tmp_path / "run"
    monkeypatch.setattr(recipe, "marl", lambda config, start, where, clock: {
        "trained_team": _team_bundle(where / "trained_team" / "bundle", tiny_model_dir)})
    monkeypatch.setattr(recipe, "run_facts", lambda *a: {"minutes": 1.0})
    monkeypatch.setattr(recipe, "critic_check", lambda config, where: {"coverage_a": 1, "agreement": 1,
                                                                       "entries_both": 1})
    measured = []

    def fake_validate(config, model, folder, team=False, forms=False):
        assert team or not forms  # the forms' figure is the team's
        measured.append(folder.name)
        return _fake_results(len(measured))

    monkeypatch.setattr(recipe, "validate", fake_validate)
    monkeypatch.setattr(recipe, "evaluate", lambda config, folder, fields, where: (
        measured.append(f"eval/{folder}") or _fake_results(len(measured))))
    monkeypatch.setattr(recipe, "team_figures", lambda folder: {"folder": folder.name})
    argv = ["--out", str(out), "--from-bundle", str(source), "--team", "--validate", "1", "--validate-forms", "2",
            "--systems", "trained_team,trained_single"]
    assert recipe.main([*argv, "--marl-iterations", "1"]) == 0
    assert measured == ["validation", "validation-marl-team", "validation-forms-marl-team", "eval/trained_single",
                        "eval/trained_team"]
    measured.clear()
    assert recipe.main([*argv, "--marl-iterations", "2"]) == 0
    assert measured == ["validation", "validation-marl-team-x2", "validation-forms-marl-team-x2",
                        "eval/trained_single", "eval/trained_team-x2"]
    results = json.loads((out / "results.json").read_text())
    assert results["systems"]["trained_team"]["successes"] == 5 and results["validation_team"]["successes"] == 2
    assert (results["validation_forms_team"]["successes"], results["validation_forms_team"]["typing_loops"]) == (3, 1)
    assert results["team_dynamics"]["trained_team"] == {"folder": "trained_team-x2"}
    measured.clear()  # the same team at half weight: measured into its own folders beside
    assert recipe.main([*argv, "--marl-iterations", "2", "--marl-interpolate", "0.5"]) == 0
    assert measured == ["validation", "validation-marl-team-x2-w0.5", "validation-forms-marl-team-x2-w0.5",
                        "eval/trained_single", "eval/trained_team-x2-w0.5"]
    assert recipe.marl_suffix(1) == "" and recipe.marl_suffix(3) == "-x3" and recipe.marl_suffix(1, 0.5) == "-w0.5"

def test_the_marl_gate_keeps_the_sft_team_unless_marl_validates_as_well(tmp_path, monkeypatch, tiny_model_dir,
                                                                         capsys):
    """--marl-gate: the SFT team plays the MARL team's validations; a MARL team below it on the
    forms is not kept (the team row evaluates the SFT bundle into its own folder, --publish ships
    the SFT bundle), one level on both is; asked without both validations it is refused."""
    recipe = _recipe()
    source = _team_bundle(tmp_path / "shipped", tiny_model_dir)
    monkeypatch.setattr(recipe, "marl", lambda config, start, where, clock: {
        "trained_team": _team_bundle(where / "trained_team" / "bundle", tiny_model_dir)})
    monkeypatch.setattr(recipe, "run_facts", lambda *a: {"minutes": 1.0})
    monkeypatch.setattr(recipe, "critic_check", lambda config, where: {"coverage_a": 1, "agreement": 1,
                                                                       "entries_both": 1})
    monkeypatch.setattr(recipe, "team_figures", lambda folder: {})
    monkeypatch.setattr(recipe, "HERE", tmp_path / "here")
    monkeypatch.setattr(recipe, "SHIPPED", tmp_path / "here" / "smollm2")
    (tmp_path / "here").mkdir()
    validated, evaluated = [], []
    marl_forms = {"gate-low": 3, "gate-level": 4}

    def fake_validate(config, model, folder, team=False, forms=False):
        validated.append((folder.name, str(model)))
        if folder.name == "validation-forms-marl-team":
            return _fake_results(marl_forms[folder.parent.name])
        return _fake_results(4 if forms else 5)

    monkeypatch.setattr(recipe, "validate", fake_validate)
    monkeypatch.setattr(recipe, "evaluate", lambda config, folder, fields, where: (
        evaluated.append((folder, fields["model"])) or _fake_results(6)))
    argv = ["--from-bundle", str(source), "--team", "--validate", "1", "--validate-forms", "2", "--marl-iterations",
            "1", "--marl-gate", "--systems", "trained_team"]

    out = tmp_path / "gate-low"
    assert recipe.main(["--out", str(out), *argv, "--publish"]) == 0
    assert [name for name, _ in validated] == ["validation", "validation-marl-team", "validation-forms-marl-team",
                                               "validation-team", "validation-forms-team"]
    assert validated[3][1] == validated[4][1] == str(out / "bundle")  # the SFT team played the same pages
    assert evaluated == [("trained_team-sft", f"trained:{out / 'bundle'}")]
    gate = json.loads((out / "results.json").read_text())["marl_gate"]
    assert gate == {"sft_team": {"validation": 5, "forms": 4}, "marl_team": {"validation": 5, "forms": 3},
                    "episodes": {"validation": 10, "forms": 10}, "kept": "sft"}
    assert (tmp_path / "here" / "smollm2" / "team.json").read_text() == (out / "bundle" / "team.json").read_text()
    assert "keeps the SFT team" in capsys.readouterr().err

    validated.clear(), evaluated.clear()
    out = tmp_path / "gate-level"
    assert recipe.main(["--out", str(out), *argv, "--publish-row", "trained_team_gated"]) == 0
    assert evaluated == [("trained_team", f"trained:{out / 'marl' / 'trained_team' / 'bundle'}")]
    published = json.loads((tmp_path / "here" / "results.json").read_text())
    assert published["systems"]["trained_team_gated"]["from"].endswith("--marl-gate")
    assert published["runs"]["trained_team_gated"]["marl_gate"]["kept"] == "marl"
    assert json.loads((out / "results.json").read_text())["marl_gate"]["kept"] == "marl"

    with pytest.raises(SystemExit):
        recipe.parse_args(["--marl-iterations", "1", "--team", "--validate", "1", "--marl-gate"])
    assert "--marl-gate compares the MARL team with the SFT team on both validations" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        recipe.parse_args([*argv, "--validate-forms", "2", "--ablations", "--publish-ablations"])
    assert "--marl-gate may replace that team by the SFT team" in capsys.readouterr().err


def test_from_bundle_refuses_what_it_cannot_start_from(tmp_path, tiny_model_dir, adapter_dirs, capsys):
    """A folder without a bundle, MARL from a bundle whose agents have adapters already, and
    stage-2 settings beside --from-bundle: refused with the problem named, nothing trained."""
    recipe = _recipe()
    assert recipe.main(["--out", str(tmp_path / "a"), "--from-bundle", str(tmp_path), "--systems", "none"]) == 2
    assert "error:" in capsys.readouterr().err and not (tmp_path / "a" / "bundle").exists()
    team = _team_bundle(tmp_path / "agents", tiny_model_dir, agents={"agent0": adapter_dirs["a1"]})
    argv = ["--out", str(tmp_path / "b"), "--from-bundle", f"trained:{team}", "--marl-iterations", "1",
            "--systems", "none"]
    assert recipe.main(argv) == 2
    assert "per-agent adapters" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        recipe.parse_args(["--from-bundle", "smollm2-trained", "--onpolicy-episodes", "2"])
    assert "--from-bundle starts from a trained model" in capsys.readouterr().err


def test_ablations_train_the_rows_systems_asks_for(tmp_path):
    """--ablations with --systems naming ablation rows trains those alone (a session can add one
    row at a time); naming none trains every ablation; the facts list the runs made so far."""
    recipe = _recipe()
    picked = recipe.parse_args(["--team", "--marl-iterations", "1", "--ablations", "--systems", "trained_team,ablation_rft"])
    assert list(MARL_STAGE.trained_ablations(picked)) == ["ablation_rft"]
    every = recipe.parse_args(["--team", "--marl-iterations", "1", "--ablations", "--systems", "trained_team"])
    assert list(MARL_STAGE.trained_ablations(every)) == list(MARL_STAGE.ABLATIONS)
    assert MARL_STAGE.trained_ablations(recipe.parse_args(["--team", "--marl-iterations", "1"])) == {}
    for row in ("trained_team", "ablation_no_cr"):
        (tmp_path / row).mkdir()
        (tmp_path / row / "marl_report.json").write_text(json.dumps({"seconds": {"total": 60.0}, "iterations": []}))
    assert list(MARL_STAGE.marl_runs(tmp_path)) == ["trained_team", "ablation_no_cr"]


def _small_marl_stage(recipe, monkeypatch, logs):
    """Stage 6 as the recipe configures it, shrunk to one fake one-step task on the tiny model
    (the reference critic stands in for the verified one); each run's calls go to a new log."""
    import dataclasses

    import collabui.training.marl as marl
    from collabui.training.critic import make_critic
    from tests.training.marl_kit import factories, new_log

    real_config, real_run = MARL_STAGE.marl_config, marl.run_marl

    def small_config(config, start, out, **change):
        full = real_config(config, start, out, **change)
        # one episode at the recipe's default (2), one fewer than asked for otherwise
        return dataclasses.replace(full, train_tasks=("task-a",), episodes_per_task=max(1, full.episodes_per_task - 1),
                                   task_episodes=(), concurrency=1,
                                   team=dataclasses.replace(full.team, max_steps=1, rounds=1, max_new_tokens=4),
                                   dpo={**full.dpo, "max_steps": 1, "per_device_train_batch_size": 1})

    def small_run(config, **kw):
        logs.append(new_log())
        model_factory, env_factory = factories(logs[-1])
        return real_run(config, progress=False, env_factory=env_factory, model_factory=model_factory,
                        critic=make_critic("reference"))

    monkeypatch.setattr(MARL_STAGE, "marl_config", small_config)
    monkeypatch.setattr(marl, "run_marl", small_run)


def test_marl_rollouts_from_another_run_trains_another_update_on_its_episodes(tmp_path, monkeypatch, tiny_model_dir,
                                                                             adapter_dirs, capsys):
    """--marl-rollouts-from: a second run (another learning rate and epochs) trains on the first
    run's iteration-0 episodes and labels, copied, without rolling out again; its made_by names
    the update. Refused with the reason: no MARL run there, another bundle, other episodes."""
    from collabui.models.bundle import read_bundle, write_bundle

    recipe, logs = _recipe(), []
    _small_marl_stage(recipe, monkeypatch, logs)

    def bundle(folder, adapter="a1", made_by="recipe.py"):
        return write_bundle(folder, base=f"hf:{tiny_model_dir}", merge={"stage1": adapter_dirs[adapter]}, agents={},
                            team={"prompt_style": "trained", "max_new_tokens": 8, "element_format": "html"},
                            made_by=made_by)

    def stage(argv, run):
        config = recipe.parse_args(["--team", "--marl-iterations", "1", *argv])
        start = bundle(run / "bundle", **({"adapter": "a2"} if run.name == "other" else {}), made_by=run.name)
        return recipe.marl(config, start, run / "marl", recipe._Clock(run / "recipe.json", config))

    first = tmp_path / "first"
    stage([], first)
    assert logs[0]["requests"] > 0
    sweep = ["--dpo-lr", "1e-3", "--marl-epochs", "2", "--marl-shared", "--marl-rollouts-from", str(first)]
    found = stage(sweep, tmp_path / "sweep")
    assert logs[1]["requests"] == 0  # the episodes were copied, not rolled out again
    for name in ("rollouts.jsonl", "labels.jsonl", *(f"traces/{t.name}" for t in (first / "marl" / "trained_team" /
                                                                                    "iter0" / "traces").iterdir())):
        assert (tmp_path / "sweep" / "marl" / "trained_team" / "iter0" / name).read_bytes() == \
            (first / "marl" / "trained_team" / "iter0" / name).read_bytes(), name
    state = json.loads((tmp_path / "sweep" / "marl" / "trained_team" / "state.json").read_text())
    assert (state["config"]["dpo"]["learning_rate"], state["config"]["dpo"]["num_train_epochs"]) == (1e-3, 2.0)
    made_by = read_bundle(found["trained_team"])["made_by"]
    assert "--dpo-lr 0.001" in made_by and "--marl-epochs 2.0" in made_by and "--marl-shared" in made_by
    assert state["config"]["shared_adapter"] is True  # an update setting: the per-agent run's episodes serve it
    assert recipe.parse_args(made_by.split()[1:]).marl_epochs == 2.0 and "rollouts-from" not in made_by

    refusals = {"no MARL run": (["--marl-rollouts-from", str(tmp_path / "sweep" / "marl")], tmp_path / "x"),
                "another bundle": (sweep, tmp_path / "other"),
                "episodes differ (team.seed": ([*sweep, "--eval-seed", "5"], tmp_path / "y"),
                # another vote plays other episodes
                "episodes differ (team.skip_stale": ([*sweep, "--marl-skip-stale"], tmp_path / "z")}
    for reason, (argv, run) in refusals.items():
        with pytest.raises(recipe.ConfigError, match=re.escape(reason)):
            stage(argv, run)
    assert len(logs) == 2  # nothing trained after a refusal
    # More episodes than the first run's grow its rollouts: its episode copied, the next one played.
    grown = tmp_path / "grown"
    stage([*sweep, "--marl-episodes", "3"], grown)
    assert logs[2]["requests"] > 0
    ours, theirs = (run / "marl" / "trained_team" / "iter0" for run in (grown, first))
    assert [json.loads(line)["episode_id"] for line in (ours / "rollouts.jsonl").read_text().splitlines()] == \
        ["iter0-task-a-0", "iter0-task-a-1"]
    assert (ours / "traces" / "iter0-task-a-0.jsonl").read_bytes() == (theirs / "traces" / "iter0-task-a-0.jsonl").read_bytes()
    # Fewer than the reused run's: refused (the update would learn from episodes its flags do not name).
    with pytest.raises(recipe.ConfigError, match="it rolled out 2 episodes of task-a, more than the 1 asked for"):
        stage(["--marl-rollouts-from", str(grown)], tmp_path / "fewer")
    assert len(logs) == 3
    for argv in (["--marl-epochs", "0"], ["--marl-rollouts-from", str(first)]):
        with pytest.raises(SystemExit):
            recipe.parse_args(["--team", *argv] if argv[0] != "--marl-epochs" else ["--marl-iterations", "1", *argv])
    err = capsys.readouterr().err
    assert "--marl-epochs must be > 0" in err and "give --marl-iterations N" in err


def test_marl_reuse_iterations_copies_later_iterations_episodes_too(tmp_path, monkeypatch, tiny_model_dir,
                                                                  adapter_dirs, capsys):
    """--marl-reuse-iterations 2: a two-iteration sweep plays no episode of its own (iteration 1's
    are the first run's, copied); with the default 1 it rolls iteration 1 out itself. Asking for
    iterations the run lacks, the flag without --marl-rollouts-from, or --marl-element-kinds with
    nothing to balance (no --marl-mirror, no --marl-pairs) is refused."""
    from collabui.models.bundle import read_bundle, write_bundle

    recipe, logs = _recipe(), []
    _small_marl_stage(recipe, monkeypatch, logs)

    def stage(argv, run):
        config = recipe.parse_args(["--team", *argv])
        start = write_bundle(run / "bundle", base=f"hf:{tiny_model_dir}", merge={"stage1": adapter_dirs["a1"]},
                             agents={}, team={"prompt_style": "trained", "max_new_tokens": 8, "element_format": "html"},
                             made_by="recipe.py")
        return recipe.marl(config, start, run / "marl", recipe._Clock(run / "recipe.json", config))

    first = tmp_path / "first"
    stage(["--marl-iterations", "2"], first)
    sweep = ["--marl-iterations", "2", "--dpo-lr", "1e-3", "--marl-rollouts-from", str(first)]
    found = stage([*sweep, "--marl-reuse-iterations", "2"], tmp_path / "both")
    assert logs[1]["requests"] == 0
    # iteration 1 learnt from the first run's episodes: the command that reproduces it names them
    assert read_bundle(found["trained_team"])["made_by"].endswith(
        f"--marl-rollouts-from {first} --marl-reuse-iterations 2")
    ours, theirs = (run / "marl" / "trained_team" / "iter1" for run in (tmp_path / "both", first))
    assert (ours / "rollouts.jsonl").read_bytes() == (theirs / "rollouts.jsonl").read_bytes()
    assert (ours / "labels.jsonl").read_bytes() == (theirs / "labels.jsonl").read_bytes()
    stage(sweep, tmp_path / "one")
    assert logs[2]["requests"] > 0  # iteration 1 played by this run's own updated team
    (theirs / "rollouts.jsonl").unlink()  # as if the first run stopped before iteration 1's episodes
    with pytest.raises(recipe.ConfigError, match="iteration 1 has not rolled out"):
        stage([*sweep, "--marl-reuse-iterations", "2"], tmp_path / "refused")
    assert len(logs) == 3
    for argv in (["--marl-iterations", "2", "--marl-reuse-iterations", "2"], [*sweep, "--marl-reuse-iterations", "3"],
                 ["--marl-iterations", "1", "--marl-element-kinds"]):
        with pytest.raises(SystemExit):
            recipe.parse_args(["--team", *argv])
    err = capsys.readouterr().err
    assert "give --marl-rollouts-from RUN with it" in err and "between 1 and --marl-iterations (2), got 3" in err
    assert "--marl-element-kinds balances pairs within --marl-mirror or --marl-pairs" in err


def test_a_stage_refusing_its_folder_ends_the_run_with_one_line_and_exit_2(tmp_path, tiny_model_dir, monkeypatch,
                                                                          capsys):
    """A ConfigError after training (a stage's folder holding another model's run) is a one-line
    error and exit code 2, not a traceback; what the run made before it stays."""
    recipe = _recipe()
    source = _team_bundle(tmp_path / "shipped", tiny_model_dir)

    def refuse(*a, **kw):
        raise recipe.ConfigError("runs/x/validation holds a run with other model; use another --out")

    monkeypatch.setattr(recipe, "checks", refuse)
    out = tmp_path / "run"
    assert recipe.main(["--out", str(out), "--from-bundle", str(source), "--validate", "1", "--systems", "none"]) == 2
    err = capsys.readouterr().err
    assert "error: runs/x/validation holds a run with other model" in err and "Traceback" not in err
    assert (out / "bundle" / "team.json").is_file()


def test_stop_when_decided_reaches_the_team_rows_but_not_the_arbiter_singles_or_marl(tmp_path):
    recipe = _recipe()
    args = recipe.parse_args(["--team", "--marl-iterations", "1"])  # the default
    rows = {name: EVAL_STAGE.eval_config(args, fields) for name, fields in recipe.systems(args, tmp_path / "m").items()}
    stops = {name for name, c in rows.items() if c.team.stop_when_decided}
    assert stops == {"base_team", "trained_team", "trained_team_unshuffled"}
    marl = MARL_STAGE.marl_config(args, tmp_path / "b", tmp_path / "m")
    assert not marl.team.stop_when_decided  # MARL labels every entry
    every = recipe.parse_args(["--team", "--no-stop-when-decided"])
    assert not any(EVAL_STAGE.eval_config(every, f).team.stop_when_decided
                   for f in recipe.systems(every, tmp_path / "m").values())


def test_skip_stale_reaches_every_team_row_and_the_team_validations_but_not_singles_or_marl(tmp_path):
    recipe = _recipe()
    args = recipe.parse_args(["--team", "--marl-iterations", "1", "--validate", "1", "--validate-forms", "1"])  # the default
    rows = {name: EVAL_STAGE.eval_config(args, fields) for name, fields in recipe.systems(args, tmp_path / "m").items()}
    assert {name for name, c in rows.items() if c.team.skip_stale} == {
        "base_team", "trained_team", "trained_team_unshuffled", "trained_team_arbiter"}
    assert EVAL_STAGE.validation_config(args, tmp_path, team=True).team.skip_stale
    assert EVAL_STAGE.validation_config(args, tmp_path, team=True, forms=True).team.skip_stale
    assert not EVAL_STAGE.validation_config(args, tmp_path).team.skip_stale
    assert not MARL_STAGE.marl_config(args, tmp_path / "b", tmp_path / "m").team.skip_stale  # rollouts as trained
    plain = recipe.parse_args(["--team", "--no-skip-stale"])
    assert not any(EVAL_STAGE.eval_config(plain, f).team.skip_stale for f in recipe.systems(plain, tmp_path / "m").values())


def test_tie_break_reaches_every_team_row_and_the_team_validations_but_not_singles_or_marl(tmp_path):
    recipe = _recipe()
    args = recipe.parse_args(["--team", "--marl-iterations", "1", "--validate", "1", "--validate-forms", "1"])  # the default
    rows = {name: EVAL_STAGE.eval_config(args, fields) for name, fields in recipe.systems(args, tmp_path / "m").items()}
    teams = {name for name, c in rows.items() if c.team.n_agents > 1}
    assert {name for name, c in rows.items() if c.team.tie_break == "independent"} == teams
    assert {"trained_team", "trained_team_arbiter", "base_team"} <= teams
    assert EVAL_STAGE.validation_config(args, tmp_path, team=True).team.tie_break == "independent"
    assert EVAL_STAGE.validation_config(args, tmp_path, team=True, forms=True).team.tie_break == "independent"
    assert EVAL_STAGE.validation_config(args, tmp_path).team.tie_break == "lowest-id"
    assert MARL_STAGE.marl_config(args, tmp_path / "b", tmp_path / "m").team.tie_break == "lowest-id"
    voted = recipe.parse_args(["--team", "--marl-iterations", "1", "--marl-skip-stale"])
    assert MARL_STAGE.marl_config(voted, tmp_path / "b", tmp_path / "m").team.tie_break == "independent"
    plain = recipe.parse_args(["--team", "--tie-break", "lowest-id"])
    assert {c.team.tie_break for c in (EVAL_STAGE.eval_config(plain, f) for f in recipe.systems(plain, tmp_path / "m").values())} == {"lowest-id"}
    with pytest.raises(SystemExit):
        recipe.parse_args(["--tie-break", "coin"])


def test_marl_update_flags_reach_the_marl_config(tmp_path):
    recipe = _recipe()
    marl = MARL_STAGE.marl_config(recipe.parse_args(["--team", "--marl-iterations", "1", "--marl-shared", "--marl-mirror",
                                                "--marl-pairs", "7", "--marl-anchor", "1.5"]), tmp_path / "b", tmp_path / "m")
    assert (marl.shared_adapter, marl.mirror_corrections, marl.max_pairs, marl.anchor) == (True, True, 7, 1.5)
    assert not MARL_STAGE.marl_config(recipe.parse_args(["--team", "--marl-iterations", "1"]), tmp_path / "b",
                                      tmp_path / "m").shared_adapter  # the paper's per-agent adapters by default
    # Every pair option on at once still builds each ablation (no_cr's rule adversary drops right pairs).
    every = recipe.parse_args(["--team", "--marl-iterations", "1", "--marl-right-pairs", "--marl-mirror", "--marl-pairs", "7",
                          "--marl-element-kinds", "--marl-anchor", "1", "--marl-shared", "--marl-pool",
                          "--marl-repeat-clicks", "--marl-swap-texts", "--marl-lost-only", "--marl-skip-stale"])
    for name, change in MARL_STAGE.ABLATIONS.items():
        built = MARL_STAGE.marl_config(every, tmp_path / "b", tmp_path / name, **change)
        assert (built.mirror_corrections, built.element_kinds, built.anchor) == (True, True, 1.0)
        own = name != "ablation_no_cr"
        assert (built.right_pairs, built.repeat_clicks, built.swap_texts, built.lost_only) == (own, own, own, own)
        assert built.team.skip_stale  # every row's rollouts vote as the evaluated team does
    # The paper's vote in MARL's rollouts by default, whatever the evaluated teams do.
    assert recipe.parse_args(["--team", "--marl-iterations", "1"]).evaluation.team.skip_stale
    assert not marl.team.skip_stale
    with pytest.raises(recipe.ConfigError, match="--no-skip-stale evaluates them with the paper's"):
        dataclasses.replace(every, evaluation=dataclasses.replace(
            every.evaluation, team=dataclasses.replace(every.evaluation.team, skip_stale=False)))


def test_marl_rehearse_writes_the_sft_rows_once_and_names_them_in_every_marl_config(tmp_path):
    """--marl-rehearse: the rows stage 1 trained on (the first --sft-examples of the demo rows, in
    the agents' format), written into the run's marl/ folder for every MARL run to draw from."""
    from tests.training.test_hindsight import ROW

    recipe = _recipe()
    config = recipe.parse_args(["--team", "--marl-iterations", "1", "--marl-rehearse", "0.5", "--sft-examples", "3"])
    demo, marl = tmp_path / "run" / "demo", tmp_path / "run" / "marl"
    with pytest.raises(ConfigError, match="has no steps.jsonl; delete its demo_stats.json to demonstrate again"):
        MARL_STAGE.write_rehearsal(config, demo, marl / MARL_STAGE.REHEARSAL_FILE)
    demo.mkdir(parents=True)
    steps = [{**ROW, "seed": seed, "rendering": rendering} for seed in (1, 2) for rendering in ("page", "rendering-2")]
    (demo / "steps.jsonl").write_text("".join(json.dumps(r) + "\n" for r in steps))
    path = MARL_STAGE.write_rehearsal(config, demo, marl / MARL_STAGE.REHEARSAL_FILE)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    expected = SFT_STAGE.demo_rows(config, demo)[:3]
    assert [(r["prompt"], r["completion"]) for r in rows] == [(e["prompt"], e["completion"]) for e in expected]
    assert 'Click on the "yes" button.' in rows[0]["prompt"][-1]["content"]
    built = MARL_STAGE.marl_config(config, tmp_path / "b", marl / "trained_team")
    assert (built.rehearse, built.rehearsal) == (0.5, str(path))
    assert MARL_STAGE.marl_config(config, tmp_path / "b", marl / "ablation_rft", objective="rft").rehearsal == str(path)
    path.write_text("kept\n")  # written once: a resumed run rehearses the rows it began with
    assert MARL_STAGE.write_rehearsal(config, demo, path).read_text() == "kept\n"
    assert "--marl-rehearse 0.5" in recipe.made_by_command(config, marl=True)


def test_marl_rehearse_from_a_bundle_runs_the_demonstration_stage_once_when_the_run_has_none(tmp_path, monkeypatch):
    """The shipped bundle has no start run whose demo/ could be copied in: a --from-bundle run with
    --marl-rehearse demonstrates first, at the recipe's settings, and a resumed run does not again."""
    from tests.training.test_hindsight import ROW

    recipe = _recipe()
    config = recipe.parse_args(["--team", "--from-bundle", "smollm2-trained", "--marl-iterations", "1",
                           "--marl-rehearse", "0.5", "--sft-examples", "2"])
    searched = []

    def search(demo_config):  # the search itself: tests/training/test_verified.py
        searched.append(demo_config)
        out = Path(demo_config.out_dir)
        out.mkdir(parents=True)
        (out / "steps.jsonl").write_text("".join(json.dumps({**ROW, "seed": seed}) + "\n" for seed in (1, 2)))
        (out / "demo_stats.json").write_text("{}")

    monkeypatch.setattr("collabui.training.demonstrate.generate_demonstrations", search)
    run = tmp_path / "run"
    clock = recipe._Clock(run / "recipe.json", config)
    for _ in range(2):
        demo = MARL_STAGE.rehearsal_demo(config, run / "demo", clock)
        assert len(searched) == 1 and demo == run / "demo"
    assert (searched[0].out_dir, searched[0].tasks, searched[0].minutes) == (str(run / "demo"), TRAIN_TASKS, 10.0)
    assert "1 demonstrations" in clock.data["seconds"]
    path = MARL_STAGE.write_rehearsal(config, demo, run / "marl" / MARL_STAGE.REHEARSAL_FILE)
    assert len(path.read_text().splitlines()) == 2


def test_the_recipe_composes_marl_config_its_flags_help_and_checks(capsys):
    """The --marl-* pair options are MARLConfig's fields under the recipe's names: their help is
    MARLConfig's, and a bad value is refused by MARLConfig's own check, named by the recipe's flag."""
    recipe = _recipe()
    from collabui.training.marl_config import MARLConfig

    helps = {f.name: f.metadata["help"] for f in dataclasses.fields(MARLConfig)}
    ap, flags = stage_module("recipe_config").parser()
    actions = {a.dest: a for a in ap._actions}
    for name in MARL_STAGE.MARL_FLAGS:
        assert flags[f"marl.{name}"].startswith("marl_")
        assert actions[name].help.startswith(helps[name][:40].replace("%", "%%"))
    assert recipe.parse_args(["--marl-pairs", "5"]).marl.max_pairs == 5
    for argv, said in ((["--marl-anchor", "-1"], "--marl-anchor must be a number >= 0"),
                       (["--marl-pairs", "-2"], "--marl-pairs must be an integer >= 0, got -2")):
        with pytest.raises(SystemExit):
            recipe.parse_args(argv)
        assert said in capsys.readouterr().err


def test_serve_backend_auto_reaches_every_served_row_and_marl(tmp_path):
    recipe = _recipe()
    args = recipe.parse_args(["--team", "--serve", "--serve-backend", "auto", "--marl-iterations", "1", "--validate", "3"])
    rows = {name: EVAL_STAGE.eval_config(args, fields) for name, fields in recipe.systems(args, tmp_path / "m").items()}
    assert {n for n, c in rows.items() if c.serve_backend == "auto"} == set(rows) - {"random", "lexical"}
    assert EVAL_STAGE.validation_config(args, tmp_path / "b", team=True).serve_backend == "auto"
    assert MARL_STAGE.marl_config(args, tmp_path / "b", tmp_path / "m").serve_backend == "auto"


@pytest.mark.browser
def test_sigterm_stops_the_recipe_keeping_the_stage_seconds(tmp_path):
    """A stopped run (SIGTERM: a CI, a shell's kill) goes through every finally: the stage it
    stopped in keeps its seconds in recipe.json (the resumed run adds to them), and the exit is 143."""
    child = subprocess.Popen([sys.executable, str(RECIPE), "--out", str(tmp_path), "--from-bundle", "smollm2-trained",
                              "--validate", "0", "--systems", "random", "--baseline-episodes", "2"],
                             stderr=subprocess.PIPE, text=True)
    try:
        seen = []
        for line in child.stderr:  # real browsers play the critic check's random episodes
            seen.append(line)
            if line.startswith("[recipe] 4 critic check ..."):
                break
        else:
            pytest.fail("the recipe ended before its critic check:\n" + "".join(seen))
        time.sleep(3)
        child.send_signal(signal.SIGTERM)
        rest = child.stderr.read()
        assert child.wait(timeout=120) == 143, rest
    finally:
        child.kill()
    assert f"stopped (SIGTERM); the same command resumes the run in {tmp_path}" in rest
    seconds = json.loads((tmp_path / "recipe.json").read_text())["seconds"]
    assert seconds["4 critic check"] >= 3


def test_a_failure_after_a_swallowed_signal_is_a_stop_not_a_crash(tmp_path, monkeypatch, capsys):
    """A SIGTERM whose Interrupted was swallowed (raised inside an import lock's callback: seen in
    CI) leaves a step that fails next; the run still says it stopped and exits 143."""
    from collabui.cli import stopping

    recipe = _recipe()

    def browser_gone(*_args: object) -> None:
        raise RuntimeError("the browser did not answer within 43 s")

    monkeypatch.setattr(recipe, "_run", browser_gone)
    argv = ["--out", str(tmp_path), "--systems", "none"]
    with pytest.raises(RuntimeError, match="did not answer"):  # no signal: a failure stays a failure
        recipe.main(argv)
    monkeypatch.setattr(stopping, "_first", [signal.SIGTERM])
    assert recipe.main(argv) == 143
    err = capsys.readouterr().err
    assert "while stopping: RuntimeError: the browser did not answer" in err
    assert f"stopped (SIGTERM); the same command resumes the run in {tmp_path}" in err


def test_a_swallowed_signal_stops_the_recipe_at_the_next_stage_edge(tmp_path, monkeypatch, capsys):
    """A SIGTERM whose Interrupted was swallowed inside a stage that then finished (nothing failed
    after it) stops the recipe before its next stage, keeping the finished stage's seconds: the
    recipe has no watchdog to end it otherwise."""
    from collabui.cli import stopping

    recipe = _recipe()
    ran = []

    def swallowed() -> None:
        ran.append("search")
        stopping._first.append(signal.SIGTERM)  # what the handler records before raising Interrupted

    def stages(config, out, names) -> None:
        clock = recipe._Clock(out / "recipe.json", config)
        clock.run("1 search", swallowed)
        clock.run("2 sft", lambda: ran.append("sft"))

    monkeypatch.setattr(stopping, "_first", [])
    monkeypatch.setattr(recipe, "_run", stages)
    assert recipe.main(["--out", str(tmp_path), "--systems", "none"]) == 143
    assert ran == ["search"]
    assert "1 search" in json.loads((tmp_path / "recipe.json").read_text())["seconds"]
    assert f"stopped (SIGTERM); the same command resumes the run in {tmp_path}" in capsys.readouterr().err


def test_rows_keep_each_episodes_outcome_and_pair_from_them_as_their_folders_do(tmp_path, capsys):
    """A row keeps its episodes' outcomes (real MiniWoB++ runs of the two baselines), so two rows
    pair from results.json exactly as their run folders pair (`collabui eval compare`) after the
    folders are gone; a row without outcomes, or a bad --paired, is one line and exit 2."""
    from collabui.evaluation.miniwob import MiniWoBEvalConfig, evaluate_miniwob
    from collabui.evaluation.paired import paired_from_folders

    recipe = _recipe()
    rows = {}
    for model in ("random", "lexical"):
        config = MiniWoBEvalConfig(tasks="click-button,click-link,focus-text", episodes=3, model=model)
        done = evaluate_miniwob(config, tmp_path / model, progress=False)
        rows[model] = EVAL_STAGE.row(done, tmp_path / model)
        kept = rows[model]["outcomes"]
        assert sorted(kept) == ["click-button", "click-link", "focus-text"]
        assert all(len(k["seeds"]) == len(k["solved"]) == 3 for k in kept.values())
        assert sum(k["solved"].count("1") for k in kept.values()) == rows[model]["successes"]
    assert rows["lexical"]["successes"] > rows["random"]["successes"]  # else the pairing below shows nothing
    results = {"systems": {**rows, "old": {k: v for k, v in rows["random"].items() if k != "outcomes"}}}
    found = EVAL_STAGE.paired_rows(results, "random", "lexical")
    assert found == paired_from_folders(tmp_path / "random", tmp_path / "lexical")
    (tmp_path / "results.json").write_text(json.dumps(results))
    assert recipe.main(["--out", str(tmp_path), "--paired", "random,lexical"]) == 0
    out = capsys.readouterr().out
    assert "A = random, B = lexical" in out
    assert out.splitlines()[-1].split() == ["all", "9", *(str(found[k]) for k in ("a", "b", "both", "only_a",
                                            "only_b", "neither")), f"{found['p_value']:.4f}"]
    for bad, said in [("random", "two row names"), ("random,lexcal", "no row 'lexcal'"),
                      ("old,lexical", "old: this row keeps no per-episode outcomes")]:
        assert recipe.main(["--out", str(tmp_path), "--paired", bad]) == 2
        err = capsys.readouterr().err
        assert said in err and err.count("\n") == 1, err
    assert "outcomes" not in EVAL_STAGE.row(done)  # no folder given: the figures alone
    assert EVAL_STAGE.episode_records(results["systems"]["old"]) == []
    with pytest.raises(SystemExit):
        recipe.parse_args(["--table", "--paired", "random,lexical"])
    assert "give one of them" in capsys.readouterr().err
