"""Stage-1 SFT with LoRA, the RFT ablation: tiny random Llama (fast), one real SmolLM2 run (slow)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from collabui.errors import ConfigError
from collabui.training._peft import default_bf16
from collabui.training.dpo import load_team_model
from collabui.training.sft import (
    MERGED_DIR,
    SFT_DONE_MARKER,
    AgentSFTConfig,
    length_window_order,
    rft_dataset_from_pairs,
    train_agents_sft,
    train_sft,
)

SYSTEM = "You operate a web browser. Answer with a Thought line and an Action line."


def _row(k: int, agent: int = 0) -> dict:
    target = "ABC"[k % 3]
    return {
        "prompt": [{"role": "system", "content": SYSTEM},
                   {"role": "user", "content": f"Task: Click button {target}.\nCurrent screen:\n"
                                               "< <button[A]| a> <button[B]| b> <button[C]| c> >"}],
        "completion": [{"role": "assistant", "content": f"Thought: It is {target}.\n"
                                                        f'Action: {{"action": "click", "element_id": "{target}"}}'}],
        "agent": agent,
    }


def _ds(rows: list[dict]):
    from datasets import Dataset

    return Dataset.from_list(rows)


def _config(tmp_path: Path, **kw) -> AgentSFTConfig:
    base = {"output_dir": str(tmp_path / "trl"), "max_steps": 2, "per_device_train_batch_size": 2,
            "learning_rate": 1e-2, "lora_r": 4, "max_length": 256, "seed": 0,
            "lora_target_modules": ["q_proj", "v_proj"]}
    return AgentSFTConfig(**{**base, **kw})


def _weights(folder: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(folder / "adapter_model.safetensors"))


def test_config_validation(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="output_dir"):
        AgentSFTConfig()
    with pytest.raises(ConfigError, match="completion_only_loss"):
        AgentSFTConfig(output_dir=str(tmp_path), completion_only_loss=False)
    config = AgentSFTConfig(output_dir=str(tmp_path))
    assert config.completion_only_loss is True
    assert config.bf16 is default_bf16() and config.use_cpu is config.bf16  # no CUDA here
    assert config.lora_config().r == 16


def test_length_window_order_mixes_and_sorts() -> None:
    """Every row once; within each batch lengths come from one sorted window; batches are not
    sorted globally (so tasks of similar length do not fill whole stretches of training)."""
    lengths = [(k * 37) % 101 for k in range(200)]
    order = length_window_order(lengths, batch_size=8, window=32, seed=3)
    assert sorted(order) == list(range(200))
    batches = [order[k:k + 8] for k in range(0, 200, 8)]
    assert all([lengths[i] for i in b] == sorted(lengths[i] for i in b) for b in batches)
    maxima = [max(lengths[i] for i in b) for b in batches]
    assert maxima != sorted(maxima) and maxima != sorted(maxima, reverse=True)
    # Padding: within-window sorting pads far less than a random order does.
    def padded(o: list[int]) -> int:
        return sum(max(lengths[i] for i in o[k:k + 8]) * len(o[k:k + 8]) for k in range(0, len(o), 8))
    assert padded(order) < 0.9 * padded(length_window_order(lengths, batch_size=8, window=8, seed=3))
    assert order == length_window_order(lengths, batch_size=8, window=32, seed=3)  # seeded
    assert order != length_window_order(lengths, batch_size=8, window=32, seed=4)


def test_length_window_config(tmp_path: Path) -> None:
    assert _config(tmp_path, length_window=16).train_sampling_strategy == "sequential"
    assert _config(tmp_path).train_sampling_strategy != "sequential"
    with pytest.raises(ConfigError, match="length_window"):
        _config(tmp_path, length_window=-1)


def test_collator_masks_prompt_tokens(base_dir: Path, tmp_path: Path) -> None:
    """TRL with our config: labels are -100 on every prompt token, the ids on the completion."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTTrainer

    tokenizer = AutoTokenizer.from_pretrained(base_dir)
    model = AutoModelForCausalLM.from_pretrained(base_dir)
    rows = _ds([_row(k) for k in range(2)])
    trainer = SFTTrainer(model=model, args=_config(tmp_path), train_dataset=rows.select_columns(["prompt", "completion"]),
                         processing_class=tokenizer)
    batch = next(iter(trainer.get_train_dataloader()))
    for k in range(2):
        ids, labels = batch["input_ids"][k].tolist(), batch["labels"][k].tolist()
        row = rows[k]
        prompt = tokenizer.apply_chat_template(row["prompt"], tokenize=True, return_dict=True,
                                               add_generation_prompt=True)["input_ids"]
        n = len(prompt)
        assert ids[:n] == list(prompt)
        assert all(label == -100 for label in labels[:n])
        trained = [t for t, label in zip(ids, labels, strict=True) if label != -100]
        text = tokenizer.decode(trained)
        assert 'Action: {"action": "click"' in text and "Task:" not in text
        assert len(trained) > 5


def _loss_and_grads(trainer, inputs) -> tuple[float, dict]:
    model = trainer.model
    model.zero_grad()
    loss = trainer.compute_loss(model, dict(inputs))
    loss.backward()
    return float(loss.detach()), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("lora", [True, False])
def test_compact_lm_head_gives_trls_loss_and_gradients(base_dir: Path, tmp_path: Path, lora: bool) -> None:
    """The answer-only LM head gives TRL's loss, gradients, entropy and accuracy (LoRA or every
    weight), on padded rows; removing it (restore_base) gives TRL's own forward back."""
    import torch
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTTrainer

    from collabui.training._compact_head import compact_lm_head

    tokenizer = AutoTokenizer.from_pretrained(base_dir)
    rows = _ds([_row(k) for k in range(3)] + [{**_row(1), "completion": [
        {"role": "assistant", "content": "Thought: a longer answer than the others, so rows pad.\n"
                                         'Action: {"action": "click", "element_id": "B"}'}]}])
    peft = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False) if lora else None
    base = AutoModelForCausalLM.from_pretrained(base_dir)
    trainer = SFTTrainer(model=base, args=_config(tmp_path, per_device_train_batch_size=4),
                         train_dataset=rows.select_columns(["prompt", "completion"]), processing_class=tokenizer,
                         peft_config=peft)
    inputs = trainer._prepare_inputs(next(iter(trainer.get_train_dataloader())))
    assert (inputs["attention_mask"] == 0).any()  # padded rows are part of the check
    trainer.model.train()
    theirs, theirs_grads = _loss_and_grads(trainer, inputs)
    assert compact_lm_head(trainer) is True
    ours, ours_grads = _loss_and_grads(trainer, inputs)
    assert ours == pytest.approx(theirs, rel=1e-5) and ours > 0.1
    assert ours_grads.keys() == theirs_grads.keys() and ours_grads
    # LoRA: only adapter weights get gradients; full fine-tuning: every layer's.
    assert all("lora_" in n for n in ours_grads) if lora else len(ours_grads) > 10
    for name, grad in ours_grads.items():
        torch.testing.assert_close(grad, theirs_grads[name], rtol=1e-4, atol=1e-6)
    metrics = trainer._metrics["train"]
    assert metrics["entropy"][0] == pytest.approx(metrics["entropy"][1], rel=1e-4)
    assert metrics["mean_token_accuracy"][0] == pytest.approx(metrics["mean_token_accuracy"][1])
    # Without fused_lm_head the model is the plain causal LM (generation is unchanged).
    plain = trainer.model(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"])
    assert plain.logits.shape[-1] == len(tokenizer)
    if lora:  # the next adapter starts from the class's own forward
        from collabui.training._peft import restore_base

        restore_base(trainer.accelerator.unwrap_model(trainer.model), base)
        assert "forward" not in base.__dict__


def test_compact_lm_head_keeps_trls_head_for_scaled_logits(base_dir: Path, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTTrainer

    from collabui.training._compact_head import compact_lm_head

    model = AutoModelForCausalLM.from_pretrained(base_dir)
    model.config.final_logit_softcapping = 30.0  # a head TRL caps: not ours to replace
    trainer = SFTTrainer(model=model, args=_config(tmp_path), processing_class=AutoTokenizer.from_pretrained(base_dir),
                         train_dataset=_ds([_row(0)]).select_columns(["prompt", "completion"]))
    patched = model.__dict__["forward"]
    assert compact_lm_head(trainer) is False and model.__dict__["forward"] is patched


def test_compact_lm_head_leaves_trls_head_where_it_is_compact_already(base_dir: Path, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTTrainer

    from collabui.training import _compact_head

    model = AutoModelForCausalLM.from_pretrained(base_dir)
    trainer = SFTTrainer(model=model, args=_config(tmp_path), processing_class=AutoTokenizer.from_pretrained(base_dir),
                         train_dataset=_ds([_row(0)]).select_columns(["prompt", "completion"]))
    patched = model.__dict__["forward"]
    # As on CUDA: TRL's Triton kernel already skips the unlabelled positions, in vocabulary tiles.
    monkeypatch.setattr(_compact_head, "_COMPACT_ALREADY", ("cpu",))
    assert _compact_head.compact_lm_head(trainer) is False and model.__dict__["forward"] is patched


def test_train_sft_adapter_resume_merge(base_dir: Path, tmp_path: Path) -> None:
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM

    out = tmp_path / "sft"
    before = {k: v.clone() for k, v in AutoModelForCausalLM.from_pretrained(base_dir).state_dict().items()}
    rows = _ds([_row(k) for k in range(4)])
    report = train_sft(rows, base_model=base_dir, out_dir=out, config=_config(tmp_path), merge=True,
                       progress=False)
    assert report.status == "trained" and report.steps == 2 and report.n_used == 4
    assert (out / SFT_DONE_MARKER).is_file() and (out / "adapter_config.json").is_file()
    assert LoraConfig.from_pretrained(str(out)).r == 4
    weights = _weights(out)
    lora_b = [v for k, v in weights.items() if "lora_B" in k]
    assert lora_b and any(float(v.abs().max()) > 0 for v in lora_b)  # B starts at 0: it moved
    # The base folder is untouched.
    after = AutoModelForCausalLM.from_pretrained(base_dir).state_dict()
    assert all((after[k] == v).all() for k, v in before.items())
    # The merged model loads and differs from the base in the LoRA-wrapped projections.
    merged = AutoModelForCausalLM.from_pretrained(out / MERGED_DIR).state_dict()
    q = "model.layers.0.self_attn.q_proj.weight"
    assert not (merged[q] == before[q]).all()
    assert (merged["model.layers.0.mlp.up_proj.weight"] == before["model.layers.0.mlp.up_proj.weight"]).all()
    assert json.loads((out / "sft_metrics.json").read_text())["merged_path"] == str(out / MERGED_DIR)
    # Resume: a finished adapter is not trained again.
    stamp = (out / "adapter_model.safetensors").stat().st_mtime_ns
    again = train_sft(rows, base_model=base_dir, out_dir=out, config=_config(tmp_path), merge=True,
                      progress=False)
    assert again.status == "resumed" and again.steps == 2
    assert (out / "adapter_model.safetensors").stat().st_mtime_ns == stamp


def test_lora_from_layer_trains_only_the_layers_above_it(base_dir: Path, tmp_path: Path) -> None:
    """LoRA from layer 1 of the tiny model's 2: the adapter holds layer 1's projections only, and
    they moved (the backward pass stops above layer 0, which trains nothing)."""
    from peft import LoraConfig

    out = tmp_path / "sft"
    report = train_sft(_ds([_row(k) for k in range(4)]), base_model=base_dir, out_dir=out,
                       config=_config(tmp_path, lora_from_layer=1), progress=False)
    assert report.status == "trained"
    assert LoraConfig.from_pretrained(str(out)).layers_to_transform == [1]
    assert json.loads((out / "sft_metrics.json").read_text())["config"]["lora_from_layer"] == 1
    weights = _weights(out)
    assert weights and all(".layers.1." in k for k in weights)
    assert any(float(v.abs().max()) > 0 for k, v in weights.items() if "lora_B" in k)


def test_lora_from_layer_is_checked(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="lora_from_layer must be >= 0"):
        _config(tmp_path, lora_from_layer=-1)
    with pytest.raises(ConfigError, match="drop one of the two"):
        _config(tmp_path, lora_from_layer=1, full_finetune=True)
    config = _config(tmp_path, lora_from_layer=2)
    with pytest.raises(ConfigError, match="leaves no decoder layer to train .*2 layers"):
        config.lora_config(layers=2)
    assert config.lora_config(layers=5).layers_to_transform == [2, 3, 4]
    assert _config(tmp_path).lora_config(layers=5).layers_to_transform is None  # 0: every layer


def test_full_finetune_trains_every_weight_into_a_model_folder(base_dir: Path, tmp_path: Path) -> None:
    """full_finetune: the output is a whole model (weights + tokenizer) whose every layer moved,
    loadable as a bundle's base; the base folder and the loaded base stay untouched."""
    from transformers import AutoModelForCausalLM

    from collabui.models.bundle import bundle_fingerprint, load_bundle, write_bundle_manifest

    out = tmp_path / "full"
    before = AutoModelForCausalLM.from_pretrained(base_dir).state_dict()
    rows = _ds([_row(k) for k in range(4)])
    report = train_sft(rows, base_model=base_dir, out_dir=out, config=_config(tmp_path, full_finetune=True),
                       progress=False)  # verify_base: the loaded base did not change either
    assert report.status == "trained" and report.steps == 2 and report.merged_path == str(out)
    assert not (out / "adapter_config.json").is_file() and (out / SFT_DONE_MARKER).is_file()
    trained = AutoModelForCausalLM.from_pretrained(out).state_dict()
    for name in ("model.layers.0.self_attn.q_proj.weight", "model.layers.0.mlp.up_proj.weight"):
        assert not (trained[name] == before[name]).all(), name  # LoRA on q/v would leave up_proj
    assert all((AutoModelForCausalLM.from_pretrained(base_dir).state_dict()[k] == v).all() for k, v in before.items())
    # A bundle carries it inside (base "hf:model", relative to the bundle) and loads it.
    bundle = tmp_path / "bundle"
    import shutil

    shutil.copytree(out, bundle / "model")
    write_bundle_manifest(bundle, base="hf:model", merge=[], agents=[], team={"prompt_style": "trained"})
    model = load_bundle(bundle)
    assert model.team_defaults["prompt_style"] == "trained"
    first = bundle_fingerprint(bundle)
    (bundle / "model" / "model.safetensors").write_bytes(b"other weights")
    assert bundle_fingerprint(bundle) != first  # the weights inside count
    again = train_sft(rows, base_model=base_dir, out_dir=out, config=_config(tmp_path, full_finetune=True),
                      progress=False)
    assert again.status == "resumed" and again.merged_path == str(out)
    with pytest.raises(ConfigError, match="full_finetune trains the whole model"):
        train_sft(rows, base_model=base_dir, out_dir=tmp_path / "x", merge=True,
                  config=_config(tmp_path, full_finetune=True), progress=False)


def test_overlong_rows_dropped_and_init_adapter(base_dir: Path, tmp_path: Path) -> None:
    rows = [_row(k) for k in range(3)]
    rows[0]["prompt"][1]["content"] += " filler" * 300
    first = train_sft(_ds(rows), base_model=base_dir, out_dir=tmp_path / "a", config=_config(tmp_path),
                      progress=False)
    assert first.n_dropped == 1 and first.n_used == 2
    second = train_sft(_ds(rows), base_model=base_dir, out_dir=tmp_path / "b", config=_config(tmp_path),
                       init_adapter=tmp_path / "a", progress=False)
    assert second.init_from == str(tmp_path / "a")
    a, b = _weights(tmp_path / "a"), _weights(tmp_path / "b")
    assert a.keys() == b.keys() and any(not (a[k] == b[k]).all() for k in a)


def test_rft_dataset_keeps_rewarded_rows_only() -> None:
    from datasets import Dataset

    def pair(agent: int, score: float | None, text: str, source: str = "rule") -> dict:
        return {"prompt": [{"role": "user", "content": f"p{agent}"}],
                "chosen": [{"role": "assistant", "content": text}],
                "rejected": [{"role": "assistant", "content": "bad"}], "agent": agent,
                "episode_id": "e", "t": 0, "round": 0, "score": score, "rejected_source": source}

    # An own-mistake pair scores its rejected entry (0.0); its chosen side is verified right.
    ds = Dataset.from_list([pair(0, 1.0, "good0"), pair(0, 1.0, "good0"), pair(1, 0.2, "low"),
                            pair(1, 0.9, "good1"), pair(2, 0.0, "verified2", source="own")])
    rft = rft_dataset_from_pairs(ds)
    assert rft["agent"] == [0, 1, 2]
    assert [c[0]["content"] for c in rft["completion"]] == ["good0", "good1", "verified2"]
    assert "rejected" not in rft.column_names and all(s >= 0.5 for s in rft["score"])
    with pytest.raises(ConfigError, match="chosen"):
        rft_dataset_from_pairs(Dataset.from_list([{"prompt": "x"}]))


def test_train_agents_sft_layout_loads_as_team(base_dir: Path, tmp_path: Path) -> None:
    rows = _ds([_row(k, agent=k % 2) for k in range(4)])
    out = tmp_path / "rft"
    reports = train_agents_sft(rows, base_model=base_dir, out_dir=out, config=_config(tmp_path, max_steps=1),
                               progress=False)
    assert [r.status for r in reports] == ["trained", "trained"]
    assert (out / "agent0" / SFT_DONE_MARKER).is_file() and (out / "agent1" / SFT_DONE_MARKER).is_file()
    assert _weights(out / "agent0").keys() == _weights(out / "agent1").keys()
    model = load_team_model(base_dir, out)
    assert set(model.adapters) == {"agent0", "agent1"}
    again = train_agents_sft(rows, base_model=base_dir, out_dir=out, config=_config(tmp_path, max_steps=1),
                             progress=False)
    assert [r.status for r in again] == ["resumed", "resumed"]


def test_bad_inputs(base_dir: Path, tmp_path: Path) -> None:
    from datasets import Dataset

    with pytest.raises(ConfigError, match="prompt and completion"):
        train_sft(Dataset.from_list([{"text": "x"}]), base_model=base_dir, out_dir=tmp_path,
                  config=_config(tmp_path))
    with pytest.raises(ConfigError, match="AgentSFTConfig"):
        train_sft(_ds([_row(0)]), base_model=base_dir, out_dir=tmp_path, config=None)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="agent"):
        train_agents_sft(_ds([_row(0)]).remove_columns("agent"), base_model=base_dir, out_dir=tmp_path,
                         config=_config(tmp_path))


@pytest.mark.model
@pytest.mark.slow
def test_real_smollm2_sft_steps(tmp_path: Path) -> None:
    """Two LoRA SFT steps on SmolLM2 with runtime-format prompts: adapter moves, base does not."""
    from collabui.actions import get_action_space
    from collabui.models.embedded import embedded_model_dir
    from collabui.prompts import build_messages

    base = embedded_model_dir()
    rows = []
    for k, name in enumerate(["Ok", "Next", "Cancel", "Submit", "Yes", "No"]):
        ids = "ABC"
        buttons = " ".join(f"<button[{i}]| {t}>" for i, t in zip(ids, [name, "Other", "More"], strict=True))
        prompt = build_messages(space=get_action_space("web"), task=f"Click the '{name}' button.",
                                observation=f"< <div| page {k}> {buttons} >", history=[], style="compact")
        rows.append({"prompt": [dict(m) for m in prompt],
                     "completion": [{"role": "assistant", "content": f"Thought: The '{name}' button has id A.\n"
                                                                     'Action: {"action": "click", "element_id": "A"}'}]})
    report = train_sft(_ds(rows), base_model=base, out_dir=tmp_path / "sft",
                       config=_config(tmp_path, max_steps=2, per_device_train_batch_size=1, learning_rate=1e-4, lora_r=8,
                                      max_length=1024, lora_target_modules=["q_proj", "k_proj", "v_proj", "o_proj"]),
                       progress=False)
    assert report.status == "trained" and report.steps == 2 and report.n_dropped == 0
    assert report.seconds_per_step is not None and report.base_sha256
    print(f"SmolLM2 SFT: {report.seconds_per_step:.2f} s/step (batch 1, compact prompts, r=8 q/k/v/o)")
    lora_b = [v for k, v in _weights(tmp_path / "sft").items() if "lora_B" in k]
    assert any(float(v.abs().max()) > 0 for v in lora_b)


def _cli(argv: list[str]) -> int:
    """Through the real `collabui` parser; typed errors propagate (main() would print them)."""
    from collabui.cli import build_parser
    from collabui.cli.train import run_command

    args, rest = build_parser().parse_known_args(argv)
    return run_command(args, rest)


def test_cli_sft_and_rft(base_dir: Path, tmp_path: Path) -> None:
    from collabui.training.synth import save_sft_rows

    data = save_sft_rows([_row(k) for k in range(2)], tmp_path / "data.jsonl")
    flags = ["--max_steps", "1", "--per_device_train_batch_size", "2", "--lora_r", "2",
             "--lora_target_modules", "q_proj", "v_proj"]
    assert _cli(["train", "sft", "--data", str(data), "--model", f"hf:{base_dir}", "--out",
                 str(tmp_path / "one"), "--merge", *flags]) == 0
    assert (tmp_path / "one" / MERGED_DIR / "config.json").is_file()
    assert json.loads((tmp_path / "one" / "adapter_config.json").read_text())["r"] == 2
    pairs = tmp_path / "pairs.jsonl"
    with pairs.open("w") as fh:
        for k in range(4):
            row = _row(k, agent=k % 2)
            fh.write(json.dumps({"prompt": row["prompt"], "chosen": row["completion"],
                                 "rejected": [{"role": "assistant", "content": "x"}], "agent": row["agent"],
                                 "episode_id": "e", "t": k, "round": 0, "score": 1.0,
                                 "rejected_source": "rule"}) + "\n")
    assert _cli(["train", "sft", "--pairs", str(pairs), "--model", f"hf:{base_dir}", "--out",
                 str(tmp_path / "rft"), *flags]) == 0
    assert (tmp_path / "rft" / "agent1" / SFT_DONE_MARKER).is_file()
    with pytest.raises(ConfigError, match="bad SFT option"):
        _cli(["train", "sft", "--data", str(data), "--model", f"hf:{base_dir}", "--out", str(tmp_path / "x"),
              "--no_such_flag", "1"])
    with pytest.raises(ConfigError, match="unknown option"):
        _cli(["train", "synth", "--envs", "miniwob/click-button", "--out", str(tmp_path), "--bogus"])
