"""page_key: what a page shows, whatever order and ids a shuffling device gave it."""

from collabui.devices import simplify


def _page(first, second, ids=("A", "B"), value="Kim"):
    return {"tag": "", "id": None, "parts": [
        {"tag": "button", "id": ids[0], "parts": [first], "dom": 0, "box": [0, 0, 10, 10]},
        {"tag": "input", "id": ids[1], "parts": [second, value], "dom": 1, "box": [0, 20, 10, 10]}]}


def test_the_same_page_shuffled_has_one_signature_and_a_changed_one_another():
    page = _page("Ok", "name")
    shuffled = {**page, "parts": list(reversed(_page("Ok", "name", ids=("Q", "Z"))["parts"]))}
    assert simplify.page_key(page) == simplify.page_key(shuffled)
    assert simplify.page_key(page) != simplify.page_key(_page("Ok", "name", value="Kimi"))
    assert simplify.page_key(None, "screen text") == "screen text"
