"""What an episode never writes or prints: secret values, passwords, credentials in URLs.

* **Secrets** (``team.run(..., secrets={"pw": value})``, ``collabui run --secret pw``): the task
  and the agents see the placeholder ``<secret:pw>``; only the device receives the value, when it
  types an action (``type_string``, ``input_text``) whose text holds the placeholder. Any
  occurrence of a value in what the device reports back (page text, URLs, errors; also
  URL-encoded and HTML-escaped) is turned back into its placeholder before the agents, the trace
  or the terminal see it.
* **Passwords**: text typed into a password field (web ``<input type=password>``, Android
  ``password=true``) is replaced by ``***`` in every record from the step it is typed on: the
  proposals (raw answers, thoughts, parsed actions, prompts), the vote, the executed action, the
  observation and the history. A value counts as typed into a password field when a proposal
  types it into a field the observation lists in ``extra["password_fields"]``, or when the
  device reports it (``StepOutcome.info["masked_action"]``). Values are masked where they stand
  as a whole token (not inside a longer word), case-sensitively.
* **Screenshots**: the device is told every secret value (each form) and every password
  (``Device.hide_on_screen``), and hides them in every screenshot (a browser on the page while it
  takes it, a phone by painting over the elements that show them). A password
  an environment's own task names (``the password "X"``, MiniWoB++'s enter-password and
  login-user) is known from the reset: masked in the header, every record, the printed task line
  and every screenshot from the first.
* **URLs**: :func:`redact_url` removes userinfo (``user:pass@``) and credential query parameters
  (``api_key=...``) from any text, e.g. a model spec ``openai:M@https://user:key@host/v1``.
"""

from __future__ import annotations

import dataclasses
import html
import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote, quote_plus

from collabui.actions import Action, Unknown
from collabui.errors import ActionError, ConfigError

__all__ = ["PASSWORD_MASK", "TASK_PASSWORD", "Redactor", "Secrets", "placeholder", "redact_url", "task_passwords"]

#: What a password (or a credential in a URL) becomes.
PASSWORD_MASK = "***"
#: Typed text that stands for "the password the environment's task names" when a replay needs
#: it (``collabui.training.verified``): traces record a masked text that was exactly that
#: password as such (the ``task_password`` field of a step record), never the password itself.
TASK_PASSWORD = "<the task's password>"
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")
_PLACEHOLDER = re.compile(r"<secret:([A-Za-z_][A-Za-z0-9_.-]{0,63})>")
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@?#]*@")
_CREDENTIAL_PARAM = re.compile(
    r"(?i)([?&;](?:api[_-]?key|apikey|key|token|access[_-]?token|auth|password|passwd|pwd|secret"
    r"|sig|signature)=)(?:\*\*\*(?=[&#\s'\x22)\]]|$)|[^&#\s]*)")  # masked already (a quoted spec): kept
#: A password a task sentence names: ``password "X"``, ``password: X``, ``password is 'X'``.
_TASK_PASSWORD = re.compile(
    r"""(?i)\bpassword(?:\s+is|\s*[:=])?\s*(?:"([^"\n]{1,200})"|'([^'\n]{1,200})')"""
    r"""|\bpassword\s*[:=]\s*([^\s"',;]{1,200})""")
_BEARER = re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/=-]{8,}")
#: Action fields that hold free text (ids, indices and directions are never masked).
_FREE_TEXT = ("content", "text", "option", "url", "message", "answer", "app_name", "raw", "reason")
#: Record keys whose values are identifiers, never a typed password (secrets are still
#: concealed there: a secret value is never an identifier).
_ID_KEYS = frozenset({"element_id", "id", "index", "type", "tag", "action", "schema",
                      "episode_id", "created", "version", "screenshot"})


def placeholder(name: str) -> str:
    """The text agents see in place of secret ``name``: ``<secret:name>``."""
    return f"<secret:{name}>"


def redact_url(text: str) -> str:
    """``text`` with credentials in URLs masked: userinfo (``https://u:p@host`` ->
    ``https://***@host``), credential query parameters (``?api_key=K`` -> ``?api_key=***``) and
    bearer tokens. The one place specs and endpoints are cleaned before they are echoed."""
    text = _USERINFO.sub(lambda m: f"{m.group(1)}{PASSWORD_MASK}@", text)
    text = _CREDENTIAL_PARAM.sub(lambda m: f"{m.group(1)}{PASSWORD_MASK}", text)
    return _BEARER.sub(lambda m: f"{m.group(1)}{PASSWORD_MASK}", text)


class Secrets:
    """Named secret values: ``conceal`` turns values into placeholders, ``reveal`` back.

    Raises:
        ConfigError: a name is not an identifier-like word or a value is not a non-empty string.
    """

    def __init__(self, values: Mapping[str, str] | None = None) -> None:
        values = dict(values or {})
        for name, value in values.items():
            if not isinstance(name, str) or not _NAME.match(name):
                raise ConfigError(f"secret name {name!r} is not usable; use letters, digits, '_', "
                                  "'.' or '-' (e.g. 'password'), it becomes <secret:NAME>")
            if not isinstance(value, str) or not value:
                raise ConfigError(f"secret {name!r} has no value; give a non-empty string (on the "
                                  f"command line: set the environment variable {name})")
        self._values = values
        # Each value also as a URL or a form would carry it (a GET form puts it in the URL).
        forms = {(name, form) for name, value in values.items()
                 for form in (value, quote(value, safe=""), quote_plus(value), html.escape(value))}
        # Longest first, so a value containing another is concealed whole.
        self._by_length = sorted(forms, key=lambda kv: -len(kv[1]))

    def __bool__(self) -> bool:
        return bool(self._values)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._values)

    def conceal(self, text: str) -> str:
        """``text`` with every secret value replaced by its placeholder."""
        for name, value in self._by_length:
            if value in text:
                text = text.replace(value, placeholder(name))
        return text

    def reveal(self, text: str) -> str:
        """``text`` with the placeholders of known secrets replaced by their values."""
        return _PLACEHOLDER.sub(lambda m: self._values.get(m.group(1), m.group(0)), text)

    @property
    def forms(self) -> tuple[str, ...]:
        """Every value, also as a URL or a form carries it (what a screen may show)."""
        return tuple(form for _, form in self._by_length)

    def holds_placeholder(self, text: str) -> bool:
        return any(m.group(1) in self._values for m in _PLACEHOLDER.finditer(text))


def task_passwords(task: str) -> list[str]:
    """The passwords a task sentence names (``the password "X"``), in order."""
    return [next(group for group in match.groups() if group) for match in _TASK_PASSWORD.finditer(task or "")]


def _typed(action: Action) -> tuple[Any, str] | None:
    """(target, text) of a typing action (web type_string, mobile input_text), else None."""
    if action.name == "type_string":
        return getattr(action, "element_id", None), getattr(action, "content", "")
    if action.name == "input_text":
        return getattr(action, "index", None), getattr(action, "text", "")
    return None


class Redactor:
    """The episode's filter: everything the agents, the trace and the terminal get passes here.

    Args:
        secrets: the episode's secrets (may be empty).
    """

    def __init__(self, secrets: Secrets | Mapping[str, str] | None = None) -> None:
        self.secrets = secrets if isinstance(secrets, Secrets) else Secrets(secrets)
        self.passwords: set[str] = set()
        self.task_passwords: set[str] = set()
        self._pattern: re.Pattern[str] | None = None
        self._fields: frozenset[str] = frozenset()

    # ---- learning what to mask ---------------------------------------------------------

    def add_password(self, value: str) -> None:
        """Mask ``value`` from now on (text typed into a password field)."""
        value = value.strip() if isinstance(value, str) else ""
        if not value or value == PASSWORD_MASK or self.secrets.holds_placeholder(value):
            return  # a placeholder is already safe to show
        if value not in self.passwords:
            self.passwords.add(value)
            alternatives = "|".join(re.escape(v) for v in sorted(self.passwords, key=len, reverse=True))
            self._pattern = re.compile(rf"(?<![A-Za-z0-9])(?:{alternatives})(?![A-Za-z0-9])")

    def learn_task(self, task: str) -> None:
        """Mask the passwords an environment's own task names (``the password "X"``): known
        before anything is typed. Never for a task the caller gave (it stays as given)."""
        for value in task_passwords(task):
            self.add_password(value)
            self.task_passwords.add(value)

    def types_task_password(self, action: Action) -> bool:
        """Whether ``action`` types exactly a password the environment's task names (what a
        replay can type again from the live task: the trace records this bit, not the text)."""
        typed = _typed(action)
        return typed is not None and typed[1].strip() in self.task_passwords

    def screen(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """``(values, words)`` a screenshot must hide (``Device.hide_on_screen``): every secret
        form anywhere, every password as a whole word (as in text)."""
        return self.secrets.forms, tuple(sorted(self.passwords))

    def watch(self, observation: Any) -> None:
        """Note the password fields ``observation`` lists (``extra["password_fields"]``)."""
        extra = getattr(observation, "extra", None) or {}
        self._fields = frozenset(str(f) for f in extra.get("password_fields", ()))

    def learn(self, actions: Iterable[Action]) -> None:
        """Mask the text of every action among ``actions`` that types into a watched field."""
        for action in actions:
            typed = _typed(action)
            if typed is not None and str(typed[0]) in self._fields:
                self.add_password(typed[1])

    def learn_step(self, step: Any) -> None:
        """``learn`` from every proposal of a team step and its vote."""
        self.learn([p.action for row in step.proposals for p in row] + [step.vote.action])

    # ---- masking -----------------------------------------------------------------------

    def text(self, value: str, *, identifier: bool = False) -> str:
        """``value`` with secrets concealed and (unless it is an identifier) passwords masked."""
        if self.secrets:
            value = self.secrets.conceal(value)
        if self._pattern is not None and not identifier:
            value = self._pattern.sub(PASSWORD_MASK, value)
        return value

    def data(self, value: Any, *, identifier: bool = False) -> Any:
        """A JSON-like value (dicts, lists, strings) with every string passed through ``text``."""
        if isinstance(value, str):
            return self.text(value, identifier=identifier)
        if isinstance(value, Mapping):
            return {k: self.data(v, identifier=k in _ID_KEYS) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return type(value)(self.data(v) for v in value) if isinstance(value, list) else \
                tuple(self.data(v) for v in value)
        return value

    @property
    def active(self) -> bool:
        return bool(self.secrets) or self._pattern is not None

    def action(self, action: Action) -> Action:
        """``action`` with its free-text fields masked (ids and indices kept)."""
        if not self.active:
            return action
        changes = {f: self.text(getattr(action, f)) for f in _FREE_TEXT
                   if isinstance(getattr(action, f, None), str)}
        changes = {f: v for f, v in changes.items() if v != getattr(action, f)}
        if not changes:
            return action
        try:
            return action.replace(**changes)
        except ActionError:  # the masked text broke a validation: keep it unknown
            return Unknown(raw=self.text(action.to_call()), reason="masked")

    def reveal(self, action: Action) -> Action:
        """The action the device executes: placeholders in typed text replaced by the values."""
        typed = _typed(action)
        if typed is None or not self.secrets or not self.secrets.holds_placeholder(typed[1]):
            return action
        field = "content" if action.name == "type_string" else "text"
        return action.replace(**{field: self.secrets.reveal(typed[1])})

    def observation(self, observation: Any) -> Any:
        """An Observation with its text, task, URL, tabs, error and extra masked."""
        if not self.active:
            return observation
        return dataclasses.replace(
            observation, text=self.text(observation.text),
            task=None if observation.task is None else self.text(observation.task),
            url=None if observation.url is None else self.text(observation.url),
            tabs=tuple(self.text(t) for t in observation.tabs),
            last_action_error=None if observation.last_action_error is None
            else self.text(observation.last_action_error),
            extra=self.data(dict(observation.extra)))

    def proposal(self, proposal: Any) -> Any:
        """A team Proposal with its messages, raw answer, thought, action and error masked."""
        if not self.active:
            return proposal
        return dataclasses.replace(
            proposal, messages=tuple(self.data(dict(m)) for m in proposal.messages),
            raw=self.text(proposal.raw),
            thought=None if proposal.thought is None else self.text(proposal.thought),
            action=self.action(proposal.action),
            parse_error=None if proposal.parse_error is None else self.text(proposal.parse_error))

    def vote(self, vote: Any) -> Any:
        if not self.active:
            return vote
        return dataclasses.replace(vote, action=self.action(vote.action),
                                   counts=tuple((self.text(c), n) for c, n in vote.counts))

    def team_step(self, step: Any) -> Any:
        """A TeamStep with every proposal, the vote and the rendered observation masked."""
        if not self.active:
            return step
        return dataclasses.replace(
            step, proposals=tuple(tuple(self.proposal(p) for p in row) for row in step.proposals),
            vote=self.vote(step.vote), rendered_observation=self.text(step.rendered_observation))

    def event(self, event: Any) -> Any:
        """A streamed event (``collabui.events``) as it may be shown: a proposal that types into
        a password field is masked the moment it lands, before the device has run anything."""
        kind = getattr(event, "kind", None)
        if kind == "step_start":
            self.watch(event.observation)
            return event
        if kind == "proposal":
            self.learn([event.action])
            proposal = self.proposal(event.proposal)
            return dataclasses.replace(event, proposal=proposal, action=proposal.action,
                                       thought=proposal.thought, parse_error=proposal.parse_error)
        if kind == "vote":
            self.learn_step(event.team_step)
            step = self.team_step(event.team_step)
            return dataclasses.replace(event, team_step=step, vote=step.vote, action=step.vote.action,
                                       tally=tuple((self.text(c), n) for c, n in event.tally))
        if kind == "executed":
            return dataclasses.replace(event, action=self.action(event.action), call=self.text(event.call),
                                       error=None if event.error is None else self.text(event.error))
        return event
