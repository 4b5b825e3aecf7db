"""The fleet cache on SSH test hosts: every host's apt and pip downloads come through the controller.

Real parts: squid from Debian's packages on the controller, the paramiko reverse tunnels, apt on
the Debian 12 hosts fetching python3-venv from Debian's mirror through squid, pip installing the
CPU torch stack from the controller's wheelhouse over the tunnel. For this test the hosts lose
their own way to the mirror (the test proxy's apt.conf.d file, restored afterwards), so a
passing run proves that the cache is the way they fetched.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.hosts import harness
from tests.integration import roles_harness as rh

pytestmark = pytest.mark.slow

HOSTS = 3
APT_PROXY_FILE = "/etc/apt/apt.conf.d/01testhost-proxy"


@pytest.fixture
def cache_dir() -> Iterator[Path]:
    # squid runs as user `proxy`: its folder must be reachable by it (pytest's tmp_path is 0700)
    path = Path(tempfile.mkdtemp(prefix="provision-cache-", dir="/var/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def cut_off_hosts(testhosts: harness.HostSet) -> Iterator[list[harness.TestHost]]:
    """Hosts with no apt route of their own and nothing of the stack installed."""
    hosts = testhosts.hosts[:HOSTS]
    for h in hosts:
        rh.ssh(testhosts, h, f"mv {APT_PROXY_FILE} /root/apt-proxy.saved; rm -rf /opt/provision; "
               "apt-get purge -y -q python3-venv python3.11-venv >/dev/null; apt-get clean")  # fmt: skip
    yield hosts
    for h in hosts:
        rh.ssh(testhosts, h, f"mv /root/apt-proxy.saved {APT_PROXY_FILE}")
    rh.unprovision(testhosts, hosts)


def test_every_host_fetches_through_the_cache_and_upstream_is_fetched_once(
    testhosts: harness.HostSet, cut_off_hosts: list[harness.TestHost], wheelhouse: Path, cache_dir: Path,
    tmp_path: Path,
) -> None:  # fmt: skip
    config = tmp_path / "provision.yaml"
    config.write_text(
        "stack: {frameworks: ['torch==2.13.0+cpu'], driver: none}\n"
        f"install: {{pip: {{find_links: ['{wheelhouse}']}}, cache: auto, cache_dir: '{cache_dir}'}}\n"
        "verify: {allow_cpu: true}\n"
    )
    names = [h.name for h in cut_off_hosts]
    args = [sys.executable, "-m", "provision", "up", "-i", str(testhosts.inventory), "-F", str(testhosts.ssh_config),
            "-c", str(config), "--limit", ",".join(names), "--set", "frameworks_no_index=true", "--yes", "--json"]  # fmt: skip
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    r = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, env=env, timeout=1500)
    doc = json.loads(r.stdout)
    assert r.returncode == 0 and doc["ok"], (doc, r.stderr[-3000:])

    run_dir = tmp_path / ".provision" / "runs" / doc["run"]
    cache = json.loads((run_dir / "report.json").read_text())["cache"]
    assert cache["apt"] == "on" and sorted(cache["hosts"]) == sorted(names), cache
    assert cache["wheels"] == {"cp311-x86_64": "on"}, cache

    # apt: each package file came from the mirror once and was then served from the cache
    log = (run_dir / "cache" / "squid-access.log").read_text().splitlines()
    debs = [line.split() for line in log if line.split()[6].endswith(".deb")]
    assert debs, log[:20]
    by_url: dict[str, list[str]] = {}
    for fields in debs:
        by_url.setdefault(fields[6], []).append(fields[8])
    venv_debs = [u for u in by_url if "/python3.11-venv_" in u]
    assert venv_debs, sorted(by_url)
    for url, hier in by_url.items():
        assert len(hier) == HOSTS, (url, hier)  # every host asked for it ...
        assert sum(not h.startswith("HIER_NONE") for h in hier) == 1, (url, hier)  # ... one went upstream
    proxy = cache["proxy"]
    assert proxy["hits"] >= 2 * len(by_url) and proxy["upstream_bytes"] < proxy["served_bytes"], proxy

    # pip: every host installed torch from the controller's wheelhouse, filled once
    torch_wheel = next(wheelhouse.glob("torch-*.whl"))
    assert cache["wheels_served_bytes"] >= HOSTS * torch_wheel.stat().st_size, cache
    assert (cache_dir / "wheels" / "cp311-x86_64" / torch_wheel.name).is_file()

    # the hosts reached the cache on their own loopback; nothing of it stays there after the run
    for h in cut_off_hosts:
        host_vars = yaml.safe_load((run_dir / "ansible" / "host_vars" / f"{h.name}.yml").read_text())
        proxy_url = host_vars["provision_environment"]["http_proxy"]
        assert proxy_url.startswith("http://127.0.0.1:"), host_vars
        ports = {proxy_url.rsplit(":", 1)[1], host_vars["frameworks_find_links"][0].split(":")[2].split("/")[0]}
        listening = rh.ssh(testhosts, h, "cat /proc/net/tcp")
        open_ports = {int(line.split()[1].split(":")[1], 16) for line in listening.splitlines()[1:]
                      if line.split()[3] == "0A"}  # fmt: skip
        assert not {int(p) for p in ports} & open_ports, (ports, open_ports)
        assert not rh.ssh(testhosts, h, "grep -rl 127.0.0.1 /etc/apt /etc/pip.conf || true").strip()
