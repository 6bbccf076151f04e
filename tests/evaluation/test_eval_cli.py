"""`collabui eval`: parser, errors, compare, and miniwob end to end with a baseline in Chromium."""

import json

import pytest

from collabui.cli import build_parser, main
from collabui.errors import ConfigError
from collabui.evaluation.stats import rate_entry


def _results(label, wins):
    per_task = {"click-button": wins[0], "click-test": wins[1]}
    return {
        "schema": "collabui.eval", "version": 1, "harness": "miniwob",
        "system": {"model": "m", "n_agents": 1, "rounds": 1, "topology": "random", "label": label},
        "data": {}, "overall": {"success_rate": rate_entry(sum(per_task.values()), 4)},
        "breakdown": {"per_task": {t: {"success_rate": rate_entry(w, 2)} for t, w in per_task.items()}},
        "counts": {}, "started": None, "seconds": 0.0, "command": None,
    }


def test_eval_subcommands_are_registered():
    parser = build_parser()
    args = parser.parse_args(["eval", "miniwob", "--out", "o", "--tasks", "easy", "--concurrency", "2",
                              "--agents", "4", "--rounds", "3", "--mobile", "--max-steps", "5"])
    assert (args.command, args.eval_command, args.concurrency, args.n_agents, args.mobile) == ("eval", "miniwob", 2, 4, True)
    assert parser.parse_args(["eval", "compare", "a.json", "b.json"]).eval_command == "compare"


def test_miniwob_takes_team_options_and_guided_json(tmp_path):
    from collabui.cli.eval import miniwob_command, team_options
    from collabui.evaluation.miniwob import MiniWoBEvalConfig

    argv = ["eval", "miniwob", "--out", "o", "--temperatures", "0.2,0.4", "--max-observation-chars", "3000",
            "--screenshots", "--guided-json", "--prompt-style", "compact"]
    args = build_parser().parse_args(argv)
    assert team_options(args) == {"temperatures": (0.2, 0.4), "max_observation_chars": 3000, "screenshots": True}
    assert args.guided_json is True
    command = miniwob_command(args)
    for part in ("--temperatures 0.2,0.4", "--max-observation-chars 3000", "--screenshots", "--guided-json",
                 "--prompt-style compact"):
        assert part in command
    defaults = build_parser().parse_args(["eval", "miniwob", "--out", "o"])
    # Screenshots are on by default for eval episodes (the library's default is off).
    assert team_options(defaults) == {"screenshots": True} and defaults.guided_json is False
    assert "--screenshots" in miniwob_command(defaults)
    off = build_parser().parse_args(["eval", "miniwob", "--out", "o", "--no-screenshots"])
    assert team_options(off) == {} and miniwob_command(off).endswith("--out o --no-screenshots")
    assert build_parser().parse_args(miniwob_command(off).split()[1:]).screenshots is False
    with pytest.raises(SystemExit):  # --mobile decides the action space
        build_parser().parse_args(["eval", "miniwob", "--out", "o", "--action-space", "mobile"])
    config = MiniWoBEvalConfig(model="smollm2", n_agents=2, team_options=team_options(args))
    assert config.team_options["temperatures"] == (0.2, 0.4)
    with pytest.raises(ConfigError, match="temperatures has 2 values for 4 agents"):
        MiniWoBEvalConfig(model="smollm2", team_options=team_options(args))


@pytest.mark.parametrize(("options", "match"), [
    ({"n_agents": 2}, "not TeamConfig fields this evaluation takes"),
    ({"vote": "x"}, "not TeamConfig fields"),
    ({"max_observation_chars": 0}, "max_observation_chars"),
])
def test_bad_team_options_fail_before_anything_starts(options, match):
    from collabui.evaluation.miniwob import MiniWoBEvalConfig

    with pytest.raises(ConfigError, match=match):
        MiniWoBEvalConfig(model="random", team_options=options)


def test_compare_prints_deltas_and_writes_markdown(tmp_path, capsys):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(_results("single agent", (1, 0))))
    b.write_text(json.dumps(_results("team 4x3", (2, 1))))
    assert main(["eval", "compare", str(a), str(b), "--out", str(tmp_path / "d.md"),
                 "--plot", str(tmp_path / "ab.png")]) == 0
    assert (tmp_path / "ab.png").stat().st_size > 0
    out = capsys.readouterr().out
    assert "A = single agent" in out and "B = team 4x3" in out
    overall = next(line for line in out.splitlines() if line.startswith("overall"))
    assert overall.split() == ["overall", "overall", "success_rate", "0.250", "0.750", "+0.500", "4", "4"]
    assert "| per_task | click-test | success_rate | 0.000 | 0.500 | +0.500 | 2 | 2 |" in (tmp_path / "d.md").read_text()


def test_errors_are_one_line_with_exit_code_2(tmp_path, capsys):
    assert main(["eval", "compare", str(tmp_path / "nope.json"), str(tmp_path / "b.json")]) == 2
    assert capsys.readouterr().err.strip().count("\n") == 0
    assert main(["eval", "miniwob", "--tasks", "click-buton", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: unknown MiniWoB++ task 'click-buton'; did you mean 'click-button'")
    assert main(["eval", "miniwob", "--concurrency", "0", "--model", "random", "--out", str(tmp_path / "o")]) == 2
    assert "concurrency must be an integer >= 1" in capsys.readouterr().err


@pytest.mark.browser
def test_miniwob_end_to_end_with_a_baseline(tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["eval", "miniwob", "--tasks", "click-button,focus-text", "--episodes", "1", "--model", "random:1",
            "--max-steps", "2", "--concurrency", "2", "--out", str(out), "--plot", "--screenshots"]
    assert main(argv) == 0
    results = json.loads((out / "results.json").read_text())
    assert results["system"]["label"] == "random:1 single agent"
    assert results["overall"]["success_rate"]["n"] == 2
    assert list(results["breakdown"]["per_task"]) == ["click-button", "focus-text"]
    assert results["command"].startswith("collabui eval miniwob --tasks click-button,focus-text --episodes 1")
    assert (out / "summary.md").exists() and (out / "plot.png").stat().st_size > 0
    assert len(list((out / "traces").glob("*.jsonl"))) == 2
    assert results["system"]["team_options"] == {"screenshots": True}
    assert list((out / "traces").rglob("*.png")), "--screenshots reaches the browsers"
    err = capsys.readouterr().err
    assert "[miniwob 1/2]" in err and "[miniwob 2/2]" in err and "eval miniwob: success" in err
    # resumed: nothing reruns, the same numbers come back
    assert main(argv) == 0
    again = json.loads((out / "results.json").read_text())
    assert again["overall"] == results["overall"]
    assert "[miniwob" not in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["eval", "--help"], ["eval", "miniwob", "--help"], ["eval", "compare", "--help"]])
def test_help_renders(argv, capsys):
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 0 and "usage: collabui eval" in capsys.readouterr().out


def test_page_flags_reach_the_config_and_the_command(capsys):
    from collabui.cli.eval import miniwob_command
    from collabui.cli.run import page_options

    argv = ["eval", "miniwob", "--out", "o", "--shuffle-elements", "--element-format", "text-first"]
    args = build_parser().parse_args(argv)
    assert (args.shuffle_elements, args.element_format) == (True, "text-first")
    command = miniwob_command(args)
    assert "--element-format text-first" in command and "--shuffle-elements" in command
    defaults = miniwob_command(build_parser().parse_args(["eval", "miniwob", "--out", "o"]))
    assert "--element-format" not in defaults and "--shuffle-elements" not in defaults
    with pytest.raises(SystemExit):
        build_parser().parse_args(["eval", "miniwob", "--out", "o", "--element-format", "xml"])
    assert "html" in capsys.readouterr().err  # argparse names the valid choices
    assert main(["eval", "miniwob", "--mobile", "--shuffle-elements", "--model", "random",
                 "--out", "o"]) == 2
    assert "apply to web pages" in capsys.readouterr().err
    # `collabui run` takes the same flags
    run = build_parser().parse_args(["run", "--env", "miniwob/click-button", "--shuffle-elements",
                                     "--element-format", "text-first"])
    assert page_options(run) == {"element_format": "text-first", "shuffle_elements": True}
    phone = build_parser().parse_args(["run", "--env", "android", "--task", "t", "--shuffle-elements"])
    with pytest.raises(ConfigError, match="apply to web pages"):
        page_options(phone)
