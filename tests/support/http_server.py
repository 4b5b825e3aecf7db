"""A real HTTP server on a free port, stopped on leaving: on 127.0.0.1 for unit tests, on a test
hosts' bridge address for the integration tests (tests/integration/standin_repo.py serves the
stand-in repository with it)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@contextlib.contextmanager
def serving(handler: Callable[..., BaseHTTPRequestHandler], address: str = "127.0.0.1") -> Iterator[str]:
    """Serve ``handler`` (a request handler class or a partial of one) on ``address``; yields the base URL."""
    server = ThreadingHTTPServer((address, 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://{address}:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
