"""team.stream / team.astream: typed events while the episode runs, the same trace as team.run.

Scripted models where the exact content matters; the real graph with the real baseline models
(lexical, random:1) on real MiniWoB++ pages in headless Chromium for the rest.
"""

from __future__ import annotations

import asyncio
import io
import re
from typing import Any

import pytest

from collabui import CollabAgentTeam, make_env
from collabui.actions.web import Click
from collabui.devices.base import Observation
from collabui.devices.fake import FakeDevice
from collabui.errors import CollabUIError, DeviceClosedError
from collabui.events import EVENT_KINDS, ActionExecuted, EpisodeEnded, ProposalMade, VoteDecided
from collabui.models.fake import ScriptedChatModel
from collabui.models.spec import load_model
from collabui.trace import read_trace

TEMPS = (0.0, 0.25, 0.5, 0.75)
#: Agents 0 and 1 click A, the others B: A wins every step of a 3- or 4-agent team.
TARGET = ("A", "A", "B", "B")


def _answer(request: Any) -> str:
    agent = TEMPS.index(request.temperature)
    return f'Thought: agent {agent} picks {TARGET[agent]}\nAction: {{"action": "click", "element_id": "{TARGET[agent]}"}}'


def _team(model: Any = None, **overrides: Any) -> CollabAgentTeam:
    options: dict[str, Any] = {"n_agents": 3, "rounds": 2, "topology": "chain", "max_steps": 2}
    options.update(overrides)
    options.setdefault("temperatures", TEMPS[: options["n_agents"]])
    return CollabAgentTeam(model or ScriptedChatModel(_answer), **options)


def _device(steps: int = 3) -> FakeDevice:
    return FakeDevice([Observation(text="<button[A]| Yes> <button[B]| No>", task="Click Yes.")] * steps)


def _check_events(events: list[Any], team: CollabAgentTeam) -> None:
    """The contract of collabui.events on one episode's events."""
    n, m = team.config.n_agents, team.config.rounds
    kinds = [e.kind for e in events]
    assert kinds[0] == "episode_start" and kinds[-1] == "episode_end" and kinds.count("episode_end") == 1
    assert set(kinds) <= set(EVENT_KINDS)
    steps = events[-1].steps
    assert kinds.count("step_start") == kinds.count("vote") == kinds.count("executed") == kinds.count("step_end") == steps
    for t in range(steps):
        of_step = [e for e in events if getattr(e, "t", None) == t]
        assert [e.kind for e in of_step] == ["step_start"] + ["proposal"] * (n * m) + ["vote", "executed", "step_end"]
        seen: set[tuple[int, int]] = set()
        supersteps = []
        for e in of_step[1 : 1 + n * m]:
            # Each proposal comes after everything it read: its DAG predecessors' of that round
            # and its own previous round (a topological order of the step graph).
            read = {(k, e.round) for k in team.topology.predecessors(e.agent)} | ({(e.agent, e.round - 1)} if e.round else set())
            assert read <= seen, (e.agent, e.round, read - seen)
            seen.add((e.agent, e.round))
            supersteps.append(e.superstep)
        assert seen == {(i, j) for i in range(n) for j in range(m)}
        assert supersteps == sorted(supersteps)
        vote, executed = of_step[-3], of_step[-2]
        assert vote.total == n * m and vote.action == executed.action


def _normalized(path: Any) -> list[dict[str, Any]]:
    """A trace without what differs between two runs of the same episode (clocks and ids)."""
    trace = read_trace(path)
    records = [dict(trace.header), *(dict(s) for s in trace.steps), dict(trace.end)]
    for record in records:
        for key in ("created", "episode_id", "timings", "duration_s"):
            record.pop(key, None)
        record.get("info", {}).pop("time_scaled_reward", None)  # MiniWoB++ scales it by the clock
        for row in record.get("proposals", []):
            for p in row:
                p.pop("latency_s")
    return records


# ------------------------------------------------------------------ scripted: exact content


def test_events_carry_each_proposal_the_vote_and_the_step(tmp_path):
    team = _team()
    with team.stream(None, _device(), trace=tmp_path, episode_id="s") as stream:
        events = list(stream)
    _check_events(events, team)
    start = events[0]
    assert (start.task, start.n_agents, start.rounds, start.supersteps, start.max_steps) == ("Click Yes.", 3, 2, 4, 2)
    assert start.trace_path == str(tmp_path / "s.jsonl")
    proposals = [e for e in events if isinstance(e, ProposalMade) and e.t == 0]
    # chain 0 -> 1 -> 2, 2 rounds: node (i, j) runs in superstep i + j
    assert [(e.agent, e.round, e.superstep) for e in proposals][0] == (0, 0, 0)
    assert {(e.agent, e.round): e.superstep for e in proposals} == {(i, j): i + j for i in range(3) for j in range(2)}
    for e in proposals:
        assert e.thought == f"agent {e.agent} picks {TARGET[e.agent]}"
        assert e.action == Click(TARGET[e.agent]) and e.parse_error is None
        assert e.proposal.raw == _answer(e.proposal)  # the proposal's temperature names its agent
    vote = next(e for e in events if isinstance(e, VoteDecided))
    assert (vote.action, vote.votes, vote.total, vote.tally) == (Click("A"), 4, 6, (("click('A')", 4), ("click('B')", 2)))
    executed = next(e for e in events if isinstance(e, ActionExecuted))
    assert (executed.t, executed.action, executed.call, executed.done, executed.error) == (0, Click("A"), "click('A')", False, None)
    end = events[-1]
    assert isinstance(end, EpisodeEnded) and end.steps == 2 and end.result is stream.result
    assert end.result.executed_actions == [Click("A"), Click("A")]
    assert read_trace(tmp_path / "s.jsonl").complete


def test_events_come_while_the_step_runs():
    """The first proposal is an event before later supersteps call the model, and every step's
    proposals before the device acts."""
    model = ScriptedChatModel(_answer)
    device = _device()
    team = _team(model, n_agents=3, rounds=2)
    seen = []
    for event in team.stream(None, device):
        if isinstance(event, ProposalMade):
            seen.append((len(model.requests), len(device.actions), event.t))
    first_calls, first_acts, _ = seen[0]
    assert first_calls < 6 and first_acts == 0
    assert all(acts == t for _, acts, t in seen)


def test_dag_topology_streams_in_topological_order():
    team = _team(n_agents=4, rounds=3, topology="random", seed=3)
    assert team.supersteps > 3  # a real DAG, not independent agents
    _check_events(list(team.stream(None, _device())), team)


def test_streamed_trace_equals_run_trace(tmp_path):
    _team().run(None, _device(), seed=5, trace=tmp_path, episode_id="run", env_name="fake")
    with _team().stream(None, _device(), seed=5, trace=tmp_path, episode_id="stream", env_name="fake") as events:
        list(events)
    asyncio.run(_drain(_team().astream(None, _device(), seed=5, trace=tmp_path, episode_id="astream", env_name="fake")))
    run = _normalized(tmp_path / "run.jsonl")
    assert run == _normalized(tmp_path / "stream.jsonl") == _normalized(tmp_path / "astream.jsonl")
    assert len(run) == 4  # header, 2 steps, end


async def _drain(stream: Any) -> list[Any]:
    async with stream as events:
        return [e async for e in events]


def test_async_stream_gives_the_same_events():
    team = _team()
    sync_events = list(team.stream(None, _device()))
    async_events = asyncio.run(_drain(team.astream(None, _device())))
    _check_events(async_events, team)
    assert [e.kind for e in async_events] == [e.kind for e in sync_events]
    strip = [(e.t, e.agent, e.round, e.action) for e in async_events if isinstance(e, ProposalMade)]
    assert sorted(strip) == sorted((e.t, e.agent, e.round, e.action) for e in sync_events if isinstance(e, ProposalMade))


def test_breaking_out_ends_the_episode_and_frees_the_device(tmp_path):
    team, device = _team(max_steps=3), _device(6)
    for event in team.stream(None, device, trace=tmp_path, episode_id="broken"):
        if isinstance(event, ProposalMade) and event.t == 1:
            break  # mid-step: the stream is dropped here and closed at once
    trace = read_trace(tmp_path / "broken.jsonl")
    assert trace.complete and [s["t"] for s in trace.steps] == [0]
    assert trace.end["error"] == "EpisodeStopped: the caller stopped the stream after 1 step(s)"
    with team.stream(None, device, trace=tmp_path, episode_id="again") as stream:
        for event in stream:
            if event.kind == "executed":
                break  # leaving the block closes it too
    assert stream.result is None
    assert read_trace(tmp_path / "again.jsonl").complete
    result = team.run(None, device, trace=tmp_path, episode_id="after")  # the device is reusable
    assert result.n_steps == 3 and result.error is None


def test_async_break_ends_the_episode(tmp_path):
    team, device = _team(), _device()

    async def stop_at_vote() -> None:
        async with team.astream(None, device, trace=tmp_path, episode_id="abroken") as events:
            async for event in events:
                if event.kind == "vote":
                    break
        result = await team.arun(None, device)
        assert result.n_steps == 2

    asyncio.run(stop_at_vote())
    trace = read_trace(tmp_path / "abroken.jsonl")
    assert trace.complete and not trace.steps and "EpisodeStopped" in trace.end["error"]


class _DiesOnSecondAction(FakeDevice):
    def act(self, action):
        if self.actions:
            raise DeviceClosedError("the browser died")
        return super().act(action)


def test_device_and_model_failures(tmp_path):
    events = list(_team().stream(None, _DiesOnSecondAction([Observation(text="<button[A]| Yes>", task="Go.")] * 3)))
    executed = [e for e in events if isinstance(e, ActionExecuted)]
    assert executed[-1].error.startswith("DeviceClosedError") and events[-1].error == executed[-1].error
    broken = ScriptedChatModel(['Action: {"action": "click", "element_id": "A"}'] * 7)  # 6 per step
    with pytest.raises(Exception, match="ran out of answers"):
        list(_team(broken).stream(None, _device(), trace=tmp_path, episode_id="model"))
    assert "ran out of answers" in read_trace(tmp_path / "model.jsonl").end["error"]


def test_live_view_renders_from_events():
    from rich.console import Console

    from collabui.cli.view import LiveView

    team = _team()
    for terminal in (False, True):
        file = io.StringIO()
        view = LiveView(console=Console(file=file, force_terminal=terminal, width=120, highlight=False))
        for event in team.stream(None, _device()):
            view.handle(event)
        out = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", file.getvalue())
        assert "task: Click Yes." in out and "2-round action matrix" in out and "vote: click('A') 4/6" in out
        assert out.count("step 1: 2-round action matrix") >= 1
        # On a terminal the matrix is drawn as proposals land: cells still pending show "…".
        assert ("…" in out) == terminal


# ------------------------------------------------------------------ real baselines on MiniWoB++


@pytest.mark.browser
@pytest.mark.parametrize("spec", ["lexical", "random:1"])
def test_real_baselines_stream_on_miniwob(spec, tmp_path):
    def team() -> CollabAgentTeam:
        return CollabAgentTeam(load_model(spec), n_agents=2, rounds=2, topology="chain", max_steps=3, seed=0)

    with make_env("miniwob/click-button") as env:
        team().run(None, env, seed=4, trace=tmp_path, episode_id="run", env_name="miniwob/click-button")
        streamed = team()
        with streamed.stream(None, env, seed=4, trace=tmp_path, episode_id="stream", env_name="miniwob/click-button") as s:
            events = list(s)
        _check_events(events, streamed)
        assert events[0].task.startswith("Click on the")
        assert _normalized(tmp_path / "run.jsonl") == _normalized(tmp_path / "stream.jsonl")
        async_team = team()
        async_events = asyncio.run(_drain(async_team.astream(None, env, seed=4, trace=tmp_path, episode_id="astream",
                                                             env_name="miniwob/click-button")))
        _check_events(async_events, async_team)
        assert _normalized(tmp_path / "astream.jsonl") == _normalized(tmp_path / "run.jsonl")
        for event in team().stream(None, env, seed=5, trace=tmp_path, episode_id="broken"):
            if event.kind == "proposal":
                break
        assert "EpisodeStopped" in read_trace(tmp_path / "broken.jsonl").end["error"]
        again = team().run(None, env, seed=6)  # the browser is fine after the early stop
        assert again.n_steps >= 1 and again.error is None


def test_an_async_step_whose_graph_stops_before_the_vote_fails_by_name(tmp_path, monkeypatch):
    """A graph stream that ends early (a stop signal a library swallowed) ends the episode with
    that error, not with a None step executed later ('NoneType' has no attribute 'action')."""
    team = _team()

    async def cut_off(*args: Any, **kwargs: Any):  # the step's stream ends before any vote
        return
        yield

    monkeypatch.setattr(team, "_astep_events", cut_off)
    with pytest.raises(CollabUIError, match="ended before its vote"):
        asyncio.run(_drain(team.astream(None, _device(), trace=tmp_path, episode_id="cut")))
    assert "ended before its vote" in read_trace(tmp_path / "cut.jsonl").end["error"]


def test_a_team_that_stops_when_decided_streams_only_the_entries_it_ran():
    unanimous = ScriptedChatModel(lambda r: 'Action: {"action": "click", "element_id": "A"}')
    team = _team(unanimous, n_agents=4, rounds=3, topology="independent", stop_when_decided=True, max_steps=1)
    events = list(team.stream("Click Yes.", _device(1)))
    made = [e for e in events if isinstance(e, ProposalMade)]
    vote = next(e for e in events if isinstance(e, VoteDecided))
    # two rounds of four agree: the third round is skipped, never asked, never reported
    assert sorted((e.agent, e.round) for e in made) == [(i, j) for i in range(4) for j in range(2)]
    assert (vote.votes, vote.total, vote.team_step.skipped) == (8, 8, 4) and len(unanimous.requests) == 8
