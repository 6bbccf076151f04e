"""cookbook/cpu_recipe/id_probe.py: the id a trained model writes after its own screen line."""

import json

import pytest

from collabui.trace import SCHEMA_VERSION
from tests.cookbook.scripts import CPU_RECIPE, load_script

SHIPPED = CPU_RECIPE.parents[1] / "sdk" / "trained" / "smollm2"
PAGE = ('Task: Click button ONE, then click button TWO.\nPrevious actions: None\nCurrent screen:\n'
        'Location: /miniwob/click-button-sequence.html\nbutton "ONE" [Q]\nbutton "TWO" [D]')


def _trace(folder, episode: int, predecessors: list[int]) -> None:
    entry = {"agent": 0, "round": 0, "predecessors": predecessors, "thought": 'click button "ONE" [Q]',
             "action": {"action": "click", "element_id": "Q"},
             "messages": [{"role": "system", "content": "You operate a web browser to complete the user's task."},
                          {"role": "user", "content": PAGE}]}
    records = [{"type": "episode", "schema": "collabui.trace", "version": SCHEMA_VERSION,
                "env": "miniwob/click-button-sequence"},
               {"type": "step", "t": 0, "proposals": [[entry]]}, {"type": "end", "success": True}]
    path = folder / f"miniwob-click-button-sequence-{episode}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def test_the_shipped_model_writes_the_letter_of_its_line(tmp_path, capsys):
    probe = load_script("id_probe")
    _trace(tmp_path, 0, [])
    _trace(tmp_path, 1, [2])  # its prompt shows another agent's answer: not read
    clicks = probe.first_clicks(tmp_path, "click-button-sequence", 25)
    assert [thought for _, thought in clicks] == ['click button "ONE" [Q]']
    assert probe.main([str(tmp_path), "--bundle", f"shipped={SHIPPED}"]) == 0
    out = capsys.readouterr().out
    assert "(click-button-sequence, 1 episodes)" in out
    row = next(line for line in out.splitlines() if line.startswith("| shipped |"))
    letter, text = (float(x) for x in row.strip("| ").split(" | ")[1:])
    assert letter > 0.9 and text < 0.05  # v66 writes [Q]'s letter, not ONE


def test_the_target_is_read_by_the_devices_parser():
    probe = load_script("id_probe")
    field = probe.target('click input "" (Verify password) [C]')  # a label in brackets, an empty text
    assert (field.tag, field.id, field.text) == ("input", "C", "")
    assert probe.target('click link "a [b] c" [K]').id == "K"
    for thought in ("click the Submit button", 'click "ONE"', ""):
        with pytest.raises(ValueError, match="names no one element's screen line"):
            probe.target(thought)


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    probe = load_script("id_probe")
    assert probe.main([str(tmp_path)]) == 2
    assert "give each model as --bundle NAME=FOLDER" in capsys.readouterr().err
    assert probe.main([str(tmp_path), "--bundle", f"shipped={SHIPPED}"]) == 2
    assert capsys.readouterr().err.startswith("id_probe: no first-step click of click-button-sequence in ")
