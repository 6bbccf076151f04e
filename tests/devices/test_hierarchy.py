"""Hierarchy XML -> visible elements -> indexed lines, on recorded-style dumps of real screens."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from collabui.devices.hierarchy import parse_bounds, parse_hierarchy
from collabui.devices.ui_elements import (
    UIElement,
    element_record,
    parse_line,
    parse_lines,
    render_elements,
    render_line,
    screen_records,
)
from collabui.errors import DeviceError

FIXTURES = Path(__file__).parent / "fixtures"


def screen(name: str, **kw):
    return parse_hierarchy((FIXTURES / f"{name}.xml").read_text(encoding="utf-8"), **kw)


def labels(name: str, **kw) -> list[str]:
    return [e.label for e in screen(name, **kw).elements]


def test_launcher_lists_icons_and_hides_system_bars():
    parsed = screen("launcher")
    assert parsed.size == (1080, 2400) and parsed.foreground == "com.google.android.apps.nexuslauncher"
    names = [e.label for e in parsed.elements]
    assert {"Phone", "Messages", "Chrome", "Settings"} - set(names) == {"Settings"}
    assert "10:42" not in names and "Battery 87 percent." not in names
    with_bars = labels("launcher", show_system_ui=True)
    assert "10:42" in with_bars and "Home" in with_bars
    chrome = next(e for e in parsed.elements if e.label == "Chrome")
    assert chrome.clickable and chrome.long_clickable and chrome.center == (676, 2075)


def test_settings_rows_take_their_texts_and_lists_clip_their_rows():
    parsed = screen("settings_list")
    text = render_elements(parsed.elements)
    assert '3: LinearLayout "Network & internet | Mobile, Wi‑Fi, hotspot" (clickable) ' \
           '[0,440][1080,650]' in text
    # Titles absorbed by their row are not listed again; the row past the list's edge is gone.
    assert "Network & internet" not in labels("settings_list")
    assert not any("Accessibility" in e.label for e in parsed.elements)
    assert parsed.elements[-1].bounds == (0, 2136, 1080, 2337)  # clipped to the list
    assert text.startswith("0: RecyclerView id=recycler_view (scrollable) [0,132][1080,2337]")


def test_form_fields_hints_password_and_disabled_button():
    lines = render_elements(screen("form").elements).splitlines()
    assert lines[2] == ('2: EditText "" hint="Email" (clickable, long-clickable, editable) '
                        '[66,400][1014,560]')
    assert 'hint="Password"' in lines[3] and "password" in lines[3]
    assert lines[4] == '4: CheckBox "Remember me" (clickable, unchecked) [66,800][600,900]'
    assert lines[5].endswith("(clickable, disabled) [66,960][1014,1100]")
    filled = render_elements(screen("form_filled").elements)
    assert 'EditText "***" (clickable, long-clickable, editable, focused, password)' in filled
    assert "•" not in filled and "hunter2" not in filled


def test_webview_content_is_listed_and_offscreen_content_is_not():
    found = labels("webview")
    assert {"mathematician", "computer scientist", "Open main menu"} <= set(found)
    assert "Early life and education" not in found  # at y=2600, below the screen
    search = next(e for e in screen("webview").elements if e.hint == "Search Wikipedia")
    assert search.editable and search.text == ""
    long = next(e for e in screen("webview").elements if e.label.startswith("Alan Mathison"))
    assert render_elements([long]).count("\u2026") == 1  # long text is cut


def test_dialog_buttons_are_listed():
    found = labels("dialog")
    assert found[-2:] == ["Cancel", "Delete"] and "Delete holiday.jpg?" in found
    selected = next(e for e in screen("dialog").elements if e.selected)
    assert selected.label == "holiday.jpg | 3.4 MB, Feb 20"


def test_keyboard_is_reported_and_hides_what_it_covers():
    parsed = screen("keyboard")
    assert parsed.keyboard == (0, 1520, 1080, 2337)
    found = [e.label for e in parsed.elements]
    assert "q" not in found and "Chats are end-to-end encrypted" not in found
    compose = next(e for e in parsed.elements if e.editable)
    assert compose.focused and compose.hint == "Text message" and compose.text == ""
    send = next(e for e in parsed.elements if e.label == "Send SMS")
    assert not send.enabled


def test_long_list_keeps_only_rows_inside_the_list():
    parsed = screen("long_list")
    names = [e.label for e in parsed.elements if e.type == "ViewGroup"]
    assert names[0] == "Aaron Bell" and names[-1] == "Ben Carter" and "Bianca Rossi" not in names
    assert all(e.bounds[3] <= 2200 for e in parsed.elements if e.type == "ViewGroup")


def test_non_ascii_text_survives_and_quotes_are_escaped():
    text = render_elements(screen("non_ascii").elements)
    assert '"Café crème à 8 h | Einkaufsliste: Äpfel, Brötchen"' in text
    assert '"日本語のメモ 🎉 | 買い物リスト"' in text and '"إضافة ملاحظة"' in text
    line = next(ln for ln in text.splitlines() if "He said" in ln)
    assert parse_line(line)["label"] == 'He said "hi" then left'


def test_parse_line_round_trip_and_helpers():
    element = UIElement(type="Switch", text="Wi-Fi", bounds=(900, 300, 1040, 380),
                        clickable=True, checkable=True, checked=True)
    parsed = parse_line("4: " + render_elements([element])[3:])
    assert parsed == {"index": 4, "type": "Switch", "label": "Wi-Fi",
                      "flags": ["clickable", "checked"], "bounds": (900, 300, 1040, 380)}
    assert parse_lines("Location: x\n0: View [0,0][1,1]")[0]["type"] == "View"
    assert parse_bounds("[0,132][1080,2337]") == (0, 132, 1080, 2337)
    assert parse_bounds("nonsense") is None
    assert render_elements([]) == "(no visible elements)"
    with pytest.raises(ValueError):
        parse_line("not a line")


def test_invisible_nodes_and_malformed_xml():
    xml = ('<hierarchy rotation="0"><node class="android.widget.FrameLayout" package="p" '
           'bounds="[0,0][100,200]"><node class="android.widget.Button" text="Hidden" '
           'visible-to-user="false" clickable="true" bounds="[0,0][50,50]"/>'
           '<node class="android.widget.Button" text="Shown" clickable="true" '
           'bounds="[0,100][50,150]"/><node class="android.widget.Button" text="Off" '
           'clickable="true" bounds="[0,300][50,350]"/></node></hierarchy>')
    assert [e.label for e in parse_hierarchy(xml).elements] == ["Shown"]
    with pytest.raises(DeviceError, match="unreadable UI hierarchy"):
        parse_hierarchy("<hierarchy><node")


def test_element_records_say_what_the_lines_say():
    """The records a phone device keeps beside the text (``extra["ui_elements"]``) equal what
    reading each line back gives: a long label cut, a password masked, flags and bounds."""
    elements = [
        UIElement("Button", "Wi-Fi   settings", clickable=True, bounds=(0, 0, 10, 10)),
        UIElement("EditText", "", hint="Search", editable=True, clickable=True, bounds=(0, 10, 10, 20)),
        UIElement("EditText", "hunter2", password=True, editable=True, bounds=(0, 20, 10, 30)),
        UIElement("CheckBox", "Remember me", checkable=True, checked=True, enabled=False, bounds=(1, 2, 3, 4)),
        UIElement("TextView", "x" * 200, bounds=(0, 30, 10, 40)),
        UIElement("ImageButton", resource_id="com.app:id/back", clickable=True, bounds=(5, 5, 6, 6)),
    ]
    records = [element_record(i, e) for i, e in enumerate(elements)]
    assert records == [parse_line(render_line(i, e)) for i, e in enumerate(elements)]
    assert records[2]["label"] != "hunter2" and records[4]["label"].endswith("\u2026")
    text = render_elements(elements)
    assert screen_records(text, records) == records == screen_records(text)
    assert screen_records("0: View [0,0][1,1]", records[:1]) == records[:1]  # the records, not the text
    # Records kept through a trace's JSON read back the same, bounds a tuple as parse_line's.
    assert screen_records(text, json.loads(json.dumps(records))) == records
