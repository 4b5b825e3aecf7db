"""One `provision up` per host: a lock on the host, held by a process there for the whole run.

Two runs on one host at once would both install into one venv and could reboot it under each
other. Each run therefore starts, on every host it applies to, a small Python process (over its
own SSH channel, as root) that takes ``flock(2)`` on :data:`LOCK_PATH`, writes who holds it into
the file (run id, since when, controller) and then waits on its stdin. A second run's holder
finds the lock taken, prints the holder's line and exits: that host fails with it, alone.

How a lock is released, in every way a run can end:

* the run ends (pass, fail, Ctrl-C): ``release`` closes the channel; the holder reads end of
  file and exits; the kernel drops the flock with its last descriptor;
* the controller is killed (SIGKILL, OOM): the kernel closes its TCP connection, sshd closes the
  holder's stdin, the same end of file;
* the controller vanishes without closing (power loss, network cut): nothing arrives; the holder
  exits when no heartbeat came for :data:`STALE_S` seconds (the controller sends one every
  :data:`HEARTBEAT_S`);
* the host reboots (a driver install): the holder dies with it and ``/run`` is a tmpfs, so no
  stale file outlives it; the run takes the lock again before it verifies the host.

A lock is never broken by age or by another run: it is held exactly while a live process holds
it, and the file's contents only name that process's run.

A killed controller lets go of the lock, but not of the work it started: sshd gives a session
without a terminal no SIGHUP, so the Ansible module it was running (a pip install of torch, an apt
transaction) goes on until it finishes, writing into the venv the next run builds. Every play
therefore marks its processes with :data:`APPLY_MARK` in their environment (site.yml's play
environment; children inherit it), and the holder, once it has the flock, waits until no process
on the host carries the mark before it says "held" (at most ``leftover_s``; after that the host
fails, naming the processes).
"""

from __future__ import annotations

import concurrent.futures
import getpass
import json
import os
import shlex
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from provision.errors import OperationFailed, ProvisionError

if TYPE_CHECKING:
    from provision.hosts.inventory import HostTarget
    from provision.hosts.transport import Spawned, Transport

# /run: a tmpfs on every systemd distribution (and the FHS's place for runtime state); emptied by a
# reboot, which also ends the holder, so a lock file never outlives the lock.
LOCK_PATH = "/run/provision.lock"
HEARTBEAT_S = 10.0
STALE_S = 90.0  # several heartbeats lost in a row: the controller is gone
BUSY_EXIT = 75  # EX_TEMPFAIL (sysexits.h): try again later
# The environment variable every play's processes carry (ansible/render.py puts it into the play's
# environment): the holder waits for processes that still carry it, left by an earlier apply.
APPLY_MARK = "PROVISION_APPLY"
# How long a run waits for an earlier apply's leftover processes (a torch install on a slow disk
# takes minutes) before that host fails.
LEFTOVER_S = 900.0
WAIT_PRINT_S = 2.0  # while waiting, the holder says so this often (the controller reads it as alive)

# The holder, run with the host's python3 as root. argv: lock path, the holder line, stale seconds,
# the mark, leftover seconds, wait-print seconds. Lines it prints: "busy <holder line>" (exit 75),
# "wait <json [[pid, command], ...]>" while an earlier apply's processes run, "left <json>" when
# they outlived leftover seconds (exit 76), "held".
_HOLDER = r"""
import fcntl, json, os, select, sys, time
path, line, stale = sys.argv[1], sys.argv[2], float(sys.argv[3])
mark, leftover, every = (sys.argv[4] + "=").encode(), float(sys.argv[5]), float(sys.argv[6])
fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
try:
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
except BlockingIOError:
    print("busy " + (os.pread(fd, 4096, 0).decode(errors="replace").strip() or "{}"), flush=True)
    sys.exit(75)
os.ftruncate(fd, 0)
os.pwrite(fd, (line + "\n").encode(), 0)

def marked():
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open("/proc/" + pid + "/environ", "rb") as f:
                if not any(v.startswith(mark) for v in f.read().split(b"\0")):
                    continue
            with open("/proc/" + pid + "/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:  # ended while we looked
            continue
        found.append([int(pid), cmd[:200]])
    return sorted(found)

deadline = time.monotonic() + leftover
left = marked()
while left:
    if time.monotonic() > deadline:
        print("left " + json.dumps(left), flush=True)
        sys.exit(76)
    print("wait " + json.dumps(left), flush=True)
    ready, _, _ = select.select([0], [], [], every)
    if ready and not os.read(0, 4096):
        sys.exit(0)  # the controller is gone while we waited
    left = marked()
print("held", flush=True)
while True:
    ready, _, _ = select.select([0], [], [], stale)  # fd 0 only: select's 1024 limit cannot apply
    if not ready or not os.read(0, 4096):
        sys.exit(0)  # silence or end of file: the controller is gone; exiting drops the flock
"""


class HostBusy(OperationFailed):
    """Another run holds the host's lock."""

    code = "host_busy"


@dataclass(frozen=True)
class Holder:
    """What the lock file says about the run that holds it."""

    run: str
    since: float
    controller: str

    def line(self) -> str:
        return json.dumps({"run": self.run, "since": round(self.since, 1), "controller": self.controller})

    @classmethod
    def parse(cls, text: str) -> Holder:
        try:
            doc = json.loads(text)
            return cls(str(doc["run"]), float(doc["since"]), str(doc["controller"]))
        except (ValueError, KeyError, TypeError):
            return cls("(unknown)", 0.0, text.strip()[:120] or "(unknown)")

    def describe(self) -> str:
        since = "an unknown time"
        if self.since:
            since = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(self.since)) + " UTC"
        return f"run {self.run} (since {since}, controller {self.controller})"


def this_controller() -> str:
    """Who takes the lock: user@machine and process id (where to look for the holding run)."""
    return f"{getpass.getuser()}@{socket.gethostname()} pid {os.getpid()}"


class HeldLock:
    """One host's lock while this run holds it."""

    def __init__(
        self, host: str, transport: Transport, process: Spawned, holder: Holder, waited: Sequence[Leftover] = ()
    ) -> None:
        self.host = host
        self.holder = holder
        self.waited = tuple(waited)  # an earlier apply's processes this lock waited for
        self._transport = transport
        self._process = process

    def alive(self) -> bool:
        return self._process.running()

    def heartbeat(self) -> bool:
        return self._process.write(b".")

    def release(self) -> None:
        self._process.close()
        self._transport.close()


@dataclass(frozen=True)
class Leftover:
    """A process of an earlier apply, still running on the host."""

    pid: int
    command: str

    @classmethod
    def parse_list(cls, text: str) -> list[Leftover]:
        try:
            return [cls(int(pid), str(cmd)) for pid, cmd in json.loads(text)]
        except (ValueError, TypeError):
            return []


def describe_leftovers(procs: Sequence[Leftover], most: int = 3) -> str:
    shown = ", ".join(f"pid {p.pid} ({p.command[:60]})" for p in procs[:most])
    return shown + (f" and {len(procs) - most} more" if len(procs) > most else "")


def acquire(
    transport: Transport,
    holder: Holder,
    *,
    timeout: float = 60.0,
    stale_s: float = STALE_S,
    leftover_s: float = LEFTOVER_S,
) -> HeldLock:
    """Take ``transport``'s host's lock for ``holder``; HostBusy names the run that holds it, or the
    processes of an earlier apply that still ran after ``leftover_s``.

    The transport is kept for the lock (closed by ``release``, or here when the lock is not taken).
    """
    spawn = getattr(transport, "spawn", None)
    if spawn is None:
        transport.close()
        raise OperationFailed(f"{transport.name}: this connection cannot hold a host lock", "use SSH or --local")
    argv = [LOCK_PATH, holder.line(), str(stale_s), APPLY_MARK, str(leftover_s), str(WAIT_PRINT_S)]
    command = " ".join(["python3", "-c", shlex.quote(_HOLDER), *(shlex.quote(a) for a in argv)])
    process: Spawned | None = None
    waited: list[Leftover] = []
    try:
        process = spawn(command, sudo=True)
        assert process is not None
        answer = process.readline(timeout)
        while answer.startswith("wait "):  # one line every WAIT_PRINT_S while it waits
            waited = waited or Leftover.parse_list(answer[5:])
            answer = process.readline(timeout)
    except BaseException:
        if process is not None:
            process.close()
        transport.close()
        raise
    if answer == "held":
        return HeldLock(transport.name, transport, process, holder, waited)
    process.close()
    transport.close()
    if answer.startswith("left "):
        procs = Leftover.parse_list(answer[5:])
        raise HostBusy(
            f"{transport.name}: processes of an earlier apply still run after {leftover_s:.0f}s: "
            + describe_leftovers(procs),
            "a controller killed mid-run leaves its Ansible tasks running: wait for them to end "
            "(or stop them), then run again",
        )
    if answer.startswith("busy "):
        other = Holder.parse(answer[5:])
        raise HostBusy(
            f"{transport.name}: another provision up holds this host: {other.describe()}",
            f"wait for it to end, then run again; a controller that died lets go within {stale_s:.0f}s",
        )
    raise OperationFailed(
        f"{transport.name}: cannot take the host lock {LOCK_PATH}: {answer or 'no answer'}",
        "the lock needs python3 and root (sudo without a password prompt, or become_password)",
    )


class RunLocks:
    """The locks of one run, heartbeats included; every method is safe to call from ``up``'s finally."""

    def __init__(
        self,
        run: str,
        connect: Callable[[HostTarget], Transport],
        *,
        workers: int = 32,
        heartbeat_s: float = HEARTBEAT_S,
        stale_s: float = STALE_S,
        leftover_s: float = LEFTOVER_S,
    ) -> None:
        self.holder = Holder(run, time.time(), this_controller())
        self._heartbeat_s, self._stale_s, self._leftover_s = heartbeat_s, stale_s, leftover_s
        self._connect = connect
        self._workers = workers
        self._held: dict[str, HeldLock] = {}
        self._mutex = threading.Lock()
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None

    def take(self, targets: Sequence[HostTarget]) -> dict[str, ProvisionError]:
        """Take the lock on each target (side by side); returns the hosts that did not get it and why."""
        failed: dict[str, ProvisionError] = {}

        def one(target: HostTarget) -> None:
            try:
                held = acquire(self._connect(target), self.holder, stale_s=self._stale_s, leftover_s=self._leftover_s)
            except ProvisionError as exc:
                failed[target.name] = exc
                return
            with self._mutex:
                old = self._held.pop(target.name, None)
                self._held[target.name] = held
            if old is not None:
                old.release()

        if targets:
            with concurrent.futures.ThreadPoolExecutor(max_workers=min(self._workers, len(targets))) as pool:
                list(pool.map(one, targets))
        if self._beat is None:
            self._beat = threading.Thread(target=self._heartbeats, name="host-locks", daemon=True)
            self._beat.start()
        return failed

    def still_held(self, targets: Sequence[HostTarget]) -> dict[str, ProvisionError]:
        """Take again the locks whose holder ended (the host rebooted); the hosts that lost it and why."""
        with self._mutex:
            lost = [t for t in targets if t.name in self._held and not self._held[t.name].alive()]
        return self.take(lost) if lost else {}

    def holds(self, host: str) -> bool:
        with self._mutex:
            return host in self._held

    def waited(self, host: str) -> tuple[Leftover, ...]:
        """The earlier apply's processes that taking ``host``'s lock waited for (none: empty)."""
        with self._mutex:
            held = self._held.get(host)
            return held.waited if held else ()

    def _heartbeats(self) -> None:
        while not self._stop.wait(self._heartbeat_s):
            with self._mutex:
                held = list(self._held.values())
            for lock in held:
                lock.heartbeat()  # a lost one shows as not alive(); still_held takes it again

    def release(self) -> None:
        self._stop.set()
        with self._mutex:
            held, self._held = list(self._held.values()), {}
        for lock in held:
            lock.release()
