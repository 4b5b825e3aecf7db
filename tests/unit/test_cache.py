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

from provision.cache import (
    FleetCache,
    Squid,
    WheelServer,
    WheelSet,
    host_vars,
    squid_conf,
    squid_stats,
    wheel_platforms,
)
from provision.config import parse_config
from provision.errors import BadInput

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
    ws = WheelSet.from_group_vars(GROUP_VARS, {"python": "3.12", "arch": "aarch64"})
    assert ws is not None and ws.key == "cp312-aarch64"
    torch_cmd, jax_cmd = ws.download_commands("/usr/bin/python3", tmp_path)
    assert torch_cmd[:4] == ["/usr/bin/python3", "-m", "pip", "download"]
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
    ws = WheelSet.from_group_vars({**GROUP_VARS, "frameworks_no_index": True}, {"python": "3.11", "arch": "x86_64"})
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
    assert WheelSet.from_group_vars(data, host) is None


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


def test_squid_conf_listens_on_loopback_only_and_chains_to_the_controllers_proxy(tmp_path: Path) -> None:
    conf = squid_conf(port=3999, store=tmp_path / "s", run=tmp_path / "r", parent="http://user:pw@proxy.corp:8080")
    assert "http_port 127.0.0.1:3999\n" in conf
    assert "http_access allow loopback\nhttp_access deny all\n" in conf
    assert "cache_peer proxy.corp parent 8080 0 no-query default" in conf and "never_direct allow all" in conf
    assert "pw" not in conf.replace("proxy.corp", "")  # the parent's credentials are not written out
    assert "cache_peer" not in squid_conf(port=1, store=tmp_path, run=tmp_path, parent=None)


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
def cache_root() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="provision-cache-", dir="/var/tmp"))  # squid's user can reach it
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_real_squid_fetches_once_and_serves_again_from_its_store(
    origin: tuple[str, Path], cache_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if shutil.which("squid", path=os.environ["PATH"] + ":/usr/sbin") is None:
        if os.environ.get("PROVISION_REQUIRE_TESTHOSTS") == "1":
            pytest.fail("squid is not installed (tests/hosts/install-deps.sh installs it)")
        pytest.skip("squid is not installed")
    monkeypatch.delenv("http_proxy", raising=False)
    monkeypatch.delenv("HTTP_PROXY", raising=False)
    url, root = origin
    squid = Squid(cache_root, "run-1")
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
    monkeypatch.setattr("provision.cache.shutil.which", lambda *_a, **_k: None)  # ... nor in /usr/sbin
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
    ws = WheelSet.from_group_vars({**GROUP_VARS, "frameworks_no_index": True, "frameworks_find_links": [str(tmp_path)],
                                   "frameworks_installs": [{"packages": ["demo==1.0"], "index_url": ""}]},
                                  {"python": "3.11", "arch": "x86_64"})  # fmt: skip
    (tmp_path / "demo-1.0-py3-none-any.whl").write_bytes(_wheel("demo", "1.0"))
    cache = FleetCache(cache_root, tmp_path / "run-y", python_exe=sys.executable)
    cache._start_squid = lambda: None  # type: ignore[method-assign]  # the apt part is the other test's
    assert cache.start([HostTarget("th1", "10.0.0.1")], {"th1": ws}, {}, connect=connect) == {}
    report = cache.close().to_json()
    assert report["wheels"] == {"cp311-x86_64": "on"} and (house / "demo-1.0-py3-none-any.whl").is_file()
    assert report["hosts"] == [] and report["notes"] == ["th1: no tunnel (cannot reach th1 (check the host)): the host fetches itself"]


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
    from provision.cache import _user_ids

    assert _user_ids("root") == (0, 0)
    with pytest.raises(RuntimeError, match="squid's user no-such-user-here does not exist"):
        _user_ids("no-such-user-here")


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root (the cache chowns only as root)")
def test_the_stores_chown_does_not_follow_a_symlink_planted_in_it(tmp_path: Path) -> None:
    """squid's user owns the store: a link it left there must not make root give it the target."""
    from provision.cache import _chown_tree

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
        for path in ("/../secret.txt", "/%2e%2e/secret.txt", "/cp311-x86_64/..%2f..%2fsecret.txt",
                     "//etc/hostname", "/cp311-x86_64/leak.whl", "/etc/hostname", "/etc/", "/cp311-x86_64/fifo.whl"):  # fmt: skip
            with pytest.raises(urllib.error.HTTPError) as exc:
                urllib.request.urlopen(base + path, timeout=5)
            assert exc.value.code == 404, path
    finally:
        server.stop()
