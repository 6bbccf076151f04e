"""Wilson intervals and the metric entries of the results JSON."""

import pytest

from collabui.evaluation.stats import rate_entry, wilson_interval


def test_wilson_matches_hand_computed_values():
    assert wilson_interval(5, 10) == pytest.approx((0.2366, 0.7634), abs=1e-4)
    assert wilson_interval(0, 3) == pytest.approx((0.0, 0.5615), abs=1e-4)
    assert wilson_interval(3, 3) == pytest.approx((0.4385, 1.0), abs=1e-4)


def test_wilson_stays_in_unit_interval_and_brackets_the_rate():
    for n in (1, 2, 7, 50):
        for k in range(n + 1):
            lo, hi = wilson_interval(k, n)
            assert 0.0 <= lo <= k / n <= hi <= 1.0
            assert hi - lo > 0  # never degenerate, even at 0/n and n/n


def test_wilson_narrows_with_more_episodes():
    small, large = wilson_interval(2, 4), wilson_interval(50, 100)
    assert large[1] - large[0] < small[1] - small[0]


def test_no_episodes_is_uninformative():
    assert wilson_interval(0, 0) == (0.0, 1.0)


@pytest.mark.parametrize("successes, n", [(-1, 3), (4, 3), (0, -1)])
def test_impossible_counts_are_rejected(successes, n):
    with pytest.raises(ValueError, match="0 <= successes <= n"):
        wilson_interval(successes, n)


def test_rate_entry_shape():
    assert rate_entry(2, 4) == {"value": 0.5, "n": 4, "successes": 2, "ci95": list(wilson_interval(2, 4))}
    assert rate_entry(1, 3)["value"] == 0.3333
    empty = rate_entry(0, 0)
    assert empty["value"] is None and empty["ci95"] == [0.0, 1.0]
