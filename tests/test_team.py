import asyncio
import json
import re
from collections import Counter
from itertools import pairwise

import pytest

from collabui import CollabAgentTeam
from collabui.actions.web import Click
from collabui.devices.base import Observation
from collabui.devices.fake import FakeDevice
from collabui.errors import CollabUIError, ConfigError
from collabui.models import ChatRequest
from collabui.models.fake import ScriptedChatModel
from collabui.topologies import Custom, RandomDAG, make_topology
from collabui.trace import MemoryTraceStore

N, M = 4, 3
OBS = Observation(text="<button[B]| Submit> <button[C]| Cancel>", task="Click Submit.")


def _by_agent_and_round():
    """A fake whose every answer names its author: agent i's j-th call answers id X{i}{j}.

    Requests carry the agent's adapter name (a0..a3), and an agent's calls are sequential
    across rounds, so the per-adapter call count is the round.
    """
    counts: dict[str, int] = {}

    def answer(req):
        i = req.adapter[1:]
        j = counts.get(req.adapter, 0)
        counts[req.adapter] = j + 1
        return f'Thought: I am {i} in {j}.\nAction: {{"action": "click", "element_id": "X{i}{j}"}}'

    return ScriptedChatModel(answer)


def _team(topology, **kw):
    model = _by_agent_and_round()
    team = CollabAgentTeam(model, n_agents=N, rounds=M, topology=topology,
                           adapters=tuple(f"a{i}" for i in range(N)), batch_fallback_s=30, **kw)
    return team, model


def _markers(text):
    return set(re.findall(r"X\d\d", text))


@pytest.mark.parametrize("memory", [True, False])
@pytest.mark.parametrize("topology", ["random", "chain", "star", "complete", "independent", "edges:0-2,1-2,2-3"])
def test_each_node_sees_exactly_its_predecessors_and_own_previous_round(topology, memory):
    team, model = _team(topology, memory=memory)
    step = team.step("Click Submit.", OBS)
    assert len(model.requests) == N * M
    # Read from the matrix (each entry keeps the messages it was asked with): without memory an
    # agent's rounds run at once, so the order of its calls no longer says the round.
    props = step.proposals
    for i in range(N):
        for j in range(M):
            user = props[i][j].messages[-1]["content"]
            expected = set().union(*(_markers(props[k][j].raw) for k in team.topology.predecessors(i)))
            if j > 0 and memory:  # without memory a round reads its predecessors only
                expected |= _markers(props[i][j - 1].raw)
            assert _markers(user) == expected, (i, j, user)
            assert "Task: Click Submit." in user and "<button[B]| Submit>" in user
            assert props[i][j].temperature == team.config.agent_temperature(i)


def test_peer_block_labels_agents_and_warns():
    team, model = _team("chain")
    team.step("Click Submit.", OBS)
    user = [r for r in model.requests if r.adapter == "a1"][0].messages[-1]["content"]
    assert "may contain errors" in user
    assert '[Agent 0] Thought: I am 0 in 0.\nAction: {"action": "click", "element_id": "X00"}' in user


def _superstep_of_nodes(team):
    steps = {}
    inputs = team._inputs("Click Submit.", OBS, [], 0)
    for event in team.graph.stream(inputs, config=team._run_config(), stream_mode="debug"):
        if event["type"] == "task":
            steps[event["payload"]["name"]] = event["step"]
    return steps


@pytest.mark.parametrize("topology", ["chain", "star", "independent", "edges:0-2,1-2,2-3", "random"])
def test_nodes_of_one_layer_share_a_superstep_and_one_batch(topology):
    team, model = _team(topology)
    steps = _superstep_of_nodes(team)
    topo = team.topology
    for j in range(M):
        for i in range(N):
            assert steps[team.node_name(i, j)] == steps[team.node_name(0, 0)] - topo.depth(0) + topo.depth(i) + j
    assert len({s for n, s in steps.items() if n != "vote"}) == topo.longest_path_nodes + M - 1 == team.supersteps
    widths = {}
    for name, s in steps.items():
        if name != "vote":
            widths[s] = widths.get(s, 0) + 1
    # One generate call per superstep, of exactly the superstep's width.
    assert sorted(model.batch_sizes) == sorted(widths.values())


@pytest.mark.parametrize("topology", ["independent", "chain", "random"])
def test_without_memory_every_round_of_a_layer_shares_its_superstep(topology):
    """No round reads the one before it, so node (i, j) runs at depth(i): L supersteps a step
    and one batch per DAG layer holding all its agents' rounds."""
    team, model = _team(topology, memory=False)
    steps = _superstep_of_nodes(team)
    topo = team.topology
    for j in range(M):
        for i in range(N):
            assert steps[team.node_name(i, j)] == steps[team.node_name(0, 0)] - topo.depth(0) + topo.depth(i)
    assert team.supersteps == topo.longest_path_nodes
    layers = {}
    for i in range(N):
        layers[topo.depth(i)] = layers.get(topo.depth(i), 0) + M
    assert sorted(model.batch_sizes) == sorted(layers.values())
    step = team.step("Click Submit.", OBS)  # and a whole step still fills the matrix
    assert [len(row) for row in step.proposals] == [M] * N and step.vote.total == N * M


def test_step_vote_and_matrix():
    model = ScriptedChatModel(lambda r: 'Thought: ok\nAction: {"action": "click", "element_id": "b"}' if r.temperature < 0.4
                              else "I do not know")
    team = CollabAgentTeam(model, n_agents=4, rounds=3, topology="chain")
    step = team.step("Click Submit.", OBS)
    assert step.action == Click("B")
    assert step.vote.parsed == 6 and step.vote.total == 12
    assert [[p.parse_error is None for p in row] for row in step.proposals] == [[True] * 3] * 2 + [[False] * 3] * 2


def test_async_step_matches_sync():
    team, model = _team("star")
    sync = team.step("Click Submit.", OBS)
    team2, model2 = _team("star")
    asy = asyncio.run(team2.astep("Click Submit.", OBS))
    assert [[p.raw for p in row] for row in sync.proposals] == [[p.raw for p in row] for row in asy.proposals]
    assert sorted(model2.batch_sizes) == sorted(model.batch_sizes)


def test_edge_update_rebuilds_graph():
    team, _ = _team("random")
    before = team.topology
    after = team.resample_topology()
    assert after != before and team.topology == after
    team.set_topology(Custom(N, [(0, 1)]))
    assert team.topology.predecessors(1) == (0,)



def test_edge_update_follows_the_seeded_resample_chain():
    # Two teams built alike walk the same DAG chain: the one RandomDAG.resample gives from
    # the team's seed, each DAG different from the one before.
    teams = [_team("random")[0] for _ in range(2)]
    start = teams[0].topology
    assert start == RandomDAG(N, seed=teams[0].config.seed)
    expected, topo = [], start
    for _ in range(5):
        topo = topo.resample()
        expected.append(topo)
    for team in teams:
        assert [team.resample_topology() for _ in range(5)] == expected
    assert all(a.edges != b.edges for a, b in pairwise([start, *expected]))
    wanted = teams[0].topology.resample(seed=123)
    assert teams[0].resample_topology(seed=123) == wanted


def test_step_after_edge_update_runs_on_the_new_dag():
    team, model = _team("random")
    before = team.topology
    after = team.resample_topology()
    assert any(before.predecessors(i) != after.predecessors(i) for i in range(N))
    team.step("Click Submit.", OBS)
    # Round 0: every agent read exactly its predecessors in the new DAG.
    first: dict[int, ChatRequest] = {}
    for req in model.requests:
        first.setdefault(int(req.adapter[1:]), req)
    assert sorted(first) == list(range(N))
    for i, req in first.items():
        assert _markers(req.messages[-1]["content"]) == {f"X{k}0" for k in after.predecessors(i)}, i
    # The compiled graph was rebuilt too: one batch per superstep of the new DAG's layers.
    widths = Counter(after.depth(i) + j for i in range(N) for j in range(M))
    assert sorted(model.batch_sizes) == sorted(widths.values())
    assert team.supersteps == after.longest_path_nodes + M - 1


def test_edge_update_keeps_a_fixed_topology():
    team, _ = _team("chain")
    before = team.topology
    assert team.resample_topology() is before and team.topology is before


def test_config_errors_are_one_line():
    model = ScriptedChatModel(["x"])
    with pytest.raises(ConfigError, match="temperatures has 2 values for 4 agents"):
        CollabAgentTeam(model, temperatures=(0.1, 0.2))
    with pytest.raises(ConfigError, match="unknown team option"):
        CollabAgentTeam(model, agents=3)
    with pytest.raises(ConfigError, match="3 agents but n_agents=4"):
        CollabAgentTeam(model, topology=make_topology("chain", 3))
    with pytest.raises(ConfigError, match="rounds must be an integer >= 1"):
        CollabAgentTeam(model, rounds=0)


def test_episode_runs_to_success_and_traces_every_step():
    screens = [Observation(text="<button[B]| Next>", task="Press Next then OK."),
               Observation(text="<button[C]| OK>", task="Press Next then OK.")]
    device = FakeDevice(screens, success_when=lambda a: a == Click("C"))
    ids = iter(["B"] * 12 + ["C"] * 12)
    model = ScriptedChatModel(lambda r: f'Action: {{"action": "click", "element_id": "{next(ids)}"}}')
    team = CollabAgentTeam(model, n_agents=4, rounds=3, topology="random", max_steps=5)
    store = MemoryTraceStore()
    result = team.run(None, device, seed=3, trace=store, episode_id="ep")
    assert result.success and result.reward == 1 and result.n_steps == 2
    assert result.executed_actions == [Click("B"), Click("C")]
    records = store.episodes["ep"].records
    assert [r["type"] for r in records] == ["episode", "step", "step", "end"]
    step1 = records[2]
    assert step1["history"] == ["click('B')"]
    assert len(step1["proposals"]) == 4 and len(step1["proposals"][0]) == 3
    assert step1["vote"]["votes"] == 12 and step1["executed"] == {"action": "click", "element_id": "C"}
    # The exact prompt of every entry is in the trace: training rebuilds contexts from it.
    prompts = [json.dumps(p["messages"]) for row in step1["proposals"] for p in row]
    assert all("<button[C]| OK>" in p for p in prompts)


def test_team_votes_by_the_configured_rule():
    # Agents 0-2 type into the same field, each a different text; agents 3 and 4 click Submit.
    # Every agent repeats itself each round: 6 identical clicks against 3 x 3 different typings.
    def answer(req):
        i = int(req.adapter[1:])
        if i >= 3:
            return 'Action: {"action": "click", "element_id": "B"}'
        return f'Action: {{"action": "type_string", "element_id": "E", "content": "v{i}"}}'

    for rule, executed in (("exact", "click('B')"), ("target", "type_string('E', 'v0', False)")):
        team = CollabAgentTeam(ScriptedChatModel(answer), n_agents=5, rounds=3, topology="independent",
                               adapters=tuple(f"a{i}" for i in range(5)), batch_fallback_s=30, vote=rule)
        step = team.step("Log in.", OBS)
        assert step.action.to_call() == executed and step.vote.rule == rule
    with pytest.raises(ConfigError, match="vote 'plurality' is unknown"):
        CollabAgentTeam(ScriptedChatModel(answer), vote="plurality")


def test_a_step_cut_off_before_its_vote_says_so():
    team, _ = _team("chain")
    inputs = team._inputs("Click Submit.", OBS, (), 0)
    done = team.graph.invoke(inputs, config=team._run_config())
    assert team._finish(done, inputs, 0.0).vote.action is not None
    cut = {"proposals": {k: v for k, v in done["proposals"].items() if k[1] == 0}}  # the stop hit round 1
    with pytest.raises(CollabUIError, match=r"ended before its vote.*\(8 of 12 proposals missing\)"):
        team._finish(cut, inputs, 0.0)
    with pytest.raises(CollabUIError, match="ended before its vote"):
        team._finish({**done, "vote": None}, inputs, 0.0)


# -- stop_when_decided: the rest of a decided step is not asked of any model ----------------------


def _seeded_policy(request):
    """A stochastic-looking policy that is a function of the request's seed (as sampled models
    are): mostly Submit (B), sometimes Cancel (C), now and then unparsable."""
    draw = (request.seed * 2654435761) % 100
    if draw < 8:
        return "I am not sure"
    element = "B" if draw < 70 else "C"
    return f'Thought: draw {draw}.\nAction: {{"action": "click", "element_id": "{element}"}}'


@pytest.mark.parametrize("rule", ["exact", "target"])
@pytest.mark.parametrize("topology", ["random", "chain", "independent"])
def test_a_team_that_stops_when_decided_executes_what_the_full_team_does_with_fewer_calls(topology, rule):
    full_calls = skipped_calls = skipped_entries = 0
    for t in range(30):
        runs = {}
        for stop in (False, True):
            model = ScriptedChatModel(_seeded_policy)
            team = CollabAgentTeam(model, n_agents=N, rounds=M, topology=make_topology(topology, N, seed=1),
                                   vote=rule, stop_when_decided=stop, batch_fallback_s=30)
            runs[stop] = (team.step("Click Submit.", OBS, t=t), model)
        (full, full_model), (short, short_model) = runs[False], runs[True]
        assert short.action.key() == full.action.key(), t
        # every entry that ran is the full team's entry: same seed, same context
        for row_f, row_s in zip(full.proposals, short.proposals, strict=True):
            for pf, ps in zip(row_f, row_s, strict=True):
                assert ps.skipped or (ps.raw, ps.messages) == (pf.raw, pf.messages)
        assert len(short_model.requests) == N * M - short.skipped
        # a level runs whole or not at all: every batch the model got was a full superstep
        assert not Counter(short_model.batch_sizes) - Counter(full_model.batch_sizes)
        full_calls += len(full_model.requests)
        skipped_calls += len(short_model.requests)
        skipped_entries += short.skipped
    assert full_calls == 30 * N * M and skipped_entries > 0 and skipped_calls == full_calls - skipped_entries


def test_a_split_team_runs_every_entry_and_a_unanimous_one_stops_at_seven_votes():
    team, model = _team("chain", stop_when_decided=True)  # every answer names its own author
    step = team.step("Click Submit.", OBS)
    assert step.skipped == 0 and len(model.requests) == N * M
    unanimous = ScriptedChatModel(lambda r: 'Action: {"action": "click", "element_id": "B"}')
    team = CollabAgentTeam(unanimous, n_agents=N, rounds=M, topology="independent", stop_when_decided=True)
    step = team.step("Click Submit.", OBS)
    # independent agents, with memory: a round is a superstep; after two rounds B has 8 of 12
    assert step.action == Click("B") and step.skipped == N and len(unanimous.requests) == 2 * N
    assert step.vote.votes == 8 and step.vote.total == 8
    assert all(p.skipped for p in (row[2] for row in step.proposals))


def test_skipped_entries_are_marked_in_the_trace_and_refused_by_the_critic():
    from collabui.trace import TraceError, validate_record
    from collabui.training.critic import StepContext

    device = FakeDevice([OBS], success_when=lambda a: a == Click("B"))
    model = ScriptedChatModel(lambda r: 'Action: {"action": "click", "element_id": "B"}')
    team = CollabAgentTeam(model, n_agents=N, rounds=M, topology="independent", stop_when_decided=True)
    store = MemoryTraceStore()
    assert team.run(None, device, trace=store, episode_id="ep").success
    header, step = store.episodes["ep"].records[:2]
    for record in (header, step):
        validate_record(record)
    last = [row[2] for row in step["proposals"]]
    assert all(p["skipped"] is True and p["messages"] == [] for p in last)
    assert not any("skipped" in row[0] for row in step["proposals"])
    with pytest.raises(TraceError, match="skipped \\(stop_when_decided\\), which no critic can label"):
        StepContext.from_trace_step(header, step)


def test_stop_when_decided_and_an_arbiter_are_refused_together():
    with pytest.raises(ConfigError, match="stop_when_decided and an arbiter do not combine"):
        CollabAgentTeam(ScriptedChatModel(["x"]), arbiter="lexical", stop_when_decided=True)


def _mostly_b(request):
    """Agents at the lowest temperature click B (a button that does nothing), the others C."""
    element = "B" if request.temperature < 0.4 else "C"
    return f'Action: {{"action": "click", "element_id": "{element}"}}'


@pytest.mark.parametrize("skip_stale", [False, True])
def test_skip_stale_leaves_a_click_that_changed_nothing(tmp_path, skip_stale):
    # The page stays the same whatever is clicked; only clicking C ends the task.
    device = FakeDevice([OBS] * 4, success_when=lambda a: a == Click("C"))
    team = CollabAgentTeam(ScriptedChatModel(_mostly_b), n_agents=N, rounds=M, topology="independent",
                           temperatures=(0.1, 0.1, 0.1, 0.8), max_steps=4, skip_stale=skip_stale)
    result = team.run(None, device, trace=tmp_path, episode_id="ep")
    executed = [s.executed for s in result.steps]
    if not skip_stale:  # the paper's vote: B wins every step and nothing changes
        assert executed == [Click("B")] * 4 and not result.success
        return
    # B once (the page could have changed), then passed over for C: the step after a no-op.
    assert executed == [Click("B"), Click("C")] and result.success
    from collabui.trace import read_trace

    steps = read_trace(tmp_path / "ep.jsonl").steps
    assert "passed_over" not in steps[0]["vote"] and steps[1]["vote"]["passed_over"] == "click('B')"


def test_skip_stale_keeps_a_repeat_that_changed_the_page():
    # Each click of B changes the page (a counter): B is never stale, so B is executed each time.
    screens = [Observation(text=f"<p| clicked {k}> <button[B]| More> <button[C]| Done>", task="Click More 3 times.")
               for k in range(4)]
    device = FakeDevice(screens)
    team = CollabAgentTeam(ScriptedChatModel(_mostly_b), n_agents=N, rounds=M, topology="independent",
                           temperatures=(0.1, 0.1, 0.1, 0.8), max_steps=3, skip_stale=True, stop_when_decided=True)
    result = team.run(None, device)
    assert [s.executed for s in result.steps] == [Click("B")] * 3


@pytest.mark.browser
def test_skip_stale_on_a_real_page_leaves_a_button_that_changes_nothing():
    # click-button-sequence: clicking ONE changes nothing on the page, and clicking it again fails
    # the task; three agents keep proposing ONE, one proposes TWO, ids and order shuffled every look.
    from collabui.devices import make_env

    def answer(request):
        screen = request.messages[-1]["content"]
        name = "ONE" if request.temperature < 0.4 else "TWO"
        element = re.search(rf'button "{name}" \[(\w+)\]', screen).group(1)
        return f'Action: {{"action": "click", "element_id": "{element}"}}'

    with make_env("miniwob/click-button-sequence", element_format="text-first", shuffle_elements=True) as device:
        results = {}
        for skip_stale in (False, True):
            team = CollabAgentTeam(ScriptedChatModel(answer), n_agents=N, rounds=1, topology="independent",
                                   temperatures=(0.1, 0.1, 0.1, 0.8), max_steps=3, skip_stale=skip_stale)
            results[skip_stale] = team.run(None, device, seed=3)
    assert not results[False].success and results[False].n_steps == 2  # ONE, ONE: the task fails the episode
    assert results[True].success and results[True].n_steps == 2  # ONE, then TWO
    assert results[True].steps[1].team_step.vote.passed_over.startswith("click(")


def test_skip_stale_passes_over_alike_in_run_stream_astream_and_a_durable_session(tmp_path):
    def team():
        return CollabAgentTeam(ScriptedChatModel(_mostly_b), n_agents=N, rounds=M, topology="independent",
                               temperatures=(0.1, 0.1, 0.1, 0.8), max_steps=4, skip_stale=True)

    def device():
        return FakeDevice([OBS] * 4, success_when=lambda a: a == Click("C"))

    async def drain(stream):
        async with stream as events:
            return [e async for e in events]

    runs = {"run": team().run(None, device()), "durable": team().run(None, device(), checkpoint=tmp_path / "db.sqlite")}
    with team().stream(None, device()) as events:
        list(events)
    runs["stream"] = events.result
    stream = team().astream(None, device())
    asyncio.run(drain(stream))
    runs["astream"] = stream.result
    for name, result in runs.items():
        assert [s.executed for s in result.steps] == [Click("B"), Click("C")], name
        assert result.steps[1].team_step.vote.passed_over == "click('B')", name


def _by_source(request):
    """Agents 1 and 2 (the DAG's sources below) click C; agents 0 and 3 (who read them) click B."""
    element = "C" if request.adapter in ("a1", "a2") else "B"
    return f'Action: {{"action": "click", "element_id": "{element}"}}'


@pytest.mark.parametrize("tie_break", ["lowest-id", "independent"])
def test_tie_break_independent_sides_with_the_sources(tmp_path, tie_break):
    # A 6-6 tie, even in every round: only the tie rule decides between the sink's B and the sources' C.
    team = CollabAgentTeam(ScriptedChatModel(_by_source), n_agents=N, rounds=M, topology="edges:1-0,2-0,1-3,2-3",
                           adapters=tuple(f"a{i}" for i in range(N)), tie_break=tie_break)
    assert [i for i in range(N) if not team.topology.predecessors(i)] == [1, 2]
    step = team.step("Click Submit.", OBS)
    if tie_break == "lowest-id":
        assert step.action == Click("B") and step.vote.tie_break == "latest round, lowest agent id"
    else:
        assert step.action == Click("C") and step.vote.tie_break == "independent count"
    assert step.vote.votes == 6


def test_unknown_tie_break_is_refused_with_the_choices():
    with pytest.raises(ConfigError, match="tie_break 'coin'.*lowest-id"):
        CollabAgentTeam(ScriptedChatModel(_by_source), n_agents=N, rounds=M, tie_break="coin")
