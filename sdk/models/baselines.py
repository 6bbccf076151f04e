"""Baseline policies that answer like a chat model: a random policy and a lexical policy.

Both read OUR prompt (the messages built by :func:`collabui.prompts.build_messages`): the system
message says which action space is in use (web or mobile), the last user message holds
``Task: ...``, ``Previous actions: ...`` and, after ``Current screen:``, the rendered
observation. They answer ``Thought: ...\\nAction: {json}`` so the team parses them like any model
and every harness runs them exactly like a model (``load_model("random")``,
``load_model("random:7")``, ``load_model("lexical")``).

* :class:`RandomPolicyModel` - a uniformly random action from the candidate list of the screen:
  every (element, applicable action type) pair plus a few page-level actions (see
  :func:`candidate_actions`). Seeded per request from the model seed, ``ChatRequest.seed`` and a
  digest of the prompt, so a rerun gives the same answers whatever the order of requests.
* :class:`LexicalPolicyModel` - the element whose text overlaps most with the task (tokens
  compared case-insensitively; CJK text as character bigrams; tokens of quoted strings in the
  task weigh more). It types the task's quoted string into the best-matching input when there is
  one and the task says to type it (or no other element shows that text) and it was not typed
  already, else clicks; with no overlap at all it scrolls down.
"""

from __future__ import annotations

import hashlib
import math
import random
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from collabui.actions import Action, ActionSpace, get_action_space
from collabui.models.base import ChatModel, ChatRequest, ChatResult, Message
from collabui.parsing import TEAM_HEADINGS, render_answer

__all__ = [
    "RandomPolicyModel",
    "LexicalPolicyModel",
    "PromptView",
    "read_prompt",
    "candidate_actions",
    "tokenize",
    "quoted_strings",
    "lexical_score",
    "screen_targets",
    "Target",
]

_MOBILE_MARK = "Android phone"
_SCREEN_MARK = "\nCurrent screen:\n"
_SCREEN_ENDS = (*(f"\n{h}" for pair in TEAM_HEADINGS.values() for h in pair), "\nReply with a Thought line and an Action line.")

# CJK ideographs, kana and hangul: scripts written without spaces, compared as bigrams.
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
_TOKEN = re.compile(rf"[{_CJK}]+|[^\W_{_CJK}]+")
_CJK_RUN = re.compile(rf"^[{_CJK}]+$")
# Quoted spans: straight double quotes, curly quotes, CJK corner/book-title brackets, and single
# quotes that are not apostrophes (a quote must follow a non-word character).
_QUOTED = re.compile(
    r'"([^"\n]{1,200})"|\u201c([^\u201d\n]{1,200})\u201d|\u300c([^\u300d\n]{1,200})\u300d'
    r"|\u300a([^\u300b\n]{1,200})\u300b|\u2018([^\u2019\n]{1,200})\u2019|(?<!\w)'([^'\n]{1,200})'(?!\w)"
)
# Words so common in tasks that matching them says nothing about an element.
_STOPWORDS = frozenset({
    "a", "an", "the", "to", "of", "in", "on", "for", "and", "or", "with", "by", "at", "from",
    "into", "is", "are", "be", "it", "its", "this", "that", "these", "those", "i", "me", "my",
    "you", "your", "we", "our", "please", "can", "could", "would", "should", "will", "help",
    "find", "click", "go", "page", "website", "site", "button", "link", "then",
})
# Verbs that say the quoted text is to be typed, not clicked ("Enter "Juan"", "搜索“洗衣机”").
_TYPE_VERBS = re.compile(r"(?i)\b(?:type|enter|input|search|fill|write|query|look up)\b|输入|搜索|查询|填写|检索")
_QUOTE_WEIGHT = 3.0
_HISTORY_ID = re.compile(r"\(\s*['\"]([A-Za-z0-9_]{1,8})['\"]")


# --------------------------------------------------------------------------- reading the prompt


@dataclass(frozen=True)
class PromptView:
    """What a baseline reads from our prompt.

    Attributes:
        space: the action space (from the system message).
        task: the task text.
        history: the previous-actions text ("None" when there were none).
        screen: the rendered observation (location/tab/viewport lines included).
        structure: the device's structure of that screen (``tree`` or ``ui_elements``), None
            when only the text is known; the elements are read from it when it is there.
    """

    space: ActionSpace
    task: str
    history: str
    screen: str
    structure: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)


def read_prompt(messages: Sequence[Message], structure: Mapping[str, Any] | None = None) -> PromptView:
    """Split our prompt into space, task, history and screen; tolerant of missing parts.
    ``structure`` is the screen's structure when the caller has it (``ChatRequest.structure``)."""
    system = next((str(m.get("content", "")) for m in messages if m.get("role") == "system"), "")
    space = get_action_space("mobile" if _MOBILE_MARK in system else "web")
    user = next((str(m.get("content", "")) for m in reversed(messages) if m.get("role") == "user"), "")
    task, history, screen = "", "None", user
    start = user.find(_SCREEN_MARK)
    if start >= 0:
        header, screen = user[:start], user[start + len(_SCREEN_MARK):]
        ends = [k for k in (screen.rfind(_SCREEN_ENDS[-1]),) if k >= 0]
        ends += [k for k in (screen.find(e) for e in _SCREEN_ENDS[:-1]) if k >= 0]
        screen = screen[: min(ends)] if ends else screen
        before, _, after = header.partition("\nPrevious actions: ")
        task = before.removeprefix("Task: ").strip() if before.startswith("Task: ") else before.strip()
        history = after.strip() or "None"
    return PromptView(space=space, task=task, history=history, screen=screen, structure=structure)


def tokenize(text: str) -> list[str]:
    """Case-folded tokens: words for spaced scripts, character bigrams for CJK runs."""
    out: list[str] = []
    for match in _TOKEN.finditer(text.casefold()):
        run = match.group()
        if _CJK_RUN.match(run):
            out += [run] if len(run) == 1 else [run[k:k + 2] for k in range(len(run) - 1)]
        elif run not in _STOPWORDS:
            out.append(run)
    return out


def quoted_strings(task: str) -> list[str]:
    """The quoted spans of a task, in order (ASCII, curly and CJK quotes, book-title marks)."""
    return [next(g for g in m.groups() if g is not None).strip() for m in _QUOTED.finditer(task)
            if any(g and g.strip() for g in m.groups())]


# --------------------------------------------------------------------------- screen elements


@dataclass(frozen=True)
class Target:
    """One actionable element of the screen, in either space."""

    ref: str | int  # web element id or mobile index
    kind: str  # web tag or mobile widget type
    text: str
    typeable: bool
    selectable_options: tuple[str, ...] = ()
    long_pressable: bool = False
    scrollable: bool = False


def _web_elements(view: PromptView) -> list[Any]:
    from collabui.devices.simplify import screen_elements

    return screen_elements(view.screen, (view.structure or {}).get("tree"))


def _web_targets(view: PromptView) -> list[Target]:
    targets = []
    for el in _web_elements(view):
        if not el.id:
            continue
        low = el.text.casefold()
        checkbox = low in {"true", "false"} or low.startswith(("checkbox", "radio"))
        options: tuple[str, ...] = ()
        if el.tag == "select" and "options:" in el.full_text:
            listed = el.full_text.split("options:", 1)[1].split("|")
            options = tuple(o.strip() for o in listed if o.strip() and o.strip() != "\u2026")
        typeable = el.tag in {"input", "textarea"} and not checkbox
        targets.append(Target(el.id, el.tag, el.full_text, typeable, options))
    return targets


def _used_web_refs(view: PromptView) -> set[str | int]:
    """Ids of the screen's elements the history already acted on: named by id (``click('B')``)
    or, as the runtime writes it, by their id-free screen line (``click(<button| Ok>)``)."""
    from collabui.devices.simplify import ELEMENT_FORMATS, element_name

    used: set[str | int] = set(_HISTORY_ID.findall(view.history))
    for el in _web_elements(view):  # every format's name: a format added later needs no change here
        if el.id and any(element_name(el.tag, text, fmt) in view.history
                         for text in {el.text, el.full_text} for fmt in ELEMENT_FORMATS):
            used.add(el.id)
    return used


def _mobile_targets(view: PromptView) -> list[Target]:
    from collabui.devices.ui_elements import screen_records

    targets = []
    for line in screen_records(view.screen, (view.structure or {}).get("ui_elements")):
        flags = set(line["flags"])
        targets.append(Target(line["index"], line["type"], line["label"],
                               "editable" in flags, (), "long-clickable" in flags,
                               "scrollable" in flags))
    return targets


def screen_targets(view: PromptView) -> list[Target]:
    """The actionable elements of the screen in ``view``, in document order."""
    return _mobile_targets(view) if view.space.name == "mobile" else _web_targets(view)



def lexical_score(task: str, text: str) -> float:
    """How strongly ``text`` matches ``task``: the lexical policy's score (see its docstring)."""
    return _score(_task_weights(task), text)


def _type_text(task: str) -> str:
    quoted = quoted_strings(task)
    return quoted[0] if quoted else " ".join(task.split()[:5])


def candidate_actions(view: PromptView) -> list[Action]:
    """Every action the random policy draws from, for this screen.

    Web: per element click and hover; type_string (the task's first quoted string, else its first
    words) into inputs and text areas; select of each listed option of a drop-down; plus
    scroll_page up/down, go backward and finish(). Mobile: per element click; long_press when
    long-clickable; input_text when editable; scroll down at the element when scrollable; plus
    scroll up/down, navigate_back, navigate_home and status complete.
    """
    space, text = view.space, _type_text(view.task)
    out: list[Action] = []
    if space.name == "mobile":
        for t in screen_targets(view):
            out.append(space.from_dict({"action": "click", "index": t.ref}))
            if t.long_pressable:
                out.append(space.from_dict({"action": "long_press", "index": t.ref}))
            if t.typeable:
                out.append(space.from_dict({"action": "input_text", "text": text, "index": t.ref}))
            if t.scrollable:
                out.append(space.from_dict({"action": "scroll", "direction": "down", "index": t.ref}))
        page = [{"action": "scroll", "direction": "down"}, {"action": "scroll", "direction": "up"},
                {"action": "navigate_back"}, {"action": "navigate_home"},
                {"action": "status", "goal_status": "complete"}]
    else:
        for t in screen_targets(view):
            out += [space.from_dict({"action": a, "element_id": t.ref}) for a in ("click", "hover")]
            if t.typeable:
                out.append(space.from_dict({"action": "type_string", "element_id": t.ref,
                                            "content": text, "press_enter": False}))
            out += [space.from_dict({"action": "select", "element_id": t.ref, "option": o})
                    for o in t.selectable_options]
        page = [{"action": "scroll_page", "direction": "down"},
                {"action": "scroll_page", "direction": "up"},
                {"action": "go", "direction": "backward"}, {"action": "finish"}]
    return out + [space.from_dict(p) for p in page]


def _answer(thought: str, action: Action, started: float) -> ChatResult:
    text = render_answer(action.to_json(), thought)
    return ChatResult(text=text, prompt_tokens=None, completion_tokens=len(text.split()),
                      latency_s=time.perf_counter() - started)


# --------------------------------------------------------------------------- the models


class RandomPolicyModel(ChatModel):
    """A uniformly random valid action for the screen in the prompt.

    Args:
        seed: the model seed; with ``ChatRequest.seed`` and a digest of the prompt it seeds
            each answer, so the same prompt and seeds always give the same action.
    """

    def __init__(self, seed: int = 0) -> None:
        self.seed = int(seed)
        self.name = f"random:{self.seed}"

    def _rng(self, request: ChatRequest) -> random.Random:
        digest = hashlib.sha256()
        digest.update(f"{self.seed}|{request.seed}|".encode())
        for message in request.messages:
            digest.update(str(message.get("content", "")).encode("utf-8", "surrogatepass"))
        return random.Random(int.from_bytes(digest.digest()[:8], "big"))

    def generate(self, requests: Sequence[ChatRequest]) -> list[ChatResult]:
        """One random candidate action per request (see :func:`candidate_actions`)."""
        results = []
        for request in requests:
            started = time.perf_counter()
            view = read_prompt(request.messages, request.structure)
            candidates = candidate_actions(view)
            action = self._rng(request).choice(candidates)
            results.append(_answer(f"Random choice among {len(candidates)} actions.", action, started))
        return results


class LexicalPolicyModel(ChatModel):
    """The element whose text overlaps most with the task (see the module docstring).

    Scoring: each distinct task token weighs 1 (3 inside a quoted string); an element scores the
    summed weight of the task tokens its text contains, divided by ``sqrt(n)`` for an element of
    ``n`` distinct tokens (cosine-like), so a page-wide container does not beat the link that
    names the target. Ties go to the earlier element. Elements already acted on (their id appears
    in the previous actions, web only) are passed over while any other element scores.
    """

    name = "lexical"

    def generate(self, requests: Sequence[ChatRequest]) -> list[ChatResult]:
        """One lexical choice per request."""
        return [self._one(request) for request in requests]

    def _one(self, request: ChatRequest) -> ChatResult:
        started = time.perf_counter()
        view = read_prompt(request.messages, request.structure)
        space, targets = view.space, screen_targets(view)
        weights = _task_weights(view.task)
        used = _used_web_refs(view) if space.name == "web" else set()
        scored = [(_score(weights, t.text), -k, t) for k, t in enumerate(targets)]
        fresh = [s for s in scored if s[2].ref not in used and s[0] > 0]
        pool = fresh or [s for s in scored if s[0] > 0]
        quoted = quoted_strings(view.task)
        typeable = [s for s in scored if s[2].typeable]
        if typeable and _should_type(view, quoted, targets):
            best = max(typeable, key=lambda s: (s[0], s[1]))[2]
            field = "text" if space.name == "mobile" else "content"
            key = "index" if space.name == "mobile" else "element_id"
            data = {"action": "input_text" if space.name == "mobile" else "type_string",
                    key: best.ref, field: quoted[0]}
            if space.name == "web":
                data["press_enter"] = False
            return _answer(f"Type the quoted text into {best.kind} {best.ref}.",
                           space.from_dict(data), started)
        if not pool:
            scroll = {"action": "scroll" if space.name == "mobile" else "scroll_page", "direction": "down"}
            return _answer("No element matches the task; scroll for more.", space.from_dict(scroll), started)
        best = max(pool, key=lambda s: (s[0], s[1]))[2]
        key = "index" if space.name == "mobile" else "element_id"
        return _answer(f"{best.kind} {best.ref} overlaps most with the task.",
                       space.from_dict({"action": "click", key: best.ref}), started)


def _should_type(view: PromptView, quoted: list[str], targets: list[Target]) -> bool:
    """Type the quoted text when it was not typed yet and the task says to type it, or when no
    other element shows that text (else the quote names something to click, "Click "OK"")."""
    if not quoted or quoted[0].casefold() in view.history.casefold():
        return False
    if _TYPE_VERBS.search(view.task):
        return True
    wanted = quoted[0].casefold()
    return not any(wanted in t.text.casefold() for t in targets if not t.typeable)


def _task_weights(task: str) -> dict[str, float]:
    weights = dict.fromkeys(tokenize(task), 1.0)
    for span in quoted_strings(task):
        for token in tokenize(span):
            weights[token] = _QUOTE_WEIGHT
    return weights


def _score(weights: dict[str, float], text: str) -> float:
    tokens = set(tokenize(text))
    if not tokens:
        return 0.0
    matched = sum(w for t, w in weights.items() if t in tokens)
    return matched / math.sqrt(len(tokens))
