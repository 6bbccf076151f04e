"""Why a held-out row lost its episodes: each lost episode of an evaluation folder is put in one
cause, read from its trace (no model, no browser), and the causes are counted per task.

Analysis only: nothing here trains or tunes on the held-out tasks (a lever designed from these
causes would make the held-out figure a tuned one). Cookbook section *Where the held-out
episodes are lost*::

    ./.venv/bin/python cookbook/cpu_recipe/lost_episodes.py runs/v67c/eval/trained_team
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from collabui.devices.simplify import element_lines


def _actions(steps: list[dict[str, Any]]) -> list[tuple[dict[str, Any], str]]:
    """Each step's executed action and the screen line of the element it named ('' for none)."""
    out = []
    for step in steps:
        action = step.get("executed") or {}
        lines = element_lines(step.get("rendered_observation") or "")
        out.append((action, lines.get(str(action.get("element_id")), "")))
    return out


def _unnamed(line: str) -> str:
    """A screen line without its id: one field keeps one line though a shuffled page renames it."""
    return line.rsplit(" [", 1)[0]


def _quoted(line: str) -> str:
    found = re.search(r'"([^"]*)"', line)
    return found.group(1) if found else ""


def _enter_password(task: str, steps: list[dict[str, Any]]) -> str:
    typed = {_unnamed(line) for action, line in _actions(steps) if action.get("action") == "type_string"}
    return "typed one of the two fields, then Submit" if len(typed) < 2 else "both fields typed, lost otherwise"


def _form_sequence_2(task: str, steps: list[dict[str, Any]]) -> str:
    acts = _actions(steps)
    if not any(action.get("action") == "click" and "radio" in line for action, line in acts):
        typed = sum(action.get("action") == "type_string" for action, _ in acts)
        return f"no radio ticked; the number typed {typed} time(s)"
    return "a radio ticked, lost otherwise"


def _email_inbox_delete(task: str, steps: list[dict[str, Any]]) -> str:
    sender = re.search(r"email by (\S+)", task)
    for step in steps:
        action = step.get("executed") or {}
        lines = [line.strip() for line in (step.get("rendered_observation") or "").splitlines()]
        at = next((i for i, line in enumerate(lines) if line.endswith(f"[{action.get('element_id')}]")), None)
        if at is None or '".trash"' not in lines[at]:
            continue
        # An email's icons follow its row (div "Sender Subject...") on the flat screen.
        row = next((lines[i] for i in range(at, -1, -1) if lines[i].startswith('div "')), "")
        own = sender is not None and row.startswith(f'div "{sender.group(1)}')
        return "the trash icon of the named email, lost otherwise" if own else "the trash icon of another email"
    return "no trash icon clicked"


def _click_dialog_2(task: str, steps: list[dict[str, Any]]) -> str:
    wanted = re.search(r'labeled "([^"]*)"', task)
    clicked = next((_quoted(line) for action, line in _actions(steps) if action.get("action") == "click"), "")
    return f'"{wanted.group(1) if wanted else "?"}" read as "{clicked}"'


def _miscopied(task: str, text: str) -> bool:
    """Whether typed ``text`` has a word the task does not (Doddson where the task says Dodson)."""
    return not set(re.findall(r"[\w'-]+", text)) <= set(re.findall(r"[\w'-]+", task))


def _multi_orderings(task: str, steps: list[dict[str, Any]]) -> str:
    typed = [str(action.get("content", "")) for action, _ in _actions(steps) if action.get("action") == "type_string"]
    miscopied = [text for text in typed if _miscopied(task, text)]
    return "a value miscopied from the task" if miscopied else "every value copied, lost otherwise"


#: The held-out tasks with a cause reader; another task's lost episode counts as "other".
CAUSES: dict[str, Callable[[str, list[dict[str, Any]]], str]] = {
    "enter-password": _enter_password, "form-sequence-2": _form_sequence_2,
    "email-inbox-delete": _email_inbox_delete, "click-dialog-2": _click_dialog_2,
    "multi-orderings": _multi_orderings,
}


def cause(task_name: str, trace: str | Path) -> str:
    """The cause of one lost episode of ``task_name``, from its trace file."""
    from collabui.trace import read_trace

    steps = read_trace(trace, validate=False).steps
    if not steps:
        return "no step"
    task = str((steps[0].get("observation") or {}).get("task", ""))
    reader = CAUSES.get(task_name)
    return reader(task, steps) if reader else f"other ({len(steps)} steps)"


def lost_causes(folder: Path) -> tuple[Counter[tuple[str, str]], Counter[str], int]:
    """(cause counts by (task, cause), lost episodes by task, episodes) of an evaluation folder."""
    episodes = [json.loads(line) for line in (folder / "episodes.jsonl").read_text().splitlines() if line.strip()]
    counts: Counter[tuple[str, str]] = Counter()
    lost: Counter[str] = Counter()
    for episode in episodes:
        if episode.get("success"):
            continue
        lost[episode["task"]] += 1
        trace = Path(episode["trace"])
        trace = trace if trace.is_file() else folder / "traces" / trace.name
        counts[(episode["task"], cause(episode["task"], trace) if trace.is_file() else "no trace")] += 1
    return counts, lost, len(episodes)


def miscopies(folder: Path, task_name: str) -> tuple[int, list[tuple[str, str]]]:
    """(typing entries, the miscopied ones as (task, typed)) over every agent's proposals in the traces
    of ``task_name`` in ``folder`` or its traces/ (a team's n x m matrix; a single agent's executed action).

    Run on training rollouts, this counts a copying slip on a training task, e.g. multi-layouts.
    """
    from collabui.trace import read_trace

    entries, slips = 0, []
    root = folder / "traces" if (folder / "traces").is_dir() else folder
    for path in sorted(root.glob("*.jsonl")):
        trace = read_trace(path, validate=False)
        if trace.header.get("env") != f"miniwob/{task_name}":
            continue
        for step in trace.steps:
            task = str((step.get("observation") or {}).get("task", ""))
            matrix = [entry.get("action") or {} for row in step.get("proposals") or [] for entry in row]
            for action in matrix or [step.get("executed") or {}]:
                if action.get("action") == "type_string":
                    entries += 1
                    if _miscopied(task, str(action.get("content", ""))):
                        slips.append((task, str(action.get("content", ""))))
    return entries, slips


def render(counts: Counter[tuple[str, str]], lost: Counter[str], episodes: int) -> str:
    """A markdown table, the tasks by lost episodes, each task's causes by count."""
    lines = [f"{sum(lost.values())} of {episodes} episodes lost", "", "| task | lost | cause | episodes |",
             "|---|---|---|---|"]
    for task, n in sorted(lost.items(), key=lambda kv: (-kv[1], kv[0])):
        causes = sorted(((c, k) for (t, c), k in counts.items() if t == task), key=lambda ck: (-ck[1], ck[0]))
        for i, (text, k) in enumerate(causes):
            lines.append(f"| {task if i == 0 else ''} | {n if i == 0 else ''} | {text} | {k} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", type=Path, help="an evaluation folder (episodes.jsonl and traces/), e.g. a recipe row's")
    ap.add_argument("--miscopies", metavar="TASK",
                    help="instead: count the typing entries on TASK (the traces in FOLDER or FOLDER/traces, "
                         "e.g. a MARL iteration's rollouts) whose value has a word the task does not")
    args = ap.parse_args(argv)
    if args.miscopies:
        from collabui.errors import TraceError

        try:
            entries, slips = miscopies(args.folder, args.miscopies)
        except TraceError as exc:  # another .jsonl (pairs, labels) beside the traces
            print(f"lost_episodes: {exc}; give an evaluation or MARL iteration folder (its traces/)", file=sys.stderr)
            return 2
        if not entries:
            print(f"lost_episodes: no typing on {args.miscopies} in the traces in {args.folder}; give a folder "
                  "of traces of that task", file=sys.stderr)
            return 2
        print(f"{len(slips)} of {entries} typing entries on {args.miscopies} miscopied")
        for (task, text), k in Counter(slips).most_common():
            print(f"- {text!r} x{k} for: {task}")
        return 0
    if not (args.folder / "episodes.jsonl").is_file():
        print(f"lost_episodes: no episodes.jsonl in {args.folder}; give a `collabui eval miniwob` output folder",
              file=sys.stderr)
        return 2
    print(render(*lost_causes(args.folder)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
