"""collabui bench on fakes: phases, call counts, token counters, CLI wiring (no timing asserts)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from collabui.bench import BenchSettings, SequentialModel, measure_backend, run_bench
from collabui.bench_report import BackendTimes
from collabui.cli import build_parser, main
from collabui.config import TeamConfig
from collabui.errors import ConfigError
from collabui.models import ChatRequest
from collabui.models.fake import ScriptedChatModel

ANSWER = 'Thought: click it.\nAction: {"action": "click", "element_id": "1"}'
SCREEN = "[1] link Home\n[2] link About\n[3] button Go"


def test_measure_backend_on_scripted_model() -> None:
    model = ScriptedChatModel(lambda req: ANSWER)
    settings = BenchSettings(team=TeamConfig(n_agents=4, rounds=3, topology="chain"), repeats=2)
    calls = []
    said: list[str] = []
    r = measure_backend(model, "Click Home.", SCREEN, settings, backend="fake", reset=lambda: calls.append(1),
                        say=said.append)
    assert r.calls == 12
    assert r.supersteps == 4 + 3 - 1  # chain of 4: L = 4
    assert r.repeats == 2 and len(r.single_runs) == len(r.naive_runs) == len(r.team_runs) == 2
    assert len(calls) == 1 + 2 * (1 + (1 + 12) + 1), "every phase and every naive call starts cold"
    assert r.prompt_tokens_computed is None and r.unique_prompt_tokens is None
    # 1 warm-up, then per repeat: 1 single + 12 naive calls of batch 1 + 6 superstep batches
    assert model.batch_sizes[0] == 1
    for repeat in (model.batch_sizes[1:20], model.batch_sizes[20:]):
        assert repeat[:13] == [1] * 13
        assert sum(repeat[13:]) == 12 and len(repeat[13:]) == 6
    assert [line.split(":")[0] for line in said] == ["repeat 1/2", "repeat 2/2"]
    assert r.prompt_tokens_total > 0  # the scripted model's word counts
    assert r.episodes == 0 and r.episodes_per_hour is None


def test_unique_tokens_count_the_team_step_only_not_the_rollout() -> None:
    model = ScriptedChatModel(lambda req: ANSWER)
    settings = BenchSettings(team=TeamConfig(n_agents=2, rounds=2, topology="chain"), repeats=1)
    seen: list[int] = []

    def rollout(team):  # the rollout's requests go through the team's (recording) model
        team.step("Click About.", SCREEN)
        return 1, 1.0

    r = measure_backend(model, "Click Home.", SCREEN, settings, backend="fake",
                        unique=lambda reqs: seen.append(len(reqs)) or len(reqs), rollout=rollout)
    assert seen == [4] and r.unique_prompt_tokens == 4, "only the timed step's 2 x 2 requests"
    assert r.episodes == 1


def test_sequential_model_switches_prefix_cache_off_and_back() -> None:
    class Fake(ScriptedChatModel):
        prefix_cache = True
        seen: list[bool] = []

        def generate(self, requests):
            self.seen.append(self.prefix_cache)
            return super().generate(requests)

    fake = Fake([ANSWER], cycle=True)
    seq = SequentialModel(fake)
    req = ChatRequest(({"role": "user", "content": "x"},))
    assert len(seq.generate([req, req, req])) == 3
    assert fake.seen == [False, False, False] and fake.prefix_cache is True
    assert seq.calls == 3 and fake.batch_sizes == [1, 1, 1]


def test_tiny_local_model_counts_prompt_tokens(tiny_model_dir: Path) -> None:
    from collabui.models.local import LocalModel

    model = LocalModel(tiny_model_dir, device="cpu")
    settings = BenchSettings(team=TeamConfig(n_agents=2, rounds=2, topology="chain", max_new_tokens=4), repeats=1)
    r = measure_backend(model, "Click Home.", SCREEN, settings, backend="local",
                        computed=lambda: model.stats.prompt_tokens_computed,
                        unique=model.unique_prompt_tokens, reset=model.clear_prefix_cache)
    assert r.calls == 4 and r.supersteps == 3
    assert r.unique_prompt_tokens < r.prompt_tokens_total
    # Unique tokens are the least any sharing computes; rows of one batch may share a little
    # beyond the batch's common prefix, which is computed per row.
    assert r.unique_prompt_tokens <= r.prompt_tokens_computed <= 1.5 * r.unique_prompt_tokens
    assert model.prefix_cache is True, "the naive phase must restore the prefix cache"


def test_run_bench_prints_table_and_writes_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def fake(settings: BenchSettings, task: str, obs: object) -> BackendTimes:
        assert (task, obs) == ("Click Home.", SCREEN)
        return BackendTimes("x", single_runs=(1.0, 0.9, 1.2), naive_runs=(30.0, 29.0, 31.0),
                            team_runs=(9.0, 8.0, 9.5), supersteps=5, calls=12,
                            prompt_tokens_total=100, prompt_tokens_computed=40, unique_prompt_tokens=20)

    out = tmp_path / "bench.json"
    record = run_bench(BenchSettings(backend="both", out=str(out)), observation=("Click Home.", SCREEN),
                       backends={"local": fake, "vllm": fake})
    text = capsys.readouterr().out
    # per-repeat ratios 9/5, 8/4.5, 9.5/6: median 1.78, range 1.58-1.80
    assert "[MISSED] local: team step / (supersteps x single call): 1.78" in text
    assert "1.78 [1.58-1.80]" in text and "30.00 [29.00-31.00]" in text
    assert "[MISSED] local: prompt tokens computed / unique: 2.00" in text
    assert "[   met] vllm team step speed-up over naive local team: 3.33" in text
    assert json.loads(out.read_text()) == json.loads(json.dumps(record))
    assert record["settings"]["team"]["n_agents"] == 4 and record["settings"]["repeats"] == 3
    local = record["backends"]["local"]
    assert local["team_over_bound"] == pytest.approx(8 / 4.5)
    assert local["team_over_bound_range"] == pytest.approx([9.5 / 6, 9 / 5])
    assert (local["team_s"], local["team_s_range"], local["team_runs"]) == (9.0, [8.0, 9.5], (9.0, 8.0, 9.5))
    assert BenchSettings.from_dict(record["settings"]) == BenchSettings(backend="both", out=str(out))


def test_bench_cli_options_and_errors(capsys: pytest.CaptureFixture[str]) -> None:
    from collabui.cli.flags import config_from_args

    args = build_parser().parse_args(["bench", "--backend", "vllm", "--episodes-per-hour-browsers", "3",
                                      "--agents", "2", "--rounds", "1", "--seed", "5", "--out", "x.json"])
    assert (args.command, args.backend, args.browsers, args.n_agents, args.out) == ("bench", "vllm", 3, 2, "x.json")
    settings = config_from_args(BenchSettings, args)
    # the team's flags land in the team; the others keep the bench's defaults (48 tokens, 3 steps)
    assert settings.team == TeamConfig(n_agents=2, rounds=1, seed=5, max_new_tokens=48, max_steps=3)
    assert settings.team_config().temperatures == (0.0, 0.0)
    with pytest.raises(ConfigError, match="n_agents must be an integer >= 1"):
        BenchSettings(team=TeamConfig(n_agents=0))
    assert main(["bench", "--browsers", "0"]) == 2
    assert "must be >= 1" in capsys.readouterr().err
    assert main(["bench", "--repeats", "0"]) == 2
    assert "--repeats must be >= 1" in capsys.readouterr().err
