"""A real HTTP server on a free port, stopped on leaving: on 127.0.0.1 for unit tests, on a test
hosts' bridge address for the integration tests (tests/integration/standin_repo.py serves the
stand-in repository with it, benchmarks/bench_bundle.py the wheelhouse)."""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


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


@contextlib.contextmanager
def serving_folder(folder: Path, address: str = "127.0.0.1") -> Iterator[str]:
    """Serve ``folder``'s files (and its listings, which pip's --find-links reads) on ``address``."""
    with serving(functools.partial(_QuietHandler, directory=str(folder)), address) as url:
        yield url


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass
