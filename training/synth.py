"""Stage 1 data synthesis (paper Appendix B): environment knowledge, simple instructions, preferences.

Pages come from real MiniWoB++ episodes in Chromium (``make_env``, seeded). From each page:

* **knowledge** (``knowledge.jsonl``): the paper's Table 9 questions (UI understanding, element
  recognition) about the page as agents see it, with the page's real element ids. Answered by the
  ``teacher`` model when one is given, else by templates written from the element itself
  (``source="template"``: true of what the simplified HTML shows, and nothing more).
* **instruction** (``instruction.jsonl``): a one-step instruction about a random element (click
  by name, click by position, type into a labelled/positional field, pick an option, and
  two-step multi-field typing) with its correct action as ``Thought: ...\\nAction: {json}``. The
  prompt is ``build_messages`` exactly as at runtime (the instruction is the task). Each example
  shows its own variant of the page: siblings shuffled, 1-3 distractor elements added and ids
  relabelled in walk order, so neither an id nor a position predicts the answer. ``meta`` keeps
  ``page_action`` (the same action with the real page's ids) to replay it on the page. With a
  teacher, the instruction wording comes from the teacher (the action stays the computed one).
* **preference** (``preference.jsonl``, also with ``kinds`` containing "preference"): the
  instruction rows as DPO pairs (chosen = correct answer, rejected = ``RuleAdversary``), in the
  contract's pair format with ``agent`` = 0 for every row: stage 1 trains ONE shared adapter
  (``train_agents_dpo`` then writes ``agent0/``).

Rows are TRL conversational prompt-completion records (``prompt`` = messages, ``completion`` =
[assistant turn]), so SFT loss falls on completions only. Web (``miniwob/...``) pages only.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import random
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from collabui._jsonl import iter_jsonl
from collabui._progress import progress_bar
from collabui.actions import Action, get_action_space
from collabui.errors import ConfigError
from collabui.models.base import ChatModel, ChatRequest
from collabui.prompts import build_messages, render_observation
from collabui.training._synth_page import make_variant, page_roots, render
from collabui.training._synth_text import (
    ELEMENT_QUESTIONS,
    UI_QUESTIONS,
    ElementInfo,
    describe_elements,
    element_answer,
    ordinal,
    ui_answer,
)
from collabui.training.adversary import RuleAdversary, format_answer

if TYPE_CHECKING:
    from datasets import Dataset

__all__ = ["SynthStats", "SFT_COLUMNS", "synthesize", "save_sft_rows", "load_sft_dataset",
           "preference_from_instructions"]

log = logging.getLogger(__name__)

SFT_COLUMNS = ("prompt", "completion", "kind", "env", "seed", "template", "source", "meta")
KINDS = ("knowledge", "instruction", "preference")
_WORDS = ("kim", "alice", "Jerald", "vina", "blue", "hello", "Paris", "river", "apple", "42",
          "summer", "orange", "tiger", "Lisbon", "code", "maple", "north", "piano", "delta", "sky")
_KNOW_SYSTEM = ("You explain web pages to UI agents. The page is simplified HTML; each element "
                "you can act on has an id in brackets, like <button[B]| Submit> (id B). Answer "
                "the question in at most three sentences and refer to elements by their ids.")
_INSTR_SYSTEM = ("You write short instructions a user could give to a web agent. Reply with the "
                 "instruction only, one sentence, naming the element by its visible text or label.")


@dataclass
class SynthStats:
    """What :func:`synthesize` wrote: row counts per kind, env and template, answer sources
    (``template``, ``teacher``, ``teacher_fallback`` = teacher answer empty, template used),
    pages read, skipped pages with reasons, output paths and wall time."""

    pages: int = 0
    rows: dict[str, int] = field(default_factory=dict)
    per_env: dict[str, int] = field(default_factory=dict)
    templates: dict[str, int] = field(default_factory=dict)
    sources: dict[str, int] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    paths: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class _Page:
    env: str
    seed: int
    task: str
    obs: Any  # the Observation
    rng: random.Random


def _row(prompt: Sequence[dict[str, str]], answer: str, kind: str, page: _Page, template: str,
         source: str, meta: dict[str, Any]) -> dict[str, Any]:
    return {"prompt": [dict(m) for m in prompt], "completion": [{"role": "assistant", "content": answer}],
            "kind": kind, "env": page.env, "seed": page.seed, "template": template, "source": source,
            "meta": json.dumps(meta, ensure_ascii=False)}


# -- knowledge ---------------------------------------------------------------------------------


def _knowledge_items(page: _Page, per_page: int) -> list[tuple[list[dict[str, str]], str, str, dict[str, Any]]]:
    roots = page_roots(page.obs.text, page.obs.extra.get("tree"))
    infos = describe_elements(roots)
    screen = render_observation(page.obs)
    items = []
    keys = [page.rng.choice(list(UI_QUESTIONS))]
    keys += [page.rng.choice(list(ELEMENT_QUESTIONS)) for _ in range(max(per_page - 1, 0)) if infos]
    for key in keys:
        if key in UI_QUESTIONS:
            question, answer, meta = UI_QUESTIONS[key], ui_answer(key, page.task, infos, page.obs.text), {}
        else:
            info = page.rng.choice(infos)
            question = ELEMENT_QUESTIONS[key].format(x=info.id)
            answer, meta = element_answer(key, info), {"element_id": info.id, "kind": info.kind}
        user = f"Current screen:\n{screen}\nQuestion: {question}"
        prompt = [{"role": "system", "content": _KNOW_SYSTEM}, {"role": "user", "content": user}]
        items.append((prompt, answer, key, {**meta, "question": question}))
    return items


# -- instructions ------------------------------------------------------------------------------


@dataclass
class _Instr:
    template: str
    instruction: str
    thought: str
    action: dict[str, Any]  # ids of the variant
    page_action: dict[str, Any]  # same action with the real page's ids
    target: str


def _unique_names(infos: list[ElementInfo]) -> set[str]:
    # Labels share their field's name; they are never targets, so they do not make it ambiguous.
    counts = Counter(e.name.casefold() for e in infos if e.name and e.kind != "label")
    return {n for n, c in counts.items() if c == 1}


def _click_by_name(e: ElementInfo, rng: random.Random) -> tuple[str, str]:
    if e.kind == "checkbox":
        return f"Click the checkbox '{e.name}'.", f"The checkbox '{e.name}' has id {e.id}."
    if e.kind == "radio button":
        return f"Choose the option '{e.name}'.", f"The option '{e.name}' is the radio button {e.id}."
    noun = {"button": "button", "link": "link"}.get(e.kind, "element")
    text = rng.choice((f"Click the '{e.name}' {noun}.", f"Click on the {noun} '{e.name}'.",
                       f"Press '{e.name}'.", f"Click '{e.name}'."))
    return text, f"The '{e.name}' {noun} has id {e.id}."


def _candidates(infos: list[ElementInfo], rng: random.Random) -> list[_Instr]:
    """Every instruction the variant supports unambiguously (targets are real elements only)."""
    unique = _unique_names(infos)
    out: list[_Instr] = []
    word = rng.choice(_WORDS)
    for e in infos:
        if e.node.distractor or e.kind == "label":
            continue
        page = e.node.page_id
        if e.is_text_field:
            act = {"action": "type_string", "element_id": e.id, "content": word, "press_enter": False}
            fields = [f for f in infos if f.is_text_field]
            if e.name and e.name.casefold() in unique:
                text = rng.choice((f"Type '{word}' into the field labelled {e.name}.",
                                   f"Enter '{word}' in the {e.name} field."))
                out.append(_Instr("type_labelled", text, f"The {e.name} field has id {e.id}.", act,
                                  {**act, "element_id": page}, e.name))
            k = fields.index(e)
            if len(fields) == 1:
                out.append(_Instr("type_only_field", f"Type '{word}' into the text field.",
                                  f"The only text field has id {e.id}.", act, {**act, "element_id": page}, ""))
            elif k < 6:
                out.append(_Instr("type_positional", f"Type '{word}' into the {ordinal(k)} text field.",
                                  f"The {ordinal(k)} text field on the screen has id {e.id}.", act,
                                  {**act, "element_id": page}, ordinal(k)))
            continue
        if e.kind == "drop-down" and e.options:
            option = rng.choice(e.options)
            act = {"action": "select", "element_id": e.id, "option": option}
            out.append(_Instr("select_option", f"Select '{option}' from the drop-down list.",
                              f"The drop-down list has id {e.id}.", act, {**act, "element_id": page}, option))
            continue
        act = {"action": "click", "element_id": e.id}
        if e.name and e.name.casefold() in unique:
            text, thought = _click_by_name(e, rng)
            out.append(_Instr("click_named", text, thought, act, {**act, "element_id": page}, e.name))
        same = [f for f in infos if f.kind == e.kind]
        if e.kind in ("button", "link", "checkbox") and len(same) > 1 and same.index(e) < 6:
            k = same.index(e)
            out.append(_Instr("click_positional", f"Click the {ordinal(k)} {e.kind}.",
                              f"The {ordinal(k)} {e.kind} on the screen has id {e.id}.", act,
                              {**act, "element_id": page}, ordinal(k)))
    return out


def _instruction_prompt(page: _Page, obs: Any, text: str, task: str, history: Sequence[str],
                        style: str) -> list[dict[str, str]]:
    screen = render_observation(dataclasses.replace(obs, text=text))
    return [dict(m) for m in build_messages(space=get_action_space("web"), task=task,
                                            observation=screen, history=history, style=style)]


def _answer(thought: str, action: dict[str, Any]) -> str:
    return format_answer(thought, get_action_space("web").from_dict(action))


def _call(action: dict[str, Any]) -> str:
    parsed: Action = get_action_space("web").from_dict(action)
    return str(parsed)


def _single_step(page: _Page, per_page: int, style: str,
                 distractors: tuple[int, int]) -> list[tuple[list[dict[str, str]], _Instr, dict[str, Any]]]:
    """``per_page`` one-step examples, each on its own shuffled variant of the page."""
    roots = page_roots(page.obs.text, page.obs.extra.get("tree"))
    items = []
    for _ in range(per_page):
        variant = make_variant(roots, page.rng, distractors=distractors)
        cands = _candidates(describe_elements(variant), page.rng)
        if not cands:
            continue
        # Pick a template first, then a target: otherwise pages with many buttons crowd out
        # the rarer typing and positional examples.
        template = page.rng.choice(sorted({c.template for c in cands}))
        pick = page.rng.choice([c for c in cands if c.template == template])
        prompt = _instruction_prompt(page, page.obs, render(variant), pick.instruction, [], style)
        items.append((prompt, pick, {"history": []}))
    return items


def _multi_field(page: _Page, env: Any, style: str,
                 distractors: tuple[int, int]) -> list[tuple[list[dict[str, str]], _Instr, dict[str, Any]]]:
    """Two-step multi-field typing: step 0 types the first field; step 1 (after really typing
    it on the page, history included) the second. Same variant layout for both steps."""
    roots = page_roots(page.obs.text, page.obs.extra.get("tree"))
    layout_seed = page.rng.randrange(2**32)
    variant = make_variant(roots, random.Random(layout_seed), distractors=distractors)
    fields = [e for e in describe_elements(variant) if e.is_text_field and not e.node.distractor]
    unique = _unique_names(describe_elements(variant))
    fields = [e for e in fields if e.name and e.name.casefold() in unique]
    if len(fields) < 2:
        return []
    first, second = page.rng.sample(fields, 2)
    w1, w2 = page.rng.sample(_WORDS, 2)
    task = f"Enter '{w1}' in the {first.name} field and '{w2}' in the {second.name} field."
    out = []
    act1 = {"action": "type_string", "element_id": first.id, "content": w1, "press_enter": False}
    page1 = {**act1, "element_id": first.node.page_id}
    out.append((_instruction_prompt(page, page.obs, render(variant), task, [], style),
                _Instr("type_multi_field_1", task, f"First the {first.name} field, id {first.id}.",
                       act1, page1, first.name), {"history": []}))
    outcome = env.act(get_action_space("web").from_dict(page1))
    masked = outcome.info.get("masked_action")
    done_call = _call({**masked, "element_id": first.id}) if masked else _call(act1)
    shown = outcome.observation
    after = make_variant(page_roots(shown.text, shown.extra.get("tree")), random.Random(layout_seed),
                         distractors=distractors)
    target = next((e for e in describe_elements(after) if e.node.page_id == second.node.page_id), None)
    if target is None or target.id != second.id:
        return out  # the page changed shape after typing: keep only the first step
    act2 = {"action": "type_string", "element_id": second.id, "content": w2, "press_enter": False}
    out.append((_instruction_prompt(page, outcome.observation, render(after), task, [done_call], style),
                _Instr("type_multi_field_2", task, f"The {first.name} field is filled; next the "
                       f"{second.name} field, id {second.id}.", act2,
                       {**act2, "element_id": second.node.page_id}, second.name),
                {"history": [done_call], "previous_page_action": page1}))
    return out


# -- teacher -----------------------------------------------------------------------------------


def _ask(teacher: ChatModel, prompts: list[list[dict[str, str]]]) -> list[str | None]:
    if not prompts:
        return []
    requests = [ChatRequest(messages=tuple(p), temperature=0.1, max_new_tokens=160) for p in prompts]
    return [(r.text or "").strip() or None for r in teacher.generate(requests)]


def _instruction_request(page: _Page, pick: _Instr) -> list[dict[str, str]]:
    user = (f"Current screen:\n{render_observation(page.obs)}\nThe agent will do: "
            f"{json.dumps(pick.page_action)}\nWrite the instruction.")
    return [{"role": "system", "content": _INSTR_SYSTEM}, {"role": "user", "content": user}]


# -- pages -------------------------------------------------------------------------------------


def _page_rows(page: _Page, env: Any, kinds: Sequence[str], teacher: ChatModel | None,
               per_page: int, style: str, distractors: tuple[int, int], stats: SynthStats
               ) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    if "knowledge" in kinds:
        items = _knowledge_items(page, per_page)
        answers = _ask(teacher, [p for p, *_ in items]) if teacher else [None] * len(items)
        for (prompt, answer, key, meta), taught in zip(items, answers, strict=True):
            source = "teacher" if taught else ("teacher_fallback" if teacher else "template")
            rows.append(_row(prompt, taught or answer, "knowledge", page, key, source, meta))
    if "instruction" in kinds or "preference" in kinds:
        single = _single_step(page, per_page, style, distractors)
        taught = _ask(teacher, [_instruction_request(page, pick) for _, pick, _ in single]) if teacher else []
        for k, (prompt, pick, meta) in enumerate(single):
            source = "template"
            if teacher:
                wording = (taught[k] or "").splitlines()[0].strip() if taught[k] else ""
                source = "teacher" if wording else "teacher_fallback"
                if wording:
                    prompt = _rebuild_task(prompt, pick.instruction, wording)
                    pick = dataclasses.replace(pick, instruction=wording)
            rows.append(_instr_row(prompt, pick, meta, page, source))
        for prompt, pick, meta in _multi_field(page, env, style, distractors):
            rows.append(_instr_row(prompt, pick, meta, page, "template"))
    return rows


def _rebuild_task(prompt: list[dict[str, str]], old: str, new: str) -> list[dict[str, str]]:
    last = dict(prompt[-1])
    last["content"] = last["content"].replace(f"Task: {old}\n", f"Task: {' '.join(new.split())}\n", 1)
    return [*prompt[:-1], last]


def _instr_row(prompt: list[dict[str, str]], pick: _Instr, meta: dict[str, Any], page: _Page,
               source: str) -> dict[str, Any]:
    meta = {**meta, "instruction": pick.instruction, "action": pick.action,
            "page_action": pick.page_action, "target": pick.target, "page_task": page.task}
    return _row(prompt, _answer(pick.thought, pick.action), "instruction", page, pick.template,
                source, meta)


def _env_names(env_names: Sequence[str]) -> list[str]:
    names = [env_names] if isinstance(env_names, str) else list(env_names)
    if not names:
        raise ConfigError("no environments given; pass env names like ['miniwob/click-button']")
    bad = [n for n in names if not isinstance(n, str) or not n.startswith("miniwob/")]
    if bad:
        raise ConfigError(f"synthesis reads web MiniWoB++ pages only, got {bad}; use names like "
                          "'miniwob/click-button' (see `collabui envs`)")
    return names


def _check_kinds(kinds: Sequence[str]) -> list[str]:
    kinds = [kinds] if isinstance(kinds, str) else list(kinds)
    unknown = [k for k in kinds if k not in KINDS]
    if unknown or not kinds:
        raise ConfigError(f"unknown data kind(s) {unknown or kinds}; use some of {list(KINDS)}")
    return kinds


def synthesize(env_names: Sequence[str], *, episodes_per_env: int, seed: int = 0,
               teacher: ChatModel | None = None, out_dir: str | Path,
               kinds: Sequence[str] = ("knowledge", "instruction"), per_page: int = 4,
               style: str = "react", distractors: tuple[int, int] = (1, 3),
               progress: bool = True, env_config: dict[str, Any] | None = None) -> SynthStats:
    """Synthesize stage-1 datasets from real MiniWoB++ pages (see the module docstring).

    Args:
        env_names: ``miniwob/<task>`` names; one browser serves them all.
        episodes_per_env: pages per environment; episode k uses MiniWoB seed ``seed + k``.
        seed: MiniWoB seeds and the sampling of questions, targets and layouts.
        teacher: answers knowledge questions and words instructions; None: templates.
        out_dir: receives ``knowledge.jsonl``, ``instruction.jsonl``, ``preference.jsonl`` (for
            the kinds asked) and ``synth_stats.json``.
        kinds: any of ``knowledge``, ``instruction``, ``preference``.
        per_page: knowledge questions and one-step instructions per page (plus up to two
            multi-field typing steps where the page has two labelled fields).
        style: the agents' prompt style (``react`` or ``compact``), as configured at runtime.
        distractors: inclusive range of distractor elements added per instruction example.
        progress: log one line per page (INFO) and show a bar (when stderr is a TTY).
        env_config: extra ``make_env`` options (e.g. ``{"headless": True}``).

    Raises:
        ConfigError: bad names, kinds or counts. BrowserNotFoundError / DeviceError: no browser.
    """
    from collabui.devices.registry import make_env

    names, kinds = _env_names(env_names), _check_kinds(kinds)
    if episodes_per_env < 1 or per_page < 1:
        raise ConfigError("episodes_per_env and per_page must be >= 1; pass e.g. episodes_per_env=5")
    started, stats = time.perf_counter(), SynthStats()
    rows: list[dict[str, Any]] = []
    env = make_env(names[0], **(env_config or {}))
    try:
        with progress_bar(len(names) * episodes_per_env, "synthesising pages", enabled=progress) as advance:
            for name in names:
                for k in range(episodes_per_env):
                    page_rows = _one_page(env, name, seed, k, kinds, teacher, per_page, style, distractors, stats)
                    rows += page_rows
                    advance()
                    if progress:
                        log.info("[synth] %s seed %d: %d rows", name, seed + k, len(page_rows))
    finally:
        env.close()
    _write_outputs(rows, kinds, Path(out_dir), stats, seed)
    stats.seconds = round(time.perf_counter() - started, 2)
    (Path(out_dir) / "synth_stats.json").write_text(json.dumps(stats.to_dict(), indent=2), encoding="utf-8")
    return stats


def _one_page(env: Any, name: str, seed: int, k: int, kinds: Sequence[str], teacher: ChatModel | None,
              per_page: int, style: str, distractors: tuple[int, int], stats: SynthStats) -> list[dict[str, Any]]:
    task = name.removeprefix("miniwob/")
    obs = env.reset(seed=seed + k, options={"task_name": task})
    page = _Page(name, seed + k, obs.task or "", obs, random.Random(f"{seed}|{name}|{k}"))
    stats.pages += 1
    rows = _page_rows(page, env, kinds, teacher, per_page, style, distractors, stats)
    if not rows:
        stats.skipped.append(f"{name} seed {seed + k}: no interactive elements")
    stats.per_env[name] = stats.per_env.get(name, 0) + len(rows)
    return rows


def _write_outputs(rows: list[dict[str, Any]], kinds: Sequence[str], out: Path, stats: SynthStats,
                   seed: int) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for row in rows:
        stats.templates[row["template"]] = stats.templates.get(row["template"], 0) + 1
        stats.sources[row["source"]] = stats.sources.get(row["source"], 0) + 1
    for kind in ("knowledge", "instruction"):
        if kind in kinds:
            chosen = [r for r in rows if r["kind"] == kind]
            stats.paths[kind] = str(save_sft_rows(chosen, out / f"{kind}.jsonl"))
            stats.rows[kind] = len(chosen)
    if "preference" in kinds:
        from collabui.training.pairs import save_pairs

        pairs = preference_from_instructions([r for r in rows if r["kind"] == "instruction"], seed=seed)
        stats.paths["preference"] = str(save_pairs(pairs, out / "preference.jsonl"))
        stats.rows["preference"] = len(pairs)


# -- preference pairs --------------------------------------------------------------------------


def preference_from_instructions(rows: Sequence[dict[str, Any]], *, seed: int = 0) -> Dataset:
    """Instruction rows as DPO pairs (contract format): chosen = the correct answer, rejected =
    a ``RuleAdversary`` perturbation (another element of the shown page, another action type,
    wrong text). ``agent`` is 0 for every row (stage 1 trains one shared adapter)."""
    from datasets import Dataset

    from collabui.training.critic import StepContext
    from collabui.training.pairs import PAIR_COLUMNS, pair_features

    adversary = RuleAdversary(seed=seed)
    out = []
    for t, row in enumerate(rows):
        meta = json.loads(row["meta"])
        user = row["prompt"][-1]["content"]
        episode = f"synth-{row['env'].replace('/', '-')}-{row['seed']}"
        ctx = StepContext(episode_id=episode, t=t, task=meta["instruction"], action_space="web",
                          observation=user, history=tuple(meta.get("history", ())),
                          actions=((meta["action"],),), raws=((row["completion"][0]["content"],),))
        rejected = adversary.reject(ctx, 0, 0, meta["action"])
        out.append({"prompt": row["prompt"], "chosen": row["completion"],
                    "rejected": [{"role": "assistant", "content": rejected.text}], "agent": 0,
                    "episode_id": episode, "t": t, "round": 0, "score": 1.0, "rejected_source": rejected.source})
    return Dataset.from_dict({c: [r[c] for r in out] for c in PAIR_COLUMNS}, features=pair_features())


# -- files -------------------------------------------------------------------------------------


def save_sft_rows(rows: Sequence[dict[str, Any]], path: str | Path) -> Path:
    """Write SFT rows (``SFT_COLUMNS``) as JSONL; returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps({c: row.get(c) for c in SFT_COLUMNS if c in row}, ensure_ascii=False) + "\n")
    return path


def load_sft_dataset(path: str | Path) -> Dataset:
    """Read a prompt-completion JSONL file (e.g. ``instruction.jsonl``) as a ``datasets.Dataset``.

    Raises:
        ConfigError: missing file, a line that is not JSON, or a row without prompt/completion.
    """
    from datasets import Dataset

    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"no SFT data at {path}; make it with `collabui train synth`")
    rows = []
    for where, row in iter_jsonl(path, error=ConfigError, fix="regenerate the file"):
        if not isinstance(row, dict) or not isinstance(row.get("prompt"), list) or not isinstance(row.get("completion"), list):
            raise ConfigError(f"{where} lacks prompt/completion message lists; regenerate it")
        rows.append(row)
    if not rows:
        raise ConfigError(f"{path} holds no rows; synthesize more pages")
    columns = [c for c in rows[0] if all(c in r for r in rows)]
    return Dataset.from_dict({c: [r[c] for r in rows] for c in columns})
