"""The CPU recipe's configuration: valid and disjoint task lists, every evaluated system a valid
evaluation on shuffled held-out pages, and the README table rendered from results.json."""

import importlib.util
import json
from pathlib import Path

import pytest

from collabui.devices.miniwob import miniwob_tasks
from collabui.training.task_lists import HELDOUT_TASKS, TRAIN_TASKS

RECIPE = Path(__file__).resolve().parents[2] / "cookbook" / "cpu_recipe" / "recipe.py"


def _recipe():
    spec = importlib.util.spec_from_file_location("cpu_recipe", RECIPE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_task_lists_are_real_and_disjoint():
    known = set(miniwob_tasks())
    assert set(TRAIN_TASKS) <= known and set(HELDOUT_TASKS) <= known
    assert not set(TRAIN_TASKS) & set(HELDOUT_TASKS)
    assert len(TRAIN_TASKS) == 20 and len(HELDOUT_TASKS) == 8


def test_every_system_is_a_valid_shuffled_heldout_evaluation(tmp_path):
    recipe = _recipe()
    args = recipe._args(["--team"])
    rows = recipe.systems(args, tmp_path / "merged")
    assert {"random", "lexical", "base_single", "trained_single", "base_team", "trained_team"} <= set(rows)
    assert "trained_team_unshuffled" in rows
    for name, fields in rows.items():
        config = recipe.eval_config(args, fields)
        assert config.shuffle_elements == (name != "trained_team_unshuffled")
        assert config.tasks.split(",") == list(HELDOUT_TASKS)
        # Trained models read the format they learned; the others the html their prompts show.
        assert config.element_format == (args.element_format if name.startswith("trained") else "html")
    # Trained rows load the recipe's bundle, whose own prompt style the team applies (auto).
    assert rows["trained_single"]["model"] == f"trained:{tmp_path / 'merged'}"
    assert "prompt_style" not in rows["trained_single"]["team"] and rows["base_single"]["team"]["prompt_style"] == "react"
    assert rows["random"]["episodes"] >= 25 and args.episodes * len(HELDOUT_TASKS) >= 100
    shapes = {name: (c.team.n_agents, c.team.rounds) for name, c in
              ((n, recipe.eval_config(args, f)) for n, f in rows.items())}
    assert shapes["random"] == shapes["lexical"] == shapes["trained_single"] == (1, 1)  # baselines: one agent
    assert shapes["trained_team"] == (4, 3)
    team = recipe.eval_config(args, rows["trained_single"]).team
    assert (team.seed, team.max_steps, team.max_new_tokens) == (args.eval_seed, args.max_steps, 128)
    rollouts = recipe._on_training_tasks(args, tmp_path / "merged", seed=5000, episodes=2)
    assert (rollouts.team.seed, rollouts.team.n_agents, rollouts.team.max_new_tokens) == (5000, 1, 96)


def test_table_is_generated_from_results(tmp_path):
    recipe = _recipe()
    results = {"systems": {"lexical": {"successes": 41, "episodes": 200, "rate": 0.205, "ci95": [0.155, 0.266]}}}
    text = recipe.table(results)
    assert "| lexical | 41/200 = 20.5% | 15.5-26.6% | 200 |" in text
    (tmp_path / "results.json").write_text(json.dumps(results))
    assert recipe.main(["--out", str(tmp_path), "--table"]) == 0


def test_negative_counts_are_refused_with_the_flag_named(capsys):
    recipe = _recipe()
    with pytest.raises(SystemExit):
        recipe._args(["--validate", "-2"])
    assert "--validate must be >= 0, got -2" in capsys.readouterr().err


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
    args = recipe._args(["--onpolicy-episodes", "1"])
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
