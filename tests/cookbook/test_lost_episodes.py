"""cookbook/cpu_recipe/lost_episodes.py: each lost held-out episode put in one cause from its trace."""

import json

from collabui.trace import SCHEMA_VERSION
from tests.cookbook.scripts import load_script

INBOX = ('div "Ofella Etiam." [E]\nspan ".trash" [F]\nspan ".star" [P]\n'
         'div "Dru Arcu." [U]\nspan ".trash" [T]\nspan ".star" [S]')
DIALOG = 'div "Vitae." [P]\nbutton "Close" [X]\nbutton "Cancel" [B]\nbutton "OK" [O]'
PASSWORDS = 'input "" (Password) [F]\ninput "" (Verify password) [Q]\nbutton "Submit" [Z]'
FORM = 'input "radio; false" [N]\ninput "radio; false" [Q]\ninput "" [I]\ninput "" [D]\nbutton "Submit" [G]'
MOVIES = 'input "" (Genre) [T]\ninput "" (Director) [Q]\ndiv "Submit" [B]'


def _episode(folder, name, task_name, task, steps, success=False):
    """A traced episode ``name`` of ``task_name``: ``steps`` are (screen, executed action)."""
    records = [{"type": "episode", "schema": "collabui.trace", "version": SCHEMA_VERSION,
                "env": f"miniwob/{task_name}"}]
    records += [{"type": "step", "t": t, "observation": {"task": task}, "rendered_observation": screen,
                 "executed": action} for t, (screen, action) in enumerate(steps)]
    records.append({"type": "end", "success": success})
    trace = folder / "traces" / f"{name}.jsonl"
    trace.parent.mkdir(exist_ok=True)
    trace.write_text("".join(json.dumps(r) + "\n" for r in records))
    with (folder / "episodes.jsonl").open("a") as out:
        out.write(json.dumps({"task": task_name, "success": success, "trace": str(trace)}) + "\n")


def click(element_id):
    return {"action": "click", "element_id": element_id}


def typed(element_id, text):
    return {"action": "type_string", "element_id": element_id, "content": text}


def test_each_lost_episode_gets_the_cause_its_trace_shows(tmp_path, capsys):
    lost = load_script("lost_episodes")
    delete = "Find the email by Dru and click the trash icon to delete it."
    _episode(tmp_path, "d0", "email-inbox-delete", delete, [(INBOX, click("F"))])  # Ofella's icon
    _episode(tmp_path, "d1", "email-inbox-delete", delete, [(INBOX, click("T"))], success=True)
    _episode(tmp_path, "c0", "click-dialog-2", 'Click the button in the dialog box labeled "x".',
             [(DIALOG, click("B"))])
    password = 'Enter the password "abc" into both text fields and press submit.'
    _episode(tmp_path, "p0", "enter-password", password, [(PASSWORDS, typed("F", "abc")), (PASSWORDS, click("Z"))])
    # the same field twice under two ids (a shuffled page renames it) is still one field
    renamed = PASSWORDS.replace("[F]", "[K]")
    _episode(tmp_path, "p1", "enter-password", password,
             [(PASSWORDS, typed("F", "abc")), (renamed, typed("K", "abc")), (renamed, click("Z"))])
    _episode(tmp_path, "p2", "enter-password", password,
             [(PASSWORDS, typed("F", "abc")), (PASSWORDS, typed("Q", "abc")), (PASSWORDS, click("Z"))])
    sequence = 'Check the 2nd radio button and enter the number "7" into the 1st textbox.'
    _episode(tmp_path, "f0", "form-sequence-2", sequence, [(FORM, typed("I", "7")), (FORM, typed("D", "7"))])
    _episode(tmp_path, "f1", "form-sequence-2", sequence, [(FORM, click("Q")), (FORM, typed("D", "7"))])
    movies = "Search for horror movies directed by Dodson from year 1970."
    _episode(tmp_path, "m0", "multi-orderings", movies, [(MOVIES, typed("Q", "Doddson")), (MOVIES, click("B"))])
    _episode(tmp_path, "m1", "multi-orderings", movies, [(MOVIES, typed("Q", "Dodson")), (MOVIES, click("B"))])
    _episode(tmp_path, "o0", "click-option", "Select Xu and click Submit.", [(DIALOG, click("O"))])

    counts, by_task, episodes = lost.lost_causes(tmp_path)
    assert episodes == 11 and sum(by_task.values()) == 10  # d1 was won
    assert counts == {
        ("email-inbox-delete", "the trash icon of another email"): 1,
        ("click-dialog-2", '"x" read as "Cancel"'): 1,
        ("enter-password", "typed one of the two fields, then Submit"): 2,
        ("enter-password", "both fields typed, lost otherwise"): 1,
        ("form-sequence-2", "no radio ticked; the number typed 2 time(s)"): 1,
        ("form-sequence-2", "a radio ticked, lost otherwise"): 1,
        ("multi-orderings", "a value miscopied from the task"): 1,
        ("multi-orderings", "every value copied, lost otherwise"): 1,
        ("click-option", "other (1 steps)"): 1,
    }
    assert lost.main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("10 of 11 episodes lost")
    assert "| enter-password | 3 | typed one of the two fields, then Submit | 2 |" in out


def test_a_folder_without_episodes_is_one_line_and_exit_2(tmp_path, capsys):
    lost = load_script("lost_episodes")
    assert lost.main([str(tmp_path)]) == 2
    assert capsys.readouterr().err == (f"lost_episodes: no episodes.jsonl in {tmp_path}; give a `collabui eval "
                                       "miniwob` output folder\n")


def test_miscopies_counts_every_agents_typing_on_one_task(tmp_path, capsys):
    lost = load_script("lost_episodes")
    movies = "Search for horror movies directed by Dodson from year 1970."
    _episode(tmp_path, "m0", "multi-layouts", movies, [(MOVIES, typed("Q", "Dodson"))])
    trace = tmp_path / "traces" / "m0.jsonl"
    records = [json.loads(line) for line in trace.read_text().splitlines()]
    # a team step: three agents' proposals, two typing, one of them a slip
    records[1]["proposals"] = [[{"action": typed("Q", "Doddson")}, {"action": typed("Q", "Dodson")}],
                               [{"action": click("B")}]]
    trace.write_text("".join(json.dumps(r) + "\n" for r in records))
    _episode(tmp_path, "o0", "multi-orderings", movies, [(MOVIES, typed("Q", "Doddson"))])  # another task

    assert lost.miscopies(tmp_path, "multi-layouts") == (2, [(movies, "Doddson")])
    assert lost.main([str(tmp_path), "--miscopies", "multi-layouts"]) == 0
    assert capsys.readouterr().out == f"1 of 2 typing entries on multi-layouts miscopied\n- 'Doddson' x1 for: {movies}\n"
    assert lost.main([str(tmp_path / "traces"), "--miscopies", "enter-text"]) == 2
    assert capsys.readouterr().err.startswith("lost_episodes: no typing on enter-text in the traces in ")


def test_miscopies_on_a_folder_of_other_jsonl_is_one_line_and_exit_2(tmp_path, capsys):
    lost = load_script("lost_episodes")
    (tmp_path / "pairs.jsonl").write_text('{"chosen": "a"}\n')
    assert lost.main([str(tmp_path), "--miscopies", "multi-layouts"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is it a collabui trace?" in err and "its traces/" in err
