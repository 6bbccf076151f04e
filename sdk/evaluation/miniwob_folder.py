"""The run folder of a MiniWoB++ evaluation: its identity and its stored configuration.

``run.json`` holds the fingerprint of what the episodes depend on (flat, as it always has: a
rerun with another configuration into the folder is refused, older folders still resume) and,
under ``"config"``, the whole :class:`~collabui.evaluation.miniwob.MiniWoBEvalConfig` with its
team, which :func:`load_run_config` reads back: a run can be repeated from its folder alone.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from collabui._jsonl import read_json
from collabui.config import TeamConfig
from collabui.errors import ConfigError
from collabui.redaction import redact_url

if TYPE_CHECKING:
    from collabui.evaluation.miniwob import MiniWoBEvalConfig

__all__ = ["check_out_dir", "fingerprint_changes", "load_run_config", "topology_name"]


def topology_name(team: TeamConfig) -> str:
    """The DAG's name: the team's topology spec, or a Topology object's kind."""
    return team.topology if isinstance(team.topology, str) else str(team.topology.kind)


#: Team fields a run folder's fingerprint names on their own (the others go under team_options).
_FINGERPRINT_TEAM_FIELDS = ("n_agents", "rounds", "topology", "seed", "max_steps", "prompt_style",
                            "max_new_tokens", "action_space")
#: Team fields that change no outcome: a folder resumes with them on or off.
_NO_OUTCOME_FIELDS = ("screenshots", "batch_fallback_s")


def _fingerprint(config: MiniWoBEvalConfig) -> dict[str, Any]:
    """What the episodes depend on, flat as run.json has always held it (older folders resume)."""
    from collabui.models.spec import model_fingerprint

    team, defaults = config.team.to_dict(), TeamConfig().to_dict()
    options = {k: v for k, v in team.items() if k not in (*_FINGERPRINT_TEAM_FIELDS, *_NO_OUTCOME_FIELDS)
               and v != defaults[k]}
    return {"model": redact_url(config.model), "model_weights": model_fingerprint(config.model),
            "adapters": config.adapters, "n_agents": team["n_agents"], "rounds": team["rounds"],
            "topology": team["topology"], "seed": team["seed"], "env": config.env,
            "max_steps": team["max_steps"], "prompt_style": team["prompt_style"],
            "max_new_tokens": team["max_new_tokens"], "guided_json": config.guided_json,
            "element_format": config.element_format, "shuffle_elements": config.shuffle_elements,
            "team_options": dict(sorted(options.items()))}


#: Fingerprint fields added later: a run.json without them was made with these values.
_LATER_FIELDS: dict[str, Any] = {"model_weights": None, "prompt_style": "react", "max_new_tokens": 64, "guided_json": False,
                                 "element_format": "html", "shuffle_elements": False,
                                 "team_options": {}}
#: Team settings of folders made before prompt_style and max_new_tokens were recorded.
_LATER_TEAM = {"prompt_style": "react", "max_new_tokens": 64}


def fingerprint_changes(folder: Path, config: MiniWoBEvalConfig) -> list[str]:
    """What the episodes in ``folder`` depend on that ``config`` would change (its ``run.json``
    fields: ``model``, ``seed``, ``shuffle_elements``, ...); empty when they would resume under
    it, or when the folder holds no run yet.

    Raises:
        ConfigError: its ``run.json`` is not readable JSON.
    """
    path, wanted = folder / "run.json", _fingerprint(config)
    if not path.exists():
        return []
    found = read_json(path, error=ConfigError,
                      fix="delete it to go on with this folder using these flags, or pass another --out")
    return sorted(k for k in wanted if found.get(k, _LATER_FIELDS.get(k)) != wanted[k])


def check_out_dir(out: Path, config: MiniWoBEvalConfig) -> None:
    """Refuse to mix episodes of two configurations in one folder (resume would reuse them);
    then store the fingerprint and the whole config (what ``--from`` repeats)."""
    path, wanted = out / "run.json", _fingerprint(config)
    changed = fingerprint_changes(out, config)
    if changed:
        raise ConfigError(f"{out} holds a run with other {', '.join(changed)}; use another --out "
                          "or delete that folder")
    out.mkdir(parents=True, exist_ok=True)
    # Credentials in an openai:MODEL@URL spec are masked: a folder never holds a secret.
    stored = {**config.to_dict(), "model": redact_url(config.model)}
    text = json.dumps({**wanted, "config": stored}, indent=2) + "\n"
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)  # whole or not at all: the folder's identity is never cut short here


def load_run_config(run_dir: str | Path) -> MiniWoBEvalConfig:
    """The configuration an evaluation folder was run with, from its ``run.json`` (the last
    run's, when tasks or episodes grew). ``evaluate_miniwob(load_run_config(d), d)`` finishes or
    repeats that run; a folder made before configs were stored is read from its fingerprint
    and ``results.json``.

    Raises:
        ConfigError: no readable ``run.json`` there, or it holds an invalid config.
    """
    folder = Path(run_dir).expanduser()
    try:
        found = json.loads((folder / "run.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{folder} is not an evaluation run folder (no readable run.json: "
                          f"{type(exc).__name__}); pass the --out of an earlier `collabui eval miniwob`") from None
    if "config" in found:
        from collabui.evaluation.miniwob import MiniWoBEvalConfig

        return MiniWoBEvalConfig.from_dict(found["config"])
    return _config_of_old_folder(folder, found)


def _config_of_old_folder(folder: Path, found: Mapping[str, Any]) -> MiniWoBEvalConfig:
    """The config of a run.json that holds only the fingerprint (written before "config")."""
    from collabui.evaluation.miniwob import MiniWoBEvalConfig

    try:
        data = json.loads((folder / "results.json").read_text(encoding="utf-8")).get("data") or {}
    except (OSError, ValueError):
        data = {}  # interrupted before its first results: the default tasks and episodes
    team = {k: found[k] for k in _FINGERPRINT_TEAM_FIELDS if k in found and k != "action_space"}
    eval_fields = {k: found.get(k, _LATER_FIELDS.get(k)) for k in
                   ("model", "adapters", "guided_json", "element_format", "shuffle_elements")}
    return MiniWoBEvalConfig.from_dict({
        **{k: v for k, v in {"tasks": data.get("tasks_spec"), "episodes": data.get("episodes")}.items() if v},
        **eval_fields, "mobile": found.get("env") == "miniwob-mobile",
        "team": {**TeamConfig(**_LATER_TEAM).to_dict(), **team, **dict(found.get("team_options") or {})}})

