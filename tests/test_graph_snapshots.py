"""Snapshot the compiled step graph's Mermaid drawing for each topology.

Regenerate after an intended change with: COLLABUI_UPDATE_SNAPSHOTS=1 pytest tests/test_graph_snapshots.py
"""

import os
from pathlib import Path

import pytest

from collabui import CollabAgentTeam
from collabui.models.fake import ScriptedChatModel
from collabui.topologies import list_topologies

SNAPSHOTS = Path(__file__).parent / "snapshots"


@pytest.mark.parametrize("topology", [*list_topologies(), "edges:0-1,0-2,2-3"])
def test_mermaid_snapshot(topology):
    team = CollabAgentTeam(ScriptedChatModel(["x"]), n_agents=4, rounds=3, topology=topology, seed=0)
    drawing = team.draw_mermaid()
    path = SNAPSHOTS / f"team-4x3-{topology.replace(':', '_').replace(',', '_')}.mmd"
    if os.environ.get("COLLABUI_UPDATE_SNAPSHOTS"):
        path.parent.mkdir(exist_ok=True)
        path.write_text(drawing)
    assert path.exists(), f"no snapshot {path}; create it with COLLABUI_UPDATE_SNAPSHOTS=1"
    assert drawing == path.read_text(), f"graph drawing changed; see {path}"
    # The drawing has one node per (agent, round) and the vote.
    assert drawing.count("agent") >= 12 and "vote(vote)" in drawing
