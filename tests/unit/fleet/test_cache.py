"""The fleet cache's parts on loopback: the pip download plan, squid's config and log, the wheel server.

The squid test runs the real squid from Debian's packages against an origin server on loopback
(a stand-in for Debian's mirror, which tests do not reach from here): one fetch upstream, the
next served from the cache, the byte counts from squid's own log.
"""

from __future__ import annotations

import http.server
import os
import shutil
import sys
import tempfile
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from provision.config import parse_config
from provision.errors import BadInput
from provision.fleet.cache.run import FleetCache
from provision.fleet.cache.sources import Origin, RepoSources
from provision.fleet.cache.squid import Squid, squid_conf, squid_stats
from provision.fleet.cache.tunnel import host_vars
from provision.fleet.cache.wheels import WheelServer, WheelSet, wheel_platforms
from tests.prereq import missing

GROUP_VARS = {
    "frameworks_enabled": True,
    "frameworks_installs": [
        {"packages": ["torch==2.8.0+cu128"], "index_url": "https://download.pytorch.org/whl/cu128"},
        {"packages": ["jax[cuda12]==0.7.0"], "index_url": ""},
    ],
    "frameworks_index_url": "https://mirror.example/simple",
    "frameworks_extra_index_urls": ["https://pypi.org/simple"],
    "frameworks_find_links": ["/srv/wheels"],
    "frameworks_trusted_hosts": [],
    "frameworks_no_index": False,
}


def test_wheels_are_downloaded_for_the_hosts_platform_with_the_roles_indexes(tmp_path: Path) -> None:
    ws = WheelSet.from_group_vars(GROUP_VARS, python="3.12", arch="aarch64")
    assert ws is not None and ws.key == "cp312-aarch64"
    torch_cmd, jax_cmd = ws.download_commands("/usr/bin/python3", tmp_path)
    assert torch_cmd[:5] == ["/usr/bin/python3", "-m", "pip", "--isolated", "download"]
    assert "--index-url=https://download.pytorch.org/whl/cu128" in torch_cmd
    assert "--index-url=https://mirror.example/simple" in jax_cmd  # the entry's own index, else the mirror
    for cmd in (torch_cmd, jax_cmd):
        assert {"--only-binary=:all:", "--python-version=3.12", "--abi=cp312", "--implementation=cp"} <= set(cmd)
        assert "--extra-index-url=https://pypi.org/simple" in cmd and "--find-links=/srv/wheels" in cmd
        assert f"--dest={tmp_path}" in cmd
    assert torch_cmd[-1] == "torch==2.8.0+cu128" and jax_cmd[-1] == "jax[cuda12]==0.7.0"
    platforms = [a.split("=", 1)[1] for a in torch_cmd if a.startswith("--platform=")]
    assert platforms == wheel_platforms("aarch64") and platforms[0] == "manylinux_2_28_aarch64"
    assert platforms[-1] == "manylinux2014_aarch64" and all(p.endswith("_aarch64") for p in platforms)


def test_no_index_downloads_only_from_the_find_links(tmp_path: Path) -> None:
    ws = WheelSet.from_group_vars({**GROUP_VARS, "frameworks_no_index": True}, python="3.11", arch="x86_64")
    assert ws is not None
    for cmd in ws.download_commands("python3", tmp_path):
        assert "--no-index" in cmd and not any(a.startswith(("--index-url", "--extra-index-url")) for a in cmd)


@pytest.mark.parametrize(
    ("data", "host"),
    [
        ({**GROUP_VARS, "frameworks_installs": []}, {"python": "3.11", "arch": "x86_64"}),
        ({**GROUP_VARS, "frameworks_enabled": False}, {"python": "3.11", "arch": "x86_64"}),
        (GROUP_VARS, {"python": None, "arch": "x86_64"}),
    ],
)
def test_no_wheelhouse_without_frameworks_or_a_known_platform(data: dict[str, Any], host: dict[str, Any]) -> None:
    assert WheelSet.from_group_vars(data, **host) is None


def test_host_vars_point_apt_and_pip_at_the_hosts_own_loopback() -> None:
    got = host_vars(41000, 41001, "cp311-x86_64", {"https_proxy": "http://corp:3128"})
    assert got["provision_environment"] == {
        "https_proxy": "http://corp:3128",  # HTTPS sources keep the site's proxy
        "http_proxy": "http://127.0.0.1:41000",
        "no_proxy": "127.0.0.1,localhost",
    }
    assert got["frameworks_find_links"] == ["http://127.0.0.1:41001/cp311-x86_64/"]
    assert got["frameworks_no_index"] is True
    assert host_vars(None, 41001, None, {}) == {}  # no squid, no wheelhouse for this host: nothing to say


def test_a_host_on_the_wheelhouse_alone_reaches_it_past_the_play_proxy() -> None:
    """No apt through the tunnel (squid does not serve the host's sources), the wheels through it:
    the play's http_proxy stays for apt, and pip reaches the host's loopback without it."""
    got = host_vars(None, 41001, "cp311-x86_64", {"http_proxy": "http://corp:3128", "no_proxy": "intra.example"})
    assert got["provision_environment"] == {
        "http_proxy": "http://corp:3128",
        "no_proxy": "intra.example,127.0.0.1,localhost",
    }
    assert got["frameworks_find_links"] == ["http://127.0.0.1:41001/cp311-x86_64/"]


def test_squid_conf_listens_on_loopback_only_and_chains_to_the_controllers_proxy(tmp_path: Path) -> None:
    conf = squid_conf(
        port=3999,
        store=tmp_path / "s",
        run=tmp_path / "r",
        parent="http://user:pw@proxy.corp:8080",
        sources=RepoSources(),
    )
    assert "http_port 127.0.0.1:3999\n" in conf
    assert "http_access allow loopback" not in conf  # every tunnelled request comes from loopback
    assert conf.count("http_access allow") == 0 and "http_access deny all\n" in conf  # no sources: nothing
    assert "cache_peer proxy.corp parent 8080 0 no-query default" in conf and "never_direct allow all" in conf
    assert "pw" not in conf.replace("proxy.corp", "")  # the parent's credentials are not written out
    assert "cache_peer" not in squid_conf(port=1, store=tmp_path, run=tmp_path, parent=None, sources=RepoSources())


def test_the_run_s_sources_are_its_group_vars_urls_the_roles_defaults_and_the_os_archives() -> None:
    from provision.ansible.roles import default_roles_path
    from provision.fleet.cache.sources import role_defaults

    group_vars = {
        **GROUP_VARS,
        "nvidia_driver_repositories": [
            {
                "name": "cuda",
                "url": "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64/",
                "key_url": "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64/3bf863cc.pub",
                "key_fingerprint": "EB693B3035CD5710E231E123A4B469963BF863CC",
            }
        ],
        "nvidia_driver_debian_mirror": "http://10.1.2.3:8080/debian",  # a site mirror on the LAN
        "frameworks_find_links": ["/srv/wheels", "http://[fd00::5]/wheels/"],
        "provision_environment": {"http_proxy": "http://proxy.corp:3128"},  # a proxy is not a source
    }
    got = RepoSources.for_run([group_vars], ["ubuntu-22.04", "debian-12"], role_defaults(Path(default_roles_path())))
    assert got.lock == {
        Origin("https", "developer.download.nvidia.com", 443),
        Origin("https", "download.pytorch.org", 443),
        Origin("https", "mirror.example", 443),
        Origin("https", "pypi.org", 443),
        Origin("http", "10.1.2.3", 8080),
        Origin("http", "fd00::5", 80),
    }
    assert {
        Origin("http", ".archive.ubuntu.com", 80),
        Origin("http", "security.ubuntu.com", 80),
        Origin("http", ".deb.debian.org", 80),  # the OS archives ...
        Origin("http", "deb.debian.org", 80),
        Origin("http", "security.debian.org", 80),  # ... the roles' defaults
    } <= got.public
    assert not any("{{" in o.host or o.host == "proxy.corp" for o in got.lock | got.public)
    assert got.allows("http://us-east-1.ec2.archive.ubuntu.com/ubuntu/") and got.allows("http://10.1.2.3:8080/x")
    assert not got.allows("http://10.1.2.3/x") and not got.allows("http://evilarchive.ubuntu.com/")
    assert not got.allows("https://pypi.org:8443/") and not got.allows("ftp://deb.debian.org/")


def test_squid_allows_the_lock_s_origins_before_the_address_checks_and_public_names_after(tmp_path: Path) -> None:
    sources = RepoSources(
        lock=frozenset(
            {
                Origin("http", "10.1.2.3", 8080),
                Origin("http", "mirror.corp", 80),
                Origin("https", "pypi.org", 443),
                Origin("https", "odd.example", 8443),
            }
        ),
        public=frozenset(
            {
                Origin("http", ".deb.debian.org", 80),
                Origin("http", "deb.debian.org", 80),
                Origin("https", ".deb.debian.org", 443),
            }
        ),
    )
    conf = squid_conf(port=3999, store=tmp_path, run=tmp_path, parent=None, sources=sources)
    rules = [ln for ln in conf.splitlines() if ln.startswith("http_access")]
    assert rules == [
        "http_access deny manager",
        "http_access deny !loopback",
        "http_access deny CONNECT !SSL_ports",
        "http_access allow !CONNECT lock_http_80_name port_80",
        "http_access allow !CONNECT lock_http_8080_addr port_8080",
        "http_access allow CONNECT lock_https_443_name",
        "http_access deny !public_any",  # an unlisted name is refused before squid resolves it
        "http_access deny to_controller",
        "http_access deny to_link_local",
        "http_access deny to_private",
        "http_access allow !CONNECT public_http_80_name port_80",
        "http_access allow CONNECT public_https_443_name",
        "http_access deny all",
    ]
    assert (
        "acl lock_http_8080_addr dst -n 10.1.2.3\n" in conf
        and "acl lock_https_443_name dstdomain -n pypi.org\n" in conf
    )
    assert "acl public_http_80_name dstdomain -n .deb.debian.org\n" in conf  # deb.debian.org is inside it
    assert "acl public_any dstdomain -n .deb.debian.org\n" in conf
    assert "odd.example" not in conf  # CONNECT goes to 443 only
    assert "acl to_private dst 10.0.0.0/8 172.16.0.0/12 192.168.0.0/16 100.64.0.0/10 fc00::/7\n" in conf


def test_squid_stats_count_hits_and_the_bytes_that_came_from_upstream() -> None:
    log = (
        "1.0 4 127.0.0.1 TCP_MISS/200 53359 GET http://m/a.deb - HIER_DIRECT/1.2.3.4 x/deb 53080\n"
        "1.1 0 127.0.0.1 TCP_MEM_HIT/200 53365 GET http://m/a.deb - HIER_NONE/- x/deb -\n"
        "1.1 0 127.0.0.1 TCP_CF_HIT/200 53365 GET http://m/a.deb - HIER_NONE/- x/deb -\n"
        # collapsed onto the fetch in flight: squid 5 also logs these as misses, but nothing went upstream
        "1.1 0 127.0.0.1 TCP_CF_MISS/200 53365 GET http://m/a.deb - HIER_NONE/- x/deb -\n"
        "1.1 0 127.0.0.1 TCP_MISS/200 53365 GET http://m/a.deb - HIER_NONE/- x/deb -\n"
        "1.1 0 127.0.0.1 TCP_DENIED/403 3900 GET http://elsewhere/ - HIER_NONE/- text/html -\n"
        "1.2 3 127.0.0.1 TCP_REFRESH_UNMODIFIED/200 151327 GET http://m/InRelease - HIER_DIRECT/1.2.3.4 t/p 0\n"
        "1.3 0 127.0.0.1 NONE_NONE/000 0 - error:transaction-end-before-headers - HIER_NONE/- - -\n"
        "garbage line\n"
    )
    stats = squid_stats(log)
    assert (stats.requests, stats.hits) == (7, 4)
    assert stats.upstream_bytes == 53080 and stats.served_bytes == 53359 + 4 * 53365 + 3900 + 151327


@pytest.fixture
def origin() -> Iterator[tuple[str, Path]]:
    """A package archive stand-in on loopback (the tests cannot reach Debian's mirror from here)."""
    root = Path(tempfile.mkdtemp(prefix="origin-"))
    (root / "pool").mkdir()
    (root / "pool" / "demo_1.0_amd64.deb").write_bytes(os.urandom(200_000))
    handler = type("H", (http.server.SimpleHTTPRequestHandler,), {"log_message": lambda *_a: None})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), lambda *a: handler(*a, directory=str(root)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", root
    server.shutdown()
    shutil.rmtree(root)


@pytest.fixture
def squid_here(monkeypatch: pytest.MonkeyPatch) -> None:
    """A real squid on this machine, reached with no proxy of the controller's in between."""
    if shutil.which("squid", path=os.environ["PATH"] + ":/usr/sbin") is None:
        missing("squid is not installed")
    monkeypatch.delenv("http_proxy", raising=False)
    monkeypatch.delenv("HTTP_PROXY", raising=False)


@pytest.fixture
def cache_root() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="provision-cache-", dir="/var/tmp"))  # squid's user can reach it
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.slow  # a real squid daemon, started and stopped
@pytest.mark.usefixtures("squid_here")
def test_real_squid_fetches_once_and_serves_again_from_its_store(
    origin: tuple[str, Path], cache_root: Path, tmp_path: Path
) -> None:
    url, root = origin
    squid = Squid(cache_root, "run-1", RepoSources(lock=frozenset({Origin.of(url)})))  # type: ignore[arg-type]
    squid.start()
    try:
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": f"http://127.0.0.1:{squid.port}"}))
        bodies = [opener.open(f"{url}/pool/demo_1.0_amd64.deb", timeout=10).read() for _ in range(2)]
        # apt asks with max-age=0; a package file never changes under its URL: still a hit
        again = urllib.request.Request(f"{url}/pool/demo_1.0_amd64.deb", headers={"Cache-Control": "max-age=0"})
        bodies.append(opener.open(again, timeout=10).read())
    finally:
        squid.stop(keep=tmp_path / "access.log")
    assert bodies[0] == bodies[1] == bodies[2] == (root / "pool" / "demo_1.0_amd64.deb").read_bytes()
    stats = squid.stats()
    assert (stats.requests, stats.hits) == (3, 2), (tmp_path / "access.log").read_text()
    assert stats.upstream_bytes == 200_000
    assert (tmp_path / "access.log").read_text().count("demo_1.0_amd64.deb") == 3


def _proxy_status(port: int, request: str) -> int:
    """The status line squid answers ``request`` with (a raw socket: CONNECT as a client sends it)."""
    import socket

    with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
        s.sendall(request.encode())
        head = s.recv(4096).decode(errors="replace")
    return int(head.split()[1])


@pytest.mark.slow  # a real squid daemon, started and stopped
@pytest.mark.usefixtures("squid_here")
def test_real_squid_fetches_only_the_run_s_repositories(
    origin: tuple[str, Path], cache_root: Path, tmp_path: Path
) -> None:
    """squid.conf's order really works: the lock's loopback stand-in is served, the controller's other
    loopback ports are not, an unlisted name is not, a public name that resolves to loopback is not."""
    url, _root = origin
    port = int(url.rsplit(":", 1)[1])
    lock = {Origin("http", "127.0.0.1", port), Origin("https", "127.0.0.1", 443), Origin("https", "pypi.org", 443)}
    public = {Origin("http", "localhost", port)}  # a public name that resolves to the controller itself
    squid = Squid(cache_root, "run-acl", RepoSources(lock=frozenset(lock), public=frozenset(public)))
    squid.start()
    try:
        get = "GET {} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        connect = "CONNECT {0} HTTP/1.1\r\nHost: {0}\r\n\r\n"
        got = {
            "listed": _proxy_status(squid.port, get.format(f"{url}/pool/demo_1.0_amd64.deb")),
            "controller ssh": _proxy_status(squid.port, get.format("http://127.0.0.1:22/")),
            "controller 0.0.0.0": _proxy_status(squid.port, get.format(f"http://0.0.0.0:{port}/")),
            "public name to loopback": _proxy_status(squid.port, get.format(f"http://localhost:{port}/")),
            "unlisted": _proxy_status(squid.port, get.format("http://unlisted.example/")),
            "link-local": _proxy_status(squid.port, get.format("http://169.254.169.254/latest/meta-data/")),
            "connect unlisted": _proxy_status(squid.port, connect.format("unlisted.example:443")),
            "connect listed, other port": _proxy_status(squid.port, connect.format("pypi.org:8443")),
            "connect controller ssh": _proxy_status(squid.port, connect.format("127.0.0.1:22")),
        }
        # squid let it through: nothing listens on the controller's 443, so the tunnel fails (503)
        connect_listed = _proxy_status(squid.port, connect.format("127.0.0.1:443"))
    finally:
        squid.stop()
    assert got.pop("listed") == 200, got
    assert got == dict.fromkeys(got, 403), got
    assert connect_listed == 503


def test_the_wheel_server_lists_the_wheelhouse_for_pip_and_counts_what_it_served(tmp_path: Path) -> None:
    house = tmp_path / "cp311-x86_64"
    house.mkdir()
    (house / "demo-1.0+cpu-py3-none-any.whl").write_bytes(b"w" * 5000)
    server = WheelServer(tmp_path)
    port = server.start()
    try:
        listing = urllib.request.urlopen(f"http://127.0.0.1:{port}/cp311-x86_64/", timeout=5).read().decode()
        assert 'href="demo-1.0%2Bcpu-py3-none-any.whl"' in listing
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/cp311-x86_64/demo-1.0%2Bcpu-py3-none-any.whl").read()
    finally:
        server.stop()
    assert body == b"w" * 5000 and server.served == 5000 + len(listing.encode())


def test_auto_without_squid_goes_on_without_the_apt_cache(
    cache_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no squid anywhere on it ...
    monkeypatch.setattr("provision.fleet.cache.squid.shutil.which", lambda *_a, **_k: None)  # ... nor in /usr/sbin
    from provision.hosts.inventory import HostTarget

    def connect(_t: HostTarget) -> None:
        raise AssertionError("nothing to reach through a tunnel: no connection may be opened")

    cache = FleetCache(cache_root, tmp_path / "run-x", python_exe="python3")
    assert cache.start([HostTarget("th1", "10.0.0.1")], {"th1": None}, {}, connect=connect) == {}
    report = cache.close().to_json()
    assert report["apt"].startswith("off: squid is not installed") and report["notes"], report
    assert report["hosts"] == []


def test_an_unusable_cache_folder_is_a_note_not_a_failure(tmp_path: Path) -> None:
    from provision.hosts.inventory import HostTarget

    blocked = tmp_path / "not-a-folder"
    blocked.write_text("a file where install.cache_dir points")
    cache = FleetCache(blocked / "cache", tmp_path / "run-z", python_exe="python3")
    assert cache.start([HostTarget("th1", "10.0.0.1")], {"th1": None}, {}, connect=None) == {}
    report = cache.close().to_json()
    assert report["apt"].startswith("off: cannot use") and "install.cache_dir" in report["notes"][0], report


def test_a_host_whose_tunnel_cannot_open_fetches_itself(cache_root: Path, tmp_path: Path) -> None:
    from provision.errors import Unreachable
    from provision.hosts.inventory import HostTarget

    def connect(t: HostTarget) -> None:
        raise Unreachable(f"cannot reach {t.name}", "check the host")

    house = cache_root / "wheels" / "cp311-x86_64"
    house.mkdir(parents=True)
    ws = WheelSet.from_group_vars(
        {
            **GROUP_VARS,
            "frameworks_no_index": True,
            "frameworks_find_links": [str(tmp_path)],
            "frameworks_installs": [{"packages": ["demo==1.0"], "index_url": ""}],
        },
        python="3.11",
        arch="x86_64",
    )
    (tmp_path / "demo-1.0-py3-none-any.whl").write_bytes(_wheel("demo", "1.0"))
    cache = FleetCache(cache_root, tmp_path / "run-y", python_exe=sys.executable)
    cache._start_squid = lambda _sources: None  # type: ignore[method-assign]  # the apt part is the other test's
    assert cache.start([HostTarget("th1", "10.0.0.1")], {"th1": ws}, {}, connect=connect) == {}
    report = cache.close().to_json()
    assert report["wheels"] == {"cp311-x86_64": "on"} and (house / "demo-1.0-py3-none-any.whl").is_file()
    assert report["hosts"] == [] and report["notes"] == [
        "th1: no tunnel (cannot reach th1 (check the host)): the host fetches itself"
    ]


def _wheel(name: str, version: str) -> bytes:
    """A minimal valid pure-Python wheel (what pip download accepts from a find-links folder)."""
    import io
    import zipfile

    buf = io.BytesIO()
    dist = f"{name}-{version}.dist-info"
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr(f"{name}/__init__.py", "")
        z.writestr(f"{dist}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        z.writestr(f"{dist}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{dist}/RECORD", "")
    return buf.getvalue()


def test_config_takes_cache_auto_off_and_a_folder() -> None:
    assert parse_config({}).install.cache == "auto"
    assert parse_config({"install": {"cache": False}}).install.cache == "off"  # YAML's bare `off`
    got = parse_config({"install": {"cache": "off", "cache_dir": "/srv/provision-cache"}}).install
    assert (got.cache, got.cache_dir) == ("off", "/srv/provision-cache")
    with pytest.raises(BadInput, match=r"install.cache` must be one of auto, off"):
        parse_config({"install": {"cache": "always"}})
    with pytest.raises(BadInput, match=r"install\.cache_dir` is empty"):
        parse_config({"install": {"cache_dir": " "}})
    with pytest.raises(BadInput) as exc:
        parse_config({"install": {"cache_dri": "/x"}})
    assert exc.value.hint == "did you mean `install.cache_dir`?"


def test_a_machine_without_squids_user_is_a_reason_not_a_traceback() -> None:
    """RHEL's squid runs as `squid`, not `proxy`: the start fails with a RuntimeError, which `auto`
    turns into a note (a KeyError from the user lookup went past that and out of `up`)."""
    from provision.fleet.cache.squid import _user_ids

    assert _user_ids("root") == (0, 0)
    with pytest.raises(RuntimeError, match="squid's user no-such-user-here does not exist"):
        _user_ids("no-such-user-here")


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root (the cache chowns only as root)")
def test_the_stores_chown_does_not_follow_a_symlink_planted_in_it(tmp_path: Path) -> None:
    """squid's user owns the store: a link it left there must not make root give it the target."""
    from provision.fleet.cache.squid import _chown_tree

    outside = tmp_path / "outside"
    outside.mkdir()
    secret, folder = outside / "secret", outside / "folder"
    secret.write_text("root's")
    folder.mkdir()
    (folder / "inner").write_text("root's too")
    store = tmp_path / "store"
    (store / "00").mkdir(parents=True)
    (store / "00" / "obj").write_text("squid's")
    (store / "00" / "link").symlink_to(secret)
    (store / "dirlink").symlink_to(folder, target_is_directory=True)
    _chown_tree(store, 4242, 4243)
    assert (store / "00" / "obj").stat().st_uid == 4242 and store.stat().st_gid == 4243
    assert (store / "00" / "link").lstat().st_uid == 4242  # the link itself changed hands ...
    for p in (secret, folder, folder / "inner"):  # ... what it points at did not
        assert p.stat().st_uid == 0, p
    # a store that is itself a link (to /etc, say) is refused, not walked
    (tmp_path / "store-link").symlink_to(outside, target_is_directory=True)
    with pytest.raises(RuntimeError, match="is a symlink"):
        _chown_tree(tmp_path / "store-link", 4242, 4243)
    assert outside.stat().st_uid == 0


def test_the_wheel_server_serves_the_wheelhouse_and_nothing_else(tmp_path: Path) -> None:
    """No way out of the wheelhouse: `..` in any spelling, a symlink planted in it, a FIFO."""
    import urllib.error

    house = tmp_path / "wheels"
    (house / "cp311-x86_64").mkdir(parents=True)
    (house / "cp311-x86_64" / "demo-1.0-py3-none-any.whl").write_bytes(b"w")
    (tmp_path / "secret.txt").write_text("the controller's own file")
    (house / "cp311-x86_64" / "leak.whl").symlink_to(tmp_path / "secret.txt")
    (house / "etc").symlink_to("/etc", target_is_directory=True)
    os.mkfifo(house / "cp311-x86_64" / "fifo.whl")
    server = WheelServer(house)
    port = server.start()
    base = f"http://127.0.0.1:{port}"
    try:
        assert urllib.request.urlopen(f"{base}/cp311-x86_64/demo-1.0-py3-none-any.whl", timeout=5).read() == b"w"
        for path in (
            "/../secret.txt",
            "/%2e%2e/secret.txt",
            "/cp311-x86_64/..%2f..%2fsecret.txt",
            "//etc/hostname",
            "/cp311-x86_64/leak.whl",
            "/etc/hostname",
            "/etc/",
            "/cp311-x86_64/fifo.whl",
        ):
            with pytest.raises(urllib.error.HTTPError) as exc:
                urllib.request.urlopen(base + path, timeout=5)
            assert exc.value.code == 404, path
    finally:
        server.stop()


def test_a_host_s_plain_http_sources_are_read_from_apt_and_dnf_files() -> None:
    from provision.fleet.cache.sources import host_sources

    text = "\n".join(
        [
            "deb http://deb.debian.org/debian bookworm main  # the archive",
            "deb [arch=amd64 signed-by=/usr/share/keyrings/x.gpg] http://mirror.site:8080/debian bookworm main",
            "# deb http://commented.example/debian bookworm main",
            "deb https://tls.example/debian bookworm main",  # through the host's own https_proxy, not squid
            "",
            "Types: deb",
            "URIs: http://archive.ubuntu.com/ubuntu/ http://us-east-1.ec2.archive.ubuntu.com/ubuntu/",
            "Suites: noble",
            "",
            "Types: deb",
            "URIs: http://disabled.example/ubuntu/",
            "Enabled: no",
            "",
            "[baseos]",
            "name=BaseOS",
            "baseurl=http://dl.rockylinux.org/pub/rocky/9/BaseOS/x86_64/os/",
            "        http://second.example/rocky/",
            "enabled=1",
            "[appstream]",
            "mirrorlist=https://mirrors.rockylinux.org/mirrorlist?repo=AppStream-9",
            "[off]",
            "baseurl=http://off.example/",
            "enabled=0",
        ]
    )
    assert host_sources(text) == [
        "http://deb.debian.org/debian",
        "http://mirror.site:8080/debian",
        "http://archive.ubuntu.com/ubuntu/",
        "http://us-east-1.ec2.archive.ubuntu.com/ubuntu/",
        "http://dl.rockylinux.org/pub/rocky/9/BaseOS/x86_64/os/",
        "http://second.example/rocky/",
        "mirrorlist:https://mirrors.rockylinux.org/mirrorlist?repo=AppStream-9",
    ]
    sources = RepoSources.for_run([], ["debian-12", "ubuntu-24.04", "rocky-9"])
    assert [u for u in host_sources(text) if not sources.allows(u)] == [
        "http://mirror.site:8080/debian",
        "http://second.example/rocky/",
        "mirrorlist:https://mirrors.rockylinux.org/mirrorlist?repo=AppStream-9",  # its mirrors are unknown here
    ]


def test_the_listening_addresses_of_a_port_come_from_the_kernel_s_tables() -> None:
    from provision.fleet.cache.tunnel import listening_addresses

    tcp = (
        "  sl  local_address rem_address   st tx_queue rx_queue\n"
        "   0: 0100007F:9C40 00000000:0000 0A 00000000:00000000\n"  # 127.0.0.1:40000, listening
        "   1: 00000000:9C40 00000000:0000 0A 00000000:00000000\n"  # 0.0.0.0:40000
        "   2: 0300CB0A:9C40 0200CB0A:D431 01 00000000:00000000\n"  # an established connection
        "   3: 0100007F:9C41 00000000:0000 0A 00000000:00000000\n"  # another port
        "   0: 00000000000000000000000001000000:9C40 00000000000000000000000000000000:0000 0A 0\n"  # ::1
    )
    assert listening_addresses(tcp, 40000) == ["127.0.0.1", "0.0.0.0", "::1"]


@pytest.mark.usefixtures("descriptors_above_1024")
def test_tunnel_pump_carries_bytes_with_descriptors_above_1024() -> None:
    """A fleet takes the controller past 1024 descriptors; select.select raised ValueError there.

    The pump's other end is a socketpair standing in for the paramiko Channel (it has the same
    fileno/recv/sendall/close the pump uses); the local side is a real loopback echo server.
    """
    import socket

    from provision.fleet.cache.tunnel import _pump

    server = socket.create_server(("127.0.0.1", 0))
    try:

        def echo() -> None:
            conn, _ = server.accept()
            with conn:
                while data := conn.recv(1 << 16):
                    conn.sendall(data)

        threading.Thread(target=echo, daemon=True).start()
        near, far = socket.socketpair()
        assert far.fileno() > 1024
        pump = threading.Thread(target=_pump, args=(far, server.getsockname()[1]), daemon=True)
        pump.start()
        near.settimeout(10)
        near.sendall(b"through the tunnel")
        assert near.recv(100) == b"through the tunnel"
        near.shutdown(socket.SHUT_WR)  # the host side closes: the pump ends and closes both
        pump.join(10)
        assert not pump.is_alive()
        near.close()
    finally:
        server.close()


@pytest.mark.slow  # a real squid daemon, started and stopped
@pytest.mark.usefixtures("squid_here")
def test_real_squid_starts_under_ups_private_umask(cache_root: Path) -> None:
    """`up` runs under umask 077 (its run dirs are private); the folders made for squid must still
    let squid's user through: squid-runs/ made 0700 stopped squid at start ('Removing PID file')."""
    from provision.ansible.rundir import private_umask

    root = cache_root / "made-by-provision"  # as /var/cache/provision is on a first run
    with private_umask():
        squid = Squid(root, "run-umask", RepoSources())
        squid.start()
        squid.stop()
    assert (root.stat().st_mode & 0o777, (root / "squid-runs").stat().st_mode & 0o777) == (0o711, 0o711)
