"""Preference pairs from recorded traces, reward matrices and an adversary (paper Eq. 7-8).

For every entry (i, j) of every labelled step with reward 1, one record in TRL's
conversational preference format:

* ``prompt``: the exact messages agent i saw at (t, j), copied from the trace (the team records
  the request it sent, so this equals what the model received, byte for byte);
* ``chosen``: ``[{"role": "assistant", "content": <agent i's answer>}]``: its raw output cut
  after the action (small models run on and echo prompt lines such as "Reply with a Thought
  line..."; trained as chosen, that echo would be reinforced);
* ``rejected``: the adversary's answer in the same format;
* ``agent``, ``episode_id``, ``t``, ``round``, ``score``, ``rejected_source`` (llm or rule).

Saved and loaded as JSONL (never pickles). ``datasets`` is imported lazily.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from collabui._jsonl import iter_jsonl
from collabui._literal import Unreadable, balanced_end
from collabui.errors import ConfigError, TraceError
from collabui.trace import read_trace
from collabui.training.adversary import Adversary
from collabui.training.critic import StepContext
from collabui.training.labels import PathLike, expand_trace_paths, load_labels

if TYPE_CHECKING:
    from datasets import Dataset, Features

__all__ = ["PAIR_COLUMNS", "pair_features", "build_pairs", "clean_answer", "pair_stats", "save_pairs",
           "load_pairs", "pairs_for_agent"]

log = logging.getLogger(__name__)

_JSON = json.JSONDecoder()

PAIR_COLUMNS = ("prompt", "chosen", "rejected", "agent", "episode_id", "t", "round", "score",
                "rejected_source")


def pair_features() -> Features:
    """The dataset schema (so empty datasets and JSONL round trips keep their types)."""
    from datasets import Features, List, Value

    turns = List({"role": Value("string"), "content": Value("string")})
    return Features({"prompt": turns, "chosen": turns, "rejected": turns, "agent": Value("int64"),
                     "episode_id": Value("string"), "t": Value("int64"), "round": Value("int64"),
                     "score": Value("float64"), "rejected_source": Value("string")})


def _dataset(rows: list[dict[str, Any]]) -> Dataset:
    from datasets import Dataset

    return Dataset.from_dict({c: [r[c] for r in rows] for c in PAIR_COLUMNS}, features=pair_features())


def _rows_for_step(header: dict[str, Any], step: dict[str, Any], end: dict[str, Any] | None,
                   label: dict[str, Any], adversary: Adversary) -> list[dict[str, Any]]:
    ctx = StepContext.from_trace_step(header, step, end=end)
    rewards, scores = label["rewards"], label["scores"]
    if (len(rewards), len(rewards[0])) != (ctx.n, ctx.m):
        raise TraceError(f"label of {ctx.episode_id} t={ctx.t} is {len(rewards)}x{len(rewards[0])} but "
                         f"the step is {ctx.n}x{ctx.m}; relabel the traces")
    entries = [(i, j) for i in range(ctx.n) for j in range(ctx.m) if rewards[i][j] == 1]
    items = []
    for i, j in entries:
        prop = step["proposals"][i][j]
        if (prop["agent"], prop["round"]) != (i, j):
            raise TraceError(f"{ctx.episode_id} t={ctx.t}: proposals[{i}][{j}] is agent "
                             f"{prop['agent']} round {prop['round']}; the trace is corrupt")
        items.append((ctx, i, j, prop["action"]))
    rows = []
    for (ctx, i, j, _), rejected in zip(items, adversary.reject_many(items), strict=True):
        prop = step["proposals"][i][j]
        # The prompt is the recorded request itself, never re-rendered from a template: the
        # check only guards against records that would not survive the dataset schema intact.
        prompt = [dict(m) for m in prop["messages"]]
        if any(set(m) != {"role", "content"} or not isinstance(m["content"], str) for m in prompt):
            raise TraceError(f"{ctx.episode_id} t={ctx.t}: agent {i} round {j} messages are not "
                             "plain {role, content} turns; re-record the trace")
        rows.append({
            "prompt": prompt,
            "chosen": [{"role": "assistant", "content": clean_answer(prop["raw"], ctx.action_space)}],
            "rejected": [{"role": "assistant", "content": rejected.text}],
            "agent": i, "episode_id": ctx.episode_id, "t": ctx.t, "round": j,
            "score": float(scores[i][j]), "rejected_source": rejected.source,
        })
    return rows


def clean_answer(raw: str, space: str) -> str:
    """``raw`` up to the end of its action (``Thought: ...\nAction: {...}``), as the agent wrote
    it; unchanged when no action parses or nothing follows it."""
    from collabui.parsing import parse_proposal

    proposal = parse_proposal(raw, space)
    if proposal.error is not None:
        return raw
    marker = raw.find("Action:")
    if marker < 0:
        return raw
    end = _json_end(raw, raw.find("{", marker)) if "{" in raw[marker:] else raw.find("\n", marker)
    if end < 0 or not raw[end:].strip():
        return raw
    cut = raw[:end].rstrip()
    # Keep the cut only if it still parses to the same action.
    same = parse_proposal(cut, space)
    return cut if same.error is None and same.action.key() == proposal.action.key() else raw


def _json_end(text: str, start: int) -> int:
    """Index just past the object starting at ``start``, or -1 when it never closes.

    Valid JSON is measured by the JSON decoder itself. An object it refuses but the parser
    accepted (single quotes, trailing commas: small models write both) is measured by the
    parser's own bracket scan, so the cut ends exactly where the parser read the action.
    """
    try:
        return _JSON.raw_decode(text, start)[1]
    except json.JSONDecodeError:
        pass
    try:
        return balanced_end(text, start)
    except Unreadable:
        return -1


def _dedupe(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    seen: set[str] = set()
    out = []
    for r in rows:
        key = json.dumps([r["agent"], r["prompt"], r["chosen"], r["rejected"]], ensure_ascii=False)
        if key not in seen:
            seen.add(key)
            out.append(r)
    return out


def build_pairs(trace_paths: PathLike | Iterable[PathLike], labels_path: PathLike, adversary: Adversary,
                *, dedupe: bool = True, critic: str | None = None, progress: bool = False) -> Dataset:
    """Preference pairs for every rewarded entry of every labelled step.

    Args:
        trace_paths: trace files and/or folders.
        labels_path: the labels.jsonl written by ``label_traces``.
        adversary: writes the rejected answers.
        dedupe: drop repeated (agent, prompt, chosen, rejected) records (the first is kept).
        critic: whose labels to use when the file holds several critics' labels.
        progress: print one line per episode on stderr.

    Steps without a label are skipped (reported with ``progress``).

    Raises:
        TraceError: a label does not match its step's shape, or a trace is unreadable.
        ConfigError: ambiguous critics in the labels file.
    """
    labels = load_labels(labels_path, critic=critic)
    paths = expand_trace_paths(trace_paths)
    rows: list[dict[str, Any]] = []
    for k, path in enumerate(paths):
        trace = read_trace(path)
        eid = str(trace.header["episode_id"])
        before, missing = len(rows), 0
        for step in trace.steps:
            label = labels.get((eid, int(step["t"])))
            if label is None:
                missing += 1
                continue
            rows += _rows_for_step(trace.header, step, trace.end, label, adversary)
        if progress:
            log.info("[pairs %d/%d] %s: %d pairs from %d labelled steps (%d unlabelled)", k + 1, len(paths), eid,
                     len(rows) - before, len(trace.steps) - missing, missing)
    return _dataset(_dedupe(rows) if dedupe else rows)


def pair_stats(ds: Dataset) -> dict[str, Any]:
    """Counts: ``pairs``, ``per_agent`` {agent: n}, ``rejected_source`` {llm/rule: n},
    ``episodes``, ``steps`` (distinct (episode, t)) and ``per_round`` {round: n}."""
    agents = ds["agent"] if len(ds) else []
    return {
        "pairs": len(ds),
        "per_agent": dict(sorted(Counter(agents).items())),
        "per_round": dict(sorted(Counter(ds["round"] if len(ds) else []).items())),
        "rejected_source": dict(sorted(Counter(ds["rejected_source"] if len(ds) else []).items())),
        "episodes": len(set(ds["episode_id"])) if len(ds) else 0,
        "steps": len(set(zip(ds["episode_id"], ds["t"], strict=True))) if len(ds) else 0,
    }


def pairs_for_agent(ds: Dataset, i: int) -> Dataset:
    """The records of agent ``i`` (its DPO data)."""
    return ds.select([k for k, a in enumerate(ds["agent"]) if a == i])


def save_pairs(ds: Dataset, path: PathLike) -> Path:
    """Write the pairs as JSONL, one record per line, columns in ``PAIR_COLUMNS`` order."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    missing = [c for c in PAIR_COLUMNS if c not in ds.column_names]
    if missing:
        raise ConfigError(f"dataset lacks pair column(s) {missing}; build it with build_pairs")
    with path.open("w", encoding="utf-8") as fh:
        for row in ds:
            fh.write(json.dumps({c: row[c] for c in PAIR_COLUMNS}, ensure_ascii=False) + "\n")
    return path


def load_pairs(path: PathLike) -> Dataset:
    """Read pairs written by ``save_pairs``.

    Raises:
        ConfigError: the file is missing, or a line is not a pair record.
    """
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"no pairs file at {path}; build one with `collabui train pairs`")
    rows = []
    for where, row in iter_jsonl(path, error=ConfigError, fix="rebuild the pairs file"):
        if not isinstance(row, dict) or any(c not in row for c in PAIR_COLUMNS):
            raise ConfigError(f"{where} lacks pair columns {list(PAIR_COLUMNS)}; rebuild it")
        rows.append(row)
    return _dataset(rows)
