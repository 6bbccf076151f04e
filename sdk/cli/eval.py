"""``collabui eval``: evaluation harnesses and reports.

``collabui eval miniwob``       success rates on MiniWoB++ tasks (flags from MiniWoBEvalConfig and
                                its team's TeamConfig); ``--from RUN_DIR`` repeats a stored run
``collabui eval autowebbench``  step success on AutoWebBench records (team flags from TeamConfig)
``collabui eval compare A B``   per-metric deltas between two results files
``collabui eval team DIR...``   how teams reached their actions (vote margins, kept answers)
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import shlex
import sys
from pathlib import Path
from typing import Any

from collabui.cli.flags import (
    add_config_flags,
    config_argv,
    config_from_args,
    nested_values,
    replace_given,
)
from collabui.cli.run import refuse_ignored_model_flags
from collabui.config import (
    ELEMENT_FORMAT_CHOICES,
    ELEMENT_FORMAT_HELP,
    GUIDED_HELP,
    MODEL_HELP,
    SCREENSHOTS_HELP,
    TeamConfig,
)
from collabui.models.spec import is_baseline
from collabui.redaction import PASSWORD_MASK, redact_url

__all__ = ["add_commands", "run_command", "miniwob_command", "miniwob_config"]

#: Notes (silenced by -q), warnings and errors, on stderr (configured by collabui.cli._log).
log = logging.getLogger(__name__)

#: Flags written in every recorded command line, even at their defaults.
_ALWAYS = ("tasks", "episodes", "model", "concurrency", "team.n_agents", "team.rounds", "team.topology",
           "team.seed", "team.max_steps")
#: `eval miniwob` defaults that differ from the configs': screenshots on; the team's shape
#: left to the model (1x1 for random/lexical, else 4x3) unless given.
_MINIWOB_DEFAULTS = {"team.screenshots": True, "team.n_agents": None, "team.rounds": None}
_MINIWOB_HELPS = {
    "team.n_agents": "agents n (default 4; 1 for random/lexical)",
    "team.rounds": "rounds m (default 3; 1 for random/lexical)",
    "team.seed": "seed of the episodes' pages, of the DAG and of sampling",
    "team.prompt_style": "agents' prompt; auto: the style a trained team was trained for, react for other models",
    "team.screenshots": SCREENSHOTS_HELP,
}


def add_commands(sub: Any) -> None:
    """Register ``eval`` and its subcommands on the top-level subparsers."""
    from collabui.cli.run import ADAPTERS_HELP
    from collabui.evaluation.miniwob import (
        AGENT_SERVING,
        SERVE_AGENTS_HELP,
        SERVE_BACKEND_HELP,
        SERVE_DTYPE_HELP,
        SERVE_DTYPES,
        MiniWoBEvalConfig,
    )
    from collabui.serving.managed import SERVE_BACKENDS

    ev = sub.add_parser("eval", help="evaluate a team or a baseline; compare results")
    esub = ev.add_subparsers(dest="eval_command", required=True)
    p = esub.add_parser("miniwob", help="success rate per MiniWoB++ task and overall (95%% Wilson CIs)")
    add_config_flags(p, MiniWoBEvalConfig, defaults=_MINIWOB_DEFAULTS, helps=_MINIWOB_HELPS, record=True)
    p.add_argument("--from", dest="from_dir", metavar="RUN_DIR", default=None,
                   help="repeat the evaluation stored in this run folder (its run.json); flags given "
                   "with it change those settings; --out defaults to RUN_DIR (finished episodes are kept)")
    p.add_argument("--out", default=None, help="run folder: results.json, summary.md, traces/, episodes.jsonl "
                   "(required unless --from)")
    p.add_argument("--plot", action="store_true", help="also write plot.png (needs matplotlib)")

    c = esub.add_parser("compare", help="print B - A for every metric two results files share; for two "
                        "MiniWoB++ run folders also the paired counts on the same episodes, for two AutoWebBench ones on "
                        "the same element records (exact McNemar)")
    c.add_argument("a", help="results.json of A (the reference)")
    c.add_argument("b", help="results.json of B")
    c.add_argument("--also", nargs=2, action="append", default=[], metavar=("A2", "B2"),
                   help="pool the paired counts with this pair of run folders too (the same two systems on "
                   "another eval seed, or AutoWebBench's other language); repeatable: one paired table and p-value "
                   "over every episode")
    c.add_argument("--out", default=None, help="also write the table: FILE.md (Markdown) or FILE.json")
    c.add_argument("--plot", default=None, metavar="FILE.png",
                   help="also draw A and B side by side per task/action type (needs matplotlib)")
    c.add_argument("--plot-paired", default=None, metavar="FILE.png",
                   help="also draw the paired episodes (pooled with --also): per task those A alone and B alone "
                   "solved, with McNemar p (run folders of MiniWoB++ or AutoWebBench evals; needs matplotlib)")

    d = esub.add_parser("team", help="how teams reached their actions, from their traces: vote margins, "
                        "ties, how often agents keep their own previous answer or repeat a predecessor")
    d.add_argument("folders", nargs="+", metavar="DIR",
                   help="run folders of collabui eval miniwob (or folders of traces); one column each")
    d.add_argument("--out", default=None, help="also write the figures as JSON (with the per-task figures)")
    d.add_argument("--plot", default=None, metavar="FILE.png",
                   help="also draw the figures as bars, one colour per folder (needs matplotlib)")

    a = esub.add_parser("autowebbench", help="step success on AutoWebBench/Mind2Web-format records",
                        description="Run a single agent or a team on each {source, target} record; score the "
                        "published step success (function + element id, element records) and strict "
                        "exact match (all records), per action type.")
    a.add_argument("--data", required=True,
                   help="JSON list of {source, target} records, e.g. ../shared/data/autowebbench/en/ind.json")
    a.add_argument("--model", default="smollm2", help=f"{MODEL_HELP} (default smollm2)")
    a.add_argument("--adapters", default=None, help=ADAPTERS_HELP)
    add_config_flags(a, TeamConfig, skip={"action_space", "adapters", "batch_fallback_s"},
                     defaults={"n_agents": None, "rounds": None},
                     helps={"n_agents": "agents n (default 4; 1 for random/lexical)",
                            "rounds": "rounds m (default 3; 1 for random/lexical)"})
    a.add_argument("--out", required=True,
                   help="run folder (predictions.jsonl, results.json, summary.md); the same folder resumes")
    a.add_argument("--start", type=int, default=0, help="first record, 0-based (default 0)")
    a.add_argument("--limit", type=int, default=None, help="at most this many records (default all)")
    a.add_argument("--guided-json", action="store_true", help=GUIDED_HELP)
    a.add_argument("--element-format", choices=ELEMENT_FORMAT_CHOICES, default="auto",
                   help=ELEMENT_FORMAT_HELP + "; the records' HTML pages are read back and rendered in it")
    a.add_argument("--serve", action="store_true", help="run the model on a vLLM server started for this evaluation "
                   "and stopped with it (a trained bundle: its shared model merged, each agent's LoRA adapter by "
                   "name; needs `collabui serve --setup`): the agents of a round are answered in one batch")
    a.add_argument("--serve-dtype", default="auto", choices=SERVE_DTYPES, help=SERVE_DTYPE_HELP)
    a.add_argument("--serve-agents", default="lora", choices=AGENT_SERVING, help=SERVE_AGENTS_HELP)
    a.add_argument("--serve-backend", default="vllm", choices=SERVE_BACKENDS, help=SERVE_BACKEND_HELP)

    from collabui.evaluation.throughput import ThroughputConfig

    t = esub.add_parser("throughput", help="episodes per hour against worker count (a benchmark: run it on a "
                        "quiet machine)")
    add_config_flags(t, ThroughputConfig, defaults={"team.n_agents": None, "team.rounds": None},
                     helps={k: v for k, v in _MINIWOB_HELPS.items() if k != "team.screenshots"})


def run_command(args: argparse.Namespace) -> int:
    """Run a parsed ``collabui eval ...``; return the exit code."""
    commands = {"miniwob": _miniwob, "compare": _compare, "team": _team, "autowebbench": _autowebbench,
                "throughput": _throughput}
    return commands[args.eval_command](args)


def _throughput(args: argparse.Namespace) -> int:
    from collabui.evaluation.miniwob import default_team
    from collabui.evaluation.throughput import (
        ThroughputConfig,
        format_throughput,
        measure_throughput,
    )

    team = default_team(args.model, **nested_values(ThroughputConfig, "team", args))
    print(format_throughput(measure_throughput(config_from_args(ThroughputConfig, args, team=team))), end="")
    return 0


def miniwob_config(args: argparse.Namespace) -> Any:
    """The MiniWoBEvalConfig of parsed ``eval miniwob`` flags: the stored config of ``--from``
    with the flags typed applied, else the flags (an untyped ``--agents``/``--rounds`` is the
    model's default shape)."""
    from collabui.errors import ConfigError
    from collabui.evaluation.miniwob import MiniWoBEvalConfig, default_team, load_run_config

    if args.from_dir is None:
        team = default_team(args.model, **nested_values(MiniWoBEvalConfig, "team", args))
        return config_from_args(MiniWoBEvalConfig, args, team=team)
    config = replace_given(load_run_config(args.from_dir), args)
    if PASSWORD_MASK in config.model:
        raise ConfigError(f"the run in {args.from_dir} used a model spec with credentials, stored masked "
                          f"({config.model}); pass --model again with them")
    return config


def miniwob_command(config: Any, out: str, *, plot: bool = False) -> str:
    """The command line that runs ``config`` into ``out`` (every setting that differs from the
    command's defaults, and the main ones always), so results say how to reproduce them."""
    from collabui.evaluation.miniwob import MiniWoBEvalConfig

    values = {f.name: getattr(config, f.name) for f in dataclasses.fields(MiniWoBEvalConfig)}
    parts = ["collabui", "eval", "miniwob", *config_argv(MiniWoBEvalConfig, values, always=_ALWAYS,
                                                        defaults=_MINIWOB_DEFAULTS), "--out", out]
    return redact_url(shlex.join(parts + (["--plot"] if plot else [])))


def _miniwob(args: argparse.Namespace) -> int:
    from collabui.errors import ConfigError
    from collabui.evaluation.miniwob import evaluate_miniwob

    out = args.out or args.from_dir
    if out is None:
        raise ConfigError("give --out RUN_DIR (where the run goes), or --from RUN_DIR to repeat a stored run")
    config = miniwob_config(args)
    refuse_ignored_model_flags(config.model, guided_json=config.guided_json, adapters=config.adapters)
    results = evaluate_miniwob(config, out, plot=args.plot, command=miniwob_command(config, out, plot=args.plot))
    print(Path(out) / "summary.md")
    return _report_errors(Path(out).expanduser(), results["counts"])


def _report_errors(out: Path, counts: dict[str, Any]) -> int:
    """Name the episodes an error ended (a crashed browser: only that one, the next relaunches
    it); the exit code: 0 none, 1 some.

    Raises:
        DeviceError: every episode failed at its reset: nothing was measured.
    """
    from collabui.errors import DeviceError
    from collabui.evaluation.runner import read_manifest

    if not counts.get("errors"):
        return 0
    failed = [r for r in read_manifest(out / "episodes.jsonl").values() if r.get("error")]
    if len(failed) == counts["episodes"] and not counts.get("steps"):
        raise DeviceError(f"no episode could start ({len(failed)}/{counts['episodes']}): {failed[0]['error']}")
    for record in failed:
        log.warning("episode %s ended by an error after %s steps (counted as a failure): %s",
                    record["episode_id"], record.get("steps", 0), record["error"])
    log.warning("%d/%d episodes ended by an error; the others ran normally (exit 1)", len(failed), counts["episodes"])
    return 1


def _compare(args: argparse.Namespace) -> int:
    from collabui.errors import ConfigError
    from collabui.evaluation.paired import paired_from_folders, render_paired
    from collabui.evaluation.report import compare, load_results, render_compare, write_compare

    a, b = load_results(args.a), load_results(args.b)
    # Before any output: a folder given twice is refused whole.
    found = paired_from_folders([args.a, *(pair[0] for pair in args.also)], [args.b, *(pair[1] for pair in args.also)])
    if found is None and (args.also or args.plot_paired):
        flag = "--also pools" if args.also else "--plot-paired draws"
        raise ConfigError(f"{flag} paired episodes, but a folder has no episodes.jsonl (MiniWoB++) or "
                          "predictions.jsonl (AutoWebBench), or the runs share "
                          "no episode: give MiniWoB++ run folders of the same tasks, or AutoWebBench ones of the same data")
    rows = compare(a, b)
    label_a = (a.get("system") or {}).get("label") or "A"
    label_b = (b.get("system") or {}).get("label") or "B"
    print(f"A = {label_a} ({args.a})\nB = {label_b} ({args.b})")
    sys.stdout.write(render_compare(rows, "A", "B"))
    if not rows:
        log.warning("no metric is shared by A and B (different harnesses?)")
    if found is not None:
        pooled = f" (pooled over {1 + len(args.also)} pairs of runs)" if args.also else ""
        sys.stdout.write(render_paired(found).replace(":\n", pooled + ":\n", 1))
    if args.out:
        log.info("written %s", write_compare(rows, args.out, a=a, b=b, paired=found))
    if args.plot:
        from collabui.evaluation.report import plot_results

        log.info("written %s", plot_results([a, b], args.plot))
    if args.plot_paired and found is not None:
        from collabui.evaluation.paired import plot_paired

        log.info("written %s", plot_paired(found, args.plot_paired, a_label=label_a, b_label=label_b))
    return 0


def _team(args: argparse.Namespace) -> int:
    import json

    from collabui.errors import ConfigError
    from collabui.evaluation.team_dynamics import (
        plot_dynamics,
        read_team_traces,
        render_dynamics,
        team_dynamics,
    )

    named = {str(folder): team_dynamics(read_team_traces(folder)) for folder in args.folders}
    empty = [name for name, d in named.items() if not d.steps]
    if empty:
        raise ConfigError(f"no team steps (n x m > 1) in {empty}; these are single-agent traces")
    sys.stdout.write(render_dynamics(named))
    if args.out:
        Path(args.out).write_text(json.dumps({k: v.to_dict() for k, v in named.items()}, indent=1) + "\n",
                                  encoding="utf-8")
        log.info("written %s", args.out)
    if args.plot:
        log.info("written %s", plot_dynamics(named, args.plot))
    return 0


def _autowebbench_command(args: argparse.Namespace, config: TeamConfig) -> str:
    parts = ["collabui", "eval", "autowebbench", "--data", args.data, "--model", redact_url(args.model),
             "--agents", str(config.n_agents), "--rounds", str(config.rounds), "--topology", str(config.topology),
             "--seed", str(config.seed), "--out", args.out, "--start", str(args.start)]
    for flag, value in (("--limit", args.limit), ("--adapters", args.adapters)):
        if value is not None:
            parts += [flag, str(value)]
    if args.serve_dtype != "auto":
        parts += ["--serve-dtype", args.serve_dtype]
    if args.serve_agents != "lora":
        parts += ["--serve-agents", args.serve_agents]
    if args.serve_backend != "vllm":
        parts += ["--serve-backend", args.serve_backend]
    if args.element_format != "auto":
        parts += ["--element-format", args.element_format]
    return shlex.join(parts + [flag for flag, on in (("--guided-json", args.guided_json), ("--serve", args.serve)) if on])


def _autowebbench_model(args: argparse.Namespace) -> Any:
    """The model of ``eval autowebbench``: loaded here, or (``--serve``) served on vLLM."""
    from collabui.models.spec import load_model

    client = {"guided_json": "web"} if args.guided_json else {}
    if not args.serve:
        return load_model(args.model, adapters=args.adapters, **client)
    from collabui.serving.managed import ServedModel

    return ServedModel.of_spec(args.model, args.adapters, client=client, agents=args.serve_agents,
                               backend=args.serve_backend, dtype=args.serve_dtype)


def _autowebbench_system(args: argparse.Namespace, config: TeamConfig) -> dict[str, Any]:
    """The system a folder's predictions were made by (part of its identity: ``run.json``)."""
    from collabui.evaluation.miniwob import system_label

    system = {"model": redact_url(args.model), "adapters": args.adapters, "n_agents": config.n_agents,
              "rounds": config.rounds, "topology": str(config.topology), "seed": config.seed,
              "label": system_label(args.model, config.n_agents, config.rounds,
                                    str(config.topology), args.adapters, guided=args.guided_json),
              "temperatures": [config.agent_temperature(i) for i in range(config.n_agents)],
              "prompt_style": config.prompt_style, "max_new_tokens": config.max_new_tokens,
              "max_observation_chars": config.max_observation_chars}
    for flag in ("guided_json", "serve"):  # only when on: folders of earlier runs still resume
        if getattr(args, flag):
            system[flag] = True  # vLLM's numerics (bf16 where the CPU has it) are not the local fp32
    if args.serve_dtype != "auto":
        system["serve_dtype"] = args.serve_dtype
    if args.serve_agents != "lora":
        system["serve_agents"] = args.serve_agents
    if args.serve_backend != "vllm":
        system["serve_backend"] = args.serve_backend
    return system


def _autowebbench(args: argparse.Namespace) -> int:
    from collabui.errors import ConfigError
    from collabui.evaluation.autowebbench import (
        SUMMARY_FILE,
        check_resumable,
        evaluate_autowebbench,
        load_records,
    )
    from collabui.evaluation.miniwob import check_serve
    from collabui.models.spec import model_element_format, team_adapter_names
    from collabui.team import CollabAgentTeam, _resolve_topology

    refuse_ignored_model_flags(args.model, guided_json=args.guided_json, adapters=args.adapters)
    check_serve(args.model, args.serve, args.serve_dtype, args.serve_agents, args.serve_backend)  # before the records and the model load

    baseline = is_baseline(args.model)
    n = args.n_agents or (1 if baseline else 4)
    config = config_from_args(TeamConfig, args, skip={"action_space", "adapters", "batch_fallback_s"}, n_agents=n,
                              rounds=args.rounds or (1 if baseline else 3), action_space="web",
                              adapters=None if baseline else team_adapter_names(args.adapters, n))
    _resolve_topology(config)
    element_format = args.element_format
    if element_format == "auto":
        element_format = "html" if baseline else model_element_format(args.model)
    records = load_records(args.data)  # a bad file fails before the model loads
    if not 0 <= args.start < len(records) or (args.limit is not None and args.limit < 1):
        raise ConfigError(f"--start must be in [0, {len(records) - 1}] and --limit >= 1; "
                          f"got --start {args.start} --limit {args.limit}")
    system = _autowebbench_system(args, config)
    check_resumable(args.out, args.data, system, element_format)  # before a model loads or a server starts
    model = _autowebbench_model(args)
    team = None
    try:
        team = CollabAgentTeam(model, config=config)
        evaluate_autowebbench(args.data, team, args.out, start=args.start, limit=args.limit,
                              system=system, command=_autowebbench_command(args, config),
                              progress=not args.quiet, element_format=element_format)
    finally:
        if team is not None:
            team.close()
        model.close()
    print(Path(args.out) / SUMMARY_FILE)
    return 0
