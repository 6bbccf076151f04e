"""Tests for collabui.topologies: builtins, queries, edge update, validation, serialization."""

from __future__ import annotations

import json
import pickle

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collabui.errors import TopologyError
from collabui.topologies import (
    Chain,
    Complete,
    Custom,
    Independent,
    Layered,
    RandomDAG,
    Star,
    Topology,
)

ALL_KINDS = [
    RandomDAG(5, seed=3, edge_prob=0.4),
    Chain(4),
    Star(4, center=2),
    Layered(5, layers=(1, 3, 1)),
    Complete(4, order=(3, 1, 0, 2)),
    Independent(3),
    Custom(4, [(0, 3), (1, 3), (3, 2)]),
]


def _respects(topo: Topology) -> bool:
    pos = {node: k for k, node in enumerate(topo.topological_order())}
    return all(pos[s] < pos[d] for s, d in topo.edges)


# ---------------------------------------------------------------------------- RandomDAG
@pytest.mark.parametrize("n", range(1, 9))
def test_random_dag_acyclic_for_many_seeds(n: int) -> None:
    for seed in range(200):
        topo = RandomDAG(n, seed=seed)
        assert nx.is_directed_acyclic_graph(topo.graph)
        assert sorted(topo.topological_order()) == list(range(n))
        assert _respects(topo)
        assert all(0 <= s < n and 0 <= d < n and s != d for s, d in topo.edges)


def test_random_dag_deterministic_per_seed() -> None:
    assert RandomDAG(6, seed=11).edges == RandomDAG(6, seed=11).edges
    # Different seeds give different graphs at least sometimes.
    assert len({RandomDAG(6, seed=s).edges for s in range(20)}) > 10


def test_random_dag_edge_prob_extremes() -> None:
    assert RandomDAG(5, seed=1, edge_prob=0.0).edges == ()
    full = RandomDAG(5, seed=1, edge_prob=1.0)
    assert len(full.edges) == 10
    assert full.longest_path_nodes == 5


def test_random_dag_uses_both_directions_across_seeds() -> None:
    # A real subgraph of K_n, not only of the 0..n-1 order: some edge goes "backwards".
    assert any(s > d for seed in range(20) for s, d in RandomDAG(4, seed=seed).edges)


def test_random_dag_without_seed_records_one() -> None:
    topo = RandomDAG(4)
    assert isinstance(topo.seed, int)
    assert RandomDAG(4, seed=topo.seed).edges == topo.edges


@pytest.mark.parametrize("n", [3, 4, 6])
def test_resample_deterministic_and_different(n: int) -> None:
    for seed in range(30):
        topo = RandomDAG(n, seed=seed)
        nxt = topo.resample()
        assert nxt.edges != topo.edges
        assert nxt == topo.resample()
        assert nxt.edge_prob == topo.edge_prob
        # The recorded seed reproduces the new DAG.
        assert RandomDAG(n, seed=nxt.seed).edges == nxt.edges
        explicit = topo.resample(seed=99)
        assert explicit == topo.resample(seed=99)
        assert explicit.edges != topo.edges


def test_resample_with_seed_uses_that_seed() -> None:
    topo = RandomDAG(5, seed=0)
    target = RandomDAG(5, seed=42)
    assert target.edges != topo.edges
    assert topo.resample(seed=42).seed == 42
    assert topo.resample(seed=42).edges == target.edges


def test_resample_chain_reproducible() -> None:
    def chain(seed: int) -> list[tuple]:
        topo, out = RandomDAG(5, seed=seed), []
        for _ in range(10):
            topo = topo.resample()
            out.append(topo.edges)
        return out

    assert chain(7) == chain(7)
    assert chain(7) != chain(8)


@pytest.mark.parametrize("n", [2, 4, 7])
def test_resample_chain_stays_a_dag_subgraph_of_the_complete_graph(n: int) -> None:
    # Checked on the raw edge list with networkx, independently of Topology's own validation.
    topo = RandomDAG(n, seed=n)
    for _ in range(25):
        nxt = topo.resample()
        assert nxt.n_agents == n and nxt.edges != topo.edges
        assert len(set(nxt.edges)) == len(nxt.edges)
        assert all(0 <= s < n and 0 <= d < n and s != d for s, d in nxt.edges)
        assert nx.is_directed_acyclic_graph(nx.DiGraph(list(nxt.edges)))
        topo = nxt


def test_resample_cannot_differ_for_one_agent_or_zero_prob() -> None:
    assert RandomDAG(1, seed=0).resample().edges == ()
    assert RandomDAG(4, seed=0, edge_prob=0.0).resample().edges == ()


def test_fixed_topologies_resample_to_themselves() -> None:
    for topo in ALL_KINDS[1:]:
        assert topo.resample() is topo
        assert topo.resample(seed=5) is topo


# ----------------------------------------------------------------------------- builtins
def test_chain_edges() -> None:
    assert Chain(4).edges == ((0, 1), (1, 2), (2, 3))
    assert Chain(1).edges == ()


def test_star_edges() -> None:
    assert Star(4).edges == ((0, 1), (0, 2), (0, 3))
    assert Star(4, center=2).edges == ((2, 0), (2, 1), (2, 3))
    assert Star(4, center=2).layers() == ((2,), (0, 1, 3))


def test_layered_edges() -> None:
    assert Layered(4).edges == ((0, 2), (0, 3), (1, 2), (1, 3))
    assert Layered(5).layer_sizes == (2, 3)
    assert Layered(1).edges == ()
    topo = Layered(4, layers=(1, 2, 1))
    assert topo.edges == ((0, 1), (0, 2), (1, 3), (2, 3))
    assert topo.layers() == ((0,), (1, 2), (3,))


def test_complete_edges() -> None:
    assert Complete(3).edges == ((0, 1), (0, 2), (1, 2))
    assert Complete(3, order=[2, 0, 1]).edges == ((0, 1), (2, 0), (2, 1))
    assert Complete(3, order=[2, 0, 1]).topological_order() == (2, 0, 1)


def test_independent_and_custom_edges() -> None:
    assert Independent(3).edges == ()
    assert Independent(3).layers() == ((0, 1, 2),)
    assert Custom(3, [(1, 2), (0, 2), (1, 2)]).edges == ((0, 2), (1, 2))  # duplicate merged


def test_from_networkx() -> None:
    g = nx.DiGraph([(2, 0), (0, 1)])
    g.add_node(3)
    topo = Topology.from_networkx(g)
    assert isinstance(topo, Custom)
    assert topo.n_agents == 4 and topo.edges == ((0, 1), (2, 0))
    assert Custom.from_networkx(g) == topo
    with pytest.raises(TopologyError, match="not 0..1"):
        Topology.from_networkx(nx.DiGraph([(1, 2)]))
    with pytest.raises(TopologyError, match="not an int"):
        Topology.from_networkx(nx.DiGraph([("a", 0)]))
    with pytest.raises(TopologyError, match="DiGraph"):
        Topology.from_networkx(nx.Graph([(0, 1)]))


# ------------------------------------------------------------------------------ queries
def test_queries_on_custom_graph() -> None:
    topo = Custom(5, [(3, 0), (3, 1), (0, 2), (1, 2), (4, 2)])
    assert topo.predecessors(2) == (0, 1, 4)
    assert topo.successors(3) == (0, 1)
    assert topo.topological_order() == (3, 0, 1, 4, 2)
    assert topo.layers() == ((3, 4), (0, 1), (2,))
    assert [topo.depth(i) for i in range(5)] == [1, 1, 2, 0, 0]
    assert topo.longest_path_nodes == 3
    with pytest.raises(TopologyError, match="agent 7 is not in this topology"):
        topo.predecessors(7)


def test_layers_respect_every_edge() -> None:
    for seed in range(50):
        topo = RandomDAG(6, seed=seed)
        layer_of = {node: k for k, layer in enumerate(topo.layers()) for node in layer}
        assert all(layer_of[s] < layer_of[d] for s, d in topo.edges)
        assert len(topo.layers()) == topo.longest_path_nodes
        assert topo.longest_path_nodes == nx.dag_longest_path_length(topo.graph) + 1


def test_graph_is_a_fresh_copy_and_topology_is_frozen() -> None:
    topo = Chain(3)
    g = topo.graph
    g.add_edge(2, 0)
    assert topo.graph.number_of_edges() == 2
    assert sorted(topo.graph.nodes) == [0, 1, 2]
    with pytest.raises(AttributeError):
        topo._edges = ()  # type: ignore[misc]
    with pytest.raises(AttributeError):
        topo.foo = 1  # type: ignore[attr-defined]


def test_equality_hash_repr_describe() -> None:
    assert Chain(3) == Custom(3, [(0, 1), (1, 2)])
    assert hash(Chain(3)) == hash(Custom(3, [(1, 2), (0, 1)]))
    assert Chain(3) != Chain(4)
    assert len({Chain(3), Custom(3, [(0, 1), (1, 2)]), Independent(3)}) == 2
    assert repr(Star(3, center=1)) == "Star(n_agents=3, center=1, edges=[(1, 0), (1, 2)])"
    line = RandomDAG(3, seed=5).describe()
    assert "\n" not in line and "random" in line and "seed 5" in line
    assert Chain(2).to_spec() == "edges:0-1"


# --------------------------------------------------------------------------- validation
def test_cycle_error_names_the_cycle() -> None:
    with pytest.raises(TopologyError) as info:
        Custom(4, [(0, 2), (2, 1), (1, 0), (3, 0)])
    msg = str(info.value)
    assert "cycle" in msg and "\n" not in msg
    assert "0 -> 2 -> 1 -> 0" in msg


def test_self_loop_unknown_node_and_bad_n() -> None:
    with pytest.raises(TopologyError, match=r"edge \(1, 1\) is a self-loop"):
        Custom(3, [(1, 1)])
    with pytest.raises(TopologyError, match=r"edge \(0, 3\) names agent 3, but agents are 0..2"):
        Custom(3, [(0, 3)])
    with pytest.raises(TopologyError, match="names agent -1"):
        Custom(3, [(-1, 0)])
    for bad_n in (0, -2, 1.5, "3", True):
        with pytest.raises(TopologyError, match="n_agents"):
            Chain(bad_n)  # type: ignore[arg-type]
    with pytest.raises(TopologyError, match="not a .src, dst. pair"):
        Custom(3, [5])  # type: ignore[list-item]
    with pytest.raises(TopologyError, match="has 3 items"):
        Custom(3, [(0, 1, 2)])  # type: ignore[list-item]


def test_builtin_parameter_errors() -> None:
    with pytest.raises(TopologyError, match=r"layer sizes \[2, 1\] sum to 3, not 4"):
        Layered(4, layers=(2, 1))
    with pytest.raises(TopologyError, match="all >= 1"):
        Layered(2, layers=(2, 0))
    with pytest.raises(TopologyError, match="center is 5"):
        Star(3, center=5)
    with pytest.raises(TopologyError, match="not a permutation"):
        Complete(3, order=[0, 0, 1])
    with pytest.raises(TopologyError, match="edge_prob"):
        RandomDAG(3, edge_prob=1.5)
    with pytest.raises(TopologyError, match="seed"):
        RandomDAG(3, seed="x")  # type: ignore[arg-type]
    with pytest.raises(TopologyError, match="abstract base"):
        Topology()


# ------------------------------------------------------------------------ serialization
@pytest.mark.parametrize("topo", ALL_KINDS, ids=lambda t: t.kind)
def test_to_dict_round_trip(topo: Topology) -> None:
    data = json.loads(json.dumps(topo.to_dict()))
    back = Topology.from_dict(data)
    assert type(back) is type(topo)
    assert back == topo
    assert back.to_dict() == topo.to_dict()
    assert pickle.loads(pickle.dumps(topo)).to_dict() == topo.to_dict()


def test_random_from_dict_keeps_seed_for_resample() -> None:
    topo = RandomDAG(5, seed=4)
    back = Topology.from_dict(topo.to_dict())
    assert back.seed == 4
    assert back.resample() == topo.resample()


def test_from_dict_errors() -> None:
    with pytest.raises(TopologyError, match="unknown topology kind 'ring'"):
        Topology.from_dict({"kind": "ring", "n_agents": 3, "edges": []})
    with pytest.raises(TopologyError, match="lacks edges"):
        Topology.from_dict({"kind": "chain", "n_agents": 3})
    with pytest.raises(TopologyError, match="kind 'custom'"):
        Topology.from_dict({"kind": "chain", "n_agents": 3, "edges": [[0, 2]]})
    with pytest.raises(TopologyError, match="bad params"):
        Topology.from_dict({"kind": "chain", "n_agents": 3, "edges": [], "params": {"x": 1}})
    with pytest.raises(TopologyError, match="cycle"):
        Topology.from_dict({"kind": "random", "n_agents": 2, "edges": [[0, 1], [1, 0]],
                            "seed": 1, "params": {"edge_prob": 0.5}})


# ------------------------------------------------------------------------------ property
@settings(max_examples=200, deadline=None)
@given(
    n=st.integers(min_value=1, max_value=7),
    edges=st.lists(st.tuples(st.integers(-1, 8), st.integers(-1, 8)), max_size=20),
)
def test_custom_is_dag_or_raises(n: int, edges: list[tuple[int, int]]) -> None:
    try:
        topo = Custom(n, edges)
    except TopologyError as exc:
        assert "\n" not in str(exc)
        return
    assert set(topo.edges) == set(edges)
    assert nx.is_directed_acyclic_graph(topo.graph)
    assert _respects(topo)
    assert sorted(topo.topological_order()) == list(range(n))
