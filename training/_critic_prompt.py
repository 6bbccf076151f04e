"""The LLM critic's prompt and the tolerant reader of its answer (internal to critic.py).

The critic answers with a short reasoning, then a JSON object::

    Reasoning: agent0 clicks Submit, which the task asks for; agent1 clicks Cancel.
    Scores: {"scores": {"agent0": [0.9, 1.0], "agent1": [0.1, 0.2]}}

Reading never evaluates model text: candidates go through ``json.loads`` and then the literal
reader of ``collabui.parsing`` (single quotes, trailing commas, ``True``...). Every entry that
cannot be read becomes ``None`` (abstain) with a reason, and each kind of problem is counted.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from collabui._literal import Unreadable, balanced_end, read_object
from collabui.models.base import Message

if TYPE_CHECKING:
    from collabui.training.critic import StepContext

__all__ = ["ParseStats", "ParsedScores", "build_critic_messages", "parse_scores", "render_matrix"]

_MAX_SCAN = 20_000
_MAX_ATTEMPTS = 64
_AGENT_KEY = re.compile(r"^\s*(?:agent|a)?[\s_\-#]*(\d{1,3})\s*$", re.IGNORECASE)
_RATIONALE = re.compile(r"(?is)^\s*(?:reasoning|reason|thoughts?|analysis)\s*[:：]\s*")


@dataclass(frozen=True)
class ParseStats:
    """Counts of what could not be read from critic outputs (summable with ``+``).

    Attributes:
        outputs: critic outputs read.
        not_json: outputs with no readable JSON object (all their entries abstain).
        missing_agents: agents absent from the scores (their m entries abstain).
        extra_agents: keys that name no agent of the team (ignored).
        wrong_rounds: agents without a list of exactly m scores (the whole row abstains).
        out_of_range: numeric values outside [0, 1] (abstain, never clamped).
        not_numeric: values that are not numbers, e.g. "high" (abstain).
    """

    outputs: int = 0
    not_json: int = 0
    missing_agents: int = 0
    extra_agents: int = 0
    wrong_rounds: int = 0
    out_of_range: int = 0
    not_numeric: int = 0

    def __add__(self, other: ParseStats) -> ParseStats:
        return ParseStats(**{f.name: getattr(self, f.name) + getattr(other, f.name)
                             for f in dataclasses.fields(self)})

    def to_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class ParsedScores:
    scores: list[list[float | None]]
    reasons: list[list[str | None]]
    rationale: str | None
    stats: ParseStats


# ----------------------------------------------------------------------------- prompt

_SYSTEM = """You are the critic of a team of {n} agent(s) that operate {device} to complete a user's task.
At every step, each agent proposes an action in each of {m} discussion round(s). Judge every proposal
on its own: would executing it now, on the current screen, after the previous actions, move the task
towards completion? Score 1.0 for a correct and useful action, 0.0 for a wrong, useless or harmful
one, and values in between when unsure. Agents may agree and still be wrong.
Answer in this format:
Reasoning: <a few short sentences>
Scores: {{"scores": {{"agent0": [<score of round 0>, ...], "agent1": [...], ...}}}}
Give exactly one list per agent (agent0 to agent{last}), each with exactly {m} numbers in [0, 1]."""

_DEVICE = {"web": "a web browser", "mobile": "an Android phone"}

# A worked example as a prior chat turn: models copy the answer's shape from it.
_EXAMPLE = {
    "web": ("Click the Submit button.", "<div| Your order> <button[A]| Cancel> <button[B]| Submit>",
            [[{"action": "click", "element_id": "B"}, {"action": "click", "element_id": "B"}],
             [{"action": "click", "element_id": "A"}, {"action": "click", "element_id": "B"}]]),
    "mobile": ("Open the Wi-Fi settings.",
               '0: TextView "Settings"\n1: TextView "Wi-Fi" (clickable)\n2: TextView "Bluetooth" (clickable)',
               [[{"action": "click", "index": 1}, {"action": "click", "index": 1}],
                [{"action": "click", "index": 2}, {"action": "click", "index": 1}]]),
}
_EXAMPLE_ANSWER = (
    "Reasoning: The target is {target}. agent0 picks it in both rounds. agent1 first picks the "
    "wrong element, then corrects itself in round 1.\n"
    'Scores: {"scores": {"agent0": [1.0, 1.0], "agent1": [0.0, 0.9]}}'
)


def render_matrix(actions: Any, raws: Any, *, raw_chars: int = 160) -> str:
    """The proposals as the critic reads them, one line per (agent, round)."""
    lines = []
    for i, row in enumerate(actions):
        for j, action in enumerate(row):
            if action.get("action") == "unknown":
                raw = " ".join(str(raws[i][j]).split())[:raw_chars]
                shown = f"(unparsable output: {raw!r})"
            else:
                shown = json.dumps(dict(action), ensure_ascii=False)
            lines.append(f"agent{i} round {j}: {shown}")
    return "\n".join(lines)


def _user(task: str, history: Any, observation: str, matrix: str, n: int, m: int) -> str:
    past = "; ".join(f"{k + 1}. {h}" for k, h in enumerate(history)) if history else "None"
    return (f"Task: {task}\nPrevious actions: {past}\nCurrent screen:\n{observation}\n\n"
            f"Proposed actions:\n{matrix}\n\nScore every proposal ({n} agent(s), {m} round(s) each).")


def build_critic_messages(ctx: StepContext, *, few_shot: bool = True) -> tuple[Message, ...]:
    """System prompt, optional worked example, then this step's task, screen and matrix."""
    kind = ctx.action_space if ctx.action_space in _DEVICE else "web"
    system = _SYSTEM.format(n=ctx.n, m=ctx.m, last=ctx.n - 1, device=_DEVICE[kind])
    messages: list[Message] = [{"role": "system", "content": system}]
    if few_shot:
        task, screen, actions = _EXAMPLE[kind]
        raws = [[""] * len(row) for row in actions]
        target = "button B (Submit)" if kind == "web" else "element 1 (Wi-Fi)"
        messages += [
            {"role": "user", "content": _user(task, (), screen, render_matrix(actions, raws), 2, 2)},
            {"role": "assistant", "content": _EXAMPLE_ANSWER.replace("{target}", target)},
        ]
    body = _user(ctx.task, ctx.history, ctx.observation, render_matrix(ctx.actions, ctx.raws),
                 ctx.n, ctx.m)
    messages.append({"role": "user", "content": body})
    return tuple(messages)


# ----------------------------------------------------------------------------- reading


def _objects(text: str) -> list[tuple[int, Any]]:
    """Top-level readable dicts in ``text`` (start offset, value), left to right."""
    found: list[tuple[int, Any]] = []
    pos, attempts = 0, 0
    while attempts < _MAX_ATTEMPTS:
        start = text.find("{", pos)
        if start < 0:
            break
        attempts += 1
        try:
            end = balanced_end(text, start)
            value = read_object(text[start:end])
        except (Unreadable, RecursionError, MemoryError):
            pos = start + 1
            continue
        if isinstance(value, dict):
            found.append((start, value))
            pos = end
        else:
            pos = start + 1
    return found


def _score_table(value: Mapping[str, Any]) -> Any:
    """The agent -> scores mapping inside an answer object, or None."""
    if "scores" in value:
        return value["scores"]
    if any(_AGENT_KEY.match(str(k)) for k in value):
        return value
    return None


def _number(value: Any) -> tuple[float | None, str | None]:
    """(score, None) or (None, kind) with kind 'not_numeric' or 'out_of_range'."""
    if isinstance(value, str):
        try:
            value = float(value.strip().rstrip("%")) / (100 if value.strip().endswith("%") else 1)
        except ValueError:
            return None, "not_numeric"
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        return None, "not_numeric"
    if not 0.0 <= float(value) <= 1.0:
        return None, "out_of_range"
    return float(value), None


def _rows(table: Any, n: int) -> tuple[dict[int, Any], int]:
    """Per-agent raw rows keyed by agent index, and the number of extra (ignored) keys."""
    if isinstance(table, list):  # [[...], [...]]: positional agents
        return {i: row for i, row in enumerate(table) if i < n}, max(0, len(table) - n)
    rows: dict[int, Any] = {}
    extra = 0
    for key, row in table.items():
        m = _AGENT_KEY.match(str(key))
        index = int(m.group(1)) if m else None
        if index is None or index >= n or index in rows:
            extra += 1
        else:
            rows[index] = row
    return rows, extra


def parse_scores(text: str, n: int, m: int) -> ParsedScores:
    """Read an n x m score matrix from critic text; see the module docstring."""
    counts = {"outputs": 1}

    def bump(kind: str, by: int = 1) -> None:
        counts[kind] = counts.get(kind, 0) + by

    scores: list[list[float | None]] = [[None] * m for _ in range(n)]
    reasons: list[list[str | None]] = [[None] * m for _ in range(n)]
    text = text[:_MAX_SCAN]
    found = [(s, t) for s, v in _objects(text) if (t := _score_table(v)) is not None
             and isinstance(t, dict | list)]
    if not found:
        bump("not_json")
        why = "abstain: critic output holds no readable JSON scores"
        return ParsedScores(scores, [[why] * m for _ in range(n)], _rationale(text, len(text)),
                            _stats(counts))
    start, table = found[-1]  # the last answer wins: earlier ones are drafts or echoes
    rows, extra = _rows(table, n)
    bump("extra_agents", extra)
    for i in range(n):
        if i not in rows:
            bump("missing_agents")
            reasons[i] = ["abstain: agent missing from critic scores"] * m
            continue
        row = rows[i] if isinstance(rows[i], list) else [rows[i]] if m == 1 else None
        if row is None or len(row) != m:
            # Which round a surplus or missing score belongs to is unknowable: abstain the row.
            bump("wrong_rounds")
            got = "no list" if row is None else f"{len(row)} score(s)"
            reasons[i] = [f"abstain: critic gave {got} for agent{i}, expected {m} round scores"] * m
            continue
        for j in range(m):
            score, problem = _number(row[j])
            if problem:
                bump(problem)
                reasons[i][j] = f"abstain: score {row[j]!r} is {problem.replace('_', ' ')}"
            scores[i][j] = score
    return ParsedScores(scores, reasons, _rationale(text, start), _stats(counts))


def _rationale(text: str, stop: int) -> str | None:
    head = text[:stop]
    head = re.sub(r"(?i)\bscores?\s*[:：]?\s*(```\w*)?\s*$", "", head.rstrip())
    head = _RATIONALE.sub("", head).strip().strip("`").strip()
    return head[:2000] or None


def _stats(counts: dict[str, int]) -> ParseStats:
    return ParseStats(**counts)
