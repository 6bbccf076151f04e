"""The immutable message graph (a DAG over agent ids ``0..n-1``) and its validation.

An edge ``i -> k`` means agent ``k`` reads agent ``i``'s output of the same round (paper
section 3.1). Every query a runner needs (predecessors, a deterministic order, layers of agents
that may run concurrently) is computed once at construction: a topology never changes, and the
edge update (``resample``) returns a *new* topology.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

import networkx as nx

from collabui.errors import TopologyError

__all__ = ["Topology", "Edge", "check_n_agents", "normalize_edges"]

#: One directed edge ``(src, dst)``: ``dst`` reads ``src``'s output.
Edge = tuple[int, int]

_FIX_CYCLE = "a message graph must be acyclic: drop one of these edges"


def _as_int(value: Any, what: str, fix: str) -> int:
    # bool is an int subclass, but True as an agent id is always a mistake.
    if isinstance(value, bool):
        raise TopologyError(f"{what} is {value!r}, a bool; {fix}")
    try:
        return operator.index(value)
    except TypeError:
        raise TopologyError(f"{what} is {value!r}, not an int; {fix}") from None


def check_n_agents(n_agents: Any) -> int:
    """Return ``n_agents`` as an int >= 1, or raise a one-line :class:`TopologyError`."""
    n = _as_int(n_agents, "n_agents", "give the team size as an int >= 1")
    if n < 1:
        raise TopologyError(f"n_agents is {n}; a team needs at least 1 agent")
    return n


def _check_edge(n: int, edge: Any) -> Edge:
    fix = f"an edge is a (src, dst) pair of agent ids in 0..{n - 1}"
    if isinstance(edge, (str, bytes)) or not isinstance(edge, Iterable):
        raise TopologyError(f"edge {edge!r} is not a (src, dst) pair; {fix}")
    pair = tuple(edge)
    if len(pair) != 2:
        raise TopologyError(f"edge {edge!r} has {len(pair)} items, not 2; {fix}")
    src = _as_int(pair[0], f"the source of edge {edge!r}", fix)
    dst = _as_int(pair[1], f"the target of edge {edge!r}", fix)
    for node in (src, dst):
        if not 0 <= node < n:
            raise TopologyError(
                f"edge ({src}, {dst}) names agent {node}, but agents are 0..{n - 1} "
                f"(n_agents={n}); use ids in that range or raise n_agents"
            )
    if src == dst:
        raise TopologyError(
            f"edge ({src}, {dst}) is a self-loop; an agent cannot read its own output "
            f"of the same round: drop it"
        )
    return (src, dst)


def _build_graph(n: int, edges: Iterable[Edge]) -> nx.DiGraph:
    graph = nx.DiGraph()
    graph.add_nodes_from(range(n))
    graph.add_edges_from(edges)
    return graph


def normalize_edges(n_agents: int, edges: Iterable[Any]) -> tuple[Edge, ...]:
    """Validate ``edges`` over ``n_agents`` agents and return them sorted and de-duplicated.

    Args:
        n_agents: The team size (already checked to be >= 1).
        edges: ``(src, dst)`` pairs of agent ids. Duplicates are merged silently.

    Returns:
        The sorted tuple of distinct edges.

    Raises:
        TopologyError: An edge is malformed, names an unknown agent, is a self-loop, or the edges
            form a cycle (the message names the cycle).
    """
    if isinstance(edges, (str, bytes)) or not isinstance(edges, Iterable):
        raise TopologyError(f"edges is {edges!r}; give a list of (src, dst) pairs")
    unique = sorted({_check_edge(n_agents, edge) for edge in edges})
    graph = _build_graph(n_agents, unique)
    try:
        cycle = nx.find_cycle(graph)
    except nx.NetworkXNoCycle:
        return tuple(unique)
    path = " -> ".join(str(node) for node in [cycle[0][0], *(dst for _, dst in cycle)])
    raise TopologyError(f"edges form a cycle {path}; {_FIX_CYCLE}")


class Topology:
    """An immutable DAG message graph over agents ``0..n_agents-1``.

    Subclasses set a ``kind`` (``class RandomDAG(Topology, kind="random")``) so that
    :meth:`from_dict` can rebuild them, and call :meth:`_setup` from ``__init__``. Equality and
    hashing use only ``(n_agents, edges)``: a ``Chain(3)`` equals the ``Custom`` with the same
    edges.
    """

    __slots__ = ("_n", "_edges", "_seed", "_params", "_preds", "_succs", "_order", "_depths")

    kind: ClassVar[str] = ""
    _KINDS: ClassVar[dict[str, type[Topology]]] = {}

    def __init_subclass__(cls, kind: str = "", **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if kind:
            cls.kind = kind
            Topology._KINDS[kind] = cls

    def __new__(cls, *args: Any, **kwargs: Any) -> Topology:
        if cls is Topology:
            raise TopologyError(
                "Topology is the abstract base; build Custom(n_agents, edges) or a builtin such "
                "as Chain(n_agents)"
            )
        return super().__new__(cls)

    def _setup(
        self,
        n_agents: Any,
        edges: Iterable[Any],
        *,
        seed: int | None = None,
        params: Mapping[str, Any] | None = None,
    ) -> None:
        """Validate and store the graph, then precompute every query (the object is frozen)."""
        n = check_n_agents(n_agents)
        norm = normalize_edges(n, edges)
        preds: list[list[int]] = [[] for _ in range(n)]
        succs: list[list[int]] = [[] for _ in range(n)]
        for src, dst in norm:
            succs[src].append(dst)
            preds[dst].append(src)
        # Lexicographic: among ready agents the smallest id goes first, so runs are reproducible.
        order = tuple(nx.lexicographical_topological_sort(_build_graph(n, norm)))
        depths = [0] * n
        for node in order:
            depths[node] = max((depths[p] + 1 for p in preds[node]), default=0)
        values = {
            "_n": n,
            "_edges": norm,
            "_seed": seed,
            "_params": dict(params or {}),
            "_preds": tuple(tuple(p) for p in preds),
            "_succs": tuple(tuple(s) for s in succs),
            "_order": order,
            "_depths": tuple(depths),
        }
        for name, value in values.items():
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable; resample() returns a new one")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickle / copy through the JSON form: one serialization path to keep correct.
        return (Topology.from_dict, (self.to_dict(),))

    # ----------------------------------------------------------------------------- queries
    @property
    def n_agents(self) -> int:
        """Number of agents (nodes ``0..n_agents-1``)."""
        return self._n

    @property
    def edges(self) -> tuple[Edge, ...]:
        """Sorted tuple of distinct ``(src, dst)`` edges."""
        return self._edges

    @property
    def seed(self) -> int | None:
        """The seed that produced this graph (random kinds), else None."""
        return self._seed

    @property
    def params(self) -> dict[str, Any]:
        """A copy of the kind's construction parameters (as in :meth:`to_dict`)."""
        return dict(self._params)

    @property
    def graph(self) -> nx.DiGraph:
        """A fresh ``networkx.DiGraph`` (nodes ``0..n-1``); mutating it does not touch self."""
        return _build_graph(self._n, self._edges)

    def _check_agent(self, agent: Any) -> int:
        i = _as_int(agent, "agent id", f"use an id in 0..{self._n - 1}")
        if not 0 <= i < self._n:
            raise TopologyError(
                f"agent {i} is not in this topology; agents are 0..{self._n - 1} "
                f"(n_agents={self._n})"
            )
        return i

    def predecessors(self, agent: int) -> tuple[int, ...]:
        """Sorted ids of the agents whose output ``agent`` reads in the same round."""
        return self._preds[self._check_agent(agent)]

    def successors(self, agent: int) -> tuple[int, ...]:
        """Sorted ids of the agents that read ``agent``'s output in the same round."""
        return self._succs[self._check_agent(agent)]

    def topological_order(self) -> tuple[int, ...]:
        """Every agent once, each after all its predecessors; ties broken by smallest id."""
        return self._order

    def depth(self, agent: int) -> int:
        """Number of edges on the longest path from any source to ``agent`` (sources: 0)."""
        return self._depths[self._check_agent(agent)]

    def layers(self) -> tuple[tuple[int, ...], ...]:
        """Agents grouped by :meth:`depth`; agents in one layer can run concurrently.

        Every predecessor of an agent sits in an earlier layer, so running the layers in order
        (each layer's agents in parallel) respects every edge.
        """
        groups: list[list[int]] = [[] for _ in range(self.longest_path_nodes)]
        for node in range(self._n):
            groups[self._depths[node]].append(node)
        return tuple(tuple(g) for g in groups)

    @property
    def longest_path_nodes(self) -> int:
        """L: the number of agents on the longest path (1 when there are no edges)."""
        return max(self._depths) + 1

    # ---------------------------------------------------------------------- edge update
    def resample(self, seed: int | None = None) -> Topology:
        """The edge update: return the topology for the next training iteration.

        Fixed topologies return ``self``; random ones override this to draw a new DAG.
        """
        return self

    # -------------------------------------------------------------------- serialization
    def to_dict(self) -> dict[str, Any]:
        """JSON-able record of the DAG used: kind, n_agents, edges, seed, params."""
        return {
            "kind": self.kind,
            "n_agents": self._n,
            "edges": [list(edge) for edge in self._edges],
            "seed": self._seed,
            "params": self.params,
        }

    def to_spec(self) -> str:
        """The edge-list spec accepted by ``make_topology``: ``edges:0-1,1-2``."""
        return "edges:" + ",".join(f"{s}-{d}" for s, d in self._edges)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Topology:
        """Rebuild a topology from :meth:`to_dict` output (the recorded edges are kept).

        Raises:
            TopologyError: The record is malformed, its kind is unknown, or its edges do not
                match what its kind and params produce.
        """
        if not isinstance(data, Mapping):
            raise TopologyError(f"topology record is {type(data).__name__}, not a dict; "
                                f"pass the output of Topology.to_dict()")
        missing = [k for k in ("kind", "n_agents", "edges") if k not in data]
        if missing:
            raise TopologyError(f"topology record lacks {', '.join(missing)}; "
                                f"pass the output of Topology.to_dict()")
        kind = data["kind"]
        target = Topology._KINDS.get(kind) if isinstance(kind, str) else None
        if target is None:
            known = ", ".join(sorted(Topology._KINDS))
            raise TopologyError(f"unknown topology kind {kind!r}; known kinds: {known}")
        params = data.get("params") or {}
        if not isinstance(params, Mapping):
            raise TopologyError(f"topology params is {params!r}; give a dict or omit it")
        return target._restore(data["n_agents"], data["edges"], data.get("seed"), dict(params))

    @classmethod
    def _restore(
        cls, n_agents: Any, edges: Any, seed: Any, params: dict[str, Any]
    ) -> Topology:
        """Rebuild from a record; fixed kinds rebuild from params and check the edges agree."""
        try:
            built = cls(n_agents, **params)  # type: ignore[call-arg]
        except TypeError as exc:
            raise TopologyError(f"bad params {params!r} for kind {cls.kind!r}: {exc}") from None
        recorded = normalize_edges(built.n_agents, edges)
        if recorded != built.edges:
            raise TopologyError(
                f"recorded edges {list(recorded)} are not those of kind {cls.kind!r} with "
                f"params {params}; record it with kind 'custom' to load arbitrary edges"
            )
        return built

    @classmethod
    def from_networkx(cls, graph: nx.DiGraph) -> Topology:
        """Build a ``Custom`` topology from a directed networkx graph with nodes ``0..n-1``."""
        if not isinstance(graph, nx.DiGraph):
            raise TopologyError(f"from_networkx needs a networkx.DiGraph, got "
                                f"{type(graph).__name__}; build a directed graph")
        nodes = list(graph.nodes)
        bad = [v for v in nodes if isinstance(v, bool) or not isinstance(v, int)]
        if bad:
            raise TopologyError(f"graph node {bad[0]!r} is not an int; label agents 0..n-1")
        if set(nodes) != set(range(len(nodes))):
            raise TopologyError(f"graph nodes {sorted(nodes)} are not 0..{len(nodes) - 1}; "
                                f"relabel them (networkx.convert_node_labels_to_integers)")
        return Topology._KINDS["custom"](len(nodes), list(graph.edges()))  # type: ignore[call-arg]

    # ------------------------------------------------------------------------ identity
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Topology):
            return NotImplemented
        return (self._n, self._edges) == (other._n, other._edges)

    def __hash__(self) -> int:
        return hash((self._n, self._edges))

    def _repr_params(self) -> str:
        parts = [f"n_agents={self._n}"]
        if self._seed is not None:
            parts.append(f"seed={self._seed}")
        parts += [f"{k}={v!r}" for k, v in self._params.items()]
        return ", ".join(parts)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._repr_params()}, edges={list(self._edges)})"

    def describe(self) -> str:
        """One line for logs: kind, size, edges, layer count, seed."""
        edges = ", ".join(f"{s}->{d}" for s, d in self._edges) or "no edges"
        seed = f", seed {self._seed}" if self._seed is not None else ""
        return (f"{self.kind or type(self).__name__} topology: {self._n} agents, "
                f"{len(self._edges)} edges ({edges}), {self.longest_path_nodes} layers{seed}")
