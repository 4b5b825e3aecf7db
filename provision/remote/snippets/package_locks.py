"""Which package-manager locks are held, run ON the target (stdlib only, ideally as root).

Usage: package_locks.py fcntl:PATH... pid:PATH...   (the list is the preflight role's
package_locks.json, which provision.hosts.gather reads and passes: one list for both.)
apt/dpkg/rpm take POSIX record locks (fcntl) on their lock files; F_GETLK names the holder without
taking the lock. The files are readable by root only, so without root this reports them as
denied rather than guessing. dnf keeps a pid file while it runs.
Prints {"held": [{"path", "pid", "process"}], "denied": [paths]}.
"""

from __future__ import annotations

import fcntl
import os
import struct
import sys
from typing import Any

# struct flock on 64-bit Linux: short l_type, short l_whence, off_t l_start, off_t l_len, pid_t l_pid
FLOCK = "hhqqi4x"


def _char(c: str) -> str:
    if c.isprintable() and c not in '"\\':
        return c
    return f"\\u{ord(c):04x}" if ord(c) < 0x10000 else "?"


def _json(value: Any) -> str:
    # json's import costs this small program about as much as the rest of it, on every probed
    # host: the output is simple enough to write by hand.
    if value is None:
        return "null"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return '"' + "".join(_char(c) for c in value) + '"'
    if isinstance(value, list):
        return "[" + ", ".join(_json(v) for v in value) + "]"
    return "{" + ", ".join(f"{_json(k)}: {_json(v)}" for k, v in value.items()) + "}"


def comm(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return None


def holder(path: str) -> int | None:
    fd = os.open(path, os.O_RDONLY)
    try:
        query = struct.pack(FLOCK, fcntl.F_WRLCK, 0, 0, 0, 0)
        l_type, _, _, _, pid = struct.unpack(FLOCK, fcntl.fcntl(fd, fcntl.F_GETLK, query))
        return None if l_type == fcntl.F_UNLCK else pid
    finally:
        os.close(fd)


def main(args: list[str]) -> None:
    fcntl_locks = [a[len("fcntl:") :] for a in args if a.startswith("fcntl:")]
    pid_files = [a[len("pid:") :] for a in args if a.startswith("pid:")]
    held: list[dict[str, Any]] = []
    denied: list[str] = []
    for path in fcntl_locks:
        if not os.path.exists(path):
            continue
        try:
            pid = holder(path)
        except PermissionError:
            denied.append(path)
            continue
        if pid is not None:
            # A holder in another PID namespace shows as pid 0: still held.
            held.append({"path": path, "pid": pid or None, "process": comm(pid) if pid else None})
    for path in pid_files:
        try:
            with open(path) as f:
                pid = int(f.read().strip() or 0)
        except (OSError, ValueError):
            continue
        if pid and os.path.exists(f"/proc/{pid}"):
            held.append({"path": path, "pid": pid, "process": comm(pid)})
    print(_json({"held": held, "denied": denied}))


if __name__ == "__main__":
    main(sys.argv[1:])
