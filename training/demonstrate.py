"""Verified demonstrations at scale: search-found trajectories that the environment rewarded.

For each (training task, seed) the demonstrator searches for a sequence of actions that
completes the task (:func:`collabui.training.verified.search`) and keeps it only when MiniWoB++
gave it the task's full reward, and again on a second replay: every step of such a trajectory is
*verified*. (A positive reward is not enough: click-checkboxes pays for a partly right list.) The
device shuffles element order and ids on every observation (``shuffle_elements``), and each
verified step is written ``renderings`` times, each a fresh observation of the same page with the
action's element mapped to its new id, so that neither position nor a habitual id pays off.
Rows keep the device's element tree, so either text format can be rendered from them later.

Layout of ``out_dir``::

    episodes.jsonl   one line per (task, seed) tried: found?, steps, actions tried, reason
    steps.jsonl      one line per example (verified step x rendering), flushed as found
    dataset/         the examples as a Hugging Face dataset (``datasets.load_from_disk``)
    README.md        the dataset card: what each column means, counts per task, how it was made
    demo_stats.json  totals and timing

Resumable: (task, seed) pairs already in ``episodes.jsonl`` are not searched again. The run
stops by itself after ``minutes`` (the pairs in flight finish first), so it can be given a time
budget and resumed later to grow the data.
"""

from __future__ import annotations

import json
import queue
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from collabui._progress import bars_wanted
from collabui.actions import Action
from collabui.devices.base import Observation
from collabui.errors import ConfigError
from collabui.prompts import history_entry
from collabui.redaction import Redactor
from collabui.training.task_lists import TRAIN_TASKS
from collabui.training.verified import (
    Replayer,
    SearchConfig,
    SearchResult,
    completes,
    map_action,
    search,
)

__all__ = ["DemoConfig", "DemoStats", "generate_demonstrations", "render_trajectory", "map_action",
           "read_steps"]

_ID_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


@dataclass
class DemoConfig:
    """What to search and for how long.

    Attributes:
        out_dir: where the data goes (see the module docstring).
        tasks: MiniWoB++ task names (default: the training list).
        seeds: seeds tried per task, starting at ``seed_start``.
        seed_start: first seed (held apart from evaluation seeds by choosing ranges).
        renderings: observations written per verified step; with ``shuffle`` each one shows the
            page with its element order and ids drawn anew by the device.
        shuffle: the device shuffles element order and ids (``BrowserConfig.shuffle_elements``).
        workers: browsers searching in parallel (threads; one Chromium each).
        minutes: time budget; the run stops cleanly after it.
        search: bounds of each search.
    """

    out_dir: str = field(metadata={"help": "folder: steps.jsonl, dataset/, README.md (resumable)"})
    tasks: tuple[str, ...] = field(default=TRAIN_TASKS, metadata={
        "help": "MiniWoB++ tasks or synthetic pages (synth-forms, ...; default: the training list, "
                "collabui.training.task_lists.TRAIN_TASKS)"})
    seeds: int = field(default=200, metadata={"help": "seeds per task"})
    seed_start: int = field(default=1000, metadata={"help": "first seed"})
    renderings: int = field(default=3, metadata={"help": "observations written per verified step"})
    shuffle: bool = field(default=True, metadata={
        "help": "shuffle element order and ids in every rendering (--no-shuffle: document order, A, B, C ids)"})
    workers: int = field(default=4, metadata={"help": "browsers searching in parallel"})
    minutes: float = field(default=10.0, metadata={"help": "time budget"})
    search: SearchConfig = field(default_factory=SearchConfig)

    def __post_init__(self) -> None:
        self.tasks = tuple(self.tasks)
        if not self.tasks:
            raise ConfigError("DemoConfig.tasks is empty; name at least one MiniWoB++ task")
        for name in ("seeds", "workers"):
            if getattr(self, name) < 1:
                raise ConfigError(f"DemoConfig.{name} must be >= 1, got {getattr(self, name)!r}")
        if self.renderings < 1 or self.minutes <= 0:
            raise ConfigError("DemoConfig.renderings must be >= 1 and minutes > 0")


@dataclass
class DemoStats:
    """Totals of a demonstration run (this call and the resumed earlier ones)."""

    episodes_tried: int = 0
    episodes_found: int = 0
    verified_steps: int = 0
    examples: int = 0
    seconds: float = 0.0
    per_task: dict[str, dict[str, int]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# --------------------------------------------------------------------------- renderings


def _row(base: dict[str, Any], rendering: str, obs: Observation, action: Action) -> dict[str, Any]:
    return {**base, "rendering": rendering, "screen": obs.text, "url": obs.url,
            "viewport": obs.viewport, "tree": json.dumps(obs.extra.get("tree"), ensure_ascii=True),
            "action": action.to_dict()}


def render_trajectory(rep: Replayer, task_name: str, seed: int, found: SearchResult,
                      renderings: int) -> list[dict[str, Any]] | None:
    """Replay a found trajectory once more, writing each step as ``renderings`` observations
    of its page (the device shuffles order and ids anew for each); the ids of each executed
    action are mapped to the page's current rendering. None unless the replay is rewarded
    again (a trajectory is kept only when the environment confirms it twice)."""
    obs = rep.start(task_name, seed)
    rows: list[dict[str, Any]] = []
    history: list[str] = []
    if obs is None:
        return None
    # A row shows what an agent is shown at runtime: collabui.episode masks the passwords an
    # environment's task names (and what is typed into password fields) in the history entries
    # and the page; the target action keeps the value, as the agent must type it.
    redactor = Redactor()
    redactor.learn_task(obs.task or "")
    actions = found.actions or []
    for t, (seen, searched) in enumerate(zip(found.observations, actions, strict=True)):
        # The search saw the page with its own ids; this replay's observations carry others.
        action = map_action(searched, seen.extra.get("tree"), obs.extra.get("tree"))
        if action is None:
            return None
        base = {"task_name": task_name, "seed": seed, "t": t, "steps": len(actions),
                "task": obs.task or "", "history": list(history), "verified_reward": 1.0,
                "source": "search"}
        rows.append(_row(base, "page", redactor.observation(obs), action))
        current_action, current_obs = action, obs
        for k in range(renderings - 1):
            again = rep.env.observe()
            mapped = map_action(action, obs.extra.get("tree"), again.extra.get("tree"))
            if mapped is None:
                break
            rows.append(_row(base, f"rendering-{k + 2}", redactor.observation(again), mapped))
            # The DOM carries the last rendering's ids: act with those.
            current_action, current_obs = mapped, again
        out = rep.act(current_action)
        redactor.watch(current_obs)
        redactor.learn([current_action])
        history.append(history_entry(redactor.action(current_action), redactor.observation(current_obs)))
        if out.done:
            return rows if completes(out.reward) and t == len(actions) - 1 else None
        obs = out.observation
    return None


def read_steps(path: str | Path) -> list[dict[str, Any]]:
    """The examples of a ``steps.jsonl`` (a torn last line, from a killed run, is skipped)."""
    from collabui._jsonl import iter_jsonl

    return [row for _, row in iter_jsonl(Path(path), error=ConfigError, torn_tail_ok=True,
                                         fix="delete the broken line, or the file to start over")]


# --------------------------------------------------------------------------- the run


class _Writer:
    """Appends episode and step lines under one lock, flushing each."""

    def __init__(self, out: Path) -> None:
        self.lock = threading.Lock()
        self.episodes = (out / "episodes.jsonl").open("a", encoding="utf-8")
        self.steps = (out / "steps.jsonl").open("a", encoding="utf-8")

    def write(self, episode: dict[str, Any], rows: list[dict[str, Any]]) -> None:
        with self.lock:
            for row in rows:
                self.steps.write(json.dumps(row, ensure_ascii=True) + "\n")
            self.steps.flush()
            # The episode line comes last: a pair counts as done only once its steps are on disk.
            self.episodes.write(json.dumps(episode) + "\n")
            self.episodes.flush()

    def close(self) -> None:
        self.episodes.close()
        self.steps.close()


def _done_episodes(out: Path) -> list[dict[str, Any]]:
    path = out / "episodes.jsonl"
    if not path.is_file():
        return []
    from collabui._jsonl import iter_jsonl

    return [r for _, r in iter_jsonl(path, error=ConfigError, torn_tail_ok=True, fix="delete the broken line")]


#: Seeds a worker searches in a row on one task: switching task reloads the page (0.2-0.5 s
#: on 2 cores), which cost about half of a round-robin run's time.
CHUNK = 8


def _jobs(config: DemoConfig, done: set[tuple[str, int]]) -> queue.Queue[tuple[str, list[int]]]:
    # Round-robin over tasks, a chunk of seeds at a time, so that a time-bounded run covers
    # every task evenly while each worker stays on one page for a while.
    jobs: queue.Queue[tuple[str, list[int]]] = queue.Queue()
    seeds = range(config.seed_start, config.seed_start + config.seeds)
    for first in range(0, len(seeds), CHUNK):
        for task in config.tasks:
            todo = [s for s in seeds[first:first + CHUNK] if (task, s) not in done]
            if todo:
                jobs.put((task, todo))
    return jobs


#: A task whose first this-many searches all fail is given up (its seeds are skipped): the
#: search cannot solve it (e.g. a slider needs dragging) and would only eat the time budget.
GIVE_UP_AFTER = 4
#: MiniWoB++ elements are actionable at once or never: a short timeout keeps dead ends cheap.
SEARCH_ACTION_TIMEOUT_S = 0.5


class _TaskTally:
    """Per-task counts shared by the workers, to give up on tasks the search cannot solve."""

    def __init__(self, done_episodes: list[dict[str, Any]]) -> None:
        self.lock = threading.Lock()
        self.tried: Counter[str] = Counter(e["task_name"] for e in done_episodes)
        self.found: Counter[str] = Counter(e["task_name"] for e in done_episodes if e["found"])

    def hopeless(self, task: str) -> bool:
        with self.lock:
            return self.tried[task] >= GIVE_UP_AFTER and self.found[task] == 0

    def add(self, task: str, found: bool) -> None:
        with self.lock:
            self.tried[task] += 1
            self.found[task] += int(found)


def _worker(config: DemoConfig, jobs: queue.Queue[tuple[str, list[int]]], writer: _Writer,
            deadline: float, progress: Any, errors: list[str], tally: _TaskTally) -> None:
    try:
        with Replayer(action_timeout_s=SEARCH_ACTION_TIMEOUT_S, shuffle_elements=config.shuffle) as rep:
            while time.monotonic() < deadline:
                try:
                    task, seeds = jobs.get_nowait()
                except queue.Empty:
                    return
                for seed in seeds:
                    if time.monotonic() >= deadline:
                        return
                    _demonstrate_one(config, rep, task, seed, writer, progress, tally)
    except Exception as exc:  # a broken browser ends this worker; the others go on
        errors.append(f"{type(exc).__name__}: {exc}")


def _demonstrate_one(config: DemoConfig, rep: Replayer, task: str, seed: int, writer: _Writer,
                     progress: Any, tally: _TaskTally) -> None:
    if tally.hopeless(task):
        progress(False, 0, 0)
        return
    result = search(rep, task, seed, config=config.search)
    rows = (render_trajectory(rep, task, seed, result, config.renderings) or []) if result.actions else []
    found = bool(rows)
    reason = result.reason or ("" if found else "the second replay was not rewarded")
    writer.write({"task_name": task, "seed": seed, "found": found, "steps": len(result.actions or []),
                  "nodes": result.nodes, "reason": reason, "examples": len(rows)}, rows)
    tally.add(task, found)
    progress(found, len(result.actions or []), len(rows))


def generate_demonstrations(config: DemoConfig) -> DemoStats:
    """Search verified trajectories until the seeds or the time budget run out (resumable).

    Returns the totals over everything in ``out_dir`` (earlier resumed runs included) and
    writes the Hugging Face dataset, its card and ``demo_stats.json``.
    """
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from collabui.devices.miniwob import miniwob_tasks, synthetic_tasks

    unknown = sorted(set(config.tasks) - set(miniwob_tasks()) - set(synthetic_tasks()))
    if unknown:
        raise ConfigError(f"unknown MiniWoB++ task(s) {unknown}; run `collabui envs` to list them")
    out = Path(config.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    done = _done_episodes(out)
    jobs = _jobs(config, {(e["task_name"], int(e["seed"])) for e in done})
    tally = _TaskTally(done)
    total = sum(len(seeds) for _, seeds in list(jobs.queue))
    writer = _Writer(out)
    started = time.monotonic()
    deadline = started + config.minutes * 60
    errors: list[str] = []
    counts: Counter[str] = Counter()
    with Progress(TextColumn("[bold]demonstrations"), BarColumn(), TextColumn("{task.completed}/{task.total} pairs"),
                  TextColumn("{task.fields[info]}"), TimeElapsedColumn(), transient=False,
                  disable=not bars_wanted()) as bar:
        ui = bar.add_task("search", total=total, info="")
        lock = threading.Lock()

        def progress(found: bool, steps: int, examples: int) -> None:
            with lock:
                counts.update(found=int(found), steps=steps if found else 0, examples=examples)
                bar.update(ui, advance=1, info=f"{counts['steps']} verified steps, {counts['examples']} examples")

        threads = [threading.Thread(target=_worker, args=(config, jobs, writer, deadline, progress, errors, tally),
                                    name=f"collabui-demo-{k}", daemon=True) for k in range(config.workers)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    writer.close()
    if errors and not counts:
        raise ConfigError(f"every demonstration worker failed: {errors[0]}; check the browser install")
    stats = _summarize(out, time.monotonic() - started)
    _publish(out, config, stats)
    return stats


def _summarize(out: Path, seconds: float) -> DemoStats:

    stats = DemoStats()
    old = out / "demo_stats.json"
    stats.seconds = round(seconds + (json.loads(old.read_text()).get("seconds", 0.0) if old.is_file() else 0.0), 1)
    for ep in _done_episodes(out):
        task = stats.per_task.setdefault(ep["task_name"], {"tried": 0, "found": 0, "verified_steps": 0, "examples": 0})
        task["tried"] += 1
        task["found"] += int(ep["found"])
        task["verified_steps"] += int(ep["steps"]) if ep["found"] else 0
        task["examples"] += int(ep.get("examples", 0))
    stats.episodes_tried = sum(t["tried"] for t in stats.per_task.values())
    stats.episodes_found = sum(t["found"] for t in stats.per_task.values())
    stats.verified_steps = sum(t["verified_steps"] for t in stats.per_task.values())
    stats.examples = sum(t["examples"] for t in stats.per_task.values())
    return stats


def _publish(out: Path, config: DemoConfig, stats: DemoStats) -> None:
    from datasets import Dataset

    rows = read_steps(out / "steps.jsonl") if (out / "steps.jsonl").is_file() else []
    for row in rows:  # a column of mixed dict shapes does not fit Arrow: store actions as JSON
        row["action"] = json.dumps(row["action"], ensure_ascii=False)
    Dataset.from_list(rows).save_to_disk(str(out / "dataset"))
    (out / "demo_stats.json").write_text(json.dumps(stats.to_dict(), indent=1))
    (out / "README.md").write_text(_card(config, stats), encoding="utf-8")


def _card(config: DemoConfig, stats: DemoStats) -> str:
    lines = [
        "# Verified MiniWoB++ demonstrations (collabui)",
        "",
        "Made by `collabui train demonstrate`: for each (task, seed) a search over the page's",
        "candidate actions (best lexical match first) until MiniWoB++ gave the episode its full reward",
        "(+1, not merely a positive one); only such trajectories are kept, so every step here was",
        "verified by the environment.",
        f"Seeds {config.seed_start}..{config.seed_start + config.seeds - 1} per task; "
        f"{config.renderings} renderings per step"
        f"{' (element order and ids shuffled by the device)' if config.shuffle else ''}.",
        "",
        "| column | meaning |",
        "|---|---|",
        "| task_name, seed | the MiniWoB++ task and the reset seed that rebuilds the episode |",
        "| t, steps | the step and the trajectory's length |",
        "| task | the task sentence the agents read |",
        "| history | actions executed before this step (call strings naming the element by its screen line) |",
        "| screen, url, viewport | the page as the agents read it (simplified HTML) |",
        "| tree | the device's element tree of that page (JSON), to render other formats |",
        "| rendering | `page` (the observation the search acted on) or `rendering-k` (another) |",
        "| action | the verified action, JSON (its element id refers to `screen`) |",
        "| verified_reward | the environment's reward of the trajectory (+1, the task's full reward) |",
        "",
        f"Totals: {stats.verified_steps} verified steps, {stats.examples} examples, "
        f"{stats.episodes_found}/{stats.episodes_tried} (task, seed) pairs solved, "
        f"{stats.seconds / 60:.1f} min of search.",
        "",
        "| task | solved / tried | verified steps | examples |",
        "|---|---|---|---|",
    ]
    for task, t in sorted(stats.per_task.items()):
        lines.append(f"| {task} | {t['found']}/{t['tried']} | {t['verified_steps']} | {t['examples']} |")
    return "\n".join(lines) + "\n"
