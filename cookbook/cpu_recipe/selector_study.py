"""Which rule picks the executed action best among a team's proposals? Measured on team runs
labelled by the verified critic (``collabui train label --critic verified``), at the steps where
the choice matters: the critic scored every distinct proposal, and some but not all were right.

Rules compared (each picks one distinct proposal of the step):

* ``vote``: the team's count (``collabui.vote.majority_vote``, the exact rule);
* ``lexical arbiter``: the lexical policy's answer when an agent proposed it, else the vote
  (``--arbiter lexical``);
* ``abstaining arbiter > t``: the same, but lexical speaks only when its best fresh element
  outscores the next one by more than ``t`` (or it types the task's quoted text);
* ``learned``: a conditional-logit selector over per-proposal features (vote shares, agent 0's
  answer, lexical's answer and score, an element acted on before, typed text in the task or the
  history, the action's kind), fitted on the choice steps of every task but one and scored on
  that one (leave one task out: how it would do on a task it never saw).

    ./.venv/bin/python cookbook/cpu_recipe/selector_study.py runs/v33/val_indep_vo_arb
"""

from __future__ import annotations

import argparse
import json
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from collabui.actions import Unknown, get_action_space
from collabui.errors import CollabUIError
from collabui.models.base import ChatRequest
from collabui.models.baselines import (
    LexicalPolicyModel,
    PromptView,
    lexical_score,
    read_prompt,
    screen_targets,
)
from collabui.trace import read_trace
from collabui.training.labels import expand_trace_paths, load_labels
from collabui.vote import majority_vote

MARGINS = (0.0, 0.5, 1.0)
_ACTIONS = ("click", "type_string", "select")


@dataclass
class Choice:
    """One step where the choice matters: its distinct proposals, their features and rewards."""

    task: str
    keys: list[str]
    votes: list[int]
    features: list[list[float]]
    right: list[int]
    lexical: str | None
    vote: str
    margin: float
    lexical_types: bool


def _key(action: Any) -> str:
    return json.dumps(action, sort_keys=True)


def _lexical(view: PromptView, messages: Any) -> tuple[str | None, float, set[Any]]:
    """Lexical's answer, the lead of its best fresh element over the next, and the used ids."""
    from collabui.models.baselines import _used_web_refs

    text = LexicalPolicyModel().generate([ChatRequest(messages=tuple(messages))])[0].text
    found = re.search(r"\{.*\}", text, re.S)
    used = _used_web_refs(view)
    scores = sorted((s for t in screen_targets(view) if t.ref not in used
                     and (s := lexical_score(view.task, t.text)) > 0), reverse=True)
    margin = (scores[0] - (scores[1] if len(scores) > 1 else 0.0)) if scores else -1.0
    return (_key(json.loads(found.group())) if found else None), margin, used


def _features(view: PromptView, targets: dict[Any, Any], best: float, action: dict[str, Any], votes: int,
              last: int, first_agent: bool,
              is_lexical: bool, used: set[Any], n_agents: int, n_entries: int) -> list[float]:
    target = targets.get(action.get("element_id"))
    content = str(action.get("content", "")).casefold()
    return [votes / n_entries, last / n_agents, float(first_agent), float(is_lexical),
            lexical_score(view.task, target.text) / best if target else 0.0,
            float(action.get("element_id") in used),
            float(bool(content) and content in view.task.casefold()),
            float(bool(content) and content in view.history.casefold()),
            *(float(action.get("action") == name) for name in _ACTIONS)]


def choices(run: Path) -> Iterator[Choice]:
    """Every step of ``run`` (traces + ``labels.jsonl``) where the choice matters."""
    labels = load_labels(run / "labels.jsonl")
    for path in expand_trace_paths(run / "traces"):
        trace = read_trace(path, validate=False)
        task = str(trace.header.get("env") or trace.header["episode_id"].rsplit("-", 1)[0])
        for step in trace.steps:
            label = labels.get((trace.header["episode_id"], step["t"]))
            if label is not None:
                yield from _choice(task, step, label)


def _choice(task: str, step: dict[str, Any], label: dict[str, Any]) -> Iterator[Choice]:
    rounds = len(step["proposals"][0])
    votes, last, rewards, actions, first = Counter(), Counter(), {}, {}, set()
    for i, (row, row_rewards) in enumerate(zip(step["proposals"], label["rewards"], strict=True)):
        for j, (proposal, reward) in enumerate(zip(row, row_rewards, strict=True)):
            if proposal.get("action") is None or proposal.get("parse_error"):
                continue
            key = _key(proposal["action"])
            actions[key], votes[key] = proposal["action"], votes[key] + 1
            last[key] += j == rounds - 1
            if i == 0 and j == rounds - 1:
                first.add(key)
            rewards[key] = None if reward is None and rewards.get(key) is None else max(rewards.get(key) or 0, reward or 0)
    right = [rewards.get(k) for k in votes]
    if len(votes) < 2 or None in right or all(right) or not any(right):
        return
    messages = step["proposals"][0][0]["messages"]
    view = read_prompt(messages)
    lexical, margin, used = _lexical(view, messages)
    keys = list(votes)
    space = get_action_space("web")
    matrix = [[Unknown() if p.get("action") is None or p.get("parse_error") else space.from_dict(p["action"])
               for p in row] for row in step["proposals"]]
    counted = _key(majority_vote(matrix).action.to_dict())
    n_agents, n_entries = len(step["proposals"]), len(step["proposals"]) * rounds
    targets = {t.ref: t for t in screen_targets(view)}  # the page's elements, read once a step
    best = max([lexical_score(view.task, t.text) for t in targets.values()] + [1e-9])
    features = [_features(view, targets, best, actions[k], votes[k], last[k], k in first, k == lexical, used,
                          n_agents, n_entries) for k in keys]
    yield Choice(task, keys, [votes[k] for k in keys], features, [int(r) for r in right], lexical, counted, margin,
                 lexical is not None and '"type_string"' in lexical)


def fit(train: list[Choice], l2: float = 1e-2) -> torch.Tensor:
    """Conditional logit: the log-probability of the right proposals among a step's proposals."""
    weights = torch.zeros(len(train[0].features[0]), dtype=torch.float64, requires_grad=True)
    data = [(torch.tensor(c.features, dtype=torch.float64), torch.tensor(c.right) > 0) for c in train]
    optimizer = torch.optim.LBFGS([weights], max_iter=200)

    def loss() -> torch.Tensor:
        optimizer.zero_grad()
        value = sum(torch.logsumexp(x @ weights, 0) - torch.logsumexp((x @ weights)[y], 0) for x, y in data)
        value = value / len(data) + l2 * (weights ** 2).sum()
        value.backward()
        return value

    optimizer.step(loss)
    return weights.detach()


def study(steps: list[Choice]) -> Counter[str]:
    """Right picks of each rule over ``steps``."""
    counts: Counter[str] = Counter(steps=len(steps))
    for task in sorted({c.task for c in steps}):
        held = [c for c in steps if c.task == task]
        rest = [c for c in steps if c.task != task]
        weights = fit(rest) if rest else None
        for c in held:
            vote = c.keys.index(c.vote)
            lex = c.keys.index(c.lexical) if c.lexical in c.keys else vote
            counts["vote"] += c.right[vote]
            counts["lexical arbiter"] += c.right[lex]
            for t in MARGINS:
                counts[f"abstaining arbiter > {t}"] += c.right[lex if c.lexical_types or c.margin > t else vote]
            if weights is not None:
                scores = torch.tensor(c.features, dtype=torch.float64) @ weights
                counts["learned (leave one task out)"] += c.right[int(scores.argmax())]
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="team run folders with traces/ and labels.jsonl")
    args = parser.parse_args(argv)
    try:
        steps = [c for run in args.runs for c in choices(run)]
    except (CollabUIError, OSError) as exc:  # a folder without traces or labels: one line, exit 2
        parser.exit(2, f"selector_study: {exc}\n")
    if not steps:
        raise SystemExit("no step where the choice matters: label the runs first (collabui train label)")
    counts = study(steps)
    print(f"{counts.pop('steps')} steps where the choice matters ({len({c.task for c in steps})} tasks)")
    for rule, right in counts.items():
        print(f"  {rule:32s} {right:4d} right")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
