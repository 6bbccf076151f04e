"""Running a team on a device for one episode, with the trace written step by step."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import re
import time
import uuid
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from collabui.actions import Action
from collabui.approval import ApprovalPending, ApprovalPolicy
from collabui.devices import simplify
from collabui.devices.base import Device, Observation, StepOutcome
from collabui.errors import CollabUIError, ConfigError, DeviceError
from collabui.prompts import history_entry
from collabui.redaction import Redactor, redact_url
from collabui.trace import SCHEMA_NAME, SCHEMA_VERSION, EpisodeRecorder, JsonlTraceStore, TraceStore

if TYPE_CHECKING:  # pragma: no cover
    from collabui.durable import EpisodeStore

__all__ = ["StepRecord", "EpisodeResult", "run_episode", "arun_episode"]


@dataclass(frozen=True)
class StepRecord:
    """One environment step of an episode."""

    t: int
    observation: Observation
    team_step: Any  # collabui.team.TeamStep
    executed: Action
    reward: float
    done: bool
    error: str | None
    timings: dict[str, float]

    @property
    def vote(self):
        return self.team_step.vote

    @property
    def matrix(self) -> list[list[Action]]:
        return self.team_step.action_matrix()


@dataclass
class EpisodeResult:
    """What ``team.run`` returns."""

    task: str
    reward: float = 0.0
    success: bool = False
    steps: list[StepRecord] = field(default_factory=list)
    error: str | None = None
    trace_path: str | None = None
    duration_s: float = 0.0
    #: True when the environment ended the episode or a terminal action ran; False when it
    #: stopped at max_steps or on an error.
    ended: bool = False
    #: The approval request the episode stopped at (the policy left it pending), if any.
    pending_approval: dict[str, Any] | None = None
    #: Steps a resumed episode had finished before this run (in the trace, not in ``steps``).
    resumed_steps: int = 0

    @property
    def n_steps(self) -> int:
        """Steps of the whole episode, those before a resume included."""
        return self.resumed_steps + len(self.steps)

    @property
    def executed_actions(self) -> list[Action]:
        return [s.executed for s in self.steps]

    @property
    def matrices(self) -> list[list[list[Action]]]:
        return [s.matrix for s in self.steps]

    @property
    def votes(self) -> list[Any]:
        return [s.vote for s in self.steps]

    def timings(self) -> dict[str, float]:
        """Total seconds spent in the team, the device and overall."""
        team = sum(s.timings.get("team_s", 0.0) for s in self.steps)
        device = sum(s.timings.get("act_s", 0.0) for s in self.steps)
        return {"team_s": team, "device_s": device, "total_s": self.duration_s}


class _Run:
    """State shared by the sync and async episode loops."""

    def __init__(self, team, task, device: Device, *, seed, max_steps, trace, episode_id, env_name, on_step,
                 secrets: Mapping[str, str] | None = None, approve: ApprovalPolicy | None = None,
                 checkpoint: EpisodeStore | str | Path | None = None, resume: str | None = None,
                 asynchronous: bool = False) -> None:
        space = getattr(device, "action_space", None)
        if space is not None and space.name != team.space.name:
            raise ConfigError(
                f"the team proposes {team.space.name} actions but the device takes {space.name} "
                f"actions; build the team with action_space={space.name!r}"
            )
        from collabui.durable import open_session

        episode_id = resume or episode_id or _episode_id(env_name)
        #: Approval gate and checkpoints (collabui.durable); None runs the plain step graph.
        self.session, saved = open_session(team, device, approve=approve, checkpoint=checkpoint, resume=resume,
                                           episode_id=episode_id, asynchronous=asynchronous)
        if saved:  # a resumed episode runs as it was started
            task, seed, max_steps, env_name = saved["task"], saved["seed"], saved["max_steps"], saved["env"]
        self.team, self.device, self.seed, self.env_name, self.on_step = team, device, seed, env_name, on_step
        #: Secrets and passwords never reach the agents, the trace or the caller (see redaction).
        self.redactor = Redactor(secrets)
        self.task = self.redactor.text(task) if task else task
        #: The action the device was last asked to run (secret placeholders filled in).
        self._sent: Action | None = None
        self.max_steps = max_steps or team.config.max_steps
        self.episode_id = episode_id
        self.history: list[str] = []
        self.started = time.perf_counter()
        self.result: EpisodeResult | None = None
        self.header: dict[str, Any] | None = None  # as written to the trace
        #: The task came from the environment (not the caller): passwords typed are masked in it.
        self._env_task = False
        #: What the device was last told to hide in screenshots (``Redactor.screen``).
        self._screen: tuple[tuple[str, ...], tuple[str, ...]] | None = None
        self.recorder: EpisodeRecorder | None
        if self.session is not None and self.session.header is not None:
            self.recorder, self.header = self.session.recorder, self.session.header
            self.history = self.session.history
        else:
            store = JsonlTraceStore(trace) if isinstance(trace, (str, Path)) else trace
            self.recorder = store.start(self.episode_id) if store is not None else None
            if self.session is not None and saved:  # resumed without a trace file
                self.history = self.session.history
        self._save_spec("running")

    def _save_spec(self, status: str) -> None:
        """What a resume needs to run the episode as it was started (checkpointed runs)."""
        if self.session is not None:
            from collabui.durable import _team_spec

            self.session.save(self.episode_id, {
                "task": self.task, "seed": self.seed, "max_steps": self.max_steps, "env": self.env_name,
                "trace": self.recorder.location if self.recorder else None, "team": _team_spec(self.team)},
                status)

    def step_events(self, task: str, obs: Observation, history: list[str], t: int, stale: str | None = None):
        """The team step as events (``team._step_events``), through the session when there is one."""
        if self.session is not None:
            return self.session.runner.step_events(task, obs, history, t, stale)
        return self.team._step_events(task, obs, history, t=t, stale=stale)

    def astep_events(self, task: str, obs: Observation, history: list[str], t: int, stale: str | None = None):
        """Async twin of ``step_events``; its last item is the TeamStep."""
        if self.session is not None:
            return self.session.runner.astep_events(task, obs, history, t, stale)
        return self.team._astep_events(task, obs, history, t=t, stale=stale)

    def open(self) -> None:
        """Write the header before the environment reset: a reset can hang or take the process
        down (a browser starting), and a trace must never be left empty. Only the task may be
        unknown yet (when the environment sets it); it is written as "" (still a valid header),
        and ``begin`` writes the header again with it, which replaces this one. A resumed
        episode keeps the header its trace has."""
        if self.header is None:
            self._write_header(self.task or "")

    def begin(self, obs: Observation) -> None:
        task = self.task or obs.task
        if not task:
            raise ConfigError("no task: pass task= (or --task) or use an environment that defines one")
        self._env_task = not self.task
        if self._env_task:  # a password it names is masked from the first record on
            self.redactor.learn_task(task)
        self.task = task
        self.result = EpisodeResult(task=task, trace_path=self.recorder.location if self.recorder else None)
        resumed = self.session is not None and self.session.header is not None
        if self.header is None or (self.header["task"] != task and not resumed):  # a resumed trace keeps its own
            self._write_header(task)
        if self.session is not None:
            self.result.resumed_steps = self.session.first_t
            self._save_spec("running")

    def _write_header(self, task: str) -> None:
        created = self.header["created"] if self.header else _now()
        header = {
            "type": "episode",
            "schema": SCHEMA_NAME,
            "version": SCHEMA_VERSION,
            "episode_id": self.episode_id,
            "created": created,
            "env": self.env_name,
            "task": task,
            "seed": self.seed,
            "model": redact_url(",".join(sorted({m.name for m in self.team.models}))),
            "action_space": self.team.space.name,
            "team": self.team.config.trace_dict(),
            "topology": self.team.topology.to_dict(),
        }
        describe = getattr(self.device, "describe", None)
        if callable(describe):
            # How the device showed the page (format, shuffle): a replay must show it the same way.
            header["device"] = dict(describe())
        self._write(header)
        self.header = self.redactor.data(header)  # as written; once written, end() knows there is one

    @property
    def shown_task(self) -> str:
        """The task as recorded and printed: an environment's own with its passwords masked."""
        task = self.task or ""
        return self.redactor.text(task) if self._env_task else task

    def _tell_screen(self) -> bool:
        """Tell the device what its screenshots must hide (the episode's secrets and the
        passwords known so far); True when that changed since it was last told."""
        screen = self.redactor.screen()
        if screen == self._screen:
            return False
        self._screen = screen
        hide = getattr(self.device, "hide_on_screen", None)
        if callable(hide):
            hide(screen[0], words=screen[1])
        return True

    def _hide(self, obs: Observation) -> Generator[tuple[str, Any], Any, Observation]:
        """``obs`` with a screenshot that hides every value known now: one taken before a
        password became known (named by the task, typed by a proposal) is taken again, before
        any action changed the page (None when the device could not hide it)."""
        if not self._tell_screen() or obs.screenshot is None:
            return obs
        return dataclasses.replace(obs, screenshot=(yield ("screenshot", None)))

    def _mask_step(self, obs: Observation, step, outcome: StepOutcome | None):
        """The step as it may be recorded and shown: text typed into password fields (those the
        observation lists, or the device reports in ``masked_action``) becomes ``***`` and
        secret values their placeholders, in every proposal, the vote and the observation."""
        redactor = self.redactor
        redactor.watch(obs)
        redactor.learn_step(step)
        if outcome is not None and outcome.info.get("masked_action") and self._sent is not None:
            typed = getattr(self._sent, "content", None) or getattr(self._sent, "text", None)
            redactor.add_password(typed or "")
        self._mask_header()
        return redactor.observation(obs), redactor.team_step(step)

    def _typed_task_password(self, step) -> dict[str, Any] | None:
        """Which masked entries typed exactly the password the environment's task names: a
        replay (the verified critic) can type that one again from the live task; any other
        masked text it cannot. One bit per entry, never the text."""
        if not self._env_task:
            return None
        says = self.redactor.types_task_password
        entries = [[i, j] for i, row in enumerate(step.proposals) for j, p in enumerate(row) if says(p.action)]
        executed = says(step.action)
        return {"executed": executed, "proposals": entries} if executed or entries else None

    def _mask_header(self) -> None:
        """A password just typed that the environment's task holds (MiniWoB++ enter-password
        names it) is masked in the header written before, as in every later record; a task the
        caller gave stays as given."""
        if not self._env_task or self.header is None or self.recorder is None:
            return
        masked = self.redactor.data(self.header)
        if masked != self.header:
            self.recorder.replace_header(masked)
            self.header = masked

    def record(self, t: int, obs: Observation, step, outcome: StepOutcome | None, error: str | None, timings) -> StepRecord:
        typed = self._typed_task_password(step)  # before masking: afterwards "***" is all there is
        obs, step = self._mask_step(obs, step, outcome)
        executed = step.action
        executed_dict = executed.to_dict()
        error = self.redactor.text(error) if error else error
        reward = outcome.reward if outcome else 0.0
        done = bool(outcome.done) if outcome else True
        rec = StepRecord(t, obs, step, executed, reward, done, error, timings)
        shot = None
        if obs.screenshot is not None and self.recorder is not None:
            shot = self.recorder.add_screenshot(t, obs.screenshot)
        entry = history_entry(executed, obs, note=_not_done(step, outcome))
        self._write({
            "type": "step",
            "t": t,
            "observation": obs.to_dict(),
            "rendered_observation": step.rendered_observation,
            "screenshot": shot,
            "history": list(self.history),
            "topology": self.team.topology.to_dict(),
            "proposals": [[p.to_record() for p in row] for row in step.proposals],
            "vote": step.vote.to_dict(),
            "executed": executed_dict,
            "reward": reward,
            "done": done,
            "error": error,
            "info": self.redactor.data(dict(outcome.info)) if outcome else {},
            "timings": {k: round(v, 4) for k, v in timings.items()},
            "history_entry": entry,
            **({"task_password": typed} if typed else {}),
        })
        if self.result is None:  # begin() always runs first; keep the record anyway
            self.result = EpisodeResult(task=self.task or '')
        self.result.steps.append(rec)
        self.history.append(entry)
        if self.session is not None:  # after the trace line: a resume trusts the checkpoint file
            self.session.after_step(self.episode_id, t, self.history[-1])
        if outcome is not None and (outcome.done or executed.terminal):
            self.result.reward = outcome.reward
            self.result.ended = True
        if self.on_step is not None:
            self.on_step(rec)
        return rec

    def end(self, error: str | None) -> EpisodeResult:
        trace_path = self.recorder.location if self.recorder and self.header else None
        result = self.result or EpisodeResult(task=self.task or "", trace_path=trace_path)
        if self._env_task:
            result.task = self.redactor.text(result.task)
        result.error = result.error or (redact_url(self.redactor.text(error)) if error else error)
        result.success = result.reward > 0
        result.duration_s = time.perf_counter() - self.started
        if self.session is not None:
            finished = result.ended or (error is None and result.n_steps >= self.max_steps)
            self.session.finish(self.episode_id, "finished" if finished else "stopped")
        if self.recorder is not None:
            if self.header is not None:  # also after a failed reset: the trace says why it ended
                self._write({
                    "type": "end",
                    "reward": result.reward,
                    "success": result.success,
                    "steps": result.n_steps,
                    "error": result.error,
                    "duration_s": round(result.duration_s, 3),
                })
            self.recorder.close()
        return result

    def _write(self, record: dict[str, Any]) -> None:
        if self.recorder is not None:
            self.recorder.write(self.redactor.data(record))  # the last check before disk

    def loop(self, seed: int | None) -> Generator[tuple[str, Any], Any, EpisodeResult]:
        """The episode as a generator of device/team requests, so that the sync and the async
        drivers share one loop: it yields ``("reset", seed)``, ``("step", args)``,
        ``("act", action)`` and ``("screenshot", None)`` and receives their results (or their
        exceptions, thrown in)."""
        error: str | None = None
        try:
            self.open()
            self._tell_screen()
            obs = self.redactor.observation((yield ("reset", seed)))
            self.begin(obs)
            obs = self.redactor.observation(obs)  # a password the task names is known now
            # stale: the last action, when it left the page as it was (TeamConfig.skip_stale)
            obs, stale = yield from self._replay(obs)
            obs = yield from self._hide(obs)
            for t in range(self.session.first_t if self.session else 0, self.max_steps):
                t0 = time.perf_counter()
                step = yield ("step", (self.task, obs, self.history, t, stale))
                t1 = time.perf_counter()
                self.redactor.watch(obs)  # what the proposals type into password fields, ...
                self.redactor.learn_step(step)
                obs = yield from self._hide(obs)  # ... hidden in this step's screenshot too
                if _refused(step):  # not sent to the device; the agents read why next
                    outcome = _refusal(obs, step.approval)
                    self.record(t, obs, step, outcome, None, {"team_s": t1 - t0})
                    obs = outcome.observation
                    continue
                # Only here, on its way to the device, does a typed placeholder become the value.
                self._sent = self.redactor.reveal(step.action)
                try:
                    outcome = yield ("act", self._sent)
                except DeviceError as exc:
                    error = f"{type(exc).__name__}: {exc}"
                    self.record(t, obs, step, None, error, {"team_s": t1 - t0})
                    break
                if getattr(step, "approval", None):
                    outcome = dataclasses.replace(outcome, info={**outcome.info, "approval": step.approval})
                self.record(t, obs, step, outcome, None, {"team_s": t1 - t0, "act_s": time.perf_counter() - t1})
                if _should_stop(outcome, step.action):
                    break
                before, obs = obs, self.redactor.observation(outcome.observation)
                stale = _stale(step.action, before, obs)
        except DeviceError as exc:
            error = f"{type(exc).__name__}: {exc}"
        except ApprovalPending as exc:  # the policy decides later: resume the episode then
            error = f"{type(exc).__name__}: {exc}"
            if self.result is not None:
                self.result.pending_approval = exc.request.to_dict()
        except BaseException as exc:
            self.end(f"{type(exc).__name__}: {exc}")
            message = self.redactor.text(str(exc))
            if message != str(exc):  # an error message must not carry a secret either
                raise CollabUIError(f"{type(exc).__name__}: {message}") from None
            raise
        return self.end(error)


    def _replay(self, obs: Observation) -> Generator[tuple[str, Any], Any, tuple[Observation, str | None]]:
        """A resumed episode's finished steps, on a freshly reset device: replayed on sandboxed
        devices (MiniWoB++, fakes), so that the page is the one the team left; on real pages and
        phones the reset page is where the team goes on (see ``collabui.durable``). Returns the
        page and the stale action the next step starts with, as if the episode had not stopped."""
        session, stale = self.session, None
        if session is None or not session.done_steps or not session.replay:
            return obs, stale
        for row in session.done_steps:
            if row.get("refused"):  # not run: the stale action stays the one before it, as in the loop
                obs = _refusal(obs, row.get("approval") or {}).observation
                continue
            action = self.team.space.from_dict(row["action"])
            self._sent = self.redactor.reveal(action)
            outcome = yield ("act", self._sent)
            if outcome.info.get("masked_action"):  # masked again from here on, as before the stop
                typed = getattr(self._sent, "content", None) or getattr(self._sent, "text", None)
                self.redactor.add_password(typed or "")
            before, obs = obs, self.redactor.observation(outcome.observation)
            stale = _stale(action, before, obs)
        return obs, stale


def _not_done(step: Any, outcome: StepOutcome | None) -> str | None:
    """What the history must say of an action that did not (fully) happen, or None: refused by
    the approval policy (never sent to the device), its navigation blocked by the guard (a
    jump_to not made, a link clicked whose page did not open), or the app it brought to front
    left again (a phone's app allowlist)."""
    if _refused(step):
        return "refused"
    info = outcome.info if outcome is not None else {}
    reasons = {"off-site" if "not an allowed site" in str(b.get("reason")) else "non-web URL"
               for b in info.get("blocked_navigations") or ()}
    if info.get("blocked_apps"):
        reasons.add("app not allowed")
    return "blocked: " + ", ".join(sorted(reasons)) if reasons else None


def _stale(action: Action, before: Observation, after: Observation) -> str | None:
    """``action``'s history entry when it acted on an element and left the page as it was (the
    same elements and texts, in whatever order and ids a shuffling device gave them): doing it
    again would change nothing either. None otherwise."""
    if not getattr(action, "element_id", None) or before.url != after.url:
        return None
    if simplify.page_key(before.extra.get("tree"), before.text) != simplify.page_key(after.extra.get("tree"), after.text):
        return None
    return history_entry(action, before)


def _refused(step: Any) -> bool:
    approval = getattr(step, "approval", None)
    return bool(approval) and approval.get("decision") == "refused"


def _refusal(obs: Observation, approval: Mapping[str, Any]) -> StepOutcome:
    """The outcome of a refused action: the page unchanged, the refusal as the action's error."""
    why = (f"{approval.get('call', 'the action')} was not run: the approval policy refused it "
           f"({approval.get('reason', 'flagged')})")
    return StepOutcome(dataclasses.replace(obs, last_action_error=why), 0.0, False,
                       {"approval": dict(approval)})


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _episode_id(env_name: str | None) -> str:
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", env_name or "episode").strip("-")[:48] or "episode"
    return f"{slug}-{stamp}-{uuid.uuid4().hex[:6]}"


def _should_stop(outcome: StepOutcome, action: Action) -> bool:
    return bool(outcome.done) or action.terminal


class _Driver:
    """Serves the requests of one ``_Run.loop``: ``request`` is what the loop asks next and,
    once ``done``, ``result`` is the episode. The sync and async drivers differ only in whether
    they await ``call()``."""

    def __init__(self, run: _Run, seed: int | None, calls: dict[str, Callable[[Any], Any]]) -> None:
        self._calls = calls
        self._gen = run.loop(seed)
        self.done = False
        self.result: EpisodeResult | None = None
        self.request: tuple[str, Any] = ("", None)
        self._advance(lambda: next(self._gen))

    def call(self) -> Any:
        """Start serving the pending request (an awaitable for the async calls)."""
        kind, arg = self.request
        return self._calls[kind](arg)

    def send(self, value: Any) -> None:
        """Hand the request's result to the loop."""
        self._advance(lambda: self._gen.send(value))

    def throw(self, exc: BaseException) -> None:
        """Hand the request's exception to the loop, which records it and decides."""
        self._advance(lambda: self._gen.throw(exc))

    def _advance(self, resume: Callable[[], tuple[str, Any]]) -> None:
        try:
            self.request = resume()
        except StopIteration as stop:
            self.done, self.result = True, stop.value


def _calls(team, device: Device, *, asynchronous: bool, run: _Run | None = None) -> dict[str, Callable[[Any], Any]]:
    """What each request of ``_Run.loop`` runs, with the sync or the async methods (the team
    step through the run's session, when it has one: approval gate, checkpoints)."""
    stepper = run.session.runner if run is not None and run.session is not None else team
    if asynchronous:
        reset, step, act = device.areset, stepper.astep, device.aact
        screenshot = getattr(device, "ascreenshot", _no_screenshot)
    else:
        reset, step, act = device.reset, stepper.step, device.act
        screenshot = getattr(device, "screenshot", lambda: None)
    return {
        "reset": lambda seed: reset(seed=seed),
        "step": lambda args: step(*args[:3], t=args[3], stale=args[4]),
        "act": act,
        "screenshot": lambda _arg: screenshot(),
    }


async def _no_screenshot() -> None:
    """``ascreenshot`` of a device that has none."""
    return None


def run_episode(
    team,
    task: str | None,
    device: Device,
    *,
    seed: int | None = None,
    max_steps: int | None = None,
    trace: TraceStore | str | Path | None = None,
    episode_id: str | None = None,
    env_name: str | None = None,
    on_step: Callable[[StepRecord], None] | None = None,
    secrets: Mapping[str, str] | None = None,
    approve: ApprovalPolicy | None = None,
    checkpoint: EpisodeStore | str | Path | None = None,
    resume: str | None = None,
) -> EpisodeResult:
    """Reset ``device``, then step the team until the environment is done, a terminal action
    runs, or ``max_steps`` pass. A ``DeviceError`` ends the episode with the error recorded
    (the trace so far stays valid); other errors are recorded in the trace and re-raised.

    ``secrets`` (``{"name": value}``): the task and the agents see ``<secret:name>``; the device
    gets the value only when it types an action holding the placeholder; traces, results and
    errors hold the placeholder alone (see ``collabui.redaction``).

    ``approve`` (``"ask"``, ``"always"``, ``"never"`` or ``approve(request) -> bool | None``;
    None: the device's default, ask on real pages and phones) is consulted before flagged
    actions (``collabui.approval``). ``checkpoint`` (a SQLite path) saves every superstep, so
    that ``resume=EPISODE_ID`` (with ``task=None``) goes on where the episode stopped
    (``collabui.durable``)."""
    run = _Run(team, task, device, seed=seed, max_steps=max_steps, trace=trace,
               episode_id=episode_id, env_name=env_name, on_step=on_step, secrets=secrets,
               approve=approve, checkpoint=checkpoint, resume=resume)
    driver = _Driver(run, run.seed, _calls(team, device, asynchronous=False, run=run))
    while not driver.done:
        try:
            value = driver.call()
        except BaseException as exc:  # handed to the loop, which records and decides
            driver.throw(exc)
        else:
            driver.send(value)
    return driver.result


async def arun_episode(
    team,
    task: str | None,
    device: Device,
    *,
    seed: int | None = None,
    max_steps: int | None = None,
    trace: TraceStore | str | Path | None = None,
    episode_id: str | None = None,
    env_name: str | None = None,
    on_step: Callable[[StepRecord], None] | None = None,
    secrets: Mapping[str, str] | None = None,
    approve: ApprovalPolicy | None = None,
    checkpoint: EpisodeStore | str | Path | None = None,
    resume: str | None = None,
) -> EpisodeResult:
    """Async twin of ``run_episode`` (uses the device's and the team's async methods; approval
    works, ``checkpoint`` does not: LangGraph's SQLite saver here is the synchronous one)."""
    run = _Run(team, task, device, seed=seed, max_steps=max_steps, trace=trace,
               episode_id=episode_id, env_name=env_name, on_step=on_step, secrets=secrets,
               approve=approve, checkpoint=checkpoint, resume=resume, asynchronous=True)
    driver = _Driver(run, run.seed, _calls(team, device, asynchronous=True, run=run))
    while not driver.done:
        try:
            value = await driver.call()
        except BaseException as exc:  # handed to the loop, which records and decides
            driver.throw(exc)
        else:
            driver.send(value)
    return driver.result
