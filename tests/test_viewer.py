"""``collabui view``: the static HTML trace viewer.

The browser tests record real episodes (the ``random:1`` baseline, 2 agents x 2 rounds on a chain
DAG, real MiniWoB++ pages in real Chromium, screenshots on), label them with the real ``outcome``
critic and build real preference pairs, render the trace and the run folder, and open the pages in
headless Chromium. The other tests use a fixed synthetic trace (a phone-shaped episode, so the
executed element's bounds are known): its HTML structure as a snapshot, model output that tries
to inject markup, and the command's errors.
"""

from __future__ import annotations

import json
import re
import shutil
import struct
import zlib
from html.parser import HTMLParser
from pathlib import Path

import pytest

from collabui.cli import main
from collabui.errors import ConfigError
from collabui.evaluation.stats import wilson_interval
from collabui.trace import validate_record
from collabui.viewer import default_output, render_view, write_view

ARTIFACTS = Path(__file__).parent / "artifacts"  # ignored by git (.gitignore)
INJECT_THOUGHT = "<script>window.__pwned = 1</script>"
INJECT_RAW = '</script><img src=x onerror="window.__pwned = 2">'


# -- a fixed synthetic trace -------------------------------------------------------------------


def _png(width: int, height: int) -> bytes:
    """A plain grey PNG (stdlib only)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\x00" + b"\xcc\xcc\xcc" * width for _ in range(height))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def _prop(i: int, j: int, action: dict, preds: list[int], thought: str, raw: str | None = None) -> dict:
    return {"agent": i, "round": j, "predecessors": preds, "messages": [{"role": "user", "content": "Tap OK."}],
            "raw": raw or f"Thought: {thought}\nAction: {json.dumps(action)}", "thought": thought,
            "action": action, "parse_error": None}


def synthetic_run(folder: Path, *, inject: bool = False) -> Path:
    """``folder/traces/synthetic-0.jsonl``: 2 agents x 2 rounds (chain 0->1), 2 steps, a screenshot
    for step 0, plus labels and pairs files in ``folder``. Returns the trace path."""
    traces = folder / "traces"
    (traces / "synthetic-0").mkdir(parents=True)
    (traces / "synthetic-0" / "step_0000.png").write_bytes(_png(200, 120))
    topo = {"kind": "chain", "n_agents": 2, "edges": [[0, 1]]}
    ok, back = {"action": "click", "index": 1}, {"action": "navigate_back"}
    thought = INJECT_THOUGHT if inject else "OK is element 1."
    raw = INJECT_RAW if inject else None
    screen = '0: TextView "Tap OK." [0,0][200,40]\n1: Button "OK" (clickable) [20,60][120,100]'
    header = {"type": "episode", "schema": "collabui.trace", "version": 1, "episode_id": "synthetic-0",
              "env": "android", "task": "Tap OK." + (INJECT_RAW if inject else ""), "model": "scripted",
              "action_space": "mobile", "team": {"n_agents": 2, "rounds": 2}, "topology": topo}
    steps = []
    for t, (rows, vote, done) in enumerate([
        ([[_prop(0, 0, ok, [], thought, raw), _prop(0, 1, ok, [], "Still 1.")],
          [_prop(1, 0, back, [0], "Go back."), _prop(1, 1, ok, [0], "Agree: 1.")]],
         {"action": ok, "counts": [["click(1)", 3], ["navigate_back()", 1]], "votes": 3, "total": 4,
          "parsed": 4, "tie_break": None}, False),
        ([[_prop(0, 0, back, [], "Back."), _prop(0, 1, back, [], "Back.")],
          [_prop(1, 0, back, [0], "Back."), _prop(1, 1, back, [0], "Back.")]],
         {"action": back, "counts": [["navigate_back()", 4]], "votes": 4, "total": 4, "parsed": 4,
          "tie_break": None}, True),
    ]):
        steps.append({"type": "step", "t": t, "observation": {"text": screen, "task": header["task"]},
                      "history": [] if t == 0 else ["click(1)"], "topology": topo, "proposals": rows,
                      "vote": vote, "executed": vote["action"], "reward": 1.0 if done else 0.0, "done": done,
                      "screenshot": "synthetic-0/step_0000.png" if t == 0 else None,
                      "timings": {"team_s": 0.5}})
    records = [header, *steps, {"type": "end", "reward": 1.0, "success": True, "steps": 2}]
    for rec in records:
        validate_record(rec)  # a trace collabui itself could have written
    path = traces / "synthetic-0.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records), "utf-8")
    label = {"episode_id": "synthetic-0", "t": 0, "critic": "verified", "scores": [[1.0, 1.0], [0.0, 1.0]],
             "rewards": [[1, 1], [0, 1]], "reasons": [["right", "right"], ["wrong", "right"]]}
    (folder / "labels_verified.jsonl").write_text(json.dumps(label) + "\n", "utf-8")
    pair = {"prompt": [{"role": "user", "content": "Tap OK."}], "episode_id": "synthetic-0", "t": 0,
            "agent": 1, "round": 1, "score": 1.0, "rejected_source": "own",
            "chosen": [{"role": "assistant", "content": 'Action: {"action": "click", "index": 1}'}],
            "rejected": [{"role": "assistant", "content": 'Action: {"action": "navigate_back"}'}]}
    (folder / "pairs.jsonl").write_text(json.dumps(pair) + "\n", "utf-8")
    return path


class _Outline(HTMLParser):
    """The page's outline: ``tag#id.class`` of every section, table and svg, in document order."""

    def __init__(self) -> None:
        super().__init__()
        self.items: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag in {"section", "table", "svg", "img", "nav"} or (tag == "div" and a.get("class") == "matrix"):
            ident = f"#{a['id']}" if a.get("id") else ""
            classes = "".join(f".{c}" for c in (a.get("class") or "").split())
            self.items.append(f"{tag}{ident}{classes}")


def outline(html: str) -> list[str]:
    parser = _Outline()
    parser.feed(html)
    return parser.items


MATRIX = ["section.matrix-section", "div.matrix", "svg.read-gutter", "svg.read-gutter"]  # a gutter per round
STEP0 = ["section#ep-synthetic-0-t0.step", "section.screen", "img.shot", "svg.shot-overlay", "section.task",
         "section.observation", "section.dag", "svg.dag-svg", *MATRIX,
         "section.vote", "table.tally", "section.outcome", "section.labels", "table.heatmap", "section.pairs",
         "table.pairs-table"]
STEP1 = ["section#ep-synthetic-0-t1.step", "section.screen", "section.task", "section.observation",
         "section.dag", "svg.dag-svg", *MATRIX, "section.vote", "table.tally",
         "section.outcome"]


def test_html_structure_snapshot(tmp_path):
    html = render_view(synthetic_run(tmp_path))
    assert outline(html) == ["section#ep-synthetic-0.episode", "nav.step-nav", *STEP0, *STEP1]
    run = render_view(tmp_path)  # the folder: the run summary first
    assert outline(run) == ["section#run-summary.run-summary", "table.rates", "section#ep-synthetic-0.episode",
                            "nav.step-nav", *STEP0, *STEP1]


@pytest.mark.parametrize(("memory", "supersteps"), [(True, 3), (False, 2)])
def test_the_dag_note_counts_the_supersteps_the_step_recorded(tmp_path, memory, supersteps):
    """A chain of 2 agents x 2 rounds: with one-round memory agent 0's round 1 waits for its round
    0 (L + m - 1 = 3 supersteps); without it both rounds of a layer run together (L = 2)."""
    path = synthetic_run(tmp_path)
    records = [json.loads(line) for line in path.read_text().splitlines()]
    for rec in records[1:-1]:
        for row in rec["proposals"]:
            for p in row:
                p["superstep"] = p["agent"] + (p["round"] if memory else 0)
    path.write_text("".join(json.dumps(r) + "\n" for r in records), "utf-8")
    assert f"; {supersteps} supersteps (L=2, m=2)" in render_view(path)


def test_synthetic_step_content(tmp_path):
    html = render_view(synthetic_run(tmp_path))
    # the executed element (index 1, bounds [20,60][120,100]) outlined in screenshot pixels
    assert '<rect class="target-box" x="20.0" y="60.0" width="100.0" height="40.0"' in html
    assert "topological order: a0 &rarr; a1" in html and "3 supersteps per step" in html
    assert len(re.findall(r'<div class="cell[ "]', html)) == 8 and html.count('class="cell winner"') == 3 + 4
    assert "&larr; a0 r1" in html and "&larr; own r0" in html  # what agent 1 read in round 1
    assert "winner <code>click(1)</code> 3/4 votes" in html
    assert "critic <b>verified</b>" in html and html.count('class="heat"') == 4
    assert "Preference pairs (1)" in html
    assert "no screenshot recorded" in html  # step 1 has none, and says so


def web_trace(folder: Path, *, image: tuple[int, int], area: list[int] | None,
              box: list[int] | None) -> Path:
    """A one-step web trace: 1 agent clicked element B (``box`` in CSS pixels, None as in traces
    recorded before boxes) on a screenshot of ``image`` pixels showing ``area`` of the page."""
    (folder / "web-0").mkdir(parents=True)
    (folder / "web-0" / "step_0000.png").write_bytes(_png(*image))
    node = {"tag": "button", "id": "B", "parts": ["OK"], "dom": 0, **({"box": box} if box else {})}
    tree = {"tag": "", "id": None, "parts": [{"tag": "div", "id": None, "parts": ["Press OK"]}, node]}
    topo = {"kind": "independent", "n_agents": 1, "edges": []}
    click = {"action": "click", "element_id": "B"}
    extra = {"tree": tree, **({"screenshot_area": area} if area else {})}
    header = {"type": "episode", "schema": "collabui.trace", "version": 1, "episode_id": "web-0",
              "env": "miniwob/click-button", "task": "Press OK", "model": "scripted", "action_space": "web",
              "team": {"n_agents": 1, "rounds": 1}, "topology": topo}
    step = {"type": "step", "t": 0, "observation": {"text": "< <div| Press OK> <button[B]| OK> >", "extra": extra},
            "history": [], "topology": topo, "proposals": [[_prop(0, 0, click, [], "OK is B.")]],
            "vote": {"action": click, "counts": [["click('B')", 1]], "votes": 1, "total": 1, "parsed": 1},
            "executed": click, "reward": 1.0, "done": True, "screenshot": "web-0/step_0000.png"}
    for rec in (header, step):
        validate_record(rec)
    path = folder / "web-0.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in (header, step)), "utf-8")
    return path


def _target_box(html: str) -> tuple[float, float, float, float] | None:
    found = re.search(r'<rect class="target-box" x="([\d.]+)" y="([\d.]+)" width="([\d.]+)" '
                      r'height="([\d.]+)"', html)
    return tuple(float(v) for v in found.groups()) if found else None  # type: ignore[return-value]


@pytest.mark.parametrize("image, area, box, rect", [
    ((160, 210), [0, 0, 160, 210], [2, 52, 31, 21], (2, 52, 31, 21)),  # MiniWoB++ at 1x
    ((80, 105), [0, 0, 160, 210], [2, 52, 31, 21], (1, 26, 15.5, 10.5)),  # a downscaled capture
    ((320, 420), [0, 0, 160, 210], [2, 52, 31, 21], (4, 104, 62, 42)),  # device scale 2
    ((100, 100), [50, 50, 100, 100], [40, 60, 30, 20], (0, 10, 20, 20)),  # area offset, cut at its edge
])
def test_web_element_outlined_scaled_to_the_screenshot(tmp_path, image, area, box, rect):
    html = render_view(web_trace(tmp_path, image=image, area=area, box=box))
    assert _target_box(html) == rect


def test_mobile_miniwob_bounds_scaled_to_the_screenshot(tmp_path):
    """Mobile MiniWoB++ bounds are CSS pixels; its screenshots are at the phone's device scale
    (Pixel 7: 2.625, so the 160 x 210 task area is 420 x 551 pixels)."""
    trace = synthetic_run(tmp_path)
    lines = [json.loads(line) for line in trace.read_text().splitlines()]
    lines[0]["env"] = "miniwob-mobile/click-button"
    lines[1]["observation"]["extra"] = {"screenshot_area": [0, 0, 160, 210]}
    trace.write_text("".join(json.dumps(r) + "\n" for r in lines))
    (trace.parent / "synthetic-0" / "step_0000.png").write_bytes(_png(420, 551))
    left, top, width, height = _target_box(render_view(trace))  # element 1: [20,60][120,100]
    assert (left, width) == (52.5, 262.5) and abs(top - 60 * 551 / 210) < 0.06 and abs(height - 40 * 551 / 210) < 0.06


@pytest.mark.parametrize("area, box, why", [
    (None, [2, 52, 31, 21], "does not record which part of the page the screenshot shows"),
    ([0, 0, 160, 210], None, "element B has no recorded box"),
    ([0, 0, 160, 210], [2, 300, 31, 21], "element B lies outside the screenshot"),
])
def test_web_element_not_outlined_says_why(tmp_path, area, box, why):
    html = render_view(web_trace(tmp_path, image=(160, 210), area=area, box=box))
    assert _target_box(html) is None and why in html


def dag_trace(folder: Path, n: int, m: int, edges: list[list[int]]) -> Path:
    """A one-step trace of n agents x m rounds on the DAG ``edges``, every agent clicking B."""
    topo = {"kind": "edges", "n_agents": n, "edges": edges}
    click = {"action": "click", "element_id": "B"}
    rows = [[_prop(i, j, click, [a for a, b in edges if b == i], f"a{i} r{j}") for j in range(m)] for i in range(n)]
    header = {"type": "episode", "schema": "collabui.trace", "version": 1, "episode_id": "dag-0",
              "env": "miniwob/click-button", "task": "Press OK", "model": "scripted", "action_space": "web",
              "team": {"n_agents": n, "rounds": m}, "topology": topo}
    step = {"type": "step", "t": 0, "observation": {"text": "<button[B]| OK>"}, "history": [], "topology": topo,
            "proposals": rows, "vote": {"action": click, "counts": [["click('B')", n * m]], "votes": n * m,
                                        "total": n * m, "parsed": n * m},
            "executed": click, "reward": 1.0, "done": True}
    for rec in (header, step):
        validate_record(rec)
    path = folder / "dag-0.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in (header, step)), "utf-8")
    return path


def _arrow(html: str, src: str, dst: str) -> str:
    found = re.search(rf'<g class="read-arrow \w+" data-from="{src}" data-to="{dst}">.*?</g>', html)
    assert found, (src, dst)
    return found.group(0)


@pytest.mark.parametrize("n, m, edges", [
    (3, 3, [[0, 1], [0, 2], [1, 2]]),  # complete on 3
    (4, 2, [[0, 1], [0, 2], [0, 3]]),  # star
    (3, 1, []),  # independent, one round: nothing read
    (2, 2, [[1, 0]]),  # a reader above its predecessor
])
def test_read_arrows_one_per_edge_and_round_and_own_link(tmp_path, n, m, edges):
    html = render_view(dag_trace(tmp_path, n, m, edges))
    assert html.count('<g class="read-arrow peer"') == len(edges) * m
    assert html.count('<g class="read-arrow own"') == n * (m - 1)
    assert html.count('<svg class="read-gutter"') == m
    for a, b in edges:
        for j in range(m):
            _arrow(html, f"{a}:{j}", f"{b}:{j}")
    for i in range(n):
        for j in range(1, m):
            _arrow(html, f"{i}:{j - 1}", f"{i}:{j}")


def test_read_arrow_geometry(tmp_path):
    """Rows are equal in height: row i spans [i/n, (i+1)/n] of the gutter. A peer arrow leaves
    the predecessor's row at 65% and enters the reader's at 65%, ending at the gutter's right
    edge (the reader's cell); an own arrow crosses the gutter at 35% of the row."""
    html = render_view(dag_trace(tmp_path, 3, 3, [[0, 1], [0, 2], [1, 2]]))
    peer = _arrow(html, "0:1", "2:1")
    lines = re.findall(r'<line x1="([\d.]+)" y1="([\d.]+)%" x2="([\d.]+)" y2="([\d.]+)%"', peer)
    assert len(lines) == 3 and lines[0][1] == "21.67" and lines[-1][3] == "88.33"
    width = re.search(r'<svg class="read-gutter"[^>]* width="(\d+)"[^>]*data-round="1"', html).group(1)
    assert lines[-1][2] == width and lines[0][0] == width  # from the cell edge back to the cell edge
    assert 'marker-end=' in peer.split("<line")[-1]  # the arrowhead on the last segment only
    own = _arrow(html, "2:1", "2:2")
    assert re.search(r'<line x1="0" y1="78.33%" x2="\d+" y2="78.33%" marker-end=', own)
    # the two shorter arrows (span 1) take lanes nearer the cells than the span-2 one
    xs = {key: float(re.findall(r'x2="([\d.]+)"', _arrow(html, *key))[0]) for key in
          [("0:1", "1:1"), ("1:1", "2:1"), ("0:1", "2:1")]}
    assert xs[("0:1", "2:1")] < min(xs[("0:1", "1:1")], xs[("1:1", "2:1")])


def test_model_output_cannot_inject_markup(tmp_path):
    html = render_view(synthetic_run(tmp_path, inject=True))
    assert html.count("<script") == 1 and html.count("</script>") == 1  # the viewer's own only
    assert "<img src=x" not in html and "window.__pwned" not in html.split("<script>")[1]
    assert "&lt;script&gt;window.__pwned = 1&lt;/script&gt;" in html
    assert "&lt;/script&gt;&lt;img src=x onerror=&quot;window.__pwned = 2&quot;&gt;" in html
    assert "Content-Security-Policy" in html and "script-src 'sha256-" in html


def test_default_output_and_command(tmp_path, capsys):
    trace = synthetic_run(tmp_path)
    assert default_output(trace) == trace.with_suffix(".html")
    assert default_output(tmp_path) == tmp_path / "index.html"
    assert main(["view", str(trace)]) == 0 and trace.with_suffix(".html").is_file()
    out = tmp_path / "page" / "x.html"
    assert main(["view", str(tmp_path), "--out", str(out), "--labels", str(tmp_path / "labels_verified.jsonl")]) == 0
    assert f"wrote {out}" in capsys.readouterr().out


def test_open_hands_the_page_to_the_browser(tmp_path):
    """--open goes through webbrowser, which runs $BROWSER first: a script that records its
    argument stands in for a real browser."""
    import os
    import subprocess
    import sys

    trace = synthetic_run(tmp_path)
    record = tmp_path / "opened.txt"
    browser = tmp_path / "fake-browser"
    browser.write_text(f'#!/bin/sh\nprintf "%s" "$1" > {record}\n')
    browser.chmod(0o755)
    env = {**os.environ, "BROWSER": str(browser)}
    done = subprocess.run([sys.executable, "-m", "collabui.cli", "view", str(trace), "--open"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert record.read_text() == trace.with_suffix(".html").resolve().as_uri()


@pytest.mark.parametrize("make, match", [
    (lambda p: p / "missing.jsonl", "no trace or run folder at"),
    (lambda p: (p / "notes.jsonl").write_text('{"a": 1}\n') and p / "notes.jsonl", "is not a collabui trace"),
    (lambda p: p, "holds no trace"),
])
def test_bad_input_is_one_line(tmp_path, capsys, make, match):
    path = make(tmp_path)
    with pytest.raises(ConfigError, match=match):
        write_view(path)
    assert main(["view", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and match in err and err.count("\n") == 1


def test_bad_labels_file_is_one_line(tmp_path, capsys):
    trace = synthetic_run(tmp_path)
    (tmp_path / "bad.jsonl").write_text('{"x": 1}\n')
    assert main(["view", str(trace), "--labels", str(tmp_path / "bad.jsonl")]) == 2
    assert "without episode_id, t and scores" in capsys.readouterr().err


# -- real episodes in real Chromium ------------------------------------------------------------


@pytest.fixture(scope="module")
def recorded_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real `eval miniwob` run folder (2 tasks x 2 episodes, 2 agents x 2 rounds, screenshots),
    labelled by the outcome critic, with rule-adversary preference pairs."""
    from collabui.config import TeamConfig
    from collabui.evaluation.miniwob import MiniWoBEvalConfig, evaluate_miniwob

    folder = tmp_path_factory.mktemp("run")
    config = MiniWoBEvalConfig(tasks="click-button,click-link", episodes=2, model="random:1",
                               team=TeamConfig(n_agents=2, rounds=2, topology="chain", max_steps=2, screenshots=True))
    evaluate_miniwob(config, folder, progress=False)
    traces = str(folder / "traces")
    assert main(["train", "label", "--traces", traces, "--critic", "outcome",
                 "--out", str(folder / "labels_outcome.jsonl")]) == 0
    assert main(["train", "pairs", "--traces", traces, "--labels", str(folder / "labels_outcome.jsonl"),
                 "--adversary", "rule", "--out", str(folder / "pairs.jsonl")]) == 0
    return folder


@pytest.fixture(scope="module")
def chromium():
    from playwright.sync_api import sync_playwright

    from collabui.devices.browser import CHROMIUM_ARGS, resolve_chromium

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=resolve_chromium(None), headless=True,
                                     args=list(CHROMIUM_ARGS))
        yield browser
        browser.close()


def _open(chromium, html: Path):
    page = chromium.new_page(viewport={"width": 1400, "height": 1000})
    problems: list[str] = []
    page.on("console", lambda msg: problems.append(f"{msg.type}: {msg.text}") if msg.type in {"error", "warning"} else None)
    page.on("pageerror", lambda exc: problems.append(f"pageerror: {exc}"))
    page.on("request", lambda req: problems.append(f"request: {req.url}") if not req.url.startswith(("file:", "data:")) else None)
    page.goto(html.resolve().as_uri())
    return page, problems


def _save_screenshot(page, tmp_path: Path, name: str) -> None:
    shot = tmp_path / name
    page.screenshot(path=str(shot), full_page=True)
    ARTIFACTS.mkdir(exist_ok=True)
    shutil.copy(shot, ARTIFACTS / name)


def _arrow_tips(page, step_id: str) -> list[list]:
    """Per read arrow of the step: from, to, its tip (end of its last line) and the reader's cell
    left edge, top and bottom, as laid out."""
    return page.evaluate("""(id) => [...document.querySelectorAll('#' + id + ' .read-arrow')].map(g => {
        const lines = g.querySelectorAll('line'), tip = lines[lines.length - 1];
        const [a, r] = g.dataset.to.split(':');
        const cell = document.getElementById(id + '-a' + a + '-r' + r).getBoundingClientRect();
        const svg = tip.ownerSVGElement.getBoundingClientRect();
        return [g.dataset.from, g.dataset.to, svg.left + tip.x2.baseVal.value, svg.top + tip.y2.baseVal.value,
                cell.left, cell.top, cell.bottom]; })""", step_id)


def _visible_step(page) -> str:
    return page.evaluate("""() => [...document.querySelectorAll('section.step')]
        .filter(s => s.offsetParent !== null).map(s => s.id).join(',')""")


@pytest.mark.browser
def test_recorded_trace_in_chromium(recorded_run, chromium, tmp_path):
    trace = max(sorted((recorded_run / "traces").glob("*.jsonl")), key=lambda p: len(p.read_text().splitlines()))
    out = write_view(trace, tmp_path / "trace.html")  # labels and pairs found one folder up
    page, problems = _open(chromium, out)
    first = _visible_step(page)
    assert first.endswith("-t0")
    step = page.locator(f"#{first}")
    assert step.locator(".matrix .cell").count() == 4  # n x m
    assert step.locator("div.matrix").get_attribute("data-n") == "2"
    # chain 0 -> 1, 2 rounds: 2 peer arrows and 2 own-previous ones, each ending on its reader's cell
    assert step.locator(".read-arrow.peer").count() == 2 and step.locator(".read-arrow.own").count() == 2
    for src, dst, tip_x, tip_y, left, top, bottom in _arrow_tips(page, first):
        assert abs(tip_x - left) <= 2 and top < tip_y < bottom, (src, dst)
    page.hover(f"#{first}-a1-r1")  # agent 1, round 1 read agent 0's round 1 and its own round 0
    assert sorted(page.evaluate(f"[...document.querySelectorAll('#{first} .read-arrow.active')]"
                                ".map(g => g.dataset.from)")) == ["0:1", "1:0"]
    page.mouse.move(0, 0)
    assert step.locator("section.vote .vote-winner").inner_text().startswith("winner ")
    assert step.locator("img.shot").get_attribute("src").startswith("data:image/png;base64,")
    assert "outlined from its recorded box" in step.inner_text() or "names no element" in step.inner_text()
    assert step.locator("svg.dag-svg line.dag-edge").count() == 1  # chain 0 -> 1
    assert step.locator("table.heatmap td.heat").count() == 4  # the outcome critic's matrix
    page.keyboard.press("ArrowRight")
    assert _visible_step(page).endswith("-t1")
    page.keyboard.press("ArrowLeft")
    assert _visible_step(page) == first
    _save_screenshot(page, tmp_path, "viewer-trace.png")
    assert problems == []
    page.close()


@pytest.mark.browser
def test_recorded_run_folder_in_chromium(recorded_run, chromium, tmp_path):
    assert main(["view", str(recorded_run)]) == 0
    page, problems = _open(chromium, recorded_run / "index.html")
    rows = page.locator("table.rates tr.task-rate")
    assert [rows.nth(k).locator("td").first.inner_text() for k in range(rows.count())] == \
        ["click-button", "click-link", "all"]
    results = json.loads((recorded_run / "results.json").read_text())
    overall = results["overall"]["success_rate"]
    lo, hi = wilson_interval(overall["successes"], overall["n"])
    assert rows.nth(2).locator("td").nth(3).inner_text() == f"[{100 * lo:.0f}%, {100 * hi:.0f}%]"
    assert page.locator("ol.episode-list a").count() == 4
    assert page.locator("section.episode").count() == 4
    visible = [page.evaluate("document.body.dataset.currentStep")]
    for _ in range(3):
        page.keyboard.press("ArrowRight")
        visible.append(page.evaluate("document.body.dataset.currentStep"))
    assert len(set(visible)) == 4  # each press moved to another step (across episodes too)
    page.locator("ol.episode-list a").nth(3).click()
    # The page follows the link's hash change on its own turn of the event loop: wait for it.
    page.wait_for_function("document.body.dataset.currentStep.endsWith('-t0')", timeout=5000)
    assert page.locator("section.pairs").count() >= 1 and page.locator("section.labels").count() >= 4
    _save_screenshot(page, tmp_path, "viewer-run.png")
    assert problems == []
    page.close()


@pytest.mark.browser
def test_web_outline_lands_on_the_executed_element(chromium, tmp_path):
    """A real MiniWoB++ episode (the lexical baseline clicks a button): the recorded box covers
    the button's face on the screenshot, and the page draws the outline there, scaled to the
    image as displayed."""
    from PIL import Image

    from collabui.evaluation.miniwob import MiniWoBEvalConfig, default_team, evaluate_miniwob

    config = MiniWoBEvalConfig(tasks="click-button", episodes=1, model="lexical",
                               team=default_team("lexical", max_steps=1, screenshots=True))
    evaluate_miniwob(config, tmp_path / "run", progress=False)
    trace = next((tmp_path / "run" / "traces").glob("*.jsonl"))
    step = json.loads(trace.read_text().splitlines()[1])
    extra = step["observation"]["extra"]
    assert extra["screenshot_area"] == [0, 0, 160, 210]
    node = next(e for e in _nodes(extra["tree"]) if e.get("id") == step["executed"]["element_id"])
    assert node["tag"] == "button" and all(isinstance(v, int) for v in node["box"])
    assert all("box" in e for e in _nodes(extra["tree"]) if e.get("id"))  # every interactive node
    x, y, w, h = node["box"]
    image = Image.open(trace.parent / step["screenshot"]).convert("RGB")
    face = [image.getpixel((u, v)) for u in range(x + 3, x + w - 3) for v in range(y + 3, y + h - 3)]
    gray = sum(1 for p in face if all(225 <= c <= 245 for c in p))  # Chromium's button face, not the page
    assert gray > len(face) / 2
    page, problems = _open(chromium, write_view(trace, tmp_path / "web.html"))
    got = page.evaluate("""() => {
        const img = document.querySelector('section.step.current img.shot');
        const r = img.getBoundingClientRect(), box = document.querySelector('section.step.current rect.target-box')
            .getBoundingClientRect();
        const s = img.clientWidth / img.naturalWidth;
        return [(box.left - r.left - img.clientLeft) / s, (box.top - r.top - img.clientTop) / s,
                box.width / s, box.height / s, s]; }""")
    assert got[4] > 1.2  # the image is shown enlarged (min-width), so the scale matters
    assert all(abs(g - e) <= 1.5 for g, e in zip(got[:4], [x, y, w, h], strict=True)), (got, node["box"])
    page.locator("section.step.current section.screen").screenshot(path=str(tmp_path / "outline.png"))
    ARTIFACTS.mkdir(exist_ok=True)
    shutil.copy(tmp_path / "outline.png", ARTIFACTS / "viewer-web-outline.png")
    assert problems == []
    page.close()


def _nodes(node):
    if isinstance(node, dict):
        yield node
        for part in node["parts"]:
            yield from _nodes(part)


@pytest.mark.browser
def test_injected_model_output_stays_text_in_chromium(chromium, tmp_path):
    page, problems = _open(chromium, write_view(synthetic_run(tmp_path, inject=True)))
    assert page.evaluate("window.__pwned") is None
    assert page.locator("img").count() == 1  # the screenshot, nothing the model wrote
    cell = page.locator("#ep-synthetic-0-t0-a0-r0")
    assert INJECT_THOUGHT in cell.locator(".cell-thought").inner_text()
    assert INJECT_RAW in cell.locator(".cell-raw pre").text_content()
    assert problems == []
    page.close()


def test_entries_skipped_by_a_decided_vote_render_as_skipped_cells(tmp_path):
    from collabui import CollabAgentTeam
    from collabui.actions.web import Click
    from collabui.devices.base import Observation
    from collabui.devices.fake import FakeDevice
    from collabui.models.fake import ScriptedChatModel
    from collabui.trace import JsonlTraceStore

    obs = Observation(text="<button[B]| Submit> <button[C]| Cancel>", task="Click Submit.")
    team = CollabAgentTeam(ScriptedChatModel(lambda r: 'Action: {"action": "click", "element_id": "B"}'),
                           n_agents=4, rounds=3, topology="independent", stop_when_decided=True)
    result = team.run(None, FakeDevice([obs], success_when=lambda a: a == Click("B")),
                      trace=JsonlTraceStore(tmp_path), episode_id="ep")
    assert result.success
    html = render_view(tmp_path / "ep.jsonl")
    assert html.count('class="cell skipped"') == 4 and html.count('class="cell winner"') == 8
    assert re.search(r"winner <code>[^<]*B[^<]*</code> 8/8 votes", html)
