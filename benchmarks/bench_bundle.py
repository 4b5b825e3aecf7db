"""`provision up --bundle` against the same `up` from the network, on one fresh SSH test host.

    python benchmarks/bench_bundle.py [--runs 2] [--show DIR]   (root)

The host is a Debian 12 test container with the sources Debian's installer writes; the lock is
the CPU torch stack's (python3-venv and python3-packaging from apt, `torch==2.13.0+cpu` and its
closure, uv). Before each run the host is made fresh again (the venv, those packages and apt's
cache removed). Online, apt fetches from
Debian's archive through the test proxy and pip from the local wheelhouse (the test hosts' own way:
PyPI's torch is a CUDA build of several GB, and download.pytorch.org is out of the proxy's reach),
with the fleet cache off; from the bundle, the run copies the file to the host, checks and unpacks
it, and installs from it alone. Runs alternate (online, bundle, online, ...), medians compared.
Target: the bundle's run <= 0.8x the online one.

Also: the bundle's build time, and its size against the sum of its parts. ``--show DIR`` keeps
the human output of `provision bundle` and `up --bundle` there (the tutorial quotes it).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.hosts import harness

TARGET = 0.8
# Debian's installer writes the release, its -updates and -security suites (the bundle's closure
# comes from the same three); debootstrap, which built the test host, writes the release alone
SOURCES = (
    "printf '%s\\n' 'deb http://deb.debian.org/debian bookworm main'"
    " 'deb http://deb.debian.org/debian bookworm-updates main'"
    " 'deb http://security.debian.org/debian-security bookworm-security main' > /etc/apt/sources.list"
)
FRESH = (
    "rm -rf /opt/provision /var/lib/provision/bundles /tmp/provision-verify.*; "
    "apt-get purge -y -q --autoremove python3-venv python3.11-venv python3-packaging >/dev/null; apt-get clean"
)


def provision(cwd: Path, *args: str) -> tuple[float, subprocess.CompletedProcess[str]]:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    start = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "provision", *args], cwd=cwd, capture_output=True, text=True, env=env)
    took = time.perf_counter() - start
    if r.returncode != 0:
        raise SystemExit(f"provision {' '.join(args[:2])} failed ({r.returncode}): {r.stderr[-2000:]}")
    return took, r


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--work", type=Path, default=Path("/var/tmp/bench-bundle"))
    parser.add_argument("--show", type=Path, help="keep the human output of bundle and up --bundle here")
    ns = parser.parse_args()
    wheelhouse = harness.fill_wheelhouse()
    work = ns.work
    subprocess.run(["rm", "-rf", str(work)], check=True)
    work.mkdir(parents=True)
    with harness.bench_running(1, "/var/tmp/provision-bench-bundle", "bb", "10.200.21", ro_binds=[wheelhouse]) as hs:
        [host] = hs.hosts
        config = work / "provision.yaml"
        config.write_text(
            "stack: {frameworks: ['torch==2.13.0+cpu'], driver: none}\n"
            f"install: {{cache: off, pip: {{find_links: ['{wheelhouse}']}}, apt: {{proxy: '{hs.proxy}'}}}}\n"
            "verify: {allow_cpu: true}\n"
        )
        base = ["-i", str(hs.inventory), "-F", str(hs.ssh_config), "-c", str(config)]
        no_index = ["--set", "frameworks_no_index=true"]
        provision(work, "plan", *base, "--out", "run", *no_index)
        _, built = provision(work, "bundle", "provision.lock", "-c", str(config), "-o", "site.tar.gz", *no_index)
        build_s, doc = provision(
            work, "bundle", "provision.lock", "-c", str(config), "-o", "site.tar.gz", *no_index, "--json"
        )
        info = json.loads(doc.stdout)

        subprocess.run(["ssh", "-F", str(hs.ssh_config), host.name, SOURCES], check=True, capture_output=True)

        def fresh() -> None:
            subprocess.run(["ssh", "-F", str(hs.ssh_config), host.name, FRESH], check=True, capture_output=True)

        online, bundled = [], []
        shown = None
        for _ in range(ns.runs):
            fresh()
            took, _r = provision(work, "up", *base, *no_index, "--yes")
            online.append(took)
            fresh()
            took, shown = provision(work, "up", *base, "--bundle", "site.tar.gz", "--yes")
            bundled.append(took)
        if ns.show is not None and shown is not None:
            ns.show.mkdir(parents=True, exist_ok=True)
            (ns.show / "bundle.txt").write_text(built.stderr + built.stdout)
            (ns.show / "up-bundle.txt").write_text(shown.stderr + shown.stdout)
    parts = info["parts"]
    on, off = statistics.median(online), statistics.median(bundled)
    print("| measure | value | target |")
    print("|---|---|---|")
    print(f"| `up` from the network, one fresh host (median of {ns.runs}) | {on:.1f} s | |")
    print(f"| `up --bundle`, same host made fresh (median of {ns.runs}) | {off:.1f} s | |")
    print(f"| bundle / online | {off / on:.2f} | <= {TARGET} |")
    print(f"| `provision bundle` (build, downloads included) | {build_s:.1f} s | |")
    sum_parts = sum(parts.values())
    print(
        f"| bundle size / sum of its parts | {info['bytes'] / 1e6:.1f} MB / {sum_parts / 1e6:.1f} MB = "
        f"{info['bytes'] / sum_parts:.2f} | |"
    )
    print("| parts | " + ", ".join(f"{k} {v / 1e6:.1f} MB" for k, v in sorted(parts.items())) + " | |")


if __name__ == "__main__":
    main()
