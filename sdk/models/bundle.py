"""Trained teams as folders: a base model, LoRA adapters and the team settings they were trained for.

A *team bundle* is what the training recipe ships and what ``load_model("smollm2-trained")``
(or ``trained:FOLDER`` for any bundle) loads::

    team.json        {"format": "collabui.team-bundle/1", "base": "smollm2" (or "hf:PATH", a
                      model folder; relative: inside the bundle, e.g. a fully fine-tuned model),
                      "merge": ["stage1"], "agents": ["agent0", ...],
                      "team": {"prompt_style": "trained", ...}, "made_by": "...", ...}
    stage1/          a LoRA adapter merged into the base weights at load (shared by every agent)
    agent0/ ...      optional per-agent LoRA adapters served on top, one per agent (cycled); a
                     null entry in ``agents`` is an agent on the merged model alone (a MARL
                     agent that never had a pair to learn from)

``team`` holds the TeamConfig fields the adapters were trained for; the model carries them as
``team_defaults`` and a team applies them where its config says ``auto`` (see
:meth:`collabui.config.TeamConfig.for_model`), so ``collabui run --model smollm2-trained`` needs
no other flag. The shipped bundles live in the package (``collabui/trained/<name>/``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from collabui.errors import ConfigError, ModelLoadError

__all__ = ["BUNDLE_FORMAT", "SHIPPED_BUNDLES", "bundle_dir", "merged_folder", "bundle_fingerprint", "bundle_team", "read_bundle", "load_bundle", "write_bundle_manifest",
           "write_bundle", "interpolate_bundle", "check_agent_weight", "base_model_dir", "merged_model_dir", "write_merged_model"]

BUNDLE_FORMAT = "collabui.team-bundle/1"
#: Built-in model specs served from bundles inside the package.
SHIPPED_BUNDLES = {"smollm2-trained": "smollm2"}
#: Team settings a bundle may record: those its adapters were trained for (``topology``: the
#: DAG per-agent adapters were trained in, taken where a team asks for the ``random`` default).
_TEAM_FIELDS = ("prompt_style", "max_new_tokens", "element_format", "topology", "agent_styles", "agent_formats")


def bundle_dir(spec: str) -> Path:
    """The folder of a shipped bundle (``smollm2-trained``)."""
    from importlib.resources import files

    folder = Path(str(files("collabui") / "trained" / SHIPPED_BUNDLES[spec]))
    if not (folder / "team.json").is_file():
        raise ModelLoadError(
            f"the {spec} team is not in this installation ({folder} has no team.json); reinstall "
            "collabui-agents, or train one with cookbook/cpu_recipe/recipe.py and load it as trained:FOLDER"
        )
    return folder


def read_bundle(folder: str | Path) -> dict[str, Any]:
    """The validated manifest of the bundle in ``folder``."""
    root = Path(folder).expanduser()
    path = root / "team.json"
    if not path.is_file():
        raise ModelLoadError(f"{root} is not a trained team folder (no team.json); pass the folder the "
                             "recipe wrote (its bundle/), or use smollm2-trained")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ModelLoadError(f"{path} is not valid JSON ({exc}); copy the bundle again") from None
    if not isinstance(manifest, dict) or manifest.get("format") != BUNDLE_FORMAT:
        raise ModelLoadError(f"{path} is not a {BUNDLE_FORMAT} manifest; copy the bundle again")
    for name in [*manifest.get("merge", []), *_named(manifest.get("agents", []))]:
        if not (root / name / "adapter_config.json").is_file():
            raise ModelLoadError(f"the bundle in {root} names adapter {name!r} but {root / name} holds none; "
                                 "copy the whole bundle folder")
    return manifest


def bundle_fingerprint(folder: str | Path) -> str:
    """A short hash of the weights the bundle in ``folder`` computes with (base, adapters): a
    run folder of one bundle must not be resumed with another written there. Team settings are
    left out: the evaluations that use them record them resolved."""
    import hashlib

    root = Path(folder).expanduser()
    manifest = read_bundle(root)
    digest = hashlib.sha256(json.dumps({k: manifest.get(k) for k in ("base", "merge", "agents")},
                                       sort_keys=True).encode())
    base = str(manifest.get("base", ""))
    inside = [base[3:]] if base.startswith("hf:") and not Path(base[3:]).expanduser().is_absolute() else []
    for name in sorted([*manifest.get("merge", []), *_named(manifest.get("agents", []))]) + inside:
        for path in sorted((root / name).glob("*.safetensors")):
            digest.update(path.name.encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def _named(agents: list[str | None]) -> list[str]:
    """The adapter folders of an ``agents`` list (null: that agent has none)."""
    return [a for a in agents if a is not None]


def _base_folder(root: Path, base: str) -> Path:
    """The model folder of an ``hf:PATH`` base; a relative PATH is inside the bundle (a fully
    fine-tuned model travels with its bundle)."""
    path = Path(base[3:]).expanduser()
    return path if path.is_absolute() else root / path


def bundle_team(folder: str | Path) -> dict[str, Any]:
    """The team settings of the bundle in ``folder`` (its prompt style, element format...)."""
    return {k: v for k, v in dict(read_bundle(folder).get("team", {})).items() if k in _TEAM_FIELDS}


def load_bundle(folder: str | Path, **kwargs: Any) -> Any:
    """A LocalModel of the bundle: base + merged adapters, per-agent adapters by name, and the
    bundle's team settings as ``team_defaults``. ``kwargs`` go to LocalModel."""
    from collabui.models.local import LocalModel

    root = Path(folder).expanduser()
    manifest = read_bundle(root)
    base = str(manifest.get("base", "smollm2"))
    agents = list(manifest.get("agents", []))
    defaults = bundle_team(root)
    if agents:
        defaults["adapters"] = tuple(agents)
    options = {"merge": [root / m for m in manifest.get("merge", [])],
               "adapters": {a: root / a for a in _named(agents)}, "team_defaults": defaults, **kwargs}
    if base in {"smollm2", "embedded"}:
        model = LocalModel.embedded(base, **options)
    elif base.startswith("hf:"):
        model = LocalModel(str(_base_folder(root, base)), **options)
    else:
        raise ConfigError(f"{root / 'team.json'}: base {base!r} is not smollm2 or hf:PATH")
    model.name = f"trained:{root.name}"
    return model


def base_model_dir(folder: str | Path) -> Path:
    """The transformers folder of the bundle's base model (the embedded model's converted copy
    for ``smollm2``)."""
    root = Path(folder).expanduser()
    base = str(read_bundle(root).get("base", "smollm2"))
    if base in {"smollm2", "embedded"}:
        from collabui.models.embedded import embedded_model_dir

        return embedded_model_dir("smollm2")
    if base.startswith("hf:"):
        return _base_folder(root, base)
    raise ConfigError(f"{root / 'team.json'}: base {base!r} is not smollm2 or hf:PATH")


def write_merged_model(folder: str | Path, target: str | Path, *, agent: str | None = None) -> Path:
    """Write the bundle's shared model to ``target``: its base with the ``merge`` adapters
    folded in (float32 on a CPU, bfloat16 on CUDA, as LocalModel loads it): what a server, or
    training on top of it, loads as a plain model. ``agent``: also fold in that agent adapter
    (the agent's own whole model)."""
    from collabui.models.local import LocalModel

    root = Path(folder).expanduser()
    return _save_whole(LocalModel(base_model_dir(root), merge=_merged_folders(root, agent), prefix_cache=False),
                       Path(target))


def _save_whole(model: Any, out: Path) -> Path:
    """Save a loaded ``LocalModel``'s weights and tokenizer to ``out`` (whole or not at all) and close it."""
    import shutil

    tmp = out.with_name(f".{out.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.model.save_pretrained(str(tmp))
    model.tokenizer.save_pretrained(str(tmp))
    model.close()
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)  # whole or not at all
    return out


def merged_model_dir(folder: str | Path, cache_dir: str | Path | None = None, *, agent: str | None = None) -> Path:
    """A plain transformers folder of the bundle's shared model (base + ``merge`` adapters),
    e.g. for a vLLM server, which serves LoRA adapters but does not merge them: the base's own
    folder when nothing is merged, else a merged copy made once under the collabui cache
    (``merged-models/<hash of the base and the merged weights>``) and reused. ``agent``: the
    agent adapter of that name merged on top too (a server of that agent alone)."""

    root = Path(folder).expanduser()
    return merged_folder(base_model_dir(root), _merged_folders(root, agent), cache_dir)


def merged_folder(base: str | Path, adapters: Sequence[str | Path], cache_dir: str | Path | None = None) -> Path:
    """A plain transformers folder of the model folder ``base`` with ``adapters`` folded in, in
    order (a bundle's shared model, or a MARL agent's: the run's shared model plus that agent's
    adapter), made once under the collabui cache (``merged-models/<hash of the base's and the
    adapters' weights>``) and reused; ``base`` itself when there is nothing to fold in."""
    from collabui.models.local import LocalModel

    base = Path(base).expanduser()
    folders = [Path(a).expanduser() for a in adapters]
    if not folders:
        return base
    target = _merge_target(base, folders, cache_dir)
    if not (target / "config.json").is_file():
        _save_whole(LocalModel(str(base), merge=folders, prefix_cache=False), target)
    return target


def _merge_target(base: Path, adapters: Sequence[Path], cache_dir: str | Path | None) -> Path:
    """Where the merge of ``adapters`` into ``base`` is cached: a hash of the base's weights and
    the adapters' files (a retrained base or adapter is merged again)."""
    digest = weights_digest(base)
    for adapter in adapters:
        for path in sorted(adapter.glob("*")):
            if path.is_file():
                digest.update(path.name.encode())
                digest.update(path.read_bytes())
    if cache_dir is None:
        from collabui.models.embedded import cache_root

        cache_dir = cache_root() / "merged-models"
    target = Path(cache_dir) / digest.hexdigest()[:16]
    target.parent.mkdir(parents=True, exist_ok=True)
    return target


def weights_digest(folder: Path) -> Any:
    """A sha256 of a model folder's place and its safetensors files' names, sizes and mtimes: the
    key of what is made from it once and cached (merged models, GGUF files)."""
    import hashlib

    digest = hashlib.sha256(str(folder.resolve()).encode())
    for path in sorted(folder.glob("*.safetensors")):
        digest.update(f"{path.name}:{path.stat().st_size}:{path.stat().st_mtime_ns}".encode())
    return digest


def _merged_folders(root: Path, agent: str | None) -> list[Path]:
    """The adapter folders folded into a merged model: the bundle's ``merge`` list, then
    ``agent`` (one of the bundle's agent adapters) when given."""
    manifest = read_bundle(root)
    folders = [root / m for m in manifest.get("merge", [])]
    if agent is None:
        return folders
    if agent not in _named(manifest.get("agents", [])):
        raise ConfigError(f"{root / 'team.json'} has no agent adapter {agent!r}; its agents: "
                          f"{_named(manifest.get('agents', []))}")
    return [*folders, root / agent]


def write_bundle_manifest(folder: str | Path, *, base: str, merge: list[str], agents: list[str | None],
                          team: dict[str, Any], **extra: Any) -> Path:
    """Write ``team.json`` for adapters already in ``folder`` (checked by reading it back)."""
    unknown = sorted(set(team) - set(_TEAM_FIELDS))
    if unknown:
        raise ConfigError(f"team settings {unknown} are not bundle fields; use {list(_TEAM_FIELDS)}")
    root = Path(folder)
    path = root / "team.json"
    path.write_text(json.dumps({"format": BUNDLE_FORMAT, "base": base, "merge": merge, "agents": agents,
                                "team": team, **extra}, indent=1) + "\n", encoding="utf-8")
    read_bundle(root)
    return path


def _copy_adapter(src: Path, dst: Path, dtype: str, weight: float = 1.0) -> None:
    """Copy a PEFT adapter folder, its weights cast to ``dtype`` (fp16 halves what is committed;
    the loader casts back to the model's dtype) and its update scaled by ``weight``: each
    ``lora_B`` times it, so the model it gives moves that share of the way from the model under
    it to the trained one (W + weight x BA)."""
    import shutil

    import torch
    from safetensors.torch import load_file, save_file

    weights = src / "adapter_model.safetensors"
    if not weights.is_file() or not (src / "adapter_config.json").is_file():
        raise ModelLoadError(f"{src} is not a PEFT adapter folder (adapter_config.json and "
                             "adapter_model.safetensors); pass the folder train_sft or train_agents_dpo wrote")
    tensors = load_file(str(weights))
    if weight != 1.0:
        full = sorted(k for k in tensors if "lora_" not in k)
        if full:  # a whole weight (modules_to_save, a DoRA magnitude) is no update to scale
            raise ConfigError(f"{src} holds whole weights ({full[0]}...), not a LoRA update alone; only a plain "
                              "LoRA adapter can be interpolated (weight 1 copies it as it is)")
        tensors = {k: v * weight if "lora_B" in k or "lora_embedding_B" in k else v for k, v in tensors.items()}
    dst.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src / "adapter_config.json", dst / "adapter_config.json")
    cast = getattr(torch, dtype)
    save_file({k: v.to(cast).contiguous() for k, v in tensors.items()}, str(dst / "adapter_model.safetensors"))


def write_bundle(folder: str | Path, *, base: str, merge: dict[str, str | Path], agents: dict[str, str | Path],
                 team: dict[str, Any], dtype: str = "float16", slots: list[str | None] | None = None,
                 agent_weight: float = 1.0, **extra: Any) -> Path:
    """Write a complete bundle: the adapters (``{name: source folder}``) copied in ``dtype`` and
    the manifest. The folder is replaced whole, so a bundle never mixes two trainings.
    ``slots``: the adapter of each agent in order (None: the merged model alone); default the
    ``agents`` names, cycled over the team. ``agent_weight``: the share of the agents' adapters'
    update kept (see :func:`interpolate_bundle`; the ``merge`` adapters are copied whole)."""
    import shutil

    order = list(agents) if slots is None else list(slots)
    stray = sorted(set(_named(order)) - set(agents))
    if stray:
        raise ConfigError(f"slots name adapters {stray} that agents does not give; add their folders to agents")
    root = Path(folder)
    tmp = root.with_name(root.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    check_agent_weight(agent_weight)
    for name, src in merge.items():
        _copy_adapter(Path(src), tmp / name, dtype)
    for name, src in agents.items():
        _copy_adapter(Path(src), tmp / name, dtype, agent_weight)
    tmp.mkdir(parents=True, exist_ok=True)
    write_bundle_manifest(tmp, base=base, merge=list(merge), agents=order, team=team, **extra)
    shutil.rmtree(root, ignore_errors=True)
    tmp.rename(root)
    return root


def interpolate_bundle(source: str | Path, target: str | Path, weight: float) -> Path:
    """Write to ``target`` the bundle in ``source`` with its per-agent adapters' update scaled by
    ``weight`` (0 < weight <= 1): each agent's weights are then ``(1 - weight)`` x its shared
    model's plus ``weight`` x its trained ones, a linear path between the team a MARL run
    started from and the team it trained. Fine-tuned models interpolated with their start often
    keep the start's robustness off the training distribution and most of the gain on it
    (WiSE-FT: Wortsman et al., 2022, "Robust fine-tuning of zero-shot models"). The manifest
    records ``interpolated: {"from", "weight"}``; the ``merge`` adapters and team settings are
    copied as they are.

    Raises:
        ConfigError: ``weight`` outside (0, 1], ``target`` is ``source``, or an agent adapter
            holds whole weights.
        ModelLoadError: ``source`` is not a bundle.
    """
    root, out = Path(source).expanduser(), Path(target).expanduser()
    check_agent_weight(weight)
    if out.resolve() == root.resolve():
        raise ConfigError(f"the interpolated bundle would replace its source {root}; write it to another folder")
    manifest = read_bundle(root)
    known = {"format", "base", "merge", "agents", "team"}
    extra = {k: v for k, v in manifest.items() if k not in known}
    extra["interpolated"] = {"from": str(root), "weight": weight}
    return write_bundle(out, base=manifest["base"], merge={m: root / m for m in manifest.get("merge", [])},
                        agents={a: root / a for a in _named(manifest.get("agents", []))}, team=manifest.get("team", {}),
                        slots=list(manifest.get("agents", [])), agent_weight=weight, **extra)


def check_agent_weight(weight: float, name: str = "an adapter's weight") -> None:
    """Refuse a share of an adapter's update outside (0, 1] (``name``: what the error calls it)."""
    if isinstance(weight, bool) or not isinstance(weight, int | float) or not 0 < weight <= 1:  # NaN fails too
        raise ConfigError(f"{name} is the share of the update kept, in (0, 1]; got {weight!r}")
