"""LlamaCppServer: its command line and checks, and the real llama.cpp server answering as
transformers does (SmolLM2, float32 GGUF, greedy), then a clean stop."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from collabui.errors import ConfigError, ModelLoadError
from collabui.models.base import ChatRequest
from collabui.serving.llamacpp_server import LlamaCppServer, gguf_for, llama_server_binary
from collabui.serving.process import group_members


def test_command_line(tmp_path: Path) -> None:
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    server = LlamaCppServer(str(model), port=8123, parallel=6, context=2048, threads=3, binary="/x/llama-server",
                            extra_args=["--seed", "1"])
    cmd = server.command()
    assert cmd[0] == "/x/llama-server"
    joined = " ".join(cmd)
    for part in (f"--model {model}", "--alias m", "--host 127.0.0.1", "--port 8123", "--parallel 6",
                 "--ctx-size 12288", "--threads 3", "--threads-batch 3", "--jinja", "--top-k 0", "--top-p 1.0",
                 "--min-p 0.0", "--seed 1"):
        assert part in joined
    assert server.model_spec == "openai:m@http://127.0.0.1:8123/v1"
    assert server.environment()["PATH"] == os.environ["PATH"]


def test_bad_settings_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match="unknown GGUF dtype 'int4'"):
        LlamaCppServer(dtype="int4")
    with pytest.raises(ConfigError, match="parallel must be an integer >= 1"):
        LlamaCppServer(parallel=0)
    with pytest.raises(ConfigError, match="threads must be >= 1"):
        LlamaCppServer(threads=0)
    with pytest.raises(ConfigError, match="neither a .gguf file nor a model folder"):
        gguf_for(tmp_path)
    with pytest.raises(ConfigError, match="no port yet"):
        LlamaCppServer(str(tmp_path)).command()
    monkeypatch.setenv("COLLABUI_LLAMA_SERVER", str(tmp_path / "none"))
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    with pytest.raises(ModelLoadError, match=r"llama.cpp is not set up .*none does not exist.*llamacpp\]"):
        LlamaCppServer(str(model), log_file=tmp_path / "log").start()


@pytest.mark.model
@pytest.mark.slow
def test_real_server_answers_as_transformers(smollm2_dir: Path, tmp_path: Path, monkeypatch) -> None:
    from collabui.models.local import LocalModel

    monkeypatch.setenv("COLLABUI_CACHE", str(tmp_path / "cache"))
    asks = [({"role": "user", "content": "Name three colors."},),
            ({"role": "system", "content": "You operate a web browser."},
             {"role": "user", "content": 'Task: Click on the "okay" button.\nbutton "cancel" [A]\nbutton "okay" [B]'})]
    requests = [ChatRequest(ask, max_new_tokens=16) for ask in asks]
    local = LocalModel(str(smollm2_dir), prefix_cache=False)
    try:
        want = [r.text for r in local.generate(requests)]
    finally:
        local.close()
    assert llama_server_binary().is_file()
    server = LlamaCppServer("smollm2", dtype="f32", parallel=2, context=1024, log_file=tmp_path / "llama.log")
    with server:
        pid = server.pid
        assert server.served_models() == ["smollm2"]
        model = server.client(timeout=120, max_retries=0)
        got = model.generate(requests)
        # The GGUF's chat template (SmolLM2's default system prompt included) and greedy decoding.
        assert [r.text for r in got] == want
        assert got[0].prompt_tokens > 20 and got[0].completion_tokens > 0
        # Seeded sampling repeats itself.
        sampled = ChatRequest(asks[0], max_new_tokens=12, temperature=0.9, seed=7)
        assert model.generate([sampled])[0].text == model.generate([sampled])[0].text
    assert not server.running and group_members(pid) == []


def test_auto_weights_are_bf16_only_where_the_cpu_computes_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from collabui import _hardware
    from collabui.serving.managed import gguf_dtype

    monkeypatch.setattr(_hardware, "cpu_has_native_bf16", lambda: True)
    assert gguf_dtype("auto") == "bf16"
    monkeypatch.setattr(_hardware, "cpu_has_native_bf16", lambda: False)
    assert gguf_dtype("auto") == "f16"
    assert (gguf_dtype("float32"), gguf_dtype("bfloat16"), gguf_dtype("float16")) == ("f32", "bf16", "f16")
