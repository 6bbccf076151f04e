"""Is the vote or are the agents the limit of a team? For each step of a team run labelled by a
critic (``collabui train label --critic verified``), whether the executed action was right and,
when it was wrong, whether any of the n x m proposals was right (a better selection could have
taken it) or none was (only better agents could). Per failed episode, the same at its first step
that the critic scored wrong: the most any vote rule, with these proposals, could have won back.

    ./.venv/bin/collabui train label --traces runs/v32/val_team/traces --critic verified \\
        --out runs/v32/val_team/labels.jsonl
    ./.venv/bin/python cookbook/cpu_recipe/vote_bound.py runs/v32/val_team runs/v32/val_team/labels.jsonl
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path
from typing import Any

from collabui.trace import read_trace
from collabui.training.labels import expand_trace_paths, load_labels


def _key(action: Any) -> str:
    return json.dumps(action, sort_keys=True)


def step_verdict(step: dict[str, Any], label: dict[str, Any]) -> dict[str, Any] | None:
    """``{"executed": 0/1, "right": [action keys the critic scored right], "votes": {key: n}}``,
    or None when the critic abstained on the executed action."""
    rewards: dict[str, int | None] = {}
    votes: Counter[str] = Counter()
    for row, row_rewards in zip(step["proposals"], label["rewards"], strict=True):
        for proposal, reward in zip(row, row_rewards, strict=True):
            if proposal.get("action") is None or proposal.get("parse_error"):
                continue  # an unparsed answer is no vote (the team's own vote passes it over)
            key = _key(proposal["action"])
            votes[key] += 1
            if reward is not None:
                rewards[key] = max(rewards.get(key) or 0, int(reward))
            else:
                rewards.setdefault(key, None)
    executed = rewards.get(_key(step.get("executed")))
    if executed is None:
        return None
    return {"executed": executed, "right": [k for k, r in rewards.items() if r == 1], "votes": dict(votes)}


def summarize(run: Path, labels_path: Path) -> dict[str, Any]:
    labels = load_labels(labels_path)
    counts: Counter[str] = Counter()
    right_votes: list[int] = []
    for path in expand_trace_paths(run / "traces"):
        trace = read_trace(path, validate=False)
        success = bool((trace.end or {}).get("success"))
        counts["episodes"] += 1
        counts["won"] += success
        first_wrong = None
        for step in trace.steps:
            label = labels.get((trace.header["episode_id"], step["t"]))
            verdict = step_verdict(step, label) if label else None
            if verdict is None:
                counts["steps_unlabelled"] += 1
                continue
            counts["steps"] += 1
            if verdict["executed"]:
                continue
            counts["steps_wrong"] += 1
            if verdict["right"]:
                counts["steps_wrong_right_proposed"] += 1
                right_votes.append(max(verdict["votes"][k] for k in verdict["right"]))
            if first_wrong is None:
                first_wrong = verdict
        if not success and first_wrong is not None:
            counts["lost_at_a_labelled_wrong_step"] += 1
            counts["lost_with_a_right_proposal"] += bool(first_wrong["right"])
    return {**counts, "votes_of_the_right_action_when_outvoted": dict(sorted(Counter(right_votes).items()))}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("run", type=Path, help="a team run folder of collabui eval miniwob (traces/ inside)")
    ap.add_argument("labels", type=Path, help="its labels.jsonl (collabui train label --critic verified)")
    args = ap.parse_args(argv)
    print(json.dumps(summarize(args.run, args.labels), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
