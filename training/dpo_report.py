"""What per-agent DPO reports: the length check, per-agent stats and the run's report.

Re-exported by :mod:`collabui.training.dpo`; import them from there. Plain dataclasses with no
heavy imports, so reading a saved ``dpo_report.json`` needs neither torch nor TRL.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "AgentDPOStats",
    "DPOReport",
    "LengthCheck",
    "collect_metrics",
    "config_summary",
    "stats_from_dict",
]


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
    """The result of :func:`collabui.training.dpo.train_agents_dpo` (JSON-serialisable)."""

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
        data["agents"] = [stats_from_dict(a) for a in data.get("agents", [])]
        return cls(**data)

    def agent(self, i: int) -> AgentDPOStats:
        """The stats of agent ``i`` (KeyError if it was not in the run)."""
        for stats in self.agents:
            if stats.agent == i:
                return stats
        raise KeyError(i)


def stats_from_dict(data: dict[str, Any]) -> AgentDPOStats:
    """An :class:`AgentDPOStats` from its ``asdict`` form (JSON turned the pairs into lists)."""
    for key in ("loss", "margins", "accuracies"):
        data[key] = [tuple(p) for p in data.get(key, [])]
    return AgentDPOStats(**data)


def collect_metrics(stats: AgentDPOStats, history: list[dict[str, Any]], steps: int) -> None:
    """Fill ``stats``' curves, step count and timing from TRL's ``log_history``."""
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


def config_summary(config: Any) -> dict[str, Any]:
    """The settings of an ``AgentDPOConfig`` that the report records (JSON-ready)."""
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
