"""A tiny model with every weight moved by seeded noise, as a full fine-tune moves them (for
the tests of what reads fully fine-tuned models: the extract, the soup, the recipe's draws)."""

from __future__ import annotations

from pathlib import Path


def moved_copy(source: Path, folder: Path, seed: int, scale: float = 0.05) -> Path:
    """Save to ``folder`` the model of ``source`` (and its tokenizer) with ``scale`` x N(0, 1)
    noise, drawn from ``seed``, added to every parameter."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(source)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(scale * torch.randn(p.shape, generator=generator))
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(source).save_pretrained(folder)
    return folder
