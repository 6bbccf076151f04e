"""Approval before irreversible actions.

After the vote, the team's step graph has an ``approve`` node (when a policy is in force): it
flags the winning action when it looks irreversible and then calls LangGraph's ``interrupt()``
with an :class:`ApprovalRequest`. Whoever drives the step (``collabui.durable.StepRunner``)
consults the policy and resumes the graph with ``Command(resume=decision)``. Flagged:

* a click, tap, double tap or long press on an element whose text reads like submit, pay, buy,
  order, checkout, confirm, send, post, publish, delete, remove, transfer, install, ...
  (:data:`IRREVERSIBLE_WORDS`, whole words of the target element's text in the observation);
* typing into a password field (the observation's ``password_fields``);
* ``jump_to`` a URL on another site than the current page's (another host).

A policy is ``"ask"`` (a y/N prompt on the terminal; stdin not a terminal = refused, with a
message saying how to decide non-interactively), ``"always"`` (approve every flagged action),
``"never"`` (refuse every flagged action) or a callable ``approve(request) -> bool | None``:
True approves, False refuses, None leaves the decision pending: the episode stops there and
resumes later (``collabui.durable``) by asking again. ``approve=None`` takes the device's
default (:func:`default_policy`): ``"ask"`` on real web pages and phones, no gate at all on
MiniWoB++ and fake devices. A refused action is not executed; the agents read
``last_action_error`` saying so, and the trace step records the decision in ``info.approval``.

Example:
    >>> from collabui.actions import get_action_space
    >>> from collabui.devices.base import Observation
    >>> obs = Observation(text="<button[A]| Pay now>", url="https://shop.example/cart")
    >>> flag_action(get_action_space("web").from_dict({"action": "click", "element_id": "A"}), obs)
    'click on "Pay now" (pay)'
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

from collabui.actions import Action
from collabui.devices.base import Observation
from collabui.errors import ConfigError

__all__ = [
    "APPROVE_CHOICES",
    "IRREVERSIBLE_WORDS",
    "ApprovalPending",
    "ApprovalPolicy",
    "ApprovalRequest",
    "approval_context",
    "ask_terminal",
    "decide",
    "default_policy",
    "flag_action",
    "resolve_policy",
]

APPROVE_CHOICES = ("ask", "never", "always")
#: Words of a target element's text that make a click irreversible enough to ask first.
IRREVERSIBLE_WORDS = (
    "submit", "pay", "payment", "buy", "purchase", "order", "checkout", "confirm", "send",
    "post", "publish", "delete", "remove", "erase", "destroy", "transfer", "install",
    "uninstall", "unsubscribe", "cancel subscription", "place order", "book", "donate",
)
_WORDS = re.compile(r"\b(" + "|".join(re.escape(w) for w in sorted(IRREVERSIBLE_WORDS, key=len, reverse=True))
                    + r")\b", re.IGNORECASE)
_CLICKS = {"click", "double_tap", "long_press"}
_TYPING = {"type_string", "input_text"}

ApprovalPolicy = Literal["ask", "never", "always"] | Callable[["ApprovalRequest"], "bool | None"]


@dataclass(frozen=True)
class ApprovalRequest:
    """What the ``approve`` node asks about: the interrupt's payload (as ``to_dict``)."""

    t: int
    action: dict[str, Any]
    call: str
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"t": self.t, "action": dict(self.action), "call": self.call, "reason": self.reason}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ApprovalRequest:
        return cls(int(data["t"]), dict(data["action"]), str(data["call"]), str(data["reason"]))


class ApprovalPending(Exception):
    """The policy left a flagged action undecided (a callable returned None): the episode stops
    with the step's graph waiting at its interrupt, to be resumed (``collabui.durable``)."""

    def __init__(self, request: ApprovalRequest) -> None:
        super().__init__(f"approval pending for {request.call} at step {request.t} ({request.reason}); "
                         "resume the episode to decide")
        self.request = request


def approval_context(observation: Observation) -> dict[str, Any]:
    """The parts of an observation the flagging reads, JSON-able (kept in the step graph's state
    so that a resumed step flags exactly as the interrupted one did)."""
    extra = observation.extra or {}
    return {"url": observation.url, "password_fields": [str(i) for i in extra.get("password_fields", ())],
            "targets": _element_texts(observation)}


def _element_texts(observation: Observation) -> dict[str, str]:
    """Element id -> its text: the web device's element tree, else the rendered lines."""
    tree = (observation.extra or {}).get("tree")
    if tree is not None:
        from collabui.devices.simplify import flat_elements

        return {str(e["id"]): str(e.get("full_text") or e.get("text") or "") for e in flat_elements(tree)}
    from collabui.devices.ui_elements import parse_line

    texts: dict[str, str] = {}
    for line in observation.text.splitlines():  # mobile lines: `3: Button "Pay" (clickable) [..]`
        try:
            element = parse_line(line)
        except (ValueError, IndexError):
            continue
        texts[str(element["index"])] = element["label"] or element["type"]
    for match in re.finditer(r"<\w+\[([^\]]+)\]\|([^<>]*)", observation.text):  # simplified HTML
        texts.setdefault(match.group(1), match.group(2).strip())
    return texts


def flag_action(action: Action, observation: Observation | Mapping[str, Any]) -> str | None:
    """Why ``action`` needs approval on this page (one phrase), or None when it does not."""
    context = approval_context(observation) if isinstance(observation, Observation) else observation
    target = getattr(action, "element_id", None)
    if target is None:
        target = getattr(action, "index", None)
    target = None if target is None else str(target)
    if action.name in _CLICKS and target is not None:
        text = context.get("targets", {}).get(target, "")
        found = _WORDS.search(text)
        if found:
            return f'{action.name} on "{" ".join(text.split())[:60]}" ({found.group(1).lower()})'
    if action.name in _TYPING and target is not None and target in context.get("password_fields", []):
        return "typing into a password field"
    if action.name == "jump_to":
        here, there = _host(context.get("url")), _host(getattr(action, "url", ""))
        if there and there != here:
            return f"navigation to another site ({there})"
    return None


def _host(url: str | None) -> str:
    host = (urlsplit(url or "").hostname or "").lower()
    return host[4:] if host.startswith("www.") else host


def default_policy(device: Any) -> ApprovalPolicy | None:
    """The policy of ``approve=None``: a device's own ``approval_default`` when it has one, else
    ``"ask"`` on a real web page or phone and None (no gate) on MiniWoB++ and other devices."""
    own = getattr(device, "approval_default", None)
    if own is not None:
        return own or None
    from collabui.devices.android import AndroidDevice
    from collabui.devices.browser import BrowserDevice
    from collabui.devices.miniwob import MiniWoBEnv
    from collabui.devices.mobile_miniwob import MiniWoBMobileEnv

    if isinstance(device, (MiniWoBEnv, MiniWoBMobileEnv)):
        return None  # a local benchmark page: nothing real can be bought or deleted
    if isinstance(device, (BrowserDevice, AndroidDevice)):
        return "ask"
    return None


def resolve_policy(approve: ApprovalPolicy | None, device: Any) -> ApprovalPolicy | None:
    """``approve`` checked, or the device's default; None means no approval gate."""
    if approve is None:
        return default_policy(device)
    if isinstance(approve, str):
        if approve not in APPROVE_CHOICES:
            raise ConfigError(f"approve must be one of {list(APPROVE_CHOICES)} or a callable, got {approve!r}")
        return approve
    if not callable(approve):
        raise ConfigError(f"approve must be one of {list(APPROVE_CHOICES)} or a callable, got {type(approve).__name__}")
    return approve


def decide(policy: ApprovalPolicy, request: ApprovalRequest) -> bool | None:
    """The policy's answer: True approve, False refuse, None pending."""
    if policy == "always":
        return True
    if policy == "never":
        return False
    if policy == "ask":
        return ask_terminal(request)
    answer = policy(request)  # type: ignore[operator]
    return None if answer is None else bool(answer)


def ask_terminal(request: ApprovalRequest, *, stdin: Any = None, stderr: Any = None) -> bool:
    """Ask y/N on the terminal; refuse (and say how to decide) when stdin is not a terminal."""
    stdin = stdin or sys.stdin
    stderr = stderr or sys.stderr
    question = f"approve step {request.t}: {request.call} - {request.reason}? [y/N] "
    if stdin is None or not stdin.isatty():
        print(f"approval needed for {request.call} ({request.reason}) but stdin is not a terminal: "
              "refused; pass --approve always|never (approve=... in Python) to decide without asking",
              file=stderr)
        return False
    print(question, end="", file=stderr, flush=True)
    answer = stdin.readline()
    return answer.strip().lower() in ("y", "yes")
