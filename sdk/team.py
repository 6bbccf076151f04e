"""CollabAgentTeam: n role-free agents on a message DAG, m conversation rounds, majority vote.

One environment step is one invocation of a compiled LangGraph ``StateGraph`` whose nodes are
``agent{i}_round{j}`` plus ``vote``. Node (i, j) waits for its DAG predecessors in round j and
for (i, j-1), so it runs in superstep ``depth(i) + j`` and a step takes ``L + m - 1`` supersteps
(L = nodes on the DAG's longest path). Without memory (i, j) does not read (i, j-1): it runs in
superstep ``depth(i)`` and a step takes L. Nodes of one superstep run concurrently and their
generation requests are sent to the model as one batch.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
import zlib
from collections.abc import AsyncGenerator, Callable, Generator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, TypedDict

from collabui.actions import Action, ActionSpace, Unknown, get_action_space
from collabui.batching import SuperstepBatcher
from collabui.config import TeamConfig
from collabui.devices import simplify
from collabui.devices.base import Observation
from collabui.errors import CollabUIError, ConfigError
from collabui.models.base import ChatModel, ChatRequest, ChatResult, Message
from collabui.parsing import parse_proposal
from collabui.prompts import (
    PeerOutput,
    answer_call,
    build_messages,
    history_in_format,
    render_observation,
)
from collabui.vote import (
    VoteResult,
    arbitrate,
    majority_vote,
    pass_over,
    stale_decided,
    vote_decided,
)

#: A step whose graph returned without its vote: a stop signal that a library's thread pool
#: caught ends the stream early. Said as such, instead of failing later on a None vote.
CUT_OFF = "the team step ended before its vote: the graph stopped early, as after a swallowed stop signal"
#: The reason a skipped entry's ``Unknown`` action gives.
SKIPPED = "not run: the vote was decided before this entry (stop_when_decided)"

if TYPE_CHECKING:  # pragma: no cover
    from collabui.events import ProposalMade, VoteDecided
    from collabui.streaming import AsyncEpisodeStream, EpisodeStream

__all__ = ["CollabAgentTeam", "Proposal", "TeamStep"]


@dataclass(frozen=True)
class Proposal:
    """One entry of the action matrix: agent ``agent``'s output in round ``round``."""

    agent: int
    round: int
    predecessors: tuple[int, ...]
    messages: tuple[Message, ...]
    raw: str
    thought: str | None
    action: Action
    parse_error: str | None
    temperature: float
    adapter: str | None
    superstep: int
    latency_s: float
    prompt_tokens: int | None
    completion_tokens: int | None
    #: Not run: the vote was decided before this entry's turn (``TeamConfig.stop_when_decided``);
    #: its action is ``Unknown`` and the vote does not count it.
    skipped: bool = False

    def as_peer(self, named: Callable[[Action], str] | None = None) -> PeerOutput:
        """This answer as its readers get it; ``named`` writes the action as a call naming its
        element (the ``named`` prompt style's rendering, on the reader's screen)."""
        ok = self.parse_error is None
        return PeerOutput(self.agent, self.round, self.thought, self.action.to_json() if ok else None, self.raw,
                          named=named(self.action) if ok and named else None)

    def to_record(self) -> dict[str, Any]:
        return {
            "agent": self.agent,
            "round": self.round,
            "predecessors": list(self.predecessors),
            "messages": [dict(m) for m in self.messages],
            "raw": self.raw,
            "thought": self.thought,
            "action": self.action.to_dict(),
            "parse_error": self.parse_error,
            "temperature": self.temperature,
            "adapter": self.adapter,
            "superstep": self.superstep,
            "latency_s": round(self.latency_s, 4),
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            **({"skipped": True} if self.skipped else {}),
        }


@dataclass(frozen=True)
class TeamStep:
    """The outcome of one team step: the n x m proposals and the vote."""

    proposals: tuple[tuple[Proposal, ...], ...]
    vote: VoteResult
    rendered_observation: str
    seconds: float
    #: The approval decision when the policy flagged the voted action (``collabui.approval``):
    #: the request (t, action, call, reason) with ``decision`` ("approved"/"refused") and ``by``.
    approval: dict[str, Any] | None = None

    @property
    def action(self) -> Action:
        return self.vote.action

    def action_matrix(self) -> list[list[Action]]:
        return [[p.action for p in row] for row in self.proposals]

    @property
    def skipped(self) -> int:
        """Entries not run because the vote was already decided (``TeamConfig.stop_when_decided``)."""
        return sum(p.skipped for row in self.proposals for p in row)


def _merge(left: dict, right: dict) -> dict:
    return {**left, **right}


class _StepState(TypedDict, total=False):
    step_key: str
    t: int
    task: str
    observation: str
    views: dict[str, str]  # the page in other formats (agent_formats) and orders (varied_order)
    history: list[str]
    stale: str | None  # the last action, as its history entry reads, when it left the page unchanged
    proposals: Annotated[dict[tuple[int, int], Proposal], _merge]
    vote: VoteResult
    structure: dict[str, Any] | None  # the screen's structure, for models that read it (ChatRequest)
    approval_context: dict[str, Any]  # what flagging reads of the page (collabui.approval)
    approval: dict[str, Any] | None


#: What a device keeps of a screen's structure in ``Observation.extra`` (web tree, phone records).
_STRUCTURE_KEYS = ("tree", "ui_elements")


def _structure(observation: Observation | str) -> dict[str, Any] | None:
    """The structure of the screen the agents read, as the device gave it; None for a text."""
    if isinstance(observation, str):
        return None
    found = {k: observation.extra[k] for k in _STRUCTURE_KEYS if k in observation.extra}
    return found or None


def load_arbiter(spec: str) -> ChatModel:
    """The model ``TeamConfig.arbiter`` names. Raises ConfigError naming the arbiter on a bad spec."""
    from collabui.models.spec import load_model

    try:
        return load_model(spec)
    except ConfigError as exc:
        raise ConfigError(f"arbiter: {exc}") from exc


def _resolve_topology(config: TeamConfig):
    from collabui.topologies import Topology, make_topology

    topo = config.topology
    if isinstance(topo, Topology):
        if topo.n_agents != config.n_agents:
            raise ConfigError(
                f"topology has {topo.n_agents} agents but n_agents={config.n_agents}; make them equal"
            )
        return topo
    if isinstance(topo, str):
        return make_topology(topo, config.n_agents, seed=config.seed)
    raise ConfigError(f"topology must be a name or a Topology, got {type(topo).__name__}")


class CollabAgentTeam:
    """A team of role-free agents that proposes, discusses and votes on one action per step.

    Example:
        >>> from collabui import CollabAgentTeam
        >>> from collabui.models.fake import ScriptedChatModel
        >>> team = CollabAgentTeam(ScriptedChatModel(lambda req: 'Action: {"action": "click", "element_id": "B"}'),
        ...                        n_agents=2, rounds=2, topology="chain")
        >>> print(team.graph.get_graph().draw_mermaid().splitlines()[0])
        ---

    Args:
        model: the chat model all agents share (agents differ by temperature, adapter and what
            they read), or one model per agent.
        config: a TeamConfig; keyword arguments override its fields.
        arbiter_model: the arbiter already loaded (else ``config.arbiter``'s spec is loaded), so
            teams built per episode share one.
    """

    def __init__(
        self,
        model: ChatModel | Sequence[ChatModel],
        *,
        config: TeamConfig | None = None,
        arbiter_model: ChatModel | None = None,
        **overrides: Any,
    ) -> None:
        base = config or TeamConfig()
        if overrides:
            unknown = sorted(set(overrides) - set(TeamConfig.__dataclass_fields__))
            if unknown:
                raise ConfigError(f"unknown team option(s) {unknown}; see TeamConfig for the options")
            base = TeamConfig(**{**{f: getattr(base, f) for f in TeamConfig.__dataclass_fields__}, **overrides})
        self.models = self._resolve_models(model, base.n_agents)
        self.config = base.for_model(self.models[0])
        self.space: ActionSpace = get_action_space(base.action_space)
        self.batcher = SuperstepBatcher(fallback_s=base.batch_fallback_s)
        self.arbiter: ChatModel | None = arbiter_model
        # Only an arbiter loaded here is the team's to close; one passed in is shared with others.
        self._owned_arbiter: ChatModel | None = None
        if self.config.arbiter and arbiter_model is None:
            self.arbiter = self._owned_arbiter = load_arbiter(self.config.arbiter)
        self._set_topology(_resolve_topology(base))

    def close(self) -> None:
        """Release what the team loaded itself: the arbiter it made from ``config.arbiter``. The
        agents' models and an ``arbiter_model`` passed in belong to the caller and stay open."""
        owned, self._owned_arbiter = self._owned_arbiter, None
        if owned is not None:
            owned.close()

    def __enter__(self) -> CollabAgentTeam:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @staticmethod
    def _resolve_models(model: ChatModel | Sequence[ChatModel], n: int) -> tuple[ChatModel, ...]:
        if isinstance(model, ChatModel):
            return (model,) * n
        models = tuple(model)
        if len(models) != n or not all(isinstance(m, ChatModel) for m in models):
            raise ConfigError(f"give one ChatModel or a list of {n} ChatModels (one per agent)")
        return models

    # -- topology and graph ------------------------------------------------------------------

    @property
    def topology(self):
        """The current message DAG (a ``collabui.topologies.Topology``)."""
        return self._topology

    def set_topology(self, topology) -> None:
        """Replace the message DAG and rebuild the graph."""
        from collabui.topologies import Topology

        if not isinstance(topology, Topology) or topology.n_agents != self.config.n_agents:
            raise ConfigError(f"set_topology needs a Topology over {self.config.n_agents} agents")
        self._set_topology(topology)

    def resample_topology(self, seed: int | None = None):
        """The paper's edge update: resample the DAG (fixed topologies stay) and rebuild."""
        self._set_topology(self._topology.resample(seed))
        return self._topology

    def _set_topology(self, topology) -> None:
        self._topology = topology
        m = self.config.rounds
        # Without memory a round reads nothing of the one before it, so every round's node (i, j)
        # runs at its DAG depth alone: all rounds of a level share one batch (the paper's
        # memory keeps them in order).
        lag = 1 if self.config.memory else 0
        self._superstep = {
            (i, j): topology.depth(i) + lag * j for i in range(self.config.n_agents) for j in range(m)
        }
        self._width: dict[int, int] = {}
        for level in self._superstep.values():
            self._width[level] = self._width.get(level, 0) + 1
        self.graph = self._build_graph()

    @staticmethod
    def node_name(i: int, j: int) -> str:
        return f"agent{i}_round{j}"

    def _build_graph(self, *, checkpointer: Any = None, approval: bool = False):
        from langchain_core.runnables import RunnableLambda
        from langgraph.graph import END, START, StateGraph

        builder = StateGraph(_StepState)
        n, m = self.config.n_agents, self.config.rounds
        for j in range(m):
            for i in range(n):
                sync_fn, async_fn = self._make_node(i, j)
                builder.add_node(self.node_name(i, j), RunnableLambda(sync_fn, afunc=async_fn, name=self.node_name(i, j)))
        builder.add_node("vote", RunnableLambda(self._vote_node, afunc=self._avote_node, name="vote"))
        for j in range(m):
            for i in range(n):
                sources = [self.node_name(k, j) for k in self._topology.predecessors(i)]
                if j > 0 and self.config.memory:
                    sources.append(self.node_name(i, j - 1))
                target = self.node_name(i, j)
                if not sources:
                    builder.add_edge(START, target)
                elif len(sources) == 1:
                    builder.add_edge(sources[0], target)
                else:
                    builder.add_edge(sources, target)
        builder.add_edge([self.node_name(i, m - 1) for i in range(n)], "vote")
        if approval:  # the gate sits between the vote and the device (collabui.approval)
            builder.add_node("approve", RunnableLambda(self._approve_node, name="approve"))
            builder.add_edge("vote", "approve")
            builder.add_edge("approve", END)
        else:
            builder.add_edge("vote", END)
        return builder.compile(name="collab_agent_team", checkpointer=checkpointer)

    def compile_step_graph(self, *, checkpointer: Any = None, approval: bool = False):
        """The step graph compiled with a LangGraph checkpointer (``collabui.durable``) and, with
        ``approval``, an ``approve`` node after the vote that interrupts on flagged actions."""
        return self._build_graph(checkpointer=checkpointer, approval=approval)

    def draw_mermaid(self) -> str:
        """The compiled step graph as a Mermaid diagram."""
        return self.graph.get_graph().draw_mermaid()

    # -- nodes -------------------------------------------------------------------------------

    def _request(self, state: _StepState, i: int, j: int) -> tuple[ChatRequest, tuple[Message, ...]]:
        props = state.get("proposals", {})
        preds = self._topology.predecessors(i)
        view = self.config.agent_format(i)
        named = self._namer(state, view) if self.config.agent_style(i) == "named" else None
        peers = [props[(k, j)].as_peer(named) for k in preds]
        own = props[(i, j - 1)].as_peer(named) if j > 0 and self.config.memory else None
        history = state.get("history", [])
        if view in state.get("views", {}):
            history = [history_in_format(entry, view) for entry in history]
        messages = build_messages(
            space=self.space,
            task=state["task"],
            observation=self._observation_of(state, i),
            history=history,
            peers=peers,
            own_previous=own,
            style=self.config.agent_style(i),
        )
        seed = None
        if self.config.seed is not None:
            seed = (self.config.seed * 1_000_003 + state.get("t", 0) * 1009 + i * 31 + j) % (2**31)
        request = ChatRequest(
            messages=messages,
            temperature=self.config.agent_temperature(i),
            max_new_tokens=self.config.max_new_tokens,
            adapter=self.config.agent_adapter(i),
            seed=seed,
            structure=state.get("structure"),
        )
        return request, messages

    def _proposal(self, i: int, j: int, request: ChatRequest, result: ChatResult) -> Proposal:
        parsed = parse_proposal(result.text, self.space)
        return Proposal(
            agent=i,
            round=j,
            predecessors=tuple(self._topology.predecessors(i)),
            messages=request.messages,
            raw=result.text,
            thought=parsed.thought,
            action=parsed.action,
            parse_error=parsed.error,
            temperature=request.temperature,
            adapter=request.adapter,
            superstep=self._superstep[(i, j)],
            latency_s=result.latency_s,
            prompt_tokens=result.prompt_tokens,
            completion_tokens=result.completion_tokens,
        )

    def _make_node(self, i: int, j: int):
        level = self._superstep[(i, j)]
        width = self._width[level]
        model = self.models[i]

        def run(state: _StepState) -> dict[str, Any]:
            if self._decided(state):
                return {"proposals": {(i, j): self._skipped(i, j, level)}}
            request, _ = self._request(state, i, j)
            result = self.batcher.submit((state["step_key"], level), width, model, request)
            return {"proposals": {(i, j): self._proposal(i, j, request, result)}}

        async def arun(state: _StepState) -> dict[str, Any]:
            if self._decided(state):
                return {"proposals": {(i, j): self._skipped(i, j, level)}}
            request, _ = self._request(state, i, j)
            result = await self.batcher.asubmit((state["step_key"], level), width, model, request)
            return {"proposals": {(i, j): self._proposal(i, j, request, result)}}

        return run, arun

    def _decided(self, state: _StepState) -> bool:
        """With ``stop_when_decided``: whether the proposals so far fix the vote's winner. Every
        node of a superstep reads the same state, so a level is skipped whole and the batcher never
        waits for a request that will not come."""
        if not self.config.stop_when_decided:
            return False
        stale = self._stale(state)
        if stale is not None:
            return stale_decided(self._matrix(state), stale, rule=self.config.vote)
        return vote_decided(self._matrix(state), rule=self.config.vote)

    def _stale(self, state: _StepState) -> Callable[[Action], bool] | None:
        """With ``skip_stale`` and a stale last action: whether an action repeats it, compared as
        the history names actions (element by its screen line), since ids change between pages."""
        stale = state.get("stale")
        if not self.config.skip_stale or not stale:
            return None
        tree = (state.get("structure") or {}).get("tree")
        element_format = simplify.observation_format(state["observation"])
        return lambda action: answer_call(action, tree, element_format, with_id=False) == stale

    def _fresh(self, vote: VoteResult, matrix: list[list[Action | None]], state: _StepState) -> VoteResult:
        stale = self._stale(state)
        if stale is None:
            return vote
        return pass_over(vote, matrix, stale, rule=self.config.vote, independent=self._independent())

    def _skipped(self, i: int, j: int, level: int) -> Proposal:
        return Proposal(agent=i, round=j, predecessors=tuple(self._topology.predecessors(i)), messages=(), raw="",
                        thought=None, action=Unknown(raw="", reason=SKIPPED), parse_error=None,
                        temperature=self.config.agent_temperature(i), adapter=self.config.agent_adapter(i),
                        superstep=level, latency_s=0.0, prompt_tokens=None, completion_tokens=None, skipped=True)

    def _independent(self) -> tuple[int, ...]:
        """The agents whose proposals break ties first (``TeamConfig.tie_break``): the DAG's
        sources, which read no peer; none under the default rule."""
        if self.config.tie_break != "independent":
            return ()
        return self._topology.layers()[0]  # depth 0: no predecessor

    def _matrix(self, state: _StepState) -> list[list[Action | None]]:
        """The actions so far; ``None`` where an entry has not run or was skipped."""
        props = state.get("proposals") or {}
        return [[None if (p := props.get((i, j))) is None or p.skipped else p.action for j in range(self.config.rounds)]
                for i in range(self.config.n_agents)]

    def _vote_node(self, state: _StepState) -> dict[str, Any]:
        matrix = self._matrix(state)
        vote = majority_vote(matrix, rule=self.config.vote, independent=self._independent())
        if self.arbiter is not None:
            [answer] = self.arbiter.generate([self._arbiter_request(state)])
            vote = self._arbitrated(vote, matrix, answer)
        return {"vote": self._fresh(vote, matrix, state)}

    async def _avote_node(self, state: _StepState) -> dict[str, Any]:
        matrix = self._matrix(state)
        vote = majority_vote(matrix, rule=self.config.vote, independent=self._independent())
        if self.arbiter is not None:
            [answer] = await self.arbiter.agenerate([self._arbiter_request(state)])
            vote = self._arbitrated(vote, matrix, answer)
        return {"vote": self._fresh(vote, matrix, state)}

    def _arbiter_request(self, state: _StepState) -> ChatRequest:
        """The step as a single agent reads it: the device's page, the task and the history; no
        peers and no previous answer, so the arbiter's choice is its own."""
        messages = build_messages(space=self.space, task=state["task"], observation=state["observation"],
                                  history=state.get("history", []), peers=[], own_previous=None,
                                  style=self.config.agent_style(0))
        return ChatRequest(messages=messages, temperature=0.0, max_new_tokens=self.config.max_new_tokens,
                           structure=state.get("structure"))

    def _arbitrated(self, vote: VoteResult, matrix: list[list[Action]], answer: ChatResult) -> VoteResult:
        action = parse_proposal(answer.text, self.space).action
        return arbitrate(vote, matrix, action, name=getattr(self.arbiter, "name", None) or str(self.config.arbiter))

    @staticmethod
    def _approve_node(state: _StepState) -> dict[str, Any]:
        """Flag the voted action; when flagged, stop at ``interrupt()`` until the caller resumes
        the graph with ``Command(resume={"approved": bool, "by": who})``."""
        from langgraph.types import interrupt

        from collabui.approval import ApprovalRequest, flag_action

        action = state["vote"].action
        reason = flag_action(action, state.get("approval_context") or {})
        if reason is None:
            return {"approval": None}
        request = ApprovalRequest(state.get("t", 0), action.to_dict(), action.to_call(), reason).to_dict()
        answer = interrupt(request)
        approved = bool(answer.get("approved")) if isinstance(answer, dict) else bool(answer)
        by = answer.get("by") if isinstance(answer, dict) else None
        return {"approval": {**request, "decision": "approved" if approved else "refused", "by": by}}

    # -- one step ----------------------------------------------------------------------------

    def _inputs(self, task: str, observation: Observation | str, history: Sequence[str], t: int,
                stale: str | None = None) -> _StepState:
        rendered = (
            observation
            if isinstance(observation, str)
            else render_observation(observation, max_chars=self.config.max_observation_chars)
        )
        return {
            "step_key": uuid.uuid4().hex,
            "t": t,
            "task": task,
            "observation": rendered,
            "views": self._views(observation),
            "structure": _structure(observation),
            "history": list(history),
            "stale": stale,
            "proposals": {},
        }

    @staticmethod
    def _namer(state: _StepState, view: str | None) -> Callable[[Action], str]:
        """Names an action's element as the agent reading ``view`` sees it on this step's screen."""
        tree = (state.get("structure") or {}).get("tree")
        element_format = view or simplify.observation_format(state["observation"])
        return lambda action: answer_call(action, tree, element_format)

    def _observation_of(self, state: _StepState, i: int) -> str:
        """The page as agent ``i`` reads it: its own order (``varied_order``), else its format."""
        views = state.get("views", {})
        return views.get(f"agent{i}") or views.get(self.config.agent_format(i)) or state["observation"]

    def _views(self, observation: Observation | str) -> dict[str, str]:
        """The page in each agent format other than the device's, re-rendered from the device's
        element tree (same elements, ids and order), and with ``varied_order`` each agent's but
        agent 0's own ordering of it (key ``agent{i}``); none without a tree (a text, a phone)."""
        tree = None if isinstance(observation, str) else observation.extra.get("tree")
        if not tree or not (self.config.agent_formats or self.config.varied_order):
            return {}
        own = simplify.observation_format(observation.text)

        def text(page: Any, fmt: str) -> str:
            return render_observation(dataclasses.replace(observation, text=simplify.render(page, fmt)),
                                      max_chars=self.config.max_observation_chars)

        views = {fmt: text(tree, fmt) for fmt in set(self.config.agent_formats or ()) - {own}}
        if self.config.varied_order:
            # Seeded by the page itself, so a rerun of an episode shows each agent the same order.
            page = zlib.crc32(observation.text.encode("utf-8"))
            for i in range(1, self.config.n_agents):
                seed = zlib.crc32(f"{self.config.seed}|order|{page}|{i}".encode())
                views[f"agent{i}"] = text(simplify.reorder(tree, seed), self.config.agent_format(i) or own)
        return views

    def _run_config(self) -> dict[str, Any]:
        # max_concurrency must sit at the top level of the run config (LangGraph ignores it
        # under "configurable"); the widest superstep must run at once for batching.
        return {"max_concurrency": max(self._width.values()), "recursion_limit": 10 + len(self._width) * 2}

    def _finish(self, state: dict[str, Any], inputs: _StepState, started: float) -> TeamStep:
        props = state.get("proposals") or {}
        n, m = self.config.n_agents, self.config.rounds
        missing = [(i, j) for i in range(n) for j in range(m) if (i, j) not in props]
        if missing or state.get("vote") is None:
            raise CollabUIError(f"{CUT_OFF} ({len(missing)} of {n * m} proposals missing)")
        matrix = tuple(tuple(props[(i, j)] for j in range(m)) for i in range(n))
        return TeamStep(matrix, state["vote"], inputs["observation"], time.perf_counter() - started)

    def step(self, task: str, observation: Observation | str, history: Sequence[str] = (), *, t: int = 0,
             stale: str | None = None) -> TeamStep:
        """Run one team step: every agent in every round proposes (with ``stop_when_decided``, until
        the vote is decided), then the vote decides."""
        started = time.perf_counter()
        inputs = self._inputs(task, observation, history, t, stale)
        state = self.graph.invoke(inputs, config=self._run_config())
        return self._finish(state, inputs, started)

    async def astep(self, task: str, observation: Observation | str, history: Sequence[str] = (), *, t: int = 0,
             stale: str | None = None) -> TeamStep:
        """Async twin of ``step``."""
        started = time.perf_counter()
        inputs = self._inputs(task, observation, history, t, stale)
        state = await self.graph.ainvoke(inputs, config=self._run_config())
        return self._finish(state, inputs, started)

    def _step_events(self, task: str, observation: Observation | str, history: Sequence[str] = (), *,
                     t: int = 0, stale: str | None = None) -> Generator[ProposalMade | VoteDecided, None, TeamStep]:
        """``step`` through LangGraph's own streaming: yields each proposal as its node finishes
        and the vote, and returns the TeamStep (the same one ``step`` returns)."""
        started = time.perf_counter()
        inputs = self._inputs(task, observation, history, t, stale)
        state: dict[str, Any] = {"proposals": {}}
        for update in self.graph.stream(inputs, config=self._run_config(), stream_mode="updates"):
            yield from self._absorb(update, state, inputs, t, started)
        return state.get("team_step") or self._finish(state, inputs, started)  # the latter: a cut-off stream

    async def _astep_events(self, task: str, observation: Observation | str, history: Sequence[str] = (), *,
                            t: int = 0, stale: str | None = None) -> AsyncGenerator[ProposalMade | VoteDecided, None]:
        """Async twin of ``_step_events``; the last event, a VoteDecided, carries the TeamStep."""
        started = time.perf_counter()
        inputs = self._inputs(task, observation, history, t, stale)
        state: dict[str, Any] = {"proposals": {}}
        stream = self.graph.astream(inputs, config=self._run_config(), stream_mode="updates")
        try:
            async for update in stream:
                for event in self._absorb(update, state, inputs, t, started):
                    yield event
        finally:  # an early stop cancels the step's pending model calls
            await stream.aclose()

    def _absorb(self, update: dict[str, Any], state: dict[str, Any], inputs: _StepState, t: int,
                started: float) -> list[ProposalMade | VoteDecided]:
        """Fold one ``updates`` chunk ({node: its writes}) into ``state``; return its events."""
        from collabui.events import ProposalMade, VoteDecided

        events: list[ProposalMade | VoteDecided] = []
        for writes in update.values():
            for (i, j), p in (writes or {}).get("proposals", {}).items():
                state["proposals"][(i, j)] = p
                if p.skipped:  # never asked of a model: no proposal to report
                    continue
                events.append(ProposalMade(t=t, agent=i, round=j, superstep=p.superstep, thought=p.thought,
                                           action=p.action, parse_error=p.parse_error, proposal=p))
            if writes and "vote" in writes:
                vote: VoteResult = writes["vote"]
                state["vote"] = vote
                state["team_step"] = self._finish(state, inputs, started)
                events.append(VoteDecided(t=t, action=vote.action, votes=vote.votes, total=vote.total,
                                          tally=vote.counts, tie_break=vote.tie_break, vote=vote,
                                          team_step=state["team_step"]))
        return events

    @property
    def supersteps(self) -> int:
        """Supersteps per team step: L + m - 1 (L without memory)."""
        return len(self._width)

    # -- episodes ----------------------------------------------------------------------------

    def run(self, task: str | None, device, **kwargs: Any):
        """Run an episode on ``device`` to its end or ``max_steps``; see ``collabui.episode``.

        ``approve=`` is the approval policy before flagged actions (``collabui.approval``);
        ``checkpoint=PATH`` saves every superstep and ``resume=EPISODE_ID`` (task None) goes on
        with a stopped episode (``collabui.durable``)."""
        from collabui.episode import run_episode

        return run_episode(self, task, device, **kwargs)

    async def arun(self, task: str | None, device, **kwargs: Any):
        """Async twin of ``run``."""
        from collabui.episode import arun_episode

        return await arun_episode(self, task, device, **kwargs)

    def stream(self, task: str | None, device, **kwargs: Any) -> EpisodeStream:
        """Run an episode like ``run`` (same arguments, same trace) while yielding typed events
        (``collabui.events``) as it goes: each proposal as it lands, the vote, the executed
        action, the end. Use it in a ``with`` block, or exhaust it, so that stopping early
        ends the episode at once (the trace records where)."""
        from collabui.streaming import EpisodeStream

        return EpisodeStream(self, task, device, **kwargs)

    def astream(self, task: str | None, device, **kwargs: Any) -> AsyncEpisodeStream:
        """Async twin of ``stream``: ``async with team.astream(...) as events: async for ...``."""
        from collabui.streaming import AsyncEpisodeStream

        return AsyncEpisodeStream(self, task, device, **kwargs)
