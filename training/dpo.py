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

import copy
import dataclasses
import hashlib
import json
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trl import DPOConfig

from collabui.errors import ConfigError, ModelError, ModelLoadError

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

#: Written last into ``<out>/agent{i}/``: its presence means the adapter is complete.
DONE_MARKER = ".collabui-dpo-complete"
#: Per-agent metrics saved beside the adapter (so a resumed run still reports them).
METRICS_FILE = "dpo_metrics.json"
_REQUIRED_COLUMNS = ("prompt", "chosen", "rejected", "agent")


def adapter_name(agent: int) -> str:
    """The adapter name (and folder name) of agent ``agent``: ``agent{i}``."""
    return f"agent{int(agent)}"


def default_bf16(fp16: bool = False) -> bool:
    """bf16 mixed precision by default only on CUDA (transformers rejects bf16 on a plain CPU)."""
    import torch

    return bool(torch.cuda.is_available()) and not fp16


@dataclass
class AgentDPOConfig(DPOConfig):
    """``DPOConfig`` with LoRA fields and defaults for per-agent DPO on a small CPU model.

    The paper trains Qwen2-7B with LoRA, lr 5e-6, bf16, 3 epochs. For SmolLM2-135M on a CPU with
    a few dozen pairs per agent, 5e-5 moves the policy within a few steps (5e-6 barely does);
    use 5e-6 for 7B models. ``bf16`` defaults to True only when CUDA is available, so one config
    runs unchanged on CPU (fp32) and GPU. ``output_dir`` is required: TRL's scratch folder
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
        metadata={"help": "bf16 mixed precision; default: True only when CUDA is available."},
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
        if self.bf16 is None:
            self.bf16 = default_bf16(self.fp16)
        if self.lora_r < 1:
            raise ConfigError(
                f"lora_r must be >= 1, got {self.lora_r}; pass a positive rank such as 8"
            )
        if isinstance(self.lora_target_modules, str):
            self.lora_target_modules = [self.lora_target_modules]
        self.lora_target_modules = list(self.lora_target_modules)
        super().__post_init__()

    def lora_config(self) -> Any:
        """The ``peft.LoraConfig`` of a fresh agent adapter."""
        from peft import LoraConfig

        return LoraConfig(
            r=self.lora_r,
            lora_alpha=self.lora_alpha,
            lora_dropout=self.lora_dropout,
            target_modules=list(self.lora_target_modules),
            task_type="CAUSAL_LM",
        )


@dataclass
class LengthCheck:
    """Token-length check of one agent's pairs against ``max_length``.

    ``prompt_too_long``: the prompt alone reaches ``max_length`` (TRL drops these silently).
    ``truncated``: prompt + the longer completion exceeds it (TRL cuts the completion).
    ``keep``: per row, whether it is trained on under the config's ``drop_overlong``.
    """

    prompt_too_long: int
    truncated: int
    keep: list[bool]

    @property
    def dropped(self) -> int:
        return sum(1 for k in self.keep if not k)


@dataclass
class AgentDPOStats:
    """What happened to one agent. ``status`` is one of ``trained``, ``resumed`` (finished by an
    earlier run), ``no_pairs``, ``kept_previous`` (no usable pairs; the initial adapter was copied)
    or ``all_overlong`` (every row exceeded ``max_length``)."""

    agent: int
    adapter: str
    status: str
    path: str | None = None
    n_pairs: int = 0
    n_used: int = 0
    n_prompt_too_long: int = 0
    n_truncated: int = 0
    n_dropped: int = 0
    init_from: str | None = None
    steps: int = 0
    seconds: float = 0.0
    seconds_per_step: float | None = None
    loss: list[tuple[int, float]] = field(default_factory=list)
    margins: list[tuple[int, float]] = field(default_factory=list)
    accuracies: list[tuple[int, float]] = field(default_factory=list)
    final_loss: float | None = None
    message: str = ""


@dataclass
class DPOReport:
    """The result of :func:`train_agents_dpo` (JSON-serialisable)."""

    base_model: str
    out_dir: str
    config: dict[str, Any]
    agents: list[AgentDPOStats] = field(default_factory=list)
    seconds: float = 0.0
    base_sha256: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self, path: str | Path) -> Path:
        """Write the report as indented JSON to ``path`` and return the path."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(), indent=2), encoding="utf-8")
        return path

    @classmethod
    def from_json(cls, path: str | Path) -> DPOReport:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        data["agents"] = [_stats_from_dict(a) for a in data.get("agents", [])]
        return cls(**data)

    def agent(self, i: int) -> AgentDPOStats:
        """The stats of agent ``i`` (KeyError if it was not in the run)."""
        for stats in self.agents:
            if stats.agent == i:
                return stats
        raise KeyError(i)


def _stats_from_dict(data: dict[str, Any]) -> AgentDPOStats:
    for key in ("loss", "margins", "accuracies"):
        data[key] = [tuple(p) for p in data.get(key, [])]
    return AgentDPOStats(**data)


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0][:300] if lines else type(exc).__name__


def _say(message: str) -> None:
    print(f"[collabui] {message}", file=sys.stderr, flush=True)


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
        prompt = _tokens(tokenizer, row["prompt"], add_generation_prompt=True)
        chosen = _tokens(tokenizer, row["prompt"] + row["chosen"])
        rejected = _tokens(tokenizer, row["prompt"] + row["rejected"])
        prompt_len = min(_common_prefix(prompt, chosen), _common_prefix(prompt, rejected))
        total = max(len(chosen), len(rejected))
        is_too_long = prompt_len >= max_length
        is_truncated = not is_too_long and total > max_length
        too_long += is_too_long
        truncated += is_truncated
        keep.append(not is_too_long and not (drop_overlong and is_truncated))
    return LengthCheck(too_long, truncated, keep)


def _tokens(
    tokenizer: Any, messages: list[dict[str, str]], add_generation_prompt: bool = False
) -> list[int]:
    out = tokenizer.apply_chat_template(
        list(messages), tokenize=True, return_dict=True, add_generation_prompt=add_generation_prompt
    )
    return list(out["input_ids"])


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


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
    tokenizer, model = _load_base(Path(base_model).expanduser())
    before = _fingerprint(model) if verify_base else None
    report = DPOReport(str(base_model), str(out), _config_summary(config), base_sha256=before)
    out.mkdir(parents=True, exist_ok=True)
    for agent in wanted:
        indices = [k for k, a in enumerate(agent_column) if a == agent]
        stats = _run_agent(
            agent, pairs.select(indices), model, tokenizer, out, init_dir, config, resume, progress
        )
        report.agents.append(stats)
        report.seconds = time.perf_counter() - started
        report.to_json(out / "dpo_report.json")  # partial report survives a crash of a later agent
    if verify_base and _fingerprint(model) != before:
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


def _load_base(path: Path) -> tuple[Any, Any]:
    if not (path / "config.json").is_file():
        raise ModelLoadError(
            f"{path} is not a model folder (no config.json); pass the base model folder"
        )
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(device)
    except Exception as exc:
        raise ModelLoadError(
            f"could not load the base model in {path} ({type(exc).__name__}: {_first_line(exc)}); "
            "pass a folder written by save_pretrained"
        ) from exc
    if not getattr(tokenizer, "chat_template", None):
        raise ModelLoadError(
            f"the tokenizer in {path} has no chat template; use an instruct/chat model"
        )
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer, model


def _fingerprint(model: Any) -> str:
    """sha256 over every base parameter and buffer (names and bytes), LoRA excluded."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        if "lora_" in name:
            continue
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().reshape(-1).view(_u8()).numpy().tobytes())
    return digest.hexdigest()


def _u8() -> Any:
    import torch

    return torch.uint8


def _config_summary(config: AgentDPOConfig) -> dict[str, Any]:
    keys = (
        "learning_rate",
        "num_train_epochs",
        "max_steps",
        "per_device_train_batch_size",
        "gradient_accumulation_steps",
        "beta",
        "loss_type",
        "max_length",
        "bf16",
        "seed",
        "gradient_checkpointing",
        "lora_r",
        "lora_alpha",
        "lora_dropout",
        "lora_target_modules",
        "drop_overlong",
    )
    return {k: _jsonable(getattr(config, k)) for k in keys}


def _jsonable(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


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
            _say(stats.message)
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
        _say(
            f"{name}: {check.dropped} of {len(rows)} pairs exceed max_length={config.max_length} and are "
            f"dropped ({check.prompt_too_long} prompt-only, {check.truncated} with completion); "
            "raise max_length to keep them"
        )
    elif check.truncated:
        _say(
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
        _say(f"{name}: DPO on {len(rows)} pairs" + (f" from {init}" if init else ""))
    _train_one(stats, rows, model, tokenizer, target, init, config, progress)
    if progress:
        _say(f"{name}: {stats.steps} steps in {stats.seconds:.1f} s, final loss {stats.final_loss}")
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
    _say(stats.message)
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

    args = copy.copy(config)  # TrainingArguments is mutable: never touch the caller's config
    args.output_dir = str(Path(config.output_dir) / stats.adapter)
    args.disable_tqdm = not progress
    peft_config = _init_lora_config(init) if init else config.lora_config()
    started = time.perf_counter()
    trainer = None
    try:
        trainer = DPOTrainer(
            model=model,
            ref_model=None,
            args=args,
            train_dataset=rows,
            processing_class=tokenizer,
            peft_config=peft_config,
        )
        if init is not None:
            _load_init_weights(trainer.model, init)
        trainer.train()
    except Exception as exc:
        if trainer is not None:  # leave a clean base behind for the caller
            _restore_base(trainer.accelerator.unwrap_model(trainer.model), model)
        if isinstance(exc, (ConfigError, ModelLoadError)):
            raise
        raise ModelError(
            f"DPO of {stats.adapter} failed ({type(exc).__name__}: {_first_line(exc)}); "
            "check the pairs and the config (max_length, batch size)"
        ) from exc
    peft_model = trainer.accelerator.unwrap_model(trainer.model)
    stats.seconds = time.perf_counter() - started
    _collect_metrics(stats, trainer.state.log_history, trainer.state.global_step)
    _save_adapter(peft_model, target, stats)
    _restore_base(peft_model, model)


def _init_lora_config(init: Path) -> Any:
    from peft import LoraConfig

    try:
        lora = LoraConfig.from_pretrained(str(init))
    except Exception as exc:
        raise ModelLoadError(
            f"initial adapter {init} is unreadable ({exc}); pass a PEFT LoRA folder"
        ) from exc
    lora.inference_mode = False
    return lora


def _load_init_weights(peft_model: Any, init: Path) -> None:
    from peft.utils import load_peft_weights, set_peft_model_state_dict

    weights = load_peft_weights(str(init))
    result = set_peft_model_state_dict(peft_model, weights, adapter_name="default")
    missing = [k for k in getattr(result, "missing_keys", []) if "lora_" in k]
    if missing:
        raise ModelLoadError(
            f"initial adapter {init} does not fit the base ({len(missing)} LoRA weights "
            "missing); train it on this base model or drop init_adapters_dir"
        )


def _collect_metrics(stats: AgentDPOStats, history: list[dict[str, Any]], steps: int) -> None:
    for entry in history:
        step = int(entry.get("step", 0))
        if "loss" in entry:
            stats.loss.append((step, float(entry["loss"])))
        if "rewards/margins" in entry:
            stats.margins.append((step, float(entry["rewards/margins"])))
        if "rewards/accuracies" in entry:
            stats.accuracies.append((step, float(entry["rewards/accuracies"])))
    stats.steps = int(steps)
    # TRL's train_runtime excludes trainer construction and tokenization; fall back to the total.
    runtime = next(
        (float(e["train_runtime"]) for e in history if "train_runtime" in e), stats.seconds
    )
    stats.seconds_per_step = runtime / steps if steps else None
    stats.final_loss = stats.loss[-1][1] if stats.loss else None


def _save_adapter(peft_model: Any, target: Path, stats: AgentDPOStats) -> None:
    """Save atomically: a temp sibling folder, then rename; the marker is written last."""
    tmp = target.parent / f".{target.name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    peft_model.save_pretrained(str(tmp))  # the "default" adapter lands in tmp/ itself
    stats.path = str(target)
    stats.message = f"{stats.adapter}: trained on {stats.n_used} pairs"
    (tmp / METRICS_FILE).write_text(
        json.dumps(dataclasses.asdict(stats), indent=2), encoding="utf-8"
    )
    (tmp / DONE_MARKER).write_text("ok\n", encoding="utf-8")
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)


def _publish_copy(source: Path, target: Path) -> None:
    tmp = target.parent / f".{target.name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(source, tmp)
    (tmp / DONE_MARKER).unlink(missing_ok=True)  # a copy is not a finished training of this run
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)


def _load_stats(target: Path, agent: int) -> AgentDPOStats:
    try:
        return _stats_from_dict(json.loads((target / METRICS_FILE).read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError):
        return AgentDPOStats(agent, adapter_name(agent), "resumed", path=str(target))


def _restore_base(peft_model: Any, base: Any) -> None:
    """Remove the LoRA layers (no merge) and TRL's per-run patches so the next agent starts clean."""
    unloaded = peft_model.unload()
    if unloaded is not base:
        raise ModelError(
            "PEFT returned a different base model after unload; this is a bug, please report it"
        )
    # TRL patches forward (fused LM head) on the instance and hooks the input embeddings.
    base.__dict__.pop("forward", None)
    if hasattr(base, "disable_input_require_grads"):
        base.disable_input_require_grads()
    # transformers 5.23 renamed gradient to activation checkpointing (old names warn).
    if hasattr(type(base), "is_activation_checkpointing"):
        if base.is_activation_checkpointing:
            base.activation_checkpointing_disable()
    elif getattr(base, "is_gradient_checkpointing", False):
        base.gradient_checkpointing_disable()
    base.eval()


# -- runtime -----------------------------------------------------------------------------------


def _adapter_folders(adapters_dir: Path) -> dict[str, Path]:
    found: dict[int, Path] = {}
    for folder in adapters_dir.glob("agent*"):
        suffix = folder.name[len("agent") :]
        if suffix.isdigit() and (folder / "adapter_config.json").is_file():
            found[int(suffix)] = folder
    return {adapter_name(i): found[i] for i in sorted(found)}


def load_team_model(base_model: str | Path, adapters_dir: str | Path, **local_kwargs: Any) -> Any:
    """A ``LocalModel`` of ``base_model`` serving every ``<adapters_dir>/agent{i}/`` as ``agent{i}``.

    ``local_kwargs`` go to :class:`collabui.models.LocalModel` (device, dtype, max_batch_size...).

    Raises:
        ModelLoadError: no adapter folder was found, or one does not fit the base.
    """
    from collabui.models.local import LocalModel

    folder = Path(adapters_dir).expanduser()
    adapters = _adapter_folders(folder)
    if not adapters:
        raise ModelLoadError(
            f"no agent adapters (agent0/, agent1/, ...) in {folder}; run `collabui train dpo` first"
        )
    return LocalModel(base_model, adapters=adapters, **local_kwargs)


def team_adapters(model: Any, n_agents: int) -> tuple[str | None, ...]:
    """Per-agent adapter names for ``CollabAgentTeam(model, adapters=...)``: ``agent{i}`` when
    ``model`` serves it, else None (that agent uses the base model)."""
    loaded = set(getattr(model, "adapters", ()))
    return tuple(adapter_name(i) if adapter_name(i) in loaded else None for i in range(n_agents))
