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
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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
        rh.ssh(
            testhosts,
            h,
            f"mv {APT_PROXY_FILE} /root/apt-proxy.saved; rm -rf /opt/provision; {rh.PURGE_PYTHON_ENV_PACKAGES}",
        )
    yield hosts
    for h in hosts:
        rh.ssh(testhosts, h, f"mv /root/apt-proxy.saved {APT_PROXY_FILE}")
    rh.unprovision(testhosts, hosts)


def test_every_host_fetches_through_the_cache_and_upstream_is_fetched_once(
    testhosts: harness.HostSet,
    cut_off_hosts: list[harness.TestHost],
    wheelhouse: Path,
    cache_dir: Path,
    tmp_path: Path,
) -> None:
    config = tmp_path / "provision.yaml"
    config.write_text(
        "stack: {frameworks: ['torch==2.13.0+cpu'], driver: none}\n"
        f"install: {{pip: {{find_links: ['{wheelhouse}']}}, cache: auto, cache_dir: '{cache_dir}'}}\n"
        "verify: {allow_cpu: true}\n"
    )
    names = [h.name for h in cut_off_hosts]
    args = [
        sys.executable,
        "-m",
        "provision",
        "up",
        "-i",
        str(testhosts.inventory),
        "-F",
        str(testhosts.ssh_config),
        "-c",
        str(config),
        "--limit",
        ",".join(names),
        "--set",
        "frameworks_no_index=true",
        "--yes",
        "--json",
    ]
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
        open_ports = {
            int(line.split()[1].split(":")[1], 16) for line in listening.splitlines()[1:] if line.split()[3] == "0A"
        }
        assert not {int(p) for p in ports} & open_ports, (ports, open_ports)
        assert not rh.ssh(testhosts, h, "grep -rl 127.0.0.1 /etc/apt /etc/pip.conf || true").strip()


# --- the cache is not an open proxy ------------------------------------------------------------

PROBE = r"""
import json, socket, sys
port = int(sys.argv[1])
def status(request):
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(request.encode())
        return int(s.recv(4096).decode(errors="replace").split()[1])
get = "GET {} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
connect = "CONNECT {0} HTTP/1.1\r\nHost: {0}\r\n\r\n"
print(json.dumps({name: status((get if kind == "get" else connect).format(arg))
                  for name, kind, arg in json.loads(sys.argv[2])}))
"""


@pytest.fixture
def bridge_repo(testhosts: harness.HostSet) -> Iterator[str]:
    """A repository stand-in on the controller's bridge address, where the tests' repositories are
    (what a site mirror on the controller's LAN is in real life)."""
    import http.server
    import threading

    root = Path(tempfile.mkdtemp(prefix="bridge-repo-"))
    (root / "pool").mkdir()
    (root / "pool" / "demo_1.0_all.deb").write_bytes(b"d" * 4096)
    handler = type("H", (http.server.SimpleHTTPRequestHandler,), {"log_message": lambda *_a: None})
    server = http.server.ThreadingHTTPServer((f"{testhosts.net}.1", 0), lambda *a: handler(*a, directory=str(root)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://{testhosts.net}.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    shutil.rmtree(root)


def _cache_for(
    testhosts: harness.HostSet, hosts: list[harness.TestHost], cache_dir: Path, run_dir: Path, repo: str
) -> tuple[Any, dict[str, dict[str, Any]]]:
    from provision.fleet.cache.run import FleetCache
    from provision.fleet.cache.sources import Origin, RepoSources
    from provision.fleet.verify import default_connect
    from provision.hosts.inventory import HostTarget

    origin = Origin.of(repo)
    assert origin is not None
    sources = RepoSources(lock=frozenset({origin}), public=RepoSources.for_run([], ["debian-12"]).public)
    targets = [
        HostTarget(
            h.name,
            h.address,
            user="root",
            key_file=str(testhosts.key),
            vars={"ansible_ssh_common_args": f"-o UserKnownHostsFile={testhosts.known_hosts}"},
        )
        for h in hosts
    ]
    cache = FleetCache(cache_dir, run_dir, python_exe=sys.executable)
    per_host = cache.start(
        targets, dict.fromkeys([h.name for h in hosts]), {}, connect=default_connect(), sources=sources
    )
    return cache, per_host


def test_through_the_tunnel_a_host_reaches_the_run_s_repositories_and_nothing_else(
    testhosts: harness.HostSet, bridge_repo: str, cache_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """From a test host, through its real reverse forward: the lock's repository on the bridge and
    Debian's real mirror are served; the controller's own sshd, its LAN's other services (the test
    set's tinyproxy on the bridge) and unlisted hosts get 403; CONNECT to an unlisted host too."""
    from provision.fleet.cache.tunnel import listening_addresses

    monkeypatch.delenv("http_proxy", raising=False)
    host = testhosts.hosts[0]
    cache, per_host = _cache_for(testhosts, [host], cache_dir, tmp_path / "run-acl", bridge_repo)
    try:
        assert cache.report.apt == "on" and host.name in per_host, cache.report
        port = int(per_host[host.name]["provision_environment"]["http_proxy"].rsplit(":", 1)[1])
        cases = [
            ("listed repository", "get", f"{bridge_repo}/pool/demo_1.0_all.deb"),
            ("debian mirror", "get", "http://deb.debian.org/debian/dists/bookworm/Release.gpg"),
            ("controller sshd", "get", "http://127.0.0.1:22/"),
            ("controller sshd, by name", "get", "http://localhost:22/"),
            ("listed host, other port", "get", f"http://{testhosts.net}.1:22/"),
            ("LAN service", "get", f"{testhosts.proxy}/"),
            ("unlisted public host", "get", "http://pypi.org/simple/"),
            ("unlisted name", "get", "http://unlisted.example/"),
            ("cloud metadata", "get", "http://169.254.169.254/latest/meta-data/"),
            ("connect unlisted", "connect", "pypi.org:443"),
            ("connect controller sshd", "connect", "127.0.0.1:22"),
            ("connect listed, not 443", "connect", f"{testhosts.net}.1:{bridge_repo.rsplit(':', 1)[1]}"),
        ]
        got = json.loads(
            rh.ssh(testhosts, host, f"python3 -c {shlex.quote(PROBE)} {port} {shlex.quote(json.dumps(cases))}")
        )
        # the forward is on the host's loopback only: not on its bridge address, from anywhere
        listening = listening_addresses(rh.ssh(testhosts, host, "cat /proc/net/tcp /proc/net/tcp6"), port)
        from_host = rh.ssh(
            testhosts,
            host,
            f'python3 -c \'import socket; socket.create_connection(("{host.address}", '
            f"{port}), timeout=5)' 2>&1 || true",
        )
        import socket

        with pytest.raises(OSError):
            socket.create_connection((host.address, port), timeout=5).close()
    finally:
        report = cache.close()
    assert (got.pop("listed repository"), got.pop("debian mirror")) == (200, 200), got
    assert got == dict.fromkeys(got, 403), got
    assert listening == ["127.0.0.1"], listening
    assert "ConnectionRefusedError" in from_host, from_host
    assert report.proxy.requests >= len(cases), report.proxy


@pytest.fixture
def gateway_ports_host(testhosts: harness.HostSet) -> Iterator[harness.TestHost]:
    """A host whose sshd binds every remote forward on all addresses (`GatewayPorts yes`)."""
    host = testhosts.hosts[1]
    conf = "/etc/ssh/sshd_config.d/00-test-gatewayports.conf"  # Debian's sshd_config includes these first
    # restart, not reload: a reload (SIGHUP) makes sshd re-exec itself and returns at once, and a
    # connection in that gap is refused (CI saw it). ssh.service is Type=notify, so restart returns
    # once the new sshd says READY, and KillMode=process keeps this session alive through it.
    rh.ssh(testhosts, host, f"echo 'GatewayPorts yes' > {conf} && systemctl restart ssh")
    yield host
    rh.ssh(testhosts, host, f"rm -f {conf} && systemctl restart ssh")


def test_a_host_whose_sshd_would_expose_the_forward_gets_no_tunnel(
    testhosts: harness.HostSet,
    gateway_ports_host: harness.TestHost,
    bridge_repo: str,
    cache_dir: Path,
    tmp_path: Path,
) -> None:
    """`GatewayPorts yes` binds the forward on 0.0.0.0 whatever paramiko asks for: squid would be on
    the host's network. That host fetches itself, with a note; the port it got is closed again."""
    host = gateway_ports_host
    before = rh.ssh(testhosts, host, "cat /proc/net/tcp /proc/net/tcp6")
    cache, per_host = _cache_for(testhosts, [host], cache_dir, tmp_path / "run-gw", bridge_repo)
    try:
        after = rh.ssh(testhosts, host, "cat /proc/net/tcp /proc/net/tcp6")
    finally:
        report = cache.close()
    assert per_host == {} and report.hosts == [], (per_host, report.notes)
    assert len(report.notes) == 1 and "not only on loopback" in report.notes[0], report.notes
    assert "0.0.0.0" in report.notes[0] and host.name in report.notes[0], report.notes

    def listens(text: str) -> set[str]:
        return {ln.split()[1] for ln in text.splitlines()[1:] if len(ln.split()) > 3 and ln.split()[3] == "0A"}

    assert listens(after) <= listens(before), listens(after) - listens(before)  # cancelled, nothing left open


@pytest.fixture
def host_with_a_site_mirror(testhosts: harness.HostSet) -> Iterator[harness.TestHost]:
    host = testhosts.hosts[0]
    listing = "/etc/apt/sources.list.d/zz-site-mirror.list"
    rh.ssh(testhosts, host, f"echo 'deb http://mirror.site.example/debian bookworm main' > {listing}")
    yield host
    rh.ssh(testhosts, host, f"rm -f {listing}")


def test_a_host_with_a_source_squid_would_refuse_fetches_its_packages_itself(
    testhosts: harness.HostSet,
    host_with_a_site_mirror: harness.TestHost,
    bridge_repo: str,
    cache_dir: Path,
    tmp_path: Path,
) -> None:
    """Its apt would get 403 for that mirror and fail the package step: no proxy for it, a note."""
    host = host_with_a_site_mirror
    cache, per_host = _cache_for(testhosts, [host], cache_dir, tmp_path / "run-mirror", bridge_repo)
    report = cache.close()
    assert per_host == {} and report.apt == "on", (per_host, report)
    assert report.notes == [
        f"{host.name}: its package source http://mirror.site.example/debian is not one of this "
        "run's repositories: the host fetches its packages itself (name the mirror in "
        "install.apt.mirror to cache it)"
    ]
