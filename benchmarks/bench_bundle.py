"""`provision up --bundle` against the same `up` from the network, on one fresh SSH test host.

    python benchmarks/bench_bundle.py [--runs 2] [--uplink-mbit 100 ...] [--show DIR]   (root)

The host is a Debian 12 test container with the sources Debian's installer writes; the lock is
the CPU torch stack's (python3-venv and python3-packaging from apt, `torch==2.13.0+cpu` and its
closure, uv). Before each run the host is made fresh again (the venv, those packages and apt's
cache removed). Online, apt fetches from Debian's archive through the test proxy and pip its wheels
from an index across the same link: the local wheelhouse served over HTTP on the bridge address
(PyPI's torch is a CUDA build of several GB, and download.pytorch.org is out of the proxy's reach),
with the fleet cache off. From the bundle, the run copies the file to the host over SSH, checks and
unpacks it, and installs from it alone. Runs alternate (online, bundle, online, ...), medians
compared. Target: the bundle's run <= 0.8x the online one.

The site's uplink is modelled: for each ``--uplink-mbit`` (0: not limited, the bridge's own speed)
an HTB class on the host's side of its veth (tc-htb(8)) holds what the proxy and the wheel index
send to the host to that rate, while SSH from the controller (the bundle's copy, Ansible) stays at
LAN speed: the shape of a site where the nodes reach each other fast and the world through one
link. Without it the "network" here is the machine's own memory and a fast mirror.

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
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.hosts import harness
from tests.support.http_server import serving_folder

TARGET = 0.8
# Debian's installer writes the release, its -updates and -security suites (the bundle's closure
# comes from the same three); debootstrap, which built the test host, writes the release alone
SOURCES = (
    "printf '%s\\n' 'deb http://deb.debian.org/debian bookworm main'"
    " 'deb http://deb.debian.org/debian bookworm-updates main'"
    " 'deb http://security.debian.org/debian-security bookworm-security main' > /etc/apt/sources.list"
    # and their lists, as such a host has them: a base rootfs built the same day is within the apt
    # role's cache_valid_time, so the online run would not read the new suites, and after the
    # bundle's run (python3.11 from -security) its apt could not install bookworm's python3.11-venv
    " && apt-get update -q >/dev/null"
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


def shape(link: str, mbit: int, ports: list[int]) -> None:
    """What leaves ``link`` (the bridge's side of the host's veth: traffic to the host) from the
    given source ports at ``mbit``, everything else unlimited; 0 removes the shaping."""
    subprocess.run(["tc", "qdisc", "del", "dev", link, "root"], capture_output=True)  # none yet: fine
    if not mbit:
        return
    htb = ["tc", "qdisc", "add", "dev", link, "root", "handle", "1:", "htb", "default", "10", "r2q", "1000"]
    run = [htb, _htb_class(link, "1:10", "10gbit"), _htb_class(link, "1:20", f"{mbit}mbit")]
    match = ["protocol", "ip", "u32", "match", "ip", "sport"]
    run += [
        ["tc", "filter", "add", "dev", link, "parent", "1:", *match, str(p), "0xffff", "flowid", "1:20"] for p in ports
    ]
    for cmd in run:
        subprocess.run(cmd, check=True, capture_output=True)


def _htb_class(link: str, classid: str, rate: str) -> list[str]:
    return ["tc", "class", "add", "dev", link, "parent", "1:", "classid", classid, "htb", "rate", rate]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--uplink-mbit", type=int, nargs="+", default=[0, 1000, 100])
    parser.add_argument("--work", type=Path, default=Path("/var/tmp/bench-bundle"))
    parser.add_argument("--show", type=Path, help="keep the human output of bundle and up --bundle here")
    ns = parser.parse_args()
    wheelhouse = harness.fill_wheelhouse()
    work = ns.work
    subprocess.run(["rm", "-rf", str(work)], check=True)
    work.mkdir(parents=True)
    rows: list[str] = []
    with (
        harness.bench_running(1, "/var/tmp/provision-bench-bundle", "bb", "10.200.21", ro_binds=[wheelhouse]) as hs,
        serving_folder(wheelhouse, f"{hs.net}.1") as url,  # the index across the modelled link
    ):
        [host] = hs.hosts
        index = urlsplit(url)  # http://<bridge address>:<port>
        config = work / "provision.yaml"
        config.write_text(
            "stack: {frameworks: ['torch==2.13.0+cpu'], driver: none}\n"
            f"install: {{cache: off, pip: {{find_links: ['{url}/'], trusted_hosts: ['{index.netloc}']}},"
            f" apt: {{proxy: '{hs.proxy}'}}}}\n"
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

        # the index is reached directly (the test proxy lets only Debian's archive and PyPI through)
        direct = f"sed -i 's/^no_proxy=.*/&,{hs.net}.1/' /etc/environment"
        subprocess.run(["ssh", "-F", str(hs.ssh_config), host.name, f"{SOURCES}; {direct}"], check=True)

        def fresh() -> None:
            subprocess.run(["ssh", "-F", str(hs.ssh_config), host.name, FRESH], check=True, capture_output=True)

        shown = None
        for mbit in ns.uplink_mbit:
            shape(f"{host.name}-h", mbit, [3128, int(index.port or 80)])
            online, bundled = [], []
            for _ in range(ns.runs):
                fresh()
                took, _r = provision(work, "up", *base, *no_index, "--yes")
                online.append(took)
                fresh()
                took, shown = provision(work, "up", *base, "--bundle", "site.tar.gz", "--yes")
                bundled.append(took)
            on, off = statistics.median(online), statistics.median(bundled)
            link = f"{mbit} Mbit/s" if mbit else "not limited"
            rows.append(f"| {link} | {on:.1f} s | {off:.1f} s | {off / on:.2f} | <= {TARGET} |")
            print(rows[-1], file=sys.stderr)
        shape(f"{host.name}-h", 0, [])
        if ns.show is not None and shown is not None:
            ns.show.mkdir(parents=True, exist_ok=True)
            (ns.show / "bundle.txt").write_text(built.stderr + built.stdout)
            (ns.show / "up-bundle.txt").write_text(shown.stderr + shown.stdout)
    parts = info["parts"]
    print(
        f"| the site's uplink (the proxy and the index to the host) | `up` from the network (median of {ns.runs}) "
        f"| `up --bundle` (median of {ns.runs}) | bundle / online | target |"
    )
    print("|---|---|---|---|---|")
    print("\n".join(rows))
    print()
    print("| measure | value |")
    print("|---|---|")
    print(f"| `provision bundle` (build, downloads included) | {build_s:.1f} s |")
    sum_parts = sum(parts.values())
    print(
        f"| bundle size / sum of its parts | {info['bytes'] / 1e6:.1f} MB / {sum_parts / 1e6:.1f} MB = "
        f"{info['bytes'] / sum_parts:.2f} |"
    )
    print("| parts | " + ", ".join(f"{k} {v / 1e6:.1f} MB" for k, v in sorted(parts.items())) + " |")


if __name__ == "__main__":
    main()
