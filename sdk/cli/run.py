"""``collabui run`` (a team on an environment, with a live view), ``envs`` and ``devices``.

The team's flags are generated from :class:`collabui.config.TeamConfig`; ``--adapters`` is a
trained team's adapter folder (agent ``i`` uses ``agent{i}/``), ``--adapter-names`` names the
adapters a model already serves (an ``openai:`` server started with ``name=path`` adapters).
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from collections.abc import Sequence
from typing import Any

from collabui.approval import APPROVE_CHOICES
from collabui.cli.flags import add_config_flags, config_from_args
from collabui.config import (
    ELEMENT_FORMAT_CHOICES,
    ELEMENT_FORMAT_HELP,
    GUIDED_HELP,
    MODEL_HELP,
    SCREENSHOTS_HELP,
    SHUFFLE_HELP,
    TeamConfig,
)
from collabui.errors import ConfigError
from collabui.models.spec import is_baseline
from collabui.redaction import Secrets, redact_url

__all__ = ["add_commands", "run_command", "add_page_flags", "page_options", "team_config", "ADAPTERS_HELP",
           "refuse_ignored_model_flags"]

ADAPTERS_HELP = "a trained team's adapter folder (agent0/, agent1/, ...) on top of --model"
#: TeamConfig fields `run` takes no flag for (set by the library).
_TEAM_SKIP = ("batch_fallback_s",)
_TEAM_RENAME = {"adapters": "adapter_names"}


def add_page_flags(parser: argparse.ArgumentParser) -> None:
    """``--element-format`` and ``--shuffle-elements``: how web pages are shown to the agents."""
    parser.add_argument("--element-format", choices=ELEMENT_FORMAT_CHOICES, default="auto", help=ELEMENT_FORMAT_HELP)
    parser.add_argument("--shuffle-elements", action="store_true", help=SHUFFLE_HELP)


def add_commands(sub: Any) -> None:
    """Register ``run``, ``envs`` and ``devices`` on the top-level subparsers."""
    run = sub.add_parser("run", help="run a team on an environment")
    where = run.add_mutually_exclusive_group()
    where.add_argument("--env", help="environment name, e.g. miniwob/click-button (see `collabui envs`)")
    where.add_argument("--url", help="any web page to operate (with --task)")
    run.add_argument("--task", help="the task text (required with --url; overrides the env's task)")
    run.add_argument("--model", default="smollm2", help=f"{MODEL_HELP} (default smollm2)")
    run.add_argument("--adapters", dest="adapter_folder", default=None, help=ADAPTERS_HELP)
    run.add_argument("--episodes", type=int, default=1, help="number of episodes (seeds seed, seed+1, ...)")
    run.add_argument("--trace-dir", default=None, help="write one JSONL trace per episode here")
    run.add_argument("--serial", help="Android phone serial (with --env android; default $ANDROID_SERIAL)")
    run.add_argument("--app-allowlist", help="comma-separated apps open_app may launch (phones)")
    run.add_argument("--allow-domain", action="append", dest="allow_domains", metavar="HOST",
                     help="a host the browser may open pages of, subdomains included (repeatable; "
                          "default: the --url's host; MiniWoB++: its own local files only)")
    run.add_argument("--secret", action="append", dest="secrets", metavar="NAME",
                     help="a secret the agents see as <secret:NAME> and the device types for real: its "
                          "value comes from the environment variable NAME, else a hidden prompt (repeatable)")
    run.add_argument("--approve", choices=APPROVE_CHOICES, default=None,
                     help="before a flagged action (submit/pay/send/delete-like click, typing a password, "
                          "another site): ask (y/N on the terminal; no terminal = refuse), always (approve), "
                          "never (refuse). Default: ask on --url and phones, nothing asked on MiniWoB++")
    run.add_argument("--resume", metavar="RUN_ID",
                     help="go on with a stopped run (kill, Ctrl-C, pending approval) where it stopped; "
                          "its other flags come from the run (--approve, --quiet, --secret may be given again)")
    run.add_argument("--checkpoint-db", metavar="PATH", default=None,
                     help="SQLite file of the runs' checkpoints (default $COLLABUI_STATE_DIR/runs.sqlite, "
                          "else the user state folder)")
    run.add_argument("--guided-json", action="store_true", help=GUIDED_HELP)
    add_config_flags(run, TeamConfig, skip=_TEAM_SKIP, rename=_TEAM_RENAME, defaults={"screenshots": True},
                     helps={"seed": "seed of the random DAG and of sampling; also the first episode's seed",
                            "screenshots": SCREENSHOTS_HELP})
    add_page_flags(run)
    sub.add_parser("envs", help="list the environments")
    sub.add_parser("devices", help="list attached Android phones (adb)")


def team_config(args: argparse.Namespace) -> TeamConfig:
    """The TeamConfig of parsed ``run`` flags (``--adapters FOLDER`` gives the per-agent names)."""
    config = config_from_args(TeamConfig, args, skip=_TEAM_SKIP)
    folder = getattr(args, "adapter_folder", None)
    if folder is not None:
        if config.adapters is not None:
            raise ConfigError("give --adapters FOLDER or --adapter-names NAMES, not both")
        from collabui.models.spec import team_adapter_names

        config = dataclasses.replace(config, adapters=team_adapter_names(folder, config.n_agents))
    return config


def page_options(args: argparse.Namespace) -> dict[str, object]:
    """``--element-format`` / ``--shuffle-elements`` as browser options (web pages only)."""
    page: dict[str, object] = {"element_format": args.element_format, "shuffle_elements": args.shuffle_elements}
    if args.env and args.env != "web" and not args.env.startswith("miniwob/"):
        if args.shuffle_elements or args.element_format not in ("auto", "html"):
            raise ConfigError("--element-format and --shuffle-elements apply to web pages "
                              "(--url, miniwob/...); this environment shows its own element list")
        return {}
    if args.element_format == "auto":
        from collabui.models.spec import model_element_format

        page["element_format"] = model_element_format(args.model)
    return page


def refuse_ignored_model_flags(model: str, *, guided_json: bool, adapter_names: Any = None,
                               adapters: Any = None) -> None:
    """A baseline has no decoder and no adapters: ``--guided-json``, ``--adapters`` and
    ``--adapter-names`` would be silently ignored, so they are errors (checked before the
    adapter folder is read, so the error names the real problem)."""
    if not is_baseline(model):
        return
    given = [flag for flag, on in (("--guided-json", guided_json), ("--adapters", adapters),
                                   ("--adapter-names", adapter_names)) if on]
    if given:
        raise ConfigError(f"{' and '.join(given)} would be ignored by the {model!r} baseline (it decodes "
                          "nothing and has no adapters); drop it, or pass a model (smollm2, hf:PATH, openai:...)")


def _refuse_ignored_device_flags(args: argparse.Namespace) -> None:
    """Phone-only flags on a web run would be silently ignored."""
    if args.env == "android":
        return
    given = [flag for flag, value in (("--app-allowlist", args.app_allowlist), ("--serial", args.serial)) if value]
    if given:
        where = f"--url {redact_url(args.url)}" if args.url else f"--env {args.env}"
        raise ConfigError(f"{' and '.join(given)} would be ignored: phones only (--env android), not "
                          f"{where}; drop it (web pages are limited with --allow-domain)")


def _make_device(args: argparse.Namespace, config: TeamConfig) -> Any:
    from collabui.devices.registry import make_env

    page = page_options(args)
    if args.allow_domains:
        if args.env and not args.env.startswith(("miniwob/", "miniwob-mobile/")):
            raise ConfigError("--allow-domain applies to web pages (--url, miniwob/...); on a "
                              "phone limit the apps with --app-allowlist")
        page["allowed_domains"] = tuple(args.allow_domains)
    if args.env == "android":
        if not args.task:
            raise ConfigError("--env android needs --task TEXT: a phone has no built-in task")
        allow = tuple(a.strip() for a in args.app_allowlist.split(",")) if args.app_allowlist else None
        return make_env("android", serial=args.serial, task=args.task, app_allowlist=allow,
                        screenshots=config.screenshots)
    if args.url:
        if not args.task:
            raise ConfigError("--url needs --task TEXT: the team must know what to do on the page")
        return make_env("web", url=args.url, task=args.task, screenshots=config.screenshots, **page)
    return make_env(args.env, screenshots=config.screenshots, **page)


def read_secrets(names: Sequence[str]) -> dict[str, str]:
    """``--secret NAME`` values: the environment variable NAME, else a hidden prompt."""
    import getpass
    import os

    values: dict[str, str] = {}
    for name in names:
        value = os.environ.get(name)
        if value is None:
            try:
                value = getpass.getpass(f"value of secret {name} (not echoed): ")
            except EOFError:
                value = ""
        values[name] = value
    Secrets(values)  # one-line ConfigError for a bad name or an empty value
    return values


def _envs() -> int:
    from collabui.devices.registry import list_envs

    for name in list_envs():
        print(name)
    return 0


def _devices() -> int:
    from collabui.devices.phones import list_phones

    phones = list_phones()
    if not phones:
        print("no phone attached; connect one over USB (enable USB debugging) or `adb connect HOST:PORT`")
    for phone in phones:
        print(f"{phone.serial}\t{phone.state}\t{phone.model or ''}")
    return 0


#: Flags a resumed run takes from the command line; every other one comes from the stored run.
_RESUME_FLAGS = ("approve", "quiet", "secrets", "checkpoint_db", "resume")


def _run_spec(args: argparse.Namespace) -> dict[str, Any]:
    """The run's flags as stored for ``--resume`` (secret names only: values are re-read)."""
    return {k: v for k, v in vars(args).items() if k not in ("resume", "checkpoint_db", "command")}


def _open_run(args: argparse.Namespace) -> tuple[argparse.Namespace, Any, str]:
    """``(flags, checkpoint store, run id)``: a new run, or the stored one of ``--resume``."""
    from collabui.durable import EpisodeStore, default_checkpoint_path
    from collabui.episode import _episode_id

    if not args.resume and not (args.env or args.url):
        raise ConfigError("give --env NAME or --url URL (or --resume RUN_ID to go on with a stopped run)")
    if args.resume and (args.env or args.url):
        raise ConfigError("--resume RUN_ID takes the environment from the run; drop --env/--url")
    if args.resume:
        _refuse_ignored_flags(args)
    store = EpisodeStore(args.checkpoint_db or default_checkpoint_path())
    if not args.resume:  # saved once the run starts (bad flags leave nothing behind)
        return args, store, _episode_id(args.env or redact_url(args.url))
    spec = store.load_run(args.resume)
    if spec is None:
        known = ", ".join(store.runs()[:3]) or "none yet"
        store.close()
        raise ConfigError(f"no run {args.resume!r} in {store.path} (latest: {known}); pass a RUN_ID "
                          "that collabui run printed, and the same --checkpoint-db")
    given = {k: getattr(args, k) for k in _RESUME_FLAGS}
    merged = argparse.Namespace(**{**spec, **{k: v for k, v in given.items() if v not in (None, False)}})
    merged.secrets = args.secrets or spec.get("secrets")
    merged.command = "run"
    return merged, store, args.resume


def _refuse_ignored_flags(args: argparse.Namespace) -> None:
    """``--resume`` runs with the stored flags: any other one given would be silently ignored."""
    sub = argparse.ArgumentParser(prog="collabui").add_subparsers(dest="command")
    add_commands(sub)
    run = sub.choices["run"]
    defaults = vars(run.parse_args(["--resume", args.resume]))
    # Only run's own flags: the top-level parser adds -v/-q and a record of typed flags.
    flags = {a.dest: a.option_strings[0] for a in run._actions if a.option_strings}
    given = [k for k, v in vars(args).items()
             if k in flags and k not in (*_RESUME_FLAGS, "command") and defaults.get(k) != v]
    if given:
        names = [flags[k] for k in sorted(given)]
        raise ConfigError(f"--resume RUN_ID runs with the run's own flags; drop {', '.join(names)} "
                          "(only --approve, --secret, --quiet and --checkpoint-db may be given again)")


def _episode_plan(store: Any, run_id: str, k: int, episodes: int, resuming: bool) -> tuple[str, str | None, bool]:
    """``(episode id, id to resume or None, already finished)`` of episode k of a run."""
    episode_id = run_id if episodes == 1 else f"{run_id}-{k}"
    found = store.episode(episode_id) if resuming else None
    if found is None:
        return episode_id, None, False
    return episode_id, episode_id, found[1] == "finished"


def _run(args: argparse.Namespace) -> int:
    if args.episodes < 1:
        raise ConfigError(f"--episodes must be >= 1, got {args.episodes}")
    args, store, run_id = _open_run(args)
    try:
        return _run_episodes(args, store, run_id)
    finally:
        store.close()


def _run_episodes(args: argparse.Namespace, store: Any, run_id: str) -> int:
    from collabui.cli.view import LiveView
    from collabui.models.spec import load_model
    from collabui.team import CollabAgentTeam, _resolve_topology

    plans = [_episode_plan(store, run_id, k, args.episodes, args.resume is not None) for k in range(args.episodes)]
    if all(finished for _, _, finished in plans):
        raise ConfigError(f"run {run_id} already finished; nothing to resume")
    _refuse_ignored_device_flags(args)
    refuse_ignored_model_flags(args.model, guided_json=args.guided_json, adapter_names=args.adapters,
                               adapters=args.adapter_folder)
    config = team_config(args)
    _resolve_topology(config)  # an invalid topology fails before Chromium or the model start
    secrets = read_secrets(args.secrets or ())
    view = LiveView(quiet=args.quiet)
    device = _make_device(args, config)  # fail fast on bad env / missing Chromium, before the model loads
    # The device decides the action space (miniwob-mobile and android take mobile actions).
    config = dataclasses.replace(config, action_space=device.action_space.name)
    if args.resume is None:
        store.save_run(run_id, _run_spec(args))
    team = None
    try:
        view.status(f"loading model {redact_url(args.model)} ...")
        t0 = time.perf_counter()
        model = load_model(args.model, adapters=args.adapter_folder,
                           **({"guided_json": config.action_space} if args.guided_json else {}))
        view.status(f"model ready in {time.perf_counter() - t0:.1f}s")
        team = CollabAgentTeam(model, config=config)
        view.team(team)
        view.status(f"run {run_id} (if stopped: collabui run --resume {run_id})")
        results: list[tuple[int, Any]] = []
        for k in range(args.episodes):
            seed = None if config.seed is None else config.seed + k
            episode_id, resume, finished = plans[k]
            if finished:
                view.status(f"episode {k + 1}/{args.episodes} ({episode_id}) finished before; skipped")
                continue
            view.episode_start(k, args.episodes, args.env or args.url, seed)
            with team.stream(args.task, device, seed=seed, trace=args.trace_dir, secrets=secrets,
                             env_name=args.env or redact_url(args.url), episode_id=episode_id,
                             approve=args.approve, checkpoint=store, resume=resume) as events:
                for event in events:
                    view.handle(event)
            results.append((k, events.result))
        view.summary([r for _, r in results])
        return _report_errors(view, results, getattr(device, "relaunches", 0))
    finally:
        if team is not None:
            team.close()  # an arbiter the team loaded (--arbiter)
        view.close()
        device.close()


def _report_errors(view: Any, results: Sequence[tuple[int, Any]], relaunches: int) -> int:
    """Name the episodes an error ended; the exit code: 0 none, 1 some (the rest ran).

    Raises:
        DeviceError: no episode could start (unreachable ``--url``, no phone): nothing ran.
    """
    from collabui.errors import DeviceError

    failed = [(k, r) for k, r in results if r.error and r.pending_approval is None]
    if not failed:
        return 0
    if len(failed) == len(results) and all(r.n_steps == 0 for _, r in failed):
        raise DeviceError(f"no episode could start ({len(failed)}/{len(results)} failed at the reset): "
                          f"{failed[0][1].error}")
    for k, result in failed:
        view.status(f"episode {k + 1} ended by an error after {result.n_steps} steps: {result.error}")
    if relaunches:
        view.status(f"the browser was started again {relaunches} time(s); the other episodes ran normally")
    view.status(f"{len(failed)}/{len(results)} episodes ended by an error (exit 1)")
    return 1


def run_command(args: argparse.Namespace) -> int:
    """Run a parsed ``collabui run``, ``envs`` or ``devices``; return the exit code."""
    if args.command == "envs":
        return _envs()
    if args.command == "devices":
        return _devices()
    return _run(args)
