"""The combined training report (`collabui train report`), `evaluate_model`, `merge_adapter`,
and the MARL options the CPU recipe relies on (compact prompts, old run folders)."""

import json

import pytest

from collabui.config import TeamConfig
from collabui.errors import ConfigError
from collabui.training.marl import MARLConfig, evaluate_model
from collabui.training.run_report import (
    collect_training_report,
    render_markdown,
    write_training_report,
)
from tests.training.marl_kit import factories as _factories
from tests.training.marl_kit import new_log as _log
from tests.training.marl_kit import run_small as _run
from tests.training.marl_kit import small_config as _config


def test_report_gathers_marl_dpo_and_standalone_evaluations(base_dir, tmp_path):
    run = tmp_path / "run"
    model_factory, env_factory = _factories(_log())
    config = _config(base_dir, run / "marl")
    base = evaluate_model(config, f"hf:{base_dir}", run / "base_eval", tag="base", progress=False,
                          env_factory=env_factory, model_factory=model_factory)
    assert base["episodes"] == 1 and base["per_task"]["task-b"]["successes"] == 1
    _run(config, _log())

    report = collect_training_report(run)
    labels = [e["label"] for e in report["evaluations"]]
    assert labels == ["base_eval", "marl/before", "marl/iter0"]  # the order the stages finished
    assert all(e["ci95"][0] <= e["success_rate"] <= e["ci95"][1] for e in report["evaluations"])
    [dpo] = report["dpo"]
    assert dpo["label"] == "marl/iter0/adapters" and [a["status"] for a in dpo["agents"]] == ["trained"] * 2
    assert all(a["loss"] and a["final_margin"] is not None for a in dpo["agents"])
    [marl] = report["marl"]
    assert marl["iterations"][0]["rewarded"] == 2 and marl["iterations"][0]["pairs"] == {"0": 1, "1": 1}

    md = render_markdown(report)
    assert "| base_eval | 1/1 (100%)" in md and "## DPO per agent" in md and "## MARL: marl" in md
    paths = write_training_report(run, tmp_path / "report")
    assert json.loads(paths["json"].read_text())["evaluations"][0]["label"] == "base_eval"
    assert paths["png"].read_bytes()[:4] == b"\x89PNG"


def test_evaluate_model_uses_the_marl_episodes(base_dir, tmp_path):
    """Same task seeds as run_marl's own `before` evaluation: the traces name the same seeds."""
    model_factory, env_factory = _factories(_log())
    config = _config(base_dir, tmp_path / "marl", eval_episodes_per_task=2)
    evaluate_model(config, f"hf:{base_dir}", tmp_path / "base", progress=False,
                   env_factory=env_factory, model_factory=model_factory)
    _run(config, _log())

    def seeds(manifest):
        return [json.loads(line)["seed"] for line in manifest.read_text().splitlines()]

    assert seeds(tmp_path / "base" / "eval.jsonl") == seeds(tmp_path / "marl" / "before" / "eval.jsonl")


def test_report_cli_and_bad_folder(base_dir, tmp_path, capsys):
    from collabui.cli import main

    _run(_config(base_dir, tmp_path / "marl"), _log())
    assert main(["train", "report", str(tmp_path), "--no-plot"]) == 0
    out = capsys.readouterr().out
    assert "# Training report" in out and "marl/iter0" in out
    assert not (tmp_path / "training_report.png").exists() and (tmp_path / "training_report.md").is_file()
    with pytest.raises(ConfigError, match="holds no evaluation"):
        collect_training_report(tmp_path / "marl" / "iter0" / "traces")
    assert main(["train", "report", str(tmp_path / "missing")]) == 2
    assert "is not a folder" in capsys.readouterr().err


def test_compact_prompts_reach_the_agents(base_dir, tmp_path):
    log = _log()
    seen = []
    model_factory, env_factory = _factories(log)

    def spying_factory(base, adapters):
        model = model_factory(base, adapters)
        inner = model.generate
        model.generate = lambda requests: (seen.extend(requests), inner(requests))[1]
        return model

    config = _config(base_dir, tmp_path / "run", prompt_style="compact")
    evaluate_model(config, f"hf:{base_dir}", tmp_path / "e", progress=False, env_factory=env_factory,
                   model_factory=spying_factory)
    system = seen[0].messages[0]["content"]
    assert "Actions: click(element_id)" in system and "Available actions (JSON)" not in system
    with pytest.raises(ConfigError, match="prompt_style"):
        MARLConfig(team=TeamConfig(prompt_style="verbose"))


def test_a_run_folder_from_before_a_new_option_still_resumes(base_dir, tmp_path):
    out = tmp_path / "run"
    _run(_config(base_dir, out), _log())
    state = json.loads((out / "state.json").read_text())
    # As written before the team was nested (its fields flat) and before prompt_style and
    # task_episodes existed.
    team = state["config"].pop("team")
    del state["config"]["task_episodes"]
    state["config"].update({k: team[k] for k in ("n_agents", "rounds", "max_steps", "max_new_tokens", "topology",
                                                 "seed")})
    (out / "state.json").write_text(json.dumps(state))
    again = _log()
    assert _run(_config(base_dir, out), again).complete and again["requests"] == 0


def test_merge_adapter_folds_lora_into_a_full_model(base_dir, tmp_path):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from collabui.training.sft import merge_adapter

    model = AutoModelForCausalLM.from_pretrained(base_dir)
    peft_model = get_peft_model(model, LoraConfig(r=2, target_modules=["q_proj"], init_lora_weights=False))
    peft_model.save_pretrained(tmp_path / "adapter")
    merged = merge_adapter(base_dir, tmp_path / "adapter")
    assert merged == tmp_path / "adapter" / "merged" and (merged / "config.json").is_file()
    base = AutoModelForCausalLM.from_pretrained(base_dir)
    folded = AutoModelForCausalLM.from_pretrained(merged)
    name = "model.layers.0.self_attn.q_proj.weight"
    assert not torch.equal(base.state_dict()[name], folded.state_dict()[name])
    assert merge_adapter(base_dir, tmp_path / "adapter") == merged  # idempotent
    with pytest.raises(ConfigError, match="not a LoRA adapter folder"):
        merge_adapter(base_dir, tmp_path)
