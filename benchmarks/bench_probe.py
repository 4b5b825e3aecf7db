"""Benchmark: `provision probe` of 1, 4 and 8 SSH test hosts (target: 8 hosts <= 1.5x 1 host).

Brings up 8 test hosts (tests/hosts/testhosts.sh; root), then times, for each fleet size, the
whole probe as a user runs it (`provision probe -i INVENTORY --json`, a fresh process: import,
inventory, parallel SSH connects, the fact script, parsing) and the in-process part alone
(`probe_hosts`). Each figure is the median of --repeat runs after one warm-up run.

    sudo .venv/bin/python benchmarks/bench_probe.py [--repeat 5] [--out benchmarks/results/probe.json]

Uses the TESTHOSTS_* environment of the test suite (TESTHOSTS_DIR, _PREFIX, _NET, _BRIDGE), so it
can run beside other sets of hosts. Prints a Markdown table; exits 1 when the target is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from provision.hosts.gather import GatherOptions, matrix_lookup, probe_hosts  # noqa: E402
from provision.hosts.inventory import load_inventory  # noqa: E402
from tests.hosts import harness  # noqa: E402

SIZES = (1, 4, 8)
TARGET_RATIO = 1.5


def _inventory(hostset: harness.HostSet, count: int, path: Path) -> Path:
    lines = ["[bench]"] + [f"{h.name} ansible_host={h.address}" for h in hostset.hosts[:count]]
    lines += [
        "",
        "[bench:vars]",
        "ansible_user=root",
        f"ansible_ssh_private_key_file={hostset.key}",
        f"ansible_ssh_common_args='-o UserKnownHostsFile={hostset.known_hosts}'",
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def _cli(inventory: Path) -> float:
    env = {**os.environ, "AWS_EC2_METADATA_DISABLED": "true"}
    start = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "provision", "probe", "-i", str(inventory), "--json"],
        capture_output=True,
        text=True,
        env=env,
    )
    elapsed = time.perf_counter() - start
    doc = json.loads(result.stdout)
    if result.returncode != 0 or not doc["ok"]:
        raise SystemExit(f"probe failed: {result.stderr.strip()}")
    return elapsed


def _api(inventory: Path, options: GatherOptions, parallel: int = 32) -> float:
    targets = load_inventory(inventory)
    start = time.perf_counter()
    results = probe_hosts(targets, options, parallel=parallel)
    elapsed = time.perf_counter() - start
    if not all(r.ok for r in results):
        raise SystemExit(f"probe failed: {[str(r.error) for r in results if r.error]}")
    return elapsed


def _sshd_cpu(hostset: harness.HostSet) -> float:
    """CPU seconds the hosts' sshd listeners have reaped from their children so far (each SSH
    connection, the fact script and everything it ran, once the connection is closed)."""
    total = 0.0
    for host in hostset.hosts:
        listed = subprocess.run(["ip", "netns", "pids", host.name], capture_output=True, text=True)
        for pid in listed.stdout.split():
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
                stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if "sshd" in cmdline and "listener" in cmdline:
                total += (int(stat[13]) + int(stat[14])) / os.sysconf("SC_CLK_TCK")
    return total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "probe.json")
    args = parser.parse_args()
    if harness.available():
        raise SystemExit(harness.available())
    directory = Path(os.environ.get("TESTHOSTS_DIR", "/var/tmp/provision-bench-probe"))
    options = GatherOptions(imds_disabled=True, lookup=matrix_lookup())
    # Other work on the machine shares the CPUs with every test host: say how busy it was.
    load_before = os.getloadavg()[0]
    rows: dict[int, dict[str, float]] = {}
    with harness.running(
        max(SIZES),
        directory,
        prefix=os.environ.get("TESTHOSTS_PREFIX", "bp"),
        net=os.environ.get("TESTHOSTS_NET", "10.200.7"),
        bridge=os.environ.get("TESTHOSTS_BRIDGE", "bpbr0"),
    ) as hostset:
        time.sleep(2)  # let the hosts' boot-time services settle before timing
        for size in SIZES:
            inventory = _inventory(hostset, size, directory / f"bench-{size}.ini")
            _cli(inventory)  # warm-up: page cache on the hosts, sshd's first fork
            cli = [_cli(inventory) for _ in range(args.repeat)]
            api = [_api(inventory, options) for _ in range(args.repeat)]
            rows[size] = {
                "cli_s": statistics.median(cli),
                "api_s": statistics.median(api),
                "cli_min_s": min(cli),
                "api_min_s": min(api),
            }
        # The same 8 hosts one after another: what the parallel probe saves.
        serial = statistics.median(_api(inventory, options, parallel=1) for _ in range(args.repeat))
        # What one probe costs the probed side in CPU: the hosts share this machine's CPUs.
        before = _sshd_cpu(hostset)
        for _ in range(args.repeat):
            _api(inventory, options)
        time.sleep(0.5)  # let the listeners reap the last connections
        host_cpu = (_sshd_cpu(hostset) - before) / (args.repeat * max(SIZES))
    base = rows[SIZES[0]]
    print(
        f"probe of N SSH test hosts ({os.cpu_count()} CPUs, load average {load_before:.1f} before, "
        f"median of {args.repeat})\n"
    )
    print("| hosts | CLI (s) | x 1 host | in-process (s) | x 1 host |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    for size, r in rows.items():
        print(
            f"| {size} | {r['cli_s']:.2f} | {r['cli_s'] / base['cli_s']:.2f} | {r['api_s']:.2f} "
            f"| {r['api_s'] / base['api_s']:.2f} |"
        )
    print(f"| {max(SIZES)} one at a time | | | {serial:.2f} | {serial / base['api_s']:.2f} |")
    print(f"\nCPU per probed host (its sshd, the fact script and what it runs): {host_cpu:.3f} s")
    ratio = rows[max(SIZES)]["cli_s"] / base["cli_s"]
    ok = ratio <= TARGET_RATIO
    print(f"\n8 hosts / 1 host (CLI): {ratio:.2f} (target <= {TARGET_RATIO}): {'PASS' if ok else 'FAIL'}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
        "load_before": load_before,
        "repeat": args.repeat,
        "rows": rows,
        "serial_8_api_s": serial,
        "host_cpu_s": host_cpu,
        "ratio_8_to_1": ratio,
        "target": TARGET_RATIO,
        "ok": ok,
    }
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
