"""The fleet cache: bytes fetched from upstream for 4 hosts against 1 host, in one run of this script.

    python benchmarks/bench_cache.py [--hosts N]   (root; TESTHOSTS_* env picks the host set's names)

Each measured `provision up` starts from fresh hosts (no apt lists, no apt archives, no
python3-venv, no venv) and an empty cache folder, with the CPU torch stack (`driver: none`,
`torch==2.13.0+cpu` from the local wheelhouse). The hosts have no apt proxy of their own: the
controller's squid is their only way to Debian's mirror. Upstream bytes are what squid received
from the mirror (``%<bs`` in its log) plus what `pip download` added to the wheelhouse; "served"
is what the hosts received from the cache, i.e. what they would have fetched themselves without it.

Prints a Markdown table (docs/contributing/benchmarks.md keeps the numbers).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.hosts import harness
from tests.integration import roles_harness as rh

APT_PROXY_FILE = "/etc/apt/apt.conf.d/01testhost-proxy"


def fresh(hs: harness.HostSet, hosts: list[harness.TestHost]) -> None:
    for h in hosts:
        # as on a fresh cloud image: no lists, and nothing saying they were updated lately
        rh.ssh(
            hs,
            h,
            f"rm -f {APT_PROXY_FILE}; rm -rf /opt/provision /var/lib/apt/lists/*; "
            "apt-get purge -y -q python3-venv python3.11-venv >/dev/null 2>&1; apt-get clean; "
            "rm -f /var/lib/apt/periodic/update-success-stamp; touch -d @0 /var/lib/apt/lists",
        )


def up(
    work: Path, hs: harness.HostSet, wheelhouse: Path, hosts: list[harness.TestHost]
) -> tuple[float, dict[str, Any]]:
    cache_dir = Path(tempfile.mkdtemp(prefix="bench-cache-", dir="/var/tmp"))
    cache_dir.chmod(0o755)  # squid's user enters it
    config = work / "provision.yaml"
    config.write_text(
        "stack: {frameworks: ['torch==2.13.0+cpu'], driver: none}\n"
        f"install: {{pip: {{find_links: ['{wheelhouse}']}}, cache: auto, cache_dir: '{cache_dir}'}}\n"
        "verify: {allow_cpu: true}\n"
    )
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    start = time.perf_counter()
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "provision",
            "up",
            "-i",
            str(hs.inventory),
            "-F",
            str(hs.ssh_config),
            "-c",
            str(config),
            "--limit",
            ",".join(h.name for h in hosts),
            "--set",
            "frameworks_no_index=true",
            "--yes",
            "--json",
        ],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    seconds = time.perf_counter() - start
    doc = json.loads(r.stdout)
    if r.returncode != 0:
        raise SystemExit(f"up failed ({r.returncode}): {doc}\n{r.stderr[-2000:]}")
    report = json.loads((work / ".provision" / "runs" / doc["run"] / "report.json").read_text())["cache"]
    shutil.rmtree(cache_dir, ignore_errors=True)
    return seconds, report


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hosts", type=int, default=4)
    parser.add_argument("--work", type=Path, default=Path("/var/tmp/bench-cache"))
    ns = parser.parse_args()
    wheelhouse = harness.fill_wheelhouse()
    subprocess.run(["rm", "-rf", str(ns.work)], check=True)
    ns.work.mkdir(parents=True)
    with harness.bench_running(
        ns.hosts, "/var/tmp/provision-bench-cache", "bc", "10.200.40", ro_binds=[wheelhouse]
    ) as hs:
        fresh(hs, hs.hosts[:1])
        t1, one = up(ns.work, hs, wheelhouse, hs.hosts[:1])
        fresh(hs, hs.hosts)
        tn, many = up(ns.work, hs, wheelhouse, hs.hosts)

    n = ns.hosts
    mib = 2**20
    print(f"| measure | 1 host | {n} hosts | {n} hosts / 1 host | target |")
    print("|---|---|---|---|---|")
    print(
        f"| upstream bytes, apt (squid's fetches) | {one['proxy']['upstream_bytes'] / mib:.1f} MiB | "
        f"{many['proxy']['upstream_bytes'] / mib:.1f} MiB | "
        f"{many['proxy']['upstream_bytes'] / max(one['proxy']['upstream_bytes'], 1):.2f} | |"
    )
    print(
        f"| upstream bytes, wheels (added to the wheelhouse) | {one['wheel_bytes_added'] / mib:.1f} MiB | "
        f"{many['wheel_bytes_added'] / mib:.1f} MiB | "
        f"{many['wheel_bytes_added'] / max(one['wheel_bytes_added'], 1):.2f} | |"
    )
    print(
        f"| **upstream bytes, all** | {one['upstream_bytes'] / mib:.1f} MiB | "
        f"{many['upstream_bytes'] / mib:.1f} MiB | "
        f"**{many['upstream_bytes'] / max(one['upstream_bytes'], 1):.2f}** | <= 1.1 |"
    )
    served1 = one["proxy"]["served_bytes"] + one["wheels_served_bytes"]
    served_n = many["proxy"]["served_bytes"] + many["wheels_served_bytes"]
    print(
        f"| served to the hosts by the cache (what they fetch without it) | {served1 / mib:.1f} MiB | "
        f"{served_n / mib:.1f} MiB | {served_n / max(served1, 1):.2f} | |"
    )
    print(
        f"| squid requests / hits (answered without a trip upstream) | {one['proxy']['requests']} / "
        f"{one['proxy']['hits']} | {many['proxy']['requests']} / {many['proxy']['hits']} | | |"
    )
    print(f"| `provision up` wall time | {t1:.0f} s | {tn:.0f} s | {tn / t1:.2f} | |")


if __name__ == "__main__":
    main()
