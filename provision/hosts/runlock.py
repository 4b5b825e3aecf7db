"""One `provision up` per host: a lock on the host, held by a process there for the whole run.

Two runs on one host at once would both install into one venv and could reboot it under each
other (a check or a verify beside an apply reads a half-made venv). Each run (`up`, `up --check`,
`provision verify`) therefore starts, on every host it applies to, a small Python process (over its
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
  stale file outlives it. The run keeps the host across the reboot (below).

Across a reboot the run never lets go. Before the driver role reboots, the play writes a claim
(:data:`CLAIM_PATH`, outside ``/run``, so it survives the reboot) naming the run and until when
it holds (the reboot's timeout plus :data:`RETAKE_WAIT_S`, by the controller's clock). A holder
that gets the flock while another run's claim is in force says "busy" and lets go, as if the flock
were taken: so from the claim's writing to its removal nobody else's holder keeps the host, also in
the moments after boot before the owning run is back. The controller notices its holder ended and
takes the lock again every :data:`RETAKE_S` (:class:`RunLocks`); the play's first task after the
reboot waits until the lock file names this run (the flock is ours again), and only then removes
the claim and goes on. A run that never comes back (its controller died mid-reboot) holds the host
until the claim's time is up, then the claim is void. A play marks its processes with the run id
(``PROVISION_APPLY=<run>``), so a re-take does not wait for the run's own play.

A lock is never broken by age or by another run: it is held exactly while a live process holds
it, and the file's contents only name that process's run.

A killed controller lets go of the lock, but not of the work it started: sshd gives a session
without a terminal no SIGHUP, so the Ansible module it was running (a pip install of torch, an apt
transaction) goes on until it finishes, writing into the venv the next run builds. Every play
therefore marks its processes with :data:`APPLY_MARK` in their environment (site.yml's play
environment; children inherit it), and the holder, once it has the flock, waits until no process
on the host carries another run's mark before it says "held" (at most ``leftover_s``; after that the host
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
# The claim a play writes before it reboots the host: /var/lib, the FHS's place for state that
# persists across reboots (https://refspecs.linuxfoundation.org/FHS_3.0/fhs/ch05s08.html).
CLAIM_PATH = "/var/lib/provision/run-claim.json"
RETAKE_S = 2.0  # how often the controller tries to take a lost lock again (its holder ended)
# How long the play waits after a reboot for its controller to hold the lock again (sshd answers,
# a connection, the holder): also what the claim adds to the reboot's timeout.
RETAKE_WAIT_S = 300.0
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
# the mark, leftover seconds, wait-print seconds, claim path, run id. Lines it prints: "busy
# <holder line>" (exit 75), "claimed <claim>" (another run's claim is in force, exit 75), "wait
# <json [[pid, command], ...]>" while an earlier apply's processes run, "left <json>" when they
# outlived leftover seconds (exit 76), "held". Its own run's marked processes (the play going on
# after a reboot) are not an earlier apply's.
_HOLDER = r"""
import fcntl, json, os, select, sys, time
path, line, stale = sys.argv[1], sys.argv[2], float(sys.argv[3])
mark, leftover, every = (sys.argv[4] + "=").encode(), float(sys.argv[5]), float(sys.argv[6])
claim_path, run = sys.argv[7], sys.argv[8]
own = mark + run.encode()
fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
try:
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
except BlockingIOError:
    print("busy " + (os.pread(fd, 4096, 0).decode(errors="replace").strip() or "{}"), flush=True)
    sys.exit(75)
try:
    with open(claim_path, "rb") as f:
        claim = json.loads(f.read(4096))
except (OSError, ValueError):
    claim = None
if isinstance(claim, dict) and claim.get("run") != run:
    try:
        until = float(claim.get("until"))
    except (TypeError, ValueError):
        until = 0.0
    if until > time.time():  # another run is rebooting this host: it is still that run's
        print("claimed " + json.dumps(claim), flush=True)
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
                if not any(v.startswith(mark) and v != own for v in f.read().split(b"\0")):
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

    @staticmethod
    def until_of(text: str) -> float:
        """A claim's end (seconds since the epoch); 0 when it names none."""
        try:
            return float(json.loads(text)["until"])
        except (ValueError, KeyError, TypeError):
            return 0.0

    def describe(self) -> str:
        since = "an unknown time"
        if self.since:
            since = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(self.since)) + " UTC"
        return f"run {self.run} (since {since}, controller {self.controller})"


def run_lock_vars(run: str) -> dict[str, str | float]:
    """What the play needs to keep ``run``'s lock across a reboot: group_vars' ``provision_run_lock``,
    read by the driver role's reboot tasks (playbooks/roles/nvidia_driver/tasks/reboot.yml)."""
    return {
        "run": run,
        "controller": this_controller(),
        "path": LOCK_PATH,
        "claim": CLAIM_PATH,
        "retake_s": RETAKE_WAIT_S,
    }


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
    argv = [
        LOCK_PATH,
        holder.line(),
        str(stale_s),
        APPLY_MARK,
        str(leftover_s),
        str(WAIT_PRINT_S),
        CLAIM_PATH,
        holder.run,
    ]
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
    if answer.startswith("claimed "):
        other = Holder.parse(answer[8:])
        until = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(Holder.until_of(answer[8:])))
        raise HostBusy(
            f"{transport.name}: another provision up holds this host across its reboot: {other.describe()}",
            f"wait for it to end, then run again; if it never comes back, its claim ({CLAIM_PATH}) "
            f"lapses at {until} UTC",
        )
    raise OperationFailed(
        f"{transport.name}: cannot take the host lock {LOCK_PATH}: {answer or 'no answer'}",
        "the lock needs python3 and root (sudo without a password prompt, or become_password)",
    )


class RunLocks:
    """The locks of one run, heartbeats and re-takes included; every method is safe to call from
    ``up``'s finally.

    A lock whose holder ended (the host rebooted) is taken again in the background every
    ``retake_s``, while the apply goes on: the play waits for it after a reboot (see the module's
    docstring), and the host's claim keeps other runs off until then.
    """

    def __init__(
        self,
        run: str,
        connect: Callable[[HostTarget], Transport],
        *,
        workers: int = 32,
        heartbeat_s: float = HEARTBEAT_S,
        stale_s: float = STALE_S,
        leftover_s: float = LEFTOVER_S,
        retake_s: float = RETAKE_S,
    ) -> None:
        self.holder = Holder(run, time.time(), this_controller())
        self._heartbeat_s, self._stale_s, self._leftover_s = heartbeat_s, stale_s, leftover_s
        self._retake_s = retake_s
        self._connect = connect
        self._workers = workers
        self._held: dict[str, HeldLock] = {}
        self._targets: dict[str, HostTarget] = {}
        self._taking: dict[str, threading.Lock] = {}  # one acquire at a time per host
        self._retaking: set[str] = set()
        self._mutex = threading.Lock()
        self._stop = threading.Event()
        self._watch: threading.Thread | None = None

    def take(self, targets: Sequence[HostTarget]) -> dict[str, ProvisionError]:
        """Take the lock on each target (side by side); returns the hosts that did not get it and why."""
        failed: dict[str, ProvisionError] = {}

        def one(target: HostTarget) -> None:
            error = self._take_one(target, only_if_lost=False)
            if error is not None:
                failed[target.name] = error

        if targets:
            with concurrent.futures.ThreadPoolExecutor(max_workers=min(self._workers, len(targets))) as pool:
                list(pool.map(one, targets))
        if self._watch is None:
            self._watch = threading.Thread(target=self._watcher, name="host-locks", daemon=True)
            self._watch.start()
        return failed

    def _take_one(self, target: HostTarget, *, only_if_lost: bool) -> ProvisionError | None:
        with self._mutex:
            taking = self._taking.setdefault(target.name, threading.Lock())
        with taking:
            with self._mutex:
                old = self._held.get(target.name)
            if only_if_lost and old is not None and old.alive():
                return None  # taken again meanwhile (by the watcher or still_held)
            if self._stop.is_set():
                return None
            try:
                held = acquire(self._connect(target), self.holder, stale_s=self._stale_s, leftover_s=self._leftover_s)
            except ProvisionError as exc:
                return exc
            with self._mutex:
                stopped = self._stop.is_set()
                if not stopped:
                    old = self._held.pop(target.name, None)
                    self._held[target.name] = held
                    self._targets[target.name] = target
            if stopped:  # released while this acquire ran: let go of what it got
                held.release()
            elif old is not None:
                old.release()
            return None

    def still_held(self, targets: Sequence[HostTarget]) -> dict[str, ProvisionError]:
        """Take again the locks whose holder ended (the host rebooted); the hosts that lost it and why."""
        with self._mutex:
            lost = [t for t in targets if t.name in self._held and not self._held[t.name].alive()]
        failed: dict[str, ProvisionError] = {}
        for t in lost:
            error = self._take_one(t, only_if_lost=True)
            if error is not None:
                failed[t.name] = error
        return failed

    def holds(self, host: str) -> bool:
        with self._mutex:
            return host in self._held

    def alive(self, host: str) -> bool:
        """Whether ``host``'s holder runs now (False while a reboot's re-take is pending)."""
        with self._mutex:
            held = self._held.get(host)
        return held is not None and held.alive()

    def waited(self, host: str) -> tuple[Leftover, ...]:
        """The earlier apply's processes that taking ``host``'s lock waited for (none: empty)."""
        with self._mutex:
            held = self._held.get(host)
            return held.waited if held else ()

    def _watcher(self) -> None:
        """Heartbeats every ``heartbeat_s``; a lock whose holder ended is taken again every ``retake_s``."""
        last_beat = time.monotonic()
        while not self._stop.wait(min(self._retake_s, self._heartbeat_s)):
            with self._mutex:
                held = dict(self._held)
            if time.monotonic() - last_beat >= self._heartbeat_s:
                last_beat = time.monotonic()
                for lock in held.values():
                    lock.heartbeat()  # a lost one shows as not alive() and is taken again below
            for name, lock in held.items():
                if lock.alive():
                    continue
                with self._mutex:
                    if name in self._retaking:
                        continue
                    self._retaking.add(name)
                    target = self._targets[name]
                threading.Thread(target=self._retake, args=(target,), name=f"host-lock-{name}", daemon=True).start()

    def _retake(self, target: HostTarget) -> None:
        try:
            self._take_one(target, only_if_lost=True)  # a failure is tried again on the next round
        finally:
            with self._mutex:
                self._retaking.discard(target.name)

    def release(self) -> None:
        self._stop.set()
        with self._mutex:
            held, self._held = list(self._held.values()), {}
        for lock in held:
            lock.release()
