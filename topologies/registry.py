"""Build topologies by name (``random``, ``chain``, ...) or from an ``edges:0-1,1-2`` spec.

Configs and the CLI name a topology with a string; ``make_topology`` turns it into a
:class:`~collabui.topologies.base.Topology` for a given team size.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from typing import Protocol

from collabui.errors import TopologyError
from collabui.topologies.base import Edge, Topology
from collabui.topologies.builtin import (
    Chain,
    Complete,
    Custom,
    Independent,
    Layered,
    RandomDAG,
    Star,
)

__all__ = ["TopologyFactory", "register_topology", "make_topology", "list_topologies",
           "parse_edge_spec", "EDGE_SPEC_PREFIX"]

#: Prefix of an explicit edge-list spec: ``edges:0-1,1-2,0-3``.
EDGE_SPEC_PREFIX = "edges:"

_NAME = re.compile(r"^[a-z][a-z0-9_\-]*$")
_TOKEN = re.compile(r"^\s*(\d+)\s*(?:->|-)\s*(\d+)\s*$")


class TopologyFactory(Protocol):
    """``factory(n_agents, *, seed) -> Topology``; fixed kinds may ignore ``seed``."""

    def __call__(self, n_agents: int, *, seed: int | None) -> Topology: ...


def _fixed(build: Callable[[int], Topology]) -> TopologyFactory:
    def factory(n_agents: int, *, seed: int | None = None) -> Topology:
        return build(n_agents)

    return factory


def _random(n_agents: int, *, seed: int | None = None) -> Topology:
    return RandomDAG(n_agents, seed=seed)


_REGISTRY: dict[str, TopologyFactory] = {
    "random": _random,
    "chain": _fixed(Chain),
    "star": _fixed(Star),
    "layered": _fixed(Layered),
    "complete": _fixed(Complete),
    "independent": _fixed(Independent),
}


def register_topology(name: str, factory: TopologyFactory, *, replace: bool = False) -> None:
    """Make ``make_topology(name, n)`` call ``factory(n, seed=seed)``.

    Args:
        name: Lower-case name (letters, digits, ``_``, ``-``), not starting with ``edges:``.
        factory: Callable ``factory(n_agents, *, seed) -> Topology``.
        replace: Allow overwriting an existing name (builtins included).

    Raises:
        TopologyError: Bad name, non-callable factory, or the name is taken and not ``replace``.
    """
    if not isinstance(name, str) or not _NAME.match(name):
        raise TopologyError(f"topology name {name!r} is invalid; use lower-case letters, "
                            f"digits, '_' or '-', starting with a letter")
    if not callable(factory):
        raise TopologyError(f"factory for topology {name!r} is not callable; pass "
                            f"factory(n_agents, *, seed) -> Topology")
    if name in _REGISTRY and not replace:
        raise TopologyError(f"topology {name!r} is already registered; pass replace=True "
                            f"to overwrite it")
    _REGISTRY[name] = factory


def list_topologies() -> list[str]:
    """Sorted registered names (an ``edges:...`` spec is accepted too)."""
    return sorted(_REGISTRY)


def parse_edge_spec(spec: str) -> list[Edge]:
    """Parse ``edges:0-1,1-2`` (``->`` also accepted; empty tokens skipped) into edge pairs.

    Raises:
        TopologyError: The prefix is missing or a token is not ``SRC-DST``; names the token.
    """
    if not spec.startswith(EDGE_SPEC_PREFIX):
        raise TopologyError(f"edge spec {spec!r} must start with {EDGE_SPEC_PREFIX!r}, "
                            f"e.g. edges:0-1,1-2")
    edges = []
    for token in spec[len(EDGE_SPEC_PREFIX):].split(","):
        if not token.strip():
            continue
        match = _TOKEN.match(token)
        if match is None:
            raise TopologyError(f"edge spec {spec!r} has a bad token {token.strip()!r}; write "
                                f"edges as SRC-DST agent-id pairs separated by commas, "
                                f"e.g. edges:0-1,1-2")
        edges.append((int(match.group(1)), int(match.group(2))))
    return edges


def _unknown(name: str) -> TopologyError:
    close = difflib.get_close_matches(name, list_topologies(), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return TopologyError(f"unknown topology {name!r}{hint}; known topologies: "
                         f"{', '.join(list_topologies())}, or a spec like edges:0-1,1-2")


def make_topology(
    name_or_spec: str | Topology, n_agents: int, *, seed: int | None = None
) -> Topology:
    """Build the topology named ``name_or_spec`` over ``n_agents`` agents.

    Args:
        name_or_spec: A registered name (see :func:`list_topologies`; case-insensitive), an
            ``edges:0-1,1-2`` spec, or a ready Topology (returned if its size matches).
        n_agents: Team size.
        seed: Seed for random kinds (None: a fresh one, recorded in the result's ``seed``).

    Raises:
        TopologyError: Unknown name (with a close match), bad spec token, invalid graph, or a
            factory that does not return a Topology over ``n_agents`` agents.
    """
    if isinstance(name_or_spec, Topology):
        topo = name_or_spec
    elif not isinstance(name_or_spec, str):
        raise TopologyError(f"topology is {name_or_spec!r}; give a name such as 'random' or "
                            f"an edges:0-1,1-2 spec")
    elif name_or_spec.strip().startswith(EDGE_SPEC_PREFIX):
        topo = Custom(n_agents, parse_edge_spec(name_or_spec.strip()))
    else:
        name = name_or_spec.strip().lower()
        if name not in _REGISTRY:
            raise _unknown(name)
        topo = _REGISTRY[name](n_agents, seed=seed)
        if not isinstance(topo, Topology):
            raise TopologyError(f"factory for topology {name!r} returned "
                                f"{type(topo).__name__}, not a Topology; fix the factory")
    if topo.n_agents != n_agents:
        raise TopologyError(f"topology {name_or_spec!r} has {topo.n_agents} agents but the team "
                            f"has {n_agents}; build it for {n_agents} agents")
    return topo
