"""Message graphs (DAGs over the team's agents).

An edge ``i -> k`` means agent ``k`` reads agent ``i``'s output of the same round. Topologies
are immutable; the paper's edge update is ``topology.resample()``, which returns the next one.
"""

from __future__ import annotations

from collabui.topologies.base import Edge, Topology, normalize_edges
from collabui.topologies.builtin import (
    Chain,
    Complete,
    Custom,
    Independent,
    Layered,
    RandomDAG,
    Star,
)
from collabui.topologies.registry import (
    list_topologies,
    make_topology,
    parse_edge_spec,
    register_topology,
)

__all__ = [
    "Edge",
    "Topology",
    "normalize_edges",
    "RandomDAG",
    "Chain",
    "Star",
    "Layered",
    "Complete",
    "Independent",
    "Custom",
    "make_topology",
    "register_topology",
    "list_topologies",
    "parse_edge_spec",
]
