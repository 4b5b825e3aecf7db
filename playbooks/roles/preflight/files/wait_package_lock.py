#!/usr/bin/env python3
"""Wait until no other process holds the package manager's lock, or fail with one clear line.

Usage: wait_package_lock.py TIMEOUT_SECONDS LOCKS_JSON   (the verdict on stdout: a script's stderr shares the pty)
LOCKS_JSON is package_locks.json beside this script (the task passes its content): dpkg/apt/rpm
take fcntl locks on the "fcntl" files; dnf writes the "pid_files". A fresh cloud VM often runs
unattended-upgrades (or dnf-automatic) for minutes after boot, so we wait rather than fail.
"""
import fcntl
import json
import os
import sys
import time


def holder_of_dpkg(path):
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError:
        return None
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return path
    else:
        fcntl.lockf(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def holder_of_pidfile(path):
    try:
        pid = int(open(path).read().strip() or "0")
    except (OSError, ValueError):
        return None
    if pid > 0 and os.path.exists(f"/proc/{pid}"):
        return path
    return None


def process_names():
    names = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                names.append(open(f"/proc/{pid}/comm").read().strip())
            except OSError:
                pass
    return names


def main():
    timeout = int(sys.argv[1])
    locks = json.loads(sys.argv[2])
    deadline = time.monotonic() + timeout
    while True:
        held = [h for h in map(holder_of_dpkg, locks["fcntl"]) if h] + [h for h in map(holder_of_pidfile, locks["pid_files"]) if h]
        if not held:
            print("free")
            return 0
        if time.monotonic() >= deadline:
            busy = sorted({n for n in process_names() if n in ("apt", "apt-get", "dpkg", "dnf", "yum", "unattended-upgr", "dnf-automatic", "packagekitd")})
            print(f"preflight: the package manager lock {held[0]} is still held after {timeout}s"
                  f" (by {', '.join(busy) or 'another process'}); wait for it to finish"
                  " (unattended-upgrades on a fresh VM), or raise preflight_package_lock_timeout")
            return 1
        time.sleep(2)


if __name__ == "__main__":
    sys.exit(main())
