"""Serving speed on a team's real requests: replay recorded team steps against a server.

Reads the agents' exact prompts from the traces of a ``collabui eval miniwob`` run folder and
sends them as the team sent them (each step's supersteps in order, a superstep's requests as
one batch), ``--streams`` traces at once (as ``--concurrency`` episodes would), with each
request's recorded temperature, seed and token budget. Prints the wall seconds of the replay
(start-up excluded, and printed apart) and requests per second, for each backend asked for::

    ./.venv/bin/python cookbook/cpu_recipe/serving_speed.py --run runs/v41/eval/trained_team --model smollm2-trained \\
        --backends vllm,llamacpp --streams 4

With ``--agent-models``, a bundle's per-agent adapters are served as a MARL team would be
(vLLM: one LoRA server; llama.cpp: one server per agent model), and each request names its
agent's adapter, cycling over the bundle's agents. ``--random-agents N`` makes such a bundle
from ``--model``'s: its shared model plus N random rank-8 adapters on every linear layer (the
shape of MARL's per-agent adapters), written to ``--out``::

    ./.venv/bin/python cookbook/cpu_recipe/serving_speed.py --run runs/serving/vllm --model smollm2-trained \
        --random-agents 4 --out runs/serving/agents --backends vllm,llamacpp
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from collabui.models.base import ChatRequest
from collabui.serving.managed import SERVE_BACKENDS, ServedModel


def _steps(trace: Path, adapters: list[str | None]) -> list[list[list[ChatRequest]]]:
    """Per step, its supersteps' requests (in superstep order), from one trace file."""
    steps = []
    for line in trace.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        if record.get("type") != "step":
            continue
        by_superstep: dict[int, list[ChatRequest]] = {}
        for row in record["proposals"]:
            for entry in row:
                adapter = adapters[entry["agent"] % len(adapters)] if adapters else None
                request = ChatRequest(messages=entry["messages"], temperature=entry.get("temperature", 0.0),
                                      max_new_tokens=128, seed=entry["agent"] * 1000 + entry["round"],
                                      adapter=adapter)
                by_superstep.setdefault(entry.get("superstep", entry["round"]), []).append(request)
        steps.append([by_superstep[k] for k in sorted(by_superstep)])
    return steps


def random_agents_bundle(spec: str, n: int, out: Path) -> str:
    """A bundle: ``spec``'s shared model (its ``merge`` adapters) and ``n`` random agent adapters
    (rank 8, every linear layer, B drawn small so each agent's answers stay the trained ones
    but its weights differ); returns its ``trained:`` spec."""
    import json

    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from collabui.models.bundle import merged_model_dir, read_bundle, write_bundle
    from collabui.models.spec import bundle_folder

    source = bundle_folder(spec)
    if source is None:
        raise SystemExit(f"error: --random-agents needs a bundle spec (smollm2-trained, trained:FOLDER), not {spec}")
    manifest = read_bundle(source)
    model = AutoModelForCausalLM.from_pretrained(merged_model_dir(source), dtype=torch.float32)
    peft = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules="all-linear"))
    folders = {}
    for k in range(n):
        generator = torch.Generator().manual_seed(k)
        with torch.no_grad():
            for name, param in peft.named_parameters():
                if "lora_B" in name:
                    param.copy_(torch.randn(param.shape, generator=generator) * 1e-4)
        folders[f"agent{k}"] = out / "adapters" / f"agent{k}"
        peft.save_pretrained(folders[f"agent{k}"])
    write_bundle(out / "bundle", base=manifest["base"], merge={m: source / m for m in manifest["merge"]},
                 agents=folders, team=manifest["team"], made_by=json.dumps({"random_agents": n, "from": spec}))
    return f"trained:{out / 'bundle'}"


def _replay(model: Any, streams: list[list[list[list[ChatRequest]]]]) -> tuple[float, int, int]:
    """Replay every stream at once; returns (seconds, requests, completion tokens)."""
    counts = [0, 0]

    def one(stream: list[list[list[ChatRequest]]]) -> None:
        for step in stream:
            for batch in step:
                results = model.generate(batch)
                counts[0] += len(results)
                counts[1] += sum(r.completion_tokens or 0 for r in results)

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=len(streams)) as pool:
        list(pool.map(one, streams))
    return time.perf_counter() - started, counts[0], counts[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", required=True, help="a collabui eval miniwob run folder (its traces/ are replayed)")
    parser.add_argument("--model", default="smollm2-trained", help="the local model spec to serve")
    parser.add_argument("--backends", default="vllm,llamacpp", help="comma-separated: " + ", ".join(SERVE_BACKENDS))
    parser.add_argument("--streams", type=int, default=4, help="traces replayed at once (default 4)")
    parser.add_argument("--limit", type=int, default=None, help="at most this many traces")
    parser.add_argument("--agent-models", action="store_true",
                        help="each request names its agent's adapter of the bundle (a MARL team)")
    parser.add_argument("--llamacpp-parallel", type=int, default=None, help="llama.cpp slots (default: its server's)")
    parser.add_argument("--serve-dtype", default="auto", help="the served weights (auto, float32, bfloat16, float16; "
                        "llama.cpp also q8_0)")
    parser.add_argument("--random-agents", type=int, default=0, metavar="N",
                        help="serve --model's bundle with N random agent adapters (implies --agent-models)")
    parser.add_argument("--out", default="runs/serving/agents", help="where --random-agents writes its bundle")
    args = parser.parse_args(argv)
    traces = sorted(Path(args.run, "traces").glob("*.jsonl"))[: args.limit]
    if not traces:
        print(f"error: {args.run}/traces holds no traces; pass a collabui eval miniwob run folder", file=sys.stderr)
        return 2
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    unknown = sorted(set(backends) - set(SERVE_BACKENDS))
    if unknown:
        print(f"error: unknown backend {unknown[0]!r}; use {', '.join(SERVE_BACKENDS)}", file=sys.stderr)
        return 2
    if args.random_agents:
        args.model, args.agent_models = random_agents_bundle(args.model, args.random_agents, Path(args.out)), True
    for backend in backends:
        fields: dict[str, Any] = {"dtype": args.serve_dtype}
        if backend == "llamacpp" and args.llamacpp_parallel:
            fields["parallel"] = args.llamacpp_parallel
        started = time.perf_counter()
        model = ServedModel.of_spec(args.model, backend=backend, **fields)
        startup = time.perf_counter() - started
        try:
            adapters = list(model.team_defaults.get("adapters", ())) if args.agent_models else []
            work = [_steps(t, adapters) for t in traces]
            streams = [sum((work[i] for i in range(k, len(work), args.streams)), []) for k in range(args.streams)]
            seconds, requests, tokens = _replay(model, streams)
        finally:
            model.close()
        print(f"{backend}: start-up {startup:.1f} s; {requests} requests in {seconds:.1f} s = "
              f"{requests / seconds:.2f} requests/s, {tokens / seconds:.0f} answer tokens/s "
              f"({len(traces)} traces, {args.streams} at once)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
