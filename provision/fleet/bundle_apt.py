"""A bundle's OS packages: what each apt lock group's play installs, with its whole dependency
closure, as a signed flat repository per OS release and CPU (``apt/<os>-<arch>/``).

The closure comes from apt itself on the controller, in a private root: its own sources list (the
OS release's archive suites, trusted through the controller's Debian archive keyring), its own
lists and cache, and an empty dpkg status, so ``apt-get install --download-only`` fetches every
package the names need on a host that has none of them, checked against the archive's signed
indexes as on any host (apt.conf(5): ``Dir::State::status``, ``Dir::Etc::SourceList``;
apt-get(8): ``--download-only``). A host that has some of them already installs the rest.

What a play installs is read from the group's role variables (:func:`provision.ansible.role_vars.group_vars`)
and the roles' defaults: python_env's OS packages and module packages, the package plan's entries
at their versions, gpg where the plan adds a repository (signed_repo installs it), and for a
driver that DKMS builds, ``linux-headers-<kernel>`` of each kernel ``--kernel`` names (a lock does
not record the hosts' kernels). The plan's repositories (NVIDIA's) join the archive's suites, each
trusted through its key alone: fetched from its key URL and kept only if it holds the lock's pinned
fingerprint, exported alone (as the signed_repo role builds its keyring on a host).

Not in a bundle yet, refused before any download by :func:`check_group`: dnf hosts, and Ubuntu
(its archive's layout is not written here yet).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from provision.ansible.role_vars import group_vars
from provision.errors import BadInput, OperationFailed
from provision.fleet.apt_repo import SignedRepo, index_and_sign
from provision.matrix import load
from provision.model.lock import LockGroup
from provision.model.settings import InstallSettings

KEY_FILE = "bundle-key.asc"
# Debian's archive keyring on a Debian controller (package debian-archive-keyring), which signs
# the archive's and the security archive's Release files
DEBIAN_KEYRING = Path("/usr/share/keyrings/debian-archive-keyring.gpg")
# the suites a Debian release's hosts install from: the release and its -updates on the mirror,
# -security on the security archive (https://wiki.debian.org/SourcesList, "Example sources.list"
# for bookworm); the components are the driver role's (nvidia_driver_debian_components) plus main
_DEB_ARCH = {"x86_64": "amd64", "aarch64": "arm64"}
_KERNEL = re.compile(r"[0-9][0-9A-Za-z.+_~-]{0,100}")


def check_group(group: LockGroup, kernels: Sequence[str] = ()) -> None:
    """BadInput (before any download) for a group whose OS packages a bundle cannot carry yet."""
    plan = group.packages
    if plan is None or plan.manager != "apt":
        raise BadInput(
            f"lock group {group.name} installs with {plan.manager if plan else 'no package manager'}: "
            "bundles carry apt packages only so far",
            "provision hosts with dnf from a mirror (docs/tutorials/air-gapped.md)",
        )
    os_release = load().t.os_releases.get(str(group.host.os))
    if os_release is None or os_release.family != "debian" or str(group.host.os).startswith("ubuntu"):
        raise BadInput(f"lock group {group.name} is for {group.host.os}: bundles are for Debian hosts so far", "")
    if group.stack.driver is not None and not kernels:
        raise BadInput(
            f"lock group {group.name} installs the NVIDIA driver, which DKMS builds against each host's kernel: "
            "the bundle needs those kernels' headers",
            "pass --kernel RELEASE for each kernel the hosts run (uname -r there), e.g. --kernel 6.1.0-28-amd64",
        )
    for kernel in kernels:
        if not _KERNEL.fullmatch(kernel):
            raise BadInput(f"--kernel {kernel!r} is not a kernel release", "give what uname -r prints on the host")


def play_packages(
    group: LockGroup, install: InstallSettings, defaults: Mapping[str, object], kernels: Sequence[str] = ()
) -> list[str]:
    """The apt names (``name`` or ``name=version``) the group's play installs: python_env's OS and
    module packages, every role's plan entries at their versions, gpg for a repository, and the
    headers of ``kernels`` for a driver."""
    gv = {**defaults, **group_vars(group, install)}
    names: list[str] = []
    if gv.get("python_env_enabled", True):
        names += [str(n) for n in [*gv.get("python_env_os_packages", []), *gv.get("python_env_module_packages", [])]]
    for key, value in gv.items():
        if key.endswith("_packages") and isinstance(value, list) and value and isinstance(value[0], dict):
            role = key.removesuffix("_packages")
            if gv.get(f"{role}_enabled", True):
                names += [f"{e['name']}={e['version']}" if e.get("version") else str(e["name"]) for e in value]
    if group.packages is not None and group.packages.repositories:
        names.append("gpg")  # signed_repo installs it first
    if gv.get("preflight_driver_install") and gv.get("preflight_driver_uses_dkms"):
        names += [f"linux-headers-{k}" for k in kernels]
    return sorted(set(names))


def repository_sources(group: LockGroup, keys: Path) -> list[str]:
    """The plan's repositories as apt sources lines (NVIDIA's flat layout, as the package_plan role
    writes them), each key fetched once into ``keys`` and kept only with the lock's pinned
    fingerprint, alone."""
    plan = group.packages
    lines = []
    for r in plan.repositories if plan is not None else ():
        key = keys / f"{r.name}.asc"
        if not key.exists():
            _pinned_key(r.key_url, str(r.key_fingerprint or ""), key)
        lines.append(f"deb [signed-by={key}] {r.url.rstrip('/')}/ /\n")
    return lines


def _pinned_key(url: str, fingerprint: str, out: Path) -> None:
    """The key of ``fingerprint`` from the file at ``url``, alone, armored, at ``out``."""
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            data = response.read(1 << 20)
    except (OSError, ValueError) as exc:
        raise OperationFailed(
            f"bundle: cannot fetch the repository key {url}: {exc}", "check the controller's network"
        ) from None
    with tempfile.TemporaryDirectory(prefix="provision-key-") as tmp:
        home = Path(tmp) / "home"
        home.mkdir(mode=0o700)
        env = {**os.environ, "GNUPGHOME": str(home)}
        gpg = ["gpg", "--batch", "--quiet"]
        subprocess.run([*gpg, "--import"], input=data, env=env, capture_output=True, check=False)
        colons = subprocess.run(
            [*gpg, "--with-colons", "--list-keys"], env=env, capture_output=True, text=True, check=False
        ).stdout
        fprs = [line.split(":")[9] for line in colons.splitlines() if line.startswith("fpr:")]
        if fingerprint.upper() not in fprs:
            raise OperationFailed(
                f"bundle: the key at {url} is not the lock's pinned {fingerprint}",
                "the repository's key changed, or the URL serves another: check it before trusting it",
            )
        exported = subprocess.run(
            [*gpg, "--armor", "--export", fingerprint], env=env, capture_output=True, check=False
        ).stdout
        subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "gpg-agent"], capture_output=True, check=False)
    out.write_bytes(exported)


def sources_list(os_id: str, mirror: str, security: str, components: Sequence[str]) -> str:
    """The archive's suites for ``os_id`` (a Debian release), each trusted through the keyring."""
    release = load().t.os_releases[os_id]
    if not release.codename:
        raise BadInput(f"the knowledge names no codename for {os_id}", "use a provision release that supports it")
    parts = " ".join(["main", *(c for c in components if c != "main")])
    signed = f"[signed-by={DEBIAN_KEYRING}]"
    c = release.codename
    return "".join(
        f"deb {signed} {url} {suite} {parts}\n"
        for url, suite in ((mirror, c), (mirror, f"{c}-updates"), (security, f"{c}-security"))
    )


def build_repo(
    folder: Path,
    names: Sequence[str],
    sources: str,
    arch: str,
    *,
    say: Callable[[str], None] = lambda _: None,
) -> SignedRepo:
    """Download ``names`` with their closure for ``arch`` from ``sources`` into ``folder``, then
    index and sign it."""
    if shutil.which("apt-get") is None:
        raise BadInput("apt-get is not on this machine: bundling OS packages needs a Debian controller", "")
    if not DEBIAN_KEYRING.is_file():
        raise BadInput(f"no {DEBIAN_KEYRING} on this machine", "install it: apt-get install debian-archive-keyring")
    deb_arch = _DEB_ARCH.get(arch)
    if deb_arch is None:
        raise BadInput(f"no Debian architecture for CPU {arch}", "")
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="provision-apt-") as tmp:
        root = Path(tmp)
        conf = _private_apt(root, sources, deb_arch)
        env = {**os.environ, "APT_CONFIG": str(conf), "DEBIAN_FRONTEND": "noninteractive"}
        say(f"bundle: apt-get update for {len(names)} package(s) on {deb_arch}")
        _apt(["apt-get", "-q", "update"], env)
        say("bundle: downloading the OS packages with their dependencies")
        _apt(["apt-get", "-q", "-y", "install", "--download-only", "--no-install-recommends", *names], env)
        for deb in sorted((root / "cache" / "archives").glob("*.deb")):
            shutil.move(deb, folder / deb.name)
    return index_and_sign(folder, label="provision bundle", key_file=KEY_FILE)


def _private_apt(root: Path, sources: str, deb_arch: str) -> Path:
    """An apt configuration whose every state and cache is under ``root``, with an empty dpkg status."""
    for sub in ("state/lists/partial", "cache/archives/partial", "parts"):
        (root / sub).mkdir(parents=True)
    (root / "status").write_text("")
    (root / "sources.list").write_text(sources)
    lines = {
        "Dir::State": root / "state",
        "Dir::State::status": root / "status",
        "Dir::Cache": root / "cache",
        "Dir::Etc::SourceList": root / "sources.list",
        "Dir::Etc::SourceParts": root / "parts",
        "Dir::Etc::Preferences": "/dev/null",
        "Dir::Etc::PreferencesParts": root / "parts",
        "APT::Architecture": deb_arch,
        "Acquire::Languages": "none",
        # nothing of the controller's own apt is locked or changed
        "Debug::NoLocking": "true",
        # the files are root's private temporary folder: apt's _apt user could not write there
        "APT::Sandbox::User": "root",
    }
    conf = root / "apt.conf"
    body = "".join(f'{k} "{v}";\n' for k, v in lines.items()) + f'APT::Architectures {{ "{deb_arch}"; }};\n'
    conf.write_text(body)
    return conf


def _apt(argv: list[str], env: dict[str, str]) -> None:
    r = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    errors = [line for line in r.stdout.splitlines() + r.stderr.splitlines() if line.startswith(("E:", "W:"))]
    if r.returncode != 0 or any(e.startswith("E:") for e in errors):
        why = next((e for e in errors if e.startswith("E:")), f"exit {r.returncode}")
        raise OperationFailed(f"bundle: {' '.join(argv[:4])} failed: {why[:200]}", "check the controller's apt sources")
    # apt-get update reports an unreachable or badly signed suite as W: and exits 0
    unreadable = [e for e in errors if "Failed to fetch" in e or "not signed" in e or "NO_PUBKEY" in e]
    if unreadable:
        raise OperationFailed(f"bundle: {unreadable[0][:200]}", "check that the controller reaches the archive")
