import socket
import subprocess
import sys

import pytest

from collabui.cli import build_parser, main
from collabui.cli.run import team_config
from collabui.trace import read_trace


def _run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_run_options_come_from_team_config():
    args = build_parser().parse_args(["run", "--env", "miniwob/click-button", "--agents", "3", "--rounds", "2",
                                      "--temperatures", "0,0.5,1", "--topology", "chain", "--max-steps", "2"])
    cfg = team_config(args)
    assert (cfg.n_agents, cfg.rounds, cfg.temperatures, cfg.topology, cfg.max_steps) == (3, 2, (0.0, 0.5, 1.0), "chain", 2)


def test_run_saves_screenshots_unless_told_not_to():
    base = ["run", "--env", "miniwob/click-button"]
    assert team_config(build_parser().parse_args(base)).screenshots is True
    assert team_config(build_parser().parse_args([*base, "--no-screenshots"])).screenshots is False


@pytest.mark.browser
def test_run_screenshots_reach_the_trace_and_the_viewer(tmp_path, capsys):
    from collabui.viewer import render_view

    base = ["run", "--env", "miniwob/click-button", "--model", "lexical", "--agents", "1", "--rounds", "1",
            "--max-steps", "1", "--quiet"]
    assert main([*base, "--trace-dir", str(tmp_path / "on")]) == 0
    (trace_file,) = (tmp_path / "on").glob("*.jsonl")
    ref = read_trace(trace_file).steps[0]["screenshot"]
    assert ref and (tmp_path / "on" / ref).read_bytes().startswith(b"\x89PNG")
    assert 'class="shot" src="data:image/png;base64,' in render_view(trace_file)
    assert main([*base, "--trace-dir", str(tmp_path / "off"), "--no-screenshots"]) == 0
    (trace_file,) = (tmp_path / "off").glob("*.jsonl")
    assert read_trace(trace_file).steps[0]["screenshot"] is None and not list((tmp_path / "off").rglob("*.png"))


def test_envs_lists_desktop_and_mobile_miniwob(capsys):
    code, out, _ = _run(capsys, "envs")
    names = out.split()
    assert code == 0 and "miniwob/click-button" in names and "miniwob-mobile/click-button" in names


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run", "--env", "miniwob/click-buton"], "click-button"),
        (["run", "--env", "miniwob/click-button", "--topology", "ring"], "unknown topology"),
        (["run", "--env", "miniwob/click-button", "--topology", "edges:0-1,1-0"], "cycle"),
        (["run", "--env", "miniwob/click-button", "--agents", "2", "--temperatures", "0.1"], "temperatures has 1 values"),
        (["run", "--url", "http://127.0.0.1:9/"], "--url needs --task"),
        (["run", "--env", "android"], "needs --task"),
        (["run", "--env", "miniwob/click-button", "--model", "gpt4"], "unknown model spec"),
        (["run", "--env", "miniwob/click-button", "--model", "hf:/nonexistent/model"], "/nonexistent/model"),
        (["run", "--env", "miniwob/click-button", "--episodes", "0"], "--episodes must be >= 1"),
    ],
)
def test_bad_input_gives_one_line_error(capsys, argv, message):
    code, _, err = _run(capsys, *argv)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], err


def test_missing_chromium_says_how_to_install(capsys, monkeypatch):
    monkeypatch.setenv("COLLABUI_CHROMIUM", "/nonexistent/chromium")
    code, _, err = _run(capsys, "run", "--env", "miniwob/click-button")
    assert code == 2 and "apt-get install -y chromium" in err and len(err.strip().splitlines()) == 1


def _dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.browser
def test_endpoint_that_does_not_answer_ends_with_one_line_and_a_valid_trace(capsys, tmp_path):
    url = f"http://127.0.0.1:{_dead_port()}/v1"
    code, _, err = _run(capsys, "run", "--env", "miniwob/click-button", "--model", f"openai:m@{url}",
                        "--agents", "2", "--rounds", "1", "--trace-dir", str(tmp_path), "--quiet")
    assert code == 2
    assert err.strip().splitlines()[-1].startswith("error: ") and "127.0.0.1" in err
    (trace_file,) = tmp_path.glob("*.jsonl")
    trace = read_trace(trace_file)  # header + end record with the error, nothing lost
    assert trace.complete and "EndpointError" in trace.end["error"]


@pytest.mark.browser
@pytest.mark.model
@pytest.mark.slow
def test_cli_runs_the_embedded_team_on_miniwob(tmp_path):
    """The README's main job, scaled down: real Chromium, real MiniWoB++, real SmolLM2; with
    --guided-json, so the local guided decoding runs in a real team too."""
    cmd = [sys.executable, "-m", "collabui.cli", "run", "--env", "miniwob/click-button", "--agents", "2",
           "--rounds", "2", "--episodes", "1", "--max-steps", "1", "--max-new-tokens", "48",
           "--trace-dir", str(tmp_path), "--guided-json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "2-round action matrix" in proc.stdout and "vote:" in proc.stdout and "summary" in proc.stdout
    (trace_file,) = tmp_path.glob("*.jsonl")
    trace = read_trace(trace_file)
    assert trace.complete and len(trace.steps) == 1
    assert len(trace.steps[0]["proposals"]) == 2 and len(trace.steps[0]["proposals"][0]) == 2
    proposals = [p for row in trace.steps[0]["proposals"] for p in row]
    assert all(p["raw"].startswith('{"action":{"action":"') for p in proposals), [p["raw"] for p in proposals]
    assert all(p["parse_error"] is None for p in proposals), [p["raw"] for p in proposals]


def test_devices_lists_phones(capsys, monkeypatch):
    import collabui.devices.phones as phones

    monkeypatch.setattr(phones, "list_phones", lambda: [phones.PhoneInfo("emulator-5554", "Pixel 7", "device")])
    code, out, _ = _run(capsys, "devices")
    assert code == 0 and out.split() == ["emulator-5554", "device", "Pixel", "7"]
    monkeypatch.setattr(phones, "list_phones", lambda: [])
    code, out, _ = _run(capsys, "devices")
    assert code == 0 and "no phone attached" in out


def test_adapters_is_a_trained_teams_folder(tmp_path, capsys):
    """`run --adapters FOLDER`: agent i uses FOLDER/agent{i}/ (None without one); explicit names
    are --adapter-names; a missing folder or a baseline with adapters is one line."""
    for i in (0, 2):
        (tmp_path / f"agent{i}").mkdir()
        (tmp_path / f"agent{i}" / "adapter_config.json").write_text("{}")
    base = ["run", "--env", "miniwob/click-button", "--agents", "3"]
    cfg = team_config(build_parser().parse_args([*base, "--adapters", str(tmp_path)]))
    assert cfg.adapters == ("agent0", None, "agent2")
    named = team_config(build_parser().parse_args([*base, "--adapter-names", "a,none,b"]))
    assert named.adapters == ("a", None, "b")
    for argv, message in (([*base, "--adapters", str(tmp_path), "--adapter-names", "a,b,c"], "not both"),
                          ([*base, "--adapters", str(tmp_path / "missing")], "no such folder"),
                          ([*base, "--adapters", str(tmp_path), "--model", "lexical"], "would be ignored by the 'lexical' baseline")):
        code, _, err = _run(capsys, *argv)
        assert code == 2 and len(err.strip().splitlines()) == 1 and message in err, err
