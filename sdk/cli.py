"""The ``collabui`` command line.

``collabui run``   run a team on an environment (MiniWoB++ task or any URL), with a live view
``collabui envs``  list the environments
``collabui bench`` time a team step against its bound (see ``collabui.bench``)

Options of ``run`` are generated from ``TeamConfig`` so the API and the CLI never drift.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from collections.abc import Collection, Sequence

from collabui.config import TeamConfig
from collabui.errors import CollabUIError, ConfigError

__all__ = ["main", "build_parser"]

# CLI flag names that differ from the dataclass field names (the documented flags).
_FLAG_NAMES = {"n_agents": "agents"}
_SKIP = {"batch_fallback_s"}


def _floats(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers like 0.1,0.3, got {text!r}") from None


def _names(text: str) -> tuple[str | None, ...]:
    return tuple(None if x in ("", "none", "base") else x for x in text.split(","))


def _add_team_options(parser: argparse.ArgumentParser, *, skip: Collection[str] = ()) -> None:
    """One flag per TeamConfig field (except ``skip``: fields the command decides itself)."""
    defaults = TeamConfig()
    for f in dataclasses.fields(TeamConfig):
        if f.name in _SKIP or f.name in skip:
            continue
        flag = "--" + _FLAG_NAMES.get(f.name, f.name).replace("_", "-")
        help_text = f.metadata.get("help", "")
        default = getattr(defaults, f.name)
        if f.name == "temperatures":
            parser.add_argument(flag, dest=f.name, type=_floats, default=None, help=help_text)
        elif f.name == "adapters":
            parser.add_argument(flag, dest=f.name, type=_names, default=None, help=help_text)
        elif isinstance(default, bool):
            parser.add_argument(flag, dest=f.name, action="store_true", help=help_text)
        elif f.name == "seed":
            parser.add_argument(flag, dest=f.name, type=int, default=default, help=help_text + " (also the first episode's seed)")
        else:
            parser.add_argument(flag, dest=f.name, type=type(default), default=default, help=f"{help_text} (default {default})")


def team_config_from_args(args: argparse.Namespace) -> TeamConfig:
    """Build a TeamConfig from parsed ``run`` arguments."""
    fields = {f.name for f in dataclasses.fields(TeamConfig)} - _SKIP
    return TeamConfig(**{name: getattr(args, name) for name in fields})


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="collabui", description="CollabUIAgents: a team of LLM agents that operates browsers and phones.")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run a team on an environment")
    where = run.add_mutually_exclusive_group(required=True)
    where.add_argument("--env", help="environment name, e.g. miniwob/click-button (see `collabui envs`)")
    where.add_argument("--url", help="any web page to operate (with --task)")
    run.add_argument("--task", help="the task text (required with --url; overrides the env's task)")
    run.add_argument("--model", default="smollm2", help="smollm2 | smollm2-trained | trained:FOLDER | hf:PATH | "
                     "openai:MODEL@BASE_URL | random | lexical (default smollm2)")
    run.add_argument("--episodes", type=int, default=1, help="number of episodes (seeds seed, seed+1, ...)")
    run.add_argument("--trace-dir", default=None, help="write one JSONL trace per episode here")
    run.add_argument("--serial", help="Android phone serial (with --env android; default $ANDROID_SERIAL)")
    run.add_argument("--app-allowlist", help="comma-separated apps open_app may launch (phones)")
    run.add_argument("--quiet", action="store_true", help="only print the summary")
    run.add_argument("--guided-json", action="store_true",
                     help="constrain answers to the action space's JSON schema (vLLM structured outputs on "
                          "openai: servers, llguidance for local models)")
    _add_team_options(run)
    from collabui.eval_cli import add_eval_command, add_page_options

    add_page_options(run)
    sub.add_parser("envs", help="list the environments")
    sub.add_parser("devices", help="list attached Android phones (adb)")
    from collabui.training.cli import add_train_commands

    add_train_commands(sub)
    add_eval_command(sub)
    from collabui.serving.serve_cli import add_serve_command

    add_serve_command(sub)
    from collabui.bench import add_bench_command

    add_bench_command(sub)
    return parser


def _cmd_envs() -> int:
    from collabui.devices.registry import list_envs

    for name in list_envs():
        print(name)
    return 0


def _cmd_devices() -> int:
    from collabui.devices.phones import list_phones

    phones = list_phones()
    if not phones:
        print("no phone attached; connect one over USB (enable USB debugging) or `adb connect HOST:PORT`")
    for phone in phones:
        print(f"{phone.serial}\t{phone.state}\t{phone.model or ''}")
    return 0


def _make_device(args: argparse.Namespace, config: TeamConfig):
    from collabui.devices.registry import make_env

    page = _page_options(args)
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


def _page_options(args: argparse.Namespace) -> dict[str, object]:
    """``--element-format`` / ``--shuffle-elements`` as browser options (web pages only)."""
    page = {"element_format": args.element_format, "shuffle_elements": args.shuffle_elements}
    if args.env and args.env != "web" and not args.env.startswith("miniwob/"):
        if args.shuffle_elements or args.element_format not in ("auto", "html"):
            raise ConfigError("--element-format and --shuffle-elements apply to web pages "
                              "(--url, miniwob/...); this environment shows its own element list")
        return {}
    if args.element_format == "auto":
        from collabui.models.spec import model_element_format

        page["element_format"] = model_element_format(args.model)
    return page


def _cmd_run(args: argparse.Namespace) -> int:
    from collabui.models.spec import load_model
    from collabui.team import CollabAgentTeam, _resolve_topology
    from collabui.view import LiveView

    if args.episodes < 1:
        raise ConfigError(f"--episodes must be >= 1, got {args.episodes}")
    config = team_config_from_args(args)
    _resolve_topology(config)  # an invalid topology fails before Chromium or the model start
    view = LiveView(quiet=args.quiet)
    device = _make_device(args, config)  # fail fast on bad env / missing Chromium, before the model loads
    # The device decides the action space (miniwob-mobile and android take mobile actions).
    config = dataclasses.replace(config, action_space=device.action_space.name)
    try:
        view.status(f"loading model {args.model} ...")
        t0 = time.perf_counter()
        model = load_model(args.model, **({"guided_json": config.action_space} if args.guided_json else {}))
        view.status(f"model ready in {time.perf_counter() - t0:.1f}s")
        team = CollabAgentTeam(model, config=config)
        view.team(team)
        results = []
        for k in range(args.episodes):
            seed = None if config.seed is None else config.seed + k
            view.episode_start(k, args.episodes, args.env or args.url, seed)
            result = team.run(args.task, device, seed=seed, trace=args.trace_dir,
                              env_name=args.env or args.url, on_step=view.step)
            view.episode_end(result)
            results.append(result)
        view.summary(results)
    finally:
        device.close()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    # Only `train dpo` takes extra flags (every TRL DPOConfig field); elsewhere they are errors.
    args, rest = parser.parse_known_args(argv)
    if rest and not (args.command == "train" and args.train_command in ("dpo", "sft")):
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    try:
        if args.command == "train":
            from collabui.training.cli import run_train_command

            return run_train_command(args, rest)
        if args.command == "eval":
            from collabui.eval_cli import run_eval_command

            return run_eval_command(args)
        if args.command == "serve":
            from collabui.serving.serve_cli import run_serve_command

            return run_serve_command(args)
        if args.command == "bench":
            from collabui.bench import run_bench_command

            return run_bench_command(args)
        if args.command == "envs":
            return _cmd_envs()
        if args.command == "devices":
            return _cmd_devices()
        return _cmd_run(args)
    except CollabUIError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
