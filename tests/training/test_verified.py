"""The environment-verified critic and the demonstrator, on real MiniWoB++ pages in Chromium:
labels agree with what the environment rewards, replays that differ are abstained on, and only
trajectories the environment rewarded become data."""

from __future__ import annotations

import dataclasses
import json

import pytest

from collabui.actions import WEB, Unknown, web
from collabui.devices.simplify import flat_elements
from collabui.errors import ConfigError
from collabui.training.critic import StepContext, make_critic
from collabui.training.demonstrate import (
    DemoConfig,
    generate_demonstrations,
    map_action,
    read_steps,
    render_trajectory,
)
from collabui.training.verified import (
    EnvVerifiedCritic,
    Replayer,
    SearchConfig,
    rank_candidates,
    search,
    verified_action,
)

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def replayer():
    with Replayer(action_timeout_s=0.5) as rep:
        yield rep


@pytest.fixture(scope="module")
def critic(replayer):
    return EnvVerifiedCritic(replayer=replayer)


def _by_text(obs, text: str, tag: str | None = None) -> str:
    ids = [e["id"] for e in flat_elements(obs.extra["tree"])
           if e["full_text"] == text and (tag is None or e["tag"] == tag)]
    assert ids, f"no element {text!r} in {obs.text}"
    return ids[0]


def _context(obs, seed: int, task: str, matrix, prefix=()) -> StepContext:
    actions = tuple(tuple(a.to_dict() if not isinstance(a, Unknown) else
                          {"action": "unknown", "raw": "??", "reason": "unparsable"} for a in row)
                    for row in matrix)
    return StepContext(episode_id="e", t=len(prefix), task=obs.task or "", action_space="web",
                       observation=obs.text, history=(), actions=actions,
                       raws=tuple(tuple("" for _ in row) for row in matrix),
                       env=f"miniwob/{task}", seed=seed, prefix=tuple(a.to_dict() for a in prefix),
                       screen=obs.text)


def test_search_finds_what_the_environment_rewards(replayer):
    for task, seed in [("click-button", 3), ("enter-text", 4), ("click-checkboxes", 5)]:
        found = search(replayer, task, seed, config=SearchConfig())
        assert found.found, found.reason
        # Replaying the found actions on a fresh reset is rewarded: the environment agrees.
        replayer.start(task, seed)
        outcomes = [replayer.act(a) for a in found.actions]
        assert outcomes[-1].done and outcomes[-1].reward > 0
        assert not any(o.done for o in outcomes[:-1])


def test_a_box_ticked_and_unticked_is_cut_from_the_path(replayer):
    """A pair of equal clicks that undo each other (no single removal completes the task
    without the other) is cut, so no demonstration teaches clicking a box twice."""
    from collabui.training.verified import _shortest

    task, seed = "click-checkboxes", 5
    found = search(replayer, task, seed, config=SearchConfig())
    assert found.found and len(found.actions) >= 2, found.reason
    tick = found.actions[0]  # a box the task asks for: ticked, unticked, ticked again
    padded = [tick, tick, *found.actions]
    replayer.start(task, seed)
    outcomes = [replayer.act(a) for a in padded]
    assert outcomes[-1].done and outcomes[-1].reward > 0  # the padded path is rewarded too
    kept, seen = _shortest(replayer, task, seed, (), padded, [])
    assert len(kept) == len(found.actions) and len(seen) == len(kept)
    assert sorted(map(repr, kept)) == sorted(map(repr, found.actions))


@pytest.fixture(scope="module")
def shuffled():
    with Replayer(action_timeout_s=0.5, shuffle_elements=True) as rep:
        yield rep


def test_a_detour_is_cut_on_shuffled_pages_too(shuffled):
    """A shuffling device draws new ids for every observation, so a replay without one step
    meets pages in other ids: each kept step's element is found again on the page it meets.
    (With the search's own ids no step was ever cut on shuffled pages.)"""
    from collabui.training.verified import _shortest

    task, seed = "click-checkboxes", 5
    found = search(shuffled, task, seed, config=SearchConfig())
    assert found.found and len(found.actions) >= 2, found.reason
    # Tick the first named box, untick it, then the found path: rewarded, with a pair to cut.
    first = shuffled.start(task, seed)
    tick = map_action(found.actions[0], found.observations[0].extra["tree"], first.extra["tree"])
    assert tick is not None
    untick_page = shuffled.act(tick).observation
    untick = map_action(tick, first.extra["tree"], untick_page.extra["tree"])
    padded, padded_obs = [tick, untick], [first, untick_page]
    kept, seen = _shortest(shuffled, task, seed, (), [*padded, *found.actions], [*padded_obs, *found.observations])
    assert len(kept) == len(found.actions) and len(seen) == len(kept)
    # What is returned replays: each action in the ids of the observation returned with it.
    shuffled.start(task, seed)
    for k, (obs, action) in enumerate(zip(seen, kept, strict=True)):
        assert action.element_id in {e["id"] for e in flat_elements(obs.extra["tree"])}
        out = shuffled.act(action)
        assert out.done == (k == len(kept) - 1)
    assert out.reward > 0


def test_clicking_the_previous_box_again_is_found_on_a_reshuffled_page_and_scored_wrong(shuffled):
    """The ``repeat`` negative with repeat_clicks: the box the previous step ticked is found on
    the next page in its new id, and the verified critic scores clicking it again (unticking)
    wrong while the next box the search ticks is right."""
    from collabui.training.critic import to_action
    from collabui.training.mistake_pairs import _repeated_action

    task, seed = "click-checkboxes", 5
    found = search(shuffled, task, seed, config=SearchConfig())
    assert found.found and len(found.actions) >= 2, found.reason
    first = shuffled.start(task, seed)
    tick = map_action(found.actions[0], found.observations[0].extra["tree"], first.extra["tree"])
    second = shuffled.act(tick).observation
    previous = {"executed": tick.to_dict(), "observation": {"extra": first.extra}}
    assert _repeated_action(previous, {"observation": {"extra": second.extra}}) is None  # clicks only when asked
    repeat = _repeated_action(previous, {"observation": {"extra": second.extra}}, ("type_string", "click"))
    assert repeat == {**tick.to_dict(), "element_id": map_action(tick, first.extra["tree"], second.extra["tree"]).element_id}
    assert repeat["element_id"] != tick.element_id  # reshuffled
    after = map_action(found.actions[1], found.observations[1].extra["tree"], second.extra["tree"])
    critic = EnvVerifiedCritic(replayer=shuffled)
    labels = critic.score(_context(second, seed, task, [[after, to_action(repeat, WEB)]], prefix=(tick,)))
    assert labels.scores == ((1.0, 0.0),), labels.reasons


def test_the_search_on_shuffled_pages_returns_steps_a_clean_replay_repeats(shuffled):
    """The search takes a click that changed nothing visible to leave the page as it was (no
    rebuild); what it returns is still what a clean replay does, in that replay's ids."""
    for task, seed in [("login-user-popup", 3000), ("multi-layouts", 3001), ("click-widget", 3002)]:
        found = search(shuffled, task, seed, config=SearchConfig())
        assert found.found, (task, found.reason)
        obs = shuffled.start(task, seed)
        for k, action in enumerate(found.actions):
            assert obs.text == found.observations[k].text, (task, k)  # the same page, the same ids
            out = shuffled.act(action)
            obs = out.observation
        assert out.done and out.reward >= 1.0, task


def test_the_search_ticks_every_named_box_though_fewer_earn_a_positive_reward(replayer):
    """click-checkboxes pays (right boxes - wrong boxes) / boxes: on this seed, one of the three
    named boxes and Submit already earn a positive reward. A demonstration that stopped there
    taught submitting early; the search and its shortening ask for the full reward."""
    from collabui.training.verified import completes

    task, seed = "click-checkboxes", 1001
    obs = replayer.start(task, seed)
    names = obs.task.removeprefix("Select ").removesuffix(" and click Submit.").split(", ")
    assert len(names) == 3
    submit = web.Click(_by_text(obs, "Submit", "button"))
    label = next(e["id"] for e in flat_elements(obs.extra["tree"]) if e["tag"] == "label" and e["text"] == names[0])
    replayer.act(web.Click(label))
    partial = replayer.act(submit)
    assert partial.done and 0 < partial.reward < 1 and not completes(partial.reward)
    found = search(replayer, task, seed, config=SearchConfig())
    assert found.found, found.reason
    assert len(found.actions) == len(names) + 1  # every named box, then Submit
    replayer.start(task, seed)
    outcomes = [replayer.act(a) for a in found.actions]
    assert outcomes[-1].done and outcomes[-1].reward == 1.0
    # Part-way through, the search knows the prefix's tick (it counts as clicked and is not
    # undone), so the critic finds the rest and scores by it: after one named box, Submit is
    # wrong (a partial reward) and the next named box is right.
    replayer.start(task, seed)
    ticked = replayer.act(web.Click(label)).observation
    assert replayer.clicked() and len(replayer.clicked()) == 1
    nxt = next(e["id"] for e in flat_elements(ticked.extra["tree"]) if e["tag"] == "label" and e["text"] == names[1])
    submit = web.Click(_by_text(ticked, "Submit", "button"))
    critic = EnvVerifiedCritic(replayer=replayer)
    labels = critic.score(_context(ticked, seed, task, [[submit, web.Click(nxt)]], prefix=[web.Click(label)]))
    assert labels.scores == ((0.0, 1.0),), labels.reasons


def test_rank_candidates_types_quoted_text_first(replayer):
    obs = replayer.start("enter-text", 1)
    first = rank_candidates(obs.task, obs)[0]
    assert isinstance(first, web.TypeString) and f'"{first.content}"' in obs.task


def test_critic_labels_match_the_environment(replayer, critic):
    seed = 11
    obs = replayer.start("click-button", seed)
    wanted = obs.task.split('"')[1]
    right = web.Click(_by_text(obs, wanted, "button"))
    wrong_id = next(e["id"] for e in flat_elements(obs.extra["tree"])
                    if e["tag"] == "button" and e["full_text"] != wanted)
    wrong = web.Click(wrong_id)
    unparsable = Unknown(raw="??", reason="unparsable")
    labels = critic.score(_context(obs, seed, "click-button", [[right, wrong], [unparsable, right]]))
    assert labels.scores == ((1.0, 0.0), (0.0, 1.0))
    # Each score is what the environment says of that action, checked independently here.
    for action, expected in [(right, 1.0), (wrong, -1.0)]:
        replayer.start("click-button", seed)
        assert replayer.act(action).reward == expected


def test_critic_scores_progress_on_multi_step_tasks(replayer, critic):
    seed = 7
    obs = replayer.start("enter-text", seed)
    text = obs.task.split('"')[1]
    field = next(e["id"] for e in flat_elements(obs.extra["tree"]) if e["tag"] == "input")
    submit = _by_text(obs, "Submit", "button")
    matrix = [[web.TypeString(field, text), web.TypeString(field, "wrong text")],
              [web.Click(submit), web.TypeString(field, text)]]
    labels = critic.score(_context(obs, seed, "enter-text", matrix))
    # The right text makes progress; a wrong text wastes a step; Submit on an empty field fails.
    assert labels.scores == ((1.0, 0.0), (0.0, 1.0))
    assert labels.rewards == ((1, 0), (0, 1))


def test_critic_gives_a_target_when_every_proposal_is_wrong(replayer, critic):
    seed = 12
    obs = replayer.start("click-link", seed)
    wanted = obs.task.split('"')[1]
    wrong = [web.Click(e["id"]) for e in flat_elements(obs.extra["tree"]) if e["full_text"] != wanted][:2]
    assert wrong
    labels = critic.score(_context(obs, seed, "click-link", [wrong]))
    assert labels.scores == ((0.0,) * len(wrong),)
    target = verified_action(labels.to_label("e", 0, "verified"))
    assert target is not None
    replayer.start("click-link", seed)
    assert replayer.act(WEB.from_dict(target)).reward > 0


def test_critic_abstains_when_the_replay_differs(replayer, critic):
    seed = 2
    obs = replayer.start("click-button", seed)
    ctx = _context(obs, seed, "click-button", [[web.Click("A")]])
    import dataclasses

    other = replayer.start("click-button", seed + 1)
    labels = critic.score(dataclasses.replace(ctx, screen=other.text))
    assert labels.scores == ((None,),)
    assert "differs" in labels.reasons[0][0]
    unseeded = critic.score(dataclasses.replace(ctx, seed=None))
    assert unseeded.scores == ((None,),) and "seeded" in unseeded.reasons[0][0]


def test_critic_never_replays_a_masked_password(replayer, critic):
    # Traces mask what is typed into password fields (collabui.redaction): a replay would type
    # "***", so the masked entry is not scored and later steps abstain, instead of wrong labels.
    seed = 0
    obs = replayer.start("login-user", seed)
    user, password = obs.task.split('"')[1::2]
    first, second = [e["id"] for e in flat_elements(obs.extra["tree"]) if e["tag"] == "input"]
    typed_user = web.TypeString(first, user)
    obs = replayer.act(typed_user).observation
    labels = critic.score(_context(obs, seed, "login-user", [[web.TypeString(second, "***"),
                                                              web.TypeString(second, password)]],
                                   prefix=[typed_user]))
    assert labels.scores == ((None, 1.0),), labels.reasons
    assert "masked" in labels.reasons[0][0]
    after = replayer.act(web.TypeString(second, password)).observation
    later = critic.score(_context(after, seed, "login-user", [[web.Click("C")]],
                                  prefix=[typed_user, web.TypeString(second, "***")]))
    assert later.scores == ((None,),) and "masked" in later.reasons[0][0]


def test_critic_abstains_on_pages_that_move_by_themselves(replayer):
    critic = EnvVerifiedCritic(replayer=replayer)
    obs = replayer.start("chase-circle", 0)  # the circle drifts on a timer
    labels = critic.score(_context(obs, 0, "chase-circle", [[web.Click("A")]]))
    assert labels.scores == ((None,),) and "changes by itself" in labels.reasons[0][0]


def test_verified_critic_by_spec():
    critic = make_critic("verified")
    assert isinstance(critic, EnvVerifiedCritic) and critic.name == "verified"
    critic.close()  # never started a browser: nothing to do


def test_demonstrations_are_verified_resumable_and_shuffled(tmp_path):
    config = DemoConfig(out_dir=str(tmp_path / "demo"), tasks=("click-button", "enter-text"),
                        seeds=3, workers=1, minutes=2.0, renderings=2)
    stats = generate_demonstrations(config)
    assert stats.episodes_tried == 6 and stats.verified_steps >= 6
    rows = read_steps(tmp_path / "demo" / "steps.jsonl")
    assert len(rows) == stats.examples
    pages = [r for r in rows if r["rendering"] == "page"]
    assert {r["rendering"] for r in rows} == {"page", "rendering-2"}
    # Every kept trajectory is rewarded again when replayed from scratch on a fresh browser,
    # its ids mapped through the device's element identity.
    with Replayer(shuffle_elements=True) as fresh:
        for task, seed in {(r["task_name"], r["seed"]) for r in pages}:
            steps = sorted((r for r in pages if (r["task_name"], r["seed"]) == (task, seed)),
                           key=lambda r: r["t"])
            obs = fresh.start(task, seed)
            for row in steps:
                action = map_action(WEB.from_dict(row["action"]), json.loads(row["tree"]), obs.extra["tree"])
                out = fresh.act(action)
                obs = out.observation
            assert out.done and out.reward > 0, (task, seed)
    # Two renderings of one step show the same page with other ids (order and ids shuffled).
    first = [r for r in rows if (r["task_name"], r["seed"], r["t"]) == (pages[0]["task_name"], pages[0]["seed"], 0)]
    assert len({r["screen"] for r in first}) == 2
    # Resume: nothing is searched again; the dataset and its card are written.
    again = generate_demonstrations(config)
    assert again.episodes_tried == 6 and again.examples == stats.examples
    from datasets import load_from_disk

    assert len(load_from_disk(str(tmp_path / "demo" / "dataset"))) == stats.examples
    assert "verified" in (tmp_path / "demo" / "README.md").read_text()


def test_demonstrations_refuse_unknown_tasks(tmp_path):
    with pytest.raises(ConfigError, match="unknown MiniWoB"):
        generate_demonstrations(DemoConfig(out_dir=str(tmp_path), tasks=("click-buton",)))


def test_typing_keeps_the_task_order_after_a_field_is_filled():
    from collabui.models.baselines import Target
    from collabui.training.candidates import _typing

    task = 'Enter the username "tula" and the password "pv" and press login.'
    fields = [Target("B", "input", "", True), Target("D", "input", "", True)]
    first = _typing(task, fields, [])
    assert first[0] == web.TypeString("B", "tula") and first[1] == web.TypeString("D", "pv")
    filled = [Target("B", "input", "tula", True), Target("D", "input", "", True)]
    # "pv" goes to the password field next, never over the filled username field.
    assert _typing(task, filled, [web.TypeString("B", "tula")]) == [web.TypeString("D", "pv")]


def test_balanced_sft_rows_share_the_limit_over_tasks():
    from collabui.training.sft_data import sft_rows

    def row(task, seed):
        return {"task_name": task, "seed": seed, "t": 0, "task": f"Click {seed}", "history": [],
                "screen": "<button[A]| OK>", "url": None, "viewport": None,
                "action": {"action": "click", "element_id": "A"}}

    rows = [row("many", s) for s in range(90)] + [row("few", s) for s in range(10)]
    picked = sft_rows(rows, limit=20, balance=True)
    assert sorted(r["task_name"] for r in picked).count("few") == 10
    plain = sft_rows(rows, limit=20)
    assert sum(r["task_name"] == "few" for r in plain) < 10  # random draws follow the data's skew
    assert picked[0]["completion"][0]["content"] == 'Action: {"action": "click", "element_id": "A"}'
    # By step: a 4-step task gets a share per step, a 1-step task one share.
    steps = [{**row("form", s), "t": t} for s in range(30) for t in range(4)] + [row("click", s) for s in range(30)]
    by_task = sft_rows(steps, limit=20, balance=True)
    by_step = sft_rows(steps, limit=20, balance=True, by_step=True)
    assert sum(r["task_name"] == "form" for r in by_task) == 10
    assert sum(r["task_name"] == "form" for r in by_step) == 16
    assert sorted(r["t"] for r in by_step if r["task_name"] == "form") == [0] * 4 + [1] * 4 + [2] * 4 + [3] * 4


def test_critic_scores_a_step_that_changes_nothing_as_wasted(replayer, critic):
    seed = 5
    obs = replayer.start("click-checkboxes", seed)
    labels = critic.score(_context(obs, seed, "click-checkboxes", [[web.ScrollPage("up")]]))
    assert labels.scores == ((0.0,),) and labels.reasons[0][0] == "changed nothing on the page"


def test_grounded_rows_copy_the_targets_screen_line_before_the_action():
    from collabui.parsing import parse_proposal
    from collabui.training.sft_data import sft_rows

    tree = {"tag": "", "id": None, "parts": [
        {"tag": "label", "id": "K", "parts": ["Username"]}, {"tag": "input", "id": "Q", "parts": []},
        {"tag": "button", "id": "B", "parts": ["Log ", {"tag": "span", "id": None, "parts": ["in"]}]}]}
    base = {"task_name": "login", "seed": 1, "t": 0, "task": 'Type "ann" and log in.', "history": [],
            "screen": "unused", "url": None, "viewport": None, "tree": json.dumps(tree)}
    rows = [{**base, "action": {"action": "click", "element_id": "B"}},
            {**base, "t": 1, "action": {"action": "type_string", "element_id": "Q", "content": "ann"}},
            {**base, "t": 2, "action": {"action": "scroll_page", "direction": "down"}}]
    out = {r["t"]: r for r in sft_rows(rows, style="grounded", element_format="text-first")}
    click = out[0]["completion"][0]["content"]
    assert click.startswith('Thought: click button "Log in" [B]\nAction: ')
    # The copied line is the screen's own line, and the answer parses to the verified action.
    assert 'button "Log in" [B]' in out[0]["prompt"][-1]["content"].splitlines()
    assert parse_proposal(click, WEB).action == web.Click("B")
    # An empty field is named by its label too, as the screen line reads.
    assert out[1]["completion"][0]["content"].startswith('Thought: type_string input "" (Username) [Q]\n')
    assert 'input "" (Username) [Q]' in out[1]["prompt"][-1]["content"].splitlines()
    assert out[2]["completion"][0]["content"].startswith("Thought: scroll_page\nAction: ")  # the name alone
    assert "Thought:" in out[0]["prompt"][0]["content"]  # the system prompt asks for the line
    html = sft_rows(rows[:1], style="grounded", element_format="html")[0]
    assert html["completion"][0]["content"].startswith("Thought: click <button[B]| Log in>\n")
    bad = {**base, "action": {"action": "click", "element_id": "Z"}}
    with pytest.raises(ConfigError, match="does not list"):
        sft_rows([bad], style="grounded", element_format="text-first")


def test_critic_replays_shuffled_text_first_traces(tmp_path, critic):
    """Evaluation traces are shuffled (and may be text-first): the header records how the device
    showed pages, and the critic replays with the same settings instead of abstaining."""
    from collabui.evaluation.miniwob import MiniWoBEvalConfig, default_team, evaluate_miniwob
    from collabui.trace import read_trace
    from collabui.training.labels import iter_step_contexts

    config = MiniWoBEvalConfig(tasks="click-checkboxes", episodes=2, model="random:1",
                               team=default_team("random:1", seed=3, max_steps=2),
                               shuffle_elements=True, element_format="text-first")
    evaluate_miniwob(config, tmp_path, progress=False)
    contexts = [c for p in sorted((tmp_path / "traces").glob("*.jsonl"))
                for c in iter_step_contexts(read_trace(p))]
    assert contexts and all(c.device["shuffle_elements"] and c.device["element_format"] == "text-first"
                            for c in contexts)
    labels = [critic.score(c) for c in contexts]
    reasons = [r for lab in labels for row in lab.reasons for r in row]
    assert not any("replayed page differs" in r for r in reasons), reasons
    assert any(s is not None for lab in labels for row in lab.scores for s in row)
    # The same trace with its settings dropped no longer replays: the settings are what matched.
    plain = dataclasses.replace(contexts[0], device={})
    assert "replayed page differs" in critic.score(plain).reasons[0][0]


def test_search_types_unquoted_values_into_the_fields_their_labels_name(replayer):
    # multi-layouts names its values without quotes and shuffles where the labels sit.
    for seed in (1001, 1007, 1010):
        found = search(replayer, "multi-layouts", seed, config=SearchConfig())
        assert found.found, found.reason
        assert sum(isinstance(a, web.TypeString) for a in found.actions) == 3


def test_search_types_again_what_a_popup_interrupted(replayer):
    # login-user-popup: a "session timeout" popup takes the focus while the password is typed.
    # The value did not stick, so the search types it again after Cancel instead of learning a
    # detour (clicking the empty field to raise the popup first).
    found = search(replayer, "login-user-popup", 1000, config=SearchConfig())
    assert found.found, found.reason
    typed = [a.content for a in found.actions if isinstance(a, web.TypeString)]
    assert typed.count("EiT") == 2 and typed[0] == "tula"
    fields = [a for a, obs in zip(found.actions, found.observations, strict=True)
              if isinstance(a, web.Click) and f"<input[{a.element_id}]" in obs.text]
    assert not fields, f"clicked a field: {fields}"


def test_demonstration_rows_mask_the_task_password_as_the_runtime_does(replayer):
    # collabui.episode shows the agents a typed password as "***" in the history; rows that
    # showed it in full would teach a history no trained agent ever reads.
    found = search(replayer, "login-user-popup", 1000, config=SearchConfig())
    rows = render_trajectory(replayer, "login-user-popup", 1000, found, renderings=1)
    assert rows is not None and len(rows) == len(found.actions)
    histories = [" ".join(r["history"]) for r in rows]
    assert not any("EiT" in h for h in histories), histories
    assert "'***'" in histories[-1] and "tula" in histories[-1]
    assert [r["action"].get("content") for r in rows].count("EiT") == 2  # targets keep the value
    assert all('password "EiT"' in r["task"] for r in rows)


def _login_filler(request) -> str:
    """Type the username, then the password, then press the button; the agent sampling at
    T = 0.5 types a wrong password instead (masked too: text typed into a password field)."""
    import re

    text = str(request.messages[-1]["content"])
    task = re.search(r"^Task: (.*)$", text, re.M).group(1)
    page = next(line for line in text.splitlines() if line.startswith("<"))
    user, password = re.findall(r'"([^"]+)"', task)
    for element, content in re.findall(r"<input\[([A-Z]+)\]\| ([^>]*)>", page):
        if content in ("", "password"):
            value = user if content != "password" else password if request.temperature != 0.5 else "wrong-pw"
            return f'Action: {{"action": "type_string", "element_id": "{element}", "content": "{value}"}}'
    button = re.findall(r"<button\[([A-Z]+)\]\|", page)[-1]
    return f'Action: {{"action": "click", "element_id": "{button}"}}'


def test_critic_replays_the_password_the_task_names_from_the_live_task(tmp_path, critic):
    """Traces mask a typed password, but record (one bit per entry) that it was exactly the
    password the environment's task names: the critic types it again from the live task, so the
    steps after it are labelled; another text typed there stays unknown, never guessed."""
    from collabui import CollabAgentTeam
    from collabui.devices import make_env
    from collabui.models.fake import ScriptedChatModel
    from collabui.trace import read_trace
    from collabui.training.labels import iter_step_contexts

    seed = 3
    team = CollabAgentTeam(ScriptedChatModel(_login_filler), n_agents=3, rounds=1, topology="independent",
                           max_steps=4, seed=0)
    with make_env("miniwob/login-user") as env:
        password = env.reset(seed=seed).task.split('"')[3]
        result = team.run(None, env, seed=seed, trace=tmp_path, env_name="miniwob/login-user")
    assert result.success
    path = next(tmp_path.glob("*.jsonl"))
    assert password.encode() not in path.read_bytes()
    trace = read_trace(path)
    typed = [s.get("task_password") for s in trace.steps]
    # Step 1 typed the password: agents 0 and 1 (and the vote) typed the task's, agent 2 another text.
    assert typed == [None, {"executed": True, "proposals": [[0, 0], [1, 0]]}, None]
    contexts = list(iter_step_contexts(trace))
    at_password, after = critic.score(contexts[1]), critic.score(contexts[2])
    assert at_password.scores == ((1.0,), (1.0,), (None,)), at_password.reasons
    assert "masked" in at_password.reasons[2][0]
    assert after.scores == ((1.0,), (1.0,), (1.0,)), after.reasons  # the login click completes it
    # Labels hold no password either: the search's continuation types the stand-in, the reasons the mask.
    first = critic.score(contexts[0])
    for labels in (first, at_password, after):
        assert password not in f"{labels.rationale} {labels.reasons}"
    typing = [a for a in json.loads(first.rationale)["continuation"] if a["action"] == "type_string"]
    assert [a["content"] for a in typing][-1] == "<the task's password>"
    from collabui.training.mistake_pairs import verified_answer

    assert '"content": "***"' in verified_answer(trace.header, trace.steps[1], typing[-1])
    # Without the recorded bit the same step is not replayable (the old traces): it abstains.
    plain = dataclasses.replace(contexts[2], prefix=tuple(dict(a, content="***") if a.get("content") == \
        "<the task's password>" else a for a in contexts[2].prefix))
    assert "masked" in critic.score(plain).reasons[0][0]


def test_typing_the_previous_text_again_is_found_on_a_reshuffled_page_and_scored_wasted():
    """The ``repeat`` negative of own-mistake pairs (mistake_pairs._repeated_action): the field
    the previous step typed into is found on the next page although every id was reshuffled,
    and the verified critic scores typing the same text into it again as wrong ("changed
    nothing"), while Submit is right."""
    from collabui.training.critic import to_action
    from collabui.training.mistake_pairs import _repeated_action

    seed = 7
    with Replayer(action_timeout_s=0.5, shuffle_elements=True) as rep:
        critic = EnvVerifiedCritic(replayer=rep)
        first = rep.start("enter-text", seed)
        field = next(e for e in flat_elements(first.extra["tree"]) if e["tag"] == "input")
        typed = web.TypeString(field["id"], first.task.split('"')[1])
        second = rep.act(typed).observation
        repeat = _repeated_action({"executed": typed.to_dict(), "observation": {"extra": first.extra}},
                                  {"observation": {"extra": second.extra}})
        assert repeat is not None
        now = next(e for e in flat_elements(second.extra["tree"]) if e["tag"] == "input")
        assert now["id"] != field["id"]  # reshuffled
        assert repeat == {**typed.to_dict(), "element_id": now["id"]}
        assert _repeated_action({"executed": web.Click(field["id"]).to_dict(), "observation": {"extra": first.extra}},
                                {"observation": {"extra": second.extra}}) is None  # only typing repeats
        submit = _by_text(second, "Submit", "button")
        labels = critic.score(_context(second, seed, "enter-text", [[web.Click(submit), to_action(repeat, WEB)]],
                                       prefix=(typed,)))
        assert labels.scores == ((1.0, 0.0),), labels.reasons
        assert labels.reasons[0][1] == "changed nothing on the page"
