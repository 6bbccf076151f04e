"""Environment-verified credit: replay a seeded MiniWoB++ episode and let the task's own reward
judge actions.

MiniWoB++ tasks are generated from ``Math.seedrandom(seed)``, so ``reset(seed)`` followed by the
same actions rebuilds the same page. That makes the environment itself a critic and a teacher:

* :func:`search` finds a sequence of actions that completes the task from a replayed state: a
  depth-first search over the page's candidate actions (clicks, typing the task's quoted
  strings, selecting options), best lexical match first. It keeps the browser's state while it
  goes deeper and replays ``reset(seed) + prefix`` only after a dead end, so a task the lexical
  order gets right costs one action per step.
* :class:`EnvVerifiedCritic` (critic spec ``verified``) scores a recorded step's n x m matrix:
  a search from the replayed step finds a completion of L actions; then each distinct proposal
  is executed on the replayed page and scores 1 when it completes the task or the task can still
  be completed within L - 1 more actions (it makes progress), else 0 (it ends the episode
  unrewarded, wastes a step or leads nowhere). It abstains when the replayed page differs from
  the recorded observation (compared by digest), on pages that change by themselves (timers,
  animation: seen by looking twice), and when no action at all is found to complete the task
  (nothing known to be right).

"Completes the task" means the task's full reward (:func:`completes`), not merely a positive
one: click-checkboxes pays ``(right boxes - wrong boxes) / boxes``, so submitting with one of
three named boxes ticked is positive, and a search that stopped there taught submitting early.

Nothing hidden is read: only the observation text the agents saw, the task sentence and the
environment's reward.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from collabui.actions import WEB, Action, Unknown, web
from collabui.devices.base import Observation, StepOutcome
from collabui.devices.simplify import flat_elements
from collabui.errors import ConfigError
from collabui.prompts import history_entry
from collabui.redaction import PASSWORD_MASK, TASK_PASSWORD
from collabui.training.candidates import rank_candidates
from collabui.training.critic import Critic, ScoreMatrix, StepContext, to_action

__all__ = [
    "SETTLE_CHECK_S",
    "SearchConfig",
    "SearchResult",
    "Replayer",
    "rank_candidates",
    "map_action",
    "search",
    "screen_digest",
    "page_key",
    "EnvVerifiedCritic",
    "verified_action",
    "verified_continuation",
    "completes",
    "FULL_REWARD",
]

#: MiniWoB++'s reward for a task done right (raw, before the time discount).
FULL_REWARD = 1.0

#: Seconds between the two looks that tell a page that moves by itself (timers, animation).
SETTLE_CHECK_S = 0.3


def completes(reward: float) -> bool:
    """Whether an episode that ended with ``reward`` (MiniWoB++'s raw reward) did the task in
    full. Evaluation counts any positive reward a success, as MiniWoB++ results do; training
    data and credit ask for the whole task (a partly right checkbox list is positive too)."""
    return reward >= FULL_REWARD - 1e-9


@dataclass(frozen=True)
class SearchConfig:
    """Bounds of one search.

    Attributes:
        max_depth: most actions after the starting state.
        node_budget: most actions executed in one search (each costs ~0.1 s of browser time).
        branch: most candidates tried at each state, best first.
    """

    max_depth: int = 8
    node_budget: int = field(default=40, metadata={"help": "actions tried per search"})
    branch: int = 8

    def __post_init__(self) -> None:
        for name in ("max_depth", "node_budget", "branch"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"SearchConfig.{name} must be a positive integer, got {value!r}")


@dataclass
class SearchResult:
    """What a search found.

    Attributes:
        actions: the actions that completed the task (None: none found within the budget).
        observations: the observation each of ``actions`` was chosen on.
        nodes: actions executed.
        reason: why nothing was found (empty when found).
    """

    actions: list[Action] | None
    observations: list[Observation] = field(default_factory=list)
    nodes: int = 0
    reason: str = ""

    @property
    def found(self) -> bool:
        return self.actions is not None


def page_key(obs: Observation) -> str:
    """The page's content regardless of element order and ids: what "did anything change?"
    compares when the device shuffles every observation."""
    from collabui.devices.simplify import page_key as tree_key

    return tree_key(obs.extra.get("tree"), obs.text)


def screen_digest(text: str) -> str:
    """Digest of an observation text; a replay is trusted only when its digest matches."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


class Replayer:
    """One MiniWoB++ browser that rebuilds recorded states: ``reset(seed)`` + the executed prefix.

    Args:
        env: a MiniWoBEnv to drive (closed by :meth:`close` only when created here).
        env_options: browser options for the MiniWoBEnv created when ``env`` is None.
    """

    def __init__(self, env: Any = None, **env_options: Any) -> None:
        if env is None:
            from collabui.devices.miniwob import MiniWoBEnv

            env = MiniWoBEnv("click-button", **env_options)
            self._owned = True
        else:
            self._owned = False
        self.env = env
        self.replays = 0
        self.actions = 0
        self.task_text = ""  # the live task of the last reset (it names the password, if any)
        # (observation, action) of every action since the last reset: what the browser did to
        # reach the state it stands at (a search must not undo the prefix's ticks).
        self.trail: list[tuple[Observation, Action]] = []
        self._now: Observation | None = None

    def start(self, task: str, seed: int, prefix: Sequence[Action] = ()) -> Observation | None:
        """The observation after ``reset(seed)`` and ``prefix``; None when the prefix ends the
        episode (the recorded step cannot be reached)."""
        self.replays += 1
        obs = self.env.reset(seed=seed, options={"task_name": task})
        self.task_text = obs.task or ""
        self.trail, self._now = [], obs
        for action in prefix:
            out = self.act(action)
            if out.done:
                return None
            obs = out.observation
        return obs

    def act(self, action: Action) -> StepOutcome:
        self.actions += 1
        out = self.env.act(self.live(action))
        if self._now is not None:
            self.trail.append((self._now, action))
        self._now = None if out.done else out.observation
        return out

    def clicked(self) -> frozenset[str]:
        """The clicks since the last reset, named as the history names them."""
        return frozenset(name for obs, action in self.trail if (name := _click_name(action, obs)))

    def live_password(self) -> str | None:
        """The one password the live task names (None: none, or several)."""
        from collabui.redaction import task_passwords

        found = set(task_passwords(self.task_text))
        return found.pop() if len(found) == 1 else None

    def live(self, action: Action) -> Action:
        """``action`` as typed now: :data:`~collabui.redaction.TASK_PASSWORD` becomes the live
        task's password (the trace recorded only that it was that password)."""
        if getattr(action, "content", None) != TASK_PASSWORD or self.live_password() is None:
            return action
        return action.replace(content=self.live_password())

    def close(self) -> None:
        if self._owned:
            self.env.close()

    def __enter__(self) -> Replayer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _signature(element: dict[str, Any]) -> tuple[str, str, str]:
    return (element["tag"], element["full_text"], element["context"])


def map_action(action: Action, tree: Any, other_tree: Any) -> Action | None:
    """``action`` (ids of ``tree``) with its element's id in ``other_tree``, another rendering
    of the same page; None when that element is not uniquely identified there."""
    element_id = getattr(action, "element_id", None)
    if element_id is None:
        return action
    mine = [e for e in flat_elements(tree) if e["id"] == element_id]
    if len(mine) != 1:
        return None
    if mine[0]["dom"] is not None:  # the device's own identity of the element
        matches = [e for e in flat_elements(other_tree) if e["dom"] == mine[0]["dom"]]
    else:
        matches = [e for e in flat_elements(other_tree) if _signature(e) == _signature(mine[0])]
    if len(matches) != 1:
        return None  # twins (two "yes" buttons) cannot be told apart by their text alone
    return WEB.from_dict({**action.to_dict(), "element_id": matches[0]["id"]})


def _on_page(action: Action, seen: Observation | None, now: Observation) -> Action | None:
    """``action``, chosen on ``seen``, in the ids of ``now`` (another rendering of that page; a
    device that shuffles draws new ids for every observation); as it is without a tree."""
    before, after = (seen.extra.get("tree") if seen else None), now.extra.get("tree")
    if before is None or after is None or seen is now:
        return action
    return map_action(action, before, after)


# --------------------------------------------------------------------------- search


#: An action and the page it was chosen on: its ids are that page's (a shuffling device draws new
#: ids for every observation, so a replay re-reads them from the page it meets).
Step = tuple[Observation | None, Action]


class _Search:
    """Depth-first search with a live browser state (see :func:`search`)."""

    def __init__(self, replayer: Replayer, task: str, seed: int, prefix: Sequence[Action],
                 config: SearchConfig) -> None:
        self.rep, self.task, self.seed, self.prefix = replayer, task, seed, list(prefix)
        self.config = config
        self.nodes = 0
        self.live: list[Step] | None = None  # the path the browser currently stands at
        self.page: Observation | None = None  # what the browser shows there (perhaps in other ids)
        self.diverged = False
        self.assumed = False  # an action that changed nothing visible was assumed to change nothing

    def _goto(self, path: list[Step], expected: Observation) -> Observation | None:
        """The browser at ``path``: the page it shows (``expected``, perhaps in other ids); None
        when a replay does not rebuild that page (then the search stops trusting this seed)."""
        if self.live == path:
            return self.page
        now = _replay(self.rep, self.task, self.seed, self.prefix, path)
        if now is None or page_key(now) != page_key(expected):
            self.diverged = True
            return None
        self.live, self.page = list(path), now
        return now

    def run(self, path: list[Step], obs: Observation, depth: int,
            clicked: frozenset[str] = frozenset()) -> list[Step] | None:
        if depth >= self.config.max_depth:
            return None
        history = [*self.prefix, *(a for _, a in path)]
        # An element clicked once on this path is not clicked again: a second click undoes a
        # toggle (a checkbox ticked, a section opened) and spends the budget on detours.
        ranked = [a for a in rank_candidates(obs.task or "", obs, history) if _click_name(a, obs) not in clicked]
        for action in ranked[: self.config.branch]:
            if self.nodes >= self.config.node_budget or self.diverged:
                return None
            page = self._goto(path, obs)
            live = _on_page(action, obs, page) if page is not None else None
            if live is None:
                if page is None:
                    return None
                continue  # the element is not told apart on this rendering
            out = self.rep.act(live)
            self.nodes += 1
            step: Step = (page, live)
            if out.done:
                self.live = None
                if completes(out.reward):
                    return [step]
                continue
            if page_key(out.observation) == page_key(obs):
                # A wasted step, not progress. The browser is taken to stand at ``path`` still
                # (shown in new ids) instead of rebuilding it: most tried clicks change nothing,
                # and each rebuild replays the whole path. A hidden change would show when the
                # found path is replayed clean (search() confirms it).
                self.live, self.page, self.assumed = list(path), out.observation, True
                continue
            self.live, self.page = [*path, step], out.observation
            name = _click_name(live, page)
            rest = self.run([*path, step], out.observation, depth + 1, clicked | {name} if name else clicked)
            if rest is not None:
                return [step, *rest]
        return None


def _replay(replayer: Replayer, task: str, seed: int, prefix: Sequence[Action],
            path: Sequence[Step]) -> Observation | None:
    """The page after ``reset(seed)``, ``prefix`` and ``path``; None when a step ends the
    episode or its element is not found (see :func:`_walk`)."""
    done, last = _walk(replayer, task, seed, prefix, path)
    return None if last is None or last.done or len(done) < len(path) else last.observation


def _walk(replayer: Replayer, task: str, seed: int, prefix: Sequence[Action],
          path: Sequence[Step]) -> tuple[list[Step], StepOutcome | None]:
    """Replay ``reset(seed)`` + ``prefix`` + ``path``, each step's action in the ids of the page
    it meets: the steps executed, as executed, and the last outcome. It stops early when a
    step's element is not found or the episode ends (no outcome: the prefix ended it). An
    empty path gives the reset page as a non-final outcome."""
    obs = replayer.start(task, seed, prefix)
    if obs is None:
        return [], None
    done: list[Step] = []
    last = StepOutcome(obs, 0.0, False, {})
    for seen, action in path:
        live = _on_page(action, seen, last.observation)
        if live is None:
            break
        done.append((last.observation, live))
        last = replayer.act(live)
        if last.done:
            break
    return done, last


def _click_name(action: Action, obs: Observation) -> str | None:
    """A click as the history names it (by the element's screen line and label, which survive
    the ids a re-rendered page draws anew); None for any other action."""
    return history_entry(action, obs) if isinstance(action, web.Click) else None


def search(replayer: Replayer, task: str, seed: int, prefix: Sequence[Action] = (), *,
           start: Observation | None = None, config: SearchConfig | None = None) -> SearchResult:
    """Find actions that complete ``task`` (MiniWoB++ name) from ``reset(seed)`` + ``prefix``.

    Args:
        replayer: the browser to search with.
        start: the observation at that state when the browser already stands there (saves a
            replay); otherwise the state is rebuilt first.
        config: search bounds.

    The actions returned are in the ids of the observations returned with them (the pages a
    clean replay of them meets).
    """
    config = config or SearchConfig()
    s = _Search(replayer, task, seed, prefix, config)
    if start is None:
        start = replayer.start(task, seed, prefix)
        if start is None:
            return SearchResult(None, reason="the prefix ends the episode")
    s.live, s.page = [], start
    # The browser stands after the prefix: its clicks count as made (a second click on a box
    # the prefix ticked unticks it, and a search from part-way through a checkbox page spent
    # its budget undoing the prefix: click-checkboxes seed 1001 after one tick).
    found = s.run([], start, 0, replayer.clicked())
    if found is None:
        why = ("the replayed page differed from the first visit" if s.diverged else
               f"no completion within {config.max_depth} actions / {config.node_budget} tries")
        return SearchResult(None, nodes=s.nodes, reason=why)
    if len(found) > 1 or s.assumed:
        shortest = _shortest_steps(replayer, task, seed, prefix, found, confirm=s.assumed)
        if shortest is None:
            return SearchResult(None, nodes=s.nodes, reason="the found path did not complete the task replayed clean")
        found = shortest
    return SearchResult([a for _, a in found], [o for o, _ in found], s.nodes)


def _shortest(replayer: Replayer, task: str, seed: int, prefix: Sequence[Action],
              actions: list[Action], observations: list[Observation]) -> tuple[list[Action], list[Observation]]:
    """``actions`` (chosen on ``observations``; none given: on pages in the same ids) without
    the steps the task does not need (see :func:`_shortest_steps`)."""
    steps: list[Step] = list(zip(observations or [None] * len(actions), actions, strict=True))
    kept = _shortest_steps(replayer, task, seed, prefix, steps) or steps
    return [a for _, a in kept], [o for o, _ in kept if o is not None]


def _shortest_steps(replayer: Replayer, task: str, seed: int, prefix: Sequence[Action], steps: list[Step],
                    *, confirm: bool = False) -> list[Step] | None:
    """``steps`` without the ones the task does not need: depth-first search keeps detours
    (choosing an option and then the blank one again), and a detour kept as a demonstration
    teaches a wrong step as a right one. Drops one step at a time while the rest still
    completes the task, then pairs of equal actions: a checkbox ticked and unticked, or a
    section opened and closed, undoes itself, and no single removal can see that (measured
    on the recipe's search: 8 of 44 click-collapsible-2 paths kept such a pair). Each try is a
    clean replay that finds every kept step's element on the page it meets (by the device's
    identity of the element), so the cut works on shuffled pages too (with the ids of the
    search's pages it never did: 0 of 14 paths shortened where 2 of 15 were unshuffled).
    ``confirm``: first replay all of ``steps`` (None when they do not complete the task)."""
    if confirm:
        replayed = _completes(replayer, task, seed, prefix, steps)
        if replayed is None:
            return None
        steps = replayed
    i = 0
    while i < len(steps) - 1:
        shorter = _completes(replayer, task, seed, prefix, steps[:i] + steps[i + 1:])
        if shorter is not None:
            steps = shorter
        else:
            i += 1
    i = 0
    while i < len(steps) - 1:
        again = [j for j in range(i + 1, len(steps)) if _same(steps[j], steps[i])]
        shorter = (_completes(replayer, task, seed, prefix, steps[:i] + steps[i + 1:again[0]] + steps[again[0] + 1:])
                   if again else None)
        if shorter is not None:
            steps = shorter
        else:
            i += 1
    return steps


def _same(a: Step, b: Step) -> bool:
    """The same action on the same element (ids differ between the pages of a shuffling device)."""
    (page_a, act_a), (page_b, act_b) = a, b
    return _on_page(act_a, page_a, page_b) == act_b if page_b is not None else act_a == act_b


def _completes(replayer: Replayer, task: str, seed: int, prefix: Sequence[Action],
               steps: Sequence[Step]) -> list[Step] | None:
    """``steps`` as a clean replay from the seed's state executes them (each action in the ids of
    the page it met) when they complete the task (the last one, and no earlier one, ends the
    episode with the full reward), else None."""
    done, last = _walk(replayer, task, seed, prefix, steps)
    ok = last is not None and last.done and len(done) == len(steps) and completes(last.reward)
    return done if ok else None


# --------------------------------------------------------------------------- the critic


def _miniwob_task(env: str | None) -> str | None:
    if not env or not env.startswith("miniwob/"):
        return None
    return env.split("/", 1)[1]


#: Browser settings that change what a replay shows (see BrowserConfig).
_PAGE_KEYS = ("element_format", "shuffle_elements", "shuffle_seed")


class EnvVerifiedCritic(Critic):
    """Scores a recorded MiniWoB++ step by replaying it (critic spec ``verified``).

    First a search from the rebuilt step finds a completion of L actions (none found: abstain,
    nothing is known to be right). Then for each distinct parsed proposal: rebuild the state,
    execute it, and search on. Score 1.0: it completed the task, or the task was completed
    within L - 1 further actions. 0.0: it ended the episode unrewarded, or no completion that
    short was found (a wasted or harmful step). Unparsable proposals score 0.0. Abstains
    (None) on non-MiniWoB++ or unseeded steps, pages that change by themselves and replays that
    do not rebuild the recorded page.

    The first action of the completion found from the step's own state is in the label's
    rationale (``{"verified_action": {...}, "continuation": [...]}``): a target for the step
    even when every agent was wrong.

    Args:
        replayer: the browser to replay with (one is created, and closed by ``close()``, if None).
        config: search bounds for each continuation.
        env_options: browser options for the replayer created here.
    """

    name = "verified"

    def __init__(self, *, replayer: Replayer | None = None, config: SearchConfig | None = None,
                 **env_options: Any) -> None:
        self._replayer = replayer
        self._env_options = env_options
        # Replayers of other page settings (shuffled, text-first), made when a trace needs one.
        self._others: dict[tuple[Any, ...], Replayer] = {}
        self.config = config or SearchConfig()
        self._dynamic: dict[str, bool] = {}
        self.counts = {"steps": 0, "labelled": 0, "abstained": 0, "replay_differs": 0}

    @property
    def replayer(self) -> Replayer:
        if self._replayer is None:
            self._replayer = Replayer(**self._env_options)
        return self._replayer

    def close(self) -> None:
        if self._replayer is not None:
            self._replayer.close()
        for other in self._others.values():
            other.close()
        self._others.clear()

    def _replayer_for(self, device: Mapping[str, Any]) -> Replayer:
        """The replayer that shows pages as the recorded device did: same format, same shuffle
        (the shuffle derives from the task, the seed and the observation count, so a replay of
        the same actions sees the same ids). Traces without device settings use the default."""
        default = self.replayer
        config = default.env.config
        wanted = {k: device.get(k, getattr(config, k)) for k in _PAGE_KEYS}
        if all(getattr(config, k) == v for k, v in wanted.items()):
            return default
        key = tuple(sorted(wanted.items()))
        if key not in self._others:
            self._others[key] = Replayer(**{**self._env_options, **wanted})
        return self._others[key]

    def score(self, ctx: StepContext) -> ScoreMatrix:
        self.counts["steps"] += 1
        verdict = self._verdict(ctx)
        if isinstance(verdict, str):
            self.counts["abstained"] += 1
            self.counts["replay_differs"] += verdict.startswith("abstain: the replayed page")
            return ScoreMatrix([[None] * ctx.m for _ in range(ctx.n)], [[verdict] * ctx.m for _ in range(ctx.n)])
        self.counts["labelled"] += 1
        return verdict

    def _verdict(self, ctx: StepContext) -> ScoreMatrix | str:
        task = _miniwob_task(ctx.env)
        if task is None or ctx.seed is None or ctx.screen is None:
            return "abstain: not a seeded MiniWoB++ step"
        if self._moves_by_itself(task, ctx.seed):
            return f"abstain: the {task} page changes by itself (timer or animation)"
        prefix = [to_action(a, WEB) for a in ctx.prefix]
        if any(_masked(a) for a in prefix):
            return "abstain: a password typed before this step is masked in the trace (not replayable)"
        replayer = self._replayer_for(ctx.device)
        start = replayer.start(task, ctx.seed, prefix)
        if _stands_in(prefix, ctx) and replayer.live_password() is None:
            return "abstain: the trace typed the task's password, and the live task names no single one"
        if start is None or screen_digest(_as_recorded(start.text, replayer)) != screen_digest(ctx.screen):
            return "abstain: the replayed page differs from the recorded one"
        # A completion from the step's own state sets the bar: L actions are known to suffice.
        known = search(replayer, task, ctx.seed, prefix, start=start, config=self.config)
        if not known.found:
            return f"abstain: nothing found to complete the task ({known.reason})"
        bar = len(known.actions or [])
        outcomes: dict[Any, tuple[float | None, str]] = {}
        for i in range(ctx.n):
            for j in range(ctx.m):
                action = ctx.action(i, j)
                if isinstance(action, Unknown) or action.key() in outcomes:
                    continue
                outcomes[action.key()] = ((None, "a masked password: what was typed is not known")
                                          if _masked(action) else
                                          self._try(replayer, task, ctx.seed, prefix, action, bar))
        return _as_recorded_labels(self._matrix(ctx, outcomes, known), replayer)

    def _moves_by_itself(self, task: str, seed: int) -> bool:
        """Look at the task's first page twice, SETTLE_CHECK_S apart, text and pixels (a moving
        target may have no text at all); cached per task."""
        if task not in self._dynamic:
            import time

            env = self.replayer.env
            plain = env.config
            env.config = dataclasses.replace(plain, screenshots=True)
            try:
                first = self.replayer.start(task, seed)
                time.sleep(SETTLE_CHECK_S)
                second = env.observe()
            finally:
                env.config = plain
            self._dynamic[task] = (first is None or page_key(first) != page_key(second)
                                   or first.screenshot != second.screenshot)
        return self._dynamic[task]

    def _try(self, replayer: Replayer, task: str, seed: int, prefix: list[Action], action: Action,
             bar: int) -> tuple[float, str]:
        """1.0 when ``action`` completes the task, or leads to a completion within ``bar - 1``
        more actions (it makes progress as fast as the known completion); else 0.0."""
        start = replayer.start(task, seed, prefix)
        if start is None:
            return 0.0, "the replay ended early"
        out = replayer.act(action)
        if out.done:
            return (1.0, "completes the task") if completes(out.reward) else (0.0, "ends the episode without the full reward")
        if page_key(out.observation) == page_key(start):
            # A step that changes nothing is wasted even when the task stays completable: the
            # search's completion need not be the shortest, so the bar alone would let it pass.
            return 0.0, "changed nothing on the page"
        if bar <= 1:
            return 0.0, "the task can be completed in one action; this one did not"
        config = dataclasses.replace(self.config, max_depth=bar - 1)
        rest = search(replayer, task, seed, [*prefix, action], start=out.observation, config=config)
        if rest.found:
            return 1.0, f"completed after it by {' '.join(a.to_call() for a in rest.actions or [])}"
        return 0.0, f"no completion within {bar - 1} more actions (one is known from this step)"

    def _matrix(self, ctx: StepContext, outcomes: dict[Any, tuple[float | None, str]],
                known: SearchResult) -> ScoreMatrix:
        scores: list[list[float | None]] = []
        reasons: list[list[str]] = []
        for i in range(ctx.n):
            row = [outcomes.get(ctx.action(i, j).key(), (0.0, "unparsable proposal"))
                   if not isinstance(ctx.action(i, j), Unknown) else (0.0, "unparsable proposal")
                   for j in range(ctx.m)]
            scores.append([value for value, _ in row])
            reasons.append([why for _, why in row])
        rationale = json.dumps({"verified_action": (known.actions or [])[0].to_dict(),
                                "continuation": [a.to_dict() for a in known.actions or []]})
        return ScoreMatrix(scores, reasons, rationale)


def _stands_in(prefix: Sequence[Action], ctx: StepContext) -> bool:
    """Whether the replay must type the live task's password (before or at this step)."""
    entries = [ctx.action(i, j) for i in range(ctx.n) for j in range(ctx.m)]
    return any(getattr(a, "content", None) == TASK_PASSWORD for a in [*prefix, *entries])


def _as_recorded(text: str, replayer: Replayer) -> str:
    """A replayed page's text masked as the episode recorded it: the live task's passwords
    (learned from the task before anything was typed) become the mask wherever they show."""
    from collabui.redaction import Redactor

    redactor = Redactor()
    redactor.learn_task(replayer.task_text)
    return redactor.text(text)


def _as_recorded_labels(matrix: ScoreMatrix, replayer: Replayer) -> ScoreMatrix:
    """Labels that hold no password the trace masked: the reasons (continuations as calls) with
    the live task's password masked, the verified actions typing it as the stand-in
    :data:`~collabui.redaction.TASK_PASSWORD` (a later replay types it again)."""
    password = replayer.live_password()
    if password is None:
        return matrix

    def hide(action: dict[str, Any]) -> dict[str, Any]:
        return {**action, "content": TASK_PASSWORD} if action.get("content") == password else action

    data = json.loads(matrix.rationale or "{}")
    rationale = json.dumps({"verified_action": hide(data["verified_action"]),
                            "continuation": [hide(a) for a in data["continuation"]]})
    reasons = [[_as_recorded(r, replayer) for r in row] for row in matrix.reasons]
    return ScoreMatrix([list(row) for row in matrix.scores], reasons, rationale)


def _masked(action: Action) -> bool:
    """Whether the trace masked what ``action`` typed (a password: see collabui.redaction); a
    replay would type the mask itself, so such steps are never scored."""
    return PASSWORD_MASK in str(getattr(action, "content", "") or "")


def verified_action(label: dict[str, Any]) -> dict[str, Any] | None:
    """The action the search found for a labelled step when no proposal was right (else None)."""
    action = _rationale(label).get("verified_action")
    return dict(action) if isinstance(action, dict) else None


def verified_continuation(label: dict[str, Any]) -> list[dict[str, Any]]:
    """The actions of the completion the search found from a labelled step (empty if none)."""
    plan = _rationale(label).get("continuation")
    return [dict(a) for a in plan if isinstance(a, dict)] if isinstance(plan, list) else []


def _rationale(label: dict[str, Any]) -> dict[str, Any]:
    """A verified label's rationale (written by ``EnvVerifiedCritic._matrix``), ``{}`` if unreadable."""
    try:
        data = json.loads(label.get("rationale") or "{}")
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}

