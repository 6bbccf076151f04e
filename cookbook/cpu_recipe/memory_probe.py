"""What the one-round memory does to a trained agent: for each recorded single-agent step, the
log-probability of the agent's own answer with and without that answer shown back to it as
"your previous answer" (the block a team agent reads in rounds 2 and 3).

A model that has learned to keep a right answer gains probability when it reads it; one that
has learned to distrust what it is shown loses it. Reads the traces of `collabui eval miniwob`
runs of one agent (``--agents 1 --rounds 1``); scores with the bundle's merged model on this CPU.

    ./.venv/bin/python cookbook/cpu_recipe/memory_probe.py runs/v30t/bundle \
        runs/v30t/validation runs/v30t/eval/trained_single --episodes 60
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
from pathlib import Path

from collabui.actions import get_action_space
from collabui.devices import simplify
from collabui.prompts import PeerOutput, answer_call, own_answer_block


def _with_own_answer(messages: list[dict], proposal: dict, style: str, tree: dict | None = None) -> list[dict]:
    """The same prompt as the agent's round-2 prompt would show it: its answer appended (named on
    the step's element ``tree`` in the ``named`` style)."""
    named = None
    if style == "named":
        named = answer_call(get_action_space("web").from_dict(proposal["action"]), tree,
                            simplify.observation_format(messages[-1]["content"]))
    own = PeerOutput(agent=0, round=0, thought=proposal.get("thought"),
                     action_json=json.dumps(proposal["action"], ensure_ascii=False), raw=proposal["raw"], named=named)
    shown = [dict(m) for m in messages]
    shown[-1]["content"] += "\n" + own_answer_block(own, style)
    return shown


def _steps(run: Path, episodes: int, seed: int):
    """(t, messages, proposal, style, tree) of the first proposal of every step of ``episodes`` traces."""
    files = sorted((run / "traces").glob("*.jsonl"))
    random.Random(seed).shuffle(files)
    for path in files[:episodes]:
        records = [json.loads(line) for line in path.read_text().splitlines()]
        style = records[0].get("team", {}).get("prompt_style", "terse")
        for step in (r for r in records if r["type"] == "step"):
            cells = step["proposals"]
            first = cells[0][0] if isinstance(cells[0], list) else cells[0]
            if first.get("action") is not None and first.get("parse_error") is None:  # a team shows no unparsed answer
                yield step["t"], first["messages"], first, style, step["observation"]["extra"].get("tree")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("bundle", help="a trained bundle folder (the recipe's bundle/)")
    parser.add_argument("runs", nargs="+", help="single-agent eval folders (each with traces/)")
    parser.add_argument("--episodes", type=int, default=60, help="traces per run, drawn at random (seeded)")
    args = parser.parse_args()

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from collabui.models.bundle import merged_model_dir

    folder = merged_model_dir(Path(args.bundle))
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()

    def logprob(messages: list[dict], answer: str) -> float:
        prompt = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        ids = tokenizer(prompt + answer, return_tensors="pt").input_ids
        start = len(tokenizer(prompt).input_ids)
        with torch.no_grad():
            logits = torch.log_softmax(model(ids).logits[0, :-1], dim=-1)
        return float(logits[torch.arange(start - 1, ids.shape[1] - 1), ids[0, start:]].sum())

    print("| run | steps | n | mean change of log p(own answer) | share that loses probability |")
    print("|---|---|---|---|---|")
    for run in map(Path, args.runs):
        rows = []
        for t, messages, proposal, style, tree in _steps(run, args.episodes, seed=0):
            plain = logprob(messages, proposal["raw"])
            shown = logprob(_with_own_answer(messages, proposal, style, tree), proposal["raw"])
            rows.append((t, shown - plain))
        for name, keep in (("first (t = 0)", lambda t: t == 0), ("later (t > 0)", lambda t: t > 0)):
            deltas = [d for t, d in rows if keep(t)]
            if deltas:
                print(f"| {run} | {name} | {len(deltas)} | {statistics.mean(deltas):+.3f} | "
                      f"{sum(d < 0 for d in deltas) / len(deltas):.1%} |")


if __name__ == "__main__":
    main()
