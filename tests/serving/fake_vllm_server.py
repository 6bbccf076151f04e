"""A stand-in for ``python -m vllm.entrypoints.openai.api_server`` (no vLLM needed).

It reads the same flags, serves ``/v1/models`` (base model + every ``--lora-modules`` name)
and ``/v1/chat/completions`` (always a valid click), and records each chat request as one JSON
line in ``$FAKE_VLLM_RECORD``. ``$FAKE_VLLM_MODE`` picks a misbehaviour:

* ``die``          print an error and exit 1 before listening;
* ``hang``         never listen;
* ``child``        also start a child process (same group) and write its pid to
                   ``$FAKE_VLLM_CHILD_PID``;
* ``tree``         start a child that ignores SIGTERM, which starts a grandchild in a session
                   (and process group) of its own; write both pids to ``$FAKE_VLLM_CHILD_PID``;
* ``ignore-term``  ignore SIGTERM (must be SIGKILLed);
* ``barrier``      hold each chat request until ``$FAKE_VLLM_BARRIER`` are in flight (or 10 s),
                   so the record shows whether requests really overlapped.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODE = os.environ.get("FAKE_VLLM_MODE", "ok")
RECORD = os.environ.get("FAKE_VLLM_RECORD")
BARRIER = int(os.environ.get("FAKE_VLLM_BARRIER", "1"))
_lock = threading.Condition()
_inflight = 0
_arrivals = 0
_peak: dict[int, int] = {}


def _args() -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--served-model-name", required=True)
    p.add_argument("--host", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--lora-modules", nargs="*", default=[])
    p.add_argument("--dtype", default=None)
    args, _ = p.parse_known_args()
    return args


class Handler(BaseHTTPRequestHandler):
    names: list[str] = []

    def do_GET(self) -> None:  # noqa: N802
        self._send({"object": "list", "data": [{"id": n, "object": "model"} for n in self.names]})

    def do_POST(self) -> None:  # noqa: N802
        global _inflight, _arrivals
        arrived = time.time()
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with _lock:
            # Requests are grouped by arrival order (BARRIER per group); each records the most
            # requests of its group that were in flight at once.
            group, _arrivals = _arrivals // BARRIER, _arrivals + 1
            _inflight += 1
            _peak[group] = max(_peak.get(group, 0), _inflight)
            _lock.notify_all()
            if MODE == "barrier":
                _lock.wait_for(lambda: _arrivals >= (group + 1) * BARRIER, timeout=10)
            seen = _peak[group]
        if RECORD:
            with _lock, open(RECORD, "a") as f:
                f.write(json.dumps({"model": body.get("model"), "inflight": seen, "arrived": arrived, "t": time.time(), "body": body}) + "\n")
        if body.get("model") not in self.names:
            with _lock:
                _inflight -= 1
            self._send({"error": {"message": f"model {body.get('model')} not found"}}, 404)
            return
        text = 'Thought: B is the button.\nAction: {"action": "click", "element_id": "B"}'
        self._send({"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": text}}],
                    "usage": {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12}})
        with _lock:
            _inflight -= 1

    def _send(self, payload: dict, status: int = 200) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, fmt: str, *args: object) -> None:
        print("request", fmt % args, file=sys.stderr, flush=True)


_TREE_CHILD = """
import signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"], start_new_session=True)
print(grandchild.pid, flush=True)
time.sleep(3600)
"""


def _start_tree(pid_file: str) -> None:
    """A child that ignores SIGTERM, and its grandchild outside the server's process group."""
    child = subprocess.Popen([sys.executable, "-c", _TREE_CHILD], stdout=subprocess.PIPE, text=True)
    grandchild = child.stdout.readline().strip()
    with open(pid_file, "w") as f:
        f.write(f"{child.pid} {grandchild}")


def main() -> None:
    args = _args()
    print(f"fake vllm: model={args.model} kv={os.environ.get('VLLM_CPU_KVCACHE_SPACE')} dtype={args.dtype}", flush=True)
    if MODE == "die":
        print("RuntimeError: operator torchvision::nms does not exist", flush=True)
        sys.exit(1)
    if MODE == "hang":
        time.sleep(3600)
    if MODE == "ignore-term":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if MODE == "child":
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
        with open(os.environ["FAKE_VLLM_CHILD_PID"], "w") as f:
            f.write(str(child.pid))
    if MODE == "tree":
        _start_tree(os.environ["FAKE_VLLM_CHILD_PID"])
    Handler.names = [args.served_model_name] + [m.split("=", 1)[0] for m in args.lora_modules]
    server = ThreadingHTTPServer((args.host, args.port), Handler)
    print("Application startup complete.", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
