"""The adversarial agent (paper Eq. 7): a plausible WRONG action for each rewarded entry.

For a rewarded proposal a^{i,j}_t the adversary writes a^{i,j,-}_t in the same context (task,
screen, history and what agent i read). The pair (chosen, rejected) becomes DPO data.

* :class:`LLMAdversary` asks a chat model (our own adversarial prompt). Its answer is rejected
  when it does not parse into the action space or canonicalises to the chosen action (the
  ``Action.key`` of the vote: ``click('b')`` equals ``click('B')``); then
  :class:`RuleAdversary` takes over.
* :class:`RuleAdversary` perturbs the chosen action deterministically (seeded by episode, t,
  i, j): another element of the screen, another action type, wrong text, the other direction.
  Its output always differs from the chosen action, and reuses the chosen answer's own thought
  (the target swapped), so the pair differs in the action, not in the wording.

Rejected texts are formatted like agent answers: ``Thought: ...\\nAction: {json}``.
"""

from __future__ import annotations

import hashlib
import random
import re
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from collabui.actions import Action, Unknown
from collabui.models.base import ChatModel, ChatRequest
from collabui.parsing import parse_proposal, render_answer, without_heads
from collabui.training.critic import StepContext, to_action

__all__ = ["Rejected", "Adversary", "RuleAdversary", "LLMAdversary", "format_answer",
           "screen_ids", "screen_indices"]

_WORD = re.compile(r"[A-Za-z][A-Za-z0-9'-]{2,}")
_FALLBACK_WORDS = ("hello", "test", "none", "example", "admin")
_APPS = ("Settings", "Chrome", "Camera", "Contacts", "Clock", "Files")


@dataclass(frozen=True)
class Rejected:
    """One adversarial answer: ``text`` (agent-answer format), its ``action`` dict and its
    ``source`` (``"llm"`` or ``"rule"``)."""

    text: str
    action: dict[str, Any]
    source: str


def format_answer(thought: str, action: Action) -> str:
    """``Thought: ...\\nAction: {json}``, the format agents answer in."""
    thought = " ".join(thought.split()) or "This is the next step."
    return render_answer(action.to_json(), thought)


def screen_ids(observation: str) -> list[str]:
    """Element ids of a web page in either format (``<button[B]| Submit>`` or ``button "Submit"
    [B]`` -> ``B``), in order, as the device's format reads them back."""
    from collabui.devices.simplify import parse_elements

    return list(dict.fromkeys(e.id.upper() for e in parse_elements(observation) if e.id))


def screen_indices(observation: str) -> list[int]:
    """Element indices of a mobile screen (``3: Button "OK"`` -> 3), in order, read by the
    device's own line reader."""
    from collabui.devices.ui_elements import parse_lines

    return list(dict.fromkeys(r["index"] for r in parse_lines(observation)))


class Adversary(ABC):
    """Writes a plausible wrong answer for entry (i, j) of a step."""

    name: str = "adversary"

    @abstractmethod
    def reject(self, ctx: StepContext, i: int, j: int,
               chosen_action: Mapping[str, Any] | Action) -> Rejected:
        """A wrong answer whose action differs (canonically) from ``chosen_action``."""

    def reject_many(self, items: Sequence[tuple[StepContext, int, int, Mapping[str, Any] | Action]],
                    ) -> list[Rejected]:
        """Several at once; model-backed adversaries override this to batch."""
        return [self.reject(*item) for item in items]


# ----------------------------------------------------------------------------- rules


def _seed(*parts: Any) -> int:
    digest = hashlib.sha256("|".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big")


def _wrong_text(text: str, page_words: Sequence[str], rng: random.Random) -> str:
    """A plausible but different text: another word of the page, else a stock word."""
    words = [w for w in page_words if w.casefold() != text.strip().casefold()]
    pool = words or [w for w in _FALLBACK_WORDS if w != text.strip().casefold()]
    return rng.choice(pool)


def _page_words(observation: str) -> list[str]:
    """The words of the page's own text, in order: not of the observation's head lines
    (``Viewport (pages): 1 of 1`` is no text an agent types) nor of the element markup."""
    from collabui.devices.simplify import parse_elements

    texts = (e.text or "" for e in parse_elements(without_heads(observation)))
    return list(dict.fromkeys(w for text in texts for w in _WORD.findall(text)))


def _label_words(observation: str) -> list[str]:
    """The words of a phone screen's labels (``3: Button "OK" [..]`` -> ``OK``), in order, read
    by the device's own line reader."""
    from collabui.devices.ui_elements import parse_lines

    labels = (str(r.get("label") or "") for r in parse_lines(observation))
    return list(dict.fromkeys(w for label in labels for w in _WORD.findall(label)))


def _web_candidates(a: dict[str, Any], obs: str, rng: random.Random) -> list[dict[str, Any]]:
    name = a.get("action")
    ids = screen_ids(obs)
    eid = str(a.get("element_id", "")).upper()
    # Another element of the page; None on a one-element page (an id the page does not show is
    # not a mistake an agent makes there: the other perturbations stand in).
    others = [x for x in ids if x != eid]
    other = rng.choice(others) if others else None
    click_other = [{"action": "click", "element_id": other}] if other else []
    cands: list[dict[str, Any]] = []
    if name in ("click", "hover", "select", "type_string") and other:
        cands.append({**a, "element_id": other})
    if name == "click":
        cands.append({"action": "hover", "element_id": eid})
    elif name == "hover":
        cands.append({"action": "click", "element_id": other or eid})
    elif name == "select":
        cands += [{**a, "option": _wrong_text(str(a.get("option", "")), _page_words(obs), rng)}, *click_other]
    elif name == "type_string":
        cands += [{**a, "content": _wrong_text(str(a.get("content", "")), _page_words(obs), rng)}, *click_other]
    elif name == "scroll_page":
        cands.append({"action": "scroll_page", "direction": "up" if a.get("direction") == "down" else "down"})
    elif name == "go":
        cands.append({"action": "go", "direction": "forward" if a.get("direction") == "backward" else "backward"})
    elif name == "switch_tab":
        cands.append({"action": "switch_tab", "tab_index": int(a.get("tab_index", 0)) + 1})
    elif name == "finish" and a.get("answer"):
        cands.append({"action": "finish", "answer": _wrong_text(str(a["answer"]), _page_words(obs), rng)})
    # The generic last three (RuleAdversary.reject keeps them last): a stray click (a hover where
    # the page has one element), the premature scroll, the step back.
    stray = click_other or [{"action": "hover", "element_id": eid or (ids or ["A"])[0]}]
    return [*cands, *stray, {"action": "scroll_page", "direction": "down"}, {"action": "go", "direction": "backward"}]


def _mobile_candidates(a: dict[str, Any], obs: str, rng: random.Random) -> list[dict[str, Any]]:
    name = a.get("action")
    indices = screen_indices(obs)
    idx = a.get("index")
    others = [k for k in indices if k != idx] or [k for k in (0, 1, 2) if k != idx]
    other = rng.choice(others)
    cands: list[dict[str, Any]] = []
    if name in ("click", "double_tap", "long_press", "input_text"):
        cands.append({**a, "index": other})
    if name == "click":
        cands.append({"action": "long_press", "index": idx})
    elif name in ("double_tap", "long_press"):
        cands.append({"action": "click", "index": other})
    elif name == "input_text":
        cands.append({**a, "text": _wrong_text(str(a.get("text", "")), _label_words(obs), rng)})
    elif name in ("scroll", "swipe"):
        flip = {"up": "down", "down": "up", "left": "right", "right": "left"}
        cands.append({**a, "direction": flip.get(str(a.get("direction")), "down")})
    elif name == "open_app":
        cands.append({"action": "open_app", "app_name": rng.choice(
            [x for x in _APPS if x.casefold() != str(a.get("app_name", "")).casefold()])})
    elif name == "status":
        cands.append({"action": "status", "goal_status": "infeasible" if a.get("goal_status") == "complete" else "complete"})
    elif name == "answer":
        cands.append({"action": "answer", "text": _wrong_text(str(a.get("text", "")), _label_words(obs), rng)})
    elif name == "navigate_home":
        cands.append({"action": "navigate_back"})
    cands += [{"action": "click", "index": other}, {"action": "navigate_home"}, {"action": "navigate_back"}]
    return cands


def _target(action: Action) -> str | None:
    args = action.args()
    value = args.get("element_id", args.get("index"))
    return None if value is None else str(value)


def _mirrored_thought(chosen_raw: str, chosen: Action, wrong: Action, space: Any,
                     observation: str = "") -> str | None:
    """The chosen answer's own thought with the chosen target swapped for the wrong one.

    A pair that differs only in the target (and the action) teaches the action; a rejected
    answer in another wording mostly teaches the wording (measured: DPO on template-worded
    rejections made a team repeat its demonstration's sentence). A thought that copies the
    chosen element's screen line (text-first, ``click button "OK" [B]``) gets the wrong
    element's whole line: an id swapped under the chosen element's text is an answer no agent
    writes, and DPO learnt from it to write a button's text as its id (runs/v67m, no-CR
    ablation). None when the chosen answer has no thought to mirror.
    """
    thought = (parse_proposal(chosen_raw, space).thought or "").strip()
    if not thought:
        return None
    old, new = _target(chosen), _target(wrong)
    if space.name == "web" and old and new and old != new:
        from collabui.devices.simplify import element_lines

        lines = element_lines(observation)
        if lines.get(old) and lines.get(new) and lines[old] in thought:
            return thought.replace(lines[old], lines[new])
    if old and new and old != new:
        # Whole-token replacement only: "B" must not turn "Button" into "Cutton".
        thought = re.sub(rf"(?<![\w]){re.escape(old)}(?![\w])", new, thought)
    return thought


def _thought(action: Action) -> str:
    """A plausible-sounding reason, so the pair differs in the action, not in the style."""
    if "element_id" in action.args():
        return f"Element {action.args()['element_id']} looks like the right one for this task."
    if "index" in action.args() and action.args()["index"] is not None:
        return f"Element {action.args()['index']} looks like the right one for this task."
    return f"The next step should be {action.name.replace('_', ' ')}."


class RuleAdversary(Adversary):
    """Deterministic perturbations of the chosen action (see the module docstring).

    Args:
        seed: mixed with (episode_id, t, i, j), so reruns give the same pairs.
    """

    name = "rule"

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    def reject(self, ctx: StepContext, i: int, j: int,
               chosen_action: Mapping[str, Any] | Action) -> Rejected:
        space = ctx.space
        chosen = to_action(chosen_action, space)
        rng = random.Random(_seed(self.seed, ctx.episode_id, ctx.t, i, j))
        data = chosen.to_dict()
        make = _mobile_candidates if space.name == "mobile" else _web_candidates
        cands = make(data, ctx.observation, rng)
        head, tail = cands[:-3], cands[-3:]  # specific perturbations first, generic ones last
        rng.shuffle(head)
        for cand in head + tail:
            action = to_action(cand, space)
            if not isinstance(action, Unknown) and action.key() != chosen.key():
                raw = ctx.raws[i][j] if i < len(ctx.raws) and j < len(ctx.raws[i]) else ""
                thought = (_mirrored_thought(str(raw or ""), chosen, action, space, ctx.observation)
                           or _thought(action))
                return Rejected(format_answer(thought, action), action.to_dict(), "rule")
        raise AssertionError(f"no perturbation differs from {chosen}")  # generic tail prevents it


# ----------------------------------------------------------------------------- LLM

_ADV_SYSTEM = """You help train UI agents by writing realistic MISTAKES. You read what an agent read
(task, previous actions, current screen, other agents' answers) and the correct next action. Write a
different action that a careless agent could plausibly choose but that is wrong here: a wrong
element, a wrong action type, wrong text, or the wrong direction. Never repeat the correct action.
Answer exactly like the agent would, in two lines:
Thought: <one short sentence that sounds convinced>
Action: <one JSON action from the list below>
Available actions (JSON):
{actions}"""


class LLMAdversary(Adversary):
    """A chat model writes the wrong action; bad answers fall back to ``fallback``.

    Args:
        model: the adversary's chat model.
        temperature: sampling temperature (some diversity helps the pairs).
        max_new_tokens: generation budget.
        fallback: used when the model's answer does not parse or equals the chosen action
            (default: ``RuleAdversary()``).

    Attributes:
        stats: counts of ``llm`` (accepted), ``unparsable`` and ``same_as_chosen`` answers.
    """

    def __init__(self, model: ChatModel, *, temperature: float = 0.7, max_new_tokens: int = 160,
                 fallback: Adversary | None = None) -> None:
        self.model = model
        self.temperature = temperature
        self.max_new_tokens = max_new_tokens
        self.fallback = fallback or RuleAdversary()
        self.name = f"llm:{getattr(model, 'name', 'model')}"
        self.stats = {"llm": 0, "unparsable": 0, "same_as_chosen": 0}

    def request(self, ctx: StepContext, agent_view: str, chosen: Action) -> ChatRequest:
        """The request for one entry; ``agent_view`` is the last user message agent i read."""
        system = _ADV_SYSTEM.format(actions=ctx.space.description)
        user = (f"{agent_view}\n\nCorrect next action: {chosen.to_json()}\n"
                "Write one plausible but WRONG action instead.")
        return ChatRequest(messages=({"role": "system", "content": system},
                                     {"role": "user", "content": user}),
                           temperature=self.temperature, max_new_tokens=self.max_new_tokens)

    def reject(self, ctx: StepContext, i: int, j: int,
               chosen_action: Mapping[str, Any] | Action) -> Rejected:
        return self.reject_many([(ctx, i, j, chosen_action)])[0]

    def reject_many(self, items: Sequence[tuple[StepContext, int, int, Mapping[str, Any] | Action]],
                    ) -> list[Rejected]:
        if not items:
            return []
        chosen = [to_action(a, ctx.space) for ctx, _, _, a in items]
        requests = [self.request(ctx, _agent_view(ctx, i, j), c)
                    for (ctx, i, j, _), c in zip(items, chosen, strict=True)]
        results = self.model.generate(requests)
        out = []
        for item, c, result in zip(items, chosen, results, strict=True):
            parsed = parse_proposal(result.text, item[0].space)
            if isinstance(parsed.action, Unknown):
                self.stats["unparsable"] += 1
            elif parsed.action.key() == c.key():
                self.stats["same_as_chosen"] += 1
            else:
                self.stats["llm"] += 1
                text = format_answer(parsed.thought or _thought(parsed.action), parsed.action)
                out.append(Rejected(text, parsed.action.to_dict(), "llm"))
                continue
            out.append(self.fallback.reject(*item))
        return out


def _agent_view(ctx: StepContext, i: int, j: int) -> str:
    """What agent i read at (t, j): its last user message when the context carries it,
    else the task, history and screen."""
    messages = ctx.messages[i][j] if ctx.messages else None
    if messages:
        return str(messages[-1]["content"])
    past = "; ".join(f"{k + 1}. {h}" for k, h in enumerate(ctx.history)) or "None"
    return f"Task: {ctx.task}\nPrevious actions: {past}\nCurrent screen:\n{ctx.observation}"
