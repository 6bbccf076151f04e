"""The lifetime of a model server process, shared by every server collabui starts.

A :class:`ServerProcess` subclass says what to run (``command()``, ``environment()``) and under
which model name the server answers (``name``); this class starts it on 127.0.0.1 in a process
group of its own, waits until ``/v1/models`` lists that name, and stops the whole group on
``stop()``, on leaving a ``with`` block, at interpreter exit, and (Linux) when the starting
thread's process dies, so no server outlives its user.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, NoReturn

import psutil
from tenacity import RetryCallState, Retrying, retry_if_result, stop_after_delay, wait_fixed

from collabui._processes import descendants, kill_all
from collabui.errors import ConfigError, ModelLoadError

__all__ = ["ServerProcess", "free_port", "group_members"]


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago on ``host``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _parent_death_hook() -> Any:
    # The kernel sends the signal when the *thread* that forked exits, so only arm it from the
    # main thread; a server started from a worker thread relies on stop() and atexit.
    if sys.platform.startswith("linux") and threading.current_thread() is threading.main_thread():
        return _set_parent_death_signal
    return None


def _set_parent_death_signal() -> None:  # pragma: no cover - runs in the child before exec
    # Linux: the server gets SIGTERM when the process that started it dies, even by SIGKILL.
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:
        pass


class ServerProcess:
    """Start, wait for and stop one server process (a mixin of the server dataclasses).

    A subclass has the attributes ``host``, ``port``, ``log_file``, ``ready_timeout_s`` and
    ``stop_timeout_s``, calls :meth:`_init_process` from ``__post_init__``, and defines
    ``name``, ``command()`` and ``environment()``. ``label`` names the program in messages;
    ``setup_hint`` says how to install it when its executable is missing.
    """

    label = "server"
    setup_hint = "install it"
    host: str
    port: int | None
    log_file: str | os.PathLike[str] | None
    ready_timeout_s: float
    stop_timeout_s: float

    @property
    def name(self) -> str:  # pragma: no cover - every subclass defines it
        raise NotImplementedError

    def command(self) -> list[str]:  # pragma: no cover - every subclass defines it
        raise NotImplementedError

    def environment(self) -> dict[str, str]:  # pragma: no cover - every subclass defines it
        raise NotImplementedError

    def _init_process(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()
        self._log_path: Path | None = None

    @property
    def base_url(self) -> str:
        """``http://HOST:PORT/v1`` (the port is fixed at ``start()`` when it was None)."""
        if self.port is None:
            raise ConfigError("the server has no port yet; call start() first or pass port=")
        return f"http://{self.host}:{self.port}/v1"

    @property
    def log_path(self) -> Path | None:
        """Where the server logs go (known once started)."""
        return self._log_path

    @property
    def running(self) -> bool:
        """True while the server process is alive."""
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        """The server's process id (also its process-group id), or None."""
        return self._proc.pid if self._proc is not None else None

    def start(self) -> Any:
        """Start the server and wait until it serves the model; returns self.

        Raises:
            ModelLoadError: the program is missing, the process died during start-up (the
                message quotes the log's last error line), or it was not ready in time.
            ConfigError: bad model or adapter files.
        """
        with self._lock:
            if self.running:
                return self
            if self.port is None:
                self.port = free_port(self.host)
            cmd = self.command()
            if not Path(cmd[0]).exists():
                raise ModelLoadError(f"{self.label} is not set up ({cmd[0]} does not exist); {self.setup_hint}")
            self._log_path = self._resolve_log()
            with open(self._log_path, "ab") as log:
                log.write(f"$ {' '.join(cmd)}\n".encode())
                log.flush()
                try:
                    self._proc = subprocess.Popen(
                        cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                        env=self.environment(), start_new_session=True,
                        preexec_fn=_parent_death_hook(),
                    )
                except OSError as exc:
                    raise ModelLoadError(f"cannot run {cmd[0]} ({exc.strerror or exc}); "
                                         f"{self.setup_hint}") from None
            atexit.register(self.stop)
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _log_name(self) -> str:
        return f"{self.label.lower().replace('.', '')}-{self.port}.log"

    def _resolve_log(self) -> Path:
        if self.log_file is not None:
            path = Path(self.log_file).expanduser()
        else:
            from collabui.models.embedded import cache_root

            path = cache_root() / "logs" / self._log_name()
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    def _wait_ready(self) -> None:
        """Poll ``/v1/models`` every 0.5 s until it lists our model; a dead process or
        ``ready_timeout_s`` ends the wait with one line naming the log."""
        url = f"http://{self.host}:{self.port}/v1/models"
        poll = Retrying(retry=retry_if_result(lambda ready: not ready), wait=wait_fixed(0.5),
                        stop=stop_after_delay(self.ready_timeout_s), retry_error_callback=self._not_ready)
        poll(self._ready, url)  # a ModelLoadError from _ready is not retried: it propagates

    def _ready(self, url: str) -> bool:
        code = self._proc.poll() if self._proc is not None else -1
        if code is not None:
            raise ModelLoadError(f"{self.label} exited with code {code} during start-up ({self._log_error()}); "
                                 f"see {self._log_path}")
        return self._serves_model(url)

    def _not_ready(self, state: RetryCallState) -> NoReturn:
        raise ModelLoadError(f"{self.label} was not ready after {self.ready_timeout_s:.0f} s; see "
                             f"{self._log_path}, raise ready_timeout_s{self._slow_start_hint()}")

    def _slow_start_hint(self) -> str:
        return ""

    def _serves_model(self, url: str) -> bool:
        # Our model name in the list, not just any answer: another server may hold the port.
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                data = json.load(response)
        except (OSError, ValueError, urllib.error.URLError):
            return False
        names = {m.get("id") for m in data.get("data", []) if isinstance(m, dict)}
        return self.name in names

    def _log_error(self, max_lines: int = 200) -> str:
        """The most telling line of the log's tail: the last error-looking one, else the last."""
        try:
            lines = self._log_path.read_text(encoding="utf-8", errors="replace").splitlines()[-max_lines:]
        except (OSError, AttributeError):
            return "no log"
        lines = [ln.strip() for ln in lines if ln.strip()]
        for line in reversed(lines):
            if "Error" in line or "error:" in line.lower():
                return line[-300:]
        return lines[-1][-300:] if lines else "empty log"

    def served_models(self) -> list[str]:
        """The model names the running server lists."""
        with urllib.request.urlopen(f"{self.base_url}/models", timeout=5) as response:
            data = json.load(response)
        return [m["id"] for m in data.get("data", [])]

    def stop(self) -> None:
        """Stop the server and every process it started. Idempotent.

        SIGTERM to its process group first, SIGKILL for whatever of the group is left after
        ``stop_timeout_s``; then SIGKILL every descendant listed before the signals that still
        runs, so one that left the group (a session of its own) does not survive either.
        """
        with self._lock:
            proc, self._proc = self._proc, None
            atexit.unregister(self.stop)
        if proc is None:
            return
        tree = descendants(proc.pid)  # now: once the server is gone they belong to init
        self._end_group(proc)
        kill_all(tree)

    def _end_group(self, proc: subprocess.Popen[bytes]) -> None:
        """SIGTERM the server's process group, SIGKILL what is left of it after the grace."""
        pgid = proc.pid  # start_new_session: the server leads its own group
        _signal_group(pgid, signal.SIGTERM)
        try:
            proc.wait(timeout=self.stop_timeout_s)
        except subprocess.TimeoutExpired:
            _signal_group(pgid, signal.SIGKILL)
            proc.wait()
        # Children (vLLM's engine core) may outlive the leader briefly; give them the same
        # grace, then kill the rest so nothing is orphaned.
        deadline = time.monotonic() + self.stop_timeout_s
        while group_members(pgid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if group_members(pgid):
            _signal_group(pgid, signal.SIGKILL)

    def wait(self) -> int:
        """Block until the server exits on its own; returns its exit code (for ``serve``)."""
        proc = self._proc
        return proc.wait() if proc is not None else 0

    def __enter__(self) -> Any:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of process group ``pgid``.

    Zombies are left out: in containers whose init does not reap, killed children linger as
    zombies, which hold no memory and cannot be killed again.
    """
    members = []
    for proc in psutil.process_iter(["status"]):
        # The process may end between the listing and the question (NoSuchProcess, ESRCH).
        with contextlib.suppress(psutil.Error, ProcessLookupError, PermissionError):
            if proc.info["status"] != psutil.STATUS_ZOMBIE and os.getpgid(proc.pid) == pgid:
                members.append(proc.pid)
    return members
