"""Prompts for the role-free agents (ReAct style: a short reason, then one action as JSON).

Every agent gets the same instructions (no roles). What differs between agents is what they
read: the outputs of their DAG predecessors in this round and their own output of the previous
round (paper Eq. 2, one-round memory). The exact messages built here are stored in the trace, so
training rebuilds each agent's context byte for byte.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

from collabui.actions import Action, ActionSpace
from collabui.devices import simplify
from collabui.devices.base import Observation
from collabui.errors import ConfigError
from collabui.models.base import Message
from collabui.parsing import OBSERVATION_HEADS, TEAM_HEADINGS, render_answer

__all__ = ["GROUNDED_STYLES", "PeerOutput", "PROMPT_STYLES", "answer_call", "build_messages", "history_entry",
           "history_in_format", "own_answer_block", "render_observation"]

#: ``react``: instructions, a demonstration turn, Thought + Action answers (untrained models).
#: ``compact``: a shorter system prompt, same answers. ``trained``: for models fine-tuned on
#: verified data (adapters): no demonstration turn (small models copy its answer verbatim) and
#: an ``Action:`` line alone, which keeps a step near 150 prompt tokens on MiniWoB++ pages.
#: ``grounded``: as ``trained``, but the answer first names the action and copies the screen
#: line of the element it acts on (``Thought: click button "Ok" [B]``): picking an element by
#: its text and then copying the id written after that text is easier for a small model than
#: recalling the id directly. ``terse``: ``grounded`` answers with the shortest prompt: the system
#: line says only what the agent operates, no viewport line on a page that fits one screen, and
#: a team's answers under short headings as their actions alone (the thought repeats the action's
#: target). A 4 x 3 team agent's prompt falls from ~251 to ~181 tokens on the training pages, and
#: an SFT step on a CPU costs per token. ``named``: ``terse``, but a team's answers read as calls
#: naming their element by its screen line and id (``click(button "TWO" [E])``, :func:`answer_call`):
#: an answer shown as its id alone could be checked against the page only by looking the id up,
#: and v30t's team, trained on them, came to distrust its own right answers (memory_probe).
PROMPT_STYLES = ("react", "compact", "trained", "grounded", "terse", "named")
#: The styles whose answers copy the target's screen line into the ``Thought:`` line.
GROUNDED_STYLES = ("grounded", "terse", "named")
#: The styles with the shortest prompt (one-line system prompt, short team headings).
_TERSE_STYLES = ("terse", "named")

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
    #: The action as a call naming its element (:func:`answer_call`), for the ``named`` style.
    named: str | None = None

    def render(self, limit: int = 200, *, style: str = "react") -> str:
        """The answer as readers in ``style`` see it: ``Thought: ...`` and ``Action: <json>``
        lines; in ``terse`` the action's JSON alone; in ``named`` the call naming its element
        (the JSON when no call was given)."""
        if self.action_json is None:
            # Unparsable text is noise to the reader (small models echo it); say only that.
            return "(no valid action)"
        if style == "named" and self.named:
            return self.named
        if style in _TERSE_STYLES:
            return self.action_json
        thought = (self.thought or "").strip().replace("\n", " ")[:limit]
        return render_answer(self.action_json, thought)


# One worked exchange, given as a prior chat turn: small models copy the answer format from a
# demonstration far more reliably than from a description (SmolLM2-135M: 1/4 -> 4/4 parsable).
_DEMO = {
    "web": (
        "Task: Click the Submit button.\nPrevious actions: None\nCurrent screen:\n"
        "< <div| Your order> <button[A]| Cancel> <button[B]| Submit> >",
        'Thought: The Submit button has id B.\nAction: {"action": "click", "element_id": "B"}',
    ),
    "mobile": (
        "Task: Open the Wi-Fi settings.\nPrevious actions: None\nCurrent screen:\n"
        '0: TextView "Settings"\n1: TextView "Wi-Fi" (clickable)\n2: TextView "Bluetooth" (clickable)',
        'Thought: Wi-Fi is element 1.\nAction: {"action": "click", "index": 1}',
    ),
}
_COMPACT_ACTIONS = {
    "web": "click(element_id), hover(element_id), select(element_id, option), "
    "type_string(element_id, content, press_enter), scroll_page(direction), go(direction), "
    "jump_to(url, new_tab), switch_tab(tab_index), user_input(message), finish(answer)",
    "mobile": "click(index), double_tap(index), long_press(index), input_text(text, index), "
    "scroll(direction, index), swipe(direction, index), navigate_home(), navigate_back(), "
    "keyboard_enter(), open_app(app_name), wait(), answer(text), status(goal_status)",
}


def _system(space: ActionSpace, style: str) -> str:
    kind = space.name if space.name in _INTRO else "web"
    if style in _TERSE_STYLES:
        # A trained model learned the answer format from its data; describing it costs tokens.
        return _INTRO[kind]
    if style == "trained":
        # The fine-tuned model learned the action vocabulary from its data: listing it would
        # cost ~70 of every prompt's tokens (a third of a MiniWoB++ step).
        return _INTRO[kind] + " Answer with one line: Action: <JSON action>"
    if style == "grounded":
        return (_INTRO[kind] + " Answer with two lines: Thought: <action name> <the screen line of "
                "the element it acts on>, then Action: <JSON action>")
    lines = [_INTRO[kind], _SCREEN[kind]]
    if style == "react":
        lines += [
            "You work in a team of agents that discuss before acting; other agents' answers "
            "may contain errors, so judge them yourself.",
            "Available actions (JSON):",
            space.description,
        ]
    else:
        lines.append("Actions: " + _COMPACT_ACTIONS[kind] + ".")
    lines += [
        "Answer with exactly two lines:",
        "Thought: <one short sentence>",
        "Action: <one JSON action>",
    ]
    return "\n".join(lines)


def render_observation(obs: Observation, *, max_chars: int = 6000) -> str:
    """The observation as agents read it: location line(s), the screen, the last error."""
    head = []
    if obs.url:
        head.append(OBSERVATION_HEADS["location"] + obs.url)
    if len(obs.tabs) > 1:
        tabs = ", ".join(f"{k}. {t}{' (current)' if k == obs.current_tab else ''}" for k, t in enumerate(obs.tabs))
        head.append(OBSERVATION_HEADS["tabs"] + tabs)
    if obs.viewport:
        head.append(_VIEWPORT_HEAD + obs.viewport)
    text = obs.text if len(obs.text) <= max_chars else obs.text[:max_chars] + " ...(truncated)"
    out = "\n".join([*head, text])
    if obs.last_action_error:
        out += f"\nLast action failed: {obs.last_action_error}"
    return out


def history_entry(action: Action, observation: Observation | None = None, *, note: str | None = None) -> str:
    """How an executed action reads in later prompts' history: its call form with the element
    named by its screen line instead of its id, ``click(<button| Submit>)``, a form field also by
    its label, ``type_string(<input| > (Username), 'kim')``, and ``note`` in brackets after it
    (``click(<button| Pay>) [refused]``).

    Ids name elements of one observation only: a device that shuffles them (or a page that
    re-renders) gives the same button another id at the next step, and agents reading
    ``click('D')`` in the history then re-used the stale id. The element's line is taken from
    the observation the action was executed on; without an element tree (phones, texts stored
    without their tree) or when the id is not on it, the plain call form is kept. The note says
    what did not happen (an action the approval policy refused, a navigation the guard
    blocked): without it the agents read the action as done.
    """
    tree = observation.extra.get("tree") if observation is not None else None
    element_format = simplify.observation_format(observation.text) if observation is not None else "html"
    call = answer_call(action, tree, element_format, with_id=False)
    return f"{call} [{note}]" if note else call


def history_in_format(entry: str, element_format: str) -> str:
    """A :func:`history_entry` written on a page of one element format, as it reads on a page of
    ``element_format`` (``click(<button| Ok>)`` <-> ``click(button "Ok")``): what a row recorded
    on html pages shows a model trained to read text-first ones. Entries naming no element (a
    call form, a phone's action) come back unchanged."""
    simplify.check_element_format(element_format)
    html = _HTML_NAMED.match(entry)
    if html and simplify.is_text_first(element_format):
        name = simplify.element_name(html["tag"], html["text"], element_format)
        return f"{html['verb']}({name}{html['rest']}"
    text_first = _TEXT_FIRST_NAMED.match(entry)
    if text_first:  # a typed field's entry reads as the input it is in the other formats
        tag, text = simplify.untyped_name(text_first["tag"], json.loads(text_first["text"]))
        name = simplify.element_name(tag, text, element_format)
        return f"{text_first['verb']}({name}{text_first['rest']}"
    return entry


# What follows an element's name in an entry: its label, the other arguments or the call's end.
_AFTER_NAME = r"(?P<rest>(?: \(|, |\)).*)$"
_HTML_NAMED = re.compile(r"(?P<verb>\w+)\(<(?P<tag>[\w-]*)\| (?P<text>.*?)>" + _AFTER_NAME)
_TEXT_FIRST_NAMED = re.compile(r'(?P<verb>\w+)\((?P<tag>[\w-]+) (?P<text>"(?:[^"\\]|\\.)*")' + _AFTER_NAME)


def answer_call(action: Action, tree: simplify.Node | None, element_format: str = "text-first", *,
                with_id: bool = True) -> str:
    """``action`` as a call that names its element by its line on the screen of ``tree``:
    ``click(button "TWO" [E])``, a field with its label, ``type_string(input "" (City) [U], 'Kyiv')``
    (``with_id=False``: the line without the id, and the label in brackets after it, as a
    history entry reads). The plain call form (``click('E')``) when there is no tree (a phone, a
    text) or the id is not on it."""
    element_id = getattr(action, "element_id", None)
    if not element_id or not tree:
        return action.to_call()
    name = simplify.element_line(tree, str(element_id), element_format, with_id=with_id)
    if name is None:
        return action.to_call()
    # A field's own text is its state (every empty one reads <input| >): its label names it.
    label = "" if with_id else simplify.field_label(tree, str(element_id))
    if label:
        name = f"{name} ({label})"
    args = [name if key == "element_id" else repr(value)
            for key, value in action.args().items() if value is not None]
    return f"{action.name}({', '.join(args)})"


#: The viewport line of a page that fits one screen: nothing to scroll, so ``terse`` leaves it out.
_VIEWPORT_HEAD = OBSERVATION_HEADS["viewport"]
_ONE_SCREEN = _VIEWPORT_HEAD + simplify.format_viewport(0, 1, 1)


def _without_one_screen_viewport(observation: str) -> str:
    lines = observation.split("\n")
    head = [k for k, line in enumerate(lines[:3]) if line == _ONE_SCREEN]  # a head line, not page text
    return "\n".join(line for k, line in enumerate(lines) if k not in head)


def _history(history: Sequence[str]) -> str:
    if not history:
        return "None"
    return "; ".join(f"{k + 1}. {h}" for k, h in enumerate(history))


def own_answer_block(own_previous: PeerOutput, style: str) -> str:
    """How an agent reads its own answer of the previous round in a prompt of ``style``: the
    heading, then the answer (:meth:`PeerOutput.render`)."""
    return f"{TEAM_HEADINGS[_register(style)][0]}\n{own_previous.render(style=style)}"


def _register(style: str) -> str:
    return "terse" if style in _TERSE_STYLES else "full"


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
        style: ``react`` (default), ``compact`` (shorter system prompt for small models) or
            ``trained`` (no demonstration turn, answer ``Action: <json>``) or ``grounded``
            (``trained`` whose answer first copies the target's screen line) or ``terse``
            (``grounded`` answers, shortest prompt) or ``named`` (``terse``, the team's answers
            as named calls); see PROMPT_STYLES.
    """
    if style not in PROMPT_STYLES:
        raise ConfigError(f"unknown prompt style {style!r}; use one of {list(PROMPT_STYLES)}")
    if style in _TERSE_STYLES:
        observation = _without_one_screen_viewport(observation)
    parts = [f"Task: {task}", f"Previous actions: {_history(history)}", "Current screen:", observation]
    if own_previous is not None:
        parts.append(own_answer_block(own_previous, style))
    if peers:
        parts.append(TEAM_HEADINGS[_register(style)][1])
        parts += [f"[Agent {p.agent}] {p.render(style=style)}" for p in peers]
    if style in ("trained", *GROUNDED_STYLES):
        return ({"role": "system", "content": _system(space, style)},
                {"role": "user", "content": "\n".join(parts)})
    parts.append("Reply with a Thought line and an Action line.")
    demo_user, demo_answer = _DEMO[space.name if space.name in _DEMO else "web"]
    return (
        {"role": "system", "content": _system(space, style)},
        {"role": "user", "content": demo_user},
        {"role": "assistant", "content": demo_answer},
        {"role": "user", "content": "\n".join(parts)},
    )
