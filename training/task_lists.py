"""The MiniWoB++ task lists that keep the learning figures honest (issue: training that works).

Training (data, critics, rollouts, hyperparameter and prompt choices) uses only
:data:`TRAIN_TASKS` and synthetic pages; :data:`HELDOUT_TASKS` are for the reported held-out
figure only. Every other shipped task stays unseen.
"""

from __future__ import annotations

__all__ = ["TRAIN_TASKS", "HELDOUT_TASKS"]

TRAIN_TASKS: tuple[str, ...] = (
    "click-button", "click-link", "click-test", "click-test-2", "click-dialog", "click-widget",
    "click-tab", "focus-text", "focus-text-2", "enter-text", "enter-text-dynamic",
    "click-checkboxes", "click-checkboxes-transfer", "login-user-popup", "click-collapsible-2",
    "click-tab-2-medium", "multi-layouts", "use-autocomplete", "navigate-tree", "form-sequence",
)

HELDOUT_TASKS: tuple[str, ...] = (
    "click-option", "click-dialog-2", "click-button-sequence", "enter-password", "login-user",
    "multi-orderings", "form-sequence-2", "email-inbox-delete",
)
