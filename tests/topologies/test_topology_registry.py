"""Tests for collabui.topologies.registry: names, edge specs, custom factories."""

from __future__ import annotations

import pytest

from collabui.errors import TopologyError
from collabui.topologies import (
    Chain,
    Custom,
    RandomDAG,
    Topology,
    list_topologies,
    make_topology,
    parse_edge_spec,
    register_topology,
    registry,
)


@pytest.fixture
def clean_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))


def test_builtin_names_listed() -> None:
    assert {"random", "chain", "star", "layered", "complete", "independent"} <= set(
        list_topologies())


@pytest.mark.parametrize("name", ["random", "chain", "star", "layered", "complete",
                                  "independent"])
def test_each_name_builds_a_topology(name: str) -> None:
    topo = make_topology(name, 4, seed=1)
    assert isinstance(topo, Topology) and topo.n_agents == 4
    assert topo.kind == name
    assert Topology.from_dict(topo.to_dict()) == topo


def test_random_seed_passed_and_case_insensitive() -> None:
    assert make_topology("random", 5, seed=3) == RandomDAG(5, seed=3)
    assert make_topology(" Chain ", 3) == Chain(3)


def test_edge_spec() -> None:
    topo = make_topology("edges:0-1,1-2,0-3", 4)
    assert isinstance(topo, Custom)
    assert topo.edges == ((0, 1), (0, 3), (1, 2))
    assert make_topology(topo.to_spec(), 4) == topo
    assert parse_edge_spec("edges: 0 -> 1 , 2-1,") == [(0, 1), (2, 1)]
    assert make_topology("edges:", 3).edges == ()


@pytest.mark.parametrize("spec,token", [("edges:0-1,1_2", "1_2"), ("edges:0-1,a-b", "a-b"),
                                        ("edges:0-1-2", "0-1-2"), ("edges:-1-2", "-1-2")])
def test_edge_spec_bad_token_named(spec: str, token: str) -> None:
    with pytest.raises(TopologyError, match=f"bad token '{token}'"):
        make_topology(spec, 3)


def test_edge_spec_graph_errors() -> None:
    with pytest.raises(TopologyError, match="cycle 0 -> 1 -> 0"):
        make_topology("edges:0-1,1-0", 2)
    with pytest.raises(TopologyError, match="names agent 5"):
        make_topology("edges:0-5", 3)


def test_unknown_name_lists_known_and_close_match() -> None:
    with pytest.raises(TopologyError) as info:
        make_topology("chian", 3)
    msg = str(info.value)
    assert "did you mean 'chain'" in msg
    for name in ("random", "star", "layered", "complete", "independent"):
        assert name in msg
    with pytest.raises(TopologyError, match="unknown topology 'zzz'; known"):
        make_topology("zzz", 3)
    with pytest.raises(TopologyError, match="give a name"):
        make_topology(3, 3)  # type: ignore[arg-type]


def test_register_round_trip(clean_registry: None) -> None:
    def reverse_chain(n_agents: int, *, seed: int | None = None) -> Topology:
        return Custom(n_agents, [(i + 1, i) for i in range(n_agents - 1)])

    register_topology("reverse-chain", reverse_chain)
    assert "reverse-chain" in list_topologies()
    assert make_topology("reverse-chain", 3).edges == ((1, 0), (2, 1))
    with pytest.raises(TopologyError, match="already registered"):
        register_topology("reverse-chain", reverse_chain)
    register_topology("reverse-chain", lambda n, *, seed=None: Chain(n), replace=True)
    assert make_topology("reverse-chain", 3) == Chain(3)


def test_register_validation(clean_registry: None) -> None:
    with pytest.raises(TopologyError, match="invalid"):
        register_topology("Bad Name", lambda n, *, seed=None: Chain(n))
    with pytest.raises(TopologyError, match="invalid"):
        register_topology("edges:x", lambda n, *, seed=None: Chain(n))
    with pytest.raises(TopologyError, match="not callable"):
        register_topology("thing", 5)  # type: ignore[arg-type]
    register_topology("broken", lambda n, *, seed=None: "nope")  # type: ignore[return-value]
    with pytest.raises(TopologyError, match="not a Topology"):
        make_topology("broken", 3)
    register_topology("wrong-size", lambda n, *, seed=None: Chain(n + 1))
    with pytest.raises(TopologyError, match="has 4 agents but the team has 3"):
        make_topology("wrong-size", 3)


def test_make_topology_accepts_instance() -> None:
    topo = Chain(3)
    assert make_topology(topo, 3) is topo
    with pytest.raises(TopologyError, match="has 3 agents but the team has 4"):
        make_topology(topo, 4)
