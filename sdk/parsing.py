"""Tolerant parsing of model text into typed actions.

Agents answer ReAct-style, a short reason and then one action::

    Thought: the task asks to click the Submit button, which has id B.
    Action: {"action": "click", "element_id": "B"}

Small models bend that format in every way, so :func:`parse_action` accepts JSON (also with
single quotes, trailing commas, unquoted keys, ``True``/``None``, code fences, key aliases such
as ``action_type`` or ``text``) and Python-call syntax (``type_string('LF', 'hi', False)``, as
in AutoWebBench targets, also with keywords). It never raises on text: anything it cannot turn
into a valid action of the space comes back as :class:`~collabui.actions.Unknown` with a short
``reason`` the agents see in their next observation.

Which candidate wins when the text holds several:

1. The object or call after the *last* ``Action:`` marker (case-insensitive) that is followed
   by a complete one; a marker inside an earlier marker's object is ignored, and a truncated
   trailing repeat (the model ran out of tokens mid-way through repeating itself) falls back to
   the previous marker. Text after a hallucinated ``Observation:`` line that follows an
   ``Action:`` marker is dropped first: small models run on into imagined next steps, and those
   are not this step's proposal. The chosen candidate is final: if it is not a valid action,
   the result is ``Unknown``; we do not look for another one.
2. Without a usable marker, the first object whose action key (``action``, ``action_type``,
   ``type``, ``function``, ``name``) names a known action, or the first call of a known action
   name, whichever comes first; failing that, the first object with any action key (so a
   hallucinated name is reported as such).

Model text is never evaluated: candidates are read by ``json.loads`` first, then by the small
literal reader of :mod:`collabui._literal` (``ast`` nodes of constants, dicts, lists, tuples,
``true``/``null``-style names, unary minus), which also covers the repairs small models need
(single quotes, trailing commas, unquoted keys). Unknown extra keys (``"reason"``,
``"amount"``...) are ignored; required arguments are never invented.

Only the first :data:`MAX_ANSWER_CHARS` (8192) characters of an answer are parsed, in time
linear in them: adversarial answers of 16 kB parse in milliseconds.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, get_args, get_origin

from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from collabui._literal import (
    Call,
    ScanBudget,
    Truncated,
    Unreadable,
    balanced_end,
    read_call,
    read_object,
)
from collabui.actions import Action, ActionSpace, Unknown, get_action_space
from collabui.errors import ActionError

__all__ = [
    "TEAM_HEADINGS",
    "OBSERVATION_HEADS",
    "without_heads",
    "MAX_ANSWER_CHARS",
    "MAX_SCAN_CHARS",
    "ParsedProposal",
    "parse_action",
    "parse_proposal",
    "render_answer",
]

#: Only this many leading characters of an answer are parsed. A real action answer (a thought
#: and one action) is far shorter; the rest of a longer one is a model running on, and parsing
#: it would only cost time (the parser's work is bounded by a multiple of this).
MAX_ANSWER_CHARS = 8192
MAX_SCAN_CHARS = MAX_ANSWER_CHARS  # the former name, kept for callers
_MAX_ATTEMPTS = 128  # candidate reads per proposal
_MAX_MARKERS = 64  # only the last markers count: each one costs a scan of the text after it
# Characters the bracket scans of one parse may step over in total, per character of text:
# candidates overlap (nested objects, a marker's object is also read unmarked), so a real
# answer needs 2-3 scans of its text; adversarial text is cut off here, keeping a parse linear.
_SCANS_PER_CHAR = 6
_SCAN_SLACK = 4096

# Every pattern runs in linear time: no quantifier is nested in another, and a run that a
# quantifier matches is entered from one place only (after a literal, at a line start, at the
# start of a name, or at the position given to match()), so no search rescans it from each of
# its characters. Answers are also cut to MAX_ANSWER_CHARS first.
_MARKER = re.compile(r"(?i)(?<![\w\"'])action\s*[:：]")
_OBSERVATION = re.compile(r"(?im)^[ \t>*#_\-]*observation[ \t*_]*[:：]")
_THOUGHT = re.compile(
    r"(?im)^[ \t>*#_\-]*(?:thoughts?|reason(?:ing)?|rationale|think(?:ing)?)[ \t*_]*[:：][ \t*_]*"
)
# A possibly dotted name and "(": "page.click(". The name is checked by _call_name (a pattern
# of dotted identifiers would nest quantifiers).
_CALL = re.compile(r"(?<![\w.])([A-Za-z_][\w.]*)\(")
_START = re.compile(r"\{|" + _CALL.pattern)  # where an object or a call may begin
_IDENTIFIER = re.compile(r"[A-Za-z_]\w*")
_INT = re.compile(r"-?\d{1,18}")
_LEAD_NAME = re.compile(r"[\s`*_\"']*([A-Za-z_]\w*)")
_FENCE_LANGS = {"json", "json5", "python", "py", "js", "javascript", "text", "plaintext", "txt"}

_NAME_KEYS = ("action", "action_type", "actiontype", "type", "function", "name", "tool",
              "command", "operation", "act")
_ARG_KEYS = ("arguments", "args", "parameters", "params", "kwargs", "action_input", "inputs",
             "input")
_THOUGHT_KEYS = ("thought", "thoughts", "reason", "reasoning", "rationale", "explanation")
_ELEMENT_KEYS = ("element_id", "element", "id", "elementid", "target", "ref", "bid")
_TEXT_KEYS = ("text", "content", "value", "string", "input", "input_text", "query", "message",
              "answer", "option")
# Per canonical field, the keys models use for it, in order of preference.
_FIELD_ALIASES: dict[str, tuple[str, ...]] = {
    "element_id": _ELEMENT_KEYS,
    "index": ("index", "element_index", "idx", *_ELEMENT_KEYS),
    "content": ("content", *_TEXT_KEYS, "keys", "keyword"),
    "option": ("option", "value", "text", "content", "choice", "label", "selected"),
    "answer": ("answer", *_TEXT_KEYS, "response", "result", "output"),
    "message": ("message", *_TEXT_KEYS, "msg", "question", "prompt"),
    "text": _TEXT_KEYS,
    "app_name": ("app_name", "app", "application", "name", "package", "app_id", "text", "value"),
    "url": ("url", "link", "href", "address", "uri", "website"),
    "press_enter": ("press_enter", "enter", "submit", "pressenter", "hit_enter"),
    "new_tab": ("new_tab", "newtab", "new_window", "in_new_tab"),
    "tab_index": ("tab_index", "index", "tab", "tab_id", "tabindex", "tab_number"),
    "direction": ("direction", "dir", "scroll_direction"),
    "goal_status": ("goal_status", "status", "goal", "state"),
}
# Conservative synonyms only: a wrong mapping would silently change what the team votes on.
_SYNONYMS = {
    "web": {"type": "type_string", "typestring": "type_string", "scroll": "scroll_page",
            "goto": "jump_to", "go_to": "jump_to", "jumpto": "jump_to"},
    "mobile": {"tap": "click", "type": "input_text", "long_click": "long_press",
               "double_click": "double_tap"},
}
_VALUE_SYNONYMS = {
    "direction": {"back": "backward", "backwards": "backward", "forwards": "forward"},
    "goal_status": {"completed": "complete", "done": "complete", "success": "complete",
                    "successful": "complete", "impossible": "infeasible"},
}
_TRUE = {"true", "yes", "y", "t", "1", "on"}
_FALSE = {"false", "no", "n", "f", "0", "off", "none", "null", ""}


@dataclass(frozen=True)
class ParsedProposal:
    """One agent proposal split into its reasoning and its action.

    Attributes:
        thought: The text after ``Thought:``/``Reason:`` (or the prose before ``Action:``,
            or a ``"thought"`` key of the action object); None when there is none.
        action: A valid action of the space, or ``Unknown``.
        error: Why the action is ``Unknown`` (its ``reason``); None when it parsed.
    """

    thought: str | None
    action: Action
    error: str | None


@dataclass(frozen=True)
class _Candidate:
    start: int
    end: int
    value: Any  # a dict (object) or a Call
    hint: str | None = None  # an action name written before the object ("Action: click {...}")


# --------------------------------------------------------------------------- public API


def parse_action(text: str, space: ActionSpace | str) -> Action:
    """Turn one model proposal into an action of ``space``.

    Args:
        text: The model's raw output.
        space: An :class:`ActionSpace` or its name (``"web"``, ``"mobile"``).

    Returns:
        A valid action of ``space``, or ``Unknown(raw=text, reason=...)``. Never raises for any
        ``text``; an invalid ``space`` name raises ``ConfigError`` (a programming error).
    """
    return parse_proposal(text, space).action


def parse_proposal(text: str, space: ActionSpace | str) -> ParsedProposal:
    """Like :func:`parse_action`, also returning the proposal's thought and the parse error."""
    space = get_action_space(space)
    if not isinstance(text, str):
        return _failed(str(text), f"proposal must be text, got {type(text).__name__}")
    try:
        return _Parser(text, space).run()
    except (RecursionError, MemoryError) as exc:
        return _failed(text, f"proposal too complex to parse ({type(exc).__name__})")
    except Exception as exc:  # the never-raises contract outranks a bug report here
        return _failed(text, f"internal parser error: {type(exc).__name__}: {exc}")


#: The headings under which an agent's prompt shows team answers (its own previous one, its
#: predecessors'), per prompt register: written by ``collabui.prompts``, read where a prompt is
#: taken apart (the baselines' screen ends at them). Here, below both, so each has one owner.
TEAM_HEADINGS = {
    "full": ("Your answer in the previous round:",
             "Answers from other agents in this round (they may contain errors):"),
    "terse": ("Your previous answer:", "Other agents (may be wrong):"),
}


#: The head lines an agent's observation may start with, before the screen (location, tabs,
#: viewport): written by ``collabui.prompts.render_observation``, left out by :func:`without_heads`.
OBSERVATION_HEADS = {"location": "Location: ", "tabs": "Tabs: ", "viewport": "Viewport (pages): "}


def without_heads(observation: str) -> str:
    """A rendered observation's screen alone: its lines without the :data:`OBSERVATION_HEADS` ones
    (``Viewport (pages): 1 of 1`` is no text of the page)."""
    heads = tuple(OBSERVATION_HEADS.values())
    return "\n".join(line for line in observation.splitlines() if not line.lstrip().startswith(heads))


def render_answer(action_json: str, thought: str | None = None) -> str:
    """The canonical answer text, the one format every writer of answers shares (agents' peers,
    baselines, training targets and adversaries): ``Thought: ...`` then ``Action: <json>``, or
    the ``Action:`` line alone without a thought. :func:`parse_proposal` reads it back."""
    line = f"Action: {action_json}"
    return f"Thought: {thought}\n{line}" if thought else line


def _failed(raw: str, reason: str, thought: str | None = None) -> ParsedProposal:
    return ParsedProposal(thought=thought, action=Unknown(raw=raw, reason=reason), error=reason)


# --------------------------------------------------------------------------- run-on text


def _drop_run_on(text: str) -> str:
    """Cut at the first ``Observation:`` line after an ``Action:`` marker (an imagined step)."""
    marker = _MARKER.search(text)
    if marker is None:
        return text
    observation = _OBSERVATION.search(text, marker.end())
    return text if observation is None else text[:observation.start()]


# --------------------------------------------------------------------------- the parser


class _Parser:
    """One parse: finds the candidate, reads it, builds the action (see the module docstring)."""

    def __init__(self, text: str, space: ActionSpace) -> None:
        self.raw = text
        self.text = _drop_run_on(text[:MAX_ANSWER_CHARS])
        self.space = space
        self.attempts = 0
        self.budget = ScanBudget(_SCANS_PER_CHAR * len(self.text) + _SCAN_SLACK)
        self.thought: str | None = None

    def run(self) -> ParsedProposal:
        if not self.raw.strip():
            return _failed(self.raw, "empty output: expected 'Action: {\"action\": ...}'")
        # The first action-looking object or call, found without markers, tells which
        # "action:" strings are quoted inside it (an answer text, a thought key) and not markers.
        first = self._search(0, marker=False)
        markers = [m for m in _MARKER.finditer(self.text)
                   if first is None or not first.start <= m.start() < first.end][-_MAX_MARKERS:]
        found, error = self._from_markers(markers)
        if found is None:
            found = first
        self.thought = self._thought(markers, found)
        if found is None:
            return _failed(self.raw, error or self._none_reason(), self.thought)
        try:
            action = self._to_action(found)
        except (Unreadable, ActionError) as exc:
            return _failed(self.raw, str(exc), self.thought)
        return ParsedProposal(thought=self.thought, action=action, error=None)

    def _none_reason(self) -> str:
        cut = (f" in the first {MAX_ANSWER_CHARS} characters"
               if len(self.raw) > MAX_ANSWER_CHARS else "")
        return f"no action found{cut}: expected 'Action: {{\"action\": ...}}'"

    def _from_markers(self, markers: list[re.Match[str]]) -> tuple[_Candidate | None, str | None]:
        chosen: _Candidate | None = None
        error: str | None = None
        covered = 0
        for m in markers:
            if m.start() < covered or self._inside_object(m.start()):
                continue
            got = self._search(m.end(), marker=True)
            if isinstance(got, _Candidate):
                chosen, covered, error = got, got.end, None
            else:
                error = got
        return chosen, error

    def _inside_object(self, pos: int) -> bool:
        """``{action: click}``: an unquoted key, not a marker."""
        before = self.text[max(0, pos - 200):pos].rstrip()
        return before.endswith(("{", ","))

    def _search(self, pos: int, *, marker: bool) -> Any:
        """First readable candidate from ``pos``: a _Candidate, or (marker mode) the reason why not.

        In marker mode any object or call counts; otherwise only objects with an action key
        and calls of known action names do.
        """
        error: str | None = None
        fallback: _Candidate | None = None  # an object whose action key names no known action
        for start, call_name in self._starts(pos, any_call=marker):
            if self.attempts >= _MAX_ATTEMPTS:
                break
            self.attempts += 1
            try:
                cand = self._read_at(start, call_name, pos if marker else None)
            except (Unreadable, RecursionError, MemoryError) as exc:
                error = error or (str(exc) if isinstance(exc, Unreadable) else "action too complex")
                if marker and isinstance(exc, Truncated):
                    return error  # everything after is inside the unfinished action
                continue
            if marker or call_name:
                return cand
            known = self._action_key_kind(cand.value)
            if known:
                return cand
            if known is not None and fallback is None:
                fallback = cand
        if marker:
            bare = self._bare_name(pos)
            return bare if bare is not None else (error or "nothing readable after 'Action:'")
        return fallback

    def _starts(self, pos: int, *, any_call: bool) -> Iterator[tuple[int, str | None]]:
        """Positions of ``{`` and of ``name(`` from ``pos``, in order (lazily: most proposals
        stop at the first)."""
        for m in _START.finditer(self.text, pos):
            if m.group(1) is None:
                yield m.start(), None
                continue
            name = _call_name(m)
            if name is not None and (any_call or self._resolve(name) is not None):
                yield m.end() - 1, name

    def _read_at(self, start: int, call_name: str | None, marker_end: int | None) -> _Candidate:
        end = balanced_end(self.text, start, self.budget)
        src = self.text[start:end]
        if call_name is not None:
            return _Candidate(start, end, read_call(call_name, src))
        value = read_object(src)
        if not isinstance(value, dict):
            raise Unreadable("action is not a JSON object")
        hint = None
        if marker_end is not None:
            lead = _LEAD_NAME.match(self.text, marker_end, start)
            hint = lead.group(1) if lead and lead.group(1).lower() not in _FENCE_LANGS else None
        return _Candidate(start, end, value, hint)

    def _bare_name(self, pos: int) -> _Candidate | None:
        """``Action: navigate_back``: a known action name alone, without arguments."""
        lead = _LEAD_NAME.match(self.text, pos)
        if lead and self._resolve(lead.group(1)) is not None:
            return _Candidate(lead.start(1), lead.end(1), Call(lead.group(1), (), {}))
        return None

    def _action_key_kind(self, value: dict[str, Any]) -> bool | None:
        """True: an action key naming a known action; False: an action key naming something
        else (``{"type": "email"}``); None: no action key."""
        fields = {_norm_key(k): v for k, v in value.items()}
        if any(self._resolve(k) for k in fields if k not in _NAME_KEYS):
            return True
        names = [fields[k] for k in _NAME_KEYS if k in fields]
        if not names:
            return None
        return any(self._resolve(v) or (isinstance(v, dict) and self._action_key_kind(v))
                   for v in names)

    def _resolve(self, raw: Any) -> str | None:
        """The canonical action name for ``raw`` in this space, or None."""
        if not isinstance(raw, str):
            return None
        name = re.sub(r"[\s\-]+", "_", raw.strip().strip("`'\"").lower())
        name = _SYNONYMS.get(self.space.name, {}).get(name, name)
        return name if name in self.space.actions else None

    # ----------------------------------------------------------------- thought

    def _thought(self, markers: list[re.Match[str]], found: _Candidate | None) -> str | None:
        label = _THOUGHT.search(self.text)
        stop = found.start if found is not None else len(self.text)
        if label is not None and label.end() <= stop:
            end = next((m.start() for m in markers if m.start() >= label.end()), stop)
            return self.text[label.end():min(end, stop)].strip() or None
        if markers and found is not None and markers[0].start() < found.start:
            return self.text[:markers[0].start()].strip() or None
        if found is not None and isinstance(found.value, dict):
            for key, value in found.value.items():
                if _norm_key(key) in _THOUGHT_KEYS and isinstance(value, str):
                    return value.strip() or None
        return None

    # ----------------------------------------------------------------- building

    def _to_action(self, cand: _Candidate) -> Action:
        if isinstance(cand.value, Call):
            call = cand.value
            return self._build(call.name, dict(call.kwargs), list(call.args))
        return self._from_mapping(cand.value, cand.hint)

    def _from_mapping(self, data: Mapping[str, Any], hint: str | None) -> Action:
        fields = {_norm_key(k): v for k, v in data.items()}
        name: Any = None
        for _ in range(3):  # {"action": {"type": "click", ...}} nests the real action object
            key = self._name_key(fields)
            if key is None:
                break
            value = fields.pop(key)
            if not isinstance(value, dict):
                name = value
                break
            fields.update({_norm_key(k): v for k, v in value.items()})
        positional: list[Any] = []
        if name is None:
            name, positional = self._name_from_keys(fields)
        if name is None:
            name = hint
        if isinstance(name, str) and "(" in name:  # {"action": "click('B')"}
            call = self._call_in_string(name)
            name, positional = call.name, list(call.args)
            fields.update({_norm_key(k): v for k, v in call.kwargs.items()})
        positional += self._merge_arg_containers(fields)
        if name is None:
            raise Unreadable("no action name: expected a key 'action' naming one of "
                              f"{sorted(self.space.actions)}")
        return self._build(name, fields, positional)

    def _name_key(self, fields: dict[str, Any]) -> str | None:
        present = [k for k in _NAME_KEYS if k in fields]
        for pick in (lambda v: self._resolve(v) is not None, lambda v: isinstance(v, str),
                     lambda v: isinstance(v, dict)):
            for key in present:
                if pick(fields[key]):
                    return key
        return None

    def _name_from_keys(self, fields: dict[str, Any]) -> tuple[str | None, list[Any]]:
        """``{"click": {"element_id": "B"}}`` or ``{"scroll_page": "down"}``."""
        for key in list(fields):
            if key in _NAME_KEYS or self._resolve(key) is None:
                continue
            value = fields.pop(key)
            if isinstance(value, dict):
                fields.update({_norm_key(k): v for k, v in value.items()})
                return key, []
            return key, (value if isinstance(value, list) else [] if value is None else [value])
        return None, []

    def _merge_arg_containers(self, fields: dict[str, Any]) -> list[Any]:
        """Fold ``"arguments": {...}`` (a dict, or a JSON string as in tool calls) into fields."""
        positional: list[Any] = []
        for key in _ARG_KEYS:
            value = fields.get(key)
            if isinstance(value, str) and value.lstrip().startswith("{"):
                try:
                    value = json.loads(value, strict=False)
                except ValueError:
                    continue
            if isinstance(value, dict):
                del fields[key]
                fields.update({_norm_key(k): v for k, v in value.items()})
            elif isinstance(value, list) and key != "input":
                del fields[key]
                positional += value
        return positional

    def _call_in_string(self, src: str) -> Call:
        for m in _CALL.finditer(src):
            name = _call_name(m)
            if name is not None:
                start = m.end() - 1
                return read_call(name, src[start:balanced_end(src, start, self.budget)])
        raise Unreadable(f"cannot read action {src[:60]!r}")

    def _build(self, raw_name: Any, kwargs: dict[str, Any], positional: list[Any]) -> Action:
        name = self._resolve(raw_name)
        if name is None:
            shown = raw_name if isinstance(raw_name, str) else type(raw_name).__name__
            raise Unreadable(f"unknown {self.space.name} action {str(shown)[:40]!r}; "
                              f"expected one of {sorted(self.space.actions)}")
        cls = self.space.actions[name]
        if len(positional) == 1 and isinstance(positional[0], dict) and not kwargs:
            kwargs, positional = {_norm_key(k): v for k, v in positional[0].items()}, []
        kwargs = {_norm_key(k): v for k, v in kwargs.items()}
        fields = list(cls.model_fields.items())
        if len(positional) > len(fields):
            raise Unreadable(f"{name} takes at most {len(fields)} argument(s), got {len(positional)}")
        values = {field: v for (field, _), v in zip(fields, positional, strict=False)}
        used: set[str] = set()
        for field, _ in fields[len(positional):]:
            key = next((k for k in _FIELD_ALIASES.get(field, (field,))
                        if k in kwargs and k not in used), None)
            if key is not None:
                used.add(key)
                values[field] = kwargs[key]
        if "element_id" in cls.model_fields and "element_id" not in values and "index" in kwargs:
            raise Unreadable(f"{name}: web actions address elements by 'element_id' "
                              "(a letter id like 'B'), not by 'index'")
        return self.space.from_dict({"action": name, **_coerce_all(name, fields, values)})


# --------------------------------------------------------------------------- coercion


def _call_name(m: re.Match[str]) -> str | None:
    """The called name of a ``_CALL``/``_START`` match (``click`` for ``page.click(``), or None
    when the dotted name is not made of identifiers (``a..b(``, ``a.1(``)."""
    parts = m.group(1).split(".")
    if all(_IDENTIFIER.fullmatch(p) for p in parts):
        return parts[-1]
    return None


def _norm_key(key: Any) -> str:
    return re.sub(r"[\s\-]+", "_", str(key).strip().lower())


def _required(f: FieldInfo) -> bool:
    """Defaults that are None or booleans are real defaults; others (a scroll direction, empty
    typed text) must be written: a model that leaves them out most likely meant something else."""
    return f.default is PydanticUndefined or not (f.default is None or isinstance(f.default, bool))


def _kind(annotation: Any) -> str:
    """``"bool"``, ``"int"`` or ``""``: the scalar type of an argument (``int | None`` is int)."""
    types = {get_args(t)[0] if get_origin(t) is Annotated else t
             for t in (get_args(annotation) or (annotation,))}
    return "bool" if bool in types else "int" if int in types else ""


def _coerce_all(name: str, fields: list[tuple[str, FieldInfo]],
                values: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for field, f in fields:
        value = values.get(field)
        if isinstance(value, list) and len(value) == 1:  # click([B]) / {"index": [3]}
            value = value[0]
        if value is None:
            if _required(f):
                raise Unreadable(f"{name}: missing required argument '{field}'")
            continue
        out[field] = _coerce(field, _kind(f.annotation), value)
    return out


def _unbracket(value: str) -> str:
    """``" [ 3 ] "`` -> ``"3"``: one optional bracket pair and whitespace, removed by hand (a
    single pattern with whitespace on both sides of optional brackets backtracks quadratically
    on a long whitespace run)."""
    text = value.strip()
    text = text[1:] if text.startswith("[") else text
    text = text[:-1] if text.endswith("]") else text
    return text.strip()


def _coerce(field: str, kind: str, value: Any) -> Any:
    """Bring a model-written value to the field's type; leave it alone when unsure, so the
    action's own validation names the problem."""
    if kind == "bool":
        if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
            return value.strip().lower() in _TRUE
        return bool(value) if isinstance(value, int) and value in (0, 1) else value
    if kind == "int":
        if isinstance(value, str):
            digits = _unbracket(value)
            return int(digits) if _INT.fullmatch(digits) else value
        return int(value) if isinstance(value, float) and value.is_integer() else value
    if field == "element_id":
        if isinstance(value, int) and not isinstance(value, bool):
            return str(value)
        return value.strip().strip("[]'\"` ") if isinstance(value, str) else value
    if field in _VALUE_SYNONYMS and isinstance(value, str):
        value = value.strip().lower()
        return _VALUE_SYNONYMS[field].get(value, value)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)  # {"content": 12345}: the model meant the digits
    return value
