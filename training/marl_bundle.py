"""MARL from a trained team bundle, and the bundle every MARL run leaves behind.

A run whose ``model`` is a bundle (``smollm2-trained`` or ``trained:FOLDER``, e.g. the CPU
recipe's stage-1 SFT model) starts from the bundle's shared model: its base with the bundle's
``merge`` adapters folded in, written once to ``out_dir/base`` (the per-agent adapters train on
it, and DPO's reference is it). Its agents read pages in the format the bundle learned and
answer in its prompt style unless the config says otherwise (``auto``).

Every run writes ``out_dir/bundle`` when it finishes: the same base and merged adapters, each
agent's adapter of the last iteration (an agent that never had a pair runs on the shared model
alone) and the DAG of the last iteration, so ``trained:out_dir/bundle`` runs the team that was
trained, in the graph it was trained in.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from collabui.errors import ConfigError

__all__ = ["is_bundle_spec", "bundle_folder", "check_bundle_start", "merged_base", "effective_config",
           "write_marl_bundle", "team_adapter_slots", "bundle_tag", "BASE_DIR", "BUNDLE_DIR"]

#: Where a bundle's shared model is merged (inside the run folder).
BASE_DIR = "base"
#: Where the trained team is written at the end of a run.
BUNDLE_DIR = "bundle"
_MARKER = ".merged-from"

log = logging.getLogger(__name__)


def is_bundle_spec(spec: str) -> bool:
    """``smollm2-trained`` or ``trained:FOLDER``."""
    from collabui.models.bundle import SHIPPED_BUNDLES

    return spec in SHIPPED_BUNDLES or (spec.startswith("trained:") and len(spec) > len("trained:"))


def bundle_folder(spec: str) -> Path:
    """The folder of a bundle spec."""
    from collabui.models.bundle import SHIPPED_BUNDLES, bundle_dir

    return bundle_dir(spec) if spec in SHIPPED_BUNDLES else Path(spec[len("trained:"):]).expanduser()


def check_bundle_start(spec: str) -> dict[str, Any]:
    """The manifest of a bundle MARL can start from: one whose agents share one model.

    Raises:
        ModelLoadError: not a bundle folder.
        ConfigError: the bundle already has per-agent adapters (MARL would drop them).
    """
    from collabui.models.bundle import read_bundle

    manifest = read_bundle(bundle_folder(spec))
    if any(a is not None for a in manifest.get("agents", [])):
        raise ConfigError(f"{spec} already has per-agent adapters, which MARL would start over from; start from "
                          "the bundle its agents were trained from (its stage-1 model)")
    if not str(manifest.get("base", "")).startswith(("smollm2", "embedded", "hf:")):
        raise ConfigError(f"{spec}: base {manifest.get('base')!r} is not smollm2 or hf:PATH")
    return manifest


def merged_base(spec: str, out_dir: Path) -> Path:
    """``out_dir/base``: the bundle's base with its ``merge`` adapters folded in (made once; a
    marker names the bundle's weights, so a changed bundle is merged again)."""
    from collabui.models.bundle import bundle_fingerprint, write_merged_model

    folder = bundle_folder(spec)
    check_bundle_start(spec)
    target, stamp = out_dir / BASE_DIR, bundle_fingerprint(folder)
    if (target / _MARKER).is_file() and (target / _MARKER).read_text(encoding="utf-8").strip() == stamp:
        return target
    write_merged_model(folder, target)
    (target / _MARKER).write_text(stamp + "\n", encoding="utf-8")  # last: the folder is complete
    return target


def effective_config(config: Any) -> Any:
    """``config`` (a MARLConfig) with its ``auto`` settings resolved: the page format and prompt
    style a bundle learned (``html``, and the team's own resolution, for other models)."""
    from collabui.models.bundle import bundle_team

    learned = bundle_team(bundle_folder(config.model)) if is_bundle_spec(config.model) else {}
    changes: dict[str, Any] = {}
    if config.element_format == "auto":
        changes["element_format"] = learned.get("element_format", "html")
    if config.team.prompt_style == "auto" and "prompt_style" in learned:
        changes["team"] = dataclasses.replace(config.team, prompt_style=learned["prompt_style"])
    return dataclasses.replace(config, **changes) if changes else config


def write_marl_bundle(config: Any, out_dir: Path, adapters: Mapping[str, Path], topology: Any, *,
                      iterations: int) -> Path:
    """``out_dir/bundle``: the run's start model, each agent's last adapter (its update times
    ``config.interpolate``) and the last DAG. A run grown to more iterations, or asked for
    another weight, keeps the team it had: that bundle moves to ``bundle-<its tag>`` first
    (:func:`keep_earlier_bundle`; evaluations of it stay reproducible)."""
    from collabui.models.bundle import base_model_dir, write_bundle

    c = effective_config(config)
    keep_earlier_bundle(out_dir, iterations, c.interpolate)
    team: dict[str, Any] = {"max_new_tokens": c.team.max_new_tokens, "topology": topology.to_spec()}
    if c.team.prompt_style != "auto":
        team["prompt_style"] = c.team.prompt_style
    if c.action_space == "web":
        team["element_format"] = c.element_format
    if is_bundle_spec(c.model):
        folder, manifest = bundle_folder(c.model), check_bundle_start(c.model)
        base = str(manifest.get("base", "smollm2"))
        base = f"hf:{base_model_dir(folder)}" if base.startswith("hf:") else base
        merge = {name: folder / name for name in manifest.get("merge", [])}
    else:
        base = c.model if c.model == "smollm2" else f"hf:{Path(c.model[3:]).expanduser().resolve()}"
        merge = {}
    slots = list(team_adapter_slots(c, adapters))
    if not any(slots):
        log.warning("marl: no agent had a pair to learn from in any iteration; %s is the start model "
                    "(see marl_report.json for the pair counts)", out_dir / BUNDLE_DIR)
    marl = {"iterations": iterations, "critic": c.critic, "adversary": c.adversary, "objective": c.objective,
            "edge_update": c.edge_update, "shared_adapter": c.shared_adapter, "start": c.model, "out_dir": str(out_dir)}
    if c.interpolate != 1:
        marl["interpolate"] = c.interpolate
    return write_bundle(out_dir / BUNDLE_DIR, base=base, merge=merge, agents=dict(adapters), slots=slots,
                        team=team, made_by=f"collabui train marl --model {c.model} --iterations {iterations}"
                        + (" --shared-adapter" if c.shared_adapter else "")
                        + (f" --interpolate {c.interpolate}" if c.interpolate != 1 else ""),
                        marl=marl, train_tasks=list(c.rollout_tasks), agent_weight=c.interpolate)


def team_adapter_slots(config: Any, adapters: Mapping[str, Any]) -> tuple[str | None, ...]:
    """The adapter each agent of ``config``'s team runs: its own ``agent{i}`` (None, the start
    model, when it never had a pair), or with ``shared_adapter`` the team's one, ``agent0``."""
    n = config.team.n_agents
    if config.shared_adapter:
        return ("agent0" if "agent0" in adapters else None,) * n
    return tuple(f"agent{i}" if f"agent{i}" in adapters else None for i in range(n))


def bundle_tag(iterations: int, interpolate: float = 1.0) -> str:
    """What tells the teams of one run folder apart: ``x2`` (two iterations), ``x2-w0.5`` (their
    update at half weight)."""
    return f"x{iterations}" + (f"-w{interpolate:g}" if interpolate != 1 else "")


def keep_earlier_bundle(out_dir: Path, iterations: int, interpolate: float = 1.0) -> Path | None:
    """Move ``out_dir/bundle`` to ``bundle-<its tag>`` (:func:`bundle_tag`: ``bundle-x1``,
    ``bundle-x2-w0.5``) when it is another team than the one of ``iterations`` at weight
    ``interpolate`` (a folder of that name already there is left alone, and so is the bundle:
    it was saved before). Returns where it went, or None."""
    path = out_dir / BUNDLE_DIR
    try:
        marl = json.loads((path / "team.json").read_text())["marl"]
        earlier = bundle_tag(int(marl["iterations"]), float(marl.get("interpolate", 1.0)))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    target = out_dir / f"{BUNDLE_DIR}-{earlier}"
    if earlier == bundle_tag(iterations, interpolate) or target.exists():
        return None
    path.rename(target)
    log.info("marl: the team %s moved to %s", earlier, target)
    return target
