"""An SSH ProxyCommand that adds network latency: ``delay_pipe.py ONE_WAY_MS HOST PORT``.

The test hosts sit on a local bridge (RTT well under a millisecond) and this sandbox has no
netem, so a benchmark that asks "how does this behave on a real network" routes SSH through
this pipe: every chunk in each direction is held for ONE_WAY_MS before it is passed on, as a
link with that one-way delay would, without limiting throughput (chunks queue, they do not wait
for each other). Host keys are still checked against the real host: ssh sees %h and %p.
"""

from __future__ import annotations

import os
import queue
import socket
import sys
import threading
import time
from collections.abc import Callable


def _delayed(read: Callable[[], bytes], write: Callable[[bytes], None], delay: float, done: Callable[[], None]) -> None:
    held: queue.Queue[tuple[float, bytes]] = queue.Queue()

    def reader() -> None:
        while True:
            data = read()
            held.put((time.monotonic() + delay, data))
            if not data:
                return

    def writer() -> None:
        while True:
            due, data = held.get()
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            if not data:
                done()
                return
            write(data)

    threading.Thread(target=reader, daemon=True).start()
    threading.Thread(target=writer, daemon=True).start()


def main() -> None:
    delay = float(sys.argv[1]) / 1000
    sock = socket.create_connection((sys.argv[2], int(sys.argv[3])))
    finished = threading.Event()

    def out(data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(1, view) :]

    _delayed(lambda: os.read(0, 65536), sock.sendall, delay, lambda: sock.shutdown(socket.SHUT_WR))
    _delayed(lambda: sock.recv(65536), out, delay, finished.set)
    finished.wait()


if __name__ == "__main__":
    main()
