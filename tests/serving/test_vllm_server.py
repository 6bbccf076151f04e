"""VLLMServer against a fake vLLM process: command line, readiness, errors, clean shutdown."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from collabui.errors import ConfigError, ModelLoadError
from collabui.models.spec import load_model
from collabui.serving.vllm_server import VLLMServer, group_members

from .conftest import make_adapters


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_command_line(fake_model: Path, tmp_path: Path) -> None:
    adapters = make_adapters(tmp_path / "ad", 2, rank=12)
    server = VLLMServer(str(fake_model), adapters=adapters, port=8123, enforce_eager=True, dtype="bfloat16",
                        max_model_len=2048,
                        kv_cache_gib=3, python="/x/bin/python", extra_args=["--seed", "1"])
    cmd = server.command()
    assert cmd[:3] == ["/x/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
    joined = " ".join(cmd)
    for part in (f"--model {fake_model}", "--served-model-name tiny-model", "--host 127.0.0.1",
                 "--port 8123", "--enable-prefix-caching", "--enforce-eager", "--enable-lora",
                 "--max-lora-rank 16", "--max-loras 2", "--dtype bfloat16", "--max-model-len 2048",
                 "--block-size 32"):
        assert part in joined
    assert cmd[cmd.index("--structured-outputs-config") + 1] == '{"backend": "xgrammar", "disable_any_whitespace": true}'
    modules = cmd[cmd.index("--lora-modules") + 1:cmd.index("--seed")]
    assert modules == [f"agent0={adapters['agent0']}", f"agent1={adapters['agent1']}"]
    assert server.environment()["VLLM_CPU_KVCACHE_SPACE"] == "3"
    assert server.model_spec == "openai:tiny-model@http://127.0.0.1:8123/v1"


def test_defaults_without_adapters(fake_model: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("COLLABUI_VLLM_VENV", str(tmp_path / "venv"))
    server = VLLMServer(str(fake_model), port=1, prefix_caching=False, compact_json=False, block_size=None)
    cmd = server.command()
    assert "--block-size" not in cmd and "--max-model-len" not in cmd, "the model's own context"
    assert "--structured-outputs-config" not in cmd
    assert cmd[0] == str(tmp_path / "venv" / "bin" / "python")
    assert "--enable-lora" not in cmd and "--enforce-eager" not in cmd
    assert "--no-enable-prefix-caching" in cmd
    assert int(server.environment()["VLLM_CPU_KVCACHE_SPACE"]) >= 1


def test_auto_dtype_is_float32_on_cpus_without_native_bf16(fake_model: Path, monkeypatch: pytest.MonkeyPatch,
                                                           tmp_path: Path) -> None:
    from collabui._hardware import cpu_has_native_bf16
    from collabui.serving import vllm_server

    plain, bf16 = tmp_path / "plain", tmp_path / "bf16"
    plain.write_text("flags\t\t: fpu avx2 avx512f avx512_vnni\n")
    bf16.write_text("flags\t\t: fpu avx2 avx512f avx512_bf16\n")
    assert not cpu_has_native_bf16(plain) and cpu_has_native_bf16(bf16)
    assert not cpu_has_native_bf16(tmp_path / "missing")
    server = VLLMServer(str(fake_model), port=1)
    monkeypatch.setattr(vllm_server, "default_flavor", lambda: "cpu")
    monkeypatch.setattr(vllm_server, "cpu_has_native_bf16", lambda: False)
    cmd = server.command()
    assert cmd[cmd.index("--dtype") + 1] == "float32"
    monkeypatch.setattr(vllm_server, "cpu_has_native_bf16", lambda: True)
    assert server.resolved_dtype() == "bfloat16"
    monkeypatch.setattr(vllm_server, "default_flavor", lambda: "gpu")
    monkeypatch.setattr(vllm_server, "cpu_has_native_bf16", lambda: False)
    assert server.resolved_dtype() == "bfloat16"
    assert VLLMServer(str(fake_model), port=1, dtype="float16").resolved_dtype() == "float16"


def test_cpu_prefills_each_prompt_in_one_step(fake_model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM-CPU dies on a seeded prompt whose prefill is split in chunks (test_real_vllm.py shows
    it), so on CPU chunking is off and a step's token budget is the whole context."""
    from collabui.serving import vllm_server

    monkeypatch.setattr(vllm_server, "default_flavor", lambda: "cpu")
    cmd = VLLMServer(str(fake_model), port=1).command()
    assert "--no-enable-chunked-prefill" in cmd
    assert cmd[cmd.index("--max-num-batched-tokens") + 1] == "4096", "the model's max_position_embeddings"
    cmd = VLLMServer(str(fake_model), port=1, max_model_len=3000).command()
    assert cmd[cmd.index("--max-num-batched-tokens") + 1] == "3000"
    cmd = VLLMServer(str(fake_model), port=1, chunked_prefill=True).command()
    assert "--enable-chunked-prefill" in cmd and "--max-num-batched-tokens" not in cmd
    (fake_model / "config.json").write_text('{"n_positions": 1024}')  # GPT-2's key
    cmd = VLLMServer(str(fake_model), port=1).command()
    assert cmd[cmd.index("--max-num-batched-tokens") + 1] == "1024"
    (fake_model / "config.json").write_text("{}")
    with pytest.raises(ConfigError, match="gives no context length .* pass max_model_len"):
        VLLMServer(str(fake_model), port=1).command()
    monkeypatch.setattr(vllm_server, "default_flavor", lambda: "gpu")  # CUDA generators rewind: vLLM's default
    cmd = VLLMServer(str(fake_model), port=1).command()
    assert not any("chunked-prefill" in a or a == "--max-num-batched-tokens" for a in cmd)


def test_small_machines_keep_no_core_for_the_front_end(fake_model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VLLM_CPU_NUM_OF_RESERVED_CPU", raising=False)
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    assert VLLMServer(str(fake_model), port=1).environment()["VLLM_CPU_NUM_OF_RESERVED_CPU"] == "0"
    monkeypatch.setenv("VLLM_CPU_NUM_OF_RESERVED_CPU", "1")  # the user's choice wins
    assert VLLMServer(str(fake_model), port=1).environment()["VLLM_CPU_NUM_OF_RESERVED_CPU"] == "1"
    monkeypatch.delenv("VLLM_CPU_NUM_OF_RESERVED_CPU")
    monkeypatch.setattr("os.cpu_count", lambda: 32)
    assert "VLLM_CPU_NUM_OF_RESERVED_CPU" not in VLLMServer(str(fake_model), port=1).environment()


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"model": "/nonexistent"}, "has no config.json"),
    ({"adapters": {"a": "/nonexistent"}}, "not a LoRA adapter folder"),
    ({"adapters": {"a=b": "/x"}}, "adapter name"),
    ({"port": None}, "no port yet"),
    ({"block_size": 40}, "not a multiple of 16"),
])
def test_bad_configuration_is_one_line(kwargs: dict, match: str, fake_model: Path) -> None:
    with pytest.raises(ConfigError, match=match) as info:
        VLLMServer(**{"model": str(fake_model), "port": 1, **kwargs}).command()
    assert "\n" not in str(info.value)


def test_missing_venv_says_run_setup(fake_model: Path, tmp_path: Path) -> None:
    server = VLLMServer(str(fake_model), venv=tmp_path / "none")
    with pytest.raises(ModelLoadError, match=r"collabui serve --setup"):
        server.start()
    assert not server.running


def test_start_serve_and_stop(fake_server, tmp_path: Path) -> None:
    adapters = make_adapters(tmp_path / "ad", 2)
    with fake_server(adapters=adapters, kv_cache_gib=2) as server:
        assert server.running and server.port is not None
        assert server.served_models() == ["tiny-model", "agent0", "agent1"]
        model = load_model(server.model_spec, timeout=5, max_retries=0)
        from collabui.models.base import ChatRequest

        results = model.generate([ChatRequest(messages=({"role": "user", "content": "hi"},), adapter="agent1")])
        assert "click" in results[0].text
        pid = server.pid
    assert not server.running and group_members(pid) == []
    log = server.log_path.read_text()
    assert "fake vllm" in log and "kv=2" in log and "--lora-modules" in log


def test_dead_process_error_quotes_the_log(fake_server) -> None:
    server = fake_server("die")
    with pytest.raises(ModelLoadError, match=r"exited with code 1 .*torchvision::nms.*see .*vllm.log") as info:
        server.start()
    assert "\n" not in str(info.value) and not server.running


def test_readiness_timeout_stops_the_process(fake_server) -> None:
    server = fake_server("hang", ready_timeout_s=1.0)
    with pytest.raises(ModelLoadError, match=r"not ready after 1 s.*enforce_eager"):
        server.start()
    assert not server.running


def test_stop_kills_the_whole_process_group(fake_server, tmp_path: Path) -> None:
    child_file = tmp_path / "child.pid"
    server = fake_server("child", env={"FAKE_VLLM_CHILD_PID": str(child_file)})
    server.start()
    child = int(child_file.read_text())
    assert _alive(child) and child in group_members(server.pid)
    server.stop()
    assert not _alive(child)
    server.stop()  # idempotent


def test_stop_leaves_no_descendant_even_outside_the_group(fake_server, tmp_path: Path) -> None:
    """A real process tree: the server's child ignores SIGTERM and its grandchild left the
    group (a session of its own), so neither killpg nor waiting ends it; stop() does."""
    pid_file = tmp_path / "tree.pid"
    server = fake_server("tree", stop_timeout_s=0.5, env={"FAKE_VLLM_CHILD_PID": str(pid_file)})
    server.start()
    child, grandchild = map(int, pid_file.read_text().split())
    assert _alive(child) and _alive(grandchild) and grandchild not in group_members(server.pid)
    started = time.monotonic()
    server.stop()
    assert not _alive(child) and not _alive(grandchild)
    assert time.monotonic() - started < 5


def test_sigterm_ignored_falls_back_to_sigkill(fake_server) -> None:
    server = fake_server("ignore-term", stop_timeout_s=0.5)
    server.start()
    pid = server.pid
    server.stop()
    assert not _alive(pid)


def test_server_dies_with_its_parent(fake_pkg: Path, fake_model: Path, tmp_path: Path) -> None:
    """A parent killed with SIGKILL (no atexit) still leaves no server behind (Linux)."""
    script = (
        "import sys, time; from collabui.serving.vllm_server import VLLMServer\n"
        f"s = VLLMServer({str(fake_model)!r}, python=sys.executable, log_file={str(tmp_path / 'p.log')!r},"
        f" env={{'PYTHONPATH': {str(fake_pkg)!r}}}).start()\n"
        "print(s.pid, flush=True); time.sleep(60)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    server_pid = int(parent.stdout.readline())
    assert _alive(server_pid)
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    for _ in range(100):
        if not _alive(server_pid):
            break
        import time

        time.sleep(0.05)
    assert not _alive(server_pid)


def test_adapter_folder_rank_is_read(tmp_path: Path) -> None:
    folder = tmp_path / "a"
    folder.mkdir()
    (folder / "adapter_config.json").write_text(json.dumps({"r": 300}))
    assert VLLMServer("smollm2", adapters={"a": str(folder)}).lora_rank() == 320


def test_kv_cache_env_is_kept_unless_configured(fake_model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "5")
    assert VLLMServer(str(fake_model)).environment()["VLLM_CPU_KVCACHE_SPACE"] == "5"
    assert VLLMServer(str(fake_model), kv_cache_gib=2).environment()["VLLM_CPU_KVCACHE_SPACE"] == "2"


def test_unrunnable_interpreter_is_one_line(fake_model: Path, tmp_path: Path) -> None:
    python = tmp_path / "python"
    python.write_text("not a program")  # exists, but is not executable
    server = VLLMServer(str(fake_model), python=python, log_file=tmp_path / "log")
    with pytest.raises(ModelLoadError, match="cannot run .*collabui serve --setup"):
        server.start()
    assert not server.running


def test_group_members_lists_live_members_not_zombies() -> None:
    import psutil

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        assert group_members(proc.pid) == [proc.pid]
        proc.kill()  # not reaped yet: a zombie, which the group no longer counts
        for _ in range(100):
            if psutil.Process(proc.pid).status() == psutil.STATUS_ZOMBIE:
                break
            time.sleep(0.05)
        assert group_members(proc.pid) == []
    finally:
        proc.kill()
        proc.wait()
