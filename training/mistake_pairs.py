"""Preference pairs from the agents' OWN mistakes: rejected = what an agent actually proposed and
the critic scored 0; chosen = a verified-right answer at the same step.

This is the on-policy counterpart of :mod:`collabui.training.pairs` (which pairs each rewarded
entry with an adversary's invented mistake). Here the negatives are real: each wrong entry
(i, j) of a labelled step (a wrong action, or an unparsable answer) becomes one record in the
exact context agent i saw in round j, and its ``chosen`` is, in order of preference:

1. agent i's own rewarded answer from another round of the same step (its own wording);
2. the step's most common rewarded answer from any agent (the matrix knew better);
3. the critic's verified target when no entry was right (``verified`` critic: the first action
   of a completion the environment rewarded), written as ``Action: <json>`` (after the
   grounded thought, action name and target line, for agents of the ``grounded`` style).

A step where every entry was right, or that the critic abstained on, gives no pair. The rows
have the columns of :data:`collabui.training.pairs.PAIR_COLUMNS`, ``rejected_source`` being
``own``, and ``chosen_source`` (``self``, ``team`` or ``verified``) added.

Pairs of mistakes alone are one-sided: they only say what to do where the agents went wrong,
and where most mistakes are of one kind (clicking Submit before typing) every correction
pushes the same way (towards typing) until the team types forever (the recipe's v18).
:func:`right_pairs_for_step` adds the other side: each RIGHT entry against the team's most
common wrong proposal at that step (``rejected_source`` ``team``), so what the agents already
do right keeps its weight; :func:`balance_pairs` then draws each agent's pairs evenly over the
kinds of correction (``click -> type_string`` and so on), and :func:`mirror_corrections` keeps
no more of one cross-action correction than of its reverse, so no action is pushed over another
(v46m's agents, pushed from typing to clicking, submitted forms after the first field).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from collabui.trace import read_trace
from collabui.training.labels import PathLike, expand_trace_paths, load_labels
from collabui.training.pairs import PAIR_COLUMNS, clean_answer

if TYPE_CHECKING:
    from datasets import Dataset

__all__ = ["build_mistake_pairs", "mistake_pairs_for_step", "right_pairs_for_step", "balance_pairs",
           "mirror_corrections", "correction_kind", "correction_counts", "with_correction_kinds",
           "traces_action_space", "verified_sft_rows", "anchor_pairs", "rehearsal_pairs",
           "MISTAKE_COLUMNS", "CORRECTION_COLUMN", "OWN_PAIR_OPTIONS", "check_pair_options"]

MISTAKE_COLUMNS = (*PAIR_COLUMNS, "chosen_source")

#: :func:`build_mistake_pairs`'s options: each shapes the own adversary's pairs, so each needs it
#: (``MARLConfig``, the recipe and ``collabui train pairs`` take them as one group).
OWN_PAIR_OPTIONS = ("right_pairs", "repeat_clicks", "swap_texts", "lost_only")
#: The options that add a negative to :func:`right_pairs_for_step`'s pairs.
_RIGHT_PAIR_NEGATIVES = ("repeat_clicks", "swap_texts")


def check_pair_options(adversary: str, **options: bool) -> None:
    """Refuse an own-pair option (:data:`OWN_PAIR_OPTIONS`, by name) that would change nothing:
    any of them without the own adversary, a right-pair negative without ``right_pairs``.

    Raises:
        ConfigError: naming the first such option, as its flag, and the flag it needs.
    """
    from collabui.errors import ConfigError

    unknown = sorted(set(options) - set(OWN_PAIR_OPTIONS))
    if unknown:
        raise TypeError(f"not an own-pair option: {unknown[0]!r}")
    for name in OWN_PAIR_OPTIONS:
        if not options.get(name):
            continue
        flag = "--" + name.replace("_", "-")
        if adversary != "own":
            raise ConfigError(f"{flag} shapes the pairs of the team's own mistakes: use it with --adversary own")
        if name in _RIGHT_PAIR_NEGATIVES and not options.get("right_pairs"):
            raise ConfigError(f"{flag} adds a negative to the right answers' pairs: use it with --right-pairs")


def verified_answer(header: dict[str, Any], step: dict[str, Any], action: dict[str, Any]) -> str:
    """``action`` written as the step's agents answer: ``Action: <json>``, after the target's
    screen line when the team used the ``grounded`` prompt style."""
    from collabui.prompts import GROUNDED_STYLES
    from collabui.training.sft_data import answer_text, grounded_thought, target_line

    if isinstance(action.get("content"), str):  # written as the trace shows the task's password
        action = {**action, "content": _as_traced(action["content"])}
    space = _space(header)
    team = header.get("team") or {}
    thought = None
    if team.get("prompt_style") in GROUNDED_STYLES:
        tree = ((step.get("observation") or {}).get("extra") or {}).get("tree")
        line = target_line(tree, action, str((header.get("device") or {}).get("element_format", "html")))
        thought = grounded_thought(action, line)
    return answer_text(action, thought=thought, space=space)


def _space(header: dict[str, Any]) -> str:
    return str(header.get("action_space") or header.get("config", {}).get("action_space") or "web")


def _chosen_for(i: int, props: list[list[dict[str, Any]]], rewards: list[list[Any]], target: str | None,
                space: str) -> tuple[str, str] | None:
    own = [p for j, p in enumerate(props[i]) if rewards[i][j] == 1]
    if own:
        return clean_answer(own[0]["raw"], space), "self"
    right = [props[a][j] for a in range(len(props)) for j in range(len(props[a])) if rewards[a][j] == 1]
    if right:
        key = Counter(_key(p["action"]) for p in right).most_common(1)[0][0]
        best = next(p for p in right if _key(p["action"]) == key)
        return clean_answer(best["raw"], space), "team"
    if target is not None:
        return target, "verified"
    return None


def _key(action: dict[str, Any]) -> str:
    return json.dumps(action, sort_keys=True)


def _usable(label: dict[str, Any]) -> bool:
    """Whether a step's label scores every entry (no abstention, no unknown entry)."""
    rewards = label.get("rewards") or []
    return not label.get("abstained") and bool(rewards) and all(r is not None for row in rewards for r in row)


def _pair(header: dict[str, Any], step: dict[str, Any], label: dict[str, Any], i: int, j: int, chosen: str,
          rejected: str, rejected_source: str, chosen_source: str) -> dict[str, Any]:
    """The pair record of entry (i, j): in the exact context agent i saw in round j."""
    return {"prompt": [dict(m) for m in step["proposals"][i][j]["messages"]],
            "chosen": [{"role": "assistant", "content": chosen}],
            "rejected": [{"role": "assistant", "content": rejected}],
            "agent": i, "episode_id": str(header["episode_id"]), "t": int(step["t"]), "round": j,
            "score": float(label["scores"][i][j] or 0.0), "rejected_source": rejected_source,
            "chosen_source": chosen_source}


def mistake_pairs_for_step(header: dict[str, Any], step: dict[str, Any], label: dict[str, Any]) -> list[dict[str, Any]]:
    """The own-mistake records of one labelled step (see the module docstring)."""
    from collabui.training.verified import verified_action

    rewards = label.get("rewards") or []
    props = step["proposals"]
    if not _usable(label):
        return []
    space = _space(header)
    target_action = verified_action(label)
    target = verified_answer(header, step, target_action) if target_action is not None else None
    rows = []
    for i, row in enumerate(props):
        chosen = None
        for j, prop in enumerate(row):
            if rewards[i][j] == 1:
                continue
            chosen = chosen or _chosen_for(i, props, rewards, target, space)
            if chosen is None:
                return rows  # nothing known to be right at this step
            rows.append(_pair(header, step, label, i, j, chosen[0], clean_answer(prop["raw"], space), "own", chosen[1]))
    return rows


def right_pairs_for_step(header: dict[str, Any], step: dict[str, Any], label: dict[str, Any],
                         previous: dict[str, Any] | None = None, *, repeat_clicks: bool = False,
                         swap_texts: bool = False) -> list[dict[str, Any]]:
    """Each right entry (i, j) of a labelled step against what would have been wrong there:

    * the step's most common wrong (parsed) proposal, in the words of the first agent that made
      it (``rejected_source`` ``team``);
    * typing the ``previous`` step's executed text into the same field again (found on this
      page by its ``dom`` rank; ``rejected_source`` ``repeat``): the field already holds it, so
      the page would not change, which the verified critic scores 0 ("changed nothing"). This
      is the pair that says when to stop typing, a mistake the trained team makes held out
      (typing the password until it runs out of steps) but rarely on the training pages;
    * with ``repeat_clicks``, clicking the ``previous`` step's element again (``rejected_source``
      ``repeat``), found the same way: on the training pages a second click unticks the box,
      closes the section or folder, or changes nothing, and the trained team that ignores its
      action history clicks ONE twice on a page that asks for ONE, then TWO;
    * with ``swap_texts``, for a right ``type_string(F, T)``: typing another text ``T'`` of the
      task into the same field (``rejected_source`` ``swap``), ``T'`` drawn, one per round, from
      the texts still to type (the label's verified continuation) and the text the previous step
      typed. A team that has learnt "type the genre" without "into the genre field" fills a form's
      fields with each other's texts (v61a's multi-layouts: the genre typed into the name field);
      no other pair names that mistake, and a wrong text in a field costs a step to undo, which
      the verified critic scores 0.

    ``chosen`` is agent i's own answer (``chosen_source`` ``own``). No rows for a step the
    critic abstained on, or when no negative exists."""
    rewards = label.get("rewards") or []
    props = step["proposals"]
    if not _usable(label):
        return []
    space = _space(header)
    negatives = []
    wrong = [props[a][j] for a in range(len(props)) for j in range(len(props[a]))
             if rewards[a][j] != 1 and (props[a][j].get("action") or {}).get("action") not in (None, "unknown")]
    if wrong:
        key = Counter(_key(p["action"]) for p in wrong).most_common(1)[0][0]
        negatives.append((key, clean_answer(next(p for p in wrong if _key(p["action"]) == key)["raw"], space), "team"))
    repeat = _repeated_action(previous, step, ("type_string", "click") if repeat_clicks else ("type_string",))
    if repeat is not None and _key(repeat) not in {n[0] for n in negatives} and not any(
            rewards[a][j] == 1 and _key(props[a][j].get("action") or {}) == _key(repeat)
            for a in range(len(props)) for j in range(len(props[a]))):
        negatives.append((_key(repeat), verified_answer(header, step, repeat), "repeat"))
    right = {_key(props[a][j].get("action") or {}) for a in range(len(props)) for j in range(len(props[a]))
             if rewards[a][j] == 1}
    texts = _other_texts(label, previous) if swap_texts else []
    rows = []
    for i, row in enumerate(props):
        for j, prop in enumerate(row):
            if rewards[i][j] != 1:
                continue
            action = prop.get("action") or {}
            swap = _swapped(action, texts, j, right)
            own = [(_key(swap), verified_answer(header, step, swap), "swap")] if swap else []
            for key, rejected, source in negatives + own:
                if key == _key(action):
                    continue
                rows.append(_pair(header, step, label, i, j, clean_answer(prop["raw"], space), rejected, source, "own"))
    return rows


def _other_texts(label: dict[str, Any], previous: dict[str, Any] | None) -> list[str]:
    """The texts a step's task still asks to type (its label's verified continuation), then the
    text the previous step typed: what a team confusing the fields would type instead."""
    from collabui.training.verified import verified_continuation

    typed = [*verified_continuation(label), (previous or {}).get("executed") or {}]
    texts = [_as_traced(str(a["content"])) for a in typed if a.get("action") == "type_string" and a.get("content")]
    return list(dict.fromkeys(texts))


def _as_traced(text: str) -> str:
    """A text to type as the trace writes it: the task's password as its mask."""
    from collabui.redaction import PASSWORD_MASK, TASK_PASSWORD

    return PASSWORD_MASK if text == TASK_PASSWORD else text


def _swapped(action: dict[str, Any], texts: list[str], j: int, right: set[str]) -> dict[str, Any] | None:
    """``action`` (a ``type_string``) typing the ``j``-th (cyclically) of ``texts`` that differs
    from its own text (in any case: a task may accept either) and that no entry typed there
    rightly; None for another action or when no such text exists."""
    if action.get("action") != "type_string" or not action.get("element_id"):
        return None
    mine = str(action.get("content") or "").casefold()
    swaps = [swap for swap in ({**action, "content": text} for text in texts if text.casefold() != mine)
             if _key(swap) not in right]
    return swaps[j % len(swaps)] if swaps else None


def _repeated_action(previous: dict[str, Any] | None, step: dict[str, Any],
                     kinds: tuple[str, ...] = ("type_string",)) -> dict[str, Any] | None:
    """The previous step's executed action, if one of ``kinds``, aimed at the same element on
    ``step``'s page (ids are reshuffled on every page: the element is the one of the same ``dom``
    rank and tag; not label, which a ticked box's can change), or None when there is none or it
    cannot be found."""
    from collabui.devices.simplify import flat_elements

    action = (previous or {}).get("executed") or {}
    if action.get("action") not in kinds or not action.get("element_id"):
        return None
    before = {e["id"]: e for e in flat_elements(_tree(previous))}.get(action["element_id"])
    if before is None or before.get("dom") is None:
        return None
    same = [e for e in flat_elements(_tree(step))
            if e.get("dom") == before["dom"] and e["tag"] == before["tag"]]
    return {**action, "element_id": same[0]["id"]} if len(same) == 1 else None


def _tree(step: dict[str, Any] | None) -> Any:
    return (((step or {}).get("observation") or {}).get("extra") or {}).get("tree")


def build_mistake_pairs(trace_paths: PathLike | Iterable[PathLike], labels_path: PathLike, *,
                        critic: str | None = None, right_pairs: bool = False, repeat_clicks: bool = False,
                        swap_texts: bool = False, lost_only: bool = False) -> Dataset:
    """Own-mistake pairs for every labelled step of the traces (dedupes identical records);
    ``right_pairs``: also :func:`right_pairs_for_step`'s (``repeat_clicks`` and ``swap_texts``
    passed on);
    ``lost_only``: only from episodes the team did not win (where the vote outvoted a wrong
    entry, the team already acts right)."""

    def rows_for_step(header: dict[str, Any], step: dict[str, Any], label: dict[str, Any],
                      previous: dict[str, Any] | None) -> list[dict[str, Any]]:
        rows = mistake_pairs_for_step(header, step, label)
        if not right_pairs:
            return rows
        return rows + right_pairs_for_step(header, step, label, previous, repeat_clicks=repeat_clicks,
                                           swap_texts=swap_texts)

    return _mistake_dataset(_unique(_labelled_rows(trace_paths, labels_path, critic, rows_for_step,
                                                   lost_only=lost_only),
                                    ("agent", "prompt", "chosen", "rejected")))


def correction_kind(row: Mapping[str, Any], space: str, *, elements: bool = False, texts: bool = False) -> str:
    """``"<rejected action> -> <chosen action>"`` of a pair record, e.g. ``click -> type_string``
    (``unknown`` for an answer that does not parse).

    ``elements``: an action on an element is named with the element's tag as the prompt's screen
    lists it, ``click(button) -> click(label)`` (``click(?)`` for an id the screen does not
    list), so the draws below tell a click on Submit from a click on a list item.

    ``texts``: a pair that types into the same field on both sides, another text rejected, is
    the kind ``type_string(input, text) -> type_string(input, text)`` (``type_string(text) ->
    ...`` without ``elements``), apart from the corrections of which field to type into: in the
    even draw, fixing the text (the swapped-texts pairs, an invented word) weighs as one kind,
    not as a share of every typing correction."""
    from collabui.parsing import parse_action

    tags = _screen_tags(row["prompt"]) if elements else {}
    rejected, chosen = (parse_action(str(turns[-1]["content"]) if turns else "", space).to_dict()
                        for turns in (row["rejected"], row["chosen"]))
    text = texts and _other_text(rejected, chosen)

    def kind(action: dict[str, Any]) -> str:
        name = str(action["action"])
        target = action.get("element_id")
        inside = [tags.get(str(target), "?")] if elements and target and name != "unknown" else []
        inside += ["text"] if text else []
        return f"{name}({', '.join(inside)})" if inside else name

    return f"{kind(rejected)} -> {kind(chosen)}"


def _other_text(rejected: dict[str, Any], chosen: dict[str, Any]) -> bool:
    """Whether two parsed actions type into the same field, each another text."""
    return (rejected["action"] == chosen["action"] == "type_string"
            and rejected.get("element_id") == chosen.get("element_id")
            and rejected.get("content") != chosen.get("content"))


def _screen_tags(prompt: Any) -> dict[str, str]:
    """``{element id: tag}`` of the screen in a pair's prompt (its last user turn), read back by
    the device's own parser of either page format."""
    from collabui.devices.simplify import parse_elements

    turns = [m for m in prompt or () if m.get("role") == "user"]
    text = str(turns[-1]["content"]) if turns else ""
    return {e.id: e.tag for e in parse_elements(text) if e.id}


def correction_counts(ds: Dataset, space: str) -> dict[str, int]:
    """How many pairs of ``ds`` make each :func:`correction_kind`."""
    return dict(sorted(Counter(_kinds(ds, space)).items()))


#: The column :func:`with_correction_kinds` adds; the draws below read it instead of parsing.
CORRECTION_COLUMN = "correction"


def with_correction_kinds(ds: Dataset, space: str, *, elements: bool = False, texts: bool = False) -> Dataset:
    """``ds`` with each pair's :func:`correction_kind` (``elements``: naming the element's tag;
    ``texts``: a correction of the text alone its own kind) in
    a ``correction`` column, so a chain of draws (:func:`mirror_corrections`, then
    :func:`balance_pairs`, then the counts) parses every answer once instead of once per step,
    and every draw reads the same kinds. Drop the column before training on the pairs."""
    if CORRECTION_COLUMN in ds.column_names:
        return ds
    return ds.add_column(CORRECTION_COLUMN, [correction_kind(row, space, elements=elements, texts=texts) for row in ds])


def _kinds(ds: Dataset, space: str) -> list[str]:
    """Each pair's correction kind: the ``correction`` column when there is one, else parsed."""
    if CORRECTION_COLUMN in ds.column_names:
        return list(ds[CORRECTION_COLUMN])
    return [correction_kind(row, space) for row in ds]


def traces_action_space(trace_paths: PathLike | Iterable[PathLike]) -> str:
    """The action space the traces' agents answered in (their first header's; ``web`` if none)."""
    paths = expand_trace_paths(trace_paths)
    return _space(read_trace(paths[0]).header) if paths else "web"


def balance_pairs(ds: Dataset, per_agent: int, space: str, *, seed: int = 0) -> Dataset:
    """At most ``per_agent`` pairs for each agent, drawn evenly over the kinds of correction:
    round-robin over the kinds (each kind's pairs in a seeded shuffled order) until the agent
    has ``per_agent`` or runs out, so a rare kind keeps all its pairs and a common one does not
    decide the update alone. Rows keep ``ds``'s order."""
    import random

    if per_agent < 1:
        raise ValueError(f"per_agent must be >= 1, got {per_agent}")
    groups = _kind_groups(ds, space)
    rng = random.Random(seed)
    keep: list[int] = []
    for agent in sorted({a for a, _ in groups}):
        queues = [rng.sample(groups[key], len(groups[key])) for key in sorted(groups) if key[0] == agent]
        keep += _round_robin(queues, per_agent, take=list.pop)
    return ds.select(sorted(keep))


def mirror_corrections(ds: Dataset, space: str, *, seed: int = 0) -> Dataset:
    """Each agent's corrections from one action to another (``type_string -> click``: typing
    rejected, a click chosen) cut, by a seeded draw, to as many as it has of the reverse
    (``click -> type_string``); corrections within one action (another element, other text) and
    unparsable rejected answers all stay. Rows keep ``ds``'s order.

    Why: a team makes one cross-action mistake far more often than its reverse (v46m's agents
    typed into a filled field five times as often as they clicked Submit too early), and DPO on
    those pairs learns the shortcut "after typing, click" instead of "after the last field":
    its team submitted multi-field forms after the first one. Mirrored, the pairs still say
    which element and which text, but push no action over another.

    On kinds that name the element (:func:`with_correction_kinds` ``elements``) the same holds
    within one action: ``click(button) -> click(label)`` (Submit rejected, ticking a box chosen)
    is cut to its reverse, which v51's second iteration lacked (its checkbox pairs chose ticking
    over Submit 37 to 24, and its team unticked boxes until the step limit). A rejected answer
    naming an id its screen does not list (``click(?)``) stays, as an unparsable one does."""
    import random

    groups = _kind_groups(ds, space)
    rng = random.Random(seed)
    keep: list[int] = []
    for (agent, kind), rows in sorted(groups.items()):
        rejected, chosen = kind.split(" -> ")
        if rejected == chosen or "unknown" in (rejected, chosen) or "(?)" in rejected:
            keep += rows
            continue
        most = len(groups.get((agent, f"{chosen} -> {rejected}"), ()))
        keep += rng.sample(rows, min(most, len(rows)))
    return ds.select(sorted(keep))


def _kind_groups(ds: Dataset, space: str) -> dict[tuple[int, str], list[int]]:
    """``{(agent, correction kind): row indices}`` of a pair dataset."""
    groups: dict[tuple[int, str], list[int]] = {}
    for index, (agent, kind) in enumerate(zip(ds["agent"], _kinds(ds, space), strict=True)):
        groups.setdefault((int(agent), kind), []).append(index)
    return groups


def _round_robin(queues: list[list[Any]], most: int, *, take: Callable[[list[Any]], Any]) -> list[Any]:
    """Up to ``most`` items, one from each non-empty queue in turn (``take`` removes it), so
    every queue gives one before any gives a second. The queues are emptied as they give."""
    out: list[Any] = []
    while len(out) < most and any(queues):
        for queue in queues:
            if queue and len(out) < most:
                out.append(take(queue))
    return out


def _mistake_dataset(rows: list[dict[str, Any]]) -> Dataset:
    """``rows`` as a dataset of :data:`MISTAKE_COLUMNS` (typed, also when empty)."""
    from datasets import Dataset, Value

    from collabui.training.pairs import pair_features

    features = pair_features()
    features["chosen_source"] = Value("string")
    return Dataset.from_dict({c: [r[c] for r in rows] for c in MISTAKE_COLUMNS}, features=features)


def verified_sft_rows(trace_paths: PathLike | Iterable[PathLike], labels_path: PathLike, *,
                      critic: str | None = None) -> list[dict[str, Any]]:
    """On-policy SFT rows: every entry of every labelled step, in the exact context its agent
    saw, with a verified-right completion: the agent's own answer when the critic rewarded it,
    else the ``chosen`` of its own-mistake pair (its own right answer from another round, the
    team's, or the critic's verified target). The states are the ones the agents actually
    reach, so the rows teach what demonstrations never show (what to do after a wrong turn).

    Each row is ``{"prompt", "completion", "agent", "episode_id", "t", "round", "source"}``
    (``source``: ``own`` for rewarded entries, else the chosen's source); duplicates dropped.
    """
    return _unique(_labelled_rows(trace_paths, labels_path, critic, lambda h, s, lab, _: _sft_rows_for_step(h, s, lab)),
                   ("prompt", "completion"))


def _is_chat_row(row: Any) -> bool:
    """Whether ``row`` is a prompt-completion row of chat turns (TRL's conversational format)."""
    return (isinstance(row, dict) and all(
        isinstance(row.get(key), list) and row[key]
        and all(isinstance(m, dict) and isinstance(m.get("content"), str) for m in row[key])
        for key in ("prompt", "completion")))


def anchor_pairs(trace_paths: PathLike | Iterable[PathLike], labels_path: PathLike, counts: Mapping[int, int], *,
                 critic: str | None = None, seed: int = 0) -> Dataset:
    """Up to ``counts[agent]`` anchor records per agent: an answer of that agent the critic
    rewarded, in the exact context it saw, as both ``chosen`` and ``rejected``.

    With DPO's SFT term (TRL ``loss_type=["sigmoid", "sft"]``) such a record teaches through
    that term alone: chosen and rejected have the same log-ratio, so the preference loss is a
    constant with no gradient. Pairs only touch the states where someone erred; the anchors hold
    up the likelihood of what the agents already do right elsewhere (the second field of a
    form the team always fills), which a strong update otherwise wears down. Records are drawn
    one visited step at a time over the steps in a seeded random order, so every step gives one
    before any gives a second; ``rejected_source`` and ``chosen_source`` are ``anchor``.
    """
    import random

    right = [r for r in verified_sft_rows(trace_paths, labels_path, critic=critic) if r["source"] == "own"]
    picked: list[dict[str, Any]] = []
    for agent, wanted in sorted(counts.items()):
        by_step: dict[tuple[str, int], list[dict[str, Any]]] = {}
        for row in right:
            if row["agent"] == agent:
                by_step.setdefault((row["episode_id"], row["t"]), []).append(row)
        queues = [by_step[key] for key in sorted(by_step)]
        random.Random(f"{seed}-anchor-{agent}").shuffle(queues)
        picked += _round_robin(queues, wanted, take=lambda queue: queue.pop(0))
    return _mistake_dataset([
        {"prompt": r["prompt"], "chosen": r["completion"], "rejected": r["completion"], "agent": r["agent"],
         "episode_id": r["episode_id"], "t": r["t"], "round": r["round"], "score": 1.0,
         "rejected_source": "anchor", "chosen_source": "anchor"} for r in picked])


def rehearsal_pairs(path: PathLike, counts: Mapping[int, int], *, seed: int = 0) -> Dataset:
    """Up to ``counts[agent]`` rehearsal records per agent from ``path``, a JSONL file of
    prompt-completion rows in the agents' own chat format (stage 1's SFT rows), each with its
    completion as both ``chosen`` and ``rejected``.

    Like the anchors they teach through DPO's SFT term alone, but on the states the stage-1 data
    covers rather than those the rollouts visited: a state the team seldom meets on its own (a
    login form's time-out popup) keeps its verified answer while the pairs pull the neighbouring
    states. Rows are drawn one (task, step) group at a time in a seeded order per agent, so every
    group gives one before any gives a second; ``rejected_source`` and ``chosen_source`` are
    ``rehearsal``.

    Raises:
        ConfigError: the file is missing, or a line is not a prompt-completion row.
    """
    import random

    from collabui.errors import ConfigError

    rows = []
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as exc:
        raise ConfigError(f"rehearsal rows {path}: cannot read ({exc.strerror}); write the stage-1 rows there "
                          "or drop the rehearsal") from None
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            row = None
        if not _is_chat_row(row) or not isinstance(row.get("t", 0), int):
            raise ConfigError(f"rehearsal rows {path}: line {n} is not a prompt-completion row "
                              "({'prompt': [...], 'completion': [...], 't': step}); rewrite the file")
        rows.append(row)
    picked: list[dict[str, Any]] = []
    for agent, wanted in sorted(counts.items()):
        groups: dict[tuple[str, int], list[int]] = {}  # afresh per agent: the draw empties its queues
        for k, row in enumerate(rows):
            groups.setdefault((str(row.get("task_name", "")), int(row.get("t", 0))), []).append(k)
        queues = [groups[key] for key in sorted(groups)]
        rng = random.Random(f"{seed}-rehearsal-{agent}")
        for queue in queues:
            rng.shuffle(queue)
        rng.shuffle(queues)
        picked += [(agent, rows[k]) for k in _round_robin(queues, wanted, take=lambda queue: queue.pop(0))]
    return _mistake_dataset([
        {"prompt": r["prompt"], "chosen": r["completion"], "rejected": r["completion"], "agent": agent,
         "episode_id": f"rehearsal-{r.get('task_name', '')}-{r.get('seed', '')}", "t": int(r.get("t", 0)), "round": 0,
         "score": 1.0, "rejected_source": "rehearsal", "chosen_source": "rehearsal"} for agent, r in picked])


def _labelled_rows(trace_paths: PathLike | Iterable[PathLike], labels_path: PathLike, critic: str | None,
                   rows_for_step: Callable[[dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any] | None],
                                           list[dict[str, Any]]],
                   *, lost_only: bool = False) -> Iterator[dict[str, Any]]:
    """``rows_for_step(header, step, label, previous step or None)`` over every labelled step
    (``lost_only``: of the episodes that did not end in success, unfinished ones included)."""
    labels = load_labels(labels_path, critic=critic)
    for path in expand_trace_paths(trace_paths):
        trace = read_trace(path)
        if lost_only and (trace.end or {}).get("success"):
            continue
        previous = None
        for step in trace.steps:
            label = labels.get((str(trace.header["episode_id"]), int(step["t"])))
            if label:
                yield from rows_for_step(trace.header, step, label, previous)
            previous = step


def _unique(rows: Iterable[dict[str, Any]], fields: tuple[str, ...]) -> list[dict[str, Any]]:
    """``rows`` without repeats of the same ``fields`` (first kept)."""
    seen: set[str] = set()
    out = []
    for row in rows:
        key = _key({k: row[k] for k in fields})
        if key not in seen:
            seen.add(key)
            out.append(row)
    return out


def _sft_rows_for_step(header: dict[str, Any], step: dict[str, Any], label: dict[str, Any]) -> list[dict[str, Any]]:
    from collabui.training.verified import verified_action

    rewards = label.get("rewards") or []
    if not _usable(label):
        return []
    space, props = _space(header), step["proposals"]
    target_action = verified_action(label)
    target = verified_answer(header, step, target_action) if target_action is not None else None
    rows = []
    for i, row in enumerate(props):
        for j, prop in enumerate(row):
            if rewards[i][j] == 1:
                answer: tuple[str, str] | None = (clean_answer(prop["raw"], space), "own")
            else:
                answer = _chosen_for(i, props, rewards, target, space)
            if answer is None:
                continue
            rows.append({"prompt": [dict(m) for m in prop["messages"]],
                         "completion": [{"role": "assistant", "content": answer[0]}],
                         "agent": i, "episode_id": str(header["episode_id"]), "t": int(step["t"]),
                         "round": j, "source": answer[1]})
    return rows
