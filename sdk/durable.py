"""Durable episodes and the approval gate: the team's step graph run with a LangGraph checkpointer.

With ``checkpoint=PATH`` (``team.run``, ``team.stream``; ``collabui run`` always), every
superstep of every team step is saved in one SQLite file by LangGraph's ``SqliteSaver``
(``langgraph-checkpoint-sqlite``), one thread per step (``EPISODE/tT/DIGEST``, the digest of the
observation and history the step started from), and collabui's own tables keep the episode (task,
seed, trace path, team) and each finished step (the executed action as the agents wrote it, the
history line, the approval decision). An episode stopped by kill -9, Ctrl-C, a device failure or
a pending approval resumes with ``team.run(None, device, checkpoint=PATH, resume=EPISODE_ID)``
(``collabui run --resume RUN_ID``). What is restored, precisely:

* the team: the history the agents read, the step counter, and the interrupted step's graph at
  its last completed superstep (proposals already made are not asked again; a step waiting for
  approval asks again);
* the device cannot be checkpointed. Sandboxed devices (MiniWoB++, fakes: those without an
  approval gate by default) are reset with the episode's seed and the executed actions replayed,
  so the page is the one the team left. Real web pages and phones are reset only (the start URL
  re-opened, the phone's start screen), never replayed: replaying could submit a form twice. The
  interrupted step's graph is reused only when the page after that is the one it started from;
  otherwise the step starts afresh from the new page;
* the trace: the same file, appended. The ``end`` record a stop wrote and a line torn by a kill
  are cut off first; steps recorded in the trace but not yet in the checkpoint file (a kill
  between the two writes) are cut off and run again from their saved graph, so each step is in
  the trace once.

Secrets are never stored (the agents only ever see placeholders): give the same ``secrets`` again
to resume. Text the model typed into password fields is kept in plain form in the checkpoint file
(it is the team's state), which is created readable by its owner only.

Without ``checkpoint``, an approval policy still runs the step graph with a checkpointer (an
in-memory one: LangGraph's ``interrupt`` needs one), and a pending approval ends the episode.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import time
from collections.abc import AsyncGenerator, Generator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from collabui.approval import (
    ApprovalPending,
    ApprovalPolicy,
    ApprovalRequest,
    approval_context,
    decide,
)
from collabui.errors import ConfigError

__all__ = ["EpisodeStore", "StepRunner", "EpisodeSession", "default_checkpoint_path", "open_session", "open_store"]


def default_checkpoint_path() -> Path:
    """Where ``collabui run`` keeps its checkpoints: ``$COLLABUI_STATE_DIR/runs.sqlite``, else
    the user's state folder (``platformdirs``)."""
    root = os.environ.get("COLLABUI_STATE_DIR")
    if not root:
        import platformdirs

        root = platformdirs.user_state_dir("collabui")
    return Path(root) / "runs.sqlite"


def _serializer():
    """LangGraph's serializer, allowed to rebuild exactly the types the step state holds."""
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    from collabui.actions import get_action_space
    from collabui.actions.base import Unknown
    from collabui.team import Proposal
    from collabui.vote import VoteResult

    types: list[type] = [Proposal, VoteResult, Unknown]
    for space in ("web", "mobile"):
        types.extend(get_action_space(space).actions.values())
    return JsonPlusSerializer(allowed_msgpack_modules=types)


#: Each superstep (one agent's LLM call) is on disk before the next starts: a kill -9 loses at
#: most the call in flight. LangGraph's default ("async") writes while the next call runs, so a
#: kill could cost a finished call; one SQLite write is nothing beside a model call.
DURABILITY = "sync"

_TABLES = """
CREATE TABLE IF NOT EXISTS collabui_runs (run_id TEXT PRIMARY KEY, spec TEXT NOT NULL, created TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS collabui_episodes (episode_id TEXT PRIMARY KEY, run_id TEXT, spec TEXT NOT NULL,
    status TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS collabui_steps (episode_id TEXT NOT NULL, t INTEGER NOT NULL, step TEXT NOT NULL,
    PRIMARY KEY (episode_id, t));
"""


class EpisodeStore:
    """One SQLite file: LangGraph's checkpoint tables (``self.saver``) and collabui's episodes.

    Args:
        path: the SQLite file (created, owner-only, with its folder).
    """

    def __init__(self, path: str | Path) -> None:
        try:
            from langgraph.checkpoint.sqlite import SqliteSaver
        except ImportError:
            raise ConfigError("checkpoints need langgraph-checkpoint-sqlite; install it with "
                              "pip install 'collabui-agents[web]' (or [android])") from None

        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if not self.path.exists():  # owner-only: it holds the team's state
                os.close(os.open(self.path, os.O_CREAT | os.O_WRONLY, 0o600))
            conn = sqlite3.connect(self.path, check_same_thread=False)
            self.saver = SqliteSaver(conn, serde=_serializer())
            self.saver.setup()
            with self.saver.cursor() as cur:
                cur.executescript(_TABLES)
        except (OSError, sqlite3.Error) as exc:
            raise ConfigError(f"cannot use checkpoint file {self.path}: {exc}; pass a writable path "
                              "(--checkpoint-db PATH)") from None

    def close(self) -> None:
        self.saver.conn.close()

    def _one(self, sql: str, args: tuple[Any, ...]) -> Any:
        with self.saver.cursor() as cur:
            row = cur.execute(sql, args).fetchone()
        return None if row is None else row[0]

    def _exec(self, sql: str, args: tuple[Any, ...]) -> None:
        with self.saver.cursor() as cur:
            cur.execute(sql, args)

    # runs: what `collabui run` needs to start again
    def save_run(self, run_id: str, spec: Mapping[str, Any]) -> None:
        created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        self._exec("INSERT OR REPLACE INTO collabui_runs VALUES (?, ?, ?)", (run_id, json.dumps(spec), created))

    def load_run(self, run_id: str) -> dict[str, Any] | None:
        spec = self._one("SELECT spec FROM collabui_runs WHERE run_id = ?", (run_id,))
        return None if spec is None else json.loads(spec)

    def runs(self) -> list[str]:
        with self.saver.cursor() as cur:
            return [r[0] for r in cur.execute("SELECT run_id FROM collabui_runs ORDER BY created DESC")]

    # episodes
    def save_episode(self, episode_id: str, spec: Mapping[str, Any], status: str, run_id: str | None = None) -> None:
        self._exec("INSERT OR REPLACE INTO collabui_episodes VALUES (?, ?, ?, ?)",
                   (episode_id, run_id, json.dumps(spec), status))

    def set_status(self, episode_id: str, status: str) -> None:
        self._exec("UPDATE collabui_episodes SET status = ? WHERE episode_id = ?", (status, episode_id))

    def episode(self, episode_id: str) -> tuple[dict[str, Any], str] | None:
        with self.saver.cursor() as cur:
            row = cur.execute("SELECT spec, status FROM collabui_episodes WHERE episode_id = ?",
                              (episode_id,)).fetchone()
        return None if row is None else (json.loads(row[0]), row[1])

    def add_step(self, episode_id: str, t: int, step: Mapping[str, Any]) -> None:
        self._exec("INSERT OR REPLACE INTO collabui_steps VALUES (?, ?, ?)", (episode_id, t, json.dumps(step)))

    def steps(self, episode_id: str) -> list[dict[str, Any]]:
        with self.saver.cursor() as cur:
            rows = cur.execute("SELECT step FROM collabui_steps WHERE episode_id = ? ORDER BY t", (episode_id,))
            return [json.loads(r[0]) for r in rows]


def open_store(checkpoint: EpisodeStore | str | Path) -> EpisodeStore:
    return checkpoint if isinstance(checkpoint, EpisodeStore) else EpisodeStore(checkpoint)


class StepRunner:
    """Runs team steps on the step graph compiled with a checkpointer (and, with a policy, the
    ``approve`` node): one thread per step, interrupts answered by the policy."""

    def __init__(self, team: Any, *, episode_id: str, policy: ApprovalPolicy | None, saver: Any) -> None:
        self.team, self.episode_id, self.policy = team, episode_id, policy
        self.graph = team.compile_step_graph(checkpointer=saver, approval=policy is not None)
        self.last_step: Any = None  # the TeamStep as the graph made it (unmasked)

    def _thread(self, inputs: Mapping[str, Any]) -> dict[str, Any]:
        digest = hashlib.sha256(json.dumps([inputs["observation"], inputs["history"]]).encode()).hexdigest()[:16]
        config = self.team._run_config()
        config["configurable"] = {"thread_id": f"{self.episode_id}/t{inputs['t']}/{digest}"}
        return config

    def _inputs(self, task: str, observation: Any, history: Any, t: int, stale: str | None = None) -> dict[str, Any]:
        inputs = dict(self.team._inputs(task, observation, history, t, stale))
        if self.policy is not None and not isinstance(observation, str):
            inputs["approval_context"] = approval_context(observation)
        return inputs

    def _answer(self, payload: Mapping[str, Any]) -> Any:
        from langgraph.types import Command

        request = ApprovalRequest.from_dict(payload)
        answer = decide(self.policy, request) if self.policy is not None else False
        if answer is None:
            raise ApprovalPending(request)
        by = self.policy if isinstance(self.policy, str) else "callable"
        return Command(resume={"approved": answer, "by": by})

    def _start(self, task: str, observation: Any, history: Any, t: int, stale: str | None = None):
        """(inputs, config, what to send first, folded state) for one step, resuming its thread
        where it stopped when it has one."""
        inputs = self._inputs(task, observation, history, t, stale)
        config = self._thread(inputs)
        saved = self.graph.get_state(config)
        if not saved.values:
            return inputs, config, inputs, {"proposals": {}}
        inputs = {**inputs, **{k: saved.values[k] for k in ("step_key", "observation") if k in saved.values}}
        state = {"proposals": dict(saved.values.get("proposals", {}))}
        if not saved.next:  # finished before the stop: nothing to run
            return inputs, config, None, state
        interrupts = [i for task_ in saved.tasks for i in task_.interrupts]
        return inputs, config, (self._answer(interrupts[0].value) if interrupts else None), state

    def _end(self, inputs: Mapping[str, Any], config: dict[str, Any], started: float) -> Any:
        from collabui.team import TeamStep

        values = self.graph.get_state(config).values
        step = self.team._finish(values, inputs, started)
        self.last_step = TeamStep(step.proposals, step.vote, step.rendered_observation, step.seconds,
                                  approval=values.get("approval"))
        return self.last_step

    def step_events(self, task: str, observation: Any, history: Any, t: int,
                    stale: str | None = None) -> Generator[Any, None, Any]:
        """Like ``team._step_events``: yields proposals and the vote as they land, returns the
        TeamStep (with ``approval`` when the action was flagged)."""
        started = time.perf_counter()
        inputs, config, send, state = self._start(task, observation, history, t, stale)
        done = send is None and not self.graph.get_state(config).next
        while not done:
            pending = None
            for update in self.graph.stream(send, config=config, stream_mode="updates", durability=DURABILITY):
                if "__interrupt__" in update:
                    pending = update["__interrupt__"][0].value
                    continue
                yield from self.team._absorb(update, state, inputs, t, started)
            done = pending is None
            if pending is not None:
                send = self._answer(pending)
        return self._end(inputs, config, started)

    def step(self, task: str, observation: Any, history: Any = (), *, t: int = 0, stale: str | None = None) -> Any:
        gen = self.step_events(task, observation, history, t, stale)
        while True:
            try:
                next(gen)
            except StopIteration as stop:
                return stop.value

    async def astep_events(self, task: str, observation: Any, history: Any, t: int,
                           stale: str | None = None) -> AsyncGenerator[Any, None]:
        """Async twin of ``step_events``; the last item is the TeamStep."""
        started = time.perf_counter()
        inputs, config, send, state = self._start(task, observation, history, t, stale)
        done = send is None and not self.graph.get_state(config).next
        while not done:
            pending = None
            stream = self.graph.astream(send, config=config, stream_mode="updates", durability=DURABILITY)
            try:
                async for update in stream:
                    if "__interrupt__" in update:
                        pending = update["__interrupt__"][0].value
                        continue
                    for event in self.team._absorb(update, state, inputs, t, started):
                        yield event
            finally:
                await stream.aclose()
            done = pending is None
            if pending is not None:
                send = self._answer(pending)
        yield self._end(inputs, config, started)

    async def astep(self, task: str, observation: Any, history: Any = (), *, t: int = 0,
                    stale: str | None = None) -> Any:
        step = None
        async for item in self.astep_events(task, observation, history, t, stale):
            step = item
        return step


@dataclass
class EpisodeSession:
    """The approval gate and checkpoint store of one episode, and what a resume restores."""

    runner: StepRunner
    store: EpisodeStore | None = None
    #: Finished steps of a resumed episode (``EpisodeStore.steps`` rows), replayed or not.
    done_steps: list[dict[str, Any]] = field(default_factory=list)
    replay: bool = False
    recorder: Any = None
    header: dict[str, Any] | None = None
    #: The store was opened from a path for this episode: closed when it ends.
    owns_store: bool = False

    @property
    def first_t(self) -> int:
        return len(self.done_steps)

    @property
    def history(self) -> list[str]:
        return [s["history"] for s in self.done_steps]

    def after_step(self, episode_id: str, t: int, history_line: str) -> None:
        """Mark step t finished (after its trace line is written)."""
        if self.store is None or self.runner.last_step is None:
            return
        approval = self.runner.last_step.approval
        self.store.add_step(episode_id, t, {"t": t, "action": self.runner.last_step.action.to_dict(),
                                            "history": history_line,
                                            "refused": bool(approval and approval.get("decision") == "refused"),
                                            "approval": approval})

    def save(self, episode_id: str, spec: Mapping[str, Any], status: str = "running") -> None:
        if self.store is not None:
            self.store.save_episode(episode_id, spec, status, run_id=spec.get("run_id"))

    def finish(self, episode_id: str, status: str) -> None:
        if self.store is not None:
            self.store.set_status(episode_id, status)
            if self.owns_store:
                self.store.close()


def open_session(team: Any, device: Any, *, approve: ApprovalPolicy | None,
                 checkpoint: EpisodeStore | str | Path | None, resume: str | None, episode_id: str,
                 asynchronous: bool) -> tuple[EpisodeSession | None, dict[str, Any]]:
    """The session of one episode (None when neither a policy nor a checkpoint is in force) and,
    when resuming, the stored episode spec (task, seed, max_steps, env, trace, run id)."""
    from collabui.approval import default_policy, resolve_policy

    policy = resolve_policy(approve, device)
    if checkpoint is None:
        if resume is not None:
            raise ConfigError("resume= needs checkpoint=PATH: the checkpoint file the episode was saved in")
        if policy is None:
            return None, {}
        from langgraph.checkpoint.memory import InMemorySaver

        return EpisodeSession(StepRunner(team, episode_id=episode_id, policy=policy, saver=InMemorySaver(serde=_serializer()))), {}
    if asynchronous:
        raise ConfigError("checkpoint= works with team.run and team.stream; the async twins keep no "
                          "checkpoint (run the episode with team.run or team.stream)")
    store = open_store(checkpoint)
    runner = StepRunner(team, episode_id=resume or episode_id, policy=policy, saver=store.saver)
    session = EpisodeSession(runner, store, replay=default_policy(device) is None,
                             owns_store=not isinstance(checkpoint, EpisodeStore))
    if resume is None:
        if store.episode(episode_id) is not None:  # its saved step graphs would be reused
            if session.owns_store:
                store.close()
            raise ConfigError(f"episode {episode_id!r} is already in {store.path}; pass resume={episode_id!r} "
                              "to go on with it, or another episode_id")
        return session, {}
    try:
        return session, _restore(session, team, resume)
    except BaseException:
        if session.owns_store:
            store.close()
        raise


def _team_spec(team: Any) -> dict[str, Any]:
    """The team's configuration as stored (JSON round trip: tuples become lists)."""
    return json.loads(json.dumps(team.config.trace_dict()))


def _restore(session: EpisodeSession, team: Any, episode_id: str) -> dict[str, Any]:
    from collabui.trace import reopen_trace

    store = session.store
    if store is None:
        raise ConfigError("resuming needs a checkpoint file")
    found = store.episode(episode_id)
    if found is None:
        raise ConfigError(f"no episode {episode_id!r} in {store.path}; pass an id a checkpointed run "
                          "printed (collabui run --resume RUN_ID lists the run's episodes itself)")
    spec, status = found
    if status == "finished":
        raise ConfigError(f"episode {episode_id!r} already finished; nothing to resume")
    if spec.get("team") not in (None, _team_spec(team)):
        raise ConfigError(f"episode {episode_id!r} was run by another team configuration; build the team "
                          "with the one in its trace header (or its run) to resume it")
    done = store.steps(episode_id)
    if spec.get("trace"):
        session.recorder, session.header, kept = reopen_trace(spec["trace"], keep_steps=len(done))
        done = done[:kept]  # a step the trace lacks runs again from its saved graph
    session.done_steps = done
    return spec
