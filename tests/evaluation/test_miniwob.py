"""The MiniWoB++ harness and the episode runner: suites, resume, concurrency, cleanup.

Most tests use FakeDevice screens under real task names (the harness never looks inside a
device); the `browser` tests run real MiniWoB++ pages in real Chromium and count its processes.
"""

import json
import logging
import re
import threading

import pytest

from collabui.actions.web import Click
from collabui.config import TeamConfig
from collabui.devices.base import Observation
from collabui.devices.fake import FakeDevice
from collabui.devices.miniwob import miniwob_tasks
from collabui.errors import ConfigError, EnvNotFoundError
from collabui.evaluation.miniwob import (
    EASY_TASKS,
    MiniWoBEvalConfig,
    evaluate_miniwob,
    resolve_tasks,
)
from collabui.evaluation.runner import EnvPool, episode_specs, read_manifest, run_episodes
from collabui.models.fake import ScriptedChatModel
from collabui.team import CollabAgentTeam
from tests.processes import chromium_descendants

OK = 'Thought: OK is B.\nAction: {"action": "click", "element_id": "B"}'
TASKS = "click-button,focus-text"


# -- suites ------------------------------------------------------------------------------------


def test_all_is_every_shipped_task():
    assert resolve_tasks("all") == miniwob_tasks()
    assert len(resolve_tasks("all")) > 100


def test_easy_is_a_subset_of_shipped_tasks():
    easy = resolve_tasks("easy")
    assert easy == list(EASY_TASKS) and 10 <= len(easy) <= 15
    assert set(easy) <= set(miniwob_tasks())


def test_names_and_suites_mix_in_order_without_repeats():
    assert resolve_tasks(" enter-text, miniwob/click-button ,click-test,enter-text") == [
        "enter-text", "click-button", "click-test"]
    mixed = resolve_tasks("use-slider,easy")
    assert mixed[0] == "use-slider" and mixed[1:] == list(EASY_TASKS)


def test_unknown_name_is_one_line_with_suggestion():
    with pytest.raises(EnvNotFoundError) as info:
        resolve_tasks("click-buton")
    message = str(info.value)
    assert "\n" not in message and "did you mean 'click-button'" in message and "easy" in message


def test_empty_task_list_is_an_error():
    with pytest.raises(ConfigError, match="no MiniWoB\\+\\+ tasks given"):
        resolve_tasks(" , ")


# -- harness with fake devices ---------------------------------------------------------------


def _fake_factory(devices):
    def make(name):
        screen = Observation(text="<button[B]| OK> <button[C]| Cancel>", task=f"Click OK ({name}).")
        device = FakeDevice([screen], success_when=lambda a: a == Click("B"))
        devices.append(device)
        return device

    return make


class Flaky:
    """A ChatModel-like callable for ScriptedChatModel: fails at request number ``at``."""

    def __init__(self, at=None, exc=RuntimeError):
        self.at, self.exc, self.count = at, exc, 0
        self.lock = threading.Lock()

    def __call__(self, request):
        with self.lock:
            self.count += 1
            if self.at is not None and self.count == self.at:
                raise self.exc("boom")
        return OK


def _config(team=None, **kw):
    """A scripted single agent; ``team`` changes TeamConfig fields of it."""
    return MiniWoBEvalConfig(**{"tasks": TASKS, "episodes": 2, "model": "scripted",
                                "team": TeamConfig(**{"n_agents": 1, "rounds": 1, "max_steps": 2, **(team or {})}),
                                **kw})


@pytest.mark.parametrize("concurrency", [1, 2])
def test_results_json_in_the_common_format(tmp_path, concurrency):
    devices = []
    results = evaluate_miniwob(_config(concurrency=concurrency), tmp_path, model=ScriptedChatModel(Flaky()),
                               env_factory=_fake_factory(devices), progress=False, command="cmd")
    assert results["schema"] == "collabui.eval" and results["harness"] == "miniwob"
    assert results["overall"]["success_rate"] == {"value": 1.0, "n": 4, "successes": 4, "ci95": [0.5101, 1.0]}
    assert list(results["breakdown"]["per_task"]) == ["click-button", "focus-text"]
    assert results["breakdown"]["per_task"]["focus-text"]["success_rate"]["n"] == 2
    counts = dict(results["counts"])
    assert counts.pop("prompt_tokens_per_answer") > 0  # the scripted model counts its prompt's words
    assert counts == {"episodes": 4, "errors": 0, "unparsable": 0, "proposals": 4, "steps": 4}
    assert results["system"]["label"] == "scripted single agent" and results["command"] == "cmd"
    assert json.loads((tmp_path / "results.json").read_text()) == results
    assert (tmp_path / "summary.md").read_text().startswith("# miniwob: scripted single agent")
    assert len(list((tmp_path / "traces").glob("*.jsonl"))) == 4  # a trace per episode
    assert all(d.closed for d in devices)
    # concurrency 2: two pools, each with its own device per task
    assert len(devices) == 2 * concurrency


def test_each_episode_gets_its_own_seed_and_one_shared_dag(tmp_path):
    model = ScriptedChatModel(Flaky())
    evaluate_miniwob(_config(team={"n_agents": 2}, tasks="click-button", episodes=3), tmp_path,
                     model=model, env_factory=_fake_factory([]), progress=False)
    seeds = [r.seed for r in model.requests]
    assert len(seeds) == 6 and len(set(seeds)) == 6  # sampling differs across episodes and agents
    dags = set()
    for trace in (tmp_path / "traces").glob("*.jsonl"):
        head = json.loads(trace.read_text().splitlines()[0])
        dags.add(json.dumps(head["topology"], sort_keys=True))
    assert len(dags) == 1


def test_an_arbiter_is_loaded_once_and_judges_every_episode(tmp_path, monkeypatch):
    import collabui.models.spec as spec

    loaded = []
    real = spec.load_model
    monkeypatch.setattr(spec, "load_model", lambda name, **kw: loaded.append(name) or real(name, **kw))
    evaluate_miniwob(_config(team={"n_agents": 2, "arbiter": "lexical"}, tasks="click-button", episodes=3),
                     tmp_path, model=ScriptedChatModel(Flaky()), env_factory=_fake_factory([]), progress=False)
    assert loaded == ["lexical"]
    votes = [json.loads(line)["vote"] for trace in (tmp_path / "traces").glob("*.jsonl")
             for line in trace.read_text().splitlines()[1:] if json.loads(line).get("type") == "step"]
    assert len(votes) >= 3 and all(v["arbiter"]["model"] == "lexical" for v in votes)


@pytest.mark.parametrize("concurrency", [1, 2])
def test_resume_skips_finished_episodes(tmp_path, concurrency):
    devices = []
    with pytest.raises(RuntimeError, match="boom"):
        evaluate_miniwob(_config(concurrency=concurrency), tmp_path, model=ScriptedChatModel(Flaky(at=3)),
                         env_factory=_fake_factory(devices), progress=False)
    assert all(d.closed for d in devices)  # closed on the exception path too
    finished = read_manifest(tmp_path / "episodes.jsonl")
    # in order: exactly the two before the failure; in parallel the other worker may finish its own
    assert (len(finished) == 2 if concurrency == 1 else 1 <= len(finished) <= 3)
    assert not (tmp_path / "results.json").exists()
    again = Flaky()
    results = evaluate_miniwob(_config(concurrency=concurrency), tmp_path, model=ScriptedChatModel(again),
                               env_factory=_fake_factory([]), progress=False)
    assert again.count == 4 - len(finished)  # only the unfinished episodes ran
    assert results["overall"]["success_rate"]["n"] == 4
    lines = (tmp_path / "episodes.jsonl").read_text().splitlines()
    assert len(lines) == 4 and len({json.loads(x)["episode_id"] for x in lines}) == 4
    # a third run finds everything done: no model call, no device
    idle, devices = Flaky(), []
    evaluate_miniwob(_config(concurrency=concurrency), tmp_path, model=ScriptedChatModel(idle),
                     env_factory=_fake_factory(devices), progress=False)
    assert idle.count == 0 and devices == []


def test_a_finished_run_resumed_loads_and_serves_nothing(tmp_path, monkeypatch):
    import collabui.evaluation.miniwob as harness

    evaluate_miniwob(_config(), tmp_path, model=ScriptedChatModel(Flaky()), env_factory=_fake_factory([]),
                     progress=False)
    monkeypatch.setattr(harness, "_served", lambda *a: pytest.fail("a server started for no episode"))
    monkeypatch.setattr(harness, "_load_model", lambda *a: pytest.fail("a model loaded for no episode"))
    # The first run's clock is kept: its start, and its wall time under the rerun's few milliseconds.
    first = json.loads((tmp_path / "results.json").read_text())
    (tmp_path / "results.json").write_text(json.dumps({**first, "started": "2026-01-01T00:00:00+00:00",
                                                       "seconds": 700.0}))
    results = evaluate_miniwob(_config(), tmp_path, env_factory=_fake_factory([]), progress=False)
    assert results["overall"]["success_rate"]["n"] == 4
    assert results["started"] == "2026-01-01T00:00:00+00:00" and 700.0 <= results["seconds"] < 760.0


def test_more_episodes_on_rerun_only_runs_the_new_ones(tmp_path):
    evaluate_miniwob(_config(episodes=1), tmp_path, model=ScriptedChatModel(Flaky()),
                     env_factory=_fake_factory([]), progress=False)
    more = Flaky()
    results = evaluate_miniwob(_config(episodes=2), tmp_path, model=ScriptedChatModel(more),
                               env_factory=_fake_factory([]), progress=False)
    assert more.count == 2 and results["overall"]["success_rate"]["n"] == 4


def test_screenshots_on_or_off_resume_the_same_folder(tmp_path):
    evaluate_miniwob(_config(episodes=1), tmp_path, model=ScriptedChatModel(Flaky()),
                     env_factory=_fake_factory([]), progress=False)
    more = Flaky()
    results = evaluate_miniwob(_config(episodes=2, team={"screenshots": True}), tmp_path,
                               model=ScriptedChatModel(more), env_factory=_fake_factory([]), progress=False)
    assert more.count == 2 and results["overall"]["success_rate"]["n"] == 4


def test_other_configuration_in_the_same_folder_is_refused(tmp_path):
    evaluate_miniwob(_config(episodes=1), tmp_path, model=ScriptedChatModel(Flaky()),
                     env_factory=_fake_factory([]), progress=False)
    with pytest.raises(ConfigError, match="holds a run with other max_steps, seed; use another --out"):
        evaluate_miniwob(_config(episodes=1, team={"seed": 5, "max_steps": 3}), tmp_path, model=ScriptedChatModel(Flaky()),
                         env_factory=_fake_factory([]), progress=False)


def test_baselines_default_to_a_single_agent_and_models_to_the_paper_team():
    from collabui.evaluation.miniwob import default_team

    def shape(config):
        return config.team.n_agents, config.team.rounds

    assert shape(MiniWoBEvalConfig(model="random:3")) == (1, 1)
    assert shape(MiniWoBEvalConfig(model="lexical", team=default_team("lexical", n_agents=4))) == (4, 1)
    assert shape(MiniWoBEvalConfig(model="smollm2")) == (4, 3)
    # a team given is the team run, whatever the model
    assert shape(MiniWoBEvalConfig(model="random", team=TeamConfig(max_steps=3))) == (4, 3)
    with pytest.raises(ConfigError, match="concurrency must be an integer >= 1"):
        MiniWoBEvalConfig(concurrency=0)
    with pytest.raises(ConfigError, match="team must be a TeamConfig"):
        MiniWoBEvalConfig(team={"n_agents": 1})


@pytest.mark.parametrize("concurrency", [1, 2])
def test_a_failed_reset_is_retried_on_a_fresh_device(tmp_path, concurrency, caplog):
    from collabui.errors import DeviceError

    devices, failed = [], []

    def make(name):
        device = _fake_factory(devices)(name)
        if not failed:  # the first device ever made breaks at reset, like a timed-out task page
            failed.append(device)

            def broken(*args, **kwargs):
                raise DeviceError("browser operation failed: Page.wait_for_function: Timeout 2000ms exceeded.")

            device.reset, device.areset = broken, _async(broken)
        return device

    model = ScriptedChatModel(lambda r: OK)
    results = evaluate_miniwob(_config(tasks="click-button", episodes=2, concurrency=concurrency), tmp_path,
                               model=model, env_factory=make, progress=False)
    assert results["overall"]["success_rate"]["successes"] == 2 and results["counts"]["errors"] == 0
    assert failed[0].closed and failed[0] not in devices[1:], "the broken device was closed and replaced"
    assert any("reset failed" in r.getMessage() and r.levelname == "WARNING" for r in caplog.records)


@pytest.mark.parametrize("concurrency", [1, 2])
def test_a_reset_failing_on_the_fresh_device_too_is_raised(tmp_path, concurrency, caplog):
    """Two tries per episode (the first device, then a fresh one), never a third: the second
    failure is real and raised as it is."""
    from collabui.errors import DeviceError

    devices = []

    def make(name):
        device = _fake_factory(devices)(name)
        n = len(devices)

        def broken(*args, **kwargs):
            raise DeviceError(f"reset failed on device {n}")

        device.reset, device.areset = broken, _async(broken)
        return device

    with pytest.raises(DeviceError, match="reset failed on device 2"):
        evaluate_miniwob(_config(tasks="click-button", episodes=1, concurrency=concurrency), tmp_path,
                         model=ScriptedChatModel(lambda r: OK), env_factory=make, progress=False)
    assert len(devices) == 2
    assert sum("reset failed on device 1" in r.getMessage() for r in caplog.records) == 1


def _async(fn):
    async def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)

    return wrapper


def test_unparsable_proposals_are_counted(tmp_path):
    model = ScriptedChatModel(lambda r: "I would click OK")
    results = evaluate_miniwob(_config(tasks="click-button", episodes=1), tmp_path, model=model,
                               env_factory=_fake_factory([]), progress=False)
    assert results["counts"]["unparsable"] == results["counts"]["proposals"] == 2
    assert results["overall"]["success_rate"]["value"] == 0.0
    assert results["overall"]["unparsable_rate"]["value"] == 1.0
    assert results["breakdown"]["per_task"]["click-button"]["unparsable_rate"]["n"] == 2


def test_typing_one_text_three_times_running_is_a_typing_loop(tmp_path):
    """The loop strong MARL updates made held out: a text typed again and again. An episode that
    types it three times running counts; one of two typings (enter-password's) does not."""
    from collabui.evaluation.miniwob import typing_loop

    def typing(request):  # focus-text's episodes type their text into the OK button's place
        if "focus-text" in request.messages[-1]["content"]:
            return 'Action: {"action": "type_string", "element_id": "C", "content": "hi", "press_enter": false}'
        return 'Action: {"action": "click", "element_id": "C"}'

    results = evaluate_miniwob(_config(episodes=1, team={"max_steps": 3}), tmp_path, model=ScriptedChatModel(typing),
                               env_factory=_fake_factory([]), progress=False)
    assert results["overall"]["typing_loop_rate"]["successes"] == 1 and results["overall"]["typing_loop_rate"]["n"] == 2
    per_task = results["breakdown"]["per_task"]
    assert per_task["focus-text"]["typing_loop_rate"]["value"] == 1.0
    assert per_task["click-button"]["typing_loop_rate"]["value"] == 0.0
    hi, bye = ({"action": "type_string", "element_id": e, "content": t} for e, t in (("A", "hi"), ("B", "bye")))
    assert not typing_loop([hi, hi, bye, hi])  # twice running, then again after another text
    assert typing_loop([bye, hi, {**hi, "element_id": "Z"}, hi])  # three fields, one text
    assert not typing_loop([hi, {"action": "click", "element_id": "A"}, hi, hi])


def test_prompt_tokens_per_answer_is_the_mean_over_the_traced_answers(tmp_path):
    import json

    results = evaluate_miniwob(_config(tasks="click-button", episodes=2), tmp_path,
                               model=ScriptedChatModel(lambda r: OK), env_factory=_fake_factory([]), progress=False)
    counts = [p["prompt_tokens"] for f in (tmp_path / "traces").glob("*.jsonl") for line in f.open()
              if (rec := json.loads(line))["type"] == "step" for row in rec["proposals"] for p in row]
    assert len(counts) == results["counts"]["proposals"] > 0 and min(counts) > 0
    assert results["counts"]["prompt_tokens_per_answer"] == round(sum(counts) / len(counts), 1)


# -- runner directly ---------------------------------------------------------------------------


def test_runner_concurrency_keeps_spec_order_and_progress_lines(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="collabui")
    team = CollabAgentTeam(ScriptedChatModel(Flaky()), n_agents=1, rounds=1, max_steps=1)
    specs = episode_specs(["a", "b", "c"], 2, tag="t", seed_parts=(0,))
    envs = EnvPool("miniwob", _fake_factory([]))
    try:
        records = run_episodes(team, specs, envs, trace_dir=tmp_path / "tr", manifest=tmp_path / "m.jsonl",
                               label="test", concurrency=3)
    finally:
        envs.close()
    assert [r["episode_id"] for r in records] == [s.episode_id for s in specs]
    assert all(r["success"] for r in records)
    lines = [x for x in caplog.messages if x.startswith("[test ")]
    assert len(lines) == 6 and all("success in 1 steps" in x for x in lines)


def test_runner_draws_a_bar_on_a_terminal(tmp_path, monkeypatch, caplog):
    from tests.test_progress import _terminal

    terminal = _terminal(monkeypatch)
    caplog.set_level(logging.INFO, logger="collabui")
    team = CollabAgentTeam(ScriptedChatModel(Flaky()), n_agents=1, rounds=1, max_steps=1)
    specs = episode_specs(["a", "b"], 1, tag="t", seed_parts=(0,))
    envs = EnvPool("miniwob", _fake_factory([]))
    try:
        run_episodes(team, specs, envs, trace_dir=tmp_path / "tr", manifest=tmp_path / "m.jsonl", label="test")
    finally:
        envs.close()
    assert "test episodes" in terminal.getvalue() and "2/2" in terminal.getvalue()
    assert len([m for m in caplog.messages if m.startswith("[test ")]) == 2, "the log lines stay"


def test_runner_rejects_bad_concurrency(tmp_path):
    with pytest.raises(ConfigError, match="concurrency must be an integer >= 1"):
        run_episodes(None, [], EnvPool("miniwob"), trace_dir=tmp_path, manifest=tmp_path / "m", label="x",
                     concurrency=0)


def test_keyboard_interrupt_cancels_workers_and_closes_devices(tmp_path):
    devices = []
    team = CollabAgentTeam(ScriptedChatModel(Flaky(at=3, exc=KeyboardInterrupt)), n_agents=1, rounds=1,
                           max_steps=1)
    specs = episode_specs(["a", "b"], 3, tag="t", seed_parts=(0,))
    envs = EnvPool("miniwob", _fake_factory(devices))
    with pytest.raises(KeyboardInterrupt):
        try:
            run_episodes(team, specs, envs, trace_dir=tmp_path / "tr", manifest=tmp_path / "m.jsonl",
                         label="x", progress=False, concurrency=2)
        finally:
            envs.close()
    assert devices and all(d.closed for d in devices)
    # Only finished episodes are recorded: the third request fails, so at most 2 episodes
    # finished, and at least 1 (which ones depends on how the two workers interleave).
    assert 1 <= len(read_manifest(tmp_path / "m.jsonl")) <= 2


# -- real MiniWoB++ in real Chromium ----------------------------------------------------------


@pytest.fixture
def opened(monkeypatch):
    """Devices the default factory (``make_env``, one browser per worker for all tasks) opens."""
    from collabui.devices import registry

    real, devices = registry.make_env, []

    def counting(name, **kw):
        devices.append(real(name, **kw))
        return devices[-1]

    monkeypatch.setattr(registry, "make_env", counting)
    return devices


def _click_named_button(request):
    """Clicks the button the click-button task names (its element id read from the prompt)."""
    import re

    prompt = request.messages[-1]["content"]
    wanted = re.search(r'Click on the "(.+?)" button', prompt).group(1)
    element = re.search(r"<button\[(\w+)\]\| " + re.escape(wanted) + ">", prompt).group(1)
    return f'Action: {{"action": "click", "element_id": "{element}"}}'


@pytest.mark.browser
def test_two_real_browsers_in_parallel_then_none_left(tmp_path, opened):
    before = chromium_descendants()
    config = MiniWoBEvalConfig(tasks="click-button", episodes=4, model="scripted", concurrency=2,
                               team=TeamConfig(n_agents=1, rounds=1, max_steps=2))
    results = evaluate_miniwob(config, tmp_path, model=ScriptedChatModel(_click_named_button), progress=False)
    assert results["overall"]["success_rate"]["value"] == 1.0  # real pages, real rewards
    assert len(opened) == 2  # one browser per worker
    assert chromium_descendants() - before == set()


@pytest.mark.browser
@pytest.mark.parametrize("exc", [RuntimeError, KeyboardInterrupt])
def test_failure_mid_run_leaves_no_chromium_and_resumes(tmp_path, exc, opened):
    before = chromium_descendants()
    config = MiniWoBEvalConfig(tasks="click-button,click-test", episodes=2, model="scripted", concurrency=2,
                               team=TeamConfig(n_agents=1, rounds=1, max_steps=1))
    with pytest.raises(exc):
        evaluate_miniwob(config, tmp_path, model=ScriptedChatModel(Flaky(at=3, exc=exc)), progress=False)
    assert len(opened) == 2 and chromium_descendants() - before == set()
    finished = len(read_manifest(tmp_path / "episodes.jsonl"))
    assert finished < 4
    again = Flaky()
    results = evaluate_miniwob(config, tmp_path, model=ScriptedChatModel(again), progress=False)
    assert again.count == 4 - finished and results["counts"]["episodes"] == 4
    assert chromium_descendants() - before == set()


def test_prompt_style_and_budget_reach_the_agents_and_the_folder_check(tmp_path):
    """A team trained on compact prompts (the CPU recipe) is evaluated on compact prompts."""
    model = ScriptedChatModel(Flaky())
    evaluate_miniwob(_config(tasks="click-button", episodes=1, team={"prompt_style": "compact", "max_new_tokens": 48}),
                     tmp_path, model=model, env_factory=_fake_factory([]), progress=False)
    [request] = model.requests
    assert request.max_new_tokens == 48 and "Available actions (JSON)" not in request.messages[0]["content"]
    with pytest.raises(ConfigError, match="prompt_style"):
        evaluate_miniwob(_config(tasks="click-button", episodes=1), tmp_path, model=ScriptedChatModel(Flaky()),
                         env_factory=_fake_factory([]), progress=False)
    with pytest.raises(ConfigError, match="prompt_style 'long' is unknown"):
        _config(team={"prompt_style": "long"})


def test_page_options_are_recorded_and_guard_the_folder(tmp_path):
    config = _config(episodes=1, element_format="text-first", shuffle_elements=True)
    assert config.env_options() == {"screenshots": False, "element_format": "text-first",
                                    "shuffle_elements": True}
    results = evaluate_miniwob(config, tmp_path, model=ScriptedChatModel(Flaky()),
                               env_factory=_fake_factory([]), progress=False)
    assert results["data"]["element_format"] == "text-first" and results["data"]["shuffle_elements"]
    run = json.loads((tmp_path / "run.json").read_text())
    assert (run["element_format"], run["shuffle_elements"]) == ("text-first", True)
    with pytest.raises(ConfigError, match="holds a run with other element_format, shuffle_elements"):
        evaluate_miniwob(_config(episodes=1), tmp_path, model=ScriptedChatModel(Flaky()),
                         env_factory=_fake_factory([]), progress=False)
    # A folder made before these options existed was made with html, unshuffled.
    old = tmp_path / "old"
    evaluate_miniwob(_config(episodes=1), old, model=ScriptedChatModel(Flaky()),
                     env_factory=_fake_factory([]), progress=False)
    fingerprint = json.loads((old / "run.json").read_text())
    del fingerprint["element_format"], fingerprint["shuffle_elements"]
    (old / "run.json").write_text(json.dumps(fingerprint))
    evaluate_miniwob(_config(episodes=1), old, model=ScriptedChatModel(Flaky()),
                     env_factory=_fake_factory([]), progress=False)


def test_the_run_folder_stores_the_whole_config_and_repeats_the_run(tmp_path):
    """run.json holds the config (team included); loaded back it reruns the same episodes."""
    from collabui.evaluation.miniwob import load_run_config

    config = _config(tasks="click-button", episodes=2, shuffle_elements=True,
                     team={"n_agents": 2, "topology": "chain", "seed": 4, "temperatures": (0.0, 0.7),
                           "max_new_tokens": 32})
    first = ScriptedChatModel(Flaky())
    results = evaluate_miniwob(config, tmp_path / "a", model=first, env_factory=_fake_factory([]), progress=False)
    stored = json.loads((tmp_path / "a" / "run.json").read_text())["config"]
    assert stored["team"]["temperatures"] == [0.0, 0.7] and stored["team"]["topology"] == "chain"
    loaded = load_run_config(tmp_path / "a")
    assert loaded == config
    again = ScriptedChatModel(Flaky())
    repeat = evaluate_miniwob(loaded, tmp_path / "b", model=again, env_factory=_fake_factory([]), progress=False)
    assert [(r.seed, r.temperature, r.max_new_tokens) for r in again.requests] == \
        [(r.seed, r.temperature, r.max_new_tokens) for r in first.requests]
    assert repeat["system"] == results["system"] and repeat["data"] == results["data"]


def test_a_folder_from_before_stored_configs_still_loads(tmp_path):
    from collabui.evaluation.miniwob import load_run_config

    config = _config(tasks="click-button", episodes=1, team={"temperatures": (0.2,)})
    evaluate_miniwob(config, tmp_path, model=ScriptedChatModel(Flaky()), env_factory=_fake_factory([]),
                     progress=False)
    run = json.loads((tmp_path / "run.json").read_text())
    del run["config"]
    (tmp_path / "run.json").write_text(json.dumps(run))
    loaded = load_run_config(tmp_path)
    assert loaded == config and loaded.team.temperatures == (0.2,)
    # and the folder resumes with it (its fingerprint is what it always was)
    evaluate_miniwob(loaded, tmp_path, model=ScriptedChatModel(Flaky()), env_factory=_fake_factory([]),
                     progress=False)


@pytest.mark.parametrize(("options", "match"), [
    ({"element_format": "xml"}, r"element_format must be one of \['html', 'text-first', 'text-first-ordinal', 'text-first-typed'\]"),
    ({"shuffle_elements": 1}, "shuffle_elements must be True or False"),
    ({"mobile": True, "shuffle_elements": True}, "apply to web pages"),
    ({"mobile": True, "element_format": "text-first"}, "apply to web pages"),
])
def test_bad_page_options_fail_early(options, match):
    with pytest.raises(ConfigError, match=match):
        _config(**options)


def _click_named_button_text_first(request):
    """Clicks the button the click-button task names, read from a text-first screen."""
    prompt = request.messages[-1]["content"]
    wanted = re.search(r'Click on the "(.+?)" button', prompt).group(1)
    element = re.search(r'^button "' + re.escape(wanted) + r'" \[(\w+)\]$', prompt, re.M).group(1)
    return f'Action: {{"action": "click", "element_id": "{element}"}}'


@pytest.mark.browser
def test_parallel_browsers_get_the_page_options(tmp_path, opened):
    config = MiniWoBEvalConfig(tasks="click-button", episodes=4, model="scripted", concurrency=2,
                               team=TeamConfig(n_agents=1, rounds=1, max_steps=2), element_format="text-first",
                               shuffle_elements=True)
    results = evaluate_miniwob(config, tmp_path, model=ScriptedChatModel(_click_named_button_text_first),
                               progress=False)
    assert results["overall"]["success_rate"]["value"] == 1.0  # shuffled ids still hit their buttons
    assert len(opened) == 2
    assert all((d.config.element_format, d.config.shuffle_elements) == ("text-first", True) for d in opened)
    trace = next((tmp_path / "traces").glob("*.jsonl")).read_text().splitlines()
    step = next(json.loads(line) for line in trace if '"observation"' in line)
    assert re.search(r'^button ".+" \[[A-Z]+\]$', step["observation"]["text"], re.M)
