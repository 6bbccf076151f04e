"""``collabui train ...``: label, pairs, dpo, sft, extract, synth, marl, demonstrate, report.

    collabui train label --traces runs/traces --critic outcome --out runs/labels.jsonl
    collabui train pairs --traces runs/traces --labels runs/labels.jsonl --adversary rule --out runs/pairs.jsonl
    collabui train dpo --pairs runs/pairs.jsonl --model smollm2 --out runs/adapters [--max_steps 20 ...]
    collabui train sft --data runs/stage1/instruction.jsonl --model smollm2 --out runs/sft [--merge]
    collabui train extract --tuned runs/recipe/sft --model smollm2 --out runs/stage1-adapter --rank 48
    collabui train synth --envs miniwob/click-button --episodes 5 --out runs/stage1
    collabui train marl --env miniwob --train-tasks click-button,click-link --eval-tasks focus-text --iterations 2
    collabui train demonstrate --out runs/demo --minutes 10
    collabui train report runs/marl

``marl`` and ``demonstrate`` flags are generated from ``MARLConfig`` and ``DemoConfig``. ``dpo``
and ``sft`` take every field of TRL's ``DPOConfig``/``SFTConfig`` (``AgentDPOConfig``,
``AgentSFTConfig``) as ``--field value``, read with transformers' ``HfArgumentParser`` (TRL's own
convention for its configs), as does ``marl --dpo KEY=VALUE``; TRL is imported only when the
command runs.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import Any

from collabui.cli.flags import add_config_flags, changed_flags, config_from_args, refuse_ignored
from collabui.errors import ConfigError

__all__ = ["add_commands", "run_command", "takes_extra_flags", "parse_dpo_options", "trl_config"]

#: Notes (silenced by -q), warnings and errors, on stderr (configured by collabui.cli._log).
log = logging.getLogger(__name__)

_MARL_RENAME = {"episodes_per_task": "episodes", "eval_episodes_per_task": "eval_episodes"}
_BASE_HELP = "model spec of the local base model: smollm2 | hf:PATH (default smollm2)"
#: What the team's flags mean in a MARL run (the same settings, said for training).
_MARL_HELPS = {"team.seed": "seed of DAGs, episodes, sampling and DPO",
               "team.topology": "message DAG (random is resampled by the edge update)"}


def add_commands(sub: Any) -> None:
    """Register ``train`` and its subcommands on the top-level subparsers."""
    from collabui.training.demonstrate import DemoConfig
    from collabui.training.marl import MARLConfig
    from collabui.training.verified import SearchConfig

    train = sub.add_parser("train", help="train the team from recorded traces")
    tsub = train.add_subparsers(dest="train_command", required=True)
    label = tsub.add_parser("label", help="score every action matrix with a critic (reward matrices)")
    label.add_argument("--traces", nargs="+", required=True, help="trace files or folders of .jsonl traces")
    label.add_argument("--critic", default="outcome", help="outcome | reference | oracle | verified | "
                       "llm:<model spec> (default outcome)")
    label.add_argument("--out", required=True, help="labels JSONL (appended to; finished steps are skipped)")
    label.add_argument("--no-resume", action="store_true", help="relabel everything")
    pairs = tsub.add_parser("pairs", help="build per-agent preference pairs (rewarded vs adversarial)")
    pairs.add_argument("--traces", nargs="+", required=True, help="trace files or folders of .jsonl traces")
    pairs.add_argument("--labels", required=True, help="labels JSONL of `collabui train label`")
    pairs.add_argument("--adversary", default="rule", help="rule | llm:<model spec> (invented mistakes) | own "
                       "(the agents' own wrong proposals against verified-right answers; default rule)")
    pairs.add_argument("--critic", default=None, help="use the labels of this critic when the file holds several")
    pairs.add_argument("--out", required=True, help="pairs JSONL")
    pairs.add_argument("--seed", type=int, default=0, help="seed of the rule adversary and of --max-pairs' draw "
                       "(default 0)")
    pairs.add_argument("--right-pairs", action="store_true", help="(--adversary own) also pair each right proposal "
                       "with the team's wrong one at that step and with typing the previous step's text again")
    pairs.add_argument("--repeat-clicks", action="store_true", help="(--right-pairs) also pair each right answer "
                       "with clicking the previous step's element again")
    pairs.add_argument("--swap-texts", action="store_true", help="(--right-pairs) also pair each right typing "
                       "with typing another of the task's texts into the same field")
    pairs.add_argument("--lost-only", action="store_true", help="(--adversary own) pairs only from the episodes "
                       "the team lost")
    pairs.add_argument("--max-pairs", type=int, default=0, metavar="N", help="at most N pairs per agent, drawn "
                       "evenly over the kinds of correction (click -> type_string, ...); default 0: all")
    dpo = tsub.add_parser("dpo", help="train one LoRA adapter per agent with DPO",
                          epilog="Any AgentDPOConfig / TRL DPOConfig field is accepted, e.g. --max_steps 20 --beta 0.1")
    dpo.add_argument("--pairs", required=True, help="pairs JSONL of `collabui train pairs`")
    dpo.add_argument("--model", default="smollm2", help=_BASE_HELP)
    dpo.add_argument("--out", required=True, help="adapters go to OUT/agent{i}/")
    dpo.add_argument("--only-agents", dest="only_agents", default=None,
                     help="comma-separated agents to train (default all)")
    dpo.add_argument("--init-adapters", default=None, help="continue from this adapter folder (iterative DPO)")
    dpo.add_argument("--plot", action="store_true", help="also write OUT/dpo_report.png")
    sft = tsub.add_parser("sft", help="SFT of one LoRA adapter (or one per agent with --pairs: rejection fine-tuning)",
                          epilog="Any AgentSFTConfig / TRL SFTConfig field is accepted, e.g. --max_steps 20")
    data = sft.add_mutually_exclusive_group(required=True)
    data.add_argument("--data", help="prompt-completion JSONL (from `collabui train synth`)")
    data.add_argument("--pairs", help="preference pairs JSONL: train agent{i} adapters on the rewarded outputs (RFT)")
    sft.add_argument("--model", default="smollm2", help=_BASE_HELP)
    sft.add_argument("--out", required=True, help="adapter folder (with --pairs: OUT/agent{i}/)")
    sft.add_argument("--merge", action="store_true", help="also write OUT/merged/, the next stage's base model")
    sft.add_argument("--init-adapter", default=None, help="continue this adapter (with --pairs: a folder of agent{i}/)")
    sft.add_argument("--no-resume", action="store_true", help="train again even if OUT holds a finished adapter")
    extract = tsub.add_parser("extract", help="a fully fine-tuned model's weight change as a small LoRA adapter "
                              "(truncated SVD per layer), to ship or to merge like any adapter")
    extract.add_argument("--tuned", required=True, help="the fully fine-tuned model folder (from --full_finetune)")
    extract.add_argument("--model", default="smollm2", help=_BASE_HELP + "; the model it was tuned from")
    extract.add_argument("--out", required=True, help="adapter folder to write (with extract.json, its report)")
    extract.add_argument("--rank", type=int, default=48, help="rank on every linear layer (default 48)")
    extract.add_argument("--embedding-rank", type=int, default=32,
                         help="rank on the (tied) token embedding; 0 leaves it out (default 32)")
    synth = tsub.add_parser("synth", help="synthesize stage-1 data (knowledge QA, instructions, preferences) "
                            "from MiniWoB++ pages")
    synth.add_argument("--envs", required=True, help="comma-separated env names, e.g. miniwob/click-button,miniwob/login-user")
    synth.add_argument("--episodes", type=int, default=5, help="pages per environment (default 5)")
    synth.add_argument("--out", required=True, help="output folder (knowledge.jsonl, instruction.jsonl, preference.jsonl)")
    synth.add_argument("--teacher", default=None, help="model spec of a teacher (default: template answers)")
    synth.add_argument("--kinds", default="knowledge,instruction,preference", help="which datasets to write")
    synth.add_argument("--per-page", type=int, default=4, help="questions and instructions per page (default 4)")
    synth.add_argument("--style", default="react", help="the agents' prompt style: react | compact (default react)")
    synth.add_argument("--seed", type=int, default=0, help="seed of the pages (default 0)")
    marl = tsub.add_parser("marl", help="iterative MARL: rollouts, critic, pairs, per-agent DPO, eval",
                           epilog="Resumes when --out holds an unfinished run with the same options.")
    add_config_flags(marl, MARLConfig, skip={"dpo"}, rename=_MARL_RENAME, helps=_MARL_HELPS)
    marl.add_argument("--dpo", action="append", default=[], metavar="KEY=VALUE",
                      help=MARLConfig.__dataclass_fields__["dpo"].metadata["help"])
    demo = tsub.add_parser("demonstrate", help="search verified trajectories on MiniWoB++ tasks "
                           "(the environment's reward keeps only what works) into a dataset")
    add_config_flags(demo, DemoConfig, skip={"search"})
    add_config_flags(demo, SearchConfig, only={"node_budget"}, rename={"node_budget": "budget"})
    report = tsub.add_parser("report", help="one report (JSON, Markdown, PNG) of a training run folder: "
                             "evaluations, SFT, DPO and MARL results found under it")
    report.add_argument("run", help="the run folder (the --out of train sft|dpo|marl, or the recipe's)")
    report.add_argument("--out", default=None, help="where training_report.* go (default: the run folder)")
    report.add_argument("--no-plot", action="store_true", help="skip the PNG")


def takes_extra_flags(args: argparse.Namespace) -> bool:
    """Whether the parsed command reads unknown flags as TRL config fields (``dpo``, ``sft``)."""
    return args.command == "train" and args.train_command in ("dpo", "sft")


def trl_config(kind: str, argv: list[str], out: str | None) -> Any:
    """``AgentDPOConfig`` (``kind="dpo"``) or ``AgentSFTConfig`` (``"sft"``) of ``--field
    value`` flags; ``output_dir`` defaults to ``OUT/trl``.

    Raises:
        ConfigError: an unknown field or a bad value.
    """
    from transformers import HfArgumentParser

    if kind == "dpo":
        from collabui.training.dpo import AgentDPOConfig as cls
    else:
        from collabui.training.sft import AgentSFTConfig as cls
    if out is not None and not any(a.startswith("--output_dir") for a in argv):
        argv = [*argv, "--output_dir", str(Path(out) / "trl")]
    try:
        (config,) = HfArgumentParser(cls).parse_args_into_dataclasses(argv)
    except (SystemExit, ValueError):  # argparse exits; HfArgumentParser raises on leftovers
        raise ConfigError(f"bad {kind.upper()} option in {' '.join(argv)}; see `collabui train {kind} --help` "
                          f"and TRL's {kind.upper()}Config") from None
    return config


def parse_dpo_options(items: list[str]) -> dict[str, Any]:
    """``--dpo`` items ``["max_steps=1", "beta=0.2"]`` -> ``{"max_steps": 1, "beta": 0.2}``, typed
    like the AgentDPOConfig fields (a comma-separated VALUE is a list).

    Raises:
        ConfigError: not KEY=VALUE, ``output_dir``, an unknown field, or a bad value.
    """
    argv, keys = [], []
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip().lstrip("-").replace("-", "_")
        if not sep or not key:
            raise ConfigError(f"--dpo takes KEY=VALUE (e.g. --dpo max_steps=5), got {item!r}")
        if key == "output_dir":
            raise ConfigError("--dpo output_dir is set by the run (OUT/iter{k}/trl); drop it")
        keys.append(key)
        argv += [f"--{key}", *(value.split(",") if "," in value else [value])]
    if not keys:
        return {}
    try:
        config = trl_config("dpo", [*argv, "--output_dir", "unused"], None)
    except ConfigError:
        raise ConfigError(f"bad --dpo option in {' '.join(items)}; use fields of TRL's DPOConfig") from None
    return {key: _plain(getattr(config, key)) for key in keys}


def _plain(value: Any) -> Any:
    """JSON-friendly values (enums to their value), so state.json compares equal on a rerun."""
    value = getattr(value, "value", value)
    return list(value) if isinstance(value, tuple) else value


def _label(args: argparse.Namespace) -> int:
    from collabui.training.critic import make_critic
    from collabui.training.labels import label_traces

    stats = label_traces(args.traces, make_critic(args.critic), args.out, resume=not args.no_resume)
    print(json.dumps(stats.to_dict() if hasattr(stats, "to_dict") else vars(stats), default=str))
    return 0


def _pairs(args: argparse.Namespace) -> int:
    if args.adversary == "own" and not args.max_pairs:  # own mistakes are read, not drawn
        refuse_ignored(changed_flags(args, {"seed": 0}), "with --adversary own (it draws nothing); drop it")
    from collabui.training.mistake_pairs import OWN_PAIR_OPTIONS, check_pair_options

    if args.adversary != "own":
        refuse_ignored(changed_flags(args, dict.fromkeys(OWN_PAIR_OPTIONS, False)),
                       "without --adversary own; add it or drop it")
    check_pair_options(args.adversary, **{name: getattr(args, name) for name in OWN_PAIR_OPTIONS})
    if args.max_pairs < 0:
        raise ConfigError(f"--max-pairs must be >= 0, got {args.max_pairs}")
    from collabui.training.adversary import LLMAdversary, RuleAdversary
    from collabui.training.pairs import build_pairs, pair_stats, save_pairs

    if args.adversary == "own":
        from collabui.training.mistake_pairs import build_mistake_pairs

        ds = build_mistake_pairs(args.traces, args.labels, critic=args.critic, right_pairs=args.right_pairs,
                                 repeat_clicks=args.repeat_clicks, swap_texts=args.swap_texts,
                                 lost_only=args.lost_only)
    else:
        if args.adversary == "rule":
            adversary = RuleAdversary(seed=args.seed)
        elif args.adversary.startswith("llm:"):
            from collabui.models.spec import load_model

            adversary = LLMAdversary(load_model(args.adversary[4:]), fallback=RuleAdversary(seed=args.seed))
        else:
            raise ConfigError(f"unknown adversary {args.adversary!r}; use rule, own or llm:<model spec>")
        ds = build_pairs(args.traces, args.labels, adversary, critic=args.critic, progress=True)
    if args.max_pairs:
        from collabui.training.mistake_pairs import (
            CORRECTION_COLUMN,
            balance_pairs,
            traces_action_space,
            with_correction_kinds,
        )

        space = traces_action_space(args.traces)
        # as MARL draws them: with --swap-texts a correction of the text alone is a kind of its own
        ds = balance_pairs(with_correction_kinds(ds, space, texts=args.swap_texts), args.max_pairs, space,
                           seed=args.seed).remove_columns(CORRECTION_COLUMN)
    path = save_pairs(ds, args.out)
    print(json.dumps({"pairs": len(ds), "path": str(path), **pair_stats(ds)}, default=str))
    return 0


def _dpo(args: argparse.Namespace, rest: list[str]) -> int:
    from collabui.training.dpo import train_agents_dpo
    from collabui.training.marl import resolve_base_model
    from collabui.training.pairs import load_pairs

    config = trl_config("dpo", rest, args.out)
    agents = [int(a) for a in args.only_agents.split(",")] if args.only_agents else None
    report = train_agents_dpo(load_pairs(args.pairs), base_model=resolve_base_model(args.model), out_dir=args.out,
                              config=config, agents=agents, init_adapters_dir=args.init_adapters)
    if args.plot:
        from collabui.training.report import plot_dpo_report

        plot_dpo_report(report, Path(args.out) / "dpo_report.png")
    log.info("adapters in %s; report %s", args.out, Path(args.out) / "dpo_report.json")
    return 0


def _sft(args: argparse.Namespace, rest: list[str]) -> int:
    if args.pairs:  # per-agent adapters (rejection fine-tuning) are never merged
        refuse_ignored(changed_flags(args, {"merge": False}), "with --pairs (one adapter per agent, none merged); "
                       "drop it")
    from collabui.training.marl import resolve_base_model
    from collabui.training.sft import rft_dataset_from_pairs, train_agents_sft, train_sft

    config = trl_config("sft", rest, args.out)
    base = resolve_base_model(args.model)
    if args.pairs:
        from collabui.training.pairs import load_pairs

        reports = train_agents_sft(rft_dataset_from_pairs(load_pairs(args.pairs)), base_model=base,
                                   out_dir=args.out, config=config, init_adapters_dir=args.init_adapter,
                                   resume=not args.no_resume)
        print(json.dumps([{"adapter": r.out_dir, "status": r.status, "steps": r.steps,
                           "final_loss": r.final_loss} for r in reports]))
        return 0
    from collabui.training.synth import load_sft_dataset

    report = train_sft(load_sft_dataset(args.data), base_model=base, out_dir=args.out, config=config,
                       init_adapter=args.init_adapter, resume=not args.no_resume, merge=args.merge)
    print(json.dumps({k: v for k, v in report.to_dict().items() if k != "loss"}, default=str))
    if report.merged_path:
        log.info("next stage's base: --model hf:%s", report.merged_path)
    return 0


def _extract(args: argparse.Namespace) -> int:
    from collabui.training.extract import extract_adapter
    from collabui.training.marl import resolve_base_model

    report = extract_adapter(resolve_base_model(args.model), args.tuned, args.out, rank=args.rank,
                             embedding_rank=args.embedding_rank)
    print(json.dumps(report.to_dict()))
    log.info("adapter in %s (%.1f MB); merge it with --model hf:... or a bundle's merge list", args.out,
             report.adapter_bytes / 1e6)
    return 0


def _synth(args: argparse.Namespace) -> int:
    from collabui.training.synth import synthesize

    teacher = None
    if args.teacher:
        from collabui.models.spec import load_model

        teacher = load_model(args.teacher)
    envs = [e.strip() for e in args.envs.split(",") if e.strip()]
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    try:
        stats = synthesize(envs, episodes_per_env=args.episodes, seed=args.seed, teacher=teacher,
                           out_dir=args.out, kinds=kinds, per_page=args.per_page, style=args.style)
    finally:
        if teacher is not None:
            teacher.close()
    print(json.dumps(stats.to_dict()))
    return 0


def marl_config(args: argparse.Namespace) -> Any:
    """The MARLConfig of parsed ``train marl`` flags."""
    from collabui.training.marl import MARLConfig

    return config_from_args(MARLConfig, args, skip={"dpo"}, dpo=parse_dpo_options(list(args.dpo or [])))


def _marl(args: argparse.Namespace) -> int:
    from collabui.training.marl import run_marl

    report = run_marl(marl_config(args), progress=not args.quiet)
    print(json.dumps({"report": f"{report.out_dir}/marl_report.json",
                      "held_out_success": dict(report.success_curve()),
                      "complete": report.complete}))
    if not report.complete:
        log.warning("the run is incomplete; rerun the same command to continue")
    return 0


def _demonstrate(args: argparse.Namespace) -> int:
    from collabui.training.demonstrate import DemoConfig, generate_demonstrations
    from collabui.training.verified import SearchConfig

    search = config_from_args(SearchConfig, args, only={"node_budget"})
    stats = generate_demonstrations(config_from_args(DemoConfig, args, skip={"search"}, search=search))
    print(json.dumps({k: v for k, v in stats.to_dict().items() if k != "per_task"}))
    log.info("dataset in %s; card %s", Path(args.out_dir) / "dataset", Path(args.out_dir) / "README.md")
    return 0 if stats.verified_steps else 1


def _report(args: argparse.Namespace) -> int:
    from collabui.training.run_report import write_training_report

    paths = write_training_report(args.run, args.out, plot=not args.no_plot)
    print(paths["md"].read_text(encoding="utf-8"))
    log.info("report: %s", ", ".join(str(p) for p in paths.values()))
    return 0


def run_command(args: argparse.Namespace, rest: list[str]) -> int:
    """Run a parsed ``collabui train ...``; ``rest`` are the TRL flags of ``dpo``/``sft``."""
    if args.train_command == "dpo":
        return _dpo(args, rest)
    if args.train_command == "sft":
        return _sft(args, rest)
    if args.train_command == "extract":
        return _extract(args)
    if rest:
        raise ConfigError(f"unknown option(s) {' '.join(rest)} for `collabui train {args.train_command}`; see --help")
    commands = {"label": _label, "pairs": _pairs, "synth": _synth, "marl": _marl,
                "demonstrate": _demonstrate, "report": _report}
    return commands[args.train_command](args)
