"""Streamed episodes: ``team.stream`` / ``team.astream`` yield ``collabui.events`` as it runs.

The episode is the very loop ``team.run`` drives (``collabui.episode``): same reset, same steps,
same trace. Only the team step differs: it goes through the compiled graph's own streaming
(``graph.stream(..., stream_mode="updates")``), so each agent's proposal is an event the moment
its node finishes, not after the vote.

Example:
    >>> from collabui import CollabAgentTeam
    >>> from collabui.devices.fake import FakeDevice
    >>> from collabui.devices.base import Observation
    >>> from collabui.models.fake import ScriptedChatModel
    >>> team = CollabAgentTeam(ScriptedChatModel(lambda r: 'Action: {"action": "click", "element_id": "B"}'),
    ...                        n_agents=2, rounds=2, topology="chain", max_steps=1)
    >>> device = FakeDevice([Observation(text="<button[B]| OK>", task="Click OK.")])
    >>> with team.stream(None, device) as events:
    ...     print([e.kind for e in events])
    ['episode_start', 'step_start', 'proposal', 'proposal', 'proposal', 'proposal', 'vote', 'executed', 'step_end', 'episode_end']
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Generator, Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from collabui.approval import ApprovalPolicy
from collabui.devices.base import Device
from collabui.episode import EpisodeResult, StepRecord, _calls, _Driver, _Run
from collabui.errors import CollabUIError
from collabui.events import (
    ActionExecuted,
    EpisodeEnded,
    EpisodeStarted,
    Event,
    StepEnded,
    StepStarted,
    VoteDecided,
)
from collabui.team import CUT_OFF, TeamStep
from collabui.trace import TraceStore

if TYPE_CHECKING:  # pragma: no cover
    from collabui.durable import EpisodeStore

__all__ = ["AsyncEpisodeStream", "EpisodeStopped", "EpisodeStream"]


class EpisodeStopped(Exception):
    """Thrown into the episode loop when the caller stops a stream early: the loop records it
    as the trace's end (``EpisodeStopped: ...``) and closes the trace; never raised to users."""


class _Episode:
    """The parts shared by the sync and async streams: the run, its driver, the step records
    the loop finished (collected through its ``on_step`` hook) and the events made from them."""

    def __init__(self, team: Any, task: str | None, device: Device, *, seed: int | None = None,
                 max_steps: int | None = None, trace: TraceStore | str | Path | None = None,
                 episode_id: str | None = None, env_name: str | None = None,
                 on_step: Callable[[StepRecord], None] | None = None,
                 secrets: Mapping[str, str] | None = None, approve: ApprovalPolicy | None = None,
                 checkpoint: EpisodeStore | str | Path | None = None, resume: str | None = None,
                 asynchronous: bool) -> None:
        self.team, self.user_on_step = team, on_step
        self.finished: list[tuple[StepRecord, str]] = []
        self.run = _Run(team, task, device, seed=seed, max_steps=max_steps, trace=trace,
                        episode_id=episode_id, env_name=env_name, on_step=self._collect,
                        secrets=secrets, approve=approve, checkpoint=checkpoint, resume=resume,
                        asynchronous=asynchronous)
        self.calls = _calls(team, device, asynchronous=asynchronous, run=self.run)
        self.driver = _Driver(self.run, self.run.seed, self.calls)  # writes the header
        self.started = False

    def _collect(self, record: StepRecord) -> None:
        # The history entry the loop just appended is the executed action as recorded (masked).
        self.finished.append((record, self.run.history[-1] if self.run.history else record.executed.to_call()))
        if self.user_on_step is not None:
            self.user_on_step(record)

    def start_event(self) -> EpisodeStarted | None:
        """EpisodeStarted before the first step (once the reset told the task), else None."""
        if self.started:
            return None
        self.started = True
        run, cfg = self.run, self.team.config
        return EpisodeStarted(episode_id=run.episode_id, task=run.shown_task, env=run.env_name, seed=run.seed,
                              n_agents=cfg.n_agents, rounds=cfg.rounds, supersteps=self.team.supersteps,
                              max_steps=run.max_steps, trace_path=run.recorder.location if run.recorder else None)

    def step_end_events(self) -> list[ActionExecuted | StepEnded]:
        events: list[ActionExecuted | StepEnded] = []
        for record, call in self.finished:
            events.append(ActionExecuted(t=record.t, action=record.executed, call=call, reward=record.reward,
                                         done=record.done, error=record.error))
            events.append(StepEnded(t=record.t, seconds=sum(record.timings.values()), record=record))
        self.finished.clear()
        return events

    def end_event(self) -> EpisodeEnded:
        result = self.driver.result
        if result is None:  # the loop always returns a result when it is done
            raise RuntimeError("the episode loop ended without a result")
        return EpisodeEnded(success=result.success, reward=result.reward, steps=result.n_steps,
                            error=result.error, trace_path=result.trace_path, result=result)

    def stop(self) -> None:
        """End an unfinished episode now: the trace records where the caller stopped."""
        if self.driver.done:
            return
        where = f"after {len(self.run.result.steps) if self.run.result else 0} step(s)"
        with contextlib.suppress(EpisodeStopped):  # the loop re-raises it once recorded
            self.driver.throw(EpisodeStopped(f"the caller stopped the stream {where}"))


def _events(episode: _Episode) -> Generator[Event, None, None]:
    driver = episode.driver
    try:
        while not driver.done:
            kind, arg = driver.request
            if kind == "step":
                task, obs, history, t, stale = arg
                first = episode.start_event()
                if first is not None:
                    yield first
                yield StepStarted(t=t, observation=obs)
                try:
                    step = yield from episode.run.step_events(task, obs, history, t, stale)
                except GeneratorExit:
                    raise
                except BaseException as exc:  # handed to the loop, which records and decides
                    driver.throw(exc)
                else:
                    driver.send(step)
            else:
                try:
                    value = episode.calls[kind](arg)
                except BaseException as exc:
                    driver.throw(exc)
                else:
                    driver.send(value)
            yield from episode.step_end_events()
    except GeneratorExit:
        episode.stop()
        raise
    yield episode.end_event()


async def _aevents(episode: _Episode) -> AsyncGenerator[Event, None]:
    driver = episode.driver
    try:
        while not driver.done:
            kind, arg = driver.request
            if kind == "step":
                task, obs, history, t, stale = arg
                first = episode.start_event()
                if first is not None:
                    yield first
                yield StepStarted(t=t, observation=obs)
                step = None
                events = episode.run.astep_events(task, obs, history, t, stale)
                try:
                    async for event in events:
                        if isinstance(event, TeamStep):  # a session's last item: the step itself
                            step = event
                            continue
                        if isinstance(event, VoteDecided):
                            step = event.team_step
                        yield event
                except GeneratorExit:
                    raise
                except BaseException as exc:
                    driver.throw(exc)
                else:
                    if step is None:
                        driver.throw(CollabUIError(CUT_OFF))
                    else:
                        driver.send(step)
                finally:  # an early stop cancels the step's pending model calls now
                    await events.aclose()
            else:
                try:
                    value = await episode.calls[kind](arg)
                except BaseException as exc:
                    driver.throw(exc)
                else:
                    driver.send(value)
            for event in episode.step_end_events():
                yield event
    except GeneratorExit:
        episode.stop()
        raise
    yield episode.end_event()


class EpisodeStream(Iterator[Event]):
    """The events of one episode (``team.stream``). The episode starts on the first ``next``;
    ``result`` is the EpisodeResult once the stream is exhausted. Leaving a ``with`` block,
    ``close()``, or dropping the stream before its end stops the episode: the trace ends with
    ``EpisodeStopped`` as its error and the device is free for the next episode.

    The episode waits while the caller handles an event, so that time counts in the step's
    ``team_s`` timing; hand slow work to another thread."""

    def __init__(self, team: Any, task: str | None, device: Device, **kwargs: Any) -> None:
        self._kwargs = (team, task, device, kwargs)
        self._gen: Generator[Event, None, None] | None = None
        self._episode: _Episode | None = None

    def _generator(self) -> Generator[Event, None, None]:
        if self._gen is None:
            team, task, device, kwargs = self._kwargs
            self._episode = _Episode(team, task, device, asynchronous=False, **kwargs)
            self._gen = _events(self._episode)
        return self._gen

    def __iter__(self) -> EpisodeStream:
        return self

    def __next__(self) -> Event:
        event = next(self._generator())
        # Masked before anyone sees it: a proposal typing a password is hidden as it lands.
        return self._episode.run.redactor.event(event) if self._episode else event

    def close(self) -> None:
        """Stop the episode if it is still running (safe to call twice)."""
        if self._gen is not None:
            self._gen.close()

    def __enter__(self) -> EpisodeStream:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    @property
    def result(self) -> EpisodeResult | None:
        """The episode's result once it has ended (None before, and after an early stop)."""
        episode = self._episode
        return episode.driver.result if episode is not None and episode.driver.done else None


class AsyncEpisodeStream(AsyncIterator[Event]):
    """Async twin of :class:`EpisodeStream` (``team.astream``). Stop it early with ``async with``
    or ``await stream.aclose()``: an async generator left unfinished is only closed whenever the
    event loop gets to it."""

    def __init__(self, team: Any, task: str | None, device: Device, **kwargs: Any) -> None:
        self._kwargs = (team, task, device, kwargs)
        self._gen: AsyncGenerator[Event, None] | None = None
        self._episode: _Episode | None = None

    def _generator(self) -> AsyncGenerator[Event, None]:
        if self._gen is None:
            team, task, device, kwargs = self._kwargs
            self._episode = _Episode(team, task, device, asynchronous=True, **kwargs)
            self._gen = _aevents(self._episode)
        return self._gen

    def __aiter__(self) -> AsyncEpisodeStream:
        return self

    async def __anext__(self) -> Event:
        event = await self._generator().__anext__()
        return self._episode.run.redactor.event(event) if self._episode else event

    async def aclose(self) -> None:
        """Stop the episode if it is still running (safe to call twice)."""
        if self._gen is not None:
            await self._gen.aclose()

    async def __aenter__(self) -> AsyncEpisodeStream:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.aclose()

    @property
    def result(self) -> EpisodeResult | None:
        """The episode's result once it has ended (None before, and after an early stop)."""
        episode = self._episode
        return episode.driver.result if episode is not None and episode.driver.done else None
