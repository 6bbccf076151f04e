"""Verbatim SmolLM2-135M-Instruct team outputs recorded on MiniWoB++ (runs of
cookbook/measure_miniwob.py), with what the parser must make of them."""

import json
from pathlib import Path

import pytest

from collabui.actions import Unknown
from collabui.parsing import parse_action

CASES = [json.loads(line) for line in (Path(__file__).parent / "data" / "smollm2_outputs.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("case", CASES, ids=[f"case{k}" for k in range(len(CASES))])
def test_real_small_model_output(case):
    action = parse_action(case["raw"], "web")
    if case["expected"] is None:
        assert isinstance(action, Unknown) and case["error_contains"] in action.reason
    else:
        assert action.to_dict() == case["expected"]
