"""The search's candidate order: labels read beside their fields, unquoted values matched to
the field whose label the task mentions (pure functions; the search on real pages is in
test_verified.py)."""

from __future__ import annotations

from collabui.actions import web
from collabui.devices.base import Observation
from collabui.training.candidates import field_labels, rank_candidates, unquoted_values

LABEL_BEFORE = "< < <span| Year:> <input[A]| > > < <span| Genre:> <input[B]| > > <button[C]| Submit> >"
LABEL_AFTER = "< < <input[A]| > <div| Director> > < <input[B]| > <div| Year> > <div[C]| Search> >"
TASK = "Search for drama movies directed by Lee from year 1990."


def test_labels_are_read_before_or_after_the_field_in_its_group():
    assert field_labels(LABEL_BEFORE) == {"A": "Year:", "B": "Genre:"}
    assert field_labels(LABEL_AFTER) == {"A": "Director", "B": "Year"}


def test_each_mentioned_label_gets_the_word_beside_its_mention_first():
    year, director, genre = unquoted_values(TASK, ["Year", "Director Name", "Genre"])
    assert year[0] == "1990" and director[0] == "Lee"
    # Genre is never mentioned: the one word no mentioned field claimed comes first.
    assert genre[0] == "drama"
    # Words that match a label ("directed", "year") or only say what to do are never values.
    assert not {"directed", "year", "Search", "for"} & {*year, *director, *genre}


def test_unquoted_values_are_typed_only_when_a_verb_asks_for_typing():
    obs = Observation(text=LABEL_BEFORE, task=TASK)
    candidates = rank_candidates(TASK, obs)
    assert candidates[0] == web.TypeString("A", "1990")
    assert web.TypeString("B", "drama") in candidates
    focus = "Focus into the 2nd input box."
    assert all(isinstance(a, web.Click) for a in rank_candidates(focus, Observation(text=LABEL_BEFORE, task=focus)))


def test_a_typed_value_is_not_offered_again():
    obs = Observation(text="< < <span| Year:> <input[A]| 1990> > < <span| Genre:> <input[B]| > > <button[C]| Submit> >",
                      task=TASK)
    typing = [a for a in rank_candidates(TASK, obs, [web.TypeString("A", "1990")]) if isinstance(a, web.TypeString)]
    assert typing and all(a.element_id == "B" and a.content != "1990" for a in typing)


def test_a_value_whose_typing_did_not_stick_may_be_typed_again():
    task = 'Enter the username "tula" and the password "pv" and press login.'
    history = [web.TypeString("A", "tula"), web.TypeString("B", "pv")]
    lost = Observation(text="< <input[A]| tula> <input[B]| password> <button[C]| OK> >", task=task)
    kept = Observation(text="< <input[A]| tula> <input[B]| password; **> <button[C]| OK> >", task=task)
    assert web.TypeString("B", "pv") in rank_candidates(task, lost, history)
    assert not [a for a in rank_candidates(task, kept, history) if isinstance(a, web.TypeString)]


def test_a_suggestion_holding_the_quoted_values_is_clicked_before_other_unmatched_elements():
    # use-autocomplete: "Bermuda" matches neither "Ber" nor "uda" as a word, so without the
    # tie-break it came after the label and the button (and past the search's branch limit).
    task = 'Enter an item that starts with "Ber" and ends with "uda".'
    screen = ("< < <label[A]| Tags:> <input[B]| Ber> <button[C]| Submit> > "
              "<ul[D]| <li[E]| <div| Benin> > <li[F]| <div| Bermuda> > > >")
    clicks = [a for a in rank_candidates(task, Observation(text=screen, task=task), [web.TypeString("B", "Ber")])
              if isinstance(a, web.Click)]
    order = [a.element_id for a in clicks]
    assert order.index("F") < min(order.index("A"), order.index("C"), order.index("E")), order


FORM = ("< < <label[A]| Code:> <input[B]| > > < <span| City> <input[C]| > > "
        "< <label[D]| Size> <select[E]| --; options: -- | Small | Large> > <button[F]| OK> >")


def test_a_quoted_value_goes_first_into_the_field_whose_label_the_task_names_beside_it():
    task = 'Put "maple" in the City box and set code to "42", then press OK.'
    candidates = rank_candidates(task, Observation(text=FORM, task=task))
    # No typing verb, but quoted values no element shows are to be typed, each into its field.
    assert set(candidates[:2]) == {web.TypeString("C", "maple"), web.TypeString("B", "42")}


def test_an_option_the_task_names_comes_first_and_the_chosen_option_is_no_candidate():
    task = "Choose Large in the size menu and click OK."
    candidates = rank_candidates(task, Observation(text=FORM, task=task))
    assert candidates[0] == web.Select("E", "Large")
    assert web.Select("E", "--") not in candidates
    assert candidates.index(web.Click("F")) < candidates.index(web.Select("E", "Small"))
