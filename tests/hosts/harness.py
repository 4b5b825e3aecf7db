"""Python side of the SSH test hosts: bring a set up, describe it, tear it down.

Used by the session fixtures in tests/conftest.py and by the benchmarks. Each set has its own
directory, name prefix, bridge and /24, so a test can run a second set beside the session's
(the teardown test does) while both share one cached debootstrap root filesystem per Debian
release: the session's Debian 12 (bookworm) set, and beside it a Debian 13 (trixie) set whose
names and subnet are derived from the Debian 12 set's (see debian13_settings).
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SCRIPT = Path(__file__).with_name("testhosts.sh")
BASE_DIR = Path(os.environ.get("TESTHOSTS_BASE", "/var/tmp/provision-testhosts-base"))
# Debian 13's own cached rootfs (debootstrap trixie from Debian's mirror; built on first use).
TRIXIE_BASE_DIR = Path(os.environ.get("TESTHOSTS_BASE_TRIXIE", "/var/tmp/provision-testhosts-base-trixie"))
WHEELHOUSE = Path(os.environ.get("PROVISION_WHEELHOUSE", "/var/tmp/provision-wheelhouse"))
# The CPU torch build the test hosts (Debian 12: Python 3.11) and the controller run. It is the
# version the development machines carry on disk; see docs/contributing/tests.md.
TORCH_CPU = os.environ.get("PROVISION_TEST_TORCH", "torch==2.13.0")
# pip byte-compiles every module it installs: for the CPU torch stack that is three quarters of the
# install's CPU time (a test host, measured: 25 s user with it, 6 s without), paid again by each of
# the many tests that install torch on fresh hosts, two hosts at a time on a 2-core CI machine. The
# hosts' pip skips it; Python compiles the modules a job imports when it imports them (about 2 s
# more for torch's first import). What provision runs and what pip installs stay the same.
PIP_CONF_NO_COMPILE = "[install]\nno-compile = true\n"


@dataclass(frozen=True)
class TestHost:
    name: str
    address: str
    port: int = 22
    user: str = "root"


@dataclass(frozen=True)
class HostSet:
    """A running set of test hosts and the files a client needs to reach them."""

    directory: Path
    prefix: str
    net: str  # first three octets, e.g. "10.200.0"
    bridge: str
    hosts: list[TestHost] = field(default_factory=list)
    suite: str = "bookworm"  # the Debian release debootstrap built the base from
    base: Path = BASE_DIR

    __test__ = False  # not a pytest test class

    @property
    def key(self) -> Path:
        return self.directory / "id_ed25519"

    @property
    def known_hosts(self) -> Path:
        return self.directory / "known_hosts"

    @property
    def inventory(self) -> Path:
        return self.directory / "inventory.ini"

    @property
    def ssh_config(self) -> Path:
        return self.directory / "ssh_config"

    @property
    def proxy(self) -> str:
        """The filtering HTTP proxy on the bridge that hosts use for apt and pip."""
        return f"http://{self.net}.1:3128"

    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "TESTHOSTS_DIR": str(self.directory),
            "TESTHOSTS_BASE": str(self.base),
            "TESTHOSTS_SUITE": self.suite,
            "TESTHOSTS_PREFIX": self.prefix,
            "TESTHOSTS_NET": self.net,
            "TESTHOSTS_BRIDGE": self.bridge,
        }


def session_settings() -> dict[str, Any]:
    """The session's Debian 12 set, from TESTHOSTS_DIR / _PREFIX / _NET / _BRIDGE (one per checkout).

    Under pytest-xdist (``pytest -n 2 tests/integration`` by hand) each worker past the first has a
    set of its own beside it (worker_settings), so two workers never share or tear down each other's
    hosts. `make test` runs them in one process: two workers took as long in all, since the
    integration modules keep both cores busy already (docs/contributing/tests.md)."""
    settings = {
        "directory": Path(os.environ.get("TESTHOSTS_DIR", "/var/tmp/provision-testhosts")),
        "prefix": os.environ.get("TESTHOSTS_PREFIX", "th"),
        "net": os.environ.get("TESTHOSTS_NET", "10.200.0"),
        "bridge": os.environ.get("TESTHOSTS_BRIDGE", "thbr0"),
    }
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    return worker_settings(settings, int(worker.removeprefix("gw")))


def worker_settings(first: dict[str, Any], n: int) -> dict[str, Any]:
    """Worker ``n``'s set: a prefix that starts with ``w<n>`` (no set's prefix may be the start of
    another's: leftovers() and ``testhosts.sh down`` match names by prefix) and a /24 fifty above
    per worker (10.200.0 -> 10.200.50: clear of the +13 and +31 of the sets derived from a set)."""
    return derived_settings(first, f"w{n}", f"w{n}{first['prefix']}", 50 * n) if n else first


def derived_settings(first: dict[str, Any], tag: str, prefix: str, net_step: int) -> dict[str, Any]:
    """A set beside ``first`` that never meets it: directory ``<dir>-<tag>``, ``prefix``, bridge
    ``<prefix>br0`` and the /24 ``net_step`` above."""
    a, b, c = str(first["net"]).split(".")
    return {
        "directory": Path(f"{first['directory']}-{tag}"),
        "prefix": prefix,
        "net": f"{a}.{b}.{(int(c) + net_step) % 256}",
        "bridge": f"{prefix}br0",
    }


def debian13_settings(debian12: dict[str, Any]) -> dict[str, Any]:
    """The Debian 13 set that runs beside a Debian 12 set, derived from it so that two checkouts'
    pairs of sets never meet: its own directory (``<dir>-trixie``), prefix ``t<prefix>`` (so a
    host ``tth1`` never matches the Debian 12 set's prefix ``th`` in leftovers()), bridge
    ``t<prefix>br0`` and the /24 thirteen above (10.200.0 -> 10.200.13; every set the sessions
    use ends in .0, the teardown test's in .9)."""
    derived = derived_settings(debian12, "trixie", f"t{debian12['prefix']}", 13)
    return {**derived, "suite": "trixie", "base": TRIXIE_BASE_DIR}


def bundle_settings(debian12: dict[str, Any]) -> dict[str, Any]:
    """test_up_bundle's own Debian 12 host beside the set: prefix ``b<prefix>``, the /24 31 above."""
    return derived_settings(debian12, "bundle", f"b{debian12['prefix']}", 31)


def available() -> str | None:
    """Why test hosts cannot run here, or None when they can."""
    if os.geteuid() != 0:
        return "SSH test hosts need root (network namespaces, mounts, systemd-nspawn)"
    if shutil.which("ip") is None:
        return "SSH test hosts need iproute2"
    return None


def fill_wheelhouse(directory: Path = WHEELHOUSE) -> Path:
    """Download the CPU torch wheel and its dependencies once (for cp311 manylinux x86_64), and
    the knowledge's uv (os.yaml standalone_python.uv), which python_env installs from here.

    Idempotent: pip skips what the folder already holds. Test hosts reach no index for torch
    (a plain PyPI torch is the multi-GB CUDA build) nor for uv, so they install from this folder.
    """
    from provision.matrix import load

    directory.mkdir(parents=True, exist_ok=True)
    sp = load().t.standalone_python
    assert sp is not None, "the knowledge has no standalone_python entry (os.yaml)"
    # two xdist workers fill it at once on a fresh machine: one pip at a time in the folder
    with (directory.parent / f"{directory.name}.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        _fill(directory, [(TORCH_CPU, []), (f"uv=={sp.uv}", ["--no-deps"])])  # uv: one self-contained wheel
    return directory


def _fill(directory: Path, pins: list[tuple[str, list[str]]]) -> None:
    for pin, no_deps in pins:
        stamp = directory / f".{pin}.done"
        if stamp.exists():
            continue
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "-q",
                "--only-binary=:all:",
                *no_deps,
                "--python-version",
                "3.11",
                "--platform",
                "manylinux_2_28_x86_64",
                "--platform",
                "manylinux_2_17_x86_64",
                "--platform",
                "manylinux2014_x86_64",
                "--platform",
                "any",
                "-d",
                str(directory),
                pin,
            ],
            check=True,
        )
        stamp.touch()


def _script(hostset: HostSet, *args: str, ro_binds: list[Path] | None = None) -> None:
    env = hostset.env()
    if ro_binds:
        env["TESTHOSTS_RO_BINDS"] = ":".join(str(p) for p in ro_binds)
    subprocess.run(["bash", str(SCRIPT), *args], env=env, check=True)


def up(
    count: int,
    directory: Path,
    *,
    prefix: str = "th",
    net: str = "10.200.0",
    bridge: str = "thbr0",
    ro_binds: list[Path] | None = None,
    suite: str = "bookworm",
    base: Path = BASE_DIR,
) -> HostSet:
    """Start ``count`` hosts (building the suite's base rootfs first if it is not cached)."""
    hostset = HostSet(directory=directory, prefix=prefix, net=net, bridge=bridge, suite=suite, base=base)
    _script(hostset, "down")  # whatever an interrupted earlier run left behind
    _script(hostset, "up", str(count), ro_binds=ro_binds)
    hosts = [
        TestHost(h["name"], h["host"], h["port"], h["user"]) for h in json.loads((directory / "hosts.json").read_text())
    ]
    hostset = dataclasses.replace(hostset, hosts=hosts)
    _pip_without_byte_compiling(hostset)
    return hostset


def _pip_without_byte_compiling(hostset: HostSet) -> None:
    """Add PIP_CONF_NO_COMPILE to every host's global pip configuration (idempotent)."""
    command = (
        f"grep -qx 'no-compile = true' /etc/pip.conf || printf {shlex.quote(PIP_CONF_NO_COMPILE)} >> /etc/pip.conf"
    )
    for h in hostset.hosts:
        subprocess.run(
            ["ssh", "-F", str(hostset.ssh_config), "-o", "BatchMode=yes", h.name, command], check=True, timeout=60
        )


def start_base_build(settings: dict[str, Any], *, detached: bool = False) -> subprocess.Popen[bytes] | None:
    """Build a set's base rootfs in the background (None when it is cached already).

    The Debian 13 base takes minutes on a fresh machine (CI): started beside the Debian 12 set,
    it is ready by the time the first Debian 13 test comes; `up` waits for it (the script takes
    one build at a time per base, under a lock).
    """
    base = Path(settings["base"])
    if (base / ".ready").exists():
        return None
    hostset = HostSet(**{k: settings[k] for k in ("directory", "prefix", "net", "bridge", "suite", "base")})
    Path(settings["directory"]).mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        ["bash", str(SCRIPT), "base"],
        env=hostset.env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=detached,
    )


def prefetch_bases() -> None:
    """Start building the session's two base rootfs (Debian 12 and 13) and return at once.

    `make test` calls this first (`python3 tests/hosts/harness.py`, before the venv exists: this
    module needs only the standard library), so that on a fresh machine the two debootstraps
    (minutes each) overlap the venv, the lint and the unit tests instead of delaying the first
    integration test. The builds outlive this process (their own session); a fixture that comes
    while one still runs waits for it under testhosts.sh's lock, and one that failed is simply
    built again there, with its error shown.
    """
    if available():
        return  # no test hosts on this machine: the fixtures say why
    debian12 = {**session_settings(), "suite": "bookworm", "base": BASE_DIR}
    for settings in (debian12, debian13_settings(debian12)):
        start_base_build(settings, detached=True)


def down(hostset: HostSet) -> None:
    _script(hostset, "down")


@contextmanager
def running(count: int, directory: Path, **kwargs: object) -> Iterator[HostSet]:
    """Hosts for the duration of a ``with`` block, torn down whatever happens inside it."""
    hostset = HostSet(
        directory=directory,
        prefix=str(kwargs.get("prefix", "th")),
        net=str(kwargs.get("net", "10.200.0")),
        bridge=str(kwargs.get("bridge", "thbr0")),
        suite=str(kwargs.get("suite", "bookworm")),
        base=Path(str(kwargs.get("base", BASE_DIR))),
    )
    try:
        hostset = up(count, directory, **kwargs)  # type: ignore[arg-type]
        yield hostset
    finally:
        down(hostset)


def bench_running(
    count: int, directory: str, prefix: str, net: str, **kwargs: object
) -> AbstractContextManager[HostSet]:
    """A benchmark's own set of ``count`` hosts (``running``), its defaults overridden by
    TESTHOSTS_DIR / _PREFIX / _NET / _BRIDGE so two checkouts' benchmarks never meet."""
    prefix = os.environ.get("TESTHOSTS_PREFIX", prefix)
    return running(
        count,
        Path(os.environ.get("TESTHOSTS_DIR", directory)),
        prefix=prefix,
        net=os.environ.get("TESTHOSTS_NET", net),
        bridge=os.environ.get("TESTHOSTS_BRIDGE", f"{prefix}br0"),
        **kwargs,
    )


# Why logins fail on a test host, asked as root: systemd's state, the files that make PAM refuse
# every user but root (/run/nologin while booting or shutting down), and sshd's own refusals.
_DESCRIBE = (
    'echo "state=$(systemctl is-system-running 2>&1) nologin=$(cat /run/nologin /etc/nologin 2>/dev/null'
    " | head -c 120 | tr '\\n' ' ')\"; journalctl -b -q --no-pager -u ssh 2>/dev/null"
    " | grep -E 'fatal|Access denied|Authentication refused' | tail -n 3;"
    # the account fields PAM's account check reads (ages and expiry; never field 2, the hash)
    " getent shadow deploy admin | cut -d: -f1,3-8 | sed 's/^/shadow: /'"
)


def describe(hostset: HostSet) -> str:
    """One short paragraph per host for a failed test's report (never raises: hosts may be gone)."""
    lines = []
    for h in hostset.hosts:
        try:
            r = subprocess.run(
                [
                    "ssh",
                    "-F",
                    str(hostset.ssh_config),
                    "-o",
                    "BatchMode=yes",
                    "-o",
                    "ConnectTimeout=5",
                    h.name,
                    _DESCRIBE,
                ],
                capture_output=True,
                text=True,
                timeout=20,
            )
            text = (r.stdout.strip() or r.stderr.strip() or f"rc={r.returncode}").replace("\n", "\n    ")
        except (OSError, subprocess.SubprocessError) as e:
            text = f"not reachable as root: {e}"
        lines.append(f"  {h.name}: {text}")
    return "\n".join(lines)


def leftovers(hostset: HostSet) -> list[str]:
    """Everything of a set that still exists: namespaces, links, mounts, processes, files."""
    found: list[str] = []
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    found += [
        f"netns {line.split()[0]}"
        for line in netns.splitlines()
        if line.split() and line.split()[0].startswith(hostset.prefix)
    ]
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    for line in links.splitlines():
        name = line.split(":")[1].strip().split("@")[0]
        if name == hostset.bridge or (name.startswith(hostset.prefix) and name.endswith("-h")):
            found.append(f"link {name}")
    mounts = Path("/proc/mounts").read_text()
    found += [f"mount {m.split()[1]}" for m in mounts.splitlines() if str(hostset.directory) in m.split()[1]]
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(hostset.directory) in cmdline:
            found.append(f"process {proc.name}: {cmdline.strip()[:80]}")
    hosts_dir = hostset.directory / "hosts"
    if hosts_dir.exists():
        found += [f"host dir {p}" for p in hosts_dir.iterdir()]
    return found


if __name__ == "__main__":
    prefetch_bases()
