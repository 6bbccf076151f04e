"""``recipe.py --baselines-from RUN``: the rows no training changes come from another run's
folders (real MiniWoB++ episodes of the random and lexical baselines), checked before training."""

import json
from pathlib import Path

import pytest

from tests.cookbook.scripts import load_script, stage_module

ROWS = ["--systems", "random,lexical", "--baseline-episodes", "1"]


@pytest.fixture
def recipe(monkeypatch):
    """The recipe with training, checks and run facts replaced: only the held-out rows run."""
    module = load_script("recipe")
    monkeypatch.setattr(module, "train", lambda config, out, clock: out / "bundle")
    monkeypatch.setattr(module, "checks", lambda *a: {})
    monkeypatch.setattr(module, "run_facts", lambda *a: {"minutes": 0.0})
    return module


def _episodes(run: Path, row: str) -> list[dict]:
    return [json.loads(line) for line in (run / "eval" / row / "episodes.jsonl").read_text().splitlines()]


@pytest.mark.browser
def test_baseline_rows_resume_from_another_run_and_say_so(tmp_path, recipe, monkeypatch, capsys):
    first, second = tmp_path / "first", tmp_path / "second"
    assert recipe.main(["--out", str(first), *ROWS]) == 0
    assert len(_episodes(first, "random")) == 8  # one episode of each held-out task

    assert recipe.main(["--out", str(second), "--baselines-from", str(first), *ROWS]) == 0
    rows = json.loads((second / "results.json").read_text())["systems"]
    before = json.loads((first / "results.json").read_text())["systems"]
    for name in ("random", "lexical"):
        # Resumed from the copy: the same episodes, none run again, and the row says where it came from.
        assert _episodes(second, name) == _episodes(first, name)
        assert rows[name]["successes"] == before[name]["successes"]
        assert rows[name]["outcomes"] == before[name]["outcomes"]
        assert rows[name]["carried_from"] == f"{first / 'eval' / name} (--baselines-from)"
        assert "carried_from" not in before[name]

    # The same command again (a resumed run) keeps saying it.
    assert recipe.main(["--out", str(second), "--baselines-from", str(first), *ROWS]) == 0
    assert json.loads((second / "results.json").read_text())["systems"]["lexical"]["carried_from"].startswith(str(first))


def test_a_baseline_row_run_otherwise_or_missing_is_refused_before_training(tmp_path, recipe, monkeypatch, capsys):
    source = tmp_path / "source"
    fields = recipe.systems(recipe.parse_args(["--out", str(source)]), source / "bundle")
    config = recipe.parse_args(["--out", str(source), "--baseline-episodes", "1"])
    from collabui.evaluation.miniwob_folder import check_out_dir

    # A finished random row of that run, as the harness leaves it (its fingerprint and results).
    folder = source / "eval" / "random"
    check_out_dir(folder, stage_module("recipe_eval").eval_config(config, fields["random"]))
    (folder / "results.json").write_text("{}")
    monkeypatch.setattr(recipe, "train", lambda *a: pytest.fail("trained before checking --baselines-from"))

    out = str(tmp_path / "out")
    assert recipe.main(["--out", out, "--baselines-from", str(source), "--systems", "random", "--eval-seed", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: --baselines-from {source}: its random row was run with other seed")
    assert len(err.splitlines()) == 1
    assert recipe.main(["--out", out, "--baselines-from", str(source), "--systems", "random,lexical"]) == 2
    assert f"has no finished lexical row ({source / 'eval' / 'lexical'}/results.json)" in capsys.readouterr().err
    assert not (tmp_path / "out" / "eval").exists()
