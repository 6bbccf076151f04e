"""Training a team from its own recorded traces (extra ``[train]``).

Credit re-assignment (a critic scores every entry of each step's action matrix), adversarial
preference pairs, per-agent DPO with LoRA adapters, iterative MARL with edge updates, and
agentic fine-tuning. Heavy dependencies (torch, TRL, PEFT, datasets) load lazily.
"""
