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


def test_miniwob_takes_team_flags_and_guided_json(tmp_path):
    from collabui.cli.eval import miniwob_command, miniwob_config

    argv = ["eval", "miniwob", "--out", "o", "--agents", "2", "--temperatures", "0.2,0.4",
            "--max-observation-chars", "3000", "--screenshots", "--guided-json", "--prompt-style", "compact"]
    config = miniwob_config(build_parser().parse_args(argv))
    team = config.team
    assert (team.n_agents, team.rounds, team.temperatures, team.max_observation_chars, team.screenshots) == \
        (2, 3, (0.2, 0.4), 3000, True)
    assert config.guided_json is True and team.prompt_style == "compact"
    command = miniwob_command(config, "o")
    for part in ("--agents 2 --rounds 3", "--temperatures 0.2,0.4", "--max-observation-chars 3000",
                 "--guided-json", "--prompt-style compact"):
        assert part in command
    assert miniwob_config(build_parser().parse_args(command.split()[1:])) == config  # the record reproduces it
    defaults = miniwob_config(build_parser().parse_args(["eval", "miniwob", "--out", "o"]))
    # Screenshots are on by default for eval episodes (the library's default is off).
    assert defaults.team.screenshots is True and defaults.guided_json is False
    assert "screenshots" not in miniwob_command(defaults, "o")
    off = miniwob_config(build_parser().parse_args(["eval", "miniwob", "--out", "o", "--no-screenshots"]))
    assert off.team.screenshots is False and "--no-screenshots" in miniwob_command(off, "o")
    assert build_parser().parse_args(miniwob_command(off, "o").split()[1:]).screenshots is False
    with pytest.raises(SystemExit):  # --mobile decides the action space
        build_parser().parse_args(["eval", "miniwob", "--out", "o", "--action-space", "mobile"])
    with pytest.raises(ConfigError, match="temperatures has 2 values for 4 agents"):
        miniwob_config(build_parser().parse_args(["eval", "miniwob", "--out", "o", "--temperatures", "0.2,0.4"]))


def test_baselines_default_to_one_agent_unless_told(tmp_path):
    from collabui.cli.eval import miniwob_config

    def team(*flags):
        t = miniwob_config(build_parser().parse_args(["eval", "miniwob", "--out", "o", *flags])).team
        return t.n_agents, t.rounds

    assert team("--model", "random:3") == (1, 1) and team("--model", "lexical", "--agents", "4") == (4, 1)
    assert team("--model", "smollm2") == (4, 3) and team("--model", "smollm2", "--rounds", "1") == (4, 1)


@pytest.mark.parametrize(("team", "match"), [
    ({"seed": None}, "team.seed must be an integer"),
    ({"action_space": "mobile"}, "contradicts mobile=False"),
    ({"max_observation_chars": 0}, "max_observation_chars"),
])
def test_bad_team_settings_fail_before_anything_starts(team, match):
    from collabui.config import TeamConfig
    from collabui.evaluation.miniwob import MiniWoBEvalConfig

    with pytest.raises(ConfigError, match=match):
        MiniWoBEvalConfig(model="random", team=TeamConfig(**team))


def test_from_repeats_a_stored_run_and_typed_flags_override(tmp_path, monkeypatch):
    """`--from RUN_DIR` runs the config stored in the folder; flags typed with it change only
    their own settings (a flag typed at its default value still counts)."""
    import collabui.evaluation.miniwob as miniwob
    from collabui.cli.eval import miniwob_config
    from collabui.config import TeamConfig
    from collabui.evaluation.miniwob import MiniWoBEvalConfig, load_run_config
    from collabui.evaluation.miniwob_folder import check_out_dir

    stored = MiniWoBEvalConfig(tasks="click-button,focus-text", episodes=2, model="lexical", shuffle_elements=True,
                               team=TeamConfig(n_agents=2, rounds=1, topology="chain", seed=7, max_steps=4,
                                               temperatures=(0.0, 0.5), screenshots=True))
    run = tmp_path / "run"
    check_out_dir(run, stored)
    assert load_run_config(run) == stored

    def parsed(*flags):
        return miniwob_config(build_parser().parse_args(["eval", "miniwob", "--from", str(run), *flags]))

    assert parsed() == stored
    changed = parsed("--max-steps", "10", "--episodes", "5", "--no-screenshots")  # 10 is the flag's default
    assert (changed.team.max_steps, changed.episodes, changed.team.screenshots) == (10, 5, False)
    assert changed.team.temperatures == (0.0, 0.5) and changed.tasks == stored.tasks and changed.shuffle_elements
    with pytest.raises(ConfigError, match="temperatures has 2 values for 3 agents"):
        parsed("--agents", "3")  # the stored per-agent temperatures must be given again
    # end to end through main: the repeat runs the stored config into the folder (or --out)
    seen = []
    monkeypatch.setattr(miniwob, "evaluate_miniwob", lambda config, out, **kw: seen.append((config, str(out), kw))
                        or {"counts": {}})
    assert main(["eval", "miniwob", "--from", str(run), "--rounds", "2"]) == 0
    config, out, kw = seen[-1]
    assert out == str(run) and config.team.rounds == 2 and config.team.n_agents == 2
    assert kw["command"].startswith("collabui eval miniwob --tasks click-button,focus-text --episodes 2 "
                                    "--model lexical --agents 2 --rounds 2 --topology chain --seed 7")
    assert main(["eval", "miniwob", "--from", str(run), "--out", str(tmp_path / "again")]) == 0
    assert seen[-1][0] == stored and seen[-1][1] == str(tmp_path / "again")


def test_from_needs_a_run_folder_and_out_or_from(tmp_path, capsys):
    assert main(["eval", "miniwob", "--from", str(tmp_path)]) == 2
    assert "is not an evaluation run folder" in capsys.readouterr().err
    assert main(["eval", "miniwob", "--model", "random"]) == 2
    assert "give --out RUN_DIR" in capsys.readouterr().err


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


def _run_folder(folder, label, outcomes):
    """A run folder: results.json and episodes.jsonl with ``outcomes`` {(task, seed): success}."""
    folder.mkdir()
    (folder / "results.json").write_text(json.dumps(_results(label, (1, 0))))  # its own figures do not matter here
    (folder / "episodes.jsonl").write_text("".join(
        json.dumps({"task": t, "seed": s, "episode_id": f"{t}-{s}", "success": ok}) + "\n"
        for (t, s), ok in outcomes.items()))
    return folder / "results.json"


def test_compare_of_two_run_folders_pairs_their_episodes(tmp_path, capsys):
    """Same (task, seed) episodes: both, only A, only B, neither, and the exact McNemar p."""
    from collabui.evaluation.paired import mcnemar_exact

    seeds = range(20)
    a = _run_folder(tmp_path / "a", "lexical", {("click-test", s): s < 4 for s in seeds})
    b = _run_folder(tmp_path / "b", "trained", {**{("click-test", s): 2 <= s < 14 for s in seeds},
                                                ("click-test", 99): True})  # only B ran it: left out
    assert main(["eval", "compare", str(a), str(b), "--out", str(tmp_path / "c.json")]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("all"))
    # A solves 0-3, B 2-13: both 2, only A 2, only B 10, neither 6
    assert row.split() == ["all", "20", "4", "12", "2", "2", "10", "6", f"{mcnemar_exact(2, 10):.4f}"]
    assert "1 episodes only one run has were left out" in out
    assert json.loads((tmp_path / "c.json").read_text())["paired"]["only_b"] == 10
    assert 0.03 < mcnemar_exact(2, 10) < 0.04 and mcnemar_exact(32, 11) == 0.0019  # binomial tails
    assert mcnemar_exact(0, 0) == 1.0 and mcnemar_exact(3, 3) == 1.0
    # The run folders themselves (what one has at hand) pair the same way.
    assert main(["eval", "compare", str(a.parent), str(b.parent)]) == 0
    assert row in capsys.readouterr().out
    (tmp_path / "empty").mkdir()
    assert main(["eval", "compare", str(a.parent), str(tmp_path / "empty")]) == 2
    err = capsys.readouterr().err.strip()
    assert "is a folder without results.json" in err and err.count("\n") == 0


def test_compare_also_pools_the_paired_episodes_of_more_runs(tmp_path, capsys):
    """--also A2 B2: the same two systems on another eval seed join one paired table and p-value;
    a run given twice on one side is refused before any output, one line."""
    from collabui.evaluation.paired import mcnemar_exact

    a = _run_folder(tmp_path / "a", "sft", {("click-test", s): s < 5 for s in range(10)})
    b = _run_folder(tmp_path / "b", "marl", {("click-test", s): s < 7 for s in range(10)})  # only B: 5, 6
    a2 = _run_folder(tmp_path / "a2", "sft", {("click-test", s): s % 2 == 0 for s in range(100, 110)})
    b2 = _run_folder(tmp_path / "b2", "marl", {("click-test", s): s < 104 for s in range(100, 110)})
    assert main(["eval", "compare", str(a), str(b), "--also", str(a2.parent), str(b2.parent)]) == 0
    out = capsys.readouterr().out
    assert "(pooled over 2 pairs of runs)" in out
    row = next(line for line in out.splitlines() if line.startswith("all"))
    # seed 2: A solves 100, 102, ..., 108, B 100-103: both 2, only A 3, only B 2, neither 3
    assert row.split() == ["all", "20", "10", "11", "7", "3", "4", "6", f"{mcnemar_exact(3, 4):.4f}"]
    assert main(["eval", "compare", str(a), str(b), "--also", str(a), str(b2)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert "both hold episode click-test seed 0: give each run once" in captured.err
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "results.json").write_text(json.dumps(_results("no episodes", (1, 0))))
    assert main(["eval", "compare", str(a), str(b), "--also", str(tmp_path / "c"), str(b2)]) == 2
    assert "--also pools paired episodes, but a folder has no episodes.jsonl (MiniWoB++) or" in capsys.readouterr().err


def test_compare_plot_paired_draws_the_pooled_discordant_episodes(tmp_path, capsys, monkeypatch):
    """--plot-paired: one bar pair per task and "all", drawn from the pooled counts; results files
    without episodes to pair are a one-line error, nothing drawn."""
    import collabui.evaluation.paired as paired

    a = _run_folder(tmp_path / "a", "sft", {("click-test", s): s < 5 for s in range(10)})
    b = _run_folder(tmp_path / "b", "marl", {("click-test", s): s < 7 for s in range(10)})
    a2 = _run_folder(tmp_path / "a2", "sft", {("click-test", s): s % 2 == 0 for s in range(100, 110)})
    b2 = _run_folder(tmp_path / "b2", "marl", {("click-test", s): s < 104 for s in range(100, 110)})
    drawn = []
    real = paired.plot_paired
    monkeypatch.setattr(paired, "plot_paired", lambda found, path, **kw: drawn.append(found) or real(found, path, **kw))
    png = tmp_path / "fig" / "paired.png"
    assert main(["eval", "compare", str(a), str(b), "--also", str(a2), str(b2), "--plot-paired", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5_000
    assert [(d["episodes"], d["only_a"], d["only_b"]) for d in drawn] == [(20, 3, 4)]  # both seeds, not the first
    capsys.readouterr()
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "results.json").write_text(json.dumps(_results("no episodes", (1, 0))))
    assert main(["eval", "compare", str(tmp_path / "c"), str(b), "--plot-paired", str(tmp_path / "x.png")]) == 2
    assert "--plot-paired draws paired episodes, but a folder has no episodes.jsonl (MiniWoB++) or" in capsys.readouterr().err
    assert not (tmp_path / "x.png").exists()


@pytest.mark.parametrize("tasks", [1, 8, 20])
def test_plot_paired_puts_its_legend_under_the_x_label_whatever_the_rows(tasks):
    """The legend sits below the x label and inside the figure for a short and a tall figure alike
    (it is placed a fixed distance in points under the axes, not a fraction of their height)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from collabui.evaluation.paired import _draw_paired

    counts = {"both": 3, "neither": 2, "only_a": 1, "only_b": 4, "episodes": 10, "p_value": 0.375}
    found = {**counts, "per_task": {f"task-{i}": counts for i in range(tasks)}}
    fig, ax = plt.subplots(figsize=(8.0, 1.8 + 0.42 * (tasks + 1)))
    try:
        legend = _draw_paired(fig, ax, found, "runs/a/results.json", "runs/b/results.json")
        fig.tight_layout()
        fig.canvas.draw()
        box, label = legend.get_window_extent(), ax.xaxis.label.get_window_extent()
        assert box.y1 <= label.y0 and box.y0 >= 0  # under the label, not cut off
        assert box.x0 >= 0 and box.x1 <= fig.bbox.width
    finally:
        plt.close(fig)


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
    assert results["system"]["team"]["screenshots"] is True and results["system"]["team"]["n_agents"] == 1
    from collabui.evaluation.miniwob import load_run_config

    assert load_run_config(out).team.max_steps == 2 and load_run_config(out).concurrency == 2
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
    from collabui.cli.eval import miniwob_command, miniwob_config
    from collabui.cli.run import page_options

    argv = ["eval", "miniwob", "--out", "o", "--shuffle-elements", "--element-format", "text-first"]
    args = build_parser().parse_args(argv)
    assert (args.shuffle_elements, args.element_format) == (True, "text-first")
    command = miniwob_command(miniwob_config(args), "o")
    assert "--element-format text-first" in command and "--shuffle-elements" in command
    # the default (auto) resolves to html for smollm2, written as such
    defaults = miniwob_command(miniwob_config(build_parser().parse_args(["eval", "miniwob", "--out", "o"])), "o")
    assert "--element-format html" in defaults and "--shuffle-elements" not in defaults
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
