from collabui.actions import Unknown
from collabui.actions.web import Click, Finish, ScrollPage, TypeString
from collabui.vote import majority_vote


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

