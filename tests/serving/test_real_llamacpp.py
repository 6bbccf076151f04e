"""A trained team on llama.cpp: each agent's whole model on a real llama-server of its own, the
same greedy answers as the bundle on transformers, and ``eval miniwob --serve --serve-backend
llamacpp`` on a real MiniWoB++ page. Needs llama.cpp's server (the ``llamacpp`` extra)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from collabui._hardware import usable_cores
from collabui.config import TeamConfig
from collabui.errors import ConfigError
from collabui.evaluation.miniwob import MiniWoBEvalConfig, evaluate_miniwob
from collabui.models.base import ChatRequest
from collabui.models.bundle import write_bundle
from collabui.models.spec import load_model
from collabui.serving.managed import AgentRouter, ServedModel, check_backend
from collabui.trace import read_trace

from .conftest import make_peft_adapters

pytestmark = [pytest.mark.slow, pytest.mark.model]

_ASK = ({"role": "user", "content": "Click the OK button."},)


@pytest.fixture(scope="module")
def bundle(smollm2_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """SmolLM2 + a random shared adapter merged in; agent 0 has an adapter of its own, agent 1
    runs on the merged model alone."""
    root = tmp_path_factory.mktemp("llamacpp-bundle")
    made = make_peft_adapters(smollm2_dir, root / "adapters", 2)
    return write_bundle(root / "team", base="smollm2", merge={"stage1": made["agent1"]},
                        agents={"agent0": made["agent0"]}, slots=["agent0", None], dtype="float32",
                        team={"prompt_style": "trained", "max_new_tokens": 12})


def test_each_agent_is_served_its_own_model(bundle: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("COLLABUI_CACHE", str(tmp_path / "cache"))
    requests = [ChatRequest(_ASK, max_new_tokens=10, adapter=a) for a in ("agent0", None)]
    local = load_model(f"trained:{bundle}")
    try:
        want = [r.text for r in local.generate(requests)]
    finally:
        local.close()
    assert want[0] != want[1]  # the agent adapter really changes the answer
    served = ServedModel.of_spec(f"trained:{bundle}", backend="llamacpp", dtype="float32", parallel=2,
                                 context=1024)
    try:
        assert isinstance(served, AgentRouter)
        assert served.team_defaults["adapters"] == ("agent0", None)
        assert [r.text for r in served.generate(requests)] == want
        servers = [route.server for route in served.routes.values()]
        assert sorted(s.name for s in servers) == ["trained-team-agent0", "trained-team-shared"]
    finally:
        served.close()
    assert not any(s.running for s in servers)


def test_backend_choices_are_checked() -> None:
    with pytest.raises(ConfigError, match="unknown serving backend 'tgi'"):
        check_backend("tgi")
    with pytest.raises(ConfigError, match="llama.cpp always serves each agent's model whole"):
        check_backend("llamacpp", "merged")
    with pytest.raises(ConfigError, match="serve_backend would be ignored without serve"):
        MiniWoBEvalConfig(tasks="click-test", model="smollm2", serve_backend="llamacpp")


def test_an_adapters_folder_needs_vllm(smollm2_dir: Path, tmp_path: Path) -> None:
    folder = make_peft_adapters(smollm2_dir, tmp_path / "adapters", 1)
    with pytest.raises(ConfigError, match="needs a trained bundle .* use --serve-backend vllm"):
        ServedModel.of_spec("smollm2", Path(folder["agent0"]).parent, backend="llamacpp")


@pytest.mark.browser
@pytest.mark.parametrize("backend", ["llamacpp", "auto"])  # auto: a bundle of two agent models goes to llama.cpp
def test_eval_serve_llamacpp_runs_the_bundle_team(bundle: Path, tmp_path: Path, monkeypatch, backend: str) -> None:
    from collabui.serving import setup

    monkeypatch.setenv("COLLABUI_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(setup, "default_flavor", lambda: "cpu")  # on a GPU auto would take vLLM
    config = MiniWoBEvalConfig(tasks="click-test", episodes=1, model=f"trained:{bundle}", serve=True,
                               serve_backend=backend, serve_dtype="float16",
                               team=TeamConfig(n_agents=2, rounds=2, topology="chain", max_steps=1))
    results = evaluate_miniwob(config, tmp_path / "run", progress=False)
    assert results["overall"]["success_rate"]["n"] == 1
    [trace] = (tmp_path / "run" / "traces").glob("*.jsonl")
    step = read_trace(trace).steps[0]
    assert step["error"] is None
    assert [[p["adapter"] for p in row] for row in step["proposals"]] == [["agent0", "agent0"], [None, None]]
    assert all(p["completion_tokens"] for row in step["proposals"] for p in row)
    # Two llama.cpp servers (agent 0's model, the shared one) from f16 GGUFs, and no vLLM.
    logs = sorted((tmp_path / "cache" / "logs").glob("*.log"))
    assert [p.name.split("-")[0] for p in logs] == ["llamacpp", "llamacpp"]
    assert len(list((tmp_path / "cache" / "gguf").glob("*-f16.gguf"))) == 2
    saved = json.loads((tmp_path / "run" / "results.json").read_text())
    assert saved["overall"]["success_rate"]["n"] == 1
    assert sorted(saved["run"]["servers"]) == ["llama.cpp trained-team-agent0", "llama.cpp trained-team-shared"]


def test_collabui_serve_llamacpp_serves_a_bundle_until_ctrl_c(bundle: Path, tmp_path: Path) -> None:
    """``collabui serve --backend llamacpp``: the bundle's shared model (merged, exported to
    GGUF) answers at the printed spec; SIGINT stops it with exit 0. A bundle whose agents have
    adapters is refused with one line (llama.cpp serves one whole model)."""
    shared = write_bundle(tmp_path / "shared", base="smollm2", merge={"stage1": bundle / "stage1"}, agents={},
                          dtype="float32", team={"prompt_style": "trained", "element_format": "text-first"})
    env = {**os.environ, "COLLABUI_CACHE": str(tmp_path / "cache")}
    cmd = [sys.executable, "-m", "collabui.cli", "serve", "--backend", "llamacpp", "--model", f"trained:{shared}",
           "--dtype", "float32", "--parallel", "1", "--context", "1024", "--log-file", str(tmp_path / "log")]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        lines = [proc.stdout.readline(), proc.stdout.readline()]
        assert lines[0].startswith("serving trained-shared at http://127.0.0.1:"), (lines, proc.stderr)
        spec = lines[1].split("--model ")[1].split()[0]
        assert lines[1].strip().endswith("--prompt-style trained --element-format text-first")
        served = load_model(spec)
        local = load_model(f"trained:{shared}")
        try:
            request = [ChatRequest(_ASK, max_new_tokens=8)]
            assert served.generate(request)[0].text == local.generate(request)[0].text
        finally:
            served.close()
            local.close()
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0
    finally:
        proc.kill()
        proc.wait()
    assert "stopping llama.cpp" in proc.stderr.read()
    done = subprocess.run([*cmd[:7], f"trained:{bundle}"], capture_output=True, text=True, env=env, check=False)
    assert done.returncode == 2 and "has per-agent adapters, and llama.cpp serves one whole model" in done.stderr


def test_llamacpp_model_factory_serves_each_agents_merged_model(bundle: Path, smollm2_dir: Path,
                                                                tmp_path: Path, monkeypatch) -> None:
    """MARL's rollout factory on llama.cpp: an agent's adapter merged into a model of its own
    (cached: made once) answers as LocalModel with that adapter does; an agent without one gets
    the shared model; without adapters one server; closing stops every server."""
    from collabui.models.bundle import merged_folder
    from collabui.models.local import LocalModel
    from collabui.serving.managed import llamacpp_model_factory

    monkeypatch.setenv("COLLABUI_CACHE", str(tmp_path / "cache"))
    adapter = bundle / "agent0"
    requests = [ChatRequest(_ASK, max_new_tokens=10, adapter=a) for a in ("agent0", None)]
    local = LocalModel(str(smollm2_dir), adapters={"agent0": str(adapter)})
    try:
        want = [r.text for r in local.generate(requests)]
    finally:
        local.close()
    assert want[0] != want[1]
    factory = llamacpp_model_factory(dtype="float32", parallel=2, context=1024)
    served = factory(smollm2_dir, {"agent0": adapter})
    try:
        assert isinstance(served, AgentRouter) and set(served.routes) == {"agent0", None}
        assert [r.text for r in served.generate(requests)] == want
        servers = [route.server for route in served.routes.values()]
        # the one agent model gets every core; the shared model's server only stands by
        assert {s.threads for s in servers} == {len(usable_cores())}
    finally:
        served.close()
    assert not any(s.running for s in servers)
    merged = merged_folder(smollm2_dir, [adapter])
    assert merged.parent == tmp_path / "cache" / "merged-models" and merged_folder(smollm2_dir, []) == smollm2_dir
    made = merged.stat().st_mtime_ns
    assert merged_folder(smollm2_dir, [adapter]).stat().st_mtime_ns == made  # reused, not merged again
    plain = factory(smollm2_dir, {})
    try:
        assert isinstance(plain, ServedModel) and plain.generate(requests[1:])[0].text == want[1]
    finally:
        plain.close()
