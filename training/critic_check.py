"""How far a critic can be trusted: its coverage, and its agreement with another critic.

``compare_critics`` labels the same traces with two critics (e.g. ``verified`` against the
rule-based ``oracle`` on the oracle's tasks) and counts, per matrix entry, where both gave a
reward and whether they agree. The CPU recipe prints it for the verified critic.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from collabui.training.critic import Critic
from collabui.training.labels import PathLike, label_traces, load_labels

__all__ = ["CriticAgreement", "compare_critics", "agreement_from_labels"]


@dataclass
class CriticAgreement:
    """Counts over steps and matrix entries.

    Attributes:
        steps: steps in the traces.
        labelled_a, labelled_b: steps each critic labelled (did not abstain on).
        entries_both: matrix entries both critics rewarded 0 or 1.
        agree: of those, entries with the same reward.
        a_only_right, b_only_right: entries only critic a (b) rewarded 1.
    """

    critic_a: str
    critic_b: str
    steps: int = 0
    labelled_a: int = 0
    labelled_b: int = 0
    entries_both: int = 0
    agree: int = 0
    a_only_right: int = 0
    b_only_right: int = 0

    @property
    def coverage_a(self) -> float | None:
        return self.labelled_a / self.steps if self.steps else None

    @property
    def agreement(self) -> float | None:
        return self.agree / self.entries_both if self.entries_both else None

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "coverage_a": self.coverage_a, "agreement": self.agreement}


def _labelled(label: dict[str, Any] | None) -> bool:
    return label is not None and not label.get("abstained") and all(
        r is not None for row in label["rewards"] for r in row)


def agreement_from_labels(labels_a: PathLike, labels_b: PathLike, *, critic_a: str, critic_b: str) -> CriticAgreement:
    """Compare two labels files of the same traces (keys: episode id and step)."""
    a, b = load_labels(labels_a, critic=critic_a), load_labels(labels_b, critic=critic_b)
    out = CriticAgreement(critic_a, critic_b, steps=len(set(a) | set(b)))
    for key in set(a) | set(b):
        la, lb = a.get(key), b.get(key)
        out.labelled_a += _labelled(la)
        out.labelled_b += _labelled(lb)
        if la is None or lb is None or not (_labelled(la) and _labelled(lb)):
            continue
        for ra, rb in zip((r for row in la["rewards"] for r in row), (r for row in lb["rewards"] for r in row),
                          strict=True):
            out.entries_both += 1
            out.agree += ra == rb
            out.a_only_right += ra == 1 and rb != 1
            out.b_only_right += rb == 1 and ra != 1
    return out


def compare_critics(traces: PathLike, critic_a: Critic, critic_b: Critic, out_dir: PathLike) -> CriticAgreement:
    """Label ``traces`` with both critics (``out_dir/labels_<name>.jsonl``, resumable) and compare."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for critic in (critic_a, critic_b):
        path = out / f"labels_{critic.name}.jsonl"
        label_traces(traces, critic, path, resume=True, progress=False)
        paths.append(path)
    return agreement_from_labels(paths[0], paths[1], critic_a=critic_a.name, critic_b=critic_b.name)
