"""The actions a search tries on a page, most promising first.

Used by the verified search (:mod:`collabui.training.verified`) and so by the demonstrator and
the verified critic. The order only decides how soon the search finds a completion; whatever it
keeps, the environment's reward has verified.

Typing values come from the task: its quoted strings when it has any. A task that names its
values without quotes ("Search for drama movies directed by Lee from year 1990") gets the
task's content words as values, each field trying first the word nearest to the task word that
matches its label ("directed" ~ "Director:"), and fields whose label the task never mentions
trying the words no other field claimed first.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from collabui.actions import WEB, Action, web
from collabui.devices import simplify
from collabui.devices.base import Observation
from collabui.devices.simplify import Node, screen_elements
from collabui.models.baselines import (
    PromptView,
    Target,
    lexical_score,
    quoted_strings,
    screen_targets,
)

__all__ = ["rank_candidates", "unquoted_values", "field_labels"]

_TYPE_HINT = ("type", "enter", "input", "search", "fill", "write")
# Unquoted values are typed only when a verb asks for typing ("Focus into the 2nd input box"
# mentions "input" but wants a click).
_TYPE_VERBS = frozenset({"type", "enter", "search", "fill", "write"})
_WORD = re.compile(r"[\w][\w'-]*", re.UNICODE)
# Words that name what to do, not a value to type (English task sentences).
_FUNCTION_WORDS = frozenset(
    ["a", "an", "the", "and", "or", "of", "to", "in", "on", "at", "by", "for", "from", "with", "into", "as", "is", "are", "be", "that", "this", "these", "those", "then", "it", "its", "your", "you", "please", "search", "find", "enter", "type", "input", "fill", "write", "select", "click", "press", "hit", "submit", "field", "fields", "text", "box", "textbox", "form"])
_MASKED_VALUE = re.compile(r"; \*+$")  # "password; ***": the device shows a typed password as a mask
_MATCH_PREFIX = 4  # "directed" ~ "director", "years" ~ "year"


def _kept(history: Sequence[Action], fields: Sequence[Target]) -> set[str]:
    """The values typed earlier that a field still holds. A value whose typing did not stick (a
    popup took the focus first) may be typed again. A password field shows only a mask: each
    filled one accounts for one typed value no field shows."""
    shown = " ".join(f.text.casefold() for f in fields)
    typed = list(dict.fromkeys(a.content.casefold() for a in history if isinstance(a, web.TypeString)))
    unseen = [v for v in typed if v not in shown]
    masked = sum(1 for f in fields if _MASKED_VALUE.search(f.text))
    return {*(v for v in typed if v in shown), *unseen[:masked]}


def _stem(word: str) -> str:
    return word.casefold()[:_MATCH_PREFIX]


def field_labels(screen: str, tree: Node | None = None) -> dict[str, str]:
    """Each form field's label, keyed by element id (:func:`collabui.devices.simplify.field_labels`'
    rule: the one the agents' history names fields by), read from ``tree`` when given (the
    screen's), else from the text."""
    return simplify.field_labels(screen_elements(screen, tree))


def unquoted_values(task: str, labels: Sequence[str]) -> list[list[str]]:
    """For each label, the task's content words in the order that field should try them.

    A field whose label the task mentions tries the content words nearest that mention first
    (counted in content words; the one after it on a tie: "directed by Lee"). The others try
    first the words no mentioned field claimed, names and numbers before plain words.
    """
    words = [m.group(0) for m in _WORD.finditer(task)]
    label_stems = {_stem(w) for label in labels for w in _WORD.findall(label) if len(w) >= 3}
    content = [i for i, w in enumerate(words)
               if w.casefold() not in _FUNCTION_WORDS and _stem(w) not in label_stems]
    anchors = [_anchor(words, label) for label in labels]

    def near(anchor: int) -> list[int]:
        # Distance in content words: the k-th before the mention and the k-th after it tie,
        # and the one after wins ("directed by Lee").
        split = sum(1 for i in content if i < anchor)
        rank = {i: (split - k if k < split else k - split + 1, k < split) for k, i in enumerate(content)}
        return sorted(content, key=rank.__getitem__)

    claimed = {near(a)[0] for a in anchors if a is not None and content}
    out = []
    for anchor in anchors:
        order = near(anchor) if anchor is not None else sorted(
            content, key=lambda i: (i in claimed, not _looks_like_value(words[i]), i))
        out.append(list(dict.fromkeys(words[i] for i in order)))
    return out


def _looks_like_value(word: str) -> bool:
    return any(c.isdigit() for c in word) or word[:1].isupper()


def _anchor(words: Sequence[str], label: str) -> int | None:
    """Where the task mentions the label (a word sharing a stem with one of the label's words)."""
    stems = {_stem(w) for w in _WORD.findall(label) if len(w) >= 3}
    return next((i for i, w in enumerate(words) if _stem(w) in stems), None)


def _typing(task: str, fields: list[Target], history: Sequence[Action],
            labels: dict[str, str] | None = None, *, quoted_only: bool = False) -> list[Action]:
    """Type each quoted string of the task not typed yet into each field not holding one.

    A string goes first into the field whose label the task mentions nearest it ("put "x" in
    the City box"), then by order: the k-th string into the k-th field (forms list their fields
    in the task's order). Indices are the original ones, so after typing the first string the
    second one still goes to the second field first. Without quoted strings, the task's content
    words (see the module), unless ``quoted_only``."""
    done = _kept(history, fields)
    quotes = list(dict.fromkeys(quoted_strings(task)))
    if not quotes and labels is not None and not quoted_only:
        return _typing_unquoted(task, fields, done, labels)
    near = _label_distance(task, quotes, [(labels or {}).get(str(f.ref), "") for f in fields])
    pairs = [(near[k][qi], abs(k - qi), k, qi) for k in range(len(fields)) for qi in range(len(quotes))
             if quotes[qi].casefold() not in done and fields[k].text.casefold() not in done
             and fields[k].text.casefold() != quotes[qi].casefold()]
    return [web.TypeString(str(fields[k].ref), quotes[qi]) for *_, k, qi in sorted(pairs)]


def _label_distance(task: str, quotes: Sequence[str], labels: Sequence[str]) -> list[list[int]]:
    """Words between each field's label mention and each quoted string in the task (a large
    number when the task does not mention the label)."""
    words = [m.group(0) for m in _WORD.finditer(task)]
    starts = [m.start() for m in _WORD.finditer(task)]
    where = []
    for q in quotes:
        at = task.find(q)
        where.append(sum(1 for s in starts if s < at) if at >= 0 else None)
    out = []
    for label in labels:
        anchor = _anchor(words, label) if label else None
        out.append([abs(anchor - w) if anchor is not None and w is not None else 10_000 for w in where])
    return out


def _typing_unquoted(task: str, fields: list[Target], done: set[str],
                     labels: dict[str, str]) -> list[Action]:
    open_fields = [f for f in fields if not f.text.strip()]
    ranked = unquoted_values(task, [labels.get(str(f.ref), "") for f in open_fields])
    pairs = [(rank, k, value) for k, values in enumerate(ranked)
             for rank, value in enumerate(v for v in values if v.casefold() not in done)]
    return [web.TypeString(str(open_fields[k].ref), value) for _, k, value in sorted(pairs)]


def rank_candidates(task: str, obs: Observation, history: Sequence[Action] = ()) -> list[Action]:
    """The actions worth trying on ``obs``, most promising first.

    Clicks on every element (best lexical match with the task first), typing the task's values
    into fields (first when the task asks to type), and each option of a drop-down.
    """
    # A disabled element only burns the action timeout (2 s on MiniWoB++).
    tree = obs.extra.get("tree")
    targets = [t for t in screen_targets(PromptView(WEB, task, "None", obs.text, {"tree": tree} if tree else None))
               if not t.text.casefold().endswith("disabled")]
    # A quoted value inside an element's text (an autocomplete suggestion "Bermuda" for a task
    # naming "Ber" and "uda") matches no whole word, so it breaks ties between equal scores.
    quotes = [q.casefold() for q in quoted_strings(task) if q.strip()]

    def inside(k: int) -> int:
        return sum(q in targets[k].text.casefold() for q in quotes)

    scored = sorted(range(len(targets)), key=lambda k: (-lexical_score(task, targets[k].text), -inside(k), k))
    clicks: list[Action] = [web.Click(str(targets[k].ref)) for k in scored]
    wants_typing = any(w in task.casefold() for w in _TYPE_HINT)
    verbs = {w.casefold() for w in _WORD.findall(task)} & _TYPE_VERBS
    labels = field_labels(obs.text, tree)
    fields = [t for t in targets if t.typeable]
    typing = _typing(task, fields, history, labels, quoted_only=not verbs)
    # A quoted value that no element shows is something to type, whatever the verb ("Set
    # Coupon to "xBb""); one an element shows is usually the thing to click.
    shown = " ".join(t.text.casefold() for t in targets if not t.typeable)
    typing_first = wants_typing or (bool(fields) and any(q not in shown for q in quotes))
    # An option the task names goes before everything else; the option already chosen is no move.
    options = sorted(((-lexical_score(task, o), k, o) for k, t in enumerate(targets)
                      for o in t.selectable_options if not t.text.startswith(f"{o};")), key=lambda x: x[:2])
    named = [web.Select(str(targets[k].ref), o) for score, k, o in options if score < 0]
    others = [web.Select(str(targets[k].ref), o) for score, k, o in options if score >= 0]
    ordered = ([*named, *typing, *clicks, *others] if typing_first else [*named, *clicks, *others, *typing])
    return list({a.key(): a for a in ordered}.values())
