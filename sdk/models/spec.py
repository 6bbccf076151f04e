"""Turn a command-line model spec into a ChatModel.

Specs:

* ``smollm2`` - the embedded SmolLM2-135M-Instruct, run locally with transformers;
* ``smollm2-trained`` - the team trained by the CPU recipe and shipped in the package
  (SmolLM2 + its adapters and prompt style; see :mod:`collabui.models.bundle`);
* ``trained:FOLDER`` - any trained team bundle (the recipe's ``bundle/``);
* ``hf:PATH`` - a local transformers model folder;
* ``openai:MODEL@BASE_URL`` - an OpenAI-compatible server (vLLM, ``collabui serve``...);
  ``openai:MODEL`` alone uses ``$OPENAI_BASE_URL`` or the OpenAI API;
* ``random`` / ``random:SEED`` - the random-action baseline (``RandomPolicyModel``, seed 0 by
  default);
* ``lexical`` - the lexical baseline (``LexicalPolicyModel``: the element whose text overlaps
  most with the task).

Baselines read our prompt and answer in our format, so harnesses run them like any model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from collabui.errors import ConfigError, ModelLoadError
from collabui.models.base import ChatModel
from collabui.models.bundle import SHIPPED_BUNDLES
from collabui.redaction import redact_url

__all__ = ["load_model", "bundle_folder", "model_defaults", "model_element_format", "model_fingerprint", "agent_adapter_folders",
           "team_adapter_names", "local_base", "is_baseline", "SPEC_FORMS"]

#: The spec kinds that are baselines: policies in code, no weights, adapters or decoding.
BASELINE_KINDS = ("random", "lexical")

SPEC_FORMS = (
    "smollm2 (embedded), smollm2-trained (the shipped trained team), trained:FOLDER (a team "
    "bundle), hf:PATH (local folder), openai:MODEL@BASE_URL (server), "
    "random or random:SEED (random baseline), lexical (lexical baseline)"
)


def agent_adapter_folders(adapters: str | Path) -> dict[str, Path]:
    """``{"agent0": FOLDER/agent0, ...}``: the per-agent LoRA adapters of a trained team's
    adapter folder (as ``collabui train dpo|sft --pairs|marl`` save them).

    Raises:
        ConfigError: ``adapters`` is not a folder.
        ModelLoadError: it holds no ``agent{i}/`` folder with an ``adapter_config.json``.
    """
    root = Path(adapters).expanduser()
    if not root.is_dir():
        raise ConfigError(f"--adapters {adapters}: no such folder; pass the folder holding agent0/, agent1/, ...")
    found: dict[int, Path] = {}
    for folder in root.glob("agent*"):
        suffix = folder.name[len("agent"):]
        if suffix.isdigit() and (folder / "adapter_config.json").is_file():
            found[int(suffix)] = folder
    if not found:
        raise ModelLoadError(f"no agent adapters (agent0/, agent1/, ...) in {root}; run `collabui train dpo` first")
    return {f"agent{i}": found[i] for i in sorted(found)}


def team_adapter_names(adapters: str | Path | None, n_agents: int) -> tuple[str | None, ...] | None:
    """Per-agent adapter names for a team of ``n_agents`` using the adapter folder ``adapters``:
    ``agent{i}`` when the folder has it, else None (that agent uses the base model); None
    without a folder."""
    if adapters is None:
        return None
    names = agent_adapter_folders(adapters)
    return tuple(f"agent{i}" if f"agent{i}" in names else None for i in range(n_agents))


def local_base(spec: str) -> str:
    """What a local server or benchmark loads for ``spec``: ``smollm2`` or the folder of
    ``hf:PATH``.

    Raises:
        ConfigError: any other spec (a bare folder is told to use ``hf:``).
    """
    text = spec.strip()
    if text in {"smollm2", "embedded"}:
        return "smollm2"
    if text.startswith("hf:") and len(text) > 3:
        return text[3:]
    hint = f" (a folder is hf:{text})" if Path(text).expanduser().is_dir() else ""
    raise ConfigError(f"--model {redact_url(spec)!r} is not a local base model; use smollm2 or hf:PATH{hint}")


def is_baseline(spec: str) -> bool:
    """True for the ``random[:SEED]`` / ``lexical`` specs: no weights, no adapters, no decoding."""
    return spec.strip().partition(":")[0] in BASELINE_KINDS


def load_model(spec: str, *, adapters: str | Path | None = None, **kwargs: Any) -> ChatModel:
    """Load the chat model named by ``spec``; kwargs go to the model's constructor.

    Local specs take ``LocalModel`` kwargs (device, dtype, max_batch_size, threads);
    ``openai:`` specs take ``LangChainModel.from_openai`` kwargs (api_key, timeout, max_retries).

    ``adapters`` is a trained team's adapter folder (``agent0/``, ``agent1/``...): local base
    models (``smollm2``, ``hf:PATH``) load every adapter once and serve it by its folder name;
    an ``openai:`` server must serve them under those names (``collabui serve --adapters
    FOLDER`` does). :func:`team_adapter_names` gives the team's per-agent names.

    Baseline specs (``random``, ``random:SEED``, ``lexical``) ignore kwargs (they load nothing).

    Raises:
        ConfigError: the spec has none of the forms in ``SPEC_FORMS`` (or a bad random seed), or
            ``adapters`` does not fit the spec.
        ModelLoadError: the model, its adapters or its client library cannot be loaded.
    """
    text = spec.strip()
    kind, sep, rest = text.partition(":")
    if adapters is not None:
        folders = agent_adapter_folders(adapters)
        if text in {"smollm2", "embedded"} or (sep and kind == "hf" and rest):
            kwargs = {**kwargs, "adapters": folders}
        elif not (sep and kind == "openai"):
            raise ConfigError(f"--adapters needs a base model (smollm2, hf:PATH) or an openai: server, not "
                              f"{redact_url(spec)!r}; trained bundles bring their own adapters and baselines use none")
    if text in {"smollm2", "embedded"}:
        from collabui.models.local import LocalModel

        return LocalModel.embedded("smollm2", **kwargs)
    if text in SHIPPED_BUNDLES or (sep and kind == "trained" and rest):
        from collabui.models.bundle import bundle_dir, load_bundle

        return load_bundle(bundle_dir(text) if text in SHIPPED_BUNDLES else rest, **kwargs)
    if kind in BASELINE_KINDS:
        return _baseline(spec, kind, sep, rest, kwargs)
    if sep and kind == "hf" and rest:
        from collabui.models.local import LocalModel

        return LocalModel(rest, **kwargs)
    if sep and kind == "openai" and rest:
        from collabui.models.langchain import LangChainModel

        model, at, base_url = rest.partition("@")
        if not model:
            raise ConfigError(f"model spec {redact_url(spec)!r} has no model name; use {SPEC_FORMS}")
        if at and not base_url.startswith(("http://", "https://")):
            raise ConfigError(
                f"model spec {redact_url(spec)!r}: the base URL must start with http:// or https:// "
                "(e.g. openai:MODEL@http://127.0.0.1:8000/v1)"
            )
        return LangChainModel.from_openai(model, base_url or None, **kwargs)
    raise ConfigError(f"unknown model spec {redact_url(spec)!r}; use one of: {SPEC_FORMS}")


def bundle_folder(spec: str) -> Path | None:
    """The bundle folder a spec names (``smollm2-trained``, ``trained:FOLDER``); None for
    specs that are not bundles."""
    from collabui.models.bundle import bundle_dir

    text = spec.strip()
    kind, sep, rest = text.partition(":")
    if text in SHIPPED_BUNDLES:
        return bundle_dir(text)
    if sep and kind == "trained" and rest:
        return Path(rest).expanduser()
    return None


def model_defaults(spec: str) -> dict[str, Any]:
    """The team settings a model spec was trained for (a bundle's ``prompt_style``,
    ``element_format``...), read without loading the model: the device is made before the
    model loads, and must already show pages the way the model learned to read them. ``{}``
    for specs that are not bundles."""
    from collabui.models.bundle import bundle_team

    folder = bundle_folder(spec)
    return bundle_team(folder) if folder is not None else {}


def model_fingerprint(spec: str) -> str | None:
    """A hash of the weights behind a bundle spec (``smollm2-trained``, ``trained:FOLDER``),
    which a folder path alone does not pin down; None for other specs."""
    from collabui.models.bundle import bundle_fingerprint

    folder = bundle_folder(spec)
    return bundle_fingerprint(folder) if folder is not None else None


def model_element_format(spec: str) -> str:
    """The page format the model named by ``spec`` learned to read (``html`` unless a bundle
    says otherwise): what ``element_format="auto"`` means."""
    return str(model_defaults(spec).get("element_format", "html"))


def _baseline(spec: str, kind: str, sep: str, rest: str, kwargs: dict[str, Any]) -> ChatModel:
    from collabui.models.baselines import LexicalPolicyModel, RandomPolicyModel

    del kwargs  # model options (device, adapters...) mean nothing to a baseline: harnesses pass them blindly
    if kind == "lexical":
        if sep:
            raise ConfigError(f"model spec {redact_url(spec)!r}: the lexical baseline takes no argument; use 'lexical'")
        return LexicalPolicyModel()
    if not sep:
        return RandomPolicyModel()
    try:
        return RandomPolicyModel(int(rest.strip()))
    except ValueError:
        raise ConfigError(f"model spec {redact_url(spec)!r}: the seed must be an integer, e.g. random:7") from None
