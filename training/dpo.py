"""Per-agent DPO with LoRA (paper Eq. 8): policy i = base + adapter ``agent{i}``, reference = base.

The base model is loaded once. For each agent, TRL's ``DPOTrainer`` receives that base plus a
``peft_config``: TRL wraps it in a fresh LoRA adapter and, since the adapter is new, computes the
reference log-probs with adapters disabled (``use_adapter(model, None)`` in TRL 1.16), i.e. with
the base. After training the adapter is saved to ``<out>/agent{i}/`` and the LoRA layers are
unloaded (not merged), which hands the untouched base to the next agent.

Why not one PeftModel holding every agent's adapter: TRL 1.16, given a ``PeftModel`` without a
``peft_config``, reads ``model.peft_config["default"]`` and adds a ``"ref"`` copy of it as the
reference, so named adapters fail and a continued adapter would be its own reference. Continuing
from a previous iteration (``init_adapters_dir``) therefore copies the old weights into the fresh
adapter after TRL built it, which keeps the reference = base, as Eq. 8 asks.

Over-long rows: TRL 1.16 drops rows whose prompt alone reaches ``max_length`` and *truncates*
the completions of the others, which can cut the ``Action:`` line that makes chosen and rejected
differ. We count both with the tokenizer's chat template (as TRL tokenizes) and, by default,
drop every row whose prompt + longer completion exceeds ``max_length`` ourselves, reporting it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trl import DPOConfig

from collabui.errors import ConfigError, ModelError
from collabui.training._peft import (
    LoraConfigMixin,
    adapter_name,
    common_prefix,
    default_bf16,
    fingerprint,
    fit_lora,
    fresh_tmp,
    init_lora_config,
    load_base,
    publish,
    restore_base,
    settle_bf16,
    tokens,
    trainer_args,
)
from collabui.training.dpo_report import (
    AgentDPOStats,
    DPOReport,
    LengthCheck,
    collect_metrics,
    config_summary,
    stats_from_dict,
)
from collabui.training.team import load_team_model, team_adapters

__all__ = [
    "AgentDPOConfig",
    "AgentDPOStats",
    "DPOReport",
    "LengthCheck",
    "adapter_name",
    "check_lengths",
    "default_bf16",
    "load_team_model",
    "team_adapters",
    "train_agents_dpo",
]

log = logging.getLogger(__name__)

#: Written last into ``<out>/agent{i}/``: its presence means the adapter is complete.
DONE_MARKER = ".collabui-dpo-complete"
#: Per-agent metrics saved beside the adapter (so a resumed run still reports them).
METRICS_FILE = "dpo_metrics.json"
_REQUIRED_COLUMNS = ("prompt", "chosen", "rejected", "agent")
# Older callers and tests read the base hash through this module.
_fingerprint = fingerprint


@dataclass
class AgentDPOConfig(LoraConfigMixin, DPOConfig):
    """``DPOConfig`` with LoRA fields and defaults for per-agent DPO on a small CPU model.

    The paper trains Qwen2-7B with LoRA, lr 5e-6, bf16, 3 epochs. For SmolLM2-135M on a CPU with
    a few dozen pairs per agent, 5e-5 moves the policy within a few steps (5e-6 barely does);
    use 5e-6 for 7B models. ``bf16`` defaults to True where the hardware computes it (CUDA, or a
    CPU with AVX512-BF16/AMX), float32 elsewhere, so one config runs unchanged on every machine. ``output_dir`` is required: TRL's scratch folder
    (checkpoints only if ``save_strategy`` is set); adapters go to ``train_agents_dpo(out_dir)``.
    """

    output_dir: str | None = field(
        default=None,
        metadata={"help": "Required. TRL's working folder (logs, optional checkpoints)."},
    )
    learning_rate: float = field(
        default=5e-5,
        metadata={
            "help": "AdamW learning rate. 5e-5 suits SmolLM2 on CPU; the paper uses 5e-6 for 7B LoRA."
        },
    )
    num_train_epochs: float = field(
        default=3.0, metadata={"help": "Epochs over each agent's pairs (paper: 3)."}
    )
    per_device_train_batch_size: int = field(
        default=2,
        metadata={"help": "Pairs per step (each pair is a chosen and a rejected sequence)."},
    )
    max_length: int | None = field(
        default=1024,
        metadata={
            "help": "Max tokens of prompt + completion; longer rows are counted and (by default) dropped."
        },
    )
    logging_steps: float = field(
        default=1, metadata={"help": "Log every N steps (1: a full loss curve)."}
    )
    save_strategy: str = field(
        default="no",
        metadata={"help": "TRL checkpoints; 'no' because adapters are saved per agent anyway."},
    )
    report_to: None | str | list[str] = field(
        default="none",
        metadata={"help": "Experiment trackers ('none', 'tensorboard', 'wandb', ...)."},
    )
    bf16: bool | None = field(
        default=None,
        metadata={"help": "bf16 mixed precision; default: True on CUDA and on CPUs with native bf16 (AVX512-BF16/AMX)."},
    )
    lora_r: int = field(default=8, metadata={"help": "LoRA rank."})
    lora_alpha: int = field(default=16, metadata={"help": "LoRA scaling alpha."})
    lora_dropout: float = field(
        default=0.05,
        metadata={"help": "LoRA dropout (TRL's disable_dropout=True sets it to 0 while training)."},
    )
    # A list, not a tuple: transformers' HfArgumentParser (the CLI) only understands list fields.
    lora_target_modules: list[str] = field(
        default_factory=lambda: ["q_proj", "v_proj"], metadata={"help": "Module names LoRA wraps."}
    )
    drop_overlong: bool = field(
        default=True,
        metadata={
            "help": "Drop rows whose prompt + completion exceed max_length (False: let TRL truncate the "
            "completions, and drop only rows whose prompt alone fills max_length)."
        },
    )

    def __post_init__(self) -> None:
        if not self.output_dir:
            raise ConfigError(
                "AgentDPOConfig needs output_dir; pass output_dir='<folder for TRL logs>'"
            )
        settle_bf16(self)
        self.check_lora_fields(example_rank=8)
        super().__post_init__()



# -- length check ------------------------------------------------------------------------------


def check_lengths(
    rows: Any, tokenizer: Any, max_length: int | None, drop_overlong: bool = True
) -> LengthCheck:
    """Tokenize each row as TRL 1.16 does (chat template) and compare with ``max_length``.

    The completion starts where the tokenized prompt (with generation prompt) and prompt +
    completion diverge, exactly as TRL computes it.
    """
    n = len(rows)
    if max_length is None:
        return LengthCheck(0, 0, [True] * n)
    too_long = truncated = 0
    keep: list[bool] = []
    for row in rows:
        prompt = tokens(tokenizer, row["prompt"], add_generation_prompt=True)
        chosen = tokens(tokenizer, row["prompt"] + row["chosen"])
        rejected = tokens(tokenizer, row["prompt"] + row["rejected"])
        prompt_len = min(common_prefix(prompt, chosen), common_prefix(prompt, rejected))
        total = max(len(chosen), len(rejected))
        is_too_long = prompt_len >= max_length
        is_truncated = not is_too_long and total > max_length
        too_long += is_too_long
        truncated += is_truncated
        keep.append(not is_too_long and not (drop_overlong and is_truncated))
    return LengthCheck(too_long, truncated, keep)


# -- training ----------------------------------------------------------------------------------


def train_agents_dpo(
    pairs: Any,
    *,
    base_model: str | Path,
    out_dir: str | Path,
    config: AgentDPOConfig,
    agents: Sequence[int] | None = None,
    init_adapters_dir: str | Path | None = None,
    resume: bool = True,
    progress: bool = True,
    verify_base: bool = True,
) -> DPOReport:
    """Train one LoRA adapter per agent with DPO on that agent's preference pairs.

    Args:
        pairs: a ``datasets.Dataset`` in the contract's conversational preference format
            (``prompt``, ``chosen``, ``rejected``, ``agent``, ...).
        base_model: folder of the base causal LM and its chat-template tokenizer.
        out_dir: adapters go to ``<out_dir>/agent{i}/``; the report to ``<out_dir>/dpo_report.json``.
        config: the training configuration (one copy per agent is handed to TRL).
        agents: the agents to train (default: every agent present in ``pairs``).
        init_adapters_dir: continue from ``<init_adapters_dir>/agent{i}/`` where it exists
            (iterative DPO); the reference stays the base model.
        resume: skip agents whose ``<out_dir>/agent{i}/`` holds a completion marker.
        progress: per-agent lines on stderr and TRL's progress bar.
        verify_base: hash the base weights before and after, and fail if they changed.

    Returns:
        the :class:`DPOReport`, also written to ``<out_dir>/dpo_report.json``.

    Raises:
        ConfigError: bad pairs, config or agent list.
        ModelLoadError: the base model or an initial adapter cannot be loaded.
        ModelError: training failed, or the base weights changed.
    """
    if not isinstance(config, AgentDPOConfig):
        raise ConfigError(
            "config must be an AgentDPOConfig; build one with AgentDPOConfig(output_dir=...)"
        )
    _check_pairs(pairs)
    out = Path(out_dir).expanduser()
    init_dir = Path(init_adapters_dir).expanduser() if init_adapters_dir else None
    agent_column = [int(a) for a in pairs["agent"]]
    wanted = sorted(set(agent_column)) if agents is None else [int(a) for a in agents]
    if any(a < 0 for a in wanted):
        raise ConfigError(f"agent indices must be >= 0, got {wanted}; pass agents=[0, 1, ...]")
    started = time.perf_counter()
    tokenizer, model = load_base(Path(base_model).expanduser())
    before = fingerprint(model) if verify_base else None
    report = DPOReport(str(base_model), str(out), config_summary(config), base_sha256=before)
    out.mkdir(parents=True, exist_ok=True)
    for agent in wanted:
        indices = [k for k, a in enumerate(agent_column) if a == agent]
        stats = _run_agent(
            agent, pairs.select(indices), model, tokenizer, out, init_dir, config, resume, progress
        )
        report.agents.append(stats)
        report.seconds = time.perf_counter() - started
        report.to_json(out / "dpo_report.json")  # partial report survives a crash of a later agent
    if verify_base and fingerprint(model) != before:
        raise ModelError("the base weights changed during DPO; this is a bug, please report it")
    report.seconds = time.perf_counter() - started
    report.to_json(out / "dpo_report.json")
    return report


def _check_pairs(pairs: Any) -> None:
    columns = getattr(pairs, "column_names", None)
    if columns is None:
        raise ConfigError(
            "pairs must be a datasets.Dataset; load it with datasets.load_dataset('json', ...)"
        )
    missing = [c for c in _REQUIRED_COLUMNS if c not in columns]
    if missing:
        raise ConfigError(
            f"pairs lack column(s) {missing}; build them with collabui.training.pairs"
        )



def _run_agent(
    agent: int,
    rows: Any,
    model: Any,
    tokenizer: Any,
    out: Path,
    init_dir: Path | None,
    config: AgentDPOConfig,
    resume: bool,
    progress: bool,
) -> AgentDPOStats:
    name = adapter_name(agent)
    target = out / name
    if resume and (target / DONE_MARKER).is_file():
        stats = _load_stats(target, agent)
        stats.status, stats.message = "resumed", f"{name}: already trained in {target}, skipped"
        if progress:
            log.info(stats.message)
        return stats
    init = (
        init_dir / name
        if init_dir and (init_dir / name / "adapter_config.json").is_file()
        else None
    )
    stats = AgentDPOStats(
        agent, name, "trained", n_pairs=len(rows), init_from=str(init) if init else None
    )
    check = check_lengths(rows, tokenizer, config.max_length, config.drop_overlong)
    stats.n_prompt_too_long, stats.n_truncated, stats.n_dropped = (
        check.prompt_too_long,
        check.truncated,
        check.dropped,
    )
    if check.dropped:
        log.warning(
            f"{name}: {check.dropped} of {len(rows)} pairs exceed max_length={config.max_length} and are "
            f"dropped ({check.prompt_too_long} prompt-only, {check.truncated} with completion); "
            "raise max_length to keep them"
        )
    elif check.truncated:
        log.warning(
            f"{name}: {check.truncated} pairs exceed max_length={config.max_length}; TRL truncates their completions"
        )
    rows = rows.select([k for k, keep in enumerate(check.keep) if keep])
    stats.n_used = len(rows)
    if not len(rows):
        return _no_training(
            stats,
            target,
            init,
            reason="no pairs" if not stats.n_pairs else "all_overlong",
            max_length=config.max_length,
        )
    if progress:
        log.info(f"{name}: DPO on {len(rows)} pairs" + (f" from {init}" if init else ""))
    _train_one(stats, rows, model, tokenizer, target, init, config, progress)
    if progress:
        log.info(f"{name}: {stats.steps} steps in {stats.seconds:.1f} s, final loss {stats.final_loss}")
    return stats


def _no_training(
    stats: AgentDPOStats, target: Path, init: Path | None, reason: str, max_length: int | None
) -> AgentDPOStats:
    if reason == "all_overlong":
        stats.status = "all_overlong"
        stats.message = (
            f"{stats.adapter}: all {stats.n_pairs} pairs exceed max_length={max_length}; "
            "skipped (raise max_length or shorten the prompts)"
        )
    else:
        stats.status, stats.message = "no_pairs", f"{stats.adapter}: no pairs; skipped"
    if init is not None and init.resolve() != target.resolve():
        _publish_copy(init, target)
        stats.status, stats.path = "kept_previous", str(target)
        stats.message += f"; kept the previous adapter from {init}"
    elif (target / "adapter_config.json").is_file():
        stats.path = str(target)
    log.warning(stats.message)
    return stats



def _train_one(
    stats: AgentDPOStats,
    rows: Any,
    model: Any,
    tokenizer: Any,
    target: Path,
    init: Path | None,
    config: AgentDPOConfig,
    progress: bool,
) -> None:
    from trl import DPOTrainer

    args = trainer_args(config, stats.adapter, progress)
    peft_config = init_lora_config(init) if init else config.lora_config()
    started = time.perf_counter()
    trainer = fit_lora(
        lambda lora: DPOTrainer(
            model=model,
            ref_model=None,
            args=args,
            train_dataset=rows,
            processing_class=tokenizer,
            peft_config=lora,
        ),
        model,
        init,
        peft_config,
        what=f"DPO of {stats.adapter}",
        hint="check the pairs and the config (max_length, batch size)",
    )
    peft_model = trainer.accelerator.unwrap_model(trainer.model)
    stats.seconds = time.perf_counter() - started
    collect_metrics(stats, trainer.state.log_history, trainer.state.global_step)
    _save_adapter(peft_model, target, stats)
    restore_base(peft_model, model)


def _save_adapter(peft_model: Any, target: Path, stats: AgentDPOStats) -> None:
    """Save atomically: a temp sibling folder, then rename; the marker is written last."""
    tmp = fresh_tmp(target)
    peft_model.save_pretrained(str(tmp))  # the "default" adapter lands in tmp/ itself
    stats.path = str(target)
    stats.message = f"{stats.adapter}: trained on {stats.n_used} pairs"
    (tmp / METRICS_FILE).write_text(
        json.dumps(dataclasses.asdict(stats), indent=2), encoding="utf-8"
    )
    (tmp / DONE_MARKER).write_text("ok\n", encoding="utf-8")
    publish(tmp, target)


def _publish_copy(source: Path, target: Path) -> None:
    tmp = fresh_tmp(target)
    shutil.copytree(source, tmp)
    (tmp / DONE_MARKER).unlink(missing_ok=True)  # a copy is not a finished training of this run
    publish(tmp, target)


def _load_stats(target: Path, agent: int) -> AgentDPOStats:
    try:
        return stats_from_dict(json.loads((target / METRICS_FILE).read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError):
        return AgentDPOStats(agent, adapter_name(agent), "resumed", path=str(target))
