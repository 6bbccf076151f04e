"""The verified critic's labelling time on recorded traces, with web actions on disabled elements
failing at once (today's rule) and with Playwright's wait for them put back (the rule before
2026-12-04), in one run; prints both times, their ratio and whether the labels agree.

    ./.venv/bin/python cookbook/cpu_recipe/label_speed.py \
        --traces runs/v56r/marl/trained_team/iter1/traces/iter1-login-user-popup-{0,1,2}.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import collabui.devices._web_actions as web_actions
from collabui.training.critic import make_critic
from collabui.training.labels import label_traces


async def _never(*args: Any, **kwargs: Any) -> None:
    return None  # the old rule: no early answer, the action waits out its timeout


def _timed_labels(traces: list[str], out: Path) -> tuple[float, dict[tuple[str, int], Any]]:
    critic = make_critic("verified")
    started = time.perf_counter()
    try:
        label_traces(traces, critic, out, resume=False, progress=False)
    finally:
        getattr(critic, "close", lambda: None)()
    seconds = time.perf_counter() - started
    rows = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    return seconds, {(r["episode_id"], r["t"]): r["scores"] for r in rows}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", nargs="+", required=True, help="MiniWoB++ trace files to label")
    args = parser.parse_args(argv)
    missing = [t for t in args.traces if not Path(t).is_file()]
    if missing:
        print(f"error: no trace file {missing[0]}; pass recorded .jsonl traces (a MARL run's iterN/traces/)",
              file=sys.stderr)
        return 2
    # The old rule is put back by swapping the device's private check: it was removed on purpose,
    # so the device has no public switch for it, and this measurement is its only user.
    fast_fail = web_actions._not_enabled
    with tempfile.TemporaryDirectory() as tmp:
        fast, fast_labels = _timed_labels(args.traces, Path(tmp) / "fast.jsonl")
        web_actions._not_enabled = _never
        try:
            slow, slow_labels = _timed_labels(args.traces, Path(tmp) / "wait.jsonl")
        finally:
            web_actions._not_enabled = fast_fail
    same = fast_labels == slow_labels
    print(f"{len(fast_labels)} steps of {len(args.traces)} episodes: disabled fails at once {fast:.1f} s, "
          f"waited out {slow:.1f} s ({slow / max(fast, 1e-9):.1f}x); labels {'the same' if same else 'DIFFER'}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
