"""Prompts for the role-free agents (ReAct style: a short reason, then one action as JSON).

Every agent gets the same instructions (no roles). What differs between agents is what they
read: the outputs of their DAG predecessors in this round and their own output of the previous
round (paper Eq. 2, one-round memory). The exact messages built here are stored in the trace, so
training rebuilds each agent's context byte for byte.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from collabui.actions import ActionSpace
from collabui.devices.base import Observation
from collabui.errors import ConfigError
from collabui.models.base import Message

__all__ = ["PeerOutput", "PROMPT_STYLES", "build_messages", "render_observation"]

PROMPT_STYLES = ("react", "compact")

_INTRO = {
    "web": "You operate a web browser to complete the user's task.",
    "mobile": "You operate an Android phone to complete the user's task.",
}
_SCREEN = {
    "web": "The page is simplified HTML; each element you can act on has an id in brackets, "
    "like <button[B]| Submit> (id B).",
    "mobile": "The screen is a numbered list of UI elements; act on an element by its number "
    "(index).",
}


@dataclass(frozen=True)
class PeerOutput:
    """What one agent said: shown to its successors (same round) and to itself (next round)."""

    agent: int
    round: int
    thought: str | None
    action_json: str | None
    raw: str

    def render(self, limit: int = 300) -> str:
        if self.action_json is not None:
            thought = (self.thought or "").strip().replace("\n", " ")
            text = f"Thought: {thought[:limit]}\nAction: {self.action_json}" if thought else f"Action: {self.action_json}"
        else:
            text = f"(unparsable) {self.raw.strip()[:limit]}"
        return text


def _system(space: ActionSpace, style: str) -> str:
    lines = [_INTRO.get(space.name, _INTRO["web"]), _SCREEN.get(space.name, _SCREEN["web"])]
    if style == "react":
        lines.append(
            "You work in a team of agents that discuss before acting; other agents' answers "
            "may contain errors, so judge them yourself."
        )
    lines += [
        "Available actions (JSON):",
        space.description,
        "Answer with exactly two lines:",
        "Thought: <one short sentence>",
        'Action: <one JSON action, e.g. {"action": "click", "element_id": "B"}>'
        if space.name == "web"
        else 'Action: <one JSON action, e.g. {"action": "click", "index": 3}>',
    ]
    return "\n".join(lines)


def render_observation(obs: Observation, *, max_chars: int = 6000) -> str:
    """The observation as agents read it: location line(s), the screen, the last error."""
    head = []
    if obs.url:
        head.append(f"Location: {obs.url}")
    if len(obs.tabs) > 1:
        tabs = ", ".join(f"{k}. {t}{' (current)' if k == obs.current_tab else ''}" for k, t in enumerate(obs.tabs))
        head.append(f"Tabs: {tabs}")
    if obs.viewport:
        head.append(f"Viewport (pages): {obs.viewport}")
    text = obs.text if len(obs.text) <= max_chars else obs.text[:max_chars] + " ...(truncated)"
    out = "\n".join([*head, text])
    if obs.last_action_error:
        out += f"\nLast action failed: {obs.last_action_error}"
    return out


def _history(history: Sequence[str]) -> str:
    if not history:
        return "None"
    return "; ".join(f"{k + 1}. {h}" for k, h in enumerate(history))


def build_messages(
    *,
    space: ActionSpace,
    task: str,
    observation: str,
    history: Sequence[str],
    peers: Sequence[PeerOutput] = (),
    own_previous: PeerOutput | None = None,
    style: str = "react",
) -> tuple[Message, ...]:
    """Build agent messages for one (agent, round) node.

    Args:
        space: the action space the agent must answer in.
        task: the user's task.
        observation: the rendered observation (``render_observation``).
        history: executed actions so far, oldest first (call strings).
        peers: this round's outputs of the agent's DAG predecessors.
        own_previous: the agent's own output of the previous round, if any.
        style: ``react`` (default) or ``compact`` (shorter system prompt for small models).
    """
    if style not in PROMPT_STYLES:
        raise ConfigError(f"unknown prompt style {style!r}; use one of {list(PROMPT_STYLES)}")
    parts = [f"Task: {task}", f"Previous actions: {_history(history)}", "Current screen:", observation]
    if own_previous is not None:
        parts += ["Your answer in the previous round:", own_previous.render()]
    if peers:
        parts.append("Answers from other agents in this round (they may contain errors):")
        parts += [f"[Agent {p.agent}] {p.render()}" for p in peers]
    parts.append("What is the next action? Reply with a Thought line and an Action line.")
    return (
        {"role": "system", "content": _system(space, style)},
        {"role": "user", "content": "\n".join(parts)},
    )
