"""AutoWebBench harness: reading records, scoring, resuming, the CLI, and real baseline runs."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from collabui.actions import Unknown
from collabui.actions.web import Click, Finish, Hover, ScrollPage, TypeString
from collabui.cli import main
from collabui.devices.simplify import flat_elements
from collabui.errors import ConfigError, ModelError
from collabui.evaluation.autowebbench import (
    PREDICTIONS_FILE,
    evaluate_autowebbench,
    load_records,
    parse_record,
    parse_source,
    score_prediction,
)
from collabui.models import load_model
from collabui.models.fake import ScriptedChatModel
from collabui.prompts import render_observation
from collabui.team import CollabAgentTeam
from tests.shared_data import AUTOWEBBENCH

EN, ZH = AUTOWEBBENCH / "en" / "ind.json", AUTOWEBBENCH / "zh" / "ind.json"

_TEMPLATE = """{page}

You are a helpful assistant that can assist with web navigation tasks.
#Provided functions:
def click(element_id: str) -> None:
    ...

#Previous commands: {history}

#Window tabs: 1. Default 2. Results <-- current tab

#Current viewport (pages): 0 / 2.0

#Task: {task}

You should output one command to interact to the currrent webpage.
You should add a brief comment to your command to explain your reasoning and thinking process."""
PAGE = "< <a[A]| Home> <input[B]| placeholder: Search> <button[C]| Go> >"


def _record(target: str, task: str = "Search for cats", history: str = "None") -> dict[str, str]:
    return {"source": _TEMPLATE.format(page=PAGE, history=history, task=task), "target": target}


def _team(answers, n: int = 1) -> CollabAgentTeam:
    model = answers if not isinstance(answers, list) else ScriptedChatModel(answers, cycle=True)
    return CollabAgentTeam(model, n_agents=n, rounds=1, topology="independent")


def _write(tmp_path: Path, records) -> Path:
    path = tmp_path / "data.json"
    path.write_text(json.dumps(records, ensure_ascii=False), encoding="utf-8")
    return path


# --------------------------------------------------------------------------- reading


def test_parse_english_source() -> None:
    raw = load_records(EN)
    task, history, obs = parse_source(raw[1]["source"])
    assert task == "Sign up for Google ." and history == ("click('SD')",)
    assert obs.text.startswith("< <img| >") and obs.text.endswith("<a[M]| Forgot password> > > >")
    assert "You are a helpful" not in obs.text and obs.task == task
    assert obs.tabs == ("Default",) and obs.current_tab == 0 and obs.viewport == "0 / 1.0"
    rendered = render_observation(obs)
    assert rendered.startswith("Viewport (pages): 0 / 1.0\n< <img| >")
    long = parse_record(7, raw[7])  # three previous commands, HTML segments dropped
    assert long.history == ("click('JG')", "click('SJG')", "scroll_page('down')")


def test_parse_chinese_source() -> None:
    raw = load_records(ZH)
    task, history, obs = parse_source(raw[5]["source"])
    assert task == "查询马来西亚本科留学的实际申请条件。" and history == ("click('DHC')",)
    assert "<input[DHC]| 请输入您要查询的关键字>" in obs.text
    rec = parse_record(5, raw[5])
    assert rec.target == TypeString("DHC", "马来西亚本科留学的实际申请条件", False)
    later = parse_record(8, raw[8])  # Chinese text inside a previous command survives
    assert later.history[1] == "type_string('DHC', '马来西亚本科留学的实际申请条件', False)"


def test_handmade_record_with_tabs_and_history() -> None:
    rec = parse_record(0, _record("click('C')", history=" click('A') #HTML Segment: <a[A]| Home>\n"
                                                        "type_string('B', 'cats', False) #HTML Segment: <input[B]| >"))
    assert rec.history == ("click('A')", "type_string('B', 'cats', False)")
    assert rec.observation.tabs == ("Default", "Results") and rec.observation.current_tab == 1
    assert rec.observation.text == PAGE and rec.task == "Search for cats" and rec.target == Click("C")
    assert "Tabs: 0. Default, 1. Results (current)" in render_observation(rec.observation)


def test_text_first_pages_keep_every_element_and_its_id() -> None:
    rec = parse_record(0, _record("click('C')"), "text-first")
    assert rec.observation.text == 'a "Home" [A]\ninput "placeholder: Search" [B]\nbutton "Go" [C]'
    assert [e["id"] for e in flat_elements(rec.observation.extra["tree"])] == ["A", "B", "C"]
    assert rec.target == Click("C") and rec.observation.tabs == ("Default", "Results")
    for k, raw in enumerate(load_records(EN)[:40]):  # real pages: the same ids, in fewer characters
        html, text = parse_record(k, raw), parse_record(k, raw, "text-first")
        assert re.findall(r"\[([A-Z]+)\]\|", html.observation.text) == re.findall(
            r"\[([A-Z]+)\]$", text.observation.text, re.M)
        assert len(text.observation.text) < len(html.observation.text) and text.task == html.task


def test_evaluate_in_text_first_shows_the_team_text_first_pages(tmp_path: Path) -> None:
    model = ScriptedChatModel(['Action: {"action": "click", "element_id": "C"}'], cycle=True)
    results = evaluate_autowebbench(_write(tmp_path, [_record("click('C')")]), _team(model), tmp_path / "o",
                                    system={"model": "m"}, progress=False, element_format="text-first")
    assert 'button "Go" [C]' in model.requests[0].messages[-1]["content"]
    assert "<button[C]|" not in model.requests[0].messages[-1]["content"]
    assert results["overall"]["ssr_published"]["successes"] == 1
    with pytest.raises(ConfigError, match="element_format must be one of"):
        evaluate_autowebbench(_write(tmp_path, [_record("click('C')")]), _team(model), tmp_path / "p",
                              progress=False, element_format="markdown")


def test_every_target_parses_and_published_counts() -> None:
    for path, element_records, kinds in ((EN, 210, {"click": 183, "finish": 79, "scroll_page": 38, "go": 16,
                                                    "hover": 16, "type_string": 11, "user_input": 6}),
                                         (ZH, 238, {"click": 221, "finish": 72, "scroll_page": 42, "go": 34,
                                                    "type_string": 14, "user_input": 6, "hover": 3})):
        records = [parse_record(k, r) for k, r in enumerate(load_records(path))]
        assert not [r.target_raw for r in records if isinstance(r.target, Unknown)]
        assert sum(r.on_element for r in records) == element_records
        assert Counter(r.kind for r in records) == kinds


@pytest.mark.parametrize("content,message", [
    (None, "not found"), ('{"source": "x"}', "non-empty JSON list"), ("[1, 2]", "record 0"),
    ("not json", "not valid UTF-8 JSON"), ('[{"source": "no task here", "target": "finish()"}]', None),
])
def test_bad_data_is_one_line_config_error(tmp_path: Path, content, message) -> None:
    path = tmp_path / "d.json"
    if content is not None:
        path.write_text(content, encoding="utf-8")
    if message is None:  # loads, but the source is not an AutoWebBench prompt
        with pytest.raises(ConfigError, match="#Task:"):
            parse_record(0, load_records(path)[0])
        return
    with pytest.raises(ConfigError, match=message) as info:
        load_records(path)
    assert "\n" not in str(info.value)


# --------------------------------------------------------------------------- scoring


def test_score_prediction() -> None:
    target = TypeString("B", "Cats  ", False)
    assert score_prediction(TypeString("B", "cats", False), target) == {"ssr_published": True, "exact_match": True}
    assert score_prediction(TypeString("B", "dogs", False), target) == {"ssr_published": True, "exact_match": False}
    assert score_prediction(TypeString("B", "cats", True), target)["exact_match"] is False
    assert score_prediction(Click("B"), target) == {"ssr_published": False, "exact_match": False}
    assert score_prediction(TypeString("C", "cats", False), target)["ssr_published"] is False
    assert score_prediction(Unknown(raw="??"), target) == {"ssr_published": False, "exact_match": False}
    assert score_prediction(ScrollPage("down"), ScrollPage("down")) == {"ssr_published": None, "exact_match": True}
    assert score_prediction(Finish(), Finish("")) == {"ssr_published": None, "exact_match": True}
    assert score_prediction(Hover("A"), Finish())["exact_match"] is False


def test_evaluate_scores_handmade_predictions(tmp_path: Path) -> None:
    records = [_record("click('C')"), _record("click('C')"), _record("hover('A')"),
               _record("type_string('B', 'cats', False)"), _record("scroll_page('down')")]
    answers = ['Action: {"action": "click", "element_id": "C"}',  # correct
               'Action: {"action": "click", "element_id": "A"}',  # wrong element
               'Action: {"action": "click", "element_id": "A"}',  # wrong type (hover wanted)
               "I do not know",  # unparsable
               "Action: scroll_page('down')"]  # correct, not an element record
    results = evaluate_autowebbench(_write(tmp_path, records), _team(answers), tmp_path / "out",
                                    system={"model": "scripted"}, progress=False)
    overall = results["overall"]
    assert overall["ssr_published"]["successes"] == 1 and overall["ssr_published"]["n"] == 4
    assert overall["exact_match"]["successes"] == 2 and overall["exact_match"]["n"] == 5
    assert results["counts"] == {"records": 5, "element_records": 4, "unparsable": 1, "errors": 0}
    per = results["breakdown"]["per_action_type"]
    assert per["click"]["ssr_published"]["successes"] == 1 and per["click"]["ssr_published"]["n"] == 2
    assert per["hover"]["ssr_published"]["successes"] == 0 and "ssr_published" not in per["scroll_page"]
    assert results["schema"] == "collabui.eval" and results["harness"] == "autowebbench"
    assert set(results["overall"]["exact_match"]) == {"value", "n", "successes", "ci95"}
    saved = json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8"))
    assert saved["overall"] == overall and (tmp_path / "out" / "summary.md").read_text().count("click") >= 1


def test_resume_skips_finished_records_and_retries_errors(tmp_path: Path) -> None:
    data = _write(tmp_path, [_record("click('C')") for _ in range(6)])
    out = tmp_path / "out"
    first = ScriptedChatModel(['Action: {"action": "click", "element_id": "C"}'], cycle=True)
    evaluate_autowebbench(data, _team(first), out, limit=3, system={"model": "m"}, progress=False)
    assert len(first.requests) == 3

    def flaky(request):
        if "Search for cats" in request.messages[-1]["content"] and len(second.requests) == 1:
            raise ModelError("endpoint down; retry later")
        return 'Action: {"action": "click", "element_id": "C"}'

    second = ScriptedChatModel(flaky)
    earlier = json.loads((out / "results.json").read_text())
    (out / "results.json").write_text(json.dumps({**earlier, "seconds": 50.0}))
    results = evaluate_autowebbench(data, _team(second), out, system={"model": "m"}, progress=False)
    assert len(second.requests) == 3  # records 3..5 only
    # the wall time adds up over the invocations; the first start stays
    assert results["started"] == earlier["started"] and 50.0 <= results["seconds"] < 110.0
    assert results["counts"]["errors"] == 1 and results["overall"]["ssr_published"]["successes"] == 5
    third = ScriptedChatModel(['Action: {"action": "click", "element_id": "C"}'], cycle=True)
    results = evaluate_autowebbench(data, _team(third), out, system={"model": "m"}, progress=False)
    assert len(third.requests) == 1 and results["counts"]["errors"] == 0
    assert results["overall"]["ssr_published"]["successes"] == 6
    rows = [json.loads(line) for line in (out / PREDICTIONS_FILE).read_text().splitlines()]
    assert sorted({r["index"] for r in rows}) == list(range(6))
    with pytest.raises(ConfigError, match="another run"):
        evaluate_autowebbench(data, _team(third), out, system={"model": "other"}, progress=False)


def test_team_of_two_votes_and_records_proposals(tmp_path: Path) -> None:
    data = _write(tmp_path, [_record("click('C')")])
    answers = ['Action: {"action": "click", "element_id": "C"}', "Action: click('C')"]
    results = evaluate_autowebbench(data, _team(answers, n=2), tmp_path / "o", system={"model": "m"}, progress=False)
    row = json.loads((tmp_path / "o" / PREDICTIONS_FILE).read_text())
    assert row["proposals"] == [["click('C')"], ["click('C')"]] and row["prediction"] == {"action": "click", "element_id": "C"}
    assert results["overall"]["exact_match"]["value"] == 1.0


# --------------------------------------------------------------------------- real baselines and the CLI


@pytest.mark.parametrize("path", [EN, ZH], ids=["en", "zh"])
def test_baselines_on_real_records(tmp_path: Path, path: Path) -> None:
    scores = {}
    for spec in ("random", "lexical"):
        team = CollabAgentTeam(load_model(spec), n_agents=1, rounds=1, topology="independent")
        results = evaluate_autowebbench(path, team, tmp_path / spec, limit=20, system={"model": spec}, progress=False)
        assert results["counts"]["records"] == 20 and results["counts"]["unparsable"] == 0
        scores[spec] = results["overall"]["ssr_published"]["successes"]
    assert scores["lexical"] >= 1 and scores["lexical"] >= scores["random"]


def test_cli_runs_and_reports_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    assert main(["eval", "autowebbench", "--data", str(ZH), "--model", "lexical", "--limit", "2",
                 "--out", str(out), "--quiet"]) == 0
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert results["system"]["n_agents"] == 1 and results["data"]["language"] == "zh"
    assert results["data"]["records"] == 2 and "--limit 2" in results["command"]
    assert main(["eval", "autowebbench", "--data", str(tmp_path / "nope.json"), "--model", "lexical",
                 "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: AutoWebBench data file") and "--data" in err[-1]
    assert main(["eval", "autowebbench", "--data", str(ZH), "--model", "lexical", "--start", "999",
                 "--out", str(out)]) == 2


@pytest.mark.model
def test_smollm2_single_agent_on_three_records(tmp_path: Path) -> None:
    team = CollabAgentTeam(load_model("smollm2"), n_agents=1, rounds=1, topology="independent",
                           max_observation_chars=2000)
    results = evaluate_autowebbench(EN, team, tmp_path, limit=3, system={"model": "smollm2"}, progress=False)
    assert results["counts"]["records"] == 3 and results["counts"]["errors"] == 0
    rows = [json.loads(line) for line in (tmp_path / PREDICTIONS_FILE).read_text().splitlines()]
    assert all(r["raw"] for r in rows)  # the model answered every record
    assert results["overall"]["ssr_published"]["n"] == sum(r["ssr_published"] is not None for r in rows)


def test_cli_progress_lines_on_stderr_unless_quiet(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["eval", "autowebbench", "--data", str(ZH), "--model", "lexical", "--limit", "1"]
    assert main([*argv, "--out", str(tmp_path / "a")]) == 0
    out, err = capsys.readouterr()
    assert err.startswith("[1/1] record 0 ") and out.strip() == str(tmp_path / "a" / "summary.md")
    assert main([*argv, "--out", str(tmp_path / "b"), "--quiet"]) == 0
    assert capsys.readouterr().err == ""


def test_cli_element_format_is_recorded_and_resumes_only_in_it(tmp_path: Path) -> None:
    out = tmp_path / "run"
    argv = ["eval", "autowebbench", "--data", str(EN), "--model", "lexical", "--limit", "2", "--out", str(out), "--quiet"]
    assert main([*argv, "--element-format", "text-first"]) == 0
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert results["system"]["element_format"] == "text-first" and "--element-format text-first" in results["command"]
    assert main(argv) == 2  # the folder holds text-first predictions: an html run is another run
    assert main([*argv, "--out", str(tmp_path / "html")]) == 0
    html = json.loads((tmp_path / "html" / "results.json").read_text(encoding="utf-8"))
    assert "element_format" not in html["system"]  # html folders of earlier runs keep resuming


def test_cli_refuses_another_runs_folder_before_loading_a_model(tmp_path: Path, monkeypatch, capsys) -> None:
    """A folder of another run is refused in one line before a model loads or a server starts
    (a served team's merge and start cost minutes); a new folder is not written by the check."""
    import collabui.cli.eval as cli

    out = tmp_path / "run"
    argv = ["eval", "autowebbench", "--data", str(EN), "--model", "lexical", "--limit", "1", "--out", str(out), "--quiet"]
    assert main(argv) == 0
    monkeypatch.setattr(cli, "_autowebbench_model", lambda args: pytest.fail("a model loaded for a refused folder"))
    assert main([*argv, "--agents", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert "holds predictions of another run" in err and err.count("\n") == 0
    from collabui.evaluation.autowebbench import check_resumable

    check_resumable(tmp_path / "new", EN, {"model": "m"})
    assert not (tmp_path / "new").exists()


def test_compare_pairs_two_runs_record_by_record_and_pools_the_other_language(tmp_path: Path, capsys) -> None:
    """`eval compare` on two AutoWebBench folders: the element records both scored, paired by index
    (exact McNemar), per language and target action type; --also pools the zh runs into the table."""
    for lang, data in (("en", EN), ("zh", ZH)):
        for spec in ("random", "lexical"):
            assert main(["eval", "autowebbench", "--data", str(data), "--model", spec, "--limit", "30",
                         "--out", str(tmp_path / f"{spec}-{lang}"), "--quiet"]) == 0
    capsys.readouterr()

    def scored(run: str) -> dict[int, bool]:
        rows = [json.loads(line) for line in (tmp_path / run / "predictions.jsonl").read_text().splitlines()]
        return {r["index"]: bool(r["ssr_published"]) for r in rows if r["ssr_published"] is not None}

    a, b = scored("random-en"), scored("lexical-en")
    assert main(["eval", "compare", str(tmp_path / "random-en" / "results.json"),
                 str(tmp_path / "lexical-en" / "results.json")]) == 0
    out = capsys.readouterr().out
    assert "Paired, same (action type, record):" in out
    only_b = sum(b[k] and not a[k] for k in a)
    [total] = [line.split() for line in out.splitlines() if line.startswith("all ")]
    assert total[1:4] == [str(len(a)), str(sum(a.values())), str(sum(b.values()))] and total[6] == str(only_b)
    assert only_b >= 1  # lexical finds elements random does not

    assert main(["eval", "compare", str(tmp_path / "random-en"), str(tmp_path / "lexical-en"),
                 "--also", str(tmp_path / "random-zh"), str(tmp_path / "lexical-zh")]) == 0
    pooled = capsys.readouterr().out
    assert "(pooled over 2 pairs of runs)" in pooled and "zh/click" in pooled and "en/click" in pooled
    [total] = [line.split() for line in pooled.splitlines() if line.startswith("all ")]
    assert int(total[1]) == len(a) + len(scored("random-zh"))
