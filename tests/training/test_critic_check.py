"""Critic agreement: coverage and entry-level agreement between two labels files."""

import json

from collabui.training.critic_check import agreement_from_labels


def _write(path, critic, records):
    path.write_text("".join(json.dumps({"critic": critic, "scores": r, "reasons": None, **meta, "rewards": r,
                                        "abstained": any(x is None for row in r for x in row)}) + "\n"
                            for meta, r in records))


def test_agreement_counts_entries_both_critics_labelled(tmp_path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    _write(a, "verified", [({"episode_id": "e", "t": 0}, [[1, 0], [0, 0]]),
                           ({"episode_id": "e", "t": 1}, [[None, None], [None, None]]),
                           ({"episode_id": "f", "t": 0}, [[1, 1], [0, 0]])])
    _write(b, "oracle", [({"episode_id": "e", "t": 0}, [[1, 0], [1, 0]]),
                         ({"episode_id": "e", "t": 1}, [[0, 0], [0, 0]])])
    result = agreement_from_labels(a, b, critic_a="verified", critic_b="oracle")
    assert (result.steps, result.labelled_a, result.labelled_b) == (3, 2, 2)
    # Only step e/0 is labelled by both: 4 entries, 3 agree, one right for the oracle alone.
    assert (result.entries_both, result.agree, result.a_only_right, result.b_only_right) == (4, 3, 0, 1)
    assert result.agreement == 0.75 and abs(result.coverage_a - 2 / 3) < 1e-9
    assert result.to_dict()["agreement"] == 0.75
