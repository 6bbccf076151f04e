"""Credit re-assignment: a critic scores every entry of a step's n x m action matrix (paper Eq. 6).

A :class:`Critic` reads one recorded step as a :class:`StepContext` (task, rendered observation,
history, the proposals) and returns a :class:`ScoreMatrix`: a score in [0, 1] per agent and
round, or ``None`` when it abstains. The reward of an entry is 1 when its score is >= 0.5,
0 below, and ``None`` when abstained; abstained entries never become training data.

Critics here:

* :class:`LLMCritic` - asks a chat model (our own prompt, with a worked example) for a short
  reasoning and then ``{"scores": {"agent0": [r0, r1, ...], ...}}``. Anything it cannot read
  (missing/extra agents, wrong round counts, out-of-range or non-numeric values, no JSON)
  becomes an explicit abstain, counted per kind in :class:`ParseStats`; never a silent 0.
* :class:`ReferenceCritic` - 1.0 when a proposal canonically equals the gold action, else 0.0.
* :class:`OutcomeCritic` - the "without CR" ablation: the episode's success for every entry.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from collabui.actions import Action, ActionSpace, Unknown, get_action_space
from collabui.errors import ActionError, ConfigError, TraceError
from collabui.models.base import ChatModel, ChatRequest
from collabui.training._critic_prompt import ParseStats, build_critic_messages, parse_scores

__all__ = [
    "REWARD_THRESHOLD",
    "StepContext",
    "ScoreMatrix",
    "ParseStats",
    "Critic",
    "LLMCritic",
    "ReferenceCritic",
    "OutcomeCritic",
    "make_critic",
    "CRITIC_SPECS",
    "task_password_stand_in",
]

#: Paper Eq. 6: R = ceil(score - 0.5), i.e. reward 1 exactly when score >= 0.5.
REWARD_THRESHOLD = 0.5
CRITIC_SPECS = ("outcome, reference, oracle (MiniWoB++ task rules), verified (MiniWoB++ replay: the "
                "environment's own reward), llm:<model spec> (e.g. llm:openai:gpt-4o)")

Matrix = tuple[tuple[Any, ...], ...]


def _gold_from_step(step: Mapping[str, Any]) -> dict[str, Any] | None:
    """Gold actions come from offline data sets: a step key ``gold_action`` or the device's
    ``observation.extra["gold_action"]``."""
    gold = step.get("gold_action")
    if gold is None:
        gold = (step.get("observation", {}).get("extra") or {}).get("gold_action")
    return dict(gold) if isinstance(gold, Mapping) else None


@dataclass(frozen=True)
class StepContext:
    """Everything a critic (or adversary) may know about one recorded step. Treat as read-only.

    Attributes:
        episode_id, t: which step.
        task: the task text; action_space: ``web`` or ``mobile``.
        observation: the rendered observation the agents read.
        history: executed actions before this step (call strings), oldest first.
        actions: n x m action dicts (``{"action": name, ...}``; name ``unknown`` when unparsable).
        raws: n x m raw model outputs.
        gold: the gold action dict, when the data has one.
        success: the episode's outcome from the trace's end record (None: not given).
        messages: n x m: the exact chat messages each agent read (empty when not known).
        env: the environment name from the trace header (e.g. ``miniwob/click-button``).
        seed: the episode's reset seed from the trace header (None: not seeded).
        prefix: the actions executed before this step, oldest first (action dicts), which
            replay the episode up to this step.
        screen: the device's observation text at this step (``rendered_observation`` adds
            the location lines and may be cut; replays compare against this).
        device: how the device showed pages (``element_format``, ``shuffle_elements``,
            ``shuffle_seed``) from the trace header; a replay shows them the same way.
        tree: the element tree of that screen (web pages; ``Observation.extra["tree"]``), None
            when the trace has none: the elements are read from it, not from the text.
    """

    episode_id: str
    t: int
    task: str
    action_space: str
    observation: str
    history: tuple[str, ...]
    actions: Matrix
    raws: Matrix
    gold: dict[str, Any] | None = None
    success: bool | None = None
    messages: Matrix = ()
    env: str | None = None
    seed: int | None = None
    prefix: tuple[dict[str, Any], ...] = ()
    screen: str | None = None
    device: Mapping[str, Any] = field(default_factory=dict)
    tree: Mapping[str, Any] | None = None

    @property
    def n(self) -> int:
        return len(self.actions)

    @property
    def m(self) -> int:
        return len(self.actions[0]) if self.actions else 0

    @property
    def space(self) -> ActionSpace:
        return get_action_space(self.action_space)

    def action(self, i: int, j: int) -> Action:
        """Entry (i, j) as a typed action; ``Unknown`` when it did not parse."""
        return to_action(self.actions[i][j], self.space)

    @classmethod
    def from_trace_step(cls, header: Mapping[str, Any], step: Mapping[str, Any], *,
                        end: Mapping[str, Any] | None = None,
                        prefix: Sequence[Mapping[str, Any]] = ()) -> StepContext:
        """Build the context of one step record (see ``collabui.trace``); ``prefix`` holds the
        ``executed`` dicts of the episode's earlier steps.

        Raises:
            TraceError: the step's proposals are not a non-empty rectangular matrix, or some
                were skipped (``TeamConfig.stop_when_decided``).
        """
        rows = step.get("proposals") or []
        widths = {len(row) for row in rows}
        if not rows or len(widths) != 1 or 0 in widths:
            raise TraceError(f"step t={step.get('t')} of episode {header.get('episode_id')!r} has "
                             "no rectangular n x m proposal matrix; re-record the trace")
        if any(p.get("skipped") for row in rows for p in row):
            raise TraceError(f"step t={step.get('t')} of episode {header.get('episode_id')!r} has entries the team "
                             "skipped (stop_when_decided), which no critic can label; record training episodes "
                             "without --stop-when-decided")
        observation = step.get("rendered_observation") or step["observation"]["text"]
        typed = {tuple(e) for e in (step.get("task_password") or {}).get("proposals", ())}
        return cls(
            episode_id=str(header["episode_id"]),
            t=int(step["t"]),
            task=str(header.get("task", "")),
            action_space=str(header.get("action_space", "web")),
            observation=observation,
            history=tuple(step.get("history", ())),
            actions=tuple(tuple(task_password_stand_in(p["action"]) if (i, j) in typed else dict(p["action"])
                                for j, p in enumerate(row)) for i, row in enumerate(rows)),
            raws=tuple(tuple(str(p.get("raw", "")) for p in row) for row in rows),
            gold=_gold_from_step(step),
            success=None if end is None else bool(end.get("success")),
            messages=tuple(tuple(tuple(dict(msg) for msg in p["messages"]) for p in row)
                           for row in rows),
            env=header.get("env"),
            seed=header.get("seed") if isinstance(header.get("seed"), int) else None,
            prefix=tuple(dict(a) for a in prefix),
            screen=(step.get("observation") or {}).get("text"),
            device=dict(header.get("device") or {}),
            tree=((step.get("observation") or {}).get("extra") or {}).get("tree"),
        )


def task_password_stand_in(action: Mapping[str, Any]) -> dict[str, Any]:
    """A recorded action that typed the task's password (masked in the trace) with its text as
    :data:`~collabui.redaction.TASK_PASSWORD`, which a replay types as the live task's password."""
    from collabui.redaction import TASK_PASSWORD

    out = dict(action)
    for key in ("content", "text"):  # web type_string, mobile input_text
        if isinstance(out.get(key), str):
            out[key] = TASK_PASSWORD
    return out


def to_action(data: Mapping[str, Any] | Action, space: ActionSpace) -> Action:
    """An action dict as a typed action of ``space``; ``Unknown`` when it is not valid."""
    if isinstance(data, Action):
        return data
    if data.get("action") == Unknown.name:
        return Unknown(raw=str(data.get("raw", "")), reason=str(data.get("reason", "")))
    try:
        return space.from_dict(data)
    except ActionError as exc:
        return Unknown(raw=json.dumps(dict(data)), reason=str(exc))


def _matrix(values: Sequence[Sequence[Any]]) -> Matrix:
    return tuple(tuple(row) for row in values)


@dataclass(frozen=True)
class ScoreMatrix:
    """A critic's n x m verdict on one step.

    Attributes:
        scores: floats in [0, 1], or None where the critic abstained.
        reasons: per-entry explanation (why it abstained, or the critic's note), or None.
        rationale: the critic's free-text reasoning for the whole step, if any.
        parse: how the critic's output was read (LLM critics), else None.
    """

    scores: Matrix
    reasons: Matrix | None = None
    rationale: str | None = None
    parse: ParseStats | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "scores", _matrix(self.scores))
        if self.reasons is not None:
            object.__setattr__(self, "reasons", _matrix(self.reasons))
        for row in self.scores:
            for s in row:
                if s is not None and (isinstance(s, bool) or not 0.0 <= s <= 1.0):
                    raise ConfigError(f"critic score {s!r} is outside [0, 1]; abstain with None "
                                      "instead")

    @property
    def n(self) -> int:
        return len(self.scores)

    @property
    def m(self) -> int:
        return len(self.scores[0]) if self.scores else 0

    @property
    def rewards(self) -> Matrix:
        """Eq. 6: 1 when score >= 0.5, 0 below, None when abstained."""
        return tuple(tuple(None if s is None else int(s >= REWARD_THRESHOLD) for s in row)
                     for row in self.scores)

    @property
    def abstained(self) -> int:
        return sum(s is None for row in self.scores for s in row)

    def to_label(self, episode_id: str, t: int, critic_name: str) -> dict[str, Any]:
        """The ``labels.jsonl`` record of this step (see the training contract)."""
        record: dict[str, Any] = {
            "episode_id": episode_id,
            "t": t,
            "critic": critic_name,
            "scores": [list(row) for row in self.scores],
            "rewards": [list(row) for row in self.rewards],
            "reasons": None if self.reasons is None else [list(row) for row in self.reasons],
            "abstained": self.abstained,
        }
        if self.rationale:
            record["rationale"] = self.rationale
        return record


class Critic(ABC):
    """Scores the action matrix of one step. ``name`` is recorded in every label."""

    name: str = "critic"

    @abstractmethod
    def score(self, ctx: StepContext) -> ScoreMatrix:
        """Score every entry of ``ctx``'s n x m matrix (None = abstain)."""

    def score_many(self, contexts: Sequence[StepContext]) -> list[ScoreMatrix]:
        """Score several steps; critics backed by a model override this to batch."""
        return [self.score(ctx) for ctx in contexts]


class ReferenceCritic(Critic):
    """1.0 when a proposal's canonical key equals the gold action's key, else 0.0.

    Args:
        gold: computes the gold action dict of a step (None: unknown); without it, the gold
            recorded in the context (``StepContext.gold``) is used. No gold: the whole step
            abstains; an invalid gold action too (with the reason).
    """

    name = "reference"

    def __init__(self, gold: Callable[[StepContext], Mapping[str, Any] | None] | None = None) -> None:
        self.gold = gold

    def score(self, ctx: StepContext) -> ScoreMatrix:
        data = self.gold(ctx) if self.gold is not None else ctx.gold
        if data is None:
            return _uniform(ctx, None, "abstain: no gold action for this step")
        gold = to_action(data, ctx.space)
        if isinstance(gold, Unknown):
            return _uniform(ctx, None, f"abstain: gold action is invalid ({gold.reason})")
        scores, reasons = [], []
        for i in range(ctx.n):
            row_s, row_r = [], []
            for j in range(ctx.m):
                same = ctx.action(i, j).key() == gold.key()
                row_s.append(1.0 if same else 0.0)
                row_r.append(f"{'matches' if same else 'differs from'} gold {gold.to_call()}")
            scores.append(row_s)
            reasons.append(row_r)
        return ScoreMatrix(scores, reasons)


class OutcomeCritic(Critic):
    """The "without CR" ablation: every parsable entry scores the episode's success (1.0 or
    0.0; an episode without an end record counts as failed); unparsable entries score 0.0."""

    name = "outcome"

    def score(self, ctx: StepContext) -> ScoreMatrix:
        value = 1.0 if ctx.success else 0.0
        note = "episode succeeded" if ctx.success else "episode did not succeed"
        scores, reasons = [], []
        for i in range(ctx.n):
            parsed = [not isinstance(ctx.action(i, j), Unknown) for j in range(ctx.m)]
            scores.append([value if ok else 0.0 for ok in parsed])
            reasons.append([note if ok else "unparsable proposal" for ok in parsed])
        return ScoreMatrix(scores, reasons)


def _uniform(ctx: StepContext, score: float | None, reason: str) -> ScoreMatrix:
    return ScoreMatrix([[score] * ctx.m for _ in range(ctx.n)], [[reason] * ctx.m for _ in range(ctx.n)])


class LLMCritic(Critic):
    """A chat model as the critic agent (paper: a strong LLM such as GPT-4o).

    Unparsable proposals are scored 0.0 without asking (they cannot be executed); everything
    else comes from the model's JSON, with unreadable entries abstained and counted in
    ``self.stats`` (cumulative) and in each ScoreMatrix's ``parse``.

    Args:
        model: any ChatModel (OpenAI-compatible server, vLLM, local).
        temperature: sampling temperature of the critic.
        few_shot: include a worked example as a prior chat turn.
        max_new_tokens: generation budget (reasoning + JSON).
    """

    def __init__(self, model: ChatModel, *, temperature: float = 0.1, few_shot: bool = True,
                 max_new_tokens: int = 512) -> None:
        self.model = model
        self.temperature = temperature
        self.few_shot = few_shot
        self.max_new_tokens = max_new_tokens
        self.name = f"llm:{getattr(model, 'name', 'model')}"
        self.stats = ParseStats()

    def request(self, ctx: StepContext) -> ChatRequest:
        """The chat request sent for ``ctx`` (exposed for inspection and tests)."""
        return ChatRequest(messages=build_critic_messages(ctx, few_shot=self.few_shot),
                           temperature=self.temperature, max_new_tokens=self.max_new_tokens)

    def score(self, ctx: StepContext) -> ScoreMatrix:
        return self.score_many([ctx])[0]

    def score_many(self, contexts: Sequence[StepContext]) -> list[ScoreMatrix]:
        if not contexts:
            return []
        results = self.model.generate([self.request(ctx) for ctx in contexts])
        return [self._read(ctx, result.text) for ctx, result in zip(contexts, results, strict=True)]

    def _read(self, ctx: StepContext, text: str) -> ScoreMatrix:
        parsed = parse_scores(text, ctx.n, ctx.m)
        self.stats = self.stats + parsed.stats
        scores = [list(row) for row in parsed.scores]
        reasons = [list(row) for row in parsed.reasons]
        for i in range(ctx.n):
            for j in range(ctx.m):
                if isinstance(ctx.action(i, j), Unknown):
                    scores[i][j], reasons[i][j] = 0.0, "unparsable proposal"
        return ScoreMatrix(scores, reasons, parsed.rationale, parsed.stats)


def make_critic(spec: str, **kw: Any) -> Critic:
    """Build a critic from a spec: ``outcome``, ``reference`` or ``llm:<model spec>``.

    The model spec is the one of ``collabui.models.spec.load_model``; ``kw`` go to the critic
    (``LLMCritic``: temperature, few_shot, max_new_tokens; ``ReferenceCritic``: gold).

    Raises:
        ConfigError: unknown spec.
    """
    text = spec.strip()
    kind, sep, rest = text.partition(":")
    if text == "outcome":
        return OutcomeCritic(**kw)
    if text == "reference":
        return ReferenceCritic(**kw)
    if text == "verified":
        from collabui.training.verified import EnvVerifiedCritic

        return EnvVerifiedCritic(**kw)
    if text == "oracle":
        from collabui.training.oracles import oracle_gold

        critic = ReferenceCritic(gold=oracle_gold)
        critic.name = "oracle"
        return critic
    if kind == "llm" and sep and rest.strip():
        from collabui.models.spec import load_model

        return LLMCritic(load_model(rest.strip()), **kw)
    raise ConfigError(f"unknown critic {spec!r}; use one of: {CRITIC_SPECS}")
