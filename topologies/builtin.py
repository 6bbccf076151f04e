"""Builtin message graphs: the paper's random DAG (edge update) and fixed shapes.

``RandomDAG`` samples a DAG subgraph of the complete graph K_n (paper section 3.2, "MARL with
Edge Updates"): a random permutation fixes an order and each forward edge of that order is kept
with probability ``edge_prob``. Every other kind is fixed and ``resample()`` returns it as is.
"""

from __future__ import annotations

import hashlib
import math
import random
import secrets
from collections.abc import Iterable, Sequence
from itertools import pairwise
from typing import Any

from collabui.errors import TopologyError
from collabui.topologies.base import Edge, Topology, _as_int, check_n_agents

__all__ = ["RandomDAG", "Chain", "Star", "Layered", "Complete", "Independent", "Custom",
           "RESAMPLE_ATTEMPTS"]

#: How many seeds ``RandomDAG.resample`` tries to find a DAG that differs from the current one.
RESAMPLE_ATTEMPTS = 64


def _check_seed(seed: Any) -> int:
    return _as_int(seed, "seed", "give an int seed or None")


def _next_seed(seed: int) -> int:
    # A hash, not random.Random(seed): the chain of resample seeds must stay the same across
    # Python versions so a recorded first seed reproduces every later DAG.
    digest = hashlib.sha256(f"collabui.topologies.resample:{seed}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


def _sample_edges(n: int, edge_prob: float, seed: int) -> list[Edge]:
    rng = random.Random(seed)
    # Hand-written Fisher-Yates on rng.random() (stable across Python versions, unlike the
    # internals of random.shuffle/sample) so a seed means the same DAG everywhere.
    order = list(range(n))
    for i in range(n - 1, 0, -1):
        j = min(int(rng.random() * (i + 1)), i)
        order[i], order[j] = order[j], order[i]
    edges = []
    for a in range(n):
        for b in range(a + 1, n):
            if rng.random() < edge_prob:
                edges.append((order[a], order[b]))
    return edges


class RandomDAG(Topology, kind="random"):
    """A random DAG subgraph of K_n, reproducible from its seed.

    Args:
        n_agents: Team size (>= 1).
        seed: Int seed; None draws a fresh one from the OS and records it in ``seed``.
        edge_prob: Probability of keeping each forward edge of the random order, in [0, 1].
    """

    __slots__ = ()

    def __init__(self, n_agents: int, *, seed: int | None = None, edge_prob: float = 0.5) -> None:
        n = check_n_agents(n_agents)
        prob = _check_prob(edge_prob)
        actual = secrets.randbits(63) if seed is None else _check_seed(seed)
        self._setup(n, _sample_edges(n, prob, actual), seed=actual, params={"edge_prob": prob})

    @property
    def edge_prob(self) -> float:
        """Probability of keeping each forward edge."""
        return self._params["edge_prob"]

    def resample(self, seed: int | None = None) -> RandomDAG:
        """The edge update: a new random DAG, different from this one whenever possible.

        Without ``seed`` the next seed is derived from ``self.seed``, so a chain of resamples
        is reproducible from the first seed. If the drawn DAG equals the current one, seeds
        derived from the drawn one are tried (at most ``RESAMPLE_ATTEMPTS``); the result's
        ``seed`` is always the one that produced its edges. With ``n_agents == 1`` or
        ``edge_prob == 0`` no different DAG exists and an equal one is returned.
        """
        candidate = _next_seed(self.seed) if seed is None else _check_seed(seed)
        nxt = self
        for _ in range(RESAMPLE_ATTEMPTS):
            nxt = RandomDAG(self.n_agents, seed=candidate, edge_prob=self.edge_prob)
            if nxt.edges != self.edges:
                return nxt
            candidate = _next_seed(candidate)
        return nxt

    @classmethod
    def _restore(cls, n_agents: Any, edges: Any, seed: Any, params: dict[str, Any]) -> RandomDAG:
        # Trust the recorded edges (they are what the trace ran), keep seed for resampling.
        unknown = set(params) - {"edge_prob"}
        if unknown:
            raise TopologyError(f"unknown params {sorted(unknown)} for kind 'random'; "
                                f"only edge_prob is accepted")
        prob = _check_prob(params.get("edge_prob", 0.5))
        obj = cls.__new__(cls)
        obj._setup(n_agents, edges, seed=None if seed is None else _check_seed(seed),
                   params={"edge_prob": prob})
        return obj


def _check_prob(edge_prob: Any) -> float:
    if isinstance(edge_prob, bool) or not isinstance(edge_prob, (int, float)):
        raise TopologyError(f"edge_prob is {edge_prob!r}; give a number in [0, 1]")
    prob = float(edge_prob)
    if not (math.isfinite(prob) and 0.0 <= prob <= 1.0):
        raise TopologyError(f"edge_prob is {edge_prob!r}; give a number in [0, 1]")
    return prob


class Chain(Topology, kind="chain"):
    """``0 -> 1 -> ... -> n-1``: each agent reads the one before it."""

    __slots__ = ()

    def __init__(self, n_agents: int) -> None:
        n = check_n_agents(n_agents)
        self._setup(n, [(i, i + 1) for i in range(n - 1)])


class Star(Topology, kind="star"):
    """``center`` speaks first and every other agent reads it."""

    __slots__ = ()

    def __init__(self, n_agents: int, *, center: int = 0) -> None:
        n = check_n_agents(n_agents)
        c = _as_int(center, "center", f"give an agent id in 0..{n - 1}")
        if not 0 <= c < n:
            raise TopologyError(f"center is {c}, but agents are 0..{n - 1}; pick one of them")
        self._setup(n, [(c, i) for i in range(n) if i != c], params={"center": c})


def _default_layers(n: int) -> tuple[int, ...]:
    return (n,) if n == 1 else (n // 2, n - n // 2)


class Layered(Topology, kind="layered"):
    """Consecutive layers fully connected: every agent of layer k reads all of layer k-1.

    Agents are assigned to layers in id order. ``layers`` holds the layer sizes (positive ints
    summing to ``n_agents``); the default is two layers, ``n // 2`` then the rest.
    """

    __slots__ = ()

    def __init__(self, n_agents: int, *, layers: Sequence[int] | None = None) -> None:
        n = check_n_agents(n_agents)
        sizes = _default_layers(n) if layers is None else _check_layer_sizes(n, layers)
        groups, start = [], 0
        for size in sizes:
            groups.append(range(start, start + size))
            start += size
        edges = [(a, b) for prev, cur in pairwise(groups) for a in prev for b in cur]
        self._setup(n, edges, params={"layers": list(sizes)})

    @property
    def layer_sizes(self) -> tuple[int, ...]:
        """The layer sizes this graph was built from."""
        return tuple(self._params["layers"])


def _check_layer_sizes(n: int, layers: Any) -> tuple[int, ...]:
    fix = f"give positive ints summing to n_agents={n}, e.g. layers=({max(n - 1, 1)}, 1)"
    if isinstance(layers, (str, bytes)) or not isinstance(layers, Iterable):
        raise TopologyError(f"layers is {layers!r}, not a sequence of sizes; {fix}")
    sizes = tuple(_as_int(s, "a layer size", fix) for s in layers)
    if not sizes or any(s < 1 for s in sizes):
        raise TopologyError(f"layer sizes {list(sizes)} must be non-empty and all >= 1; {fix}")
    if sum(sizes) != n:
        raise TopologyError(f"layer sizes {list(sizes)} sum to {sum(sizes)}, not {n}; {fix}")
    return sizes


class Complete(Topology, kind="complete"):
    """Every forward edge of ``order`` (default ``0..n-1``): each agent reads all before it."""

    __slots__ = ()

    def __init__(self, n_agents: int, *, order: Sequence[int] | None = None) -> None:
        n = check_n_agents(n_agents)
        seq = list(range(n)) if order is None else _check_order(n, order)
        edges = [(seq[a], seq[b]) for a in range(n) for b in range(a + 1, n)]
        self._setup(n, edges, params={"order": seq})


def _check_order(n: int, order: Any) -> list[int]:
    fix = f"give a permutation of 0..{n - 1}"
    if isinstance(order, (str, bytes)) or not isinstance(order, Iterable):
        raise TopologyError(f"order is {order!r}, not a sequence; {fix}")
    seq = [_as_int(v, "an order entry", fix) for v in order]
    if sorted(seq) != list(range(n)):
        raise TopologyError(f"order {seq} is not a permutation of 0..{n - 1}; {fix}")
    return seq


class Independent(Topology, kind="independent"):
    """No edges: every agent decides alone (one layer)."""

    __slots__ = ()

    def __init__(self, n_agents: int) -> None:
        self._setup(check_n_agents(n_agents), [])


class Custom(Topology, kind="custom"):
    """Any DAG given as an edge list (duplicates merged; cycles, self-loops rejected)."""

    __slots__ = ()

    def __init__(self, n_agents: int, edges: Iterable[Edge]) -> None:
        self._setup(n_agents, edges)

    @classmethod
    def _restore(cls, n_agents: Any, edges: Any, seed: Any, params: dict[str, Any]) -> Custom:
        if params:
            raise TopologyError(f"unknown params {sorted(params)} for kind 'custom'; "
                                f"it takes none")
        return cls(n_agents, edges)
