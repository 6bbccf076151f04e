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
    with pytest.raises(ConfigError, match=r"no field\(s\) \['vote'\]"):
        TeamConfig.from_dict({"vote": "x"})
    with pytest.raises(ConfigError, match="n_agents must be an integer"):
        TeamConfig.from_dict({"n_agents": 0})
    with pytest.raises(ConfigError, match="JSON object"):
        TeamConfig.from_dict(["n_agents"])
