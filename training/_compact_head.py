"""TRL's fused LM head, made to score only the labelled positions on a CPU too.

TRL's SFT and DPO trainers patch the model's ``forward`` with a fused LM head
(``trl.trainer.utils.add_fused_lm_head``): called with ``fused_lm_head=True`` it returns per-token
log-probabilities (and entropy, top-1 hits...) instead of logits. On CUDA and XPU it projects
only the positions whose label is not -100 (a Triton kernel); on every other device it projects
every position and masks afterwards, so that tile shapes never change. On a CPU that is pure
waste for an agent's rows: a ~170-token page and a ~20-token answer, and SmolLM2's LM head
(49,152 x 576, a fifth of the weights) then runs forward and backward over eight times the
tokens the loss reads. Measured on the recipe's rows: an SFT step 2.0-2.5x faster
(``cookbook/cpu_recipe/sft_speed.py``).

:func:`compact_lm_head` replaces that patched ``forward`` by one that runs the backbone as usual
(LoRA layers included: PEFT injects them into the backbone's own modules), keeps the hidden
states of the labelled positions only and returns the same fields, zero where the label is -100.
What it does not cover (pre-shifted labels, MoE router losses, heads that scale or cap their
logits) goes to TRL's forward unchanged, and on CUDA or XPU it leaves TRL's head alone (compact
there already, and tiled over the vocabulary, which this one is not). ``_peft.restore_base``
removes it with TRL's patch.
"""

from __future__ import annotations

import functools
import types
from typing import Any

__all__ = ["compact_lm_head"]

#: Devices where TRL's fused head already projects the labelled positions only (and in vocabulary
#: tiles, which a large vocabulary on a GPU needs): its head stays there.
_COMPACT_ALREADY = ("cuda", "xpu")
#: Config fields that change the logits after the head; a model with any of them keeps TRL's head.
_SCALED_HEAD = ("final_logit_softcapping", "logit_scale", "output_multiplier", "lm_head_multiplier", "logits_scaling")


def compact_lm_head(trainer: Any) -> bool:
    """Make the fused LM head of ``trainer``'s model (and of its reference model, if any) score
    the labelled positions only. Call it right after building a TRL SFT or DPO trainer.

    Returns:
        Whether the policy model's head was replaced (False: the model is on CUDA or XPU, where
        TRL's head is compact already, its config scales the logits, or the trainer installed no
        fused head; TRL's head then stays).
    """
    model = trainer.accelerator.unwrap_model(trainer.model)
    causal = model.get_base_model() if hasattr(model, "get_base_model") else model
    replaced = _install(causal)
    ref = getattr(trainer, "ref_model", None)
    if ref is not None:
        _install(trainer.accelerator.unwrap_model(ref))
    return replaced


def _install(causal: Any) -> bool:
    trl_forward = causal.__dict__.get("forward")  # TRL patches the instance, not the class
    config = causal.config.get_text_config()
    if trl_forward is None or any(getattr(config, k, None) is not None for k in _SCALED_HEAD):
        return False
    if causal.get_output_embeddings().weight.device.type in _COMPACT_ALREADY:
        return False  # TRL's Triton kernel scores only the labelled positions there, in tiles

    @functools.wraps(type(causal).forward)  # generate() checks its kwargs against this signature
    def forward(self: Any, *args: Any, fused_lm_head: bool = False, labels: Any = None, shift_labels: Any = None,
                num_items_in_batch: Any = None, **kwargs: Any) -> Any:
        if not fused_lm_head or shift_labels is not None or kwargs.get("output_router_logits") \
                or getattr(config, "output_router_logits", False):
            return trl_forward(*args, fused_lm_head=fused_lm_head, labels=labels, shift_labels=shift_labels,
                               num_items_in_batch=num_items_in_batch, **kwargs)
        kwargs["use_cache"] = False
        hidden = self.base_model(*args, **kwargs).last_hidden_state[:, :-1]
        return _scores(self.get_output_embeddings(), hidden, labels[:, 1:].to(hidden.device), num_items_in_batch)

    causal.forward = types.MethodType(forward, causal)
    return True


def _scores(head: Any, hidden: Any, labels: Any, num_items_in_batch: Any) -> Any:
    """TRL's ``FusedCausalLMOutput`` from the labelled positions' hidden states alone."""
    import torch
    from trl.trainer.utils import FusedCausalLMOutput

    mask = labels != -100
    targets = labels[mask]
    logits = head(hidden[mask]).float()  # (labelled tokens, vocab): the only logits built
    log_probs = torch.log_softmax(logits, dim=-1)
    token = log_probs.gather(-1, targets[:, None]).squeeze(-1)
    entropy = -(log_probs.exp() * log_probs).sum(-1)
    with torch.no_grad():
        is_top1 = log_probs.argmax(-1) == targets
        mean_logits = logits.mean(-1)
        log_sum_sq_probs = torch.logsumexp(2 * log_probs, dim=-1)

    def spread(values: Any) -> Any:  # masked_scatter keeps an all-masked batch connected to the graph
        return values.new_zeros(mask.shape).masked_scatter(mask, values)

    per_token = spread(token)
    count = mask.sum().clamp(min=1) if num_items_in_batch is None else num_items_in_batch
    return FusedCausalLMOutput(loss=-per_token.sum() / count, log_probs=per_token, entropy=spread(entropy),
                               log_sum_sq_probs=spread(log_sum_sq_probs), mean_logits=spread(mean_logits),
                               is_top1=spread(is_top1), label_mask=mask, aux_loss=None)
