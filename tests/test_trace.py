import json
from pathlib import Path

import pytest

from collabui.errors import TraceError
from collabui.trace import (
    MAX_RAW_CHARS,
    JsonlTraceStore,
    MemoryTraceStore,
    action_schema,
    close_open_traces,
    generated_trace_schema,
    read_trace,
    validate_record,
    write_trace_schema,
)

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


SCHEMA_FILE = Path(__file__).resolve().parents[1] / "sdk" / "schemas" / "trace.schema.json"


def test_committed_schema_has_the_action_definition_generated_from_the_action_models():
    committed = json.loads(SCHEMA_FILE.read_text("utf-8"))
    assert committed == generated_trace_schema(committed), (
        "sdk/schemas/trace.schema.json is out of date with collabui.actions; run `make schema`")
    names = {b["properties"]["action"]["const"] for b in action_schema()["anyOf"]}
    assert {"click", "type_string", "finish", "navigate_home", "input_text", "unknown"} <= names


def test_schema_writer_is_idempotent_and_fixes_a_stale_action_definition(tmp_path):
    path = tmp_path / "trace.schema.json"
    path.write_text(SCHEMA_FILE.read_text("utf-8"), "utf-8")
    assert not write_trace_schema(path) and path.read_text("utf-8") == SCHEMA_FILE.read_text("utf-8")
    stale = json.loads(SCHEMA_FILE.read_text("utf-8"))
    stale["$defs"]["action"] = {"type": "object", "required": ["action"]}
    path.write_text(json.dumps(stale), "utf-8")
    assert write_trace_schema(path) and path.read_text("utf-8") == SCHEMA_FILE.read_text("utf-8")


@pytest.mark.parametrize("action", [{"action": "click", "element_id": "B", "x": 1}, {"action": "click"},
                                    {"action": "fly", "element_id": "B"}, {"action": "click", "element_id": "B C"}])
def test_actions_the_models_refuse_are_refused_in_traces(action):
    with pytest.raises(TraceError, match="executed"):
        validate_record({**STEP, "executed": action})


def test_mobile_and_cut_unknown_actions_are_valid_in_traces():
    validate_record({**STEP, "executed": {"action": "click", "index": 3}})
    cut = {"action": "unknown", "raw": "x" * MAX_RAW_CHARS, "reason": "no action", "raw_truncated": MAX_RAW_CHARS + 5}
    validate_record({**STEP, "executed": cut})


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
    first = JsonlTraceStore(tmp_path).start("e1")
    first.write(HEADER)
    first.close()
    with pytest.raises(TraceError, match="already exists"):
        JsonlTraceStore(tmp_path).start("e1")
    # Two recorders started before either wrote: the second to write finds the file there.
    a, b = JsonlTraceStore(tmp_path).start("e2"), JsonlTraceStore(tmp_path).start("e2")
    a.write(HEADER)
    with pytest.raises(TraceError, match="already exists"):
        b.write(HEADER)


def test_a_trace_appears_whole_with_its_first_record(tmp_path):
    # A signal between an episode's start and its header must not leave a 0-byte trace.
    rec = JsonlTraceStore(tmp_path).start("e1")
    assert not (tmp_path / "e1.jsonl").exists()
    rec.close()
    assert list(tmp_path.iterdir()) == []
    rec = JsonlTraceStore(tmp_path).start("e1")
    rec.write(HEADER)
    assert read_trace(tmp_path / "e1.jsonl").header["episode_id"] == HEADER["episode_id"]
    assert not list(tmp_path.glob("*.part"))


def test_memory_store_validates():
    store = MemoryTraceStore()
    rec = store.start("x")
    rec.write(HEADER)
    with pytest.raises(TraceError):
        rec.write({**END, "steps": -1})
    assert store.episodes["x"].records == [HEADER]


# --------------------------------------------------------------------------- robustness


def _step_with(raw: str, **extra) -> dict:
    unknown = {"action": "unknown", "raw": raw, "reason": "no action found"}
    prop = {**_prop(0, 0), "raw": raw, "action": unknown, **extra}
    return {**STEP, "proposals": [[prop]]}


def _lines(path) -> list[dict]:
    """Every line as strict UTF-8 JSON (what any reader, not only read_trace, must accept)."""
    return [json.loads(line.decode("utf-8")) for line in path.read_bytes().split(b"\n") if line]


def test_any_string_is_written_as_valid_utf8_json(tmp_path):
    # A lone surrogate once crashed the writer after the step's action had run, losing the step.
    raw = "Action: click('\ud800') \udfff emoji: \ud83d\ude00 sep:\u2028\x85 nul:\x00"
    rec = JsonlTraceStore(tmp_path).start("e1")
    rec.write({**HEADER, "task": "task \udc00"})
    rec.write(_step_with(raw, thought="\ud800 thinks", **{"extra \ud800": 1}))
    rec.close()
    lines = _lines(tmp_path / "e1.jsonl")
    assert len(lines) == 2 and lines[0]["task"] == "task \ufffd"
    expected = "Action: click('\ufffd') \ufffd emoji: \U0001f600 sep:\u2028\x85 nul:\x00"
    prop = read_trace(tmp_path / "e1.jsonl").steps[0]["proposals"][0][0]
    assert prop["raw"] == expected and prop["action"]["raw"] == expected
    assert prop["thought"] == "\ufffd thinks" and prop["extra \ufffd"] == 1


def test_memory_store_keeps_what_a_file_would():
    store = MemoryTraceStore()
    rec = store.start("x")
    rec.write(HEADER)
    rec.write(_step_with("\ud800"))
    assert store.episodes["x"].records[1]["proposals"][0][0]["raw"] == "\ufffd"


def test_long_raw_answers_are_cut_with_their_length_recorded(tmp_path):
    raw = "Action: " + "x" * 100_000
    rec = JsonlTraceStore(tmp_path).start("e1")
    rec.write(HEADER)
    rec.write(_step_with(raw))
    rec.write(_step_with("y" * MAX_RAW_CHARS))  # exactly at the cap: kept whole, not marked
    rec.close()
    first, second = read_trace(tmp_path / "e1.jsonl").steps
    prop = first["proposals"][0][0]
    assert MAX_RAW_CHARS == 8192
    assert prop["raw"] == raw[:8192] and prop["raw_truncated"] == len(raw)
    assert prop["action"]["raw"] == raw[:8192] and prop["action"]["raw_truncated"] == len(raw)
    assert "raw_truncated" not in second["proposals"][0][0]
    assert (tmp_path / "e1.jsonl").stat().st_size < 4 * 8192 + 4096  # two steps, two raws each
    with pytest.raises(TraceError, match="raw_truncated"):
        validate_record(_step_with("x", raw_truncated=-1))


class _FailingFile:
    """Stands in for a trace file: records write() calls; the failing one writes part of its
    data and then raises, like a disk that fills up mid-write."""

    def __init__(self, fh, fail_at: int | None = None) -> None:
        self.fh, self.fail_at, self.writes = fh, fail_at, []

    def write(self, data: bytes) -> int:
        self.writes.append(len(data))
        if len(self.writes) == self.fail_at:
            self.fh.write(data[: len(data) // 2])
            raise OSError(28, "No space left on device")
        return self.fh.write(data)

    def __getattr__(self, name):
        return getattr(self.fh, name)


def test_each_record_is_one_write_and_whole_or_absent(tmp_path):
    rec = JsonlTraceStore(tmp_path).start("e1")
    rec.write(HEADER)
    rec._fh = spy = _FailingFile(rec._fh, fail_at=2)
    big_step = {**STEP, "observation": {"text": "<div| x>" * 20_000}}
    rec.write(big_step)
    assert len(spy.writes) == 1  # the whole 160 kB line in one call
    with pytest.raises(TraceError, match="No space left"):
        rec.write(STEP)
    rec.write(END)  # starts on a fresh line: the half-written step was cut off
    rec.close()
    trace = read_trace(tmp_path / "e1.jsonl")
    assert len(trace.steps) == 1 and trace.complete


def test_header_is_replaced_while_it_is_the_only_record(tmp_path):
    rec = JsonlTraceStore(tmp_path).start("e1")
    rec.write({**HEADER, "task": ""})  # written before the environment said the task
    rec.write(HEADER)
    rec.write(STEP)
    with pytest.raises(TraceError, match="already has steps"):
        rec.write(HEADER)
    rec.write(END)
    rec.close()
    assert [r["type"] for r in _lines(tmp_path / "e1.jsonl")] == ["episode", "step", "end"]
    assert read_trace(tmp_path / "e1.jsonl").header["task"] == "Click the button."
    assert sorted(p.name for p in tmp_path.iterdir()) == ["e1.jsonl"]  # no temporary file left


def test_old_traces_still_read(tmp_path):
    # Written by the previous writer: no raw_truncated fields, text-mode lines.
    path = tmp_path / "old.jsonl"
    path.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in (HEADER, STEP, END)) + "\n",
                    encoding="utf-8")
    trace = read_trace(path)
    assert trace.complete and len(trace.steps) == 1


def test_torn_last_line_may_end_mid_character(tmp_path):
    path = tmp_path / "e1.jsonl"
    torn = json.dumps({**STEP, "observation": {"text": "天气"}}, ensure_ascii=False).encode()
    path.write_bytes(json.dumps(HEADER).encode() + b"\n" + torn[: torn.index("天".encode()) + 1])
    assert read_trace(path).steps == []


def test_open_traces_get_an_end_record_on_the_episodes_behalf(tmp_path):
    """What the stop watchdog does before ending the process: every trace still open gets its
    end record (steps counted, the outcome of a finishing step kept); closed traces, traces
    without a header yet and a trace whose lock a stuck writer holds are left alone."""
    store = JsonlTraceStore(tmp_path)
    running, finished, closed, empty, locked = (store.start(name) for name in ("a", "b", "c", "d", "e"))
    for rec in (running, finished, closed, locked):
        rec.write(HEADER)
    running.write({**STEP, "done": False, "reward": 0.0})
    running.write({**STEP, "t": 1, "done": False, "reward": 0.0})
    finished.write(STEP)  # its end record was the next thing to write
    closed.write(END)
    closed.close()
    locked._lock.acquire()
    try:
        assert close_open_traces("Interrupted: SIGINT", budget_s=0.3) >= 2  # other tests' may be open
    finally:
        locked._lock.release()
    ends = {name: read_trace(tmp_path / f"{name}.jsonl").end for name in "abce"}
    assert ends["a"]["steps"] == 2 and ends["a"]["success"] is False and ends["a"]["error"] == "Interrupted: SIGINT"
    assert ends["b"]["steps"] == 1 and ends["b"]["success"] is True and ends["b"]["reward"] == 1.0
    assert ends["c"] == END and ends["e"] is None and not (tmp_path / "d.jsonl").exists()
    with pytest.raises(TraceError, match="is closed"):
        running.write(END)  # the episode loop, should it wake up, cannot add a second end
    close_open_traces("again")  # the one whose lock was held is still open
    assert read_trace(tmp_path / "e.jsonl").end["error"] == "again"
    assert read_trace(tmp_path / "a.jsonl").end["error"] == "Interrupted: SIGINT"


def test_header_is_replaced_whole_once_steps_follow(tmp_path):
    """How the episode loop masks a password in an environment's task written before it was
    typed: the file is written again with the new header and every record after it."""
    rec = JsonlTraceStore(tmp_path).start("e1")
    rec.write({**HEADER, "task": 'Type "hunter2"'})
    rec.write(STEP)
    rec.replace_header({**HEADER, "task": 'Type "***"'})
    rec.write(END)
    trace = read_trace(tmp_path / "e1.jsonl")
    assert trace.header["task"] == 'Type "***"' and len(trace.steps) == 1 and trace.end == END
    assert b"hunter2" not in (tmp_path / "e1.jsonl").read_bytes()
    assert not list(tmp_path.glob("*.part"))
    memory = MemoryTraceStore()
    mem = memory.start("m")
    mem.write(HEADER)
    mem.write(STEP)
    mem.replace_header({**HEADER, "task": "other"})
    assert [r["type"] for r in mem.records] == ["episode", "step"] and mem.records[0]["task"] == "other"
