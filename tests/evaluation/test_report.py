"""Markdown, plots and compare on hand-made results of both harnesses."""

import json

import pytest

from collabui.errors import TraceError
from collabui.evaluation.report import (
    compare,
    load_results,
    plot_results,
    render_compare,
    render_markdown,
    write_compare,
    write_markdown,
)
from collabui.evaluation.stats import rate_entry


def _miniwob(label, per_task, model="random"):
    wins = sum(w for w, _ in per_task.values())
    total = sum(n for _, n in per_task.values())
    return {
        "schema": "collabui.eval", "version": 1, "harness": "miniwob",
        "system": {"model": model, "adapters": None, "n_agents": 1, "rounds": 1, "topology": "random",
                   "label": label},
        "data": {"env": "miniwob", "tasks": list(per_task), "episodes": 3, "seed": 0},
        "overall": {"success_rate": rate_entry(wins, total)},
        "breakdown": {"per_task": {t: {"success_rate": rate_entry(w, n)} for t, (w, n) in per_task.items()}},
        "counts": {"episodes": total, "errors": 0, "unparsable": 1},
        "started": "2026-01-01T00:00:00+00:00", "seconds": 12.5, "command": "collabui eval miniwob ...",
    }


def _autowebbench(label, ssr, em, per_type):
    return {
        "schema": "collabui.eval", "version": 1, "harness": "autowebbench",
        "system": {"model": "lexical", "label": label},
        "data": {"path": "en/ind.json", "language": "en", "records": 10},
        "overall": {"ssr_published": rate_entry(*ssr), "exact_match": rate_entry(*em)},
        "breakdown": {"per_action_type": {k: {"ssr_published": rate_entry(*a), "exact_match": rate_entry(*b)}
                                          for k, (a, b) in per_type.items()}},
        "counts": {"unparsable": 2, "errors": 0},
        "started": "2026-01-01T00:00:00+00:00", "seconds": 3.0, "command": None,
    }


A = _miniwob("random single agent", {"click-button": (1, 3), "focus-text": (0, 3)})
B = _miniwob("team 4x3", {"click-button": (3, 3), "focus-text": (1, 3), "enter-text": (2, 3)}, model="smollm2")


def test_markdown_has_overall_breakdown_and_counts(tmp_path):
    text = render_markdown(A)
    assert text.startswith("# miniwob: random single agent")
    assert "| overall | 0.167 | [0.03, 0.56] | 6 |" in text
    assert "| click-button | 0.333 |" in text and "| focus-text | 0.000 | [0.00, 0.56] | 3 |" in text
    assert "unparsable: 1" in text
    path = write_markdown(A, tmp_path / "sub" / "summary.md")
    assert path.read_text() == text


def test_markdown_renders_autowebbench_metrics_and_chinese():
    results = _autowebbench("lexical 中文", (3, 8), (2, 10), {"click": ((3, 5), (2, 5)), "type": ((0, 3), (0, 5))})
    text = render_markdown(results)
    assert "lexical 中文" in text
    assert "ssr_published | 95% CI | n | exact_match | 95% CI | n" in text
    assert "| click | 0.600 |" in text and "## per_action_type" in text


def test_compare_rows_deltas_and_shared_keys_only():
    rows = compare(A, B)
    overall = rows[0]
    assert (overall["scope"], overall["key"], overall["metric"]) == ("overall", "overall", "success_rate")
    assert overall["a"] == pytest.approx(1 / 6, abs=1e-4) and overall["b"] == pytest.approx(6 / 9, abs=1e-4)
    assert overall["delta"] == pytest.approx(overall["b"] - overall["a"], abs=1e-4)
    keys = [r["key"] for r in rows[1:]]
    assert keys == ["click-button", "focus-text"]  # enter-text is only in B
    assert rows[1]["delta"] == pytest.approx(2 / 3, abs=1e-3) and rows[1]["a_n"] == 3


def test_compare_autowebbench_both_metrics_per_action_type():
    a = _autowebbench("en", (3, 8), (2, 10), {"click": ((3, 5), (2, 5))})
    b = _autowebbench("zh", (1, 8), (1, 10), {"click": ((1, 5), (1, 5)), "type": ((0, 3), (0, 5))})
    rows = compare(a, b)
    assert [(r["scope"], r["key"], r["metric"]) for r in rows] == [
        ("overall", "overall", "ssr_published"), ("overall", "overall", "exact_match"),
        ("per_action_type", "click", "ssr_published"), ("per_action_type", "click", "exact_match")]
    assert rows[0]["delta"] == pytest.approx(-0.25)


def test_compare_of_different_harnesses_shares_nothing():
    assert compare(A, _autowebbench("x", (1, 2), (1, 2), {})) == []


def test_none_values_give_no_delta():
    empty = _miniwob("empty", {"click-button": (0, 0)})
    row = [r for r in compare(A, empty) if r["key"] == "click-button"][0]
    assert row["b"] is None and row["delta"] is None
    assert "-" in render_compare([row])


def test_render_compare_text_and_markdown():
    rows = compare(A, B)
    text = render_compare(rows)
    assert text.splitlines()[0].split() == ["scope", "key", "metric", "A", "B", "B", "-", "A", "n", "A", "n", "B"]
    assert "+0.500" in text  # overall 0.167 -> 0.667
    md = render_compare(rows, markdown=True)
    assert md.startswith("| scope | key | metric | A | B | B - A |") and md.count("\n") == len(rows) + 2


def test_write_compare_json_and_markdown(tmp_path):
    rows = compare(A, B)
    data = json.loads(write_compare(rows, tmp_path / "d.json", a=A, b=B).read_text())
    assert data["rows"] == rows and data["b"]["label"] == "team 4x3"
    md = write_compare(rows, tmp_path / "d.md", a=A, b=B).read_text()
    assert md.startswith("# Compare: B = team 4x3 vs A = random single agent")


def test_plot_two_systems_side_by_side(tmp_path):
    path = plot_results([A, B], tmp_path / "plot.png")
    head = path.read_bytes()[:8]
    assert head == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 5000


def test_plot_autowebbench_picks_its_metric(tmp_path):
    a = _autowebbench("en", (3, 8), (2, 10), {"click": ((3, 5), (2, 5))})
    assert plot_results([a], tmp_path / "awb.png").exists()
    assert plot_results([a], tmp_path / "em.png", metric="exact_match").exists()


def test_load_results_errors_are_one_line(tmp_path):
    with pytest.raises(TraceError, match="does not exist"):
        load_results(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(TraceError, match="is not JSON"):
        load_results(tmp_path / "bad.json")
    (tmp_path / "other.json").write_text('{"schema": "something"}')
    with pytest.raises(TraceError, match="not a collabui eval results file"):
        load_results(tmp_path / "other.json")
    (tmp_path / "ok.json").write_text(json.dumps(A))
    assert load_results(tmp_path / "ok.json") == A


def test_labels_drop_the_server_address():
    from collabui.evaluation.report import render_markdown

    results = {"harness": "miniwob", "system": {"label": "openai:smollm2@http://127.0.0.1:8011/v1 single agent"}}
    assert render_markdown(results).splitlines()[0] == "# miniwob: openai:smollm2 single agent"
