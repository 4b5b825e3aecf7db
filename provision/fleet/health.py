"""`provision health` as functions: run ``provision-health --json`` on every host at once over the
Transport, and tell the fleet's verdict.

The program (provision/remote/health/, installed by `up`'s health role) answers on each host in
under two seconds; the fan-out is what makes a fleet take about as long as one host: every host
is connected and asked in its own thread (:data:`DEFAULT_PARALLEL` at once), so 200 hosts cost
about one host's time plus the connections (benchmarks/bench_health_fleet.py).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from provision.errors import ProvisionError
from provision.hosts.inventory import HostTarget
from provision.hosts.transport import Transport
from provision.model.defaults import HEALTH_PARALLEL, HEALTH_TIMEOUT_S

SCHEMA = "provision.health-fleet/1"
REPORT = "provision.health-report/1"  # the host program's --json (provision/remote/health/check.py)
COMMAND = "provision-health --json"
# Where the health role installs it (its health_launcher default); a login shell's PATH may lack
# /usr/local/sbin (sudo's secure_path has it, a plain root login over SSH may not).
LAUNCHER = "/usr/local/sbin/provision-health"
DEFAULT_PARALLEL = HEALTH_PARALLEL
DEFAULT_TIMEOUT_S = HEALTH_TIMEOUT_S

# A host's status: the program's three answers, and what the controller adds.
HEALTHY, UNHEALTHY, UNKNOWN = "healthy", "unhealthy", "unknown"
UNREACHABLE = "unreachable"  # no connection, or no answer in time
NOT_INSTALLED = "not-installed"  # the host has no provision-health (no `up` since it exists)

Connect = Callable[[HostTarget], Transport]


@dataclass
class HostHealth:
    """One host's answer: the program's report, or why there is none."""

    host: str
    status: str
    problems: list[str] = field(default_factory=list)
    lock_hash: str | None = None
    report: dict[str, Any] | None = None
    error: str | None = None
    seconds: float = 0.0
    at: float = field(default_factory=time.time)

    @property
    def ok(self) -> bool:
        return self.status == HEALTHY

    def to_json(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "ok": self.ok,
            "status": self.status,
            "problems": self.problems,
            "lock_hash": self.lock_hash,
            "error": self.error,
            "checked_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.at)),
            "seconds": round(self.seconds, 3),
            "report": self.report,
        }

    def line(self) -> str:
        """What is wrong, one line: the problems, what could not be told, or the error."""
        if self.error:
            return self.error
        unknown = [f"cannot tell {u}" for u in (self.report or {}).get("unknown", [])]
        return "; ".join(self.problems + unknown)


def read_answer(host: str, exit_status: int, stdout: str, stderr: str) -> HostHealth:
    """The host program's answer (its exit status and --json output) as a :class:`HostHealth`."""
    # 127 only: the program's own errors (a missing spec says "No such file") are its answer, not absence
    if exit_status == 127:
        return HostHealth(
            host, NOT_INSTALLED, error=f"{host}: provision-health is not installed (run `provision up` on it)"
        )
    try:
        doc = json.loads(stdout)
    except ValueError:
        doc = None
    if not isinstance(doc, dict) or doc.get("schema") != REPORT:
        last = (stderr.strip().splitlines() or [f"exit status {exit_status}, no report"])[-1]
        return HostHealth(host, UNKNOWN, error=f"{host}: provision-health: {last}")
    status = str(doc.get("status"))
    if status not in (HEALTHY, UNHEALTHY, UNKNOWN):
        status = UNKNOWN
    return HostHealth(host, status, [str(p) for p in doc.get("problems") or []], doc.get("lock_hash"), doc)


def check_host(target: HostTarget, connect: Connect, timeout: float = DEFAULT_TIMEOUT_S) -> HostHealth:
    """Ask one host (as root: the kernel log and the program's state are root's)."""
    started = time.monotonic()
    try:
        transport = connect(target)
    except ProvisionError as exc:
        return HostHealth(target.name, UNREACHABLE, error=exc.one_line(), seconds=time.monotonic() - started)
    try:
        # the name on PATH first (as any command); the role's path where PATH lacks /usr/local/sbin;
        # neither: 127, the shell's "command not found"
        command = (
            f"if command -v provision-health >/dev/null 2>&1; then {COMMAND}; "
            f"elif [ -x {LAUNCHER} ]; then {LAUNCHER} --json; else exit 127; fi"
        )
        ran = transport.run(command, sudo=True, timeout=timeout)
        result = read_answer(target.name, ran.exit_status, ran.stdout, ran.stderr)
    except ProvisionError as exc:
        result = HostHealth(target.name, UNREACHABLE, error=exc.one_line())
    finally:
        transport.close()
    result.seconds = time.monotonic() - started
    return result


def check_hosts(
    targets: Sequence[HostTarget],
    connect: Connect,
    *,
    parallel: int = DEFAULT_PARALLEL,
    timeout: float = DEFAULT_TIMEOUT_S,
) -> list[HostHealth]:
    """Every host at once (``parallel`` threads); the answers in the order of ``targets``."""
    if not targets:
        return []
    with ThreadPoolExecutor(max_workers=max(1, min(parallel, len(targets)))) as pool:
        return list(pool.map(lambda t: check_host(t, connect, timeout), targets))


def fleet_ok(results: Sequence[HostHealth]) -> bool:
    return all(r.ok for r in results)


def fleet_json(results: Sequence[HostHealth]) -> dict[str, Any]:
    counts: dict[str, int] = {}
    for r in results:
        counts[r.status] = counts.get(r.status, 0) + 1
    return {"schema": SCHEMA, "ok": fleet_ok(results), "counts": counts, "hosts": [r.to_json() for r in results]}
