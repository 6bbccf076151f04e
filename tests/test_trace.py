import json

import pytest

from collabui.errors import TraceError
from collabui.trace import JsonlTraceStore, MemoryTraceStore, read_trace, validate_record

HEADER = {
    "type": "episode", "schema": "collabui.trace", "version": 1, "episode_id": "e1",
    "task": "Click the button.", "team": {}, "action_space": "web",
    "topology": {"kind": "chain", "n_agents": 2, "edges": [[0, 1]]},
}
MSG = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]


def _prop(i, j):
    return {"agent": i, "round": j, "predecessors": [], "messages": MSG, "raw": "Action: {}",
            "action": {"action": "click", "element_id": "B"}}


STEP = {
    "type": "step", "t": 0, "observation": {"text": "<button[B]| OK>"}, "history": [],
    "topology": HEADER["topology"], "proposals": [[_prop(0, 0)], [_prop(1, 0)]],
    "vote": {"action": {"action": "click", "element_id": "B"}, "counts": [["click('B')", 2]], "votes": 2, "total": 2, "parsed": 2},
    "executed": {"action": "click", "element_id": "B"}, "reward": 1.0, "done": True,
}
END = {"type": "end", "reward": 1.0, "success": True, "steps": 1}


def test_jsonl_round_trip_and_screenshot(tmp_path):
    store = JsonlTraceStore(tmp_path)
    rec = store.start("e1")
    rec.write(HEADER)
    ref = rec.add_screenshot(0, b"\x89PNG fake")
    rec.write({**STEP, "screenshot": ref})
    rec.write(END)
    rec.close()
    trace = read_trace(tmp_path / "e1.jsonl")
    assert trace.complete and trace.header["task"] == "Click the button."
    assert (tmp_path / trace.steps[0]["screenshot"]).read_bytes() == b"\x89PNG fake"
    assert [p["agent"] for _, p in trace.proposals()] == [0, 1]


def test_invalid_record_is_refused_with_location():
    bad = {**STEP, "proposals": [[{**_prop(0, 0), "messages": []}]]}
    with pytest.raises(TraceError, match="proposals/0/0/messages"):
        validate_record(bad)
    with pytest.raises(TraceError, match="type"):
        validate_record({"type": "nope"})


def test_trace_is_readable_after_a_crash_mid_write(tmp_path):
    path = tmp_path / "e1.jsonl"
    path.write_text(json.dumps(HEADER) + "\n" + json.dumps(STEP) + "\n" + '{"type": "st')
    trace = read_trace(path)
    assert len(trace.steps) == 1 and not trace.complete


def test_unknown_schema_version_says_what_to_do(tmp_path):
    path = tmp_path / "old.jsonl"
    path.write_text(json.dumps({**HEADER, "version": 99}) + "\n")
    with pytest.raises(TraceError, match="upgrade collabui"):
        read_trace(path)


def test_existing_trace_is_never_overwritten(tmp_path):
    JsonlTraceStore(tmp_path).start("e1").close()
    with pytest.raises(TraceError, match="already exists"):
        JsonlTraceStore(tmp_path).start("e1")


def test_memory_store_validates():
    store = MemoryTraceStore()
    rec = store.start("x")
    rec.write(HEADER)
    with pytest.raises(TraceError):
        rec.write({**END, "steps": -1})
    assert store.episodes["x"].records == [HEADER]
