"""provision-health's textfile scraped from a REAL node_exporter on a Debian 12 test host.

Debian bookworm's own ``prometheus-node-exporter`` (installed from the mirror, started by its
systemd unit with the package's defaults) reads provision-health's ``provision.prom`` from its
textfile directory; the controller scrapes ``http://HOST:9100/metrics`` over the bridge and reads
the answer with the Prometheus project's own text-format parser. The program runs as a host runs
it (its FILES copied, ``python3 -m health``, the host's Python 3.11) against a real venv
(``python3 -m venv``) holding two real distributions copied from this checkout's .venv. Then a
locked distribution is removed: the next scrape shows the drift.

One STAND-IN, named: a test host is a container without ``/dev/kmsg`` (the kernel log is the
machine's), so ``--kmsg /dev/null`` gives the Xid check an empty kernel log; without it the check
is "cannot tell" (exit 2), as on any host whose kernel log is unreadable.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from provision.fleet.health_spec import LastVerify
from provision.remote.health import SOURCES, exporters
from tests.hosts import harness
from tests.integration import roles_harness as rh
from tests.support.health_host import copy_dist
from tests.support.node_exporter import TEXTFILE_DIR, scrape

pytestmark = pytest.mark.slow  # one apt install from the Debian mirror

HOME = "/opt/provision-health-test"
FEATURES_DIR = "/etc/kubernetes/node-feature-discovery/features.d"  # NFD's local source reads it


def program(folder: Path, venv_site: Path) -> dict[str, Any]:
    """The program's files, two real distributions for the venv, and the spec naming them."""
    (folder / "health").mkdir()
    for name, source in SOURCES.items():
        (folder / "health" / name).write_bytes(source.read_bytes())
    venv_site.mkdir(parents=True)
    versions = {n: copy_dist(n, venv_site) for n in ("iniconfig", "distro")}
    at = datetime.now(timezone.utc) - timedelta(hours=1)
    verified = LastVerify("pass", at, gpu="CPU", figures={"gemm_tflops": 0.512, "copy_gbps": 9.5})
    spec = {
        "schema": "provision.health/1",
        "lock_hash": "3f6c0a1e9b2d4c57",
        "group": "cpu-debian-12",
        "expected": {"python": "3.11"},
        "driver": {"manager": "apt", "package": None},
        "gpus": {"count": 0, "models": [], "nvswitches": 0},
        "fabric_manager": None,
        "persistence": False,
        "venv": f"{HOME}/venv",
        "python_packages": [{"name": n, "version": v, "sha256": "0" * 64} for n, v in versions.items()],
        "verify": verified.to_json(),
    }
    (folder / "health.json").write_text(json.dumps(spec, indent=2))
    return spec


def run_health(hostset: harness.HostSet, host: harness.TestHost, *options: str) -> subprocess.CompletedProcess[str]:
    command = f"cd {HOME} && python3 -m health --spec health.json --state state.json --kmsg /dev/null "
    command += " ".join(shlex.quote(o) for o in options)
    return subprocess.run(
        ["ssh", "-F", str(hostset.ssh_config), host.name, command], capture_output=True, text=True, timeout=120
    )


def test_node_exporter_serves_provision_health(testhosts: harness.HostSet, tmp_path: Path) -> None:
    host = testhosts.hosts[-1]
    local = tmp_path / "home"
    site = local / "venv" / "lib" / "python3.11" / "site-packages"
    local.mkdir()
    spec = program(local, site)
    try:
        rh.ssh(testhosts, host, "apt-get install -y -q --no-install-recommends prometheus-node-exporter >/dev/null")
        help_text = rh.ssh(testhosts, host, "prometheus-node-exporter --help 2>&1")
        assert f'--collector.textfile.directory="{TEXTFILE_DIR}"' in help_text  # Debian's default
        rh.ssh(testhosts, host, f"python3 -m venv --without-pip {HOME}/venv && mkdir -p {FEATURES_DIR}")
        subprocess.run(
            f"tar -C {shlex.quote(str(local))} -cf - . | ssh -F {shlex.quote(str(testhosts.ssh_config))} "
            f"{host.name} 'tar -C {HOME} -xf -'",
            shell=True,
            check=True,
            timeout=120,
        )
        for _ in range(100):  # the unit was started by the package; wait for it to listen
            if rh.ssh(testhosts, host, "systemctl is-active prometheus-node-exporter", check=False).strip() == "active":
                try:
                    scrape(host.address)
                    break
                except OSError:
                    pass
            time.sleep(0.2)

        healthy = run_health(testhosts, host, "--textfile", TEXTFILE_DIR, "--nfd-features", FEATURES_DIR)
        assert (healthy.returncode, healthy.stdout) == (0, "healthy\n"), healthy.stderr
        seen = scrape(host.address)
        assert seen["node_textfile_scrape_error"] == {(): 0.0}
        assert seen["provision_health_ok"] == {(): 1.0}
        assert seen["provision_verify_pass"] == {(): 1.0}
        assert seen["provision_verify_gemm_tflops"] == {(("gpu", "CPU"),): 0.512}
        assert seen["provision_lock_info"] == {(("group", "cpu-debian-12"), ("lock_hash", "3f6c0a1e9b2d4c57")): 1.0}
        distro = next(p["version"] for p in spec["python_packages"] if p["name"] == "distro")
        drift_key = (("component", "distro"), ("found", distro), ("locked", distro))
        assert seen["provision_drift"][drift_key] == 0.0 and set(seen["provision_drift"].values()) == {0.0}
        features = rh.ssh(testhosts, host, f"cat {FEATURES_DIR}/{exporters.FEATURES}")
        assert f"{exporters.NFD_PREFIX}verified=true" in features.splitlines(), features

        # a locked distribution removed from the venv: drift, in the very next scrape
        rh.ssh(testhosts, host, f"rm -r {HOME}/venv/lib/python3.11/site-packages/distro-*.dist-info")
        broken = run_health(testhosts, host, "--textfile", TEXTFILE_DIR, "--nfd-features", FEATURES_DIR)
        assert (broken.returncode, broken.stdout) == (1, f"unhealthy: drift distro: locked {distro}, found none\n")
        seen = scrape(host.address)
        assert seen["provision_drift"][(("component", "distro"), ("found", "none"), ("locked", distro))] == 1.0
        assert seen["provision_health_ok"] == {(): 0.0} and seen["provision_health_exit_code"] == {(): 1.0}
        assert seen["node_textfile_scrape_error"] == {(): 0.0}
        features = rh.ssh(testhosts, host, f"cat {FEATURES_DIR}/{exporters.FEATURES}")
        assert f"{exporters.NFD_PREFIX}verified=false" in features.splitlines(), features

        # a textfile directory that does not exist: one line, exit 2, the last file left as it was
        before = rh.ssh(testhosts, host, f"stat -c %Y.%s {TEXTFILE_DIR}/{exporters.TEXTFILE}")
        bad = run_health(testhosts, host, "--textfile", "/var/lib/prometheus/no-such-dir")
        assert bad.returncode == 2 and bad.stdout == "" and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
        assert rh.ssh(testhosts, host, f"stat -c %Y.%s {TEXTFILE_DIR}/{exporters.TEXTFILE}") == before
        assert rh.ssh(testhosts, host, f"ls -A {TEXTFILE_DIR}").split() == [exporters.TEXTFILE]  # no temporary
    finally:
        rh.ssh(
            testhosts,
            host,
            # the package alone installs (its dependencies are in the base); nothing else is removed
            "apt-get purge -y -q prometheus-node-exporter >/dev/null; apt-get clean; deluser --quiet prometheus; "
            f"rm -rf {HOME} /var/lib/prometheus /etc/kubernetes",
            check=False,
        )
