"""Benchmark: `provision health -i INVENTORY` of 200 inventory names that all point at one SSH test
host, against the same with one name (the issue's target: 200 names <= 3x one name).

Brings up one test host (tests/hosts/testhosts.sh; root) and installs provision-health there as
the health role lays it out (the program's files under /usr/local/lib/provision/health, the
launcher, a spec) through provision's own Transport. The spec is a CPU host's with no venv to
check (no driver, no GPU, nothing in the kernel log to read): what is timed is the fan-out, and
every one of the 200 answers is a whole program run on that host. Each figure is the median of
--repeat runs of the whole command as a user runs it (a fresh process: import, inventory, SSH
connects, `provision-health --json` on the host, the state DB), after one warm-up run.

The one host answers for 200 names, so its sshd sees 200 handshakes at once, where each of 200
real hosts would see one: its MaxStartups (OpenSSH's default 10:30:100 drops unauthenticated
connections beyond 10 at random) is raised to 256 on the test host for the benchmark.

    sudo .venv/bin/python benchmarks/bench_health_fleet.py [--repeat 3] [--names 200]

Uses the TESTHOSTS_* environment of the test suite. Prints a Markdown table; exits 1 when the
target is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
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


def timed(inv: Path, state: Path, names: int) -> float:
    start = time.perf_counter()
    ran = subprocess.run(
        [sys.executable, "-m", "provision", "health", "-i", str(inv), "--json", "--state", str(state)],
        capture_output=True,
        text=True,
    )
    elapsed = time.perf_counter() - start
    doc = json.loads(ran.stdout)
    if ran.returncode != 0 or doc["counts"] != {"healthy": names}:
        raise SystemExit(f"health failed: {doc['counts']} {ran.stderr.strip()[:500]}")
    return elapsed


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
    with (
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
        rows = {}
        for size, inv in ((1, one), (args.names, many)):
            timed(inv, state, size)  # warm-up
            rows[size] = [timed(inv, state, size) for _ in range(args.repeat)]
        bare = {
            size: statistics.median(connections_only(inv) for _ in range(args.repeat))
            for size, inv in ((1, one), (args.names, many))
        }
    base = statistics.median(rows[1])
    print(f"load average before: {load_before:.2f}, CPUs: {os.cpu_count()}\n")
    print("| inventory names (one host) | median (s) | best (s) | median / 1 name |")
    print("| ---: | ---: | ---: | ---: |")
    for size, times in rows.items():
        ratio = statistics.median(times) / base
        print(f"| {size} | {statistics.median(times):.2f} | {min(times):.2f} | {ratio:.2f} |")
    print(
        f"\nthe connections alone, in process (`true` for the program): 1 name {bare[1]:.2f} s, "
        f"{args.names} names {bare[args.names]:.2f} s"
    )
    ratio = statistics.median(rows[args.names]) / base
    print(f"\n{args.names} names / 1 name: {ratio:.2f} (target <= {TARGET_RATIO})")
    return 0 if ratio <= TARGET_RATIO else 1


if __name__ == "__main__":
    sys.exit(main())
