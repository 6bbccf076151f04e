"""Embed a CollabAgentTeam in your own Python automation.

Run:  ./.venv/bin/python cookbook/embed_team.py [miniwob/click-button] [episodes]

It loads the embedded SmolLM2 model once, builds a 4-agent, 3-round team on a random DAG, and
runs it on a MiniWoB++ task in headless Chromium, writing traces to ./traces/cookbook. Swap the
model for any LangChain chat model (``LangChainModel(ChatOpenAI(...))``) or an OpenAI-compatible
server (``load_model("openai:MODEL@http://127.0.0.1:8000/v1")``) without touching the rest.
"""

from __future__ import annotations

import sys

from collabui import CollabAgentTeam, load_model, make_env


def main(env_name: str = "miniwob/click-button", episodes: int = 2) -> None:
    model = load_model("smollm2")  # LocalModel on transformers; batched per superstep
    team = CollabAgentTeam(
        model,
        n_agents=4,
        rounds=3,
        topology="random",  # a random DAG over the 4 agents, seeded
        seed=0,
        max_steps=4,
        max_new_tokens=64,
    )
    print(team.draw_mermaid())  # the compiled LangGraph step graph

    def show(step) -> None:  # called after every environment step
        print(f"step {step.t}: voted {step.vote.action} ({step.vote.votes}/{step.vote.total}), reward {step.reward:+g}")

    with make_env(env_name) as device:  # headless Chromium on the MiniWoB++ page
        for k in range(episodes):
            result = team.run(None, device, seed=k, trace="traces/cookbook", env_name=env_name, on_step=show)
            print(f"episode {k}: task {result.task!r} success={result.success} steps={result.n_steps} "
                  f"time={result.duration_s:.0f}s trace={result.trace_path}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "miniwob/click-button",
         int(sys.argv[2]) if len(sys.argv) > 2 else 2)
