"""Preference pairs from the agents' OWN mistakes: rejected = what an agent actually proposed and
the critic scored 0; chosen = a verified-right answer at the same step.

This is the on-policy counterpart of :mod:`collabui.training.pairs` (which pairs each rewarded
entry with an adversary's invented mistake). Here the negatives are real: each wrong entry
(i, j) of a labelled step (a wrong action, or an unparsable answer) becomes one record in the
exact context agent i saw in round j, and its ``chosen`` is, in order of preference:

1. agent i's own rewarded answer from another round of the same step (its own wording);
2. the step's most common rewarded answer from any agent (the matrix knew better);
3. the critic's verified target when no entry was right (``verified`` critic: the first action
   of a completion the environment rewarded), written as ``Action: <json>`` (after the
   grounded thought, action name and target line, for agents of the ``grounded`` style).

A step where every entry was right, or that the critic abstained on, gives no pair. The rows
have the columns of :data:`collabui.training.pairs.PAIR_COLUMNS`, ``rejected_source`` being
``own``, and ``chosen_source`` (``self``, ``team`` or ``verified``) added.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from collabui.trace import read_trace
from collabui.training.labels import PathLike, expand_trace_paths, load_labels
from collabui.training.pairs import PAIR_COLUMNS, clean_answer

if TYPE_CHECKING:
    from datasets import Dataset

__all__ = ["build_mistake_pairs", "mistake_pairs_for_step", "verified_sft_rows", "MISTAKE_COLUMNS"]

MISTAKE_COLUMNS = (*PAIR_COLUMNS, "chosen_source")


def verified_answer(header: dict[str, Any], step: dict[str, Any], action: dict[str, Any]) -> str:
    """``action`` written as the step's agents answer: ``Action: <json>``, after the target's
    screen line when the team used the ``grounded`` prompt style."""
    from collabui.redaction import PASSWORD_MASK, TASK_PASSWORD
    from collabui.training.sft_data import answer_text, grounded_thought, target_line

    if action.get("content") == TASK_PASSWORD:  # written as the trace shows the task's password
        action = {**action, "content": PASSWORD_MASK}
    space = _space(header)
    team = header.get("team") or {}
    thought = None
    if team.get("prompt_style") == "grounded":
        tree = ((step.get("observation") or {}).get("extra") or {}).get("tree")
        line = target_line(tree, action, str((header.get("device") or {}).get("element_format", "html")))
        thought = grounded_thought(action, line)
    return answer_text(action, thought=thought, space=space)


def _space(header: dict[str, Any]) -> str:
    return str(header.get("action_space") or header.get("config", {}).get("action_space") or "web")


def _chosen_for(i: int, props: list[list[dict[str, Any]]], rewards: list[list[Any]], target: str | None,
                space: str) -> tuple[str, str] | None:
    own = [p for j, p in enumerate(props[i]) if rewards[i][j] == 1]
    if own:
        return clean_answer(own[0]["raw"], space), "self"
    right = [props[a][j] for a in range(len(props)) for j in range(len(props[a])) if rewards[a][j] == 1]
    if right:
        key = Counter(_key(p["action"]) for p in right).most_common(1)[0][0]
        best = next(p for p in right if _key(p["action"]) == key)
        return clean_answer(best["raw"], space), "team"
    if target is not None:
        return target, "verified"
    return None


def _key(action: dict[str, Any]) -> str:
    return json.dumps(action, sort_keys=True)


def mistake_pairs_for_step(header: dict[str, Any], step: dict[str, Any], label: dict[str, Any]) -> list[dict[str, Any]]:
    """The own-mistake records of one labelled step (see the module docstring)."""
    from collabui.training.verified import verified_action

    rewards = label.get("rewards") or []
    props = step["proposals"]
    if label.get("abstained") or not rewards or any(r is None for row in rewards for r in row):
        return []
    space = _space(header)
    target_action = verified_action(label)
    target = verified_answer(header, step, target_action) if target_action is not None else None
    rows = []
    for i, row in enumerate(props):
        chosen = None
        for j, prop in enumerate(row):
            if rewards[i][j] == 1:
                continue
            chosen = chosen or _chosen_for(i, props, rewards, target, space)
            if chosen is None:
                return rows  # nothing known to be right at this step
            rows.append({"prompt": [dict(m) for m in prop["messages"]],
                         "chosen": [{"role": "assistant", "content": chosen[0]}],
                         "rejected": [{"role": "assistant", "content": clean_answer(prop["raw"], space)}],
                         "agent": i, "episode_id": str(header["episode_id"]), "t": int(step["t"]),
                         "round": j, "score": float(label["scores"][i][j] or 0.0),
                         "rejected_source": "own", "chosen_source": chosen[1]})
    return rows


def build_mistake_pairs(trace_paths: PathLike | Iterable[PathLike], labels_path: PathLike, *,
                        critic: str | None = None) -> Dataset:
    """Own-mistake pairs for every labelled step of the traces (dedupes identical records)."""
    from datasets import Dataset, Value

    from collabui.training.pairs import pair_features

    rows = _unique(_labelled_rows(trace_paths, labels_path, critic, mistake_pairs_for_step),
                   ("agent", "prompt", "chosen", "rejected"))
    features = pair_features()
    features["chosen_source"] = Value("string")
    return Dataset.from_dict({c: [r[c] for r in rows] for c in MISTAKE_COLUMNS}, features=features)


def verified_sft_rows(trace_paths: PathLike | Iterable[PathLike], labels_path: PathLike, *,
                      critic: str | None = None) -> list[dict[str, Any]]:
    """On-policy SFT rows: every entry of every labelled step, in the exact context its agent
    saw, with a verified-right completion: the agent's own answer when the critic rewarded it,
    else the ``chosen`` of its own-mistake pair (its own right answer from another round, the
    team's, or the critic's verified target). The states are the ones the agents actually
    reach, so the rows teach what demonstrations never show (what to do after a wrong turn).

    Each row is ``{"prompt", "completion", "agent", "episode_id", "t", "round", "source"}``
    (``source``: ``own`` for rewarded entries, else the chosen's source); duplicates dropped.
    """
    return _unique(_labelled_rows(trace_paths, labels_path, critic, _sft_rows_for_step), ("prompt", "completion"))


def _labelled_rows(trace_paths: PathLike | Iterable[PathLike], labels_path: PathLike, critic: str | None,
                   rows_for_step: Callable[[dict[str, Any], dict[str, Any], dict[str, Any]], list[dict[str, Any]]],
                   ) -> Iterator[dict[str, Any]]:
    """``rows_for_step(header, step, label)`` over every labelled step of the traces."""
    labels = load_labels(labels_path, critic=critic)
    for path in expand_trace_paths(trace_paths):
        trace = read_trace(path)
        for step in trace.steps:
            label = labels.get((str(trace.header["episode_id"]), int(step["t"])))
            if label:
                yield from rows_for_step(trace.header, step, label)


def _unique(rows: Iterable[dict[str, Any]], fields: tuple[str, ...]) -> list[dict[str, Any]]:
    """``rows`` without repeats of the same ``fields`` (first kept)."""
    seen: set[str] = set()
    out = []
    for row in rows:
        key = _key({k: row[k] for k in fields})
        if key not in seen:
            seen.add(key)
            out.append(row)
    return out


def _sft_rows_for_step(header: dict[str, Any], step: dict[str, Any], label: dict[str, Any]) -> list[dict[str, Any]]:
    from collabui.training.verified import verified_action

    rewards = label.get("rewards") or []
    if label.get("abstained") or not rewards or any(r is None for row in rewards for r in row):
        return []
    space, props = _space(header), step["proposals"]
    target_action = verified_action(label)
    target = verified_answer(header, step, target_action) if target_action is not None else None
    rows = []
    for i, row in enumerate(props):
        for j, prop in enumerate(row):
            if rewards[i][j] == 1:
                answer: tuple[str, str] | None = (clean_answer(prop["raw"], space), "own")
            else:
                answer = _chosen_for(i, props, rewards, target, space)
            if answer is None:
                continue
            rows.append({"prompt": [dict(m) for m in prop["messages"]],
                         "completion": [{"role": "assistant", "content": answer[0]}],
                         "agent": i, "episode_id": str(header["episode_id"]), "t": int(step["t"]),
                         "round": j, "source": answer[1]})
    return rows
