"""Which id a trained model writes after its own screen line: the element's letter, or its text.

The no-CR ablation from v66 (runs/v67m) clicked ``"element_id": "ONE"`` after the thought
``click button "ONE" [A]`` on click-button-sequence. This probe reads the first step of traced
episodes, takes the prompt of an agent that saw no other agent's answer and the click it thought
of, and asks each model for the next token after ``Thought: <line>\\nAction: {"action": "click",
"element_id": "``: the probability of the line's letter id against the first token of the
element's quoted text, averaged over the episodes. Cookbook section *The paper's ablations from v66*::

    ./.venv/bin/python cookbook/cpu_recipe/id_probe.py runs/v67m/eval/ablation_no_cr/traces \\
        --task click-button-sequence --bundle sft=runs/v67m/bundle \\
        --bundle full=runs/v67m/marl/trained_team/bundle --bundle no_cr=runs/v67m/marl/ablation_no_cr/bundle
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from collabui.devices.simplify import Element, parse_elements

PREFIX = '\nAction: {"action": "click", "element_id": "'


def first_clicks(traces: Path, task: str, limit: int) -> list[tuple[list[dict[str, Any]], str]]:
    """(messages, thought) of the first step of up to ``limit`` episodes of ``task``: an entry of
    round 0 with no predecessors (its prompt shows no other answer) that thought of clicking one
    element's screen line (:func:`target`)."""
    from collabui.trace import read_trace

    found = []
    for path in sorted(traces.glob(f"*{task}-[0-9]*.jsonl"))[:limit]:
        for record in read_trace(path, validate=False).steps[:1]:
            for entry in (e for agent in record.get("proposals") or [] for e in agent):
                thought = entry.get("thought") or ""
                if (entry.get("round") == 0 and not entry.get("predecessors") and _names_one(thought)
                        and (entry.get("action") or {}).get("action") == "click"):
                    found.append((entry["messages"], thought))
                    break
    return found


def target(thought: str) -> Element:
    """The element a grounded thought names: ``click button "ONE" [A]`` is the verb, then the
    element's screen line, which the device's parser reads (id ``A``, text ``ONE``)."""
    elements = parse_elements(thought.split(" ", 1)[-1])
    if len(elements) != 1 or not elements[0].id:
        raise ValueError(f"the thought {thought!r} names no one element's screen line")
    return elements[0]


def _names_one(thought: str) -> bool:
    try:
        target(thought)
    except ValueError:
        return False
    return True


def id_probabilities(model: Any, clicks: list[tuple[list[dict[str, Any]], str]]) -> tuple[float, float]:
    """Mean P(letter id) and P(the text's first token) of a LocalModel's active adapter."""
    import torch

    tok, letter, text = model.tokenizer, [], []
    for messages, thought in clicks:
        chat = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        ids = tok(chat + f"Thought: {thought}{PREFIX}", return_tensors="pt").input_ids
        with torch.no_grad():
            probs = torch.softmax(model.model(ids).logits[0, -1].float(), -1)
        element = target(thought)
        letter.append(probs[tok(element.id).input_ids[0]].item())
        text.append(probs[tok(element.text or " ").input_ids[0]].item())
    return sum(letter) / len(letter), sum(text) / len(text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("traces", type=Path, help="an evaluation's traces/ folder")
    ap.add_argument("--task", default="click-button-sequence", help="the MiniWoB++ task whose episodes to read")
    ap.add_argument("--bundle", action="append", default=[], metavar="NAME=FOLDER", help="a trained bundle (repeatable)")
    ap.add_argument("--episodes", type=int, default=25)
    args = ap.parse_args(argv)
    bundles = [b.split("=", 1) for b in args.bundle]
    if not bundles or any(len(b) != 2 for b in bundles):
        print("id_probe: give each model as --bundle NAME=FOLDER (a trained bundle's folder)", file=sys.stderr)
        return 2
    clicks = first_clicks(args.traces, args.task, args.episodes)
    if not clicks:
        print(f"id_probe: no first-step click of {args.task} in {args.traces}; give an evaluation's traces/ "
              "folder and a task it played", file=sys.stderr)
        return 2
    from collabui.models.bundle import load_bundle

    print(f"| model | P(letter id) | P(text as id) |  ({args.task}, {len(clicks)} episodes)\n|---|---|---|")
    for name, folder in bundles:
        model = load_bundle(folder)
        adapters = model.team_defaults.get("adapters") or ()
        if adapters:  # agent 0's adapter: every agent's in a shared-adapter team
            model.model.set_adapter(adapters[0])
        letter, text = id_probabilities(model, clicks)
        print(f"| {name} | {letter:.3f} | {text:.3f} |", flush=True)
        model.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
