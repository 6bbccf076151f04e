"""Per-agent DPO with LoRA: tiny random Llama models (fast) and one real SmolLM2 step (slow)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from collabui.errors import ConfigError, ModelLoadError
from collabui.models.base import ChatRequest
from collabui.training import dpo
from collabui.training.dpo import (
    AgentDPOConfig,
    DPOReport,
    load_team_model,
    team_adapters,
    train_agents_dpo,
)

LONG = "filler " * 200  # ~200 tokens: longer than the tiny tests' max_length


def _row(agent: int, k: int, *, chosen: str, rejected: str, user: str | None = None) -> dict:
    return {
        "prompt": [
            {
                "role": "system",
                "content": "You operate a web page. Answer with Thought and Action.",
            },
            {
                "role": "user",
                "content": user or f"Task {k}: submit the form. Elements: [3] button Submit",
            },
        ],
        "chosen": [
            {
                "role": "assistant",
                "content": f'Thought: {chosen}\nAction: {{"action": "click", "element": 3}}',
            }
        ],
        "rejected": [
            {
                "role": "assistant",
                "content": f'Thought: {rejected}\nAction: {{"action": "type", "element": 5, "text": "x"}}',
            }
        ],
        "agent": agent,
        "episode_id": "ep",
        "t": k,
        "round": 0,
        "score": 1.0,
        "rejected_source": "rule",
    }


def _pairs(rows: list[dict]):
    from datasets import Dataset

    return Dataset.from_list(rows)


def _config(tmp: Path, **overrides) -> AgentDPOConfig:
    settings = {
        "output_dir": str(tmp / "trl"),
        "max_steps": 2,
        "learning_rate": 5e-2,
        "max_length": 128,
        "per_device_train_batch_size": 2,
        "disable_tqdm": True,
    }
    settings.update(overrides)
    return AgentDPOConfig(**settings)


def _lora_weights(folder: Path) -> dict:
    from peft.utils import load_peft_weights

    return load_peft_weights(str(folder))


@pytest.fixture(scope="module")
def trained(base_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    """Agents 0 and 1 learn different preferences; agent 0 has one over-long row; every row of
    agent 2 is over-long."""
    tmp = tmp_path_factory.mktemp("dpo")
    rows = [_row(0, k, chosen="the submit button", rejected="type somewhere") for k in range(3)]
    rows.append(_row(0, 9, chosen="x", rejected="y", user=LONG))
    rows += [
        _row(1, k, chosen="zebra quartz violin", rejected="submit now please") for k in range(3)
    ]
    rows += [_row(2, k, chosen="a", rejected="b", user=LONG) for k in range(2)]
    report = train_agents_dpo(
        _pairs(rows), base_model=base_dir, out_dir=tmp / "out", config=_config(tmp), progress=False
    )
    return tmp, report


def test_config_defaults_and_required_output_dir(tmp_path: Path) -> None:
    config = AgentDPOConfig(output_dir=str(tmp_path))
    assert (config.lora_r, config.lora_alpha, config.lora_target_modules) == (
        8,
        16,
        ["q_proj", "v_proj"],
    )
    assert (
        config.learning_rate == 5e-5 and config.max_length == 1024 and config.num_train_epochs == 3
    )
    assert config.bf16 is dpo.default_bf16()  # bf16 where this machine computes it natively
    assert config.lora_config().target_modules == {"q_proj", "v_proj"}
    with pytest.raises(ConfigError, match="output_dir"):
        AgentDPOConfig()


def test_bf16_default_follows_native_bf16(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import torch

    from collabui import _hardware

    monkeypatch.setattr(_hardware, "cpu_has_native_bf16", lambda: False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert dpo.default_bf16() is True
    assert dpo.default_bf16(fp16=True) is False
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert dpo.default_bf16() is False
    assert AgentDPOConfig(output_dir=str(tmp_path)).bf16 is False
    monkeypatch.setattr(_hardware, "cpu_has_native_bf16", lambda: True)  # AVX512-BF16 / AMX
    assert dpo.default_bf16() is True and dpo.default_bf16(fp16=True) is False
    # transformers trains bf16 on a CPU only with use_cpu; the config sets it.
    config = AgentDPOConfig(output_dir=str(tmp_path))
    assert config.bf16 is True and config.use_cpu is True
    assert AgentDPOConfig(output_dir=str(tmp_path), bf16=False).use_cpu is False


def test_adapters_saved_trained_and_distinct(trained) -> None:
    tmp, report = trained
    out = tmp / "out"
    a0, a1 = _lora_weights(out / "agent0"), _lora_weights(out / "agent1")
    assert report.agent(0).status == report.agent(1).status == "trained"
    assert report.agent(0).steps == 2 and len(report.agent(0).loss) == 2
    # PEFT initialises lora_B to zero: non-zero B means training moved the adapter.
    assert any(float(t.abs().sum()) > 0 for k, t in a0.items() if "lora_B" in k)
    assert any(not a0[k].equal(a1[k]) for k in a0)
    # Adapter only: no base weights were written next to it.
    assert not list((out / "agent0").glob("model*.safetensors"))
    assert (out / "dpo_report.json").is_file()


def test_base_weights_untouched(trained, base_dir: Path) -> None:
    from transformers import AutoModelForCausalLM

    _, report = trained
    fresh = AutoModelForCausalLM.from_pretrained(base_dir)
    assert report.base_sha256 == dpo._fingerprint(fresh)


def test_overlong_rows_counted_and_all_overlong_agent_skipped(
    trained, capfd: pytest.CaptureFixture
) -> None:
    tmp, report = trained
    a0, a2 = report.agent(0), report.agent(2)
    assert (a0.n_pairs, a0.n_prompt_too_long, a0.n_dropped, a0.n_used) == (4, 1, 1, 3)
    assert a2.status == "all_overlong" and a2.n_dropped == 2 and a2.steps == 0
    assert "max_length" in a2.message and not (tmp / "out" / "agent2").exists()


def test_overlong_message_is_a_warning(
    base_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    rows = [_row(3, k, chosen="a", rejected="b", user=LONG) for k in range(2)]
    report = train_agents_dpo(
        _pairs(rows),
        base_model=base_dir,
        out_dir=tmp_path,
        config=_config(tmp_path),
        progress=False,
    )
    assert report.agent(3).status == "all_overlong"
    assert any("agent3: all 2 pairs exceed max_length=128" in r.getMessage() and r.levelname == "WARNING"
               for r in caplog.records)


def test_truncated_rows_kept_when_asked(base_dir: Path) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(base_dir)
    row = _row(0, 0, chosen=LONG, rejected="b")  # short prompt, completion past max_length
    assert dpo.check_lengths([row], tokenizer, 128, drop_overlong=True).keep == [False]
    check = dpo.check_lengths([row], tokenizer, 128, drop_overlong=False)
    assert (check.truncated, check.prompt_too_long, check.keep) == (1, 0, [True])


def test_resume_skips_finished_agent(trained, base_dir: Path) -> None:
    tmp, first = trained
    out = tmp / "out"
    before = (out / "agent0" / "adapter_model.safetensors").stat().st_mtime_ns
    rows = [_row(0, k, chosen="other", rejected="thing") for k in range(2)]
    report = train_agents_dpo(
        _pairs(rows), base_model=base_dir, out_dir=out, config=_config(tmp), progress=False
    )
    assert report.agent(0).status == "resumed"
    assert report.agent(0).loss == first.agent(0).loss  # metrics come back from the finished run
    assert (out / "agent0" / "adapter_model.safetensors").stat().st_mtime_ns == before


def test_continue_from_previous_adapters(trained, base_dir: Path, tmp_path: Path) -> None:
    tmp, _ = trained
    rows = [_row(0, k, chosen="the submit button", rejected="type somewhere") for k in range(2)]
    report = train_agents_dpo(
        _pairs(rows),
        base_model=base_dir,
        out_dir=tmp_path / "it2",
        config=_config(tmp_path, max_steps=1),
        agents=[0, 1],
        init_adapters_dir=tmp / "out",
        progress=False,
    )
    a0 = report.agent(0)
    assert a0.status == "trained" and a0.init_from == str(tmp / "out" / "agent0")
    # The reference is the base, so a continued adapter starts with a non-zero margin.
    assert a0.margins[0][1] != 0.0
    # Agent 1 has no pairs this time: its previous adapter is carried over.
    assert report.agent(1).status == "kept_previous"
    old, new = _lora_weights(tmp / "out" / "agent1"), _lora_weights(tmp_path / "it2" / "agent1")
    assert all(old[k].equal(new[k]) for k in old)
    # ... while agent 0's step moved its own weights: one agent's DPO changes that agent alone.
    old0, new0 = _lora_weights(tmp / "out" / "agent0"), _lora_weights(tmp_path / "it2" / "agent0")
    assert any(not old0[k].equal(new0[k]) for k in old0)


def test_report_json_roundtrip_and_plot(trained, tmp_path: Path) -> None:
    from collabui.training.report import plot_dpo_report

    tmp, report = trained
    loaded = DPOReport.from_json(report.to_json(tmp_path / "r.json"))
    assert loaded.agent(2).status == "all_overlong" and loaded.agent(0).loss == report.agent(0).loss
    assert json.loads((tmp_path / "r.json").read_text())["agents"][0]["adapter"] == "agent0"
    png = plot_dpo_report(report, tmp_path / "plot.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bad_input_is_one_line_error(base_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="lack column"):
        train_agents_dpo(
            _pairs([{"prompt": [], "agent": 0}]),
            base_model=base_dir,
            out_dir=tmp_path,
            config=_config(tmp_path),
        )
    with pytest.raises(ModelLoadError, match="no agent adapters"):
        load_team_model(base_dir, tmp_path)


def test_team_model_serves_trained_adapters(trained, base_dir: Path) -> None:
    tmp, _ = trained
    model = load_team_model(base_dir, tmp / "out", device="cpu")
    assert model.adapters == ("agent0", "agent1")
    assert team_adapters(model, 3) == ("agent0", "agent1", None)
    messages = ({"role": "user", "content": "Task 1: submit the form."},)
    outputs = model.generate(
        [ChatRequest(messages, max_new_tokens=12, adapter=a) for a in (None, "agent0", "agent1")]
    )
    texts = [o.text for o in outputs]
    assert texts[1] != texts[0] and texts[2] != texts[0]


@pytest.mark.model
@pytest.mark.slow
def test_one_real_dpo_step_on_smollm2(tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    from collabui.models.embedded import embedded_model_dir

    base = embedded_model_dir()
    rows = [
        _row(0, k, chosen="click the submit button", rejected="type into a field") for k in range(2)
    ]
    config = AgentDPOConfig(
        output_dir=str(tmp_path / "trl"), max_steps=1, max_length=256, disable_tqdm=True
    )
    started = time.perf_counter()
    report = train_agents_dpo(
        _pairs(rows), base_model=base, out_dir=tmp_path / "out", config=config, progress=False
    )
    elapsed = time.perf_counter() - started
    stats = report.agent(0)
    assert stats.status == "trained" and stats.steps == 1 and stats.n_used == 2
    weights = _lora_weights(tmp_path / "out" / "agent0")
    assert any(float(t.abs().sum()) > 0 for k, t in weights.items() if "lora_B" in k)
    assert report.base_sha256 == dpo._fingerprint(AutoModelForCausalLM.from_pretrained(base))
    print(f"SmolLM2 DPO: {stats.seconds_per_step:.1f} s/step, whole call {elapsed:.1f} s")


def test_compact_lm_head_gives_trls_dpo_loss_and_gradients(base_dir: Path, tmp_path: Path) -> None:
    """DPO with the SFT term: the answer-only LM head gives TRL's loss and gradients (the policy
    and the reference, an adapter-disabled pass, both go through it)."""
    import torch
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import DPOTrainer

    from collabui.training._compact_head import compact_lm_head

    tokenizer = AutoTokenizer.from_pretrained(base_dir)
    rows = _pairs([_row(0, k, chosen="the submit button" * (k + 1), rejected="type") for k in range(2)])
    trainer = DPOTrainer(model=AutoModelForCausalLM.from_pretrained(base_dir), ref_model=None,
                         args=_config(tmp_path, loss_type=["sigmoid", "sft"]), train_dataset=rows,
                         processing_class=tokenizer,
                         peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                                init_lora_weights=False))
    inputs = trainer._prepare_inputs(next(iter(trainer.get_train_dataloader())))
    trainer.model.train()

    def loss_and_grads() -> tuple[float, dict]:
        trainer.model.zero_grad()
        loss = trainer.compute_loss(trainer.model, dict(inputs))
        loss.backward()
        return float(loss.detach()), {n: p.grad.clone() for n, p in trainer.model.named_parameters()
                                      if p.grad is not None}

    theirs, theirs_grads = loss_and_grads()
    assert compact_lm_head(trainer) is True
    ours, ours_grads = loss_and_grads()
    assert ours == pytest.approx(theirs, rel=1e-5)
    assert ours_grads.keys() == theirs_grads.keys() and ours_grads
    for name, grad in ours_grads.items():  # float32 sums in another order: noise of ~1e-6
        scale = float(theirs_grads[name].abs().max())
        torch.testing.assert_close(grad, theirs_grads[name], rtol=1e-3, atol=1e-4 * scale + 1e-8)


def test_an_anchor_row_teaches_through_the_sft_term_alone(base_dir: Path, tmp_path: Path) -> None:
    """chosen = rejected (MARL's anchor rows): the preference loss has no gradient, the SFT
    term's is what the row contributes."""
    import torch
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import DPOTrainer

    tokenizer = AutoTokenizer.from_pretrained(base_dir)
    row = _row(0, 0, chosen="the submit button", rejected="")
    rows = _pairs([{**row, "rejected": row["chosen"]}] * 2)

    def grads(loss_type: list[str]) -> dict:
        torch.manual_seed(0)
        trainer = DPOTrainer(model=AutoModelForCausalLM.from_pretrained(base_dir), ref_model=None,
                             args=_config(tmp_path, loss_type=loss_type), train_dataset=rows,
                             processing_class=tokenizer,
                             peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                                    init_lora_weights=False))
        inputs = trainer._prepare_inputs(next(iter(trainer.get_train_dataloader())))
        trainer.model.train()
        trainer.compute_loss(trainer.model, dict(inputs)).backward()
        return {n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.grad is not None}

    preference, both, sft = grads(["sigmoid"]), grads(["sigmoid", "sft"]), grads(["sft"])
    assert preference and all(float(g.abs().max()) < 1e-6 for g in preference.values())
    assert max(float(g.abs().max()) for g in sft.values()) > 1e-3
    for name, grad in both.items():  # float32 noise of the cancelling preference terms: ~1e-7
        scale = float(sft[name].abs().max())
        torch.testing.assert_close(grad, sft[name], rtol=1e-3, atol=1e-4 * scale + 1e-8)
