"""The CPU recipe's configuration: valid tasks, held-out tasks disjoint from training, and a
critic that knows every training task (a recipe whose critic abstains everywhere trains nothing)."""

import importlib.util
from pathlib import Path

from collabui.devices.miniwob import miniwob_tasks
from collabui.training.oracles import ORACLE_TASKS

RECIPE = Path(__file__).resolve().parents[2] / "cookbook" / "cpu_recipe" / "recipe.py"


def _recipe():
    spec = importlib.util.spec_from_file_location("cpu_recipe", RECIPE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_default_recipe_config_is_valid_and_the_oracle_knows_its_training_tasks(tmp_path):
    recipe = _recipe()
    config = recipe.marl_config(recipe._args([]), "smollm2", tmp_path)
    known = set(miniwob_tasks())
    assert set(config.train_tasks) <= known and set(config.eval_tasks) <= known
    assert not set(config.train_tasks) & set(config.eval_tasks)
    assert set(config.train_tasks) <= set(ORACLE_TASKS) and config.critic == "oracle"
    assert config.prompt_style == "compact" and config.out_dir == str(tmp_path / "marl")
    assert config.dpo_config(tmp_path / "trl").max_steps == 4


def test_recipe_flags_reach_the_config(tmp_path):
    recipe = _recipe()
    args = recipe._args(["--agents", "4", "--rounds", "3", "--iterations", "1", "--eval-tasks", "click-tab"])
    config = recipe.marl_config(args, "hf:/x", tmp_path)
    assert (config.n_agents, config.rounds, config.iterations, config.eval_tasks) == (4, 3, 1, ("click-tab",))
