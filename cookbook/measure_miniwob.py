"""Measure a team's success rate on a few MiniWoB++ tasks (the numbers in docs/evaluation.md).

Run:  ./.venv/bin/python cookbook/measure_miniwob.py --tasks click-button,focus-text --episodes 3 \
          --agents 4 --rounds 3 --max-steps 3 --out runs/measure.json

Prints one line per episode and a Markdown table; writes the per-episode results as JSON.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from collabui import CollabAgentTeam, load_model, make_env


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", default="click-button,click-link,focus-text,enter-text,click-checkboxes")
    ap.add_argument("--episodes", type=int, default=3)
    ap.add_argument("--agents", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-steps", type=int, default=3)
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--out", default="runs/measure.json")
    ap.add_argument("--trace-dir", default=None)
    args = ap.parse_args()
    tasks = args.tasks.split(",")
    model = load_model(args.model)
    team = CollabAgentTeam(model, n_agents=args.agents, rounds=args.rounds, max_steps=args.max_steps)
    rows = []
    with make_env(f"miniwob/{tasks[0]}") as env:
        for task in tasks:
            for seed in range(args.episodes):
                env.reset(seed=seed, options={"task_name": task})  # switch task in place
                t0 = time.perf_counter()
                res = team.run(None, env, seed=seed, trace=args.trace_dir, env_name=f"miniwob/{task}")
                rows.append({"task": task, "seed": seed, "success": res.success, "reward": res.reward,
                             "steps": res.n_steps, "seconds": round(time.perf_counter() - t0, 1),
                             "unparsable": sum(p.parse_error is not None for s in res.steps
                                               for row in s.team_step.proposals for p in row),
                             "proposals": sum(len(row) for s in res.steps for row in s.team_step.proposals)})
                print(json.dumps(rows[-1]), flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"args": vars(args), "episodes": rows}, indent=1))
    print(f"\n| task | success | mean steps | s/episode |  (n={args.agents}, m={args.rounds}, {args.model})")
    print("|---|---|---|---|")
    for task in tasks:
        r = [x for x in rows if x["task"] == task]
        print(f"| {task} | {sum(x['success'] for x in r)}/{len(r)} | {sum(x['steps'] for x in r) / len(r):.1f} "
              f"| {sum(x['seconds'] for x in r) / len(r):.0f} |")
    wins = sum(x["success"] for x in rows)
    unp = sum(x["unparsable"] for x in rows) / max(1, sum(x["proposals"] for x in rows))
    print(f"| all | {wins}/{len(rows)} ({100 * wins / len(rows):.0f}%) | | |  unparsable proposals {100 * unp:.0f}%")


if __name__ == "__main__":
    main()
