"""Configs round-trip through JSON: ``from_dict(json(to_dict()))`` is the same config, nested
TeamConfig and tuples included."""

import json

import pytest

from collabui.config import TeamConfig
from collabui.errors import ConfigError


def _json(data):
    return json.loads(json.dumps(data))


def test_team_config_round_trips_with_tuples_and_a_topology_object():
    from collabui.topologies import make_topology

    team = TeamConfig(n_agents=2, rounds=1, temperatures=(0.2, 0.4), adapters=("agent0", None),
                      topology=make_topology("random", 2, seed=3), max_steps=5, prompt_style="compact")
    data = _json(team.to_dict())
    assert data["temperatures"] == [0.2, 0.4] and data["topology"]["kind"] == "random"
    back = TeamConfig.from_dict(data)
    assert back == team and isinstance(back.temperatures, tuple) and isinstance(back.adapters, tuple)


def test_team_config_keeps_unset_fields_unset():
    """The stored form keeps None (not the effective defaults the trace shows), so a stored
    team can be given another n_agents."""
    data = _json(TeamConfig().to_dict())
    assert data["temperatures"] is None and data["adapters"] is None
    assert TeamConfig.from_dict({**data, "n_agents": 2}).n_agents == 2
    assert TeamConfig().trace_dict()["temperatures"] == [0.1, 0.3, 0.5, 0.8]


def test_old_and_bad_team_dicts():
    assert TeamConfig.from_dict({"n_agents": 2}) == TeamConfig(n_agents=2)  # missing: defaults
    with pytest.raises(ConfigError, match=r"no field\(s\) \['voting'\]"):
        TeamConfig.from_dict({"voting": "x"})
    with pytest.raises(ConfigError, match=r"vote 'x' is unknown; use one of \['exact', 'target'\]"):
        TeamConfig.from_dict({"vote": "x"})
    with pytest.raises(ConfigError, match="n_agents must be an integer"):
        TeamConfig.from_dict({"n_agents": 0})
    with pytest.raises(ConfigError, match="JSON object"):
        TeamConfig.from_dict(["n_agents"])


def test_eval_config_round_trips_with_its_team():
    from collabui.evaluation.miniwob import MiniWoBEvalConfig

    config = MiniWoBEvalConfig(tasks="click-button,focus-text", episodes=2, model="lexical", shuffle_elements=True,
                               team=TeamConfig(n_agents=2, rounds=1, temperatures=(0.0, 0.5), seed=4))
    data = _json(config.to_dict())
    assert data["team"]["temperatures"] == [0.0, 0.5] and data["element_format"] == "html"
    assert MiniWoBEvalConfig.from_dict(data) == config
    baseline = MiniWoBEvalConfig(model="random")  # the default team, resolved, is what is stored
    assert MiniWoBEvalConfig.from_dict(_json(baseline.to_dict())).team.n_agents == 1
    with pytest.raises(ConfigError, match=r"no field\(s\) \['n_agents'\]"):
        MiniWoBEvalConfig.from_dict({**data, "n_agents": 2})


def test_marl_config_round_trips_and_reads_the_old_flat_form():
    from collabui.training.marl import MARLConfig

    config = MARLConfig(train_tasks=("click-button",), eval_tasks=("focus-text",), dpo={"max_steps": 2},
                        team=TeamConfig(n_agents=2, rounds=1, seed=9, max_steps=2, prompt_style="compact"))
    data = _json(config.to_dict())
    assert data["train_tasks"] == ["click-button"] and data["team"]["seed"] == 9
    back = MARLConfig.from_dict(data)
    assert back == config and back.train_tasks == ("click-button",)
    # state.json of runs started before the team was nested held its fields flat
    old = {k: v for k, v in data.items() if k != "team"}
    old.update(n_agents=2, rounds=1, seed=9, max_steps=2, max_new_tokens=64, prompt_style="compact", topology="random")
    assert MARLConfig.from_dict(old) == config


def test_bench_settings_round_trip():
    from collabui.bench import BenchSettings

    settings = BenchSettings(backend="local", team=TeamConfig(n_agents=2, rounds=2, topology="chain"), browsers=3)
    assert BenchSettings.from_dict(_json(settings.to_dict())) == settings
