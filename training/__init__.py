"""Training a team from its own recorded traces (extra ``[train]``).

Credit re-assignment (a critic scores every entry of each step's action matrix, paper Eq. 6),
adversarial preference pairs (Eq. 7), and per-agent DPO with LoRA adapters (Eq. 8). Heavy
dependencies (torch, TRL, PEFT, datasets) load lazily: importing this package is cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "REWARD_THRESHOLD": "critic", "StepContext": "critic", "ScoreMatrix": "critic",
    "ParseStats": "critic", "Critic": "critic", "LLMCritic": "critic",
    "ReferenceCritic": "critic", "OutcomeCritic": "critic", "make_critic": "critic",
    "Rejected": "adversary", "Adversary": "adversary", "RuleAdversary": "adversary",
    "LLMAdversary": "adversary",
    "LabelStats": "labels", "label_traces": "labels", "read_labels": "labels",
    "load_labels": "labels", "expand_trace_paths": "labels",
    "PAIR_COLUMNS": "pairs", "build_pairs": "pairs", "pair_stats": "pairs",
    "pairs_for_agent": "pairs", "save_pairs": "pairs", "load_pairs": "pairs",
    "AgentDPOConfig": "dpo", "DPOReport": "dpo", "AgentDPOStats": "dpo", "train_agents_dpo": "dpo",
    "load_team_model": "dpo", "team_adapters": "dpo", "check_lengths": "dpo",
    "plot_dpo_report": "report",
    "synthesize": "synth", "SynthStats": "synth", "load_sft_dataset": "synth",
    "AgentSFTConfig": "sft", "SFTReport": "sft", "train_sft": "sft", "train_agents_sft": "sft",
    "rft_dataset_from_pairs": "sft", "ExtractReport": "extract", "extract_adapter": "extract",
    "SoupReport": "soup", "average_models": "soup",
    "MARLConfig": "marl", "run_marl": "marl", "MARLReport": "marl_report",
    "ORACLE_TASKS": "oracles", "miniwob_gold_action": "oracles",
}

__all__ = [
    "REWARD_THRESHOLD", "StepContext", "ScoreMatrix", "ParseStats", "Critic", "LLMCritic",
    "ReferenceCritic", "OutcomeCritic", "make_critic", "Rejected", "Adversary", "RuleAdversary",
    "LLMAdversary", "LabelStats", "label_traces", "read_labels", "load_labels",
    "expand_trace_paths", "PAIR_COLUMNS", "build_pairs", "pair_stats", "pairs_for_agent",
    "save_pairs", "load_pairs", "AgentDPOConfig", "DPOReport", "AgentDPOStats", "train_agents_dpo",
    "load_team_model", "team_adapters", "check_lengths", "plot_dpo_report", "synthesize",
    "SynthStats", "load_sft_dataset", "AgentSFTConfig", "SFTReport", "train_sft",
    "train_agents_sft", "rft_dataset_from_pairs", "ExtractReport", "extract_adapter", "SoupReport",
    "average_models", "MARLConfig", "run_marl", "MARLReport",
    "ORACLE_TASKS", "miniwob_gold_action",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'collabui.training' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"collabui.training.{module}"), name)
    globals()[name] = value
    return value
