import pytest

from collabui.actions import Unknown
from collabui.actions.web import Click, Finish, ScrollPage, TypeString
from collabui.vote import arbitrate, majority_vote, pass_over, vote_decided


def test_majority_over_whole_matrix_not_last_round():
    # Round 2 alone would pick click(C); the whole matrix picks click(B) (4 votes vs 2).
    matrix = [
        [Click("B"), Click("B"), Click("C")],
        [Click("B"), Click("B"), Click("C")],
    ]
    vote = majority_vote(matrix)
    assert vote.action == Click("B")
    assert vote.votes == 4 and vote.total == 6 and vote.parsed == 6
    assert vote.counts[0] == ("click('B')", 4)
    assert vote.tie_break is None


def test_canonical_equality_case_and_whitespace():
    matrix = [
        [TypeString("e", "Hello  World"), TypeString("E", "hello world")],
        [TypeString("E", " HELLO world "), Click("B")],
    ]
    vote = majority_vote(matrix)
    assert vote.votes == 3
    assert vote.action.key() == TypeString("E", "hello world").key()


def test_different_arguments_are_different_actions():
    matrix = [[TypeString("E", "a", press_enter=True), TypeString("E", "a", press_enter=False), ScrollPage("down")]]
    vote = majority_vote(matrix)
    assert vote.votes == 1 and len(vote.counts) == 3


def test_tie_goes_to_last_round_count():
    # B and C have 2 votes each; C has more votes in the last round.
    matrix = [
        [Click("B"), Click("C")],
        [Click("B"), Click("C")],
    ]
    vote = majority_vote(matrix)
    assert vote.action == Click("C")
    assert vote.tie_break == "last-round count"


def test_tie_in_last_round_goes_to_lowest_agent():
    matrix = [
        [Click("D"), Click("B")],
        [Click("D"), Click("C")],
        [Click("B"), Click("C")],
    ]
    # B:2 (one in last round, agent 0), C:2 (two in last round) -> C wins by last-round count.
    assert majority_vote(matrix).action == Click("C")
    matrix = [[Click("B")], [Click("C")]]
    vote = majority_vote(matrix)
    assert vote.action == Click("B")
    assert vote.tie_break == "latest round, lowest agent id"


def test_tie_break_is_deterministic():
    matrix = [[Click("X"), Finish()], [Finish(), Click("X")], [ScrollPage("up"), ScrollPage("up")]]
    assert len({majority_vote(matrix).action.key() for _ in range(20)}) == 1


def test_unknown_never_wins_while_any_parsed():
    u = Unknown(raw="??", reason="no json")
    matrix = [[u, u, u], [u, u, Click("B")]]
    vote = majority_vote(matrix)
    assert vote.action == Click("B")
    assert vote.parsed == 1 and vote.votes == 1
    assert ("unknown", 5) in vote.counts


def test_all_unparsable_gives_unknown():
    u = Unknown(raw="??", reason="no json")
    vote = majority_vote([[u, u], [u, u]])
    assert isinstance(vote.action, Unknown)
    assert vote.parsed == 0 and vote.total == 4
    assert "parsable" in vote.action.reason


def test_tie_without_last_round_votes_goes_to_the_latest_round():
    # A and B have 2 votes each and none in the last round (round 2 is all singletons).
    # A's latest vote is in round 1, B's only in round 0, so A wins, although B was proposed
    # by the lowest agent id (0) and comes first in reading order.
    matrix = [
        [Click("B"), Click("X"), Click("P")],
        [Click("B"), Click("A"), Click("Q")],
        [Click("A"), Click("Y"), Click("R")],
    ]
    vote = majority_vote(matrix)
    assert vote.action == Click("A")
    assert vote.votes == 2 and vote.tie_break == "latest round, lowest agent id"
    assert [c for c, _ in vote.counts[:2]] == ["click('A')", "click('B')"]


def test_lowest_agent_id_is_counted_in_the_latest_round_only():
    # A and B tie on votes (2), last-round votes (0) and latest round (1). In round 1, B comes
    # from agent 1 and A from agent 2: B wins, although agent 0 proposed A (in round 0).
    matrix = [
        [Click("A"), Click("X"), Click("P")],
        [Click("Y"), Click("B"), Click("Q")],
        [Click("B"), Click("A"), Click("R")],
    ]
    vote = majority_vote(matrix)
    assert vote.action == Click("B")
    assert vote.votes == 2 and vote.tie_break == "latest round, lowest agent id"



def _multi_layouts_tie():
    """A 6-6 tie seen in v73's validation (multi-layouts): sources 1 and 2 (they read no peer)
    type the genre each round; agent 0 (the DAG's sink) and agent 3 click Submit each round."""
    typed = TypeString("R", "thriller")
    return [[Click("C")] * 3, [typed] * 3, [typed] * 3, [Click("C")] * 3]


def test_independent_proposals_break_a_tie_before_the_agent_id():
    matrix = _multi_layouts_tie()
    assert majority_vote(matrix).action == Click("C")  # lowest id: agent 0 clicks
    vote = majority_vote(matrix, independent=(1, 2))
    assert vote.action == TypeString("R", "thriller")
    assert vote.votes == 6 and vote.tie_break == "independent count"
    # Sources on both sides, one each: the count of theirs is even, the agent id decides again.
    vote = majority_vote(matrix, independent=(0, 1))
    assert vote.action == Click("C") and vote.tie_break == "latest round, lowest agent id"


def test_independent_proposals_come_after_the_last_round_count():
    # B leads the last round (2 vs 0); C has both of the source's entries: the last round decides.
    matrix = [[Click("C"), Click("B")], [Click("C"), Click("B")]]
    vote = majority_vote(matrix, independent=(0,))
    assert vote.action == Click("B") and vote.tie_break == "last-round count"


def test_independent_agents_never_outvote_a_count():
    # The sources all propose B, but C has more votes overall: the count stands.
    matrix = [[Click("B"), Click("B")], [Click("C"), Click("C")], [Click("C"), Click("C")]]
    vote = majority_vote(matrix, independent=(0,))
    assert vote.action == Click("C") and vote.tie_break is None


def test_pass_over_breaks_the_remaining_tie_by_independent_proposals():
    # Stale submit set aside: the two other proposals tie 3-3; the source's one wins.
    matrix = [[Click("S")] * 3, [Click("X")] * 3, [Click("S")] * 3, [TypeString("R", "a")] * 3]
    result = majority_vote(matrix, independent=(3,))
    again = pass_over(result, matrix, lambda a: a == Click("S"), independent=(3,))
    assert again.action == TypeString("R", "a") and again.passed_over == "click('S')"
    assert pass_over(result, matrix, lambda a: a == Click("S")).action == Click("X")


def _login_split():
    """The password step of login-user: five agents click Login, seven type the password but
    three of them mistype it. Rows are agents, columns rounds."""
    good, typo = TypeString("E", "hunter2"), TypeString("E", "hunter3")
    return [
        [good, good, good],
        [Click("L"), Click("L"), Click("L")],
        [typo, good, typo],
        [Click("L"), Click("L"), typo],
    ]


def test_exact_rule_lets_an_agreeing_minority_beat_a_split_majority():
    vote = majority_vote(_login_split())
    assert vote.action == Click("L") and vote.votes == 5
    assert vote.rule == "exact" and vote.target_votes is None
    assert "rule" not in vote.to_dict()  # the paper's rule keeps the recorded shape


def test_target_rule_decides_the_element_first_then_the_wording():
    vote = majority_vote(_login_split(), rule="target")
    assert vote.action == TypeString("E", "hunter2")
    assert vote.target_votes == 7 and vote.votes == 4 and vote.total == 12
    # The tally still lists every exact proposal, so the trace shows the split.
    assert dict(vote.counts) == {"type_string('E', 'hunter2', False)": 4, "click('L')": 5,
                                 "type_string('E', 'hunter3', False)": 3}
    assert vote.to_dict()["rule"] == "target" and vote.to_dict()["target_votes"] == 7


def test_target_rule_keeps_different_elements_and_kinds_apart():
    matrix = [[TypeString("E", "a"), TypeString("F", "a"), Click("E")],
              [TypeString("E", "b", press_enter=True), Click("E"), Click("E")]]
    vote = majority_vote(matrix, rule="target")
    # type_string into E (2, wording differs) loses to click on E (3): kind and element both count.
    assert vote.action == Click("E") and vote.target_votes == 3


def test_target_rule_groups_answers_by_finishing():
    matrix = [[Finish("42"), Finish("forty-two"), ScrollPage("down")],
              [ScrollPage("down"), Finish("42"), Click("B")]]
    vote = majority_vote(matrix, rule="target")
    assert vote.action == Finish("42") and vote.target_votes == 3 and vote.votes == 2
    assert majority_vote(matrix).action == ScrollPage("down")  # exact: 2-2 tie, last round


def test_target_of_an_action_leaves_out_only_its_wording():
    assert TypeString("e", "x", press_enter=True).target() == TypeString("E", "y").target()
    assert TypeString("E", "x").target() != TypeString("F", "x").target()
    assert Click("E").target() != TypeString("E", "x").target()


def test_unknown_vote_rule_names_the_choices():
    with pytest.raises(ValueError, match=r"vote rule 'majority' is unknown; use one of \['exact', 'target'\]"):
        majority_vote([[Click("B")]], rule="majority")


# -- an arbiter overruling the count -----------------------------------------------------------------

def test_an_arbiter_picks_an_outvoted_proposal_in_the_agents_wording():
    matrix = [
        [Click("B"), Click("B"), Click("B")],
        [TypeString("E", "Hello World"), Click("B"), Click("B")],
    ]
    vote = arbitrate(majority_vote(matrix), matrix, TypeString("e", "hello world"), name="lexical")
    # The agent's own wording is executed, with the votes it had.
    assert vote.action == TypeString("E", "Hello World") and vote.votes == 1
    answer = TypeString("e", "hello world").to_call()
    assert vote.arbiter == {"model": "lexical", "answer": answer, "chose": True, "overruled": True}
    assert vote.to_dict()["arbiter"]["chose"] is True
    assert vote.counts[0] == ("click('B')", 5)  # the tally stays the agents'


def test_an_arbiter_answer_no_agent_proposed_leaves_the_vote():
    matrix = [[Click("B"), Click("C")], [Click("B"), Click("B")]]
    counted = majority_vote(matrix)
    for answer in (Click("Z"), Unknown(raw="??", reason="no JSON"), None):
        vote = arbitrate(counted, matrix, answer, name="lexical")
        assert vote.action == Click("B") and vote.votes == 3
        assert vote.arbiter["chose"] is False
    agreed = arbitrate(counted, matrix, Click("B"), name="x").arbiter
    assert agreed["chose"] is True and agreed["overruled"] is False
    assert "arbiter" not in counted.to_dict()  # traces without an arbiter keep their shape


# -- a vote decided before every entry is in (TeamConfig.stop_when_decided) ----------------------

_ALPHABET = (Click(element_id="A"), Click(element_id="B"), TypeString(element_id="A", content="x"),
             TypeString(element_id="A", content="y"), Unknown(raw="?", reason="unparsable"))


def _partial(rng, n=4, m=3):
    """A random n x m matrix whose entries after a random cut (in reading order by round) are None."""
    cells = [(j, i) for j in range(m) for i in range(n)]
    cut = rng.randrange(len(cells) + 1)
    matrix = [[None] * m for _ in range(n)]
    for j, i in cells[:cut]:
        matrix[i][j] = rng.choice(_ALPHABET[:2] if rng.random() < 0.6 else _ALPHABET)
    return matrix


def _completions(matrix):
    import itertools

    holes = [(i, j) for i, row in enumerate(matrix) for j, a in enumerate(row) if a is None]
    for fill in itertools.product(_ALPHABET, repeat=len(holes)):
        full = [list(row) for row in matrix]
        for (i, j), a in zip(holes, fill, strict=True):
            full[i][j] = a
        yield full


@pytest.mark.parametrize("rule", ["exact", "target"])
def test_a_decided_vote_has_the_same_winner_whatever_the_missing_entries_say(rule):
    import random

    rng = random.Random(7)
    decided = 0
    for _ in range(400):
        matrix = _partial(rng, n=3, m=2)
        if sum(a is None for row in matrix for a in row) > 4 or not vote_decided(matrix, rule=rule):
            continue
        decided += 1
        partial = majority_vote(matrix, rule=rule).action.key()
        for full in _completions(matrix):
            assert majority_vote(full, rule=rule).action.key() == partial, (matrix, full)
    assert decided >= 40  # the property was checked on many decided matrices, not vacuously


def test_a_vote_is_decided_only_when_the_lead_exceeds_the_entries_to_come():
    a, b = Click(element_id="A"), Click(element_id="B")
    # 4 x 3: round 0 unanimous for A and two of round 1: A has 6, 6 entries to come -> a tie is possible
    matrix = [[a, a, None], [a, a, None], [a, None, None], [a, None, None]]
    assert not vote_decided(matrix)
    matrix[2][1] = a  # 7 against at most 5
    assert vote_decided(matrix)
    matrix[2][1] = b  # 6 against at most 1 + 5
    assert not vote_decided(matrix)


def test_unparsable_entries_and_an_empty_matrix_decide_nothing():
    u = Unknown(raw="?", reason="unparsable")
    assert not vote_decided([[None, None], [None, None]])
    assert not vote_decided([[u, u], [u, None]])
    assert vote_decided([[Click(element_id="A"), u], [u, u]])  # nothing left to come: A wins


def test_the_target_rule_needs_the_wording_decided_too():
    x, y = TypeString(element_id="A", content="x"), TypeString(element_id="A", content="y")
    # the target (typing into A) has 4 of 4 with 2 to come, but its wording splits 2-2
    assert not vote_decided([[x, None], [y, None], [x], [y]], rule="target")
    assert vote_decided([[x, None], [x, None], [x], [x]], rule="target")


def test_majority_vote_does_not_count_entries_that_did_not_run():
    a, b = Click(element_id="A"), Click(element_id="B")
    result = majority_vote([[a, None], [b, None], [a, None]])
    assert result.action.key() == a.key() and result.votes == 2 and result.total == 3


def _is_b(action):
    return action == Click("B")


def test_a_stale_winner_is_passed_over_for_the_most_voted_other_proposal():
    from collabui.vote import pass_over

    matrix = [[Click("B"), Click("B")], [Click("B"), Click("C")], [Click("D"), Click("C")]]
    vote = majority_vote(matrix)
    assert vote.action == Click("B")
    fresh = pass_over(vote, matrix, _is_b)
    assert fresh.action == Click("C") and fresh.votes == 2
    assert fresh.passed_over == "click('B')" and fresh.to_dict()["passed_over"] == "click('B')"
    assert fresh.counts == vote.counts and fresh.total == 6  # the tally is still the whole matrix's
    assert pass_over(vote, matrix, lambda a: a == Click("D")) is vote  # a stale loser changes nothing
    assert "passed_over" not in vote.to_dict()


def test_a_stale_winner_stands_when_nothing_else_parsed():
    from collabui.vote import pass_over

    matrix = [[Click("B"), Unknown(raw="?")], [Click("B"), None]]
    vote = majority_vote(matrix)
    assert pass_over(vote, matrix, _is_b) is vote


def test_stale_proposals_count_for_no_action_when_deciding():
    from collabui.vote import stale_decided

    # B leads 4 to 1 with one entry to come: decided for the plain vote, not once B is stale.
    matrix = [[Click("B"), Click("B")], [Click("B"), Click("B")], [None, Click("C")]]
    assert vote_decided(matrix)
    assert not stale_decided(matrix, _is_b)
    assert stale_decided([[Click("B"), Click("C")], [Click("C"), Click("C")], [Click("C"), None]], _is_b)


def test_a_passed_over_arbiter_choice_keeps_the_arbiters_record():
    from collabui.vote import pass_over

    matrix = [[Click("B"), Click("C")], [Click("C"), Click("B")]]
    chosen = arbitrate(majority_vote(matrix), matrix, Click("B"), name="lexical")
    assert chosen.action == Click("B")
    fresh = pass_over(chosen, matrix, _is_b)
    assert fresh.action == Click("C") and fresh.passed_over == "click('B')"
    assert fresh.arbiter == chosen.arbiter and fresh.arbiter["answer"] == "click('B')"
