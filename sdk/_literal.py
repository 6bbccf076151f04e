"""A tolerant reader of the JSON objects and Python calls that models write (never evaluated).

Used by :mod:`collabui.parsing` for proposals and by the critic for its score objects. A
candidate is read by ``json.loads`` first, then by a small literal reader over
``ast.parse(..., mode="eval")`` nodes (constants, dicts, lists, tuples, ``true``/``null``-style
names, unary minus), which also covers the repairs small models need (single quotes, trailing
commas, unquoted keys). Anything else raises :class:`Unreadable` with a one-line reason.
"""

from __future__ import annotations

import ast
import json
import re
import warnings
from dataclasses import dataclass
from typing import Any

__all__ = [
    "MAX_DEPTH",
    "Call",
    "ScanBudget",
    "Truncated",
    "Unreadable",
    "balanced_end",
    "escape_controls",
    "literal",
    "parse_expr",
    "read_call",
    "read_object",
]

MAX_DEPTH = 32  # brackets deeper than this are not an action; also keeps ast/json off the stack limit
# Every pattern here is one character class: a search is linear in the text it scans.
_SPECIAL = re.compile(r"[\"'\\{}()\[\]]")
_IN_QUOTE = {'"': re.compile(r'["\\]'), "'": re.compile(r"['\\]")}  # brackets in strings are text
_CLOSE = {"{": "}", "(": ")", "[": "]"}
_LITERAL_NAMES = {"true": True, "false": False, "null": None, "none": None}


class Unreadable(Exception):
    """A candidate is not something we can read, or not a valid action."""


class Truncated(Unreadable):
    """A candidate runs to the end of the text: the model stopped mid-action."""


@dataclass(frozen=True)
class Call:
    """A call read from text: ``name(*args, **kwargs)`` with literal arguments."""

    name: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


class ScanBudget:
    """How many characters :func:`balanced_end` may still step over, shared by the candidates of
    one parse.

    Each candidate is scanned from its own start (a quote means something else from another
    start), so text holding many overlapping candidates (``{'{'{'...``, ``{\\\\...`` repeated)
    would be rescanned once per candidate; a budget proportional to the text keeps the whole parse
    linear in its length.
    """

    def __init__(self, chars: int) -> None:
        self.left = chars

    def stop(self, start: int, length: int) -> int:
        """Where a scan from ``start`` must stop (the text ends at ``length``)."""
        return min(length, start + 1 + max(self.left, 0))


def balanced_end(text: str, start: int, budget: ScanBudget | None = None) -> int:
    """Index just past the bracket group opening at ``text[start]``, skipping quoted strings.

    With a ``budget``, the characters scanned are charged to it, and a scan that would need more
    than is left raises :class:`Unreadable` (too complex) instead of running on.
    """
    stop = len(text) if budget is None else budget.stop(start, len(text))
    end, error = _group_end(text, start, stop)
    if budget is not None:
        budget.left -= end - start
    if error is not None:
        raise error
    return end


def _group_end(text: str, start: int, stop: int) -> tuple[int, Unreadable | None]:
    """Where the group opening at ``text[start]`` ends (or the scan gave up), and why not if not.

    Looks no further than ``stop``; returns the error instead of raising so that the caller can
    charge the characters scanned whatever the outcome.
    """
    stack = [_CLOSE[text[start]]]
    quote: str | None = None
    pos = start + 1
    while True:
        m = (_IN_QUOTE[quote] if quote else _SPECIAL).search(text, pos, stop)
        if m is None:
            if stop < len(text):
                return stop, Unreadable("action is too complex to read (scan limit reached)")
            what = "unterminated string" if quote else "unbalanced brackets"
            return stop, Truncated(f"action is truncated ({what})")
        ch, pos = m.group(), m.end()
        if ch == "\\":
            pos += 1
        elif quote:
            quote = None  # in a string only its own quote (or a backslash) is found
        elif ch in "\"'":
            quote = ch
        elif ch in _CLOSE:
            stack.append(_CLOSE[ch])
            if len(stack) > MAX_DEPTH:
                return pos, Unreadable("action is nested too deeply")
        elif ch != stack.pop():
            return pos, Unreadable(f"mismatched bracket {ch!r} in action")
        elif not stack:
            return pos, None


def escape_controls(src: str) -> str:
    """Escape raw newlines/tabs inside quoted strings: Python rejects them, targets have them."""
    if "\n" not in src and "\r" not in src:
        return src
    out: list[str] = []
    quote: str | None = None
    escaped = False
    for ch in src:
        if quote and not escaped and ch in "\n\r":
            out.append("\\n" if ch == "\n" else "\\r")
            continue
        out.append(ch)
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
        elif quote:
            quote = None if ch == quote else quote
        elif ch in "\"'":
            quote = ch
    return "".join(out)


def parse_expr(src: str) -> ast.expr:
    """The expression node of ``src`` (raw newlines in strings escaped); Unreadable if invalid."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # invalid escapes like "\/" warn, and are harmless here
        try:
            return ast.parse(escape_controls(src), mode="eval").body
        except (SyntaxError, ValueError) as exc:
            raise Unreadable(f"action is not valid JSON or call syntax ({type(exc).__name__})") from None


def literal(node: ast.AST, depth: int = 0) -> Any:
    """The value of a literal-only expression node; anything else is unreadable."""
    if depth > MAX_DEPTH:
        raise Unreadable("action is nested too deeply")
    if isinstance(node, ast.Constant) and isinstance(node.value, str | int | float | bool | None):
        return node.value
    if isinstance(node, ast.Name):  # true/null and also bare words: {action: click}
        return _LITERAL_NAMES.get(node.id.lower(), node.id)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        value = literal(node.operand, depth + 1)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.List | ast.Tuple):
        return [literal(e, depth + 1) for e in node.elts]
    if isinstance(node, ast.Dict) and all(k is not None for k in node.keys):
        return {str(literal(k, depth + 1)): literal(v, depth + 1)
                for k, v in zip(node.keys, node.values, strict=True)}
    raise Unreadable(f"action holds unsupported syntax ({type(node).__name__})")


def read_object(src: str) -> Any:
    """The value of ``src`` as JSON, else as a Python literal; Unreadable if neither."""
    try:
        return json.loads(src, strict=False)  # strict=False: raw newlines inside strings
    except ValueError:
        return literal(parse_expr(src))


def read_call(name: str, args_src: str) -> Call:
    """The call ``name`` + ``args_src`` (``"(...)"``) with literal arguments; Unreadable if not."""
    node = parse_expr("f" + args_src)
    if not isinstance(node, ast.Call) or any(isinstance(a, ast.Starred) for a in node.args):
        raise Unreadable(f"{name}(...) is not a plain call")
    if any(k.arg is None for k in node.keywords):
        raise Unreadable(f"{name}(...) uses ** arguments")
    return Call(name, tuple(literal(a) for a in node.args),
                 {k.arg: literal(k.value) for k in node.keywords if k.arg})
