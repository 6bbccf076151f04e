"""The trace viewer's HTML: one self-contained page (inline CSS, JS, SVG and screenshots).

Every string that comes from a trace, a labels file or a pairs file goes through :func:`_e`
(``html.escape`` with quotes) before it reaches the markup; nothing from them is ever placed in
a ``<script>``. A Content-Security-Policy allows only the page's own script (by hash), data: images
and no network at all, so a missed escape still could not run or fetch anything.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping, Sequence
from html import escape
from importlib import resources
from typing import Any

from collabui.viewer.data import (
    Episode,
    RunSummary,
    ViewInput,
    action_call,
    action_key,
    element_box,
    screenshot_uri,
    topological_order,
)
from collabui.viewer.svg import dag_svg, gutter_width, read_gutter_svg, screenshot_svg

__all__ = ["render_page", "PALETTE"]

#: Cell colours by action (same action, same colour), in the order of the vote's counts.
PALETTE = ("#bfdbfe", "#fed7aa", "#bbf7d0", "#fbcfe8", "#ddd6fe", "#fef08a", "#a5f3fc",
           "#fecaca", "#d9f99d", "#e7d3c0")
_UNPARSABLE = "#e5e7eb"


def _e(value: Any) -> str:
    return escape("" if value is None else str(value), quote=True)


def _asset(name: str) -> str:
    return resources.files("collabui.viewer").joinpath(f"assets/{name}").read_text("utf-8")


def _fmt(value: Any) -> str:
    return f"{value:+g}" if isinstance(value, (int, float)) and not isinstance(value, bool) else _e(value)


# -- one step ----------------------------------------------------------------------------------


def _colours(step: Mapping[str, Any], space: str | None) -> tuple[dict[str, str], dict[str, str]]:
    """Colour per action key (vote order first, then first appearance), and call -> key."""
    call_key: dict[str, str] = {}
    keys: list[str] = []
    for row in step.get("proposals") or []:
        for prop in row:
            if prop.get("parse_error") is None and not prop.get("skipped"):
                key = action_key(prop.get("action"), space)
                call_key.setdefault(action_call(prop.get("action"), space), key)
                keys.append(key)
    ordered = [call_key[c] for c, _ in (step.get("vote") or {}).get("counts") or [] if c in call_key]
    ordered += keys
    colours: dict[str, str] = {}
    for key in ordered:
        if key not in colours:
            colours[key] = PALETTE[len(colours) % len(PALETTE)]
    return colours, call_key


def _reads(prop: Mapping[str, Any], edges: Sequence[Sequence[int]]) -> list[tuple[int, int, str]]:
    """What agent i read at round j: its predecessors' round-j outputs, its own round j-1."""
    i, j = int(prop.get("agent", 0)), int(prop.get("round", 0))
    preds = prop.get("predecessors")
    if not isinstance(preds, list):
        preds = [int(a) for a, b in edges if int(b) == i]
    out = [(int(p), j, "peer") for p in preds]
    if j > 0:
        out.append((i, j - 1, "own"))
    return out


def _cell(step_id: str, prop: Mapping[str, Any], space: str | None, colours: dict[str, str],
          vote_key: str | None, edges: Sequence[Sequence[int]]) -> str:
    i, j = int(prop.get("agent", 0)), int(prop.get("round", 0))
    if prop.get("skipped"):  # TeamConfig.stop_when_decided: no model was asked
        return (f'<div class="cell skipped" id="{step_id}-a{i}-r{j}" data-agent="{i}" data-round="{j}" data-reads="" '
                f'style="grid-row:{i + 2};grid-column:{2 * j + 3};background:{_UNPARSABLE}">'
                '<span class="cell-action">skipped</span><div class="cell-thought"><i>not run: the vote was '
                "already decided</i></div></div>")
    parsed = prop.get("parse_error") is None
    key = action_key(prop.get("action"), space) if parsed else None
    colour = colours.get(key or "", _UNPARSABLE)
    classes = ["cell"] + (["winner"] if parsed and key == vote_key else []) + ([] if parsed else ["unparsable"])
    reads = _reads(prop, edges)
    marks = "".join(
        f'<span class="read {kind}" title="{_e("own output of round " + str(r) if kind == "own" else f"agent {a} round {r}")}">'
        f'&larr; {"own r" + str(r) if kind == "own" else f"a{a} r{r}"}</span>' for a, r, kind in reads)
    action = (f'<code class="cell-action">{_e(action_call(prop.get("action"), space))}</code>' if parsed
              else f'<span class="cell-action unparsable-note">unparsable: {_e(prop.get("parse_error"))}</span>')
    thought = prop.get("thought")
    data_reads = " ".join(f"{a}:{r}" for a, r, _ in reads)
    return (f'<div class="{" ".join(classes)}" id="{step_id}-a{i}-r{j}" data-agent="{i}" data-round="{j}" '
            f'data-reads="{data_reads}" style="grid-row:{i + 2};grid-column:{2 * j + 3};background:{colour}">'
            f'{action}<div class="cell-thought">{_e(thought) if thought else "<i>no thought</i>"}</div>'
            f'<div class="cell-reads">{marks or "<span class=read-none>reads nothing</span>"}</div>'
            f'<details class="cell-raw"><summary>raw</summary><pre>{_e(prop.get("raw"))}</pre></details></div>')


def _matrix(step_id: str, step: Mapping[str, Any], space: str | None, colours: dict[str, str],
            vote_key: str | None, edges: Sequence[Sequence[int]]) -> str:
    """The n x m matrix as a CSS grid: agents' rows (all of one height, so arrows can be placed
    by percentage), each round's column preceded by a gutter holding the arrows into it."""
    rows = step.get("proposals") or []
    n, m = len(rows), max((len(r) for r in rows), default=0)
    reads = [(a, r, int(p.get("agent", 0)), int(p.get("round", 0)), kind)
             for row in rows for p in row for a, r, kind in _reads(p, edges)]
    columns = " ".join(f"{gutter_width(reads, j)}px minmax(150px, 320px)" for j in range(m))
    grid = f"grid-template-columns:max-content {columns};grid-template-rows:auto repeat({max(n, 1)}, 1fr)"
    heads = "".join(f'<div class="round-head" style="grid-row:1;grid-column:{2 * j + 3}">round {j}</div>'
                    for j in range(m))
    agents = "".join(f'<div class="agent" style="grid-row:{k + 2};grid-column:1">agent '
                     f'{int(row[0].get("agent", k)) if row else k}</div>' for k, row in enumerate(rows))
    cells = "".join(_cell(step_id, p, space, colours, vote_key, edges) for row in rows for p in row)
    gutters = "".join(f'<div class="gutter" style="grid-row:2 / span {max(n, 1)};grid-column:{2 * j + 2}">'
                      f'{read_gutter_svg(reads, j, max(n, 1), f"{step_id}-head{j}")}</div>' for j in range(m))
    return (f'<section class="matrix-section"><h4>Action matrix ({n} agents x {m} rounds)</h4>'
            f'<div class="matrix-scroll"><div class="matrix" data-n="{n}" data-m="{m}" style="{grid}">'
            f'<div class="corner" style="grid-row:1;grid-column:1">agent \\ round</div>{heads}{agents}{gutters}'
            f"{cells}</div></div>"
            '<p class="hint">Arrows show what each agent read: solid, its DAG predecessors in the same '
            "round; dashed, its own previous round (hover a cell to outline them).</p></section>")


def _vote(step: Mapping[str, Any], space: str | None, colours: dict[str, str], call_key: dict[str, str]) -> str:
    vote = step.get("vote") or {}
    winner = action_call(vote.get("action"), space)
    total = vote.get("total") or 0
    rows = []
    for call, count in vote.get("counts") or []:
        colour = colours.get(call_key.get(call, ""), _UNPARSABLE)
        cls = "tally-row winner" if call == winner else "tally-row"
        pct = 100 * count / total if total else 0
        rows.append(f'<tr class="{cls}"><td><span class="swatch" style="background:{colour}"></span>'
                    f'<code>{_e(call)}</code></td><td class="count">{int(count)}</td><td class="bar-cell">'
                    f'<div class="bar" style="width:{pct:.0f}%;background:{colour}"></div></td></tr>')
    tie = f' <span class="tie">(tie broken by {_e(vote.get("tie_break"))})</span>' if vote.get("tie_break") else ""
    return (f'<section class="vote"><h4>Vote</h4><p class="vote-winner">winner <code>{_e(winner)}</code> '
            f'{_e(vote.get("votes"))}/{_e(total)} votes ({_e(vote.get("parsed"))} parsed){tie}</p>'
            f'<table class="tally">{"".join(rows)}</table></section>')


def _dag(step: Mapping[str, Any], n: int, m: int, colours: dict[int, str]) -> str:
    edges = [list(e) for e in (step.get("topology") or {}).get("edges") or []]
    order, depth = topological_order(n, edges)
    longest = max(depth.values(), default=0) + 1
    edge_text = ", ".join(f"{a}&rarr;{b}" for a, b in edges) or "none (agents read only themselves)"
    # What the step recorded: a team without memory runs all rounds of a DAG layer at once (L
    # supersteps, not L + m - 1); traces from before proposals carried it get the formula.
    recorded = {p["superstep"] for row in step.get("proposals") or [] for p in row if p.get("superstep") is not None}
    supersteps = f"{len(recorded)} supersteps" if recorded else f"{longest + m - 1} supersteps per step"
    return (f'<section class="dag"><h4>Message DAG ({_e((step.get("topology") or {}).get("kind"))})</h4>'
            f"{dag_svg(n, edges, colours=colours)}"
            f'<p class="order">topological order: {" &rarr; ".join(f"a{i}" for i in order)}; '
            f"edges: {edge_text}; {supersteps} (L={longest}, m={m})</p></section>")


def _screen(ep: Episode, step: Mapping[str, Any]) -> str:
    uri, size, note = screenshot_uri(ep.trace, step.get("screenshot"))
    if uri is None:
        return f'<section class="screen"><h4>Screen</h4><p class="note">{_e(note)}</p></section>'
    box, why = element_box(ep.trace, step, size)
    return (f'<section class="screen"><h4>Screen the agents saw</h4>{screenshot_svg(uri, size, box, why)}'
            f'<p class="note box-note">{_e(why)}</p></section>')


def _labels(ep: Episode, t: int) -> str:
    labels = ep.labels.get(t)
    if not labels:
        return ""
    parts = []
    for lab in labels:
        scores, rewards, reasons = lab.get("scores") or [], lab.get("rewards") or [], lab.get("reasons") or []
        rows = []
        for i, row in enumerate(scores):
            cells = []
            for j, score in enumerate(row):
                reward = rewards[i][j] if i < len(rewards) and j < len(rewards[i]) else None
                reason = reasons[i][j] if i < len(reasons) and j < len(reasons[i]) else ""
                ok = isinstance(score, (int, float))
                bg = f"hsl({120 * max(0.0, min(1.0, float(score))):.0f},70%,75%)" if ok else _UNPARSABLE
                cells.append(f'<td class="heat" style="background:{bg}" title="{_e(reason)}">'
                             f'{_e(f"{score:.2f}" if ok else "-")}<br><small>r={_e(reward)}</small></td>')
            rows.append(f"<tr><th>agent {i}</th>{''.join(cells)}</tr>")
        m = max((len(r) for r in scores), default=0)
        head = "".join(f"<th>round {j}</th>" for j in range(m))
        parts.append(f'<div class="critic"><p>critic <b>{_e(lab.get("critic"))}</b></p><table class="heatmap">'
                     f"<thead><tr><th></th>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
                     f'<details><summary>rationale</summary><pre>{_e(lab.get("rationale"))}</pre></details></div>')
    return f'<section class="labels"><h4>Critic reward matrix</h4>{"".join(parts)}</section>'


def _turns(turns: Any) -> str:
    if isinstance(turns, list):
        return "\n".join(str(t.get("content", "")) if isinstance(t, Mapping) else str(t) for t in turns)
    return str(turns)


def _pairs(ep: Episode, t: int) -> str:
    pairs = ep.pairs.get(t)
    if not pairs:
        return ""
    rows = "".join(
        f'<tr><td>{_e(p.get("agent"))}</td><td>{_e(p.get("round"))}</td><td>{_e(p.get("score"))}</td>'
        f'<td><pre class="chosen">{_e(_turns(p.get("chosen")))}</pre></td>'
        f'<td><pre class="rejected">{_e(_turns(p.get("rejected")))}</pre></td><td>{_e(p.get("rejected_source"))}</td></tr>'
        for p in pairs)
    return (f'<section class="pairs"><h4>Preference pairs ({len(pairs)})</h4><table class="pairs-table"><thead><tr>'
            "<th>agent</th><th>round</th><th>score</th><th>chosen</th><th>rejected</th><th>source</th></tr></thead>"
            f"<tbody>{rows}</tbody></table></section>")


def _step(ep: Episode, step: Mapping[str, Any], n: int, m: int) -> str:
    t = int(step.get("t", 0))
    step_id = f"{ep.anchor}-t{t}"
    space = ep.trace.header.get("action_space")
    colours, call_key = _colours(step, space)
    vote_key = action_key((step.get("vote") or {}).get("action"), space)
    edges = [list(e) for e in (step.get("topology") or {}).get("edges") or []]
    first = {int(r[0].get("agent", k)): colours.get(action_key(r[0].get("action"), space), _UNPARSABLE)
             for k, r in enumerate(step.get("proposals") or []) if r}
    obs = step.get("observation") or {}
    error = f'<p class="error">error: {_e(step.get("error"))}</p>' if step.get("error") else ""
    last_err = obs.get("last_action_error")
    last = f'<p class="note">previous action failed: {_e(last_err)}</p>' if last_err else ""
    history = "".join(f"<li><code>{_e(h)}</code></li>" for h in step.get("history") or [])
    return (f'<section class="step" id="{step_id}" data-t="{t}"><h3 class="step-head">Step {t}</h3>'
            f'<div class="step-grid"><div class="left">{_screen(ep, step)}'
            f'<section class="task"><h4>Task</h4><p>{_e(obs.get("task") or ep.trace.header.get("task"))}</p></section>'
            f'<section class="observation"><h4>Observation</h4>{last}<p class="url">{_e(obs.get("url"))}</p>'
            f'<pre class="obs-text">{_e(obs.get("text"))}</pre>'
            f'<details><summary>previous actions ({len(step.get("history") or [])})</summary><ol>{history}</ol>'
            f'</details></section></div><div class="right">{_dag(step, n, m, first)}'
            f"{_matrix(step_id, step, space, colours, vote_key, edges)}{_vote(step, space, colours, call_key)}"
            f'<section class="outcome"><h4>Outcome</h4><p>executed <code>{_e(action_call(step.get("executed"), space))}'
            f'</code>; reward <b class="reward">{_fmt(step.get("reward"))}</b>; done <b class="done">'
            f'{"yes" if step.get("done") else "no"}</b>; team {_e((step.get("timings") or {}).get("team_s"))} s</p>'
            f"{error}</section>{_labels(ep, t)}{_pairs(ep, t)}</div></div></section>")


# -- episodes, run summary, page ---------------------------------------------------------------


def _episode(ep: Episode) -> str:
    head = ep.trace.header
    team = head.get("team") or {}
    n, m = int(team.get("n_agents") or 1), int(team.get("rounds") or 1)
    end = ep.trace.end
    if end is None:
        result = '<span class="result unfinished">unfinished (no end record)</span>'
    else:
        word = "success" if end.get("success") else "failure"
        result = (f'<span class="result {word}">{word}</span>, reward {_fmt(end.get("reward"))} in '
                  f'{_e(end.get("steps"))} steps, {_e(end.get("duration_s"))} s')
        if end.get("error"):
            result += f' <span class="error">error: {_e(end.get("error"))}</span>'
    links = "".join(f'<a class="step-link" href="#{ep.anchor}-t{int(s.get("t", 0))}" '
                    f'data-step-id="{ep.anchor}-t{int(s.get("t", 0))}">{int(s.get("t", 0))}</a>'
                    for s in ep.trace.steps)
    steps = "".join(_step(ep, s, n, m) for s in ep.trace.steps) or '<p class="note">no steps recorded</p>'
    return (f'<section class="episode" id="{ep.anchor}"><header class="episode-head"><h2>{_e(ep.episode_id)}</h2>'
            f'<p class="meta">{_e(head.get("env"))} &middot; model {_e(head.get("model"))} &middot; team {n} x {m} '
            f'({_e((head.get("topology") or {}).get("kind"))}) &middot; seed {_e(head.get("seed"))}</p>'
            f'<p class="episode-task">{_e(head.get("task"))}</p><p>{result}</p></header>'
            f'<nav class="step-nav">steps: {links}</nav>{steps}</section>')


def _ci_bar(lo: float, hi: float, value: float) -> str:
    return (f'<div class="ci"><div class="ci-range" style="left:{100 * lo:.1f}%;width:{100 * (hi - lo):.1f}%"></div>'
            f'<div class="ci-point" style="left:{100 * value:.1f}%"></div></div>')


def _run(run: RunSummary, episodes: Sequence[Episode]) -> str:
    rows = []
    for rate in [*run.tasks, run.overall]:
        value = rate.successes / rate.episodes if rate.episodes else 0.0
        lo, hi = rate.ci95
        cls = "task-rate overall" if rate is run.overall else "task-rate"
        rows.append(f'<tr class="{cls}"><td>{_e(rate.task)}</td><td>{rate.successes}/{rate.episodes}</td>'
                    f"<td>{100 * value:.0f}%</td><td>[{100 * lo:.0f}%, {100 * hi:.0f}%]</td>"
                    f"<td>{_ci_bar(lo, hi, value)}</td></tr>")
    items = []
    for ep in episodes:
        end = ep.trace.end or {}
        mark = "success" if end.get("success") else ("failure" if ep.trace.end else "unfinished")
        items.append(f'<li class="episode-link {mark}"><a href="#{ep.anchor}">{_e(ep.episode_id)}</a> '
                     f'{mark}, {len(ep.trace.steps)} steps</li>')
    label = ((run.results or {}).get("system") or {}).get("label")
    system = f'<p class="meta">system: {_e(label)}</p>' if label else ""
    return (f'<section class="run-summary" id="run-summary"><h2>Run {_e(run.folder.name)}</h2>{system}'
            '<table class="rates"><thead><tr><th>task</th><th>success</th><th>rate</th><th>95% Wilson CI</th>'
            f'<th></th></tr></thead><tbody>{"".join(rows)}</tbody></table>'
            f'<h3>Episodes</h3><ol class="episode-list">{"".join(items)}</ol></section>')


def _csp(script: str) -> str:
    digest = base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode("ascii")
    return (f"default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'sha256-{digest}'; "
            "base-uri 'none'; form-action 'none'")


def render_page(view: ViewInput) -> str:
    """The whole HTML page for ``view``."""
    script, css = _asset("viewer.js"), _asset("viewer.css")
    files = [*(f"labels: {p}" for p in view.label_files), *(f"pairs: {p}" for p in view.pair_files)]
    sources = f'<p class="meta">{_e("; ".join(files))}</p>' if files else ""
    run = _run(view.run, view.episodes) if view.run is not None else ""
    body = "".join(_episode(ep) for ep in view.episodes)
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f'<meta http-equiv="Content-Security-Policy" content="{_csp(script)}">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>collabui trace: {_e(view.source.name)}</title><style>{css}</style></head><body>"
            f'<header class="page-head" id="page-head"><h1>collabui trace viewer</h1><p class="meta">{_e(view.source)}</p>'
            f'{sources}<p class="keys">&larr; / &rarr; move between steps &middot; <span id="position"></span></p></header>'
            f"<main>{run}{body}</main><script>{script}</script></body></html>\n")
