"""The benchmark's arithmetic and table, on made-up measurements."""

from __future__ import annotations

import math

import pytest

from collabui.bench_report import BackendTimes, Spread, evaluate_targets, format_report, report_dict


def _times(backend: str, *, single_s: float = 2.0, naive_s: float = 60.0, team_s: float = 12.0,
           **kw: object) -> BackendTimes:
    """One repeat of each timing (the tests of several repeats build BackendTimes themselves)."""
    base = dict(backend=backend, single_runs=(single_s,), naive_runs=(naive_s,), team_runs=(team_s,), supersteps=5,
                calls=12, prompt_tokens_total=6000, prompt_tokens_computed=900, unique_prompt_tokens=800)
    base.update(kw)
    return BackendTimes(**base)


def test_derived_ratios() -> None:
    r = _times("local", episodes=4, rollout_s=120.0)
    assert r.bound_s == 10.0
    assert r.team_over_bound == 1.2
    assert r.naive_over_team == 5.0
    assert r.computed_over_unique == 900 / 800
    assert r.episodes_per_hour == 120.0
    assert _times("local").episodes_per_hour is None
    assert _times("vllm", prompt_tokens_computed=None).computed_over_unique is None
    assert math.isinf(_times("x", single_s=0.0).team_over_bound)


def test_repeats_give_medians_and_ranges() -> None:
    r = BackendTimes("local", single_runs=(2.0, 1.0, 2.5), naive_runs=(50.0, 70.0, 60.0),
                     team_runs=(11.0, 6.0, 20.0), supersteps=5, calls=12)
    assert (r.repeats, r.single_s, r.naive_s, r.team_s) == (3, 2.0, 60.0, 11.0)
    assert r.team == Spread(11.0, 6.0, 20.0) and r.team.text() == "11.00 [6.00-20.00]"
    # each repeat's team step over its own bound: 1.1, 1.2, 1.6
    assert r.bound_ratio == Spread(pytest.approx(1.2), pytest.approx(1.1), pytest.approx(1.6))
    assert r.team_over_bound == pytest.approx(1.2)
    assert r.bound_s == 10.0 and r.naive_over_team == 60.0 / 11.0
    with pytest.raises(ValueError, match="one value per repeat"):
        BackendTimes("x", single_runs=(1.0,), naive_runs=(1.0, 2.0), team_runs=(1.0,), supersteps=1, calls=1)
    with pytest.raises(ValueError, match="one value per repeat"):
        BackendTimes("x", single_runs=(), naive_runs=(), team_runs=(), supersteps=1, calls=1)


def test_targets_met_and_missed() -> None:
    results = {"local": _times("local", team_s=13.0), "vllm": _times("vllm", single_s=0.5, team_s=4.0,
                                                                     prompt_tokens_computed=None)}
    targets = {t.name: t for t in evaluate_targets(results)}
    assert targets["local: team step / (supersteps x single call)"].met is False  # 1.3 > 1.25
    assert targets["vllm: team step / (supersteps x single call)"].met is False  # 4 / 2.5 = 1.6
    speedup = targets["vllm team step speed-up over naive local team"]
    assert speedup.value == 15.0 and speedup.met is True
    assert targets["local: prompt tokens computed / unique"].met is True
    assert targets["vllm: prompt tokens computed / unique"].met is None
    assert targets["vllm: prompt tokens computed / unique"].verdict == "n/a"


def test_single_backend_has_no_speedup_target() -> None:
    names = [t.name for t in evaluate_targets({"local": _times("local")})]
    assert names == ["local: team step / (supersteps x single call)", "local: prompt tokens computed / unique"]


def test_table_prints_figures_and_verdicts() -> None:
    text = format_report({"local": _times("local", team_s=13.0), "vllm": _times("vllm", episodes=4, rollout_s=60.0, browsers=2)},
                         header="HEAD")
    lines = text.splitlines()
    assert lines[0] == "HEAD"
    assert "local" in lines[1] and "vllm" in lines[1]
    assert any(line.startswith("bound = supersteps x single (s)") and "10.00" in line for line in lines)
    assert any("[MISSED] local: team step" in line and "1.30" in line for line in lines)
    assert any("[   met] vllm team step speed-up" in line for line in lines)
    assert "240 (K=2, 4 ep)" in text
    record = report_dict({"local": _times("local")}, {"agents": 4})
    assert record["settings"] == {"agents": 4}
    assert record["backends"]["local"]["bound_s"] == 10.0
    assert record["backends"]["local"]["team_over_bound"] == 1.2
    assert record["backends"]["local"]["team_over_bound_range"] == [1.2, 1.2]
    assert record["backends"]["local"]["single_s_range"] == [2.0, 2.0]
    assert record["targets"][0]["met"] is True
