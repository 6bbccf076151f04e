"""Supervised fine-tuning with LoRA (stage 1 of the paper's curriculum; the RFT ablation).

``train_sft`` trains ONE LoRA adapter with TRL's ``SFTTrainer`` on a conversational
prompt-completion dataset (``prompt`` = messages, ``completion`` = [assistant turn]); the loss
falls on completion tokens only (``completion_only_loss=True``, enforced). The adapter is saved
to ``out_dir`` with a completion marker and ``sft_metrics.json``; ``merge=True`` also writes
``out_dir/merged/``, a full model folder (weights + tokenizer) usable as the next stage's base.

The curriculum (paper Appendix B), each stage's merged output being the next stage's base::

    B1 = train_sft(knowledge,   base_model=B0, out_dir=s1, merge=True).merged_path
    B2 = train_sft(instruction, base_model=B1, out_dir=s2, merge=True).merged_path
    train_agents_dpo(preference_pairs, base_model=B2, out_dir=s3, config=...)  # -> s3/agent0/
    # MARL (stage 2) then starts from base B2 (+ agent0 for every agent, or fresh adapters).

Rejection fine-tuning (ablation of preference optimisation): ``rft_dataset_from_pairs`` keeps the
rewarded outputs of the pairs, and ``train_agents_sft`` trains one adapter per agent on its own
rows into ``<out>/agent{i}/`` (the DPO layout, so ``load_team_model`` serves them). It loads the
base once and shares the per-adapter code path with ``train_sft``.

Over-long rows: TRL truncates them (``keep_start``), which can cut the ``Action:`` line; rows whose
prompt + completion exceed ``max_length`` are counted and dropped instead, and reported.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import random
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trl import SFTConfig

from collabui.errors import ConfigError, ModelError, ModelLoadError
from collabui.training._peft import (
    LoraConfigMixin,
    adapter_name,
    common_prefix,
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

__all__ = ["AgentSFTConfig", "SFTReport", "train_sft", "train_agents_sft", "rft_dataset_from_pairs",
           "merge_adapter", "length_window_order", "SFT_DONE_MARKER", "MERGED_DIR"]

log = logging.getLogger(__name__)

#: Written last into an adapter folder: its presence means the adapter is complete.
SFT_DONE_MARKER = ".collabui-sft-complete"
_MERGED_MARKER = ".collabui-merged-complete"
_METRICS = "sft_metrics.json"
#: Sub-folder of ``out_dir`` holding the merged model (``merge=True``).
MERGED_DIR = "merged"


@dataclass
class AgentSFTConfig(LoraConfigMixin, SFTConfig):
    """``SFTConfig`` with LoRA fields and CPU-friendly defaults for stage-1 SFT.

    The paper's SFT uses lr 1e-4, 3 epochs, bf16 (Qwen2-7B). ``bf16`` defaults to True where the
    hardware computes it (CUDA, or a CPU with AVX512-BF16/AMX: ``default_bf16``).
    ``completion_only_loss`` is forced to True (the prompt repeats the page; training on it
    teaches nothing about acting). Gradient checkpointing is off by default: SmolLM2 fits in
    memory and checkpointing costs ~30% more time per step on a CPU; turn it on for 7B models.
    """

    output_dir: str | None = field(default=None, metadata={"help": "Required. TRL's working folder."})
    learning_rate: float = field(default=1e-4, metadata={"help": "AdamW learning rate (paper: 1e-4)."})
    num_train_epochs: float = field(default=3.0, metadata={"help": "Epochs (paper: 3)."})
    per_device_train_batch_size: int = field(default=4, metadata={"help": "Rows per step."})
    max_length: int | None = field(
        default=1024, metadata={"help": "Max tokens of prompt + completion; longer rows are dropped."})
    logging_steps: float = field(default=1, metadata={"help": "Log every N steps."})
    save_strategy: str = field(default="no", metadata={"help": "TRL checkpoints (the adapter is saved anyway)."})
    report_to: None | str | list[str] = field(default="none", metadata={"help": "Experiment trackers."})
    # transformers 5.23 renamed gradient to activation checkpointing; TRL still sets the old name
    # (True), which warns. Default the new name and leave the deprecated alias unset.
    activation_checkpointing: bool | None = field(
        default=False, metadata={"help": "Trade time for memory (on for large models on a GPU)."})
    gradient_checkpointing: bool | None = field(
        default=None, metadata={"help": "Deprecated alias of activation_checkpointing."})
    bf16: bool | None = field(default=None, metadata={"help": "bf16 mixed precision; default: True on CUDA and on CPUs with native bf16 (AVX512-BF16/AMX)."})
    completion_only_loss: bool | None = field(
        default=True, metadata={"help": "Loss on completion tokens only (always True here)."})
    length_window: int = field(
        default=0, metadata={"help": "Order rows in shuffled windows of this many rows, each sorted by "
                             "length and cut into batches (batches mix tasks yet pad little); 0: the "
                             "train_sampling_strategy alone decides."})
    full_finetune: bool = field(
        default=False, metadata={"help": "Train every weight instead of a LoRA adapter: out_dir then holds the "
                                 "whole model (weights + tokenizer), a base model folder of its own (measured "
                                 "beside LoRA; too large to ship in the package)."})
    lora_r: int = field(default=16, metadata={"help": "LoRA rank."})
    lora_alpha: int = field(default=32, metadata={"help": "LoRA scaling alpha."})
    lora_dropout: float = field(default=0.05, metadata={"help": "LoRA dropout."})
    lora_from_layer: int = field(
        default=0, metadata={"help": "LoRA on the decoder layers from this index up (0: every layer). The "
                             "layers below train nothing, so the backward pass stops above them: on "
                             "SmolLM2-135M (30 layers) LoRA from layer 10 makes a step ~16% cheaper."})
    # A list, not a tuple: HfArgumentParser (the CLI) only understands list fields.
    lora_target_modules: list[str] = field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"],
        metadata={"help": "Module names LoRA wraps."})

    def __post_init__(self) -> None:
        if not self.output_dir:
            raise ConfigError("AgentSFTConfig needs output_dir; pass output_dir='<folder for TRL logs>'")
        settle_bf16(self)
        if self.completion_only_loss is False:
            raise ConfigError("completion_only_loss=False would train on the prompts; leave it True")
        self.completion_only_loss = True
        self.check_lora_fields(example_rank=16)
        if self.lora_from_layer < 0:
            raise ConfigError(f"lora_from_layer must be >= 0, got {self.lora_from_layer}; 0 puts LoRA on every layer")
        if self.lora_from_layer and self.full_finetune:
            raise ConfigError("lora_from_layer places LoRA layers, and full_finetune trains every weight without "
                              "them; drop one of the two")
        if self.length_window < 0:
            raise ConfigError(f"length_window must be >= 0, got {self.length_window}")
        if self.length_window:
            # The order is made here, batch by batch; the sampler must keep it.
            self.train_sampling_strategy = "sequential"
        super().__post_init__()


@dataclass
class SFTReport:
    """One adapter's SFT. ``status``: ``trained``, ``resumed`` (finished earlier) or ``no_rows``
    (nothing to train on after dropping over-long rows: no adapter written)."""

    base_model: str
    out_dir: str
    status: str = "trained"
    adapter_path: str | None = None
    merged_path: str | None = None
    n_rows: int = 0
    n_used: int = 0
    n_dropped: int = 0
    init_from: str | None = None
    steps: int = 0
    seconds: float = 0.0
    seconds_per_step: float | None = None
    loss: list[tuple[int, float]] = field(default_factory=list)
    final_loss: float | None = None
    config: dict[str, Any] = field(default_factory=dict)
    base_sha256: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SFTReport:
        data = dict(data)
        data["loss"] = [tuple(p) for p in data.get("loss", [])]
        return cls(**{k: v for k, v in data.items() if k in {f.name for f in dataclasses.fields(cls)}})


def _config_summary(config: AgentSFTConfig) -> dict[str, Any]:
    keys = ("learning_rate", "num_train_epochs", "max_steps", "per_device_train_batch_size",
            "gradient_accumulation_steps", "max_length", "bf16", "seed", "activation_checkpointing",
            "lora_r", "lora_alpha", "lora_dropout", "lora_target_modules", "lora_from_layer", "length_window",
            "full_finetune")
    return {k: getattr(config, k) for k in keys}


def _check_rows(dataset: Any) -> Any:
    columns = getattr(dataset, "column_names", None)
    if columns is None:
        raise ConfigError("dataset must be a datasets.Dataset; load it with collabui.training.synth.load_sft_dataset")
    if "prompt" not in columns or "completion" not in columns:
        raise ConfigError(f"SFT data needs prompt and completion columns, has {columns}; "
                          "make it with `collabui train synth` or rft_dataset_from_pairs")
    return dataset.select_columns(["prompt", "completion"])


def _lengths(rows: Any, tokenizer: Any) -> list[tuple[int, bool]]:
    """Per row: its token count (prompt + completion, chat template as TRL applies it) and
    whether any completion token survives after the prompt."""
    out = []
    for row in rows:
        full = tokens(tokenizer, row["prompt"] + row["completion"])
        prompt = tokens(tokenizer, row["prompt"], add_generation_prompt=True)
        out.append((len(full), common_prefix(prompt, full) < len(full)))
    return out


def length_window_order(lengths: Sequence[int], *, batch_size: int, window: int, seed: int) -> list[int]:
    """Row indices in training order: shuffled, cut into windows of ``window`` rows, each window
    sorted by length and cut into batches of ``batch_size``, the batches shuffled.

    Why: a task's pages have similar lengths, so length-grouped sampling (windows of 50
    batches) fills a batch with few tasks (3.2 of the recipe's 20 tasks per batch of 8), and each
    step pulls towards those tasks' answers in turn. Random batches mix tasks (6.6 per batch) but
    pad 41% more. Windows of 4 batches give 4.8 tasks per batch for 13% padding (recipe data).
    """
    rng = random.Random(seed)
    order = list(range(len(lengths)))
    rng.shuffle(order)
    batches: list[list[int]] = []
    for start in range(0, len(order), max(window, batch_size)):
        chunk = sorted(order[start:start + max(window, batch_size)], key=lambda i: lengths[i])
        batches.extend(chunk[k:k + batch_size] for k in range(0, len(chunk), batch_size))
    rng.shuffle(batches)
    return [i for batch in batches for i in batch]


def _num_layers(model: Any) -> int | None:
    """The decoder layer count of ``model`` (None when its config does not say)."""
    config = getattr(model, "config", None)
    return getattr(getattr(config, "text_config", config), "num_hidden_layers", None)


def _train_adapter(rows: Any, model: Any, tokenizer: Any, target: Path, config: AgentSFTConfig,
                   init: Path | None, report: SFTReport, progress: bool) -> SFTReport:
    """Train one adapter on ``rows`` into ``target`` and hand the untouched base back."""
    rows = _usable_rows(rows, tokenizer, target, config, report)
    if rows is None:
        return report
    from trl import SFTTrainer

    args = trainer_args(config, target.name, progress)
    started = time.perf_counter()
    trainer = fit_lora(
        lambda lora: SFTTrainer(model=model, args=args, train_dataset=rows,
                                processing_class=tokenizer, peft_config=lora),
        model, init, init_lora_config(init) if init else config.lora_config(layers=_num_layers(model)),
        what=f"SFT of {target.name}", hint="check the data and the config (max_length, batch size)")
    peft_model = trainer.accelerator.unwrap_model(trainer.model)
    report.seconds = round(time.perf_counter() - started, 2)
    _collect(report, trainer.state.log_history, trainer.state.global_step)
    _save_adapter(peft_model, target, report)
    restore_base(peft_model, model)
    if progress:
        log.info(f"{target.name}: {report.steps} steps in {report.seconds:.1f} s, final loss {report.final_loss}")
    return report


def _train_full(rows: Any, model: Any, tokenizer: Any, target: Path, config: AgentSFTConfig,
                report: SFTReport, progress: bool) -> SFTReport:
    """Train every weight of a copy of ``model`` on ``rows``; the copy, with the tokenizer, goes
    to ``target`` (the base stays untouched, as with an adapter)."""
    import copy

    rows = _usable_rows(rows, tokenizer, target, config, report)
    if rows is None:
        return report
    from trl import SFTTrainer

    from collabui.training._compact_head import compact_lm_head

    args = trainer_args(config, target.name, progress)
    started = time.perf_counter()
    try:
        trainer = SFTTrainer(model=copy.deepcopy(model), args=args, train_dataset=rows, processing_class=tokenizer)
        compact_lm_head(trainer)
        trainer.train()
    except (ConfigError, ModelLoadError):
        raise
    except Exception as exc:
        raise ModelError(f"full fine-tuning of {target.name} failed: {type(exc).__name__}: {exc}; check the data "
                         "and the config (max_length, batch size)") from exc
    report.seconds = round(time.perf_counter() - started, 2)
    _collect(report, trainer.state.log_history, trainer.state.global_step)
    tmp = fresh_tmp(target)
    trainer.accelerator.unwrap_model(trainer.model).save_pretrained(str(tmp))
    tokenizer.save_pretrained(str(tmp))
    report.merged_path = str(target)  # the trained model is itself the next stage's base
    (tmp / _METRICS).write_text(json.dumps(report.to_dict(), indent=2), encoding="utf-8")
    (tmp / SFT_DONE_MARKER).write_text("ok\n", encoding="utf-8")
    publish(tmp, target)
    if progress:
        log.info(f"{target.name}: {report.steps} steps of full fine-tuning in {report.seconds:.1f} s, "
                 f"final loss {report.final_loss}")
    return report


def _usable_rows(rows: Any, tokenizer: Any, target: Path, config: AgentSFTConfig, report: SFTReport) -> Any:
    """``rows`` without the over-long ones, in the configured order; None when none is left."""
    sizes = _lengths(rows, tokenizer)
    kept = [k for k, (n, has_answer) in enumerate(sizes)
            if has_answer and (config.max_length is None or n <= config.max_length)]
    if config.length_window and kept:
        order = length_window_order([sizes[k][0] for k in kept], batch_size=config.per_device_train_batch_size,
                                    window=config.length_window, seed=config.seed)
        kept = [kept[i] for i in order]
    rows = rows.select(kept)
    report.n_rows, report.n_used = len(sizes), len(rows)
    report.n_dropped = report.n_rows - report.n_used
    if report.n_dropped:
        log.warning(f"{target.name}: {report.n_dropped} of {report.n_rows} rows exceed max_length="
                    f"{config.max_length} and are dropped; raise max_length to keep them")
    if not len(rows):
        report.status = "no_rows"
        log.warning(f"{target.name}: no rows to train on; skipped")
        return None
    return rows


def _collect(report: SFTReport, history: list[dict[str, Any]], steps: int) -> None:
    report.loss = [(int(e.get("step", 0)), float(e["loss"])) for e in history if "loss" in e]
    report.steps = int(steps)
    runtime = next((float(e["train_runtime"]) for e in history if "train_runtime" in e), report.seconds)
    report.seconds_per_step = round(runtime / steps, 3) if steps else None
    report.final_loss = report.loss[-1][1] if report.loss else None


def _save_adapter(peft_model: Any, target: Path, report: SFTReport) -> None:
    """Atomic: write a temp sibling, marker last, then rename over ``target``."""
    tmp = fresh_tmp(target)
    peft_model.save_pretrained(str(tmp))
    report.adapter_path = str(target)
    (tmp / _METRICS).write_text(json.dumps(report.to_dict(), indent=2), encoding="utf-8")
    (tmp / SFT_DONE_MARKER).write_text("ok\n", encoding="utf-8")
    merged = target / MERGED_DIR
    if merged.is_dir():  # a merge of an older adapter is stale: drop it with the old adapter
        shutil.rmtree(merged)
    publish(tmp, target)


def _merge(model: Any, tokenizer: Any, adapter: Path) -> Path:
    """Fold ``adapter`` into ``model`` (in place) and save the result under ``adapter/merged``."""
    from peft import PeftModel

    target = adapter / MERGED_DIR
    tmp = fresh_tmp(target)  # adapter/.merged.tmp
    merged = PeftModel.from_pretrained(model, str(adapter)).merge_and_unload()
    merged.save_pretrained(str(tmp))
    tokenizer.save_pretrained(str(tmp))
    (tmp / _MERGED_MARKER).write_text("ok\n", encoding="utf-8")
    publish(tmp, target)
    return target


def merge_adapter(base_model: str | Path, adapter: str | Path) -> Path:
    """Fold a LoRA adapter (SFT or DPO, e.g. stage 1's ``agent0``) into its base model.

    The result, a full model folder (weights + tokenizer), is written to ``adapter/merged`` and
    can be the next stage's base (``hf:<path>``). Idempotent: an existing complete merge is
    returned as is.

    Raises:
        ConfigError: ``adapter`` holds no ``adapter_config.json``.
        ModelLoadError: the base model cannot be loaded.
    """
    adapter = Path(adapter).expanduser()
    if not (adapter / "adapter_config.json").is_file():
        raise ConfigError(f"{adapter} is not a LoRA adapter folder (no adapter_config.json); "
                          "train one with collabui train sft or dpo first")
    if (adapter / MERGED_DIR / _MERGED_MARKER).is_file():
        return adapter / MERGED_DIR
    tokenizer, model = load_base(Path(base_model).expanduser())
    return _merge(model, tokenizer, adapter)


def _resumed(out: Path) -> SFTReport | None:
    if not (out / SFT_DONE_MARKER).is_file():
        return None
    try:
        report = SFTReport.from_dict(json.loads((out / _METRICS).read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError):
        report = SFTReport(base_model="?", out_dir=str(out), adapter_path=str(out))
    report.status = "resumed"
    if (out / MERGED_DIR / _MERGED_MARKER).is_file():
        report.merged_path = str(out / MERGED_DIR)
    return report


def _write_metrics(report: SFTReport, out: Path) -> None:
    if (out / SFT_DONE_MARKER).is_file():
        (out / _METRICS).write_text(json.dumps(report.to_dict(), indent=2), encoding="utf-8")


def train_sft(dataset: Any, *, base_model: str | Path, out_dir: str | Path, config: AgentSFTConfig,
              init_adapter: str | Path | None = None, resume: bool = True, merge: bool = False,
              progress: bool = True, verify_base: bool = True) -> SFTReport:
    """Train ONE LoRA adapter with SFT (completion-only loss) and optionally merge it.

    Args:
        dataset: a ``datasets.Dataset`` with ``prompt`` (messages) and ``completion``
            ([assistant turn]) columns; other columns are ignored.
        base_model: folder of the base causal LM and its chat-template tokenizer.
        out_dir: receives the adapter (PEFT ``save_pretrained``), ``sft_metrics.json`` and the
            completion marker; with ``merge`` also ``out_dir/merged/`` (weights + tokenizer).
        config: the training configuration.
        init_adapter: continue training this adapter folder instead of a fresh adapter.
        resume: if ``out_dir`` holds a finished adapter, do not train again (a missing merge is
            still done).
        merge: write the merged full model (the next curriculum stage's base).
        progress: status lines on stderr and TRL's progress bar.
        verify_base: fail if training changed the base weights.

    Raises:
        ConfigError: bad data or config. ModelLoadError: base or init adapter unreadable.
        ModelError: training failed, or the base weights changed.
    """
    if not isinstance(config, AgentSFTConfig):
        raise ConfigError("config must be an AgentSFTConfig; build one with AgentSFTConfig(output_dir=...)")
    if config.full_finetune and (init_adapter or merge):
        raise ConfigError("full_finetune trains the whole model: it continues no adapter (init_adapter) and has "
                          "nothing to merge (merge); drop those, or train a LoRA adapter")
    rows = _check_rows(dataset)
    out = Path(out_dir).expanduser()
    init = Path(init_adapter).expanduser() if init_adapter else None
    if init is not None and not (init / "adapter_config.json").is_file():
        raise ModelLoadError(f"no LoRA adapter in {init}; pass a folder written by train_sft")
    done = _resumed(out) if resume else None
    if done is not None and (not merge or done.merged_path):
        if progress:
            log.info(f"{out}: already trained, skipped")
        return done
    started = time.perf_counter()
    tokenizer, model = load_base(Path(base_model).expanduser())
    before = fingerprint(model) if verify_base else None
    report = done or SFTReport(str(base_model), str(out), config=_config_summary(config),
                               init_from=str(init) if init else None, base_sha256=before)
    if done is None:
        out.parent.mkdir(parents=True, exist_ok=True)
        if config.full_finetune:
            _train_full(rows, model, tokenizer, out, config, report, progress)
        else:
            _train_adapter(rows, model, tokenizer, out, config, init, report, progress)
        if verify_base and fingerprint(model) != before:
            raise ModelError("the base weights changed during SFT; this is a bug, please report it")
    if merge and report.adapter_path:
        report.merged_path = str(_merge(model, tokenizer, out))
        if progress:
            log.info(f"merged model in {report.merged_path}")
    report.seconds = round(time.perf_counter() - started, 2) if done is None else report.seconds
    _write_metrics(report, out)
    return report


def train_agents_sft(dataset: Any, *, base_model: str | Path, out_dir: str | Path,
                     config: AgentSFTConfig, agents: Sequence[int] | None = None,
                     init_adapters_dir: str | Path | None = None, resume: bool = True,
                     progress: bool = True) -> list[SFTReport]:
    """One SFT adapter per agent into ``<out_dir>/agent{i}/`` (rejection fine-tuning ablation).

    ``dataset`` needs an ``agent`` column (``rft_dataset_from_pairs`` makes one). The base is
    loaded once; each agent trains a fresh adapter (or continues ``<init_adapters_dir>/agent{i}``)
    through the same code path as :func:`train_sft`. Agents with a finished adapter are skipped
    when ``resume``. Returns one report per agent, also written to ``<out_dir>/sft_report.json``.
    """
    if not isinstance(config, AgentSFTConfig):
        raise ConfigError("config must be an AgentSFTConfig; build one with AgentSFTConfig(output_dir=...)")
    if "agent" not in (getattr(dataset, "column_names", None) or []):
        raise ConfigError("per-agent SFT needs an 'agent' column; build the data with rft_dataset_from_pairs")
    _check_rows(dataset)
    out = Path(out_dir).expanduser()
    column = [int(a) for a in dataset["agent"]]
    wanted = sorted(set(column)) if agents is None else [int(a) for a in agents]
    tokenizer = model = before = None
    reports = []
    out.mkdir(parents=True, exist_ok=True)
    for agent in wanted:
        target = out / adapter_name(agent)
        done = _resumed(target) if resume else None
        if done is not None:
            reports.append(done)
            continue
        if model is None:
            tokenizer, model = load_base(Path(base_model).expanduser())
            before = fingerprint(model)
        init = Path(init_adapters_dir).expanduser() / target.name if init_adapters_dir else None
        init = init if init is not None and (init / "adapter_config.json").is_file() else None
        rows = _check_rows(dataset.select([k for k, a in enumerate(column) if a == agent]))
        report = SFTReport(str(base_model), str(target), config=_config_summary(config),
                           init_from=str(init) if init else None, base_sha256=before)
        reports.append(_train_adapter(rows, model, tokenizer, target, config, init, report, progress))
        (out / "sft_report.json").write_text(json.dumps([r.to_dict() for r in reports], indent=2), encoding="utf-8")
    if model is not None and fingerprint(model) != before:
        raise ModelError("the base weights changed during SFT; this is a bug, please report it")
    (out / "sft_report.json").write_text(json.dumps([r.to_dict() for r in reports], indent=2), encoding="utf-8")
    return reports


def rft_dataset_from_pairs(pairs_ds: Any, *, min_score: float = 0.5) -> Any:
    """Rejection fine-tuning data: the rewarded outputs of preference pairs, per agent.

    Each pair's ``chosen`` is a rewarded output; the rejected side is dropped. In adversary
    pairs ``score`` is the chosen entry's (rows below ``min_score`` are left out); in own-mistake
    pairs (``rejected_source == "own"``) it is the rejected entry's, and the chosen answer is
    verified right: those rows are kept with score 1.0. Repeated (agent, prompt, completion)
    rows are kept once. Columns: ``prompt``, ``completion``, ``agent``, ``episode_id``, ``t``,
    ``round``, ``score``.
    """
    from datasets import Dataset

    columns = getattr(pairs_ds, "column_names", None) or []
    missing = [c for c in ("prompt", "chosen", "agent", "score") if c not in columns]
    if missing:
        raise ConfigError(f"pairs lack column(s) {missing}; build them with collabui.training.pairs")
    keys = ("prompt", "completion", "agent", "episode_id", "t", "round", "score")
    out: dict[str, list[Any]] = {k: [] for k in keys}
    seen: set[str] = set()
    for row in pairs_ds:
        own = row.get("rejected_source") == "own"  # chosen: a verified-right answer
        score = 1.0 if own else row["score"]
        if score is None or float(score) < min_score:
            continue
        key = json.dumps([row["agent"], row["prompt"], row["chosen"]], ensure_ascii=False)
        if key in seen:
            continue
        seen.add(key)
        values = {"prompt": row["prompt"], "completion": row["chosen"], "agent": int(row["agent"]),
                  "episode_id": str(row.get("episode_id", "")), "t": int(row.get("t", 0)),
                  "round": int(row.get("round", 0)), "score": float(score)}
        for k in keys:
            out[k].append(values[k])
    return Dataset.from_dict(out)
