"""`provision up --bundle` on an SSH test host that has no way out at all, and a driver's bundle
installed there through the roles.

Real parts throughout: `provision plan` probes the host; `provision bundle` on the controller
downloads the lock's OS packages with their whole dependency closure from Debian's archive (apt
in a private root, checked against the archive's signatures), signs them as a flat repository
with a key made for the bundle, and fetches the torch closure by the lock's hashes (from the
local wheelhouse) and uv's wheel from PyPI by the knowledge's hash; the lock's Python is a
standalone CPython, which the knowledge's uv fetches on the controller from the site's mirror (a
STAND-IN of python-build-standalone's: tests/hosts/standalone_python.py, an archive of the same
shape made from the CPython running the tests, named by a download list in uv's format). Then the
host is cut off (its only way out, the test proxy, is replaced by a closed port, and it has no DNS)
and `up --bundle` installs python3-venv, python3-packaging, uv, the standalone CPython and torch
from the bundle alone, and the smoke job passes. A copy with one byte of one wheel flipped is
refused before any change, naming the wheel.

The driver's path cannot go through `up` here (the host has no GPU for an H100 lock to fit), so
the second test stages the bundle with `up`'s own code and applies the roles with the host_vars
`up --bundle` writes: the driver's packages from the role tests' STAND-IN NVIDIA repository
(served on loopback to the controller only while the bundle is built) with the stand-in kernel's
headers, installed, pinned and held on the cut-off host with no repository added, then converged.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from provision.ansible.rundir import write_host_vars
from provision.fleet import bundle_host, bundle_python
from provision.fleet.verify import default_connect
from provision.hosts.inventory import HostTarget
from provision.model.lock import LockGroup
from provision.stack.lock import build_lock, dumps_lock
from tests.hosts import harness
from tests.hosts import standalone_python as standin
from tests.integration import roles_harness as rh
from tests.integration import standin_plans as sp
from tests.integration import standin_repo as sr
from tests.integration.up_harness import run_up, up_args, up_env
from tests.support.bundles import flip_byte

pytestmark = pytest.mark.slow  # installs torch on a host

PROXY_FILES = ("/etc/apt/apt.conf.d/01testhost-proxy", "/etc/environment")


def _provision(cwd: Path, *args: str) -> dict[str, Any]:
    r = subprocess.run(
        [sys.executable, "-m", "provision", *args], cwd=cwd, capture_output=True, text=True, env=up_env(), timeout=900
    )
    assert r.returncode == 0, r.stderr[-3000:]
    doc: dict[str, Any] = json.loads(r.stdout)
    return doc


def _cut_off(hostset: harness.HostSet, host: harness.TestHost) -> None:
    """Point the host's only way out (the test proxy, for apt and pip) at a closed port."""
    closed = f"http://{hostset.net}.1:9"
    for path in PROXY_FILES:
        rh.ssh(hostset, host, f"cp -p {path} {path}.bundle-test && sed -i 's#http://[0-9.]*:3128#{closed}#g' {path}")


def _reconnect(hostset: harness.HostSet, host: harness.TestHost) -> None:
    for path in PROXY_FILES:
        rh.ssh(hostset, host, f"if [ -f {path}.bundle-test ]; then mv {path}.bundle-test {path}; fi", check=False)


@pytest.fixture(scope="module")
def own_host(testhosts: harness.HostSet, wheelhouse: Path) -> Iterator[harness.HostSet]:
    """One Debian 12 host of this module's own, beside the session's set (derived from its settings
    as the Debian 13 set is): the bundle installs the -security suite's python3.11, newer than what
    the session hosts' own sources (bookworm alone) know, which would leave a shared host unable to
    reinstall python3-venv from them."""
    with harness.running(1, ro_binds=[wheelhouse], **harness.bundle_settings(harness.session_settings())) as hostset:
        yield hostset


def test_up_bundle_installs_with_no_network_and_refuses_a_damaged_copy(
    own_host: harness.HostSet, wheelhouse: Path, tmp_path: Path
) -> None:
    testhosts = own_host
    host = testhosts.hosts[0]
    # the site's python-build-standalone mirror, on the controller only: the host never sees it
    site = tmp_path / "pbs"
    archive = standin.build_archive(site)
    (site / "downloads.json").write_text(json.dumps(standin.downloads_json(archive, bundle_python.RELEASES)))
    config = rh.cpu_torch_config(
        tmp_path,
        testhosts,
        wheelhouse,
        stack=f"python: '{standin.minor()}', ",
        install=f"python_source: standalone, python_mirror: 'file://{site}', "
        f"python_downloads_json: 'file://{site}/downloads.json', ",
    )
    rh.unprovision(testhosts, [host])
    # what the play installs from apt must come from the bundle: gone from the host first
    rh.ssh(testhosts, host, rh.PURGE_PYTHON_ENV_PACKAGES + "; rm -rf /var/lib/provision/bundles")
    inventory = _one_host(testhosts, host, tmp_path / "inventory.ini")
    common = ("-i", str(inventory), "-F", str(testhosts.ssh_config))
    _provision(
        tmp_path, "plan", *common, "-c", str(config), "--out", "run", "--set", "frameworks_no_index=true", "--json"
    )
    built = _provision(
        tmp_path, "bundle", "provision.lock", "-c", str(config), "-o", "site.tar.gz",
        "--set", "frameworks_no_index=true", "--json",
    )  # fmt: skip
    info = built["info"]
    repo = "apt/debian-12-x86_64"
    [group] = info["groups"].values()
    assert group["apt"] == repo and group["standalone_python"] == f"python/{standin.BUILD}/{archive.name}"
    assert {"python3-venv", "python3-packaging"} <= set(info["apt"][repo]["names"])

    # one flipped byte in one wheel: refused on the controller before any host is touched
    wheel = next(n for n in _members(tmp_path / "site.tar.gz") if n.startswith("wheels/") and "torch" in n)
    flip_byte(tmp_path / "site.tar.gz", tmp_path / "damaged.tar.gz", wheel)
    before = rh.host_snapshot(testhosts, host)
    rc, doc = run_up(tmp_path, up_args(testhosts, config, "--bundle", "damaged.tar.gz", "--limit", host.name))
    assert rc == 1 and doc["ok"] is False, doc
    assert doc["error"]["message"] == f"bundle member {wheel} does not match its sha256 in the MANIFEST", doc
    assert rh.host_snapshot(testhosts, host) == before
    assert (
        rh.ssh(testhosts, host, "ls /var/lib/provision/bundles 2>&1 || true")
        .strip()
        .endswith("No such file or directory")
    )

    _cut_off(testhosts, host)
    try:
        # no way out: the archive and PyPI both fail from the host, as they would at the site
        apt = rh.ssh(testhosts, host, "apt-get -q update 2>&1; echo rc=$?", check=False)
        assert "Could not connect" in apt or "Failed to fetch" in apt, apt
        pypi = rh.ssh(
            testhosts,
            host,
            ". /etc/environment; export https_proxy; python3 -c \"import urllib.request as u; u.urlopen('https://pypi.org/simple/', timeout=5)\" 2>&1; echo rc=$?",
            check=False,
        )
        assert pypi.strip().endswith("rc=1"), pypi

        rc, doc = run_up(tmp_path, up_args(testhosts, config, "--bundle", "site.tar.gz", "--limit", host.name))
        assert rc == 0 and doc["ok"], json.dumps(doc)[-3000:]
        [result] = doc["hosts"]
        assert result["verdict"] == "pass", result
        # apt installed from the bundle's repository alone, and pip from its wheels
        history = rh.ssh(testhosts, host, "cat /var/log/apt/history.log").split("Start-Date")
        assert any("install python3-venv=" in entry for entry in history), history[-3:]
        torch = rh.ssh(
            testhosts,
            host,
            "/opt/provision/venv/bin/python -c "
            "'import platform, sys, torch; print(torch.__version__, platform.python_version(), sys.base_prefix)'",
        ).split()
        # the venv's Python is the bundle's standalone CPython, not Debian's python3.11
        assert torch[:2] == [f"{harness.TORCH_CPU.split('==')[1]}+cpu", standin.version()], torch
        assert torch[2].startswith("/opt/provision/python/"), torch  # python_env_standalone_dir
        sources = rh.ssh(testhosts, host, "cat /var/lib/provision/bundles/*.apt/sources.list")
        assert (
            sources.startswith("deb [signed-by=/var/lib/provision/bundles/") and " file:/var/lib/provision/" in sources
        )
        # the host's own apt sources and lists are as they were
        assert "deb.debian.org" in rh.ssh(testhosts, host, "cat /etc/apt/sources.list")

        # again: unpacked on the host already (nothing sent or unpacked again), checked, converged
        unpacked = "stat -c %Y /var/lib/provision/bundles/*/MANIFEST; ls /var/lib/provision/bundles"
        before = rh.ssh(testhosts, host, unpacked)
        assert ".tar.gz" not in before  # the tarball is not kept beside its unpacked files
        rc, doc = run_up(tmp_path, up_args(testhosts, config, "--bundle", "site.tar.gz", "--limit", host.name))
        assert rc == 0 and doc["hosts"][0]["verdict"] == "pass", json.dumps(doc)[-3000:]
        assert rh.ssh(testhosts, host, unpacked) == before
        # nothing left to apply: the probe found the venv made from the standalone CPython
        [detail] = json.loads((tmp_path / ".provision/runs" / doc["run"] / "report.json").read_text())["details"]
        assert detail["converged"] and not detail["changes"], detail
    finally:
        _reconnect(testhosts, host)


def test_a_drivers_bundle_installs_the_driver_from_the_bundle_alone(own_host: harness.HostSet, tmp_path: Path) -> None:
    hostset = own_host
    host = hostset.hosts[0]
    group = rh.hgx_group([host.name], "620.70.06")
    # no framework: its CUDA wheels come from an index out of reach here
    group["stack"]["frameworks"], group["packages"]["pip"], group["python_packages"] = {}, None, []
    folder = sr.repo_folder(tmp_path / "served", "debian12")
    repo = sr.build_repo(folder, sr.repository_debs([group["packages"]]), key_file=sr.APT_KEY_FILE, scratch=tmp_path)
    with sr.serve(tmp_path / "served", "127.0.0.1") as server:  # the controller's loopback: never the host's
        url = f"{server}/{folder.relative_to(tmp_path / 'served').as_posix()}"
        group["packages"] = sp.standin_repository(group["packages"], url, sr.APT_KEY_FILE, repo.fingerprint)
        lock = build_lock([LockGroup.from_json(group)])
        (tmp_path / "driver.lock").write_text(dumps_lock(lock))
        _provision(tmp_path, "bundle", "driver.lock", "--kernel", sr.STANDIN_KERNEL, "-o", "driver.tar.gz", "--json")
    _cut_off(hostset, host)
    try:
        bundle, _ = bundle_host.open_bundle(tmp_path / "driver.tar.gz", tmp_path / "opened")
        name = lock.groups[0].name
        target = HostTarget(name=host.name, address=host.name, user=host.user)
        failed = bundle_host.stage(
            bundle, [target], {host.name: name}, default_connect(ssh_config=hostset.ssh_config), lambda _: None
        )
        assert failed == {}
        run = tmp_path / "run"
        overrides = {
            "nvidia_driver_kernel": sr.STANDIN_KERNEL,
            "preflight_kernel": sr.STANDIN_KERNEL,
            "frameworks_enabled": False,
            "verify_frameworks": {},
            "python_env_enabled": False,
        }
        rh.render(run, hostset, host, group, overrides=overrides)
        write_host_vars(run, {host.name: bundle_host.host_vars(bundle, name, {})}, "up --bundle's")
        first = rh.apply(run, host.name)
        assert first.rc == 0, first.output[-3000:]
        installed = rh.ssh(hostset, host, "dpkg-query -W -f '${Package} ${Version}\\n'")
        for package in ("nvidia-open", "nvidia-kernel-open-dkms", "libnvidia-compute"):
            assert f"{package} 620.70.06-1\n" in installed, package
        assert f"linux-headers-{sr.STANDIN_KERNEL} 1.0\n" in installed
        assert set(rh.ssh(hostset, host, "apt-mark showhold").split()) == set(group["packages"]["holds"])
        assert rh.ssh(hostset, host, "ls /etc/apt/sources.list.d/").strip() == ""  # no repository added
        again = rh.apply(run, host.name)
        assert again.rc == 0 and again.changed == 0, again.output[-3000:]
    finally:
        _reconnect(hostset, host)


def _one_host(hostset: harness.HostSet, host: harness.TestHost, out: Path) -> Path:
    """The test hosts' inventory with ``host`` alone in it (plan takes no --limit)."""
    lines = hostset.inventory.read_text().splitlines()
    others = {h.name for h in hostset.hosts} - {host.name}
    out.write_text("\n".join(line for line in lines if line.split(" ", 1)[0] not in others) + "\n")
    return out


def _members(path: Path) -> list[str]:
    with tarfile.open(path) as tar:
        return tar.getnames()
