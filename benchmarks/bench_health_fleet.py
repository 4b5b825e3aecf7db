"""Benchmark: `provision health -i INVENTORY` of 200 inventory names that all point at one SSH test
host, against the same with one name (the issue's target: 200 names <= 3x one name).

Brings up one test host (tests/hosts/testhosts.sh; root) and installs provision-health there as
the health role lays it out (the program's files under /usr/local/lib/provision/health, the
launcher, a spec) through provision's own Transport. The spec is a CPU host's with no venv to
check (no driver, no GPU, nothing in the kernel log to read): what is timed is the fan-out, and
every one of the 200 answers is a whole program run on that host. Each figure is the median of
--repeat runs of the whole command as a user runs it (a fresh process: import, inventory, SSH
connects, `provision-health --json` on the host, the state DB), after one warm-up run.

Beside the wall time it counts the CPU time the run costs (the controller's command, and the test
host's sshd and program runs: the harness starts the host as a child of this process, so both are
in a CPU-accounting cgroup this benchmark makes for itself, cgroup v1 ``cpuacct`` or v2 ``cpu.stat``).
``CPU s / CPUs`` is the least wall time any fan-out can take on this machine: a wall time near it
says the fan-out is concurrent and the machine's cores are what bound it.

The one host answers for 200 names, so its sshd sees 200 handshakes at once, where each of 200
real hosts would see one: its MaxStartups (OpenSSH's default 10:30:100 drops unauthenticated
connections beyond 10 at random) is raised to 256 on the test host for the benchmark.

    sudo .venv/bin/python benchmarks/bench_health_fleet.py [--repeat 3] [--names 200]

Uses the TESTHOSTS_* environment of the test suite. Prints a Markdown table; exits 1 when the
target is missed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.bench_probe import _inventory as probe_inventory  # noqa: E402
from provision.fleet.health import DEFAULT_PARALLEL, LAUNCHER  # noqa: E402
from provision.hosts.inventory import HostTarget, load_inventory  # noqa: E402
from provision.hosts.ssh import connect  # noqa: E402
from provision.remote.health import SOURCES  # noqa: E402
from tests.hosts import harness  # noqa: E402
from tests.unit.cli.test_health_cli import spec  # noqa: E402

TARGET_RATIO = 3.0
# A CPU host's spec (no driver, no GPU, no venv to check), as the CLI's tests use it.
SPEC = spec([], None)


def inventory(hostset: harness.HostSet, names: int, path: Path) -> Path:
    """bench_probe's inventory of the first host, its host line repeated under ``names`` names."""
    lines = probe_inventory(hostset, 1, path).read_text().splitlines()
    host = lines[1].split(" ", 1)[1]  # "NAME ansible_host=ADDRESS": the address part
    lines[1:2] = [f"n{i:03d} {host}" for i in range(names)]
    path.write_text("\n".join(lines) + "\n")
    return path


def install(one: Path) -> None:
    """The health role's layout on the host, through the Transport (root login)."""
    transport = connect(load_inventory(one)[0])
    try:
        lib = "/usr/local/lib/provision"
        files = {f"{lib}/health/{name}": source.read_bytes() for name, source in SOURCES.items()}
        files["/etc/provision/health.json"] = json.dumps(SPEC).encode()
        launcher = f'#!/bin/sh\nPYTHONPATH={lib} exec /usr/bin/python3 -s -m health "$@"\n'
        files[LAUNCHER] = launcher.encode()
        for path, data in files.items():
            folder = shlex.quote(str(Path(path).parent))
            ran = transport.run(f"mkdir -p {folder} && cat > {shlex.quote(path)}", stdin=data)
            assert ran.ok, ran.stderr
        transport.run(f"chmod 0755 {LAUNCHER} && mkdir -p /var/lib/provision")
        sshd = "echo 'MaxStartups 256' > /etc/ssh/sshd_config.d/bench.conf && systemctl reload ssh"
        assert transport.run(sshd).ok
    finally:
        transport.close()


class CpuMeter:
    """CPU seconds used by this process and everything it starts after :meth:`enter` (a cgroup of
    its own: its children stay in it, the test host's container included, whose nspawn runs with
    ``--register=no --keep-unit``, tests/hosts/testhosts.sh)."""

    def __init__(self) -> None:
        self.group: Path | None = None
        self.usage: Path | None = None
        self.scale = 1e-9

    def enter(self) -> bool:
        name = f"provision-bench-{os.getpid()}"
        for root, usage, scale in (
            (Path("/sys/fs/cgroup/cpuacct"), "cpuacct.usage", 1e-9),  # v1: nanoseconds
            (Path("/sys/fs/cgroup"), "cpu.stat", 1e-6),  # v2: usage_usec
        ):
            if not (root / usage).exists() and not (root / "cgroup.controllers").exists():
                continue
            try:
                (root / name).mkdir()
                (root / name / "cgroup.procs").write_text(f"{os.getpid()}\n")
            except OSError:
                continue
            self.group, self.usage, self.scale = root / name, root / name / usage, scale
            return True
        return False

    def seconds(self) -> float:
        if self.usage is None:
            return float("nan")
        text = self.usage.read_text()
        if self.usage.name == "cpu.stat":
            text = next(line.split()[1] for line in text.splitlines() if line.startswith("usage_usec "))
        return int(text.strip()) * self.scale

    def leave(self) -> None:
        if self.group is not None:
            with contextlib.suppress(OSError):
                (self.group.parent / "cgroup.procs").write_text(f"{os.getpid()}\n")
                self.group.rmdir()


@contextlib.contextmanager
def cpu_meter() -> Iterator[CpuMeter]:
    meter = CpuMeter()
    meter.enter()
    try:
        yield meter
    finally:
        meter.leave()


def _children_cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def timed(inv: Path, state: Path, names: int, meter: CpuMeter) -> tuple[float, float, float]:
    """The command's wall time, the CPU seconds it cost here and on the host, and the controller's
    share of them (the `provision health` process: its SSH client is paramiko, in process)."""
    cpu, controller = meter.seconds(), _children_cpu()
    start = time.perf_counter()
    ran = subprocess.run(
        [sys.executable, "-m", "provision", "health", "-i", str(inv), "--json", "--state", str(state)],
        capture_output=True,
        text=True,
    )
    elapsed = time.perf_counter() - start
    # the host's sshd sessions and program runs end before the command does: nothing is left running
    used, controller = meter.seconds() - cpu, _children_cpu() - controller
    doc = json.loads(ran.stdout)
    if ran.returncode != 0 or doc["counts"] != {"healthy": names}:
        raise SystemExit(f"health failed: {doc['counts']} {ran.stderr.strip()[:500]}")
    return elapsed, used, controller


def connections_only(inv: Path) -> float:
    """The same fan-out in process with ``true`` for the program: what the SSH connections cost."""
    targets = load_inventory(inv)

    def one(target: HostTarget) -> bool:
        transport = connect(target)
        try:
            return transport.run("true").ok
        finally:
            transport.close()

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=min(DEFAULT_PARALLEL, len(targets))) as pool:
        assert all(pool.map(one, targets))
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--names", type=int, default=200)
    args = parser.parse_args()
    if harness.available():
        raise SystemExit(harness.available())
    directory = Path(os.environ.get("TESTHOSTS_DIR", "/var/tmp/provision-bench-health"))
    load_before = os.getloadavg()[0]
    cpus = os.cpu_count() or 1
    with (
        cpu_meter() as meter,
        harness.running(
            1,
            directory,
            prefix=os.environ.get("TESTHOSTS_PREFIX", "bh"),
            net=os.environ.get("TESTHOSTS_NET", "10.200.8"),
            bridge=os.environ.get("TESTHOSTS_BRIDGE", "bhbr0"),
        ) as hostset,
        tempfile.TemporaryDirectory() as tmp,
    ):
        one = inventory(hostset, 1, Path(tmp) / "one.ini")
        many = inventory(hostset, args.names, Path(tmp) / "many.ini")
        install(one)
        time.sleep(2)  # let the host's boot-time services settle before timing
        state = Path(tmp) / "state.db"
        rows: dict[int, list[float]] = {}
        cpu: dict[int, list[float]] = {}
        mine: dict[int, list[float]] = {}
        for size, inv in ((1, one), (args.names, many)):
            timed(inv, state, size, meter)  # warm-up
            runs = [timed(inv, state, size, meter) for _ in range(args.repeat)]
            rows[size], cpu[size], mine[size] = ([run[i] for run in runs] for i in range(3))
        bare = {
            size: statistics.median(connections_only(inv) for _ in range(args.repeat))
            for size, inv in ((1, one), (args.names, many))
        }
    base = statistics.median(rows[1])
    print(f"load average before: {load_before:.2f}, CPUs: {cpus}\n")
    head = ("inventory names (one host)", "median (s)", "best (s)", "median / 1 name", "CPU s (median)")
    print("| " + " | ".join((*head, "of it the controller's", "CPU s / CPUs", "median / (CPU s / CPUs)")) + " |")
    print("| ---: " * 8 + "|")
    for size, times in rows.items():
        wall, used = statistics.median(times), statistics.median(cpu[size])
        floor = used / cpus
        cells = (wall, min(times), wall / base, used, statistics.median(mine[size]), floor, wall / floor)
        print(f"| {size} | " + " | ".join(f"{c:.2f}" for c in cells) + " |")
    print(
        f"\nthe connections alone, in process (`true` for the program): 1 name {bare[1]:.2f} s, "
        f"{args.names} names {bare[args.names]:.2f} s"
    )
    ratio = statistics.median(rows[args.names]) / base
    print(f"\n{args.names} names / 1 name: {ratio:.2f} (target <= {TARGET_RATIO})")
    return 0 if ratio <= TARGET_RATIO else 1


if __name__ == "__main__":
    sys.exit(main())
