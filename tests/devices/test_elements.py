"""The element tree behind the observation: html and text-first renderings, the flat element
list, and seeded shuffling of element order and ids (on real MiniWoB++ pages in Chromium)."""

from __future__ import annotations

import re
import time

import pytest

from collabui.actions import web
from collabui.devices import BrowserConfig, BrowserDevice, make_env
from collabui.devices.simplify import (
    ELEMENT_FORMATS,
    element_line,
    field_label,
    field_labels,
    flat_elements,
    parse_elements,
    parse_tree,
    render,
    render_html,
    render_text_first,
    reorder,
    screen_elements,
    tree_elements,
)
from collabui.errors import ConfigError
from tests.local_site import serve


def _node(tag, eid, *parts):
    return {"tag": tag, "id": eid, "parts": list(parts)}


#: A tree in the walk's shape: anonymous group, text-only label + field, wrapping label,
#: interactive element with non-interactive content, text run between elements.
TREE = _node(
    "", None,
    _node("h2", None, "Sign in"),
    _node("div", None, "Amazon", _node("a", "A", _node("span", None, "Amazon"))),
    _node("", None, _node("label", "B", "Username"), _node("input", "C")),
    _node("label", "D", _node("input", "E", "checkbox; true"), 'Stay "signed" in'),
    _node("div", "F", _node("", None, _node("div", None, "Cora"), _node("div", None, "Hi")),
          _node("span", "G", ".trash")),
    "Some text",
    _node("select", "H", "Red; options: Red | Blue"),
)
TREE_HTML = ('< <h2| Sign in> <div| Amazon <a[A]| <span| Amazon> > > < <label[B]| Username> '
             '<input[C]| > > <label[D]| <input[E]| checkbox; true> Stay "signed" in> '
             '<div[F]| < <div| Cora> <div| Hi> > <span[G]| .trash> > Some text '
             '<select[H]| Red; options: Red | Blue> >')
TREE_TEXT_FIRST = "\n".join([
    "Sign in", "Amazon", 'a "Amazon" [A]', 'label "Username" [B]', 'input "" (Username) [C]',
    r'label "Stay \"signed\" in" [D]', r'input "checkbox; true" (Stay "signed" in) [E]', 'div "Cora Hi" [F]',
    'span ".trash" [G]', "Some text", 'select "Red; options: Red | Blue" (Hi) [H]',
])


def test_render_html_follows_the_walks_spacing_rules():
    assert render_html(TREE) == TREE_HTML
    assert render(TREE, "html") == TREE_HTML
    assert render_html(None) == render_text_first(None) == ""


def test_element_line_is_the_elements_own_line_of_the_screen():
    screen = render_text_first(TREE).splitlines()
    for eid in "ABCDEFGH":
        assert element_line(TREE, eid, "text-first") in screen
    assert element_line(TREE, "F", "html") == "<div[F]| Cora Hi>"  # nested elements left out
    assert element_line(TREE, "Z") is None and element_line(None, "A") is None
    with pytest.raises(ValueError, match="element_format"):
        element_line(TREE, "A", "xml")


def test_text_first_fields_carry_their_labels_so_empty_ones_differ():
    # Two empty fields read `input ""` alike; the label before the id tells them apart, and the
    # line reads back (parse_elements) with its own text and id.
    form = _node("", None, _node("", None, _node("div", None, "Year"), _node("input", "K")),
                 _node("", None, _node("div", None, "Genre " + "x" * 80), _node("input", "W")))
    lines = render_text_first(form).splitlines()
    assert lines[1] == 'input "" (Year) [K]'
    assert lines[3].startswith('input "" (Genre xxx') and lines[3].endswith('…) [W]')
    assert len(lines[3]) < 80  # a long label is cut
    assert element_line(form, "K", "text-first") == lines[1]
    assert element_line(form, "K", "text-first", with_id=False) == 'input ""'  # the history adds the label
    parsed = [(e.tag, e.id, e.text) for e in parse_elements("\n".join(lines)) if e.id]
    assert parsed == [("input", "K", ""), ("input", "W", "")]


def test_render_text_first_is_one_line_per_item():
    assert render_text_first(TREE) == TREE_TEXT_FIRST
    assert render(TREE, "text-first") == TREE_TEXT_FIRST
    assert len(TREE_TEXT_FIRST) < len(TREE_HTML)
    with pytest.raises(ValueError, match=r"\['html', 'text-first', 'text-first-ordinal', 'text-first-typed'\]"):
        render(TREE, "xml")


def test_flat_elements_match_the_parsed_text_and_name_fields():
    flat = flat_elements(TREE)
    parsed = [e for e in parse_elements(TREE_HTML) if e.id]
    assert [(e["id"], e["tag"], e["text"], e["full_text"]) for e in flat] == \
        [(e.id, e.tag, e.text, e.full_text) for e in parsed]
    context = {e["id"]: e["context"] for e in flat}
    assert context["A"] == "Amazon" and context["C"] == "Username"  # a text-only label names a field
    assert context["E"] == 'Stay "signed" in'  # the label wrapping it
    assert context["G"] == "Hi"  # the row an icon belongs to
    assert context["H"] == "Some text"
    assert flat_elements(None) == []


def test_a_fields_label_is_its_wrapping_label_or_the_text_beside_it():
    assert field_labels(tree_elements(TREE)) == {
        "C": "Username",  # a text-only label beside it
        "E": 'Stay "signed" in',  # the label wrapping it
        "H": "Hi",  # nothing beside it: the nearest text before it
    }
    # A label written after its field belongs to it, not to the next field.
    after = "< < <input[A]| > <div| Genre> > < <input[B]| > <div| Year> > <div[C]| Search> >"
    before = "< < <span| Year:> <input[A]| > > < <span| Genre:> <input[B]| > > <button[C]| Go> >"
    assert field_labels(parse_elements(after)) == {"A": "Genre", "B": "Year"}
    assert field_labels(parse_elements(before)) == {"A": "Year:", "B": "Genre:"}
    # The tree and its html text give the same labels; the history reads them from the tree.
    for text in (after, before, TREE_HTML):
        tree = parse_tree(text)[0]
        assert field_labels(tree_elements(tree)) == field_labels(parse_elements(text))
    assert field_label(parse_tree(after)[0], "B") == "Year"
    assert field_label(TREE, "A") == "" and field_label(TREE, "Z") == "" and field_label(None, "C") == ""


def test_elements_of_the_tree_are_those_of_its_text_and_exact_where_the_text_is_not():
    assert tree_elements(TREE) == parse_elements(TREE_HTML)
    assert [render_html(root) for root in parse_tree(TREE_HTML)] == [TREE_HTML]
    # Page text holding "<" or ">" is mis-split when read back; the tree keeps it whole.
    tricky = _node("", None, _node("button", "A", "a <b> c"), _node("button", "B", "Ok"))
    assert [(e.id, e.full_text) for e in tree_elements(tricky) if e.id] == [("A", "a <b> c"), ("B", "Ok")]
    assert [(e.id, e.full_text) for e in parse_elements(render_html(tricky)) if e.id] != [("A", "a <b> c"),
                                                                                        ("B", "Ok")]
    # screen_elements reads the tree when there is one, the text only without it.
    assert screen_elements("<button[Z]| stale>", tricky) == tree_elements(tricky)
    assert [e.id for e in screen_elements("<button[Z]| stale>") if e.id] == ["Z"]
    # A text cut off inside a node keeps that node with what it holds.
    cut = parse_tree("< <button[A]| Ok> <div| Lorem ipsum ...(truncated)")
    assert [e.full_text for e in tree_elements(cut[0])] == ["Ok Lorem ipsum ...(truncated)", "Ok",
                                                             "Lorem ipsum ...(truncated)"]


def test_parse_elements_reads_text_first_screens_too():
    parsed = parse_elements("Location: /x.html\n" + TREE_TEXT_FIRST)
    assert [(e.id, e.tag, e.text) for e in parsed if e.id] == \
        [(e["id"], e["tag"], _label) for e, _label in zip(flat_elements(TREE), [
            "Amazon", "Username", "", 'Stay "signed" in', "checkbox; true", "Cora Hi", ".trash",
            "Red; options: Red | Blue"], strict=True)]
    assert (parsed[0].tag, parsed[0].id, parsed[0].text) == ("", None, "Location: /x.html")
    assert {e.depth for e in parsed} == {0}


def test_browser_config_validates_page_options():
    assert ELEMENT_FORMATS == ("html", "text-first", "text-first-ordinal", "text-first-typed")
    with pytest.raises(ConfigError, match=r"element_format must be one of \['html', 'text-first', 'text-first-ordinal', 'text-first-typed'\]"):
        BrowserConfig(element_format="markdown")
    with pytest.raises(ConfigError, match="shuffle_elements"):
        BrowserConfig(shuffle_elements="yes")
    with pytest.raises(ConfigError, match="shuffle_seed"):
        BrowserConfig(shuffle_seed=1.5)
    with pytest.raises(ConfigError, match="miniwob-mobile shows an indexed element list"):
        make_env("miniwob-mobile/click-button", shuffle_elements=True)


# -- real pages --------------------------------------------------------------------------------

#: Texts the in-page walk rendered itself before rendering moved to Python (same seeds).
GOLDEN = {
    ("click-button", 0): "< <div| donec lacus, ridiculus> <button[A]| okay> <button[B]| okay> "
                         "<input[C]| > <button[D]| next> <div| enim id at> >",
    ("click-button", 1): "< <div| cursus dis justo> <div| facilisis proin aliquam> <button[A]| Ok> "
                         "<div| pharetra turpis scelerisque> <div| rutrum lectus adipiscing> "
                         "<div| pretium, aliquet egestas> >",
    ("enter-text", 0): "< <input[A]| > <button[B]| Submit> >",
    ("click-checkboxes", 0): "< < <label[A]| <input[B]| checkbox; false> AU> <label[C]| "
                             "<input[D]| checkbox; false> HF2> > <button[E]| Submit> >",
    ("click-checkboxes", 1): "< < <label[A]| <input[B]| checkbox; false> USa> <label[C]| "
                             "<input[D]| checkbox; false> DKkQH> > <button[E]| Submit> >",
    # Labels without a control are names, not targets: no id (see simplify.js).
    ("login-user", 0): "< < <label| Username> <input[A]| > > < <label| Password> "
                       "<input[B]| password> > <button[C]| Login> >",
    ("email-inbox", 0): "< < <h2| Primary> <span[A]| #open-search> > <div[B]| < <div| Audrey> "
                        "<div| Ridiculus eget...> <div| Imperdiet. Curs..> > < <span[C]| .trash> "
                        "<span[D]| .star> > > <div[E]| < <div| Cora> <div| In id.> "
                        "<div| Lacus. At sit. ..> > < <span[F]| .trash> <span[G]| .star> > > "
                        "<div[H]| < <div| Bobine> <div| Cras. Convallis..> <div| Purus feugiat. ..> "
                        "> < <span[I]| .trash> <span[J]| .star> > > <div[K]| < <div| Bevvy> "
                        "<div| Tincidunt.> <div| Quis varius. Se..> > < <span[L]| .trash> "
                        "<span[M]| .star> > > >",
    # This label names its input with `for=`: clicking it focuses the input, so it keeps an id.
    ("use-autocomplete", 0): "< <label[A]| Tags:> <input[B]| > <button[C]| Submit> >",
}
TEXT_FIRST_LOGIN = ('Username\ninput "" (Username) [A]\nPassword\n'
                    'input "password" (Password) [B]\nbutton "Login" [C]')
LENGTH_TASKS = ["click-button", "click-link", "enter-text", "login-user-popup", "click-checkboxes"]


@pytest.fixture(scope="module")
def env():
    device = make_env("miniwob/click-button")
    yield device
    device.close()


@pytest.fixture(scope="module")
def shuffled():
    device = make_env("miniwob/click-button", shuffle_elements=True)
    yield device
    device.close()


def _settled(env, observation, expected):
    # email-inbox's icons are CSS `content:url(...)` images: sized (so listed) once loaded.
    for _ in range(30):
        if observation.text == expected:
            break
        time.sleep(0.1)
        observation = env.observe()
    return observation


@pytest.mark.browser
@pytest.mark.parametrize(("task", "seed"), list(GOLDEN))
def test_python_rendering_reproduces_the_walks_old_text(env, task, seed):
    observation = env.reset(seed=seed, options={"task_name": task})
    observation = _settled(env, observation, GOLDEN[task, seed])
    assert observation.text == GOLDEN[task, seed]
    tree = observation.extra["tree"]
    assert render_html(tree) == observation.text
    assert observation.extra["elements"] == len(flat_elements(tree))
    assert [e["id"] for e in flat_elements(tree)] == [e.id for e in parse_elements(observation.text)
                                                     if e.id]
    assert tree_elements(tree) == parse_elements(observation.text)  # the structure readers get


@pytest.mark.browser
def test_text_first_observations_are_shorter_and_actionable():
    with make_env("miniwob/login-user", element_format="text-first") as device:
        observation = device.reset(seed=0)
        assert observation.text == TEXT_FIRST_LOGIN
        lengths = {}
        for task in [*LENGTH_TASKS, "email-inbox", "social-media"]:
            observation = device.reset(seed=0, options={"task_name": task})
            assert observation.text == render_text_first(observation.extra["tree"])
            lengths[task] = (len(render_html(observation.extra["tree"])), len(observation.text))
        # Pages of a few controls cost about the same (the same tag, text and id per element,
        # and each field repeats its label); nested layouts save a lot (no wrapper tags, no
        # anonymous groups).
        assert sum(t for _, t in map(lengths.get, LENGTH_TASKS)) < \
            1.1 * sum(h for h, _ in map(lengths.get, LENGTH_TASKS))
        assert all(t < 0.8 * h for h, t in map(lengths.get, ["email-inbox", "social-media"]))
        observation = device.reset(seed=0, options={"task_name": "click-button"})
        assert _click_target(device, observation).reward == 1.0


def _target(observation):
    return re.fullmatch(r'Click on the "(.+)" button\.', observation.task).group(1)


def _click_target(device, observation):
    target = _target(observation)
    element = next(e for e in flat_elements(observation.extra["tree"])
                   if e["tag"] == "button" and e["full_text"] == target)
    return device.act(web.Click(element["id"]))


def _ids(observation):
    return [e["id"] for e in flat_elements(observation.extra["tree"])]


def _items(observation):
    return [(e["tag"], e["full_text"]) for e in flat_elements(observation.extra["tree"])]


@pytest.mark.browser
def test_shuffled_ids_still_hit_their_elements(shuffled):
    for seed in range(5):
        observation = shuffled.reset(seed=seed, options={"task_name": "click-button"})
        ids = _ids(observation)
        assert len(set(ids)) == len(ids) == observation.extra["elements"]
        assert all(re.fullmatch(r"[A-Z]{1,2}", i) for i in ids)
        outcome = _click_target(shuffled, observation)
        assert outcome.reward == 1.0, (seed, observation.text, outcome.info)


@pytest.mark.browser
def test_shuffle_is_a_function_of_the_seeds(shuffled):
    first = shuffled.reset(seed=3, options={"task_name": "click-checkboxes"})
    later = [shuffled.observe() for _ in range(8)]  # same page, next observation counts
    again = shuffled.reset(seed=3)
    assert again.text == first.text and again.extra == first.extra
    assert [shuffled.observe().text for _ in range(8)] == [o.text for o in later]
    # Same page content, other order and ids as the observation count moves on.
    assert all(sorted(_items(o)) == sorted(_items(first)) for o in later)
    assert len({tuple(_ids(o)) for o in [first, *later]}) == 9
    assert len({tuple(_items(o)) for o in [first, *later]}) > 1
    assert len({_ids(o)[0] for o in [first, *later]}) > 1  # "A" is not the first element


@pytest.mark.browser
def test_replay_of_seed_and_actions_gives_identical_observations(shuffled):
    def episode():
        observation = shuffled.reset(seed=11, options={"task_name": "click-checkboxes"})
        texts = [observation.text]
        for element in flat_elements(observation.extra["tree"])[:2]:
            texts.append(shuffled.act(web.Click(element["id"])).observation.text)
        return texts

    assert episode() == episode()


@pytest.mark.browser
def test_a_label_keeps_its_field_while_rows_shuffle(shuffled):
    shuffled.reset(seed=0, options={"task_name": "login-user"})
    for observation in [shuffled.observe() for _ in range(6)]:
        fields = [e for e in flat_elements(observation.extra["tree"]) if e["tag"] == "input"]
        assert [e["context"] for e in fields] == ["Username", "Password"]
        assert re.search(r"<label\| Username> <input\[[A-Z]+\]\| >", observation.text)
    shuffled.reset(seed=0, options={"task_name": "click-button"})
    observations = [shuffled.observe() for _ in range(6)]
    assert len({tuple(_items(o)) for o in observations}) > 1  # a row of buttons is shuffled


@pytest.mark.browser
def test_reorder_moves_what_the_walks_shuffle_moves_and_keeps_every_id(env):
    buttons = env.reset(seed=0, options={"task_name": "click-button"})
    tree, text = buttons.extra["tree"], buttons.text
    orders = [reorder(tree, seed) for seed in range(6)]
    assert buttons.extra["tree"] == tree and render_html(tree) == text  # the page's own tree is untouched
    assert all(sorted(flat_elements(o), key=lambda e: e["id"]) == sorted(flat_elements(tree), key=lambda e: e["id"])
               for o in orders)  # the same elements, ids and texts
    assert len({tuple(e["id"] for e in flat_elements(o)) for o in orders}) > 1  # a row of buttons moves
    assert reorder(tree, 3) == orders[3] and reorder(None, 3) is None
    login = env.reset(seed=0, options={"task_name": "login-user"})
    for seed in range(6):  # a label and its field stay together, as in the walk's shuffle
        assert re.search(r"<label\| Username> <input\[[A-Z]+\]\| >", render_html(reorder(login.extra["tree"], seed)))


PAGE = ("<html><body><p>Pick one</p>" + "".join(f"<button onclick=\"document.title='b{i}'\">"
        f"b{i}</button>" for i in range(12)) + "</body></html>")


@pytest.mark.browser
def test_plain_browser_shuffles_from_shuffle_seed(tmp_path):
    (tmp_path / "page.html").write_text(PAGE)
    texts = {}
    for shuffle_seed in (0, 1):
        with serve(tmp_path) as site, BrowserDevice(shuffle_elements=True,
                                                    shuffle_seed=shuffle_seed) as device:
            first = device.reset(options={"url": site.url("page.html")}).text
            assert device.reset(options={"url": site.url("page.html")}).text == first
            element = next(e for e in flat_elements(device.observe().extra["tree"])
                           if e["full_text"] == "b7")
            assert device.act(web.Click(element["id"])).observation.tabs == ("b7",)
            texts[shuffle_seed] = first
    assert texts[0] != texts[1]
    for text in texts.values():
        assert text.startswith("< <p| Pick one> <button[")  # text keeps its place
        assert re.findall(r"\| (b\d+)>", text) != [f"b{i}" for i in range(12)]
