"""Iterative MARL (`run_marl`, `collabui train marl`): stages, outputs, resume, ablation, config checks."""

import json
import shutil
import time

import pytest

from collabui.config import TeamConfig
from collabui.errors import ConfigError
from collabui.training.marl import MARLConfig, evaluate_model, iteration_topologies, run_marl
from collabui.training.marl_report import MARLReport
from tests.training.marl_kit import factories, new_log, run_small, small_config

_factories, _log, _config, _run = factories, new_log, small_config, run_small


def test_one_iteration_writes_every_artifact(base_dir, tmp_path):
    log = _log()
    out = tmp_path / "run"
    report = _run(_config(base_dir, out), log)
    it = out / "iter0"
    assert len(list((it / "traces").glob("*.jsonl"))) == 1
    labels = [json.loads(line) for line in (it / "labels.jsonl").read_text().splitlines()]
    assert labels and labels[0]["critic"] == "reference" and labels[0]["rewards"] == [[1], [1]]
    pairs = [json.loads(line) for line in (it / "pairs.jsonl").read_text().splitlines()]
    assert sorted(p["agent"] for p in pairs) == [0, 1]
    for i in (0, 1):
        assert (it / "adapters" / f"agent{i}" / "adapter_model.safetensors").is_file()
    # The held-out evaluation ran the trained adapters, the "before" one the base model.
    assert log["loads"][0] == [] and {"agent0", "agent1"} <= log["adapters"]
    assert report.complete and report.before["success_rate"] == 1.0
    [iteration] = report.iterations
    assert iteration.eval["per_task"]["task-b"]["episodes"] == 1 and iteration.train["success_rate"] == 1.0
    assert iteration.pairs_per_agent() == {0: 1, 1: 1}
    assert [a["status"] for a in iteration.dpo["agents"]] == ["trained", "trained"]
    assert all(a["final_loss"] is not None for a in iteration.dpo["agents"])
    assert set(iteration.seconds) >= {"rollout", "label", "pairs", "dpo", "eval"}
    saved = MARLReport.from_json(out / "marl_report.json")
    assert saved.success_curve() == [("before", 1.0), ("iter0", 1.0)]
    png = out / "marl_report.png"
    assert png.stat().st_size > 1000 and png.read_bytes()[:4] == b"\x89PNG"
    # A finished run rerun with the same config does nothing and loads no model.
    again = _log()
    assert _run(_config(base_dir, out), again).complete and again["loads"] == [] and again["requests"] == 0


def test_the_rollout_model_is_closed_before_the_labels_and_the_dpo(base_dir, tmp_path, monkeypatch):
    import collabui.training.dpo as dpo

    log, real_train = _log(), dpo.train_agents_dpo

    def recording_train(*args, **kwargs):
        log["events"].append("dpo")
        return real_train(*args, **kwargs)

    monkeypatch.setattr(dpo, "train_agents_dpo", recording_train)
    _run(_config(base_dir, tmp_path / "run", eval_episodes_per_task=0), log)
    # An idle server beside the DPO took a core's share from it: it is gone before the DPO.
    assert log["events"] == ["load", "close", "dpo"]


def test_crash_in_dpo_resumes_without_redoing_rollouts_or_labels(base_dir, tmp_path, monkeypatch):
    import collabui.training.dpo as dpo
    import collabui.training.labels as labels

    out, log = tmp_path / "run", _log()
    real_train, real_label = dpo.train_agents_dpo, labels.label_traces
    calls = {"dpo": 0, "label": 0}

    def flaky_train(*args, **kwargs):
        calls["dpo"] += 1
        if calls["dpo"] == 1:
            raise RuntimeError("simulated crash during DPO")
        return real_train(*args, **kwargs)

    def counting_label(*args, **kwargs):
        calls["label"] += 1
        return real_label(*args, **kwargs)

    monkeypatch.setattr(dpo, "train_agents_dpo", flaky_train)
    monkeypatch.setattr(labels, "label_traces", counting_label)
    with pytest.raises(RuntimeError, match="simulated crash"):
        _run(_config(base_dir, out), log)
    state = json.loads((out / "state.json").read_text())
    assert {"before/eval", "iter0/rollout", "iter0/label", "iter0/pairs"} <= set(state["stages"])
    assert "iter0/dpo" not in state["stages"]
    stamps = {p: p.stat().st_mtime_ns for p in (out / "iter0" / "traces").glob("*.jsonl")}
    stamps[out / "iter0" / "labels.jsonl"] = (out / "iter0" / "labels.jsonl").stat().st_mtime_ns
    stamps[out / "iter0" / "pairs.jsonl"] = (out / "iter0" / "pairs.jsonl").stat().st_mtime_ns
    rollout_requests, env_calls = log["requests"], len(log["envs"])
    time.sleep(0.01)  # distinct mtimes if anything were rewritten (not a timing assert)

    resumed = _log()
    report = _run(_config(base_dir, out), resumed)
    assert report.complete and calls == {"dpo": 2, "label": 1}
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps  # traces, labels, pairs untouched
    # Only the held-out evaluation of the new adapters ran: one episode, n x m = 2 requests.
    assert resumed["requests"] == 2 and resumed["envs"] == ["miniwob/task-b"]
    assert rollout_requests == 4 and env_calls == 2


class StopAfterRollouts(Exception):
    pass


@pytest.fixture
def stop_after_rollouts(monkeypatch):
    """Stop the run when the label stage starts: these tests only need the rollouts."""
    import collabui.training.labels as labels

    def stop(*args, **kwargs):
        raise StopAfterRollouts

    monkeypatch.setattr(labels, "label_traces", stop)


def test_interrupted_rollout_reruns_only_unfinished_episodes(base_dir, tmp_path, stop_after_rollouts):
    out = tmp_path / "run"
    config = _config(base_dir, out, episodes_per_task=2)
    model_factory, env_factory = _factories(_log())
    acts = []

    def crashing_env(name):
        device = env_factory(name)
        real_act = device.act

        def act(action):
            acts.append(name)
            if name.endswith("task-a") and acts.count(name) == 2:  # the second training episode
                raise KeyboardInterrupt  # the user stops the run
            return real_act(action)

        device.act = act
        return device

    with pytest.raises(KeyboardInterrupt):
        run_marl(config, progress=False, env_factory=crashing_env, model_factory=model_factory)
    manifest = (out / "iter0" / "rollouts.jsonl").read_text().splitlines()
    assert [json.loads(line)["episode_id"] for line in manifest] == ["iter0-task-a-0"]
    finished = (out / "iter0" / "traces" / "iter0-task-a-0.jsonl").stat().st_mtime_ns
    log = _log()
    model_factory, env_factory = _factories(log)
    with pytest.raises(StopAfterRollouts):
        run_marl(config, progress=False, env_factory=env_factory, model_factory=model_factory)
    # Only the interrupted episode ran again (n x m = 2 requests); the finished one was kept.
    assert log["requests"] == 2 and log["envs"] == ["miniwob/task-a"]
    assert (out / "iter0" / "traces" / "iter0-task-a-0.jsonl").stat().st_mtime_ns == finished
    records = [json.loads(line) for line in (out / "iter0" / "rollouts.jsonl").read_text().splitlines()]
    assert [r["episode_id"] for r in records] == ["iter0-task-a-0", "iter0-task-a-1"]
    assert all(r["success"] and r["steps"] == 1 for r in records)
    state = json.loads((out / "state.json").read_text())["stages"]
    assert state["iter0/rollout"]["result"]["episodes"] == 2 and "iter0/label" not in state


def test_edge_update_ablation_keeps_the_dag():
    kw = dict(team=TeamConfig(n_agents=4, seed=3, topology="random"), iterations=3, train_tasks=("a",),
              eval_tasks=("b",))
    fixed = iteration_topologies(MARLConfig(edge_update=False, **kw))
    moving = iteration_topologies(MARLConfig(edge_update=True, **kw))
    assert len(fixed) == len(moving) == 4 and fixed[0] == moving[0]
    assert all(t.edges == fixed[0].edges for t in fixed)
    assert all(a.edges != b.edges for a, b in zip(moving, moving[1:], strict=False))
    assert [t.edges for t in moving] == [t.edges for t in iteration_topologies(MARLConfig(edge_update=True, **kw))]


@pytest.mark.parametrize("edge_update", [True, False])
def test_rollouts_use_the_iteration_dag(base_dir, tmp_path, stop_after_rollouts, edge_update):
    from collabui.trace import read_trace

    out = tmp_path / "run"
    with pytest.raises(StopAfterRollouts):
        _run(_config(base_dir, out, n_agents=3, edge_update=edge_update), _log())
    state = json.loads((out / "state.json").read_text())["stages"]
    dag = state["iter0/edge_update"]["result"]["edges"]
    before = read_trace(next((out / "before" / "eval_traces").glob("*.jsonl"))).header["topology"]["edges"]
    trained = read_trace(next((out / "iter0" / "traces").glob("*.jsonl"))).header["topology"]["edges"]
    assert trained == dag and (before != dag) is edge_update


def test_rerun_with_another_config_is_a_one_line_error(base_dir, tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "state.json").write_text(json.dumps({"version": 1, "stages": {},
                                                "config": _config(base_dir, out).to_dict()}))
    with pytest.raises(ConfigError) as err:
        _run(_config(base_dir, out, critic="outcome"), _log())
    assert "critic" in str(err.value) and "\n" not in str(err.value)
    # A team field is named team.x, with its old and its new value.
    with pytest.raises(ConfigError, match=r"team\.rounds: 1 -> 2\b"):
        _run(_config(base_dir, out, rounds=2), _log())


@pytest.mark.parametrize("kw, needle", [
    ({"eval_tasks": ("task-a",)}, "held-out"),
    ({"critic": "psychic"}, "unknown critic"),
    ({"env": "android"}, "env must be"),
    ({"iterations": 0}, "iterations"),
    ({"dpo": {"output_dir": "x"}}, "output_dir"),
    ({"objective": "ppo"}, "unknown objective"),
    ({"element_format": "xml"}, "unknown element_format"),
    ({"right_pairs": True}, "with --adversary own"),
    ({"lost_only": True}, "with --adversary own"),
    ({"adversary": "own", "critic": "verified", "repeat_clicks": True}, "with --right-pairs"),
    ({"adversary": "own", "critic": "verified", "swap_texts": True}, "with --right-pairs"),
    ({"critic": "outcome", "adversary": "own"}, "outcome critic labels every entry of a step alike"),
    ({"max_pairs": -1}, "max_pairs must be an integer >= 0"),
    ({"concurrency": 2, "workers": 2}, "do not combine"),
    ({"eval_tasks": ()}, "eval_tasks is empty"),
    ({"model": "openai:gpt-4o"}, "needs a local model"),
    ({"team": TeamConfig(seed=None)}, "team.seed must be an integer"),
    ({"team": TeamConfig(adapters=("a", "b", "c", "d"))}, "team.adapters is set by the run"),
    ({"team": TeamConfig(action_space="mobile")}, "contradicts env 'miniwob'"),
    ({"team": TeamConfig(stop_when_decided=True)}, "MARL labels every entry of the action matrix"),
    ({"team": {"n_agents": 2}}, "team must be a TeamConfig"),
])
def test_bad_config(kw, needle, tmp_path):
    values = dict(train_tasks=("task-a",), eval_tasks=("task-b",), out_dir=str(tmp_path))
    with pytest.raises(ConfigError, match=needle):
        MARLConfig(**{**values, **kw})


def test_cli_flags_cover_the_config_and_bad_dpo_option_fails(tmp_path):
    from collabui.cli import build_parser
    from collabui.cli.train import marl_config

    parser = build_parser()
    args = parser.parse_args(["train", "marl", "--train-tasks", "click-button,click-link", "--eval-tasks", "focus-text",
                              "--episodes", "3", "--agents", "2", "--no-edge-update", "--out", str(tmp_path),
                              "--dpo", "max_steps=2", "--dpo", "beta=0.2"])
    config = marl_config(args)
    assert config.train_tasks == ("click-button", "click-link") and config.episodes_per_task == 3
    assert config.team.n_agents == 2 and config.edge_update is False and config.dpo == {"max_steps": 2, "beta": 0.2}
    # the team's other flags keep MARL's defaults (short episodes, the ReAct prompt)
    assert (config.team.max_steps, config.team.prompt_style, config.team.rounds) == (3, "react", 3)
    assert config.dpo_config(tmp_path / "trl").max_steps == 2
    bad = parser.parse_args(["train", "marl", "--out", str(tmp_path), "--dpo", "no_such_field=1"])
    with pytest.raises(ConfigError, match="bad --dpo option"):
        marl_config(bad)


@pytest.mark.browser
@pytest.mark.model
@pytest.mark.slow
def test_marl_end_to_end_smollm2_miniwob(tmp_path, capsys):
    """CI-sized run: real SmolLM2 team (n=2, m=1) on MiniWoB++ in Chromium, one iteration.

    Pairs do not hang on the seed: the training task is enter-text, whose first step (typing the
    quoted text) the untrained model does not take, and the agents' own wrong proposals are
    paired with a verified-right action (the verified critic's own find when no agent was right).
    (On click-button the untrained agents were both right on both pages for seeds 0 and 1: no
    pairs. On enter-text seeds 0, 1, 2, 3 and 11 each gave both agents 2 pairs.)
    """
    out = tmp_path / "marl"
    argv = ["train", "marl", "--env", "miniwob", "--train-tasks", "enter-text", "--eval-tasks", "click-link",
            "--iterations", "1", "--episodes", "2", "--eval-episodes", "1", "--agents", "2", "--rounds", "1",
            "--max-steps", "1", "--max-new-tokens", "40", "--critic", "verified", "--adversary", "own",
            "--shuffle-elements", "--seed", "0",
            "--out", str(out), "--dpo", "max_steps=1", "--dpo", "per_device_train_batch_size=1"]
    started = time.perf_counter()
    assert _main(argv) == 0
    seconds = time.perf_counter() - started
    report = MARLReport.from_json(out / "marl_report.json")
    assert report.complete and report.before["episodes"] == 1 and report.iterations[0].eval["episodes"] == 1
    assert (out / "marl_report.png").is_file() and len(list((out / "iter0" / "traces").glob("*.jsonl"))) == 2
    dpo = report.iterations[0].dpo["agents"]
    pairs = report.iterations[0].pairs_per_agent()
    for agent in dpo:  # an agent with pairs got an adapter; one without is reported, not hidden
        assert agent["status"] == ("trained" if pairs[agent["agent"]] else "no_pairs")
    assert all(a["status"] == "trained" and a["steps"] >= 1 for a in dpo), dpo
    for agent in (a for a in dpo if a["status"] == "trained"):
        assert (out / "iter0" / "adapters" / f"agent{agent['agent']}" / "adapter_config.json").is_file()
    # The verified critic replays enter-text: every entry got a score, none abstained.
    labels = [json.loads(line) for line in (out / "iter0" / "labels.jsonl").read_text().splitlines()]
    assert len(labels) == 2 and all(r["critic"] == "verified" and r["abstained"] == 0 for r in labels)
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["complete"] is True
    with capsys.disabled():
        print(f"\ne2e seconds: {seconds:.1f} (stages: {report.iterations[0].seconds}, before {report.seconds})")


def _main(argv):
    from collabui.cli import main

    return main(argv)


def test_own_mistake_pairs_train_only_the_agent_that_erred(base_dir, tmp_path):
    """adversary='own': agent 1's real wrong answer is rejected against the team's right one;
    DPO with an SFT term on chosen trains agent 1 and leaves agent 0 (no mistakes) untouched."""
    import dataclasses as dc

    from tests.training.marl_kit import OK

    wrong = 'Thought: Cancel.\nAction: {"action": "click", "element_id": "C"}'
    log = _log()
    model_factory, env_factory = _factories(log)

    def erring_factory(base, adapters):
        model = model_factory(base, adapters)
        inner = model.generate

        def generate(requests):  # agent 1 samples at temperature 0.3 (the default schedule)
            return [dc.replace(r, text=wrong if q.temperature == 0.3 else OK)
                    for q, r in zip(requests, inner(requests), strict=True)]

        model.generate = generate
        return model

    out = tmp_path / "run"
    config = _config(base_dir, out, adversary="own",
                     dpo={"max_steps": 1, "per_device_train_batch_size": 1, "loss_type": ["sigmoid", "sft"]})
    report = run_marl(config, progress=False, env_factory=env_factory, model_factory=erring_factory)
    pairs = [json.loads(line) for line in (out / "iter0" / "pairs.jsonl").read_text().splitlines()]
    assert [(p["agent"], p["rejected_source"]) for p in pairs] == [(1, "own")]
    assert '"C"' in pairs[0]["rejected"][0]["content"] and '"B"' in pairs[0]["chosen"][0]["content"]
    statuses = {a["agent"]: a["status"] for a in report.iterations[0].dpo["agents"]}
    assert statuses[1] == "trained" and statuses[0] != "trained"
    assert not (out / "iter0" / "adapters" / "agent0" / "adapter_model.safetensors").is_file()


def _second_agent_answers(text: str):
    """The kit's factories, agent 1 (temperature 0.3) answering ``text`` and agent 0 the right OK."""
    import dataclasses as dc

    from tests.training.marl_kit import OK

    model_factory, env_factory = _factories(_log())

    def factory(base, adapters):
        model = model_factory(base, adapters)
        inner = model.generate

        def generate(requests):
            return [dc.replace(r, text=text if q.temperature == 0.3 else OK)
                    for q, r in zip(requests, inner(requests), strict=True)]

        model.generate = generate
        return model

    return factory, env_factory


def test_right_pairs_give_the_agent_that_was_right_a_pair_too(base_dir, tmp_path):
    """right_pairs: agent 0's right answers are also paired, against agent 1's wrong one, so both
    agents train; with max_pairs (1 per agent: no cut here) the stats count the corrections
    built and kept."""
    wrong = 'Thought: Cancel.\nAction: {"action": "click", "element_id": "C"}'
    erring_factory, env_factory = _second_agent_answers(wrong)
    out = tmp_path / "run"
    config = _config(base_dir, out, adversary="own", right_pairs=True, max_pairs=1,
                     dpo={"max_steps": 1, "per_device_train_batch_size": 1, "loss_type": ["sigmoid", "sft"]})
    report = run_marl(config, progress=False, env_factory=env_factory, model_factory=erring_factory)
    pairs = [json.loads(line) for line in (out / "iter0" / "pairs.jsonl").read_text().splitlines()]
    assert sorted((p["agent"], p["rejected_source"]) for p in pairs) == [(0, "team"), (1, "own")]
    assert all('"C"' in p["rejected"][0]["content"] for p in pairs)
    stats = report.iterations[0].pairs
    assert stats["corrections"] == stats["corrections_built"] == {"click -> click": 2}
    statuses = {a["agent"]: a["status"] for a in report.iterations[0].dpo["agents"]}
    assert statuses[0] == statuses[1] == "trained"


def test_mirror_corrections_drops_a_cross_action_correction_without_its_reverse(base_dir, tmp_path):
    """mirror_corrections in the loop: agent 1 types where clicking OK is right; its one pair
    (typing rejected for the click) has no reverse, so it is not trained on, and the stats say
    what was built and what was kept."""
    typed = 'Thought: type.\nAction: {"action": "type_string", "element_id": "B", "content": "ok", "press_enter": false}'
    typing_factory, env_factory = _second_agent_answers(typed)
    out = tmp_path / "run"
    config = _config(base_dir, out, adversary="own", mirror_corrections=True,
                     dpo={"max_steps": 1, "per_device_train_batch_size": 1, "loss_type": ["sigmoid", "sft"]})
    report = run_marl(config, progress=False, env_factory=env_factory, model_factory=typing_factory)
    stats = report.iterations[0].pairs
    assert stats["corrections_built"] == {"type_string -> click": 1} and stats["corrections"] == {}
    assert (out / "iter0" / "pairs.jsonl").read_text().strip() == ""
    assert all(a["status"] != "trained" for a in report.iterations[0].dpo["agents"])


def test_rft_objective_trains_each_agent_on_its_chosen_answers(base_dir, tmp_path):
    """The PO -> RFT ablation: the same loop, each agent's adapter trained by SFT on the chosen
    side of its pairs, with the DPO options' steps and LoRA shape (same compute)."""
    from safetensors.torch import load_file

    out = tmp_path / "run"
    config = _config(base_dir, out, objective="rft",
                     dpo={"max_steps": 2, "per_device_train_batch_size": 1, "learning_rate": 1e-3, "lora_r": 4})
    report = _run(config, _log())
    [iteration] = report.iterations
    assert iteration.dpo["objective"] == "rft"
    agents = {a["agent"]: a for a in iteration.dpo["agents"]}
    assert {a: r["status"] for a, r in agents.items()} == {0: "trained", 1: "trained"}
    assert all(r["steps"] == 2 and r["n_pairs"] == 1 and r["final_loss"] is not None for r in agents.values())
    for i in (0, 1):
        adapter = out / "iter0" / "adapters" / f"agent{i}"
        assert json.loads((adapter / "adapter_config.json").read_text())["r"] == 4
        weights = load_file(str(adapter / "adapter_model.safetensors"))
        # LoRA's B matrices start at zero: nonzero ones mean the SFT steps moved this adapter.
        assert any(float(w.abs().sum()) > 0 for name, w in weights.items() if "lora_B" in name)
    assert report.complete and (out / "marl_report.png").is_file()


def test_without_an_evaluation_in_the_loop_only_training_runs(base_dir, tmp_path):
    log = _log()
    out = tmp_path / "run"
    report = _run(_config(base_dir, out, eval_tasks=(), eval_episodes_per_task=0, episodes_per_task=2,
                          concurrency=2), log)
    assert report.complete and report.success_curve() == [("before", None), ("iter0", None)]
    assert not (out / "before").exists() and not (out / "iter0" / "eval.jsonl").exists()
    # Two training episodes (n x m = 2 requests each), run two at a time on one model, and
    # nothing else.
    assert log["requests"] == 4 and log["envs"] == ["miniwob/task-a"] * 2
    records = [json.loads(line) for line in (out / "iter0" / "rollouts.jsonl").read_text().splitlines()]
    assert sorted(r["episode_id"] for r in records) == ["iter0-task-a-0", "iter0-task-a-1"]
    assert all(r["success"] for r in records)
    state = json.loads((out / "state.json").read_text())["stages"]
    assert "iter0/dpo" in state and not any(k.endswith("eval") for k in state)
    with pytest.raises(ConfigError, match="evaluates no episodes"):
        evaluate_model(_config(base_dir, out, eval_tasks=(), eval_episodes_per_task=0), f"hf:{base_dir}",
                       tmp_path / "ev", env_factory=_factories(_log())[1])


def _erring_until_trained():
    """The kit's factories, agent 1 (T = 0.3) clicking Cancel until it has an adapter, then OK."""
    import dataclasses as dc

    from tests.training.marl_kit import OK

    wrong = 'Thought: Cancel.\nAction: {"action": "click", "element_id": "C"}'
    model_factory, env_factory = _factories(_log())

    def factory(base, adapters):
        model = model_factory(base, adapters)
        inner = model.generate

        def generate(requests):
            return [dc.replace(r, text=wrong if q.temperature == 0.3 and not adapters else OK)
                    for q, r in zip(requests, inner(requests), strict=True)]

        model.generate = generate
        return model

    return factory, env_factory


def test_rft_learns_from_own_mistakes_and_keeps_an_adapter_with_nothing_new(base_dir, tmp_path):
    """RFT on own-mistake pairs trains the agent that erred (its chosen side is verified right,
    whatever the pair's score); an iteration with nothing new keeps its adapter, as DPO does."""
    erring_before_training, env_factory = _erring_until_trained()

    out = tmp_path / "run"
    config = _config(base_dir, out, adversary="own", objective="rft", iterations=2, eval_tasks=(),
                     eval_episodes_per_task=0)
    report = run_marl(config, progress=False, env_factory=env_factory, model_factory=erring_before_training)
    first, second = ({a["agent"]: a["status"] for a in it.dpo["agents"]} for it in report.iterations)
    assert first == {0: "no_pairs", 1: "trained"} and second == {0: "no_pairs", 1: "kept"}
    assert (out / "iter1" / "adapters" / "agent1" / "adapter_model.safetensors").is_file()
    assert json.loads((out / "bundle" / "team.json").read_text())["agents"] == [None, "agent1"]


def test_pooled_pairs_retrain_from_the_start_model_on_every_iteration_so_far(base_dir, tmp_path):
    """pool_pairs: agent 1 errs only before it has an adapter, so iteration 1 builds no pair; its
    update still trains afresh from the start model (no init) on iteration 0's pair, where a
    continued run keeps the old adapter (the RFT test above)."""
    erring_before_training, env_factory = _erring_until_trained()

    out = tmp_path / "run"
    config = _config(base_dir, out, adversary="own", pool_pairs=True, iterations=2, eval_tasks=(),
                     eval_episodes_per_task=0,
                     dpo={"max_steps": 1, "per_device_train_batch_size": 1, "loss_type": ["sigmoid", "sft"]})
    report = run_marl(config, progress=False, env_factory=env_factory, model_factory=erring_before_training)
    first, second = ({a["agent"]: a for a in it.dpo["agents"]} for it in report.iterations)
    assert report.iterations[1].pairs_per_agent() == {0: 0, 1: 0}  # nothing new in iteration 1
    assert first[1]["status"] == second[1]["status"] == "trained"
    assert second[1]["n_pairs"] == first[1]["n_pairs"] == 1 and second[1]["init_from"] is None
    assert second[0]["status"] == "no_pairs"


def test_anchor_rows_join_the_pairs_and_the_dpo(base_dir, tmp_path):
    out = tmp_path / "run"
    dpo = {"max_steps": 1, "per_device_train_batch_size": 1, "loss_type": ["sigmoid", "sft"]}
    report = _run(_config(base_dir, out, anchor=2.0, eval_episodes_per_task=0, dpo=dpo), _log())
    rows = [json.loads(line) for line in (out / "iter0" / "pairs.jsonl").read_text().splitlines()]
    anchors = [r for r in rows if r["rejected_source"] == "anchor"]
    # Each agent's one right entry (1 step, 1 round): 2 asked per pair, 1 there to take.
    assert sorted(r["agent"] for r in anchors) == [0, 1]
    assert all(r["chosen"] == r["rejected"] for r in anchors)
    [iteration] = report.iterations
    assert iteration.pairs["anchors"] == {"0": 1, "1": 1} and iteration.pairs_per_agent() == {0: 1, 1: 1}
    assert [a["n_pairs"] for a in iteration.dpo["agents"]] == [2, 2]


def test_anchor_rows_need_the_sft_term(tmp_path):
    with pytest.raises(ConfigError, match="anchor rows teach through DPO's SFT term only"):
        MARLConfig(train_tasks=("task-a",), eval_tasks=("task-b",), out_dir=str(tmp_path), anchor=1.0)
    with pytest.raises(ConfigError, match="anchor must be a number >= 0"):
        MARLConfig(train_tasks=("task-a",), eval_tasks=("task-b",), out_dir=str(tmp_path), anchor=-1)


def _rehearsal_file(path, tasks=("task-a", "task-b"), steps=2):
    """Stage-1-like SFT rows: two steps of two tasks, three renderings each."""
    rows = [{"prompt": [{"role": "user", "content": f"Task: {task} step {t} rendering {k}"}],
             "completion": [{"role": "assistant", "content": f'Action: {{"action": "click", "element_id": "{t}"}}'}],
             "task_name": task, "seed": k, "t": t} for task in tasks for t in range(steps) for k in range(3)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_rehearsal_rows_join_the_pairs_and_the_dpo(base_dir, tmp_path):
    out = tmp_path / "run"
    dpo = {"max_steps": 1, "per_device_train_batch_size": 1, "loss_type": ["sigmoid", "sft"]}
    rehearsal = _rehearsal_file(tmp_path / "rehearsal.jsonl")
    report = _run(_config(base_dir, out, rehearse=3.0, rehearsal=str(rehearsal), eval_episodes_per_task=0, dpo=dpo),
                  _log())
    rows = [json.loads(line) for line in (out / "iter0" / "pairs.jsonl").read_text().splitlines()]
    rehearsed = [r for r in rows if r["rejected_source"] == "rehearsal"]
    # One pair each, 3 rehearsal rows asked per pair: a row from each (task, step) group in turn.
    assert sorted(r["agent"] for r in rehearsed) == [0, 0, 0, 1, 1, 1]
    assert all(r["chosen"] == r["rejected"] and r["prompt"][0]["content"].startswith("Task: task-") for r in rehearsed)
    for agent in (0, 1):
        groups = [(r["prompt"][0]["content"].split()[1], r["t"]) for r in rehearsed if r["agent"] == agent]
        assert len(set(groups)) == 3  # three of the four groups, none twice
    [iteration] = report.iterations
    assert iteration.pairs["rehearsal"] == {"0": 3, "1": 3}
    assert [a["n_pairs"] for a in iteration.dpo["agents"]] == [4, 4]


def test_rehearsal_needs_its_rows_and_the_sft_term(base_dir, tmp_path):
    with pytest.raises(ConfigError, match="rehearse rows teach through DPO's SFT term only"):
        MARLConfig(train_tasks=("task-a",), eval_tasks=("task-b",), out_dir=str(tmp_path), rehearse=1.0)
    with pytest.raises(ConfigError, match="rehearse must be a number >= 0"):
        MARLConfig(train_tasks=("task-a",), eval_tasks=("task-b",), out_dir=str(tmp_path), rehearse=-0.5)
    dpo = {"max_steps": 1, "loss_type": ["sigmoid", "sft"]}
    missing = _config(base_dir, tmp_path / "run", rehearse=1.0, rehearsal=str(tmp_path / "none.jsonl"), dpo=dpo)
    with pytest.raises(ConfigError, match="none.jsonl' is not a file"):
        _run(missing, _log())
    assert not (tmp_path / "run" / "iter0").exists()  # refused before any rollout


def test_element_kinds_alone_is_refused(tmp_path):
    """Element kinds only steer the mirror cut and the per-kind draw: asked for alone, the run
    would train on the very pairs it would have without them."""
    with pytest.raises(ConfigError, match="changes nothing alone: add one of them"):
        MARLConfig(train_tasks=("task-a",), out_dir=str(tmp_path), element_kinds=True)
    for balance in ({"mirror_corrections": True}, {"max_pairs": 10}):
        assert MARLConfig(train_tasks=("task-a",), out_dir=str(tmp_path), element_kinds=True, **balance).element_kinds


def test_rollouts_already_in_the_folder_load_no_model(base_dir, tmp_path, stop_after_rollouts):
    """An ablation's folder gets the full run's episodes copied in: its rollout stage reads them
    instead of starting a model (a server on a CPU takes minutes) to play nothing."""
    first, copy = tmp_path / "full", tmp_path / "ablation"
    with pytest.raises(StopAfterRollouts):
        _run(_config(base_dir, first, eval_episodes_per_task=0, episodes_per_task=2), _log())
    shutil.copytree(first / "iter0" / "traces", copy / "iter0" / "traces")
    shutil.copy(first / "iter0" / "rollouts.jsonl", copy / "iter0" / "rollouts.jsonl")
    log = _log()
    with pytest.raises(StopAfterRollouts):
        _run(_config(base_dir, copy, eval_episodes_per_task=0, episodes_per_task=2), log)
    assert log["loads"] == [] and log["requests"] == 0 and log["envs"] == []
    state = json.loads((copy / "state.json").read_text())["stages"]
    assert state["iter0/rollout"]["result"]["episodes"] == 2
