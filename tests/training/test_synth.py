"""Stage-1 synthesis: page trees (fast), and data from real MiniWoB++ pages checked on the pages."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest

from collabui.actions import get_action_space
from collabui.errors import ConfigError
from collabui.parsing import parse_proposal
from collabui.prompts import build_messages
from collabui.training._synth_page import make_variant, parse_tree, render, walk

LOGIN = ("< < <label[A]| Username> <input[B]| > > < <label[C]| Password> <input[D]| password> > "
         "<button[E]| Login> >")
DIALOG = ("<div[A]| <div[B]| <button[C]| Close> > <p| Cursus justo.> < <button[D]| Cancel> "
          "<button[E]| OK> > <div[F]| .ui-resizable-handle> >")
LINK = "<div| Cursus <span[A]| justo.> Facilisis <span[B]| nam> sit nunc.>"
WEB = get_action_space("web")


@pytest.mark.parametrize("text", [LOGIN, DIALOG, LINK, "< <input[A]| > <button[B]| Submit> >"])
def test_tree_round_trip(text: str) -> None:
    assert render(parse_tree(text)) == text


def test_variant_shuffles_relabels_and_keeps_page_ids() -> None:
    roots = parse_tree(LOGIN)
    orders = set()
    for k in range(20):
        variant = make_variant(roots, random.Random(k))
        nodes = [n for n in walk(variant) if n.id]
        assert [n.id for n in nodes] == [chr(65 + i) for i in range(len(nodes))]  # walk order
        assert 1 <= sum(n.distractor for n in nodes) <= 3
        real = [n for n in nodes if not n.distractor]
        assert sorted(n.page_id for n in real) == list("ABCDE")
        for group in (n for n in walk(variant) if {c.tag for c in n.children} == {"label", "input"}):
            assert [c.tag for c in group.children] == ["label", "input"]  # label stays before field
        orders.add(tuple(n.full_text() for n in real))
    assert len(orders) > 2
    assert render(roots) == LOGIN  # the source tree is untouched


def test_bad_arguments(tmp_path: Path) -> None:
    from collabui.training.synth import synthesize

    with pytest.raises(ConfigError, match="miniwob/"):
        synthesize(["android"], episodes_per_env=1, out_dir=tmp_path)
    with pytest.raises(ConfigError, match="kind"):
        synthesize(["miniwob/click-button"], episodes_per_env=1, out_dir=tmp_path, kinds=["bogus"])
    with pytest.raises(ConfigError, match="episodes_per_env"):
        synthesize(["miniwob/click-button"], episodes_per_env=0, out_dir=tmp_path)


# -- real pages --------------------------------------------------------------------------------

ENVS = ["miniwob/click-button", "miniwob/login-user", "miniwob/click-checkboxes", "miniwob/enter-text"]


@pytest.fixture(scope="module")
def synth_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from collabui.training.synth import synthesize

    out = tmp_path_factory.mktemp("synth")
    stats = synthesize(ENVS, episodes_per_env=3, seed=5, out_dir=out, progress=False,
                       kinds=("knowledge", "instruction", "preference"))
    assert stats.pages == 12 and stats.rows["instruction"] >= 40 and set(stats.sources) == {"template"}
    assert stats.rows["preference"] == stats.rows["instruction"]
    return out


def _rows(folder: Path, kind: str) -> list[dict]:
    return [json.loads(line) for line in (folder / f"{kind}.jsonl").read_text().splitlines()]


def _screen(user: str) -> str:
    return user.split("Current screen:\n", 1)[1].rsplit("\nReply with a Thought line", 1)[0]


@pytest.mark.browser
def test_instruction_prompts_are_runtime_prompts(synth_dir: Path) -> None:
    rows = _rows(synth_dir, "instruction")
    templates = {r["template"] for r in rows}
    assert {"click_named", "click_positional", "type_multi_field_1", "type_multi_field_2"} <= templates
    assert templates & {"type_labelled", "type_positional", "type_only_field"}
    for row in rows:
        meta = json.loads(row["meta"])
        expected = build_messages(space=WEB, task=meta["instruction"], observation=_screen(row["prompt"][-1]["content"]),
                                  history=meta["history"])
        assert row["prompt"] == [dict(m) for m in expected]
        parsed = parse_proposal(row["completion"][0]["content"], WEB)
        assert parsed.error is None and parsed.action.to_dict() == WEB.from_dict(meta["action"]).to_dict()


@pytest.mark.browser
def test_element_order_and_target_ids_vary(synth_dir: Path) -> None:
    rows = [r for r in _rows(synth_dir, "instruction") if r["env"] == "miniwob/click-button"]
    screens = [_screen(r["prompt"][-1]["content"]) for r in rows]
    assert len(set(screens)) == len(rows)  # every example has its own layout
    orders = {tuple(re.findall(r"<(?:div|button\[[A-Z]+\])\| ([^>]*)>", s)) for s in screens}
    assert len(orders) >= len(rows) - 2  # the same page's elements come in different orders
    ids = [json.loads(r["meta"])["action"].get("element_id") for r in _rows(synth_dir, "instruction")]
    assert len(set(ids)) >= 5  # no single id (position) answers most examples


@pytest.mark.browser
def test_actions_have_the_intended_effect_on_the_real_page(synth_dir: Path) -> None:
    from collabui.devices.registry import make_env
    from collabui.devices.simplify import parse_elements

    rows = _rows(synth_dir, "instruction")
    checked = {"click": 0, "type": 0, "multi": 0}
    with make_env("miniwob/click-button") as env:
        for row in rows:
            meta, task = json.loads(row["meta"]), row["env"].removeprefix("miniwob/")
            shown = {e.id: e for e in parse_elements(_screen(row["prompt"][-1]["content"])) if e.id}
            obs = env.reset(seed=row["seed"], options={"task_name": task})
            if meta.get("previous_page_action"):
                obs = env.act(WEB.from_dict(meta["previous_page_action"])).observation
            real = {e.id: e for e in parse_elements(obs.text) if e.id}
            page_id, shown_id = meta["page_action"]["element_id"], meta["action"]["element_id"]
            assert real[page_id].full_text == shown[shown_id].full_text  # same element, mapped back
            outcome = env.act(WEB.from_dict(meta["page_action"]))
            if row["template"] == "click_named" and task == "click-button":
                assert real[page_id].full_text == meta["target"]
                wanted = re.search(r'"(.*)"', meta["page_task"]).group(1)
                assert outcome.reward == (1.0 if meta["target"] == wanted else -1.0)
                checked["click"] += 1
            if meta["action"]["action"] == "type_string":
                after = {e.id: e for e in parse_elements(outcome.observation.text) if e.id}
                content = meta["action"]["content"]
                assert content in after[page_id].text or "*" * len(content) in after[page_id].text
                checked["type"] += 1
            if row["template"] == "type_multi_field_2":
                first = meta["previous_page_action"]
                assert first["element_id"] != page_id
                checked["multi"] += 1
    assert checked["click"] >= 2 and checked["type"] >= 4 and checked["multi"] >= 1


@pytest.mark.browser
def test_knowledge_rows_use_real_ids(synth_dir: Path) -> None:
    from collabui.devices.registry import make_env
    from collabui.devices.simplify import parse_elements

    rows = _rows(synth_dir, "knowledge")
    assert {r["template"] for r in rows} & {"ui_purpose", "ui_aim", "ui_summary"}
    element_rows = [r for r in rows if r["template"].startswith("element_")]
    assert len(element_rows) >= 20
    with make_env("miniwob/click-button") as env:
        for row in element_rows[:12]:
            meta = json.loads(row["meta"])
            obs = env.reset(seed=row["seed"], options={"task_name": row["env"].removeprefix("miniwob/")})
            assert obs.text in row["prompt"][-1]["content"]  # the real page, not a variant
            assert meta["element_id"] in {e.id for e in parse_elements(obs.text) if e.id}
            assert f"UI element {meta['element_id']}" in meta["question"] in row["prompt"][-1]["content"]
            assert f"lement {meta['element_id']}" in row["completion"][0]["content"]


@pytest.mark.browser
def test_preference_pairs_are_contract_pairs(synth_dir: Path) -> None:
    from collabui.training.pairs import load_pairs

    pairs = load_pairs(synth_dir / "preference.jsonl")
    instructions = _rows(synth_dir, "instruction")
    assert len(pairs) == len(instructions) and set(pairs["agent"]) == {0}
    for pair, row in zip(pairs, instructions, strict=True):
        assert pair["prompt"] == row["prompt"] and pair["chosen"] == row["completion"]
        chosen = parse_proposal(pair["chosen"][0]["content"], WEB).action
        rejected = parse_proposal(pair["rejected"][0]["content"], WEB).action
        assert rejected.key() != chosen.key() and rejected.name != "unknown"


@pytest.mark.browser
def test_teacher_answers_and_wording(tmp_path: Path) -> None:
    from collabui.models.fake import ScriptedChatModel
    from collabui.training.synth import synthesize

    def answer(request) -> str:
        user = request.messages[-1]["content"]
        return "Press the one the agent will do." if "Write the instruction" in user else "Teacher says so."

    teacher = ScriptedChatModel(answer)
    stats = synthesize(["miniwob/click-button"], episodes_per_env=1, out_dir=tmp_path, teacher=teacher,
                       progress=False)
    assert stats.sources == {"teacher": 8}
    know = _rows(tmp_path, "knowledge")
    assert all(r["completion"][0]["content"] == "Teacher says so." for r in know)
    for row in _rows(tmp_path, "instruction"):
        assert row["prompt"][-1]["content"].startswith("Task: Press the one the agent will do.\n")
        assert json.loads(row["meta"])["instruction"] == "Press the one the agent will do."
