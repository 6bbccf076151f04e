"""Runs that cannot work end with one ``error:`` line and a non-zero exit, before any work:
bad output paths, cut-short run folders, flags that would be ignored, episodes that cannot
start; output piped to ``head`` ends quietly."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from collabui.cli import main

pytestmark = pytest.mark.faults


def _one_error_line(capsys: pytest.CaptureFixture[str], argv: list[str], *fragments: str) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    for fragment in fragments:
        assert fragment in err[0], err[0]


def test_output_paths_are_checked_first(tmp_path, capsys):
    a_file = tmp_path / "file"
    a_file.write_text("x")
    miniwob = ["eval", "miniwob", "--tasks", "click-button", "--model", "lexical", "--out"]
    _one_error_line(capsys, [*miniwob, str(a_file / "run")], f"--out {a_file / 'run'}", "Not a directory")
    _one_error_line(capsys, [*miniwob, str(a_file)], "is a file, not a folder")
    _one_error_line(capsys, [*miniwob, "/proc/1/run"], "cannot write there")  # unwritable, even as root
    _one_error_line(capsys, ["run", "--env", "miniwob/click-button", "--model", "lexical", "--trace-dir",
                             str(a_file / "t")], "--trace-dir")
    _one_error_line(capsys, ["eval", "autowebbench", "--data", "x.json", "--model", "lexical", "--out",
                             str(a_file / "a")], "--out")
    _one_error_line(capsys, ["eval", "compare", "a.json", "b.json", "--out", str(tmp_path)], "is a folder")
    _one_error_line(capsys, ["view", "t.jsonl", "--out", str(a_file / "t.html")], "--out")


def test_a_refused_command_leaves_no_folder_behind(tmp_path, capsys):
    """The output check creates the folder only to try writing in it: refused afterwards for
    another reason, the command leaves nothing (an existing folder stays)."""
    out = tmp_path / "new" / "run"
    _one_error_line(capsys, ["eval", "miniwob", "--mobile", "--shuffle-elements", "--model", "random",
                             "--out", str(out)], "apply to web pages")
    assert not (tmp_path / "new").exists()
    kept = tmp_path / "kept"
    kept.mkdir()
    _one_error_line(capsys, ["eval", "miniwob", "--mobile", "--shuffle-elements", "--model", "random",
                             "--out", str(kept)], "apply to web pages")
    assert kept.is_dir()
    _one_error_line(capsys, ["view", "missing.jsonl", "--out", str(tmp_path / "views" / "t.html")])
    assert not (tmp_path / "views").exists()


def test_cut_short_run_json_is_one_line(tmp_path, capsys):
    """An eval folder whose run.json a crash cut short: refused with the fix, nothing run."""
    out = tmp_path / "eval"
    out.mkdir()
    (out / "run.json").write_text(json.dumps({"model": "lexical", "tasks": ["click-button"]})[:20])
    _one_error_line(capsys, ["eval", "miniwob", "--tasks", "click-button", "--model", "lexical", "--out", str(out)],
                    "run.json is cut short", "delete it")
    awb = tmp_path / "awb"
    awb.mkdir()
    data = tmp_path / "records.json"
    data.write_text(json.dumps([{"source": "<html><button>ok</button></html>", "target": "click('ok')"}]))
    (awb / "run.json").write_text('{"model": "lex')
    _one_error_line(capsys, ["eval", "autowebbench", "--data", str(data), "--model", "lexical", "--out", str(awb)],
                    "run.json is cut short")


@pytest.mark.browser
def test_cut_short_results_and_manifest_resume(tmp_path, capsys):
    """results.json and episodes.jsonl cut short by a crash: the eval resumes (the torn episode
    runs again) and rewrites them whole."""
    out = tmp_path / "eval"
    argv = ["eval", "miniwob", "--tasks", "click-button", "--episodes", "2", "--model", "lexical", "--out", str(out)]
    assert main(argv) == 0
    manifest = (out / "episodes.jsonl").read_text()
    (out / "episodes.jsonl").write_text(manifest[: len(manifest) - 40])
    (out / "results.json").write_text((out / "results.json").read_text()[:50])
    capsys.readouterr()
    assert main(argv) == 0
    results = json.loads((out / "results.json").read_text())
    assert results["overall"]["success_rate"]["n"] == 2
    assert len((out / "episodes.jsonl").read_text().strip().splitlines()) >= 2


@pytest.mark.parametrize(("argv", "fragment"), [
    (["--model", "lexical", "--guided-json"], "--guided-json would be ignored by the 'lexical' baseline"),
    (["--model", "random:3", "--adapter-names", "a,b,c,d"], "--adapter-names would be ignored"),
    (["--model", "lexical", "--serial", "X"], "--serial would be ignored: phones only"),
    (["--model", "lexical", "--app-allowlist", "Settings"], "--app-allowlist would be ignored"),
])
def test_flags_that_would_be_ignored_are_errors(capsys, argv, fragment):
    _one_error_line(capsys, ["run", "--env", "miniwob/click-button", *argv], fragment)


def test_ignored_flags_in_eval_and_url_runs(tmp_path, capsys):
    _one_error_line(capsys, ["run", "--url", "http://127.0.0.1:9/", "--task", "t", "--model", "lexical",
                             "--app-allowlist", "Chrome"], "--app-allowlist would be ignored", "--url")
    _one_error_line(capsys, ["eval", "miniwob", "--tasks", "click-button", "--model", "random", "--guided-json",
                             "--out", str(tmp_path / "e")], "--guided-json would be ignored")
    _one_error_line(capsys, ["run", "--env", "miniwob/click-button", "--model", "lexical", "--adapters",
                             str(tmp_path)], "--adapters would be ignored by the 'lexical' baseline")
    _one_error_line(capsys, ["eval", "miniwob", "--tasks", "click-button", "--model", "random", "--adapters",
                             str(tmp_path), "--out", str(tmp_path / "e")], "--adapters would be ignored")


@pytest.mark.parametrize(("argv", "fragment"), [
    (["serve", "--setup", "--port", "8001"], "--port would be ignored with --setup (it only creates the vLLM venv)"),
    (["serve", "--setup", "--model", "hf:x", "--enforce-eager", "--log-file", "l"],
     "--model and --log-file and --enforce-eager would be ignored with --setup"),
    (["serve", "--flavor", "cpu"], "--flavor would be ignored without --setup"),
    (["serve", "--backend", "llamacpp", "--enforce-eager", "--venv", "v"],
     "--venv and --enforce-eager would be ignored with --backend llamacpp (they are vLLM's)"),
    (["serve", "--threads", "2"], "--threads would be ignored with vLLM (they are llama.cpp's)"),
    (["serve", "--setup", "--backend", "llamacpp"], "--backend would be ignored with --setup"),
    (["serve", "--backend", "llamacpp", "--adapters", "a0=x"], "--adapters are served by name on vLLM"),
    (["bench", "--backend", "local", "--episodes", "2", "--enforce-eager"],
     "--episodes and --enforce-eager would be ignored with --backend local"),
    (["bench", "--episodes", "0", "--browsers", "3"], "--browsers would be ignored with --episodes 0"),
    (["bench", "--backend", "local", "--max-steps", "5"], "--max-steps would be ignored with --backend local"),
    (["train", "sft", "--pairs", "p.jsonl", "--out", "OUT", "--merge"], "--merge would be ignored with --pairs"),
    (["train", "pairs", "--traces", "t", "--labels", "l", "--adversary", "own", "--seed", "3", "--out", "OUT/p.jsonl"],
     "--seed would be ignored with --adversary own"),
    (["train", "pairs", "--traces", "t", "--labels", "l", "--right-pairs", "--out", "OUT/p.jsonl"],
     "--right-pairs would be ignored without --adversary own"),
])
def test_train_serve_bench_flags_that_would_be_ignored_are_errors(tmp_path, capsys, argv, fragment):
    """Found by auditing train, serve and bench: each is refused before anything starts (no
    vLLM, no model, no browser: a wrong check would start one and not answer with exit 2)."""
    _one_error_line(capsys, [a.replace("OUT", str(tmp_path / "out")) for a in argv], fragment)


@pytest.mark.parametrize("argv", [["serve", "--setup", "--flavor", "cpu", "--venv", "v"], ["serve", "--port", "8001"],
                                  ["serve", "--backend", "llamacpp", "--threads", "1", "--parallel", "2"],
                                  ["bench", "--backend", "vllm", "--episodes", "2", "--browsers", "3"],
                                  ["bench", "--backend", "local", "--agents", "2"]])
def test_flags_that_are_used_pass_the_checks(argv):
    from collabui.cli import bench, build_parser, serve

    args = build_parser().parse_args(argv)
    if args.command == "serve":
        serve._refuse_ignored_flags(args)
    else:
        from collabui.bench import BenchSettings

        bench._refuse_ignored_flags(args, BenchSettings)


@pytest.mark.browser
def test_unreachable_url_exits_non_zero(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "collabui.cli", "run", "--url", "http://127.0.0.1:9/",
                           "--task", "click ok", "--model", "lexical", "--quiet", "--episodes", "2",
                           "--trace-dir", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: no episode could start (2/2"), err
    assert "http://127.0.0.1:9/" in err[0]


def test_android_without_phone_exits_non_zero(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "collabui.cli", "run", "--env", "android", "--serial",
                           "no-such-phone", "--task", "open settings", "--model", "lexical", "--quiet",
                           "--trace-dir", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "no episode could start" in errors[0] and "no-such-phone" in errors[0], proc.stderr


@pytest.mark.parametrize("command", [["envs"], ["run", "--help"]])
def test_output_piped_to_head_ends_quietly(command):
    """`collabui envs | head -1`: the reader leaves after one line; no traceback, exit 141."""
    proc = subprocess.Popen([sys.executable, "-m", "collabui.cli", *command], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline()
    proc.stdout.close()
    _, err = proc.communicate(timeout=120)
    assert err == b"", err.decode()
    assert proc.returncode in (0, 141)  # 0 only when everything fit in the pipe before it closed
