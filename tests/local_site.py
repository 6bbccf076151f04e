"""A folder served over HTTP on a loopback address, for browser tests (pages only load over http(s)).

``/redirect?to=URL`` answers ``302 Location: URL``; ``/slow?s=SECONDS&to=URL`` answers the
same after SECONDS; every other path is a file of the folder.
Use 127.0.0.1 for the site under test and another loopback address (127.0.0.2) as "another site".
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

__all__ = ["LocalSite", "serve"]


class _Handler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass

    def do_GET(self) -> None:  # noqa: N802 - stdlib name
        parts = urlsplit(self.path)
        if parts.path == "/slow":
            time.sleep(float(parse_qs(parts.query)["s"][0]))
        if parts.path in ("/redirect", "/slow"):
            self.send_response(302)
            self.send_header("Location", parse_qs(parts.query)["to"][0])
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.requests.append(self.path)
        super().do_GET()

    requests: list[str] = []


class LocalSite:
    """A running server: ``url(name)`` is the address of file ``name``; ``requests`` the paths
    it served (redirects aside), to prove another site never received a request."""

    def __init__(self, root: Path, host: str) -> None:
        handler = type("Handler", (_Handler,), {"requests": []})
        self.requests: list[str] = handler.requests
        self.httpd = ThreadingHTTPServer((host, 0), functools.partial(handler, directory=str(root)))
        self.httpd.daemon_threads = True
        self.base = f"http://{host}:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True,
                                       kwargs={"poll_interval": 0.05})
        self.thread.start()

    def url(self, name: str = "") -> str:
        return f"{self.base}/{name}"

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)


@contextmanager
def serve(root: Path, host: str = "127.0.0.1") -> Iterator[LocalSite]:
    """Serve ``root`` on ``host`` (an ephemeral port) for the duration of the block."""
    site = LocalSite(root, host)
    try:
        yield site
    finally:
        site.stop()
