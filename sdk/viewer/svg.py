"""Inline SVG for the trace viewer: a step's message DAG, and a screenshot with an outlined box.

Numbers and escaped text only: no string from a trace reaches the markup unescaped.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape

from collabui.viewer.data import topological_order

__all__ = ["dag_svg", "gutter_width", "read_gutter_svg", "screenshot_svg"]

_R = 16  # node radius
_DX, _DY, _PAD = 90, 48, 24


def _positions(n: int, depth: dict[int, int], order: Sequence[int]) -> dict[int, tuple[float, float]]:
    layers: dict[int, list[int]] = {}
    for i in order:
        layers.setdefault(depth[i], []).append(i)
    tallest = max((len(v) for v in layers.values()), default=1)
    pos: dict[int, tuple[float, float]] = {}
    for d, members in layers.items():
        offset = (tallest - len(members)) * _DY / 2
        for k, i in enumerate(members):
            pos[i] = (_PAD + _R + d * _DX, _PAD + _R + offset + k * _DY)
    return pos


def dag_svg(n: int, edges: Sequence[Sequence[int]], *, colours: dict[int, str] | None = None) -> str:
    """The DAG over agents 0..n-1, drawn left to right by depth (the superstep of round 0),
    each edge an arrow from the agent read to the reader. ``colours``: fill per agent."""
    order, depth = topological_order(n, edges)
    pos = _positions(n, depth, order)
    width = 2 * (_PAD + _R) + max(depth.values(), default=0) * _DX
    height = 2 * (_PAD + _R) + (max((list(depth.values()).count(d) for d in set(depth.values())),
                                    default=1) - 1) * _DY
    parts = [f'<svg class="dag-svg" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img" aria-label="message graph">',
             '<defs><marker id="arrowhead" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
             'markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#555"/>'
             '</marker></defs>']
    for edge in edges:
        a, b = int(edge[0]), int(edge[1])
        if a not in pos or b not in pos:
            continue
        (x1, y1), (x2, y2) = pos[a], pos[b]
        length = math.hypot(x2 - x1, y2 - y1) or 1.0
        ux, uy = (x2 - x1) / length, (y2 - y1) / length
        parts.append(f'<line class="dag-edge" data-from="{a}" data-to="{b}" x1="{x1 + ux * _R:.1f}" '
                     f'y1="{y1 + uy * _R:.1f}" x2="{x2 - ux * (_R + 2):.1f}" y2="{y2 - uy * (_R + 2):.1f}" '
                     'stroke="#555" stroke-width="1.5" marker-end="url(#arrowhead)"/>')
    for i in order:
        x, y = pos[i]
        fill = escape((colours or {}).get(i, "#eef"), quote=True)
        parts.append(f'<g class="dag-node" data-agent="{i}"><circle cx="{x:.1f}" cy="{y:.1f}" r="{_R}" '
                     f'fill="{fill}" stroke="#333"/><text x="{x:.1f}" y="{y + 4:.1f}" '
                     f'text-anchor="middle" font-size="12">a{i}</text></g>')
    parts.append("</svg>")
    return "".join(parts)


def screenshot_svg(uri: str, size: tuple[int, int] | None,
                   box: tuple[float, float, float, float] | None, label: str) -> str:
    """The screenshot as an ``<img>``, with an SVG rectangle over ``box`` (image pixels)."""
    img = f'<img class="shot" src="{escape(uri, quote=True)}" alt="screenshot the agents saw">'
    if box is None or size is None:
        return f'<div class="shot-wrap">{img}</div>'
    w, h = size
    left, top, right, bottom = box
    rect = (f'<svg class="shot-overlay" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w} {h}" '
            f'preserveAspectRatio="none"><rect class="target-box" x="{left:.1f}" y="{top:.1f}" '
            f'width="{max(right - left, 1):.1f}" height="{max(bottom - top, 1):.1f}" fill="none" '
            f'stroke="#e00" stroke-width="{max(w / 160, 1.5):.1f}"><title>{escape(label)}</title></rect></svg>')
    return f'<div class="shot-wrap">{img}{rect}</div>'


# -- arrows for what each agent read, in the gutters of the n x m matrix ------------------------

_LANE = 8  # px between the vertical runs of two peer arrows in one gutter
Read = tuple[int, int, int, int, str]  # (from agent, from round, to agent, to round, "peer" | "own")


def gutter_width(reads: Sequence[Read], j: int) -> int:
    """Width in px of the gutter left of round ``j``: one lane per peer arrow into that round."""
    lanes = sum(1 for *_, r, kind in reads if r == j and kind == "peer")
    return 10 + _LANE * (lanes + 1) if (lanes or j > 0) else 8


def _pct(row: float, n: int) -> str:
    return f"{100 * row / n:.2f}%"


def _arrow(lines: Sequence[tuple[float | str, ...]], read: Read, head: str) -> str:
    a, ra, b, rb, kind = read
    segs = "".join(f'<line x1="{x1}" y1="{y1}" x2="{x2}" y2="{y2}"'
                   + (f' marker-end="url(#{head})"' if k == len(lines) - 1 else "") + "/>"
                   for k, (x1, y1, x2, y2) in enumerate(lines))
    what = f"agent {b} round {rb} read its own round {ra}" if kind == "own" else \
        f"agent {b} read agent {a} in round {rb}"
    return (f'<g class="read-arrow {kind}" data-from="{a}:{ra}" data-to="{b}:{rb}"><title>{what}</title>'
            f"{segs}</g>")


def read_gutter_svg(reads: Sequence[Read], j: int, n: int, head: str) -> str:
    """The arrows into round ``j`` of an n-row matrix, drawn in the gutter left of its column.

    The matrix's rows are of equal height, so a row sits at a fixed percentage of the gutter's
    height; x is in px. An own-previous arrow crosses the gutter at 35% of the row (from round
    j-1's cell on the left to round j's on the right); a peer arrow leaves the predecessor's cell
    at 65% of its row, runs down (or up) in its own lane and enters the reader's cell at 65% of
    the reader's row. Shorter peer arrows take the lanes nearest the cells, so runs nest.
    """
    width = gutter_width(reads, j)
    peers = sorted((r for r in reads if r[3] == j and r[4] == "peer"), key=lambda r: (abs(r[2] - r[0]), r[0], r[2]))
    parts = [f'<svg class="read-gutter" xmlns="http://www.w3.org/2000/svg" width="{width}" height="100%" '
             f'data-round="{j}" aria-hidden="true"><defs><marker id="{head}" viewBox="0 0 10 10" refX="9" '
             'refY="5" markerWidth="6" markerHeight="6" orient="auto"><path d="M0,0 L10,5 L0,10 z"/></marker></defs>']
    for read in (r for r in reads if r[3] == j and r[4] == "own"):
        y = _pct(read[2] + 0.35, n)
        parts.append(_arrow([(0, y, width, y)], read, head))
    for lane, read in enumerate(peers):
        x = width - 8 - _LANE * lane
        y1, y2 = _pct(read[0] + 0.65, n), _pct(read[2] + 0.65, n)
        parts.append(_arrow([(width, y1, x, y1), (x, y1, x, y2), (x, y2, width, y2)], read, head))
    parts.append("</svg>")
    return "".join(parts)
