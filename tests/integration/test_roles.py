"""The roles for real, on Debian 12 and Debian 13 SSH test hosts, through a run dir that plain
`ansible-playbook` applies (rendered from a lock group the real resolver made).

The test hosts have no GPU: preflight's GPU check, the module load and verify's nvidia-smi check
are skipped by their documented role variables (roles_harness.GPU_LESS), nothing else. Debian 12
host 1 and the Debian 13 host run the long real installs (Debian's non-free driver built by DKMS for real against the
release's own kernel headers; on Debian 12 also Debian's CUDA toolkit) in the background while
Debian 12 host 2 runs the rest, so the whole module stays within about ten minutes on two cores.

What is a STAND-IN: NVIDIA's repository (standin_repo: generated from package plans in the
contract's shape, with NVIDIA's names, version strings and relationships, but stand-in contents,
-1 revisions and a throwaway signing key in place of 3bf863cc / 8793F200) and its stand-in
kernel. The Debian archive, its driver, DKMS and the kernel headers are real.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from provision.fleet.closure import lock_closures
from provision.model.settings import InstallSettings, PipSettings
from provision.stack.lock import LockGroup
from tests.hosts import harness
from tests.integration import roles_harness as rh
from tests.integration import standin_plans as sp
from tests.integration import standin_repo as sr

TORCH_CPU = "torch==2.13.0+cpu"
# The driver tests install no framework (the lock's torch would come from PyTorch's index, which
# the test hosts cannot reach): the roles' own switches, as a user leaving the venv alone would set.
NO_FRAMEWORKS = {"frameworks_enabled": False, "verify_frameworks": {}, "python_env_enabled": False}
MOK = "/root/provision-mok"  # the distro build's MOK pair, made on the host
PLAN_ROLES = ("nvidia_driver", "fabric_manager", "cuda_toolkit", "cudnn", "container_toolkit", "dcgm")


def _cuda_repo(url: str, key_url: str, fingerprint: str) -> dict[str, Any]:
    """The plan's `cuda` repository pointed at a stand-in, for every role (<role>_repositories)."""
    repo = {"name": "cuda", "url": url, "key_url": key_url, "key_fingerprint": fingerprint}
    return {f"{role}_repositories": [repo] for role in PLAN_ROLES}


# What `provision plan` picks today for an H100 host on Debian 12 and 13 (R620, the newest LTSB,
# at its newest release): the stand-in carries it, so the default plan itself is what is installed.
# A knowledge update that moves the default fails the tests' first assert: add the new release here.
DEFAULT_RELEASE = "620.70.06"
# The releases the stand-in NVIDIA repository carries, each with the plans' packages at its version:
# 570 and two of 575 (every name with the branch), 580 (Fabric Manager without it), 595 and the
# default (from 590 the driver's names carry no branch; the pinning packages pin them).
STANDIN_RELEASES = ("570.124.06", "575.51.03", "575.57.08", "580.95.05", "595.45.04", DEFAULT_RELEASE)
TOOLKIT: dict[str, Any] = {"cuda": ("12.8", "12.8.93"), "cudnn": "9.10.2.21"}


def _distro_kernel_and_driver(hostset: harness.HostSet, host: harness.TestHost) -> tuple[str, str]:
    """The kernel linux-headers-amd64 brings on the host's release, and the version of the
    release's non-free nvidia-driver on the mirror. Debian's point releases move the driver's
    version (the knowledge data may lag behind the mirror): the lock pins what the mirror has,
    as `provision plan --driver <version>` would."""
    kernel = rh.ssh(hostset, host, "apt-cache depends linux-headers-amd64 | sed -n 's/.*Depends: linux-headers-//p'")
    rh.ssh(
        hostset,
        host,
        "cp /etc/apt/sources.list /tmp/sources.keep; sed -i 's/ main$/ main non-free non-free-firmware/' "
        "/etc/apt/sources.list; apt-get update -qq",
    )
    candidate = rh.ssh(hostset, host, "apt-cache policy nvidia-driver | sed -n 's/ *Candidate: //p'").strip()
    rh.ssh(hostset, host, "cp /tmp/sources.keep /etc/apt/sources.list; apt-get update -qq")  # the role adds non-free
    return kernel.split()[0], candidate.split("-")[0]


def _in_background(
    hostset: harness.HostSet,
    host: harness.TestHost,
    group: dict[str, Any],
    tmp: Path,
    overrides: dict[str, Any],
    **facts: str,
) -> Iterator[dict[str, Any]]:
    """A module fixture's body: the first run starts at once, the test waits for it (``proc``)."""
    proc = rh.start(rh.render(tmp / "run1", hostset, host, group, overrides=overrides))
    started = time.monotonic()
    yield {"hostset": hostset, "host": host, "group": group, "tmp": tmp, "overrides": overrides, **facts} | {
        "proc": proc,
        "started": started,
    }
    if proc.poll() is None:
        proc.kill()


@pytest.fixture(scope="module")
def distro_run(testhosts: harness.HostSet, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Starts the `distro` install on host 1 at once; the test that needs it waits for it.

    Debian's nvidia-driver from non-free with DKMS building the module against the kernel
    linux-headers-amd64 brings (the test hosts run the machine's kernel, whose headers Debian does
    not carry, so the lock's kernel is that one), and Debian's nvidia-cuda-toolkit.
    """
    host = testhosts.hosts[0]
    kernel, version = _distro_kernel_and_driver(testhosts, host)
    group = rh.lock_group(
        "debian_distro",
        [host.name],
        gpu="L4",
        gpu_count=1,
        os="debian-12",
        install_method="distro",
        cuda_toolkit="11.8",
        frameworks=[],
    )
    group["stack"]["driver"].update(version=version, branch=version.split(".")[0])
    tmp = tmp_path_factory.mktemp("distro")
    # a MOK pair made here: the DKMS-built module must carry its signature (Secure Boot signing; no
    # Secure Boot firmware here, so what is checked is the signature, not a load)
    rh.ssh(
        testhosts,
        host,
        f"mkdir -p {MOK} && openssl req -new -x509 -nodes -days 30 -subj '/CN=provision test MOK/' "
        f"-newkey rsa:2048 -keyout {MOK}/MOK.priv -outform DER -out {MOK}/MOK.der 2>/dev/null",
    )
    overrides = {
        "nvidia_driver_kernel": kernel,
        "preflight_kernel": kernel,
        "nvidia_driver_mok_key": f"{MOK}/MOK.priv",
        "nvidia_driver_mok_cert": f"{MOK}/MOK.der",
        **NO_FRAMEWORKS,
    }
    yield from _in_background(testhosts, host, group, tmp, overrides, kernel=kernel, version=version)


def _standin_repo(root: Path, distro: str, releases: tuple[str, ...]) -> sr.Repo:
    """The stand-in of NVIDIA's ``distro`` repository, generated from the plans of ``releases`` (each
    with Fabric Manager, the CUDA toolkit and cuDNN), in NVIDIA's layout under ``root/served``
    with a throwaway key named like the real one (8793F200.pub on debian13, else 3bf863cc.pub)."""
    plans = [sp.apt_plan(distro, v, fabric_manager=True, **TOOLKIT) for v in releases]
    key_file = sr.KEY_FILES.get(distro, sr.APT_KEY_FILE)
    folder = sr.repo_folder(root / "served", distro)
    return sr.build_repo(folder, sr.repository_debs(plans), key_file=key_file, scratch=root)


def _served(url: str, repo: sr.Repo) -> str:
    """The repository's URL under the server that serves ``root/served``."""
    return f"{url}/{repo.path.relative_to(repo.path.parents[4]).as_posix()}"


@pytest.fixture(scope="module")
def standin(testhosts: harness.HostSet, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The stand-in NVIDIA debian12 repository (see standin_repo) served on the bridge for host 2."""
    host = testhosts.hosts[1]
    root = tmp_path_factory.mktemp("standin")
    repo = _standin_repo(root, "debian12", STANDIN_RELEASES)
    rh.reach_bridge_directly(testhosts, host)
    # the stand-in kernel's headers are installed (as a real kernel's would be)
    rh.ssh(testhosts, host, f"mkdir -p /lib/modules/{sr.STANDIN_KERNEL}/build")
    with sr.serve(root / "served", f"{testhosts.net}.1") as server:
        url = _served(server, repo)
        yield {
            "host": host,
            "url": url,
            "repo": repo,
            "overrides": {
                **_cuda_repo(url, f"{url}/{sr.APT_KEY_FILE}", repo.fingerprint),
                "nvidia_driver_kernel": sr.STANDIN_KERNEL,
                "preflight_kernel": sr.STANDIN_KERNEL,
                **NO_FRAMEWORKS,
            },
        }
    rh.remove_standin(testhosts, host, sr.STANDIN_KERNEL)


# --- preflight: refused before any change, one clear line ---------------------------------------


def _distro_group(host: harness.TestHost) -> dict[str, Any]:
    return rh.lock_group(
        "refused", [host.name], gpu="L4", gpu_count=1, os="debian-12", install_method="distro", frameworks=[]
    )


@pytest.mark.parametrize("case", ["unsupported_os", "secure_boot", "no_headers", "disk", "package_lock"])
def test_preflight_refuses_before_any_change(
    distro_run: dict[str, Any], testhosts: harness.HostSet, tmp_path: Path, case: str
) -> None:
    host = testhosts.hosts[1]
    group = _distro_group(host)
    overrides: dict[str, Any] = dict(NO_FRAMEWORKS)
    expected = ""
    restore = ""
    if case == "unsupported_os":
        # the host claims Debian 11, a release the roles do not support
        rh.ssh(
            testhosts,
            host,
            "cp /etc/os-release /tmp/os-release.keep; cp /etc/debian_version /tmp/dv.keep; "
            'sed -i \'s/VERSION_ID="12"/VERSION_ID="11"/; s/bookworm/bullseye/\' /usr/lib/os-release; '
            "echo 11.9 > /etc/debian_version",
        )
        restore = "cp /tmp/os-release.keep /usr/lib/os-release; cp /tmp/dv.keep /etc/debian_version"
        expected = "preflight: debian-11 is not supported"
    elif case == "secure_boot":
        # STAND-IN EFI variable: attributes (4 bytes) + 1 = Secure Boot on; no MOK pair configured
        rh.ssh(
            testhosts,
            host,
            "mkdir -p /tmp/efivars && printf '\\006\\000\\000\\000\\001' > "
            "/tmp/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c",
        )
        overrides["preflight_efivars_dir"] = "/tmp/efivars"
        expected = "preflight: Secure Boot is on and the NVIDIA module would be built by DKMS unsigned"
    elif case == "no_headers":
        # the running kernel is the machine's own, whose headers no Debian mirror carries
        expected = "preflight: no kernel headers for kernel"
    elif case == "disk":
        overrides["preflight_min_free_gib"] = 1000000
        expected = "GiB needed; free some space or grow the disk"
    else:
        # another process (as unattended-upgrades would) holds dpkg's lock for longer than the wait;
        # a CPU-only stack, so that no driver check comes first; held up to 600 s, ended by the restore
        # (60 s ran out on a loaded machine before the play reached the lock check)
        group = rh.lock_group("refused", [host.name], os="debian-12", frameworks=[TORCH_CPU])
        rh.ssh(
            testhosts,
            host,
            "nohup python3 -c \"import fcntl, time; f = open('/var/lib/dpkg/lock-frontend', 'w'); "
            'fcntl.lockf(f, fcntl.LOCK_EX); time.sleep(600)" >/dev/null 2>&1 & echo $! > /tmp/lock-holder.pid; sleep 1',
        )
        restore = "kill $(cat /tmp/lock-holder.pid)"
        overrides["preflight_package_lock_timeout"] = 4
        expected = "preflight: the package manager lock /var/lib/dpkg/lock-frontend is still held after 4s"
    before = rh.host_snapshot(testhosts, host)
    try:
        outcome = rh.apply(rh.render(tmp_path / "run", testhosts, host, group, overrides=overrides), host.name)
    finally:
        if restore:
            rh.ssh(testhosts, host, restore)
    assert outcome.rc != 0 and outcome.failed == 1 and outcome.changed == 0, outcome.output[-2000:]
    [line] = outcome.error_lines()
    assert expected in line and "\n" not in line, line
    assert rh.host_snapshot(testhosts, host) == before


# --- frameworks: the CPU torch wheel from a local wheel folder ------------------------------------


def test_frameworks_install_cpu_torch_from_find_links_and_converge(
    distro_run: dict[str, Any], testhosts: harness.HostSet, wheelhouse: Path, tmp_path: Path
) -> None:
    host = testhosts.hosts[1]
    group = rh.lock_group("cpu", [host.name], os="debian-12", frameworks=[TORCH_CPU])
    assert group["stack"]["driver"] is None
    # pip explicitly: tests/integration/test_installer.py installs the same closure with uv
    install = InstallSettings(
        venv="/opt/provision/venv", pip=PipSettings(find_links=(str(wheelhouse),)), installer="pip"
    )
    # the lock's wheel closure, resolved as `plan` does from the source the host installs from
    locked = LockGroup.from_json(group)
    [locked] = lock_closures([locked], install, {"frameworks_no_index": True}, cache=tmp_path / "cache")
    group["python_packages"] = locked.to_json()["python_packages"]
    assert {"torch", "filelock", "sympy"} <= {p["name"].lower() for p in group["python_packages"]}
    first = rh.apply(
        rh.render(tmp_path / "run1", testhosts, host, group, install=install, overrides={"frameworks_no_index": True}),
        host.name,
    )
    assert first.rc == 0 and first.changed > 0, first.output[-3000:]
    out = rh.ssh(
        testhosts,
        host,
        "/opt/provision/venv/bin/python -c 'import torch; print(torch.__version__, torch.ones(3).sum().item())'",
    )
    assert out.split() == ["2.13.0+cpu", "3.0"]
    assert '"torch"' in rh.ssh(testhosts, host, "cat /var/lib/provision/stack.json")
    # exactly the lock's closure, installed by hash with no resolution of the host's own
    assert rh.installed_closure(testhosts, host) == rh.locked_closure(group["python_packages"])
    second = rh.apply(
        rh.render(tmp_path / "run2", testhosts, host, group, install=install, overrides={"frameworks_no_index": True}),
        host.name,
    )
    assert second.rc == 0 and second.changed == 0, second.output[-3000:]


# --- nvidia-repo: exact pins, holds, Fabric Manager == driver, branch change, idempotence ---------


def _installed(testhosts: harness.HostSet, host: harness.TestHost) -> dict[str, str]:
    out = rh.ssh(testhosts, host, "dpkg-query -W -f '${Package} ${Version} ${Status}\\n' | awk '$5 == \"installed\"'")
    return {line.split()[0]: line.split()[1] for line in out.splitlines()}


def test_nvidia_repo_refuses_a_key_without_the_pinned_fingerprint(
    distro_run: dict[str, Any], standin: dict[str, Any], testhosts: harness.HostSet, tmp_path: Path
) -> None:
    host = standin["host"]
    group = rh.hgx_group([host.name], "570.124.06")
    overrides = {**standin["overrides"], **_cuda_repo(standin["url"], f"{standin['url']}/{sr.APT_KEY_FILE}", "0" * 40)}
    outcome = rh.apply(rh.render(tmp_path / "run", testhosts, host, group, overrides=overrides), host.name)
    assert outcome.rc != 0
    [line] = outcome.error_lines()
    assert "does not have the pinned fingerprint" in line


# --- the repository key: the keyring trusts the pinned key and no other ---------------------------


@pytest.fixture(scope="module")
def rogue(
    standin: dict[str, Any], testhosts: harness.HostSet, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    """A second stand-in repository with the same package names, signed by a second throwaway key, and
    a key file that carries the pinned key AND that second key (as a tampered mirror would serve)."""
    root = tmp_path_factory.mktemp("rogue")
    repo = _standin_repo(root, "debian12", ("570.124.06",))  # all the driver install needs
    both = standin["repo"].key.read_text() + repo.key.read_text()
    for served in (repo.path, standin["repo"].path):
        (served / "pinned-and-other.asc").write_text(both)
    with sr.serve(root / "served", f"{testhosts.net}.1") as server:
        yield {"url": _served(server, repo), "repo": repo}


def _keyring_primaries(testhosts: harness.HostSet, host: harness.TestHost, path: str) -> list[str]:
    """The primary keys of a keyring on the host, as gpg reads them (apt trusts every one)."""
    lines = rh.ssh(testhosts, host, f"gpg --batch --with-colons --show-keys {path}").splitlines()
    return [lines[i + 1].split(":")[9] for i, line in enumerate(lines) if line.startswith("pub:")]


def _repo_files(testhosts: harness.HostSet, host: harness.TestHost) -> str:
    return rh.ssh(
        testhosts,
        host,
        "sha256sum /usr/share/keyrings/provision-cuda.asc "
        "/etc/apt/sources.list.d/provision-cuda.list 2>&1; ls /usr/share/keyrings",
        check=False,
    )


def test_nvidia_repo_refuses_a_repository_signed_by_another_key_in_the_key_file(
    standin: dict[str, Any], rogue: dict[str, Any], testhosts: harness.HostSet, tmp_path: Path
) -> None:
    """The key file has the pinned key plus a second one, and the repository is signed by the second:
    the pinned fingerprint IS in the file (the old check passed and installed the whole file, so apt
    trusted the second key and installed its packages). Now the play fails with one line, installs
    nothing, and leaves no keyring or sources entry trusting the second key."""
    host = standin["host"]
    group = rh.hgx_group([host.name], "570.124.06")
    overrides = {
        **standin["overrides"],
        **_cuda_repo(rogue["url"], f"{rogue['url']}/pinned-and-other.asc", standin["repo"].fingerprint),
    }
    assert standin["repo"].fingerprint != rogue["repo"].fingerprint
    before, files = rh.host_snapshot(testhosts, host), _repo_files(testhosts, host)
    outcome = rh.apply(rh.render(tmp_path / "run", testhosts, host, group, overrides=overrides), host.name)
    assert outcome.rc != 0 and outcome.failed == 1, outcome.output[-3000:]
    [line] = outcome.error_lines()
    assert (
        f"nvidia_driver: the repository {rogue['url']}/ / cannot be used with only the pinned key "
        f"{standin['repo'].fingerprint} trusted"
    ) in line, line
    assert "NO_PUBKEY" in line and line.endswith("check the mirror and the key"), line
    assert rh.host_snapshot(testhosts, host) == before  # no package, no sources entry, no pin
    assert _repo_files(testhosts, host) == files
    assert rogue["url"] not in rh.ssh(testhosts, host, "cat /etc/apt/sources.list.d/*.list 2>/dev/null", check=False)
    leftovers = rh.ssh(
        testhosts, host, "ls -d /tmp/provision-repo-* /tmp/ansible.*provision-repo-* 2>/dev/null", check=False
    )
    assert leftovers.strip() == ""  # the scratch directory went with the refusal


def test_nvidia_repo_installs_with_a_keyring_that_holds_only_the_pinned_key(
    standin: dict[str, Any], rogue: dict[str, Any], testhosts: harness.HostSet, tmp_path: Path
) -> None:
    """The normal case still installs, from a key file that also carries a second key: the keyring
    signed-by names holds exactly the pinned key (with the old tasks it held both)."""
    host = standin["host"]
    # a release below the newest of its branch: this test is about the keyring
    group = rh.hgx_group([host.name], "575.51.03")
    overrides = {
        **standin["overrides"],
        **_cuda_repo(standin["url"], f"{standin['url']}/pinned-and-other.asc", standin["repo"].fingerprint),
    }
    outcome = rh.apply(rh.render(tmp_path / "run", testhosts, host, group, overrides=overrides), host.name)
    assert outcome.rc == 0, outcome.output[-3000:]
    assert _installed(testhosts, host)["nvidia-open-575"] == "575.51.03-1"
    sources = rh.ssh(testhosts, host, "cat /etc/apt/sources.list.d/provision-cuda.list")
    assert f"deb [signed-by=/usr/share/keyrings/provision-cuda.asc] {standin['url']}/ /" in sources
    assert _keyring_primaries(testhosts, host, "/usr/share/keyrings/provision-cuda.asc") == [
        standin["repo"].fingerprint
    ]
    again = rh.apply(rh.render(tmp_path / "run2", testhosts, host, group, overrides=overrides), host.name)
    assert again.rc == 0 and again.changed == 0, again.output[-3000:]
    assert set(again.package_installs()) == {"skipping"}, again.output[-3000:]  # apt not even asked


# --- distro: Debian's nvidia-driver with DKMS, Debian's CUDA toolkit ------------------------------


@pytest.mark.slow
def _hex(serial: str) -> str:
    """A certificate serial as openssl prints it, or a sig_key as modinfo does, in one form."""
    return serial.strip().replace(":", "").upper().lstrip("0")


def test_distro_driver_builds_with_dkms_then_converges(distro_run: dict[str, Any], testhosts: harness.HostSet) -> None:
    host, kernel, version = distro_run["host"], distro_run["kernel"], distro_run["version"]
    first = rh.finish(distro_run["proc"], host.name)
    took = time.monotonic() - distro_run["started"]
    print(f"\ndistro install (driver {version} with DKMS for {kernel} + nvidia-cuda-toolkit): {took:.0f} s")
    assert first.rc == 0 and first.changed > 0, first.output[-4000:]
    module = (
        "nvidia-current-open"
        if distro_run["group"]["stack"]["driver"]["kernel_modules"] == "open"
        else "nvidia-current"
    )
    assert rh.ssh(testhosts, host, f"modinfo -k {kernel} -F version {module}").strip() == version
    # signed the way Debian 12's dkms (3.0.x) signs: framework.conf.d names the MOK pair
    assert "dkms-3.0" in rh.ssh(testhosts, host, "dkms --version")
    conf = rh.ssh(testhosts, host, "cat /etc/dkms/framework.conf.d/provision-mok.conf")
    assert f"mok_signing_key={MOK}/MOK.priv" in conf
    assert rh.ssh(testhosts, host, f"modinfo -k {kernel} -F signer {module}").strip() == "provision test MOK"
    serial = rh.ssh(testhosts, host, f"openssl x509 -inform DER -in {MOK}/MOK.der -noout -serial").split("=", 1)[1]
    assert _hex(rh.ssh(testhosts, host, f"modinfo -k {kernel} -F sig_key {module}")) == _hex(serial)
    assert "release 11.8" in rh.ssh(testhosts, host, "nvcc --version")
    assert {"nvidia-driver", "nvidia-cuda-toolkit"} <= set(rh.ssh(testhosts, host, "apt-mark showhold").split())
    assert "blacklist nouveau" in rh.ssh(testhosts, host, "cat /etc/modprobe.d/provision-blacklist-nouveau.conf")
    # the kernel-update guard: fine for the kernel DKMS built for, loud for one without a module
    rh.ssh(testhosts, host, f"/etc/kernel/postinst.d/zz-provision-nvidia {kernel}")
    guard = subprocess.run(
        [
            "ssh",
            "-F",
            str(testhosts.ssh_config),
            host.name,
            "/etc/kernel/postinst.d/zz-provision-nvidia 6.1.0-999-amd64",
        ],
        capture_output=True,
        text=True,
    )
    assert guard.returncode == 1 and "no NVIDIA kernel module for kernel 6.1.0-999-amd64" in guard.stderr

    started = time.monotonic()
    second = rh.apply(
        rh.render(distro_run["tmp"] / "run2", testhosts, host, distro_run["group"], overrides=distro_run["overrides"]),
        host.name,
    )
    print(f"second run (converged): {time.monotonic() - started:.0f} s")
    assert second.rc == 0 and second.changed == 0, second.output[-4000:]
    assert set(second.package_installs()) == {"skipping"}, second.output[-4000:]  # apt not even asked


# --- the default plan (the newest LTSB, DEFAULT_RELEASE) from the stand-in, through the contract's plan


def _contract_group(
    standin: dict[str, Any], host: harness.TestHost, os_id: str, driver: str, **request: Any
) -> dict[str, Any]:
    """A lock group from the resolver (its package plan from the packaging table), its NVIDIA
    repository pointed at the stand-in (what a mirror setting does)."""
    group = rh.hgx_group([host.name], driver, os=os_id, **request)
    key = standin["repo"].key.name
    group["packages"] = sp.standin_repository(group["packages"], standin["url"], key, standin["repo"].fingerprint)
    return group


def _contract_run(standin: dict[str, Any], testhosts: harness.HostSet, run: Path, group: dict[str, Any]) -> rh.Outcome:
    host = standin["host"]
    # the group's own plan names the stand-in (standin_plans.standin_repository): no repository override
    overrides = {k: v for k, v in standin["overrides"].items() if not k.endswith("_repositories")}
    return rh.apply(rh.render(run, testhosts, host, group, overrides=overrides), host.name)


@pytest.mark.slow
def test_default_plan_installs_holds_converges_and_changes_branch_from_580(
    standin: dict[str, Any], testhosts: harness.HostSet, tmp_path: Path
) -> None:
    """The default plan (DEFAULT_RELEASE, the newest release of the newest LTSB) against the stand-in
    NVIDIA debian12 repository, after a 580 plan: the exact-version pinning package, the
    unversioned nvidia-open and nvidia-fabricmanager, held; a second run changes nothing; and back
    to 580, every part with it."""
    host = standin["host"]
    default = rh.lock_group(
        "hgx", [host.name], gpu="H100-SXM", gpu_count=8, os="debian-12", install_method="nvidia-repo", frameworks=[]
    )
    assert default["stack"]["driver"]["version"] == DEFAULT_RELEASE, "the default moved: update DEFAULT_RELEASE"
    old = _contract_group(standin, host, "debian-12", "580.95.05")
    first = _contract_run(standin, testhosts, tmp_path / "r580", old)
    assert first.rc == 0, first.output[-3000:]
    assert _installed(testhosts, host)["nvidia-open-580"] == "580.95.05-1"

    new = _contract_group(standin, host, "debian-12", DEFAULT_RELEASE, cuda_toolkit="12.8", cudnn="9.10.2.21")
    upgrade = _contract_run(standin, testhosts, tmp_path / "r620", new)
    assert upgrade.rc == 0, upgrade.output[-3000:]
    have = _installed(testhosts, host)
    assert "nvidia-open-580" not in have  # the 580 branch metapackage went with the branch change
    for name in ("nvidia-open", "nvidia-kernel-open-dkms", "libnvidia-compute", "nvidia-fabricmanager"):
        assert have[name] == f"{DEFAULT_RELEASE}-1", (name, have.get(name))
    assert have[f"nvidia-driver-pinning-{DEFAULT_RELEASE}"] == f"{DEFAULT_RELEASE}-1"
    assert set(rh.ssh(testhosts, host, "apt-mark showhold").split()) == set(new["packages"]["holds"])
    assert rh.ssh(testhosts, host, f"modinfo -k {sr.STANDIN_KERNEL} -F version nvidia").strip() == DEFAULT_RELEASE
    assert rh.ssh(testhosts, host, "systemctl is-active nvidia-fabricmanager").strip() == "active"
    assert have["cuda-toolkit-12-8"] == "12.8.93-1" and "release 12.8" in rh.ssh(
        testhosts, host, "bash -lc 'nvcc --version'"
    )
    # other releases are in the repository (595, below the default; the pins and holds keep them out), yet
    # nothing would move: a dist-upgrade simulation keeps every part
    sim = rh.ssh(testhosts, host, "apt-get -s -o Debug::NoLocking=1 dist-upgrade")
    assert "Inst " not in sim, sim

    again = _contract_run(standin, testhosts, tmp_path / "r620b", new)
    assert again.rc == 0 and again.changed == 0, again.output[-3000:]
    assert set(again.package_installs()) == {"skipping"}, again.output[-3000:]  # apt not even asked

    # and back to 580: NVIDIA's metapackages depend with >= (standin_repo.RULES), so a plan that
    # installs only nvidia-open-580 at its version would leave the newer module and libraries in place
    back = _contract_run(standin, testhosts, tmp_path / "r580b", old)
    assert back.rc == 0, back.output[-3000:]
    have = _installed(testhosts, host)
    for name in ("nvidia-open-580", "nvidia-kernel-open-dkms", "libnvidia-compute", "nvidia-fabricmanager"):
        assert have[name] == "580.95.05-1", (name, have.get(name))
    assert rh.ssh(testhosts, host, f"modinfo -k {sr.STANDIN_KERNEL} -F version nvidia").strip() == "580.95.05"


# --- Debian 13: NVIDIA's debian13 layout and key ---------------------------------------------------
# Debian 13's own driver is not run here: trixie's nvidia-open-kernel-dkms 550.163.01-2 (the only
# version in trixie, -updates and -security on 2026-12-01) does not build for trixie's kernel
# 6.12.117 (nv-pci.c: too few arguments to pci_resize_resource), nor does trixie-backports'
# 550.163.01-4~bpo13+1 (the same error, for 6.12.117 and 6.12.118), so the knowledge offers
# Debian 13 no distro driver (drivers.yaml) and `plan --install-method distro` refuses it.


@pytest.fixture(scope="module")
def debian13(request: pytest.FixtureRequest) -> dict[str, Any]:
    """The Debian 13 host (a real trixie rootfs); where none can be made (and none is required), skip."""
    hostset: harness.HostSet = request.getfixturevalue("testhosts_debian13")
    return {"hostset": hostset, "host": hostset.hosts[0]}


@pytest.mark.slow
def test_debian13_nvidia_repo_default_plan_from_the_debian13_layout_then_converges(
    debian13: dict[str, Any], tmp_path: Path
) -> None:
    """The default plan on the Debian 13 host against a stand-in of NVIDIA's debian13 repository
    (compute/cuda/repos/debian13/x86_64, its key file named 8793F200.pub: a STAND-IN key in place
    of NVIDIA's 8793F200, whose fingerprint the plan pins instead of the real one)."""
    hostset, host = debian13["hostset"], debian13["host"]
    root = tmp_path / "standin13"
    repo = _standin_repo(root, "debian13", (DEFAULT_RELEASE,))
    assert repo.key.name == "8793F200.pub"
    rh.reach_bridge_directly(hostset, host)
    rh.ssh(hostset, host, f"mkdir -p /lib/modules/{sr.STANDIN_KERNEL}/build")
    try:
        with sr.serve(root / "served", f"{hostset.net}.1") as server:
            url = _served(server, repo)
            assert url.endswith("/compute/cuda/repos/debian13/x86_64")
            overrides = {
                "nvidia_driver_kernel": sr.STANDIN_KERNEL,
                "preflight_kernel": sr.STANDIN_KERNEL,
                **NO_FRAMEWORKS,
            }
            standin = {"host": host, "url": url, "repo": repo, "overrides": overrides}
            group = _contract_group(standin, host, "debian-13", DEFAULT_RELEASE)
            first = _contract_run(standin, hostset, tmp_path / "run1", group)
            assert first.rc == 0, first.output[-3000:]
            have = _installed(hostset, host)
            assert have["nvidia-open"] == have[f"nvidia-driver-pinning-{DEFAULT_RELEASE}"] == f"{DEFAULT_RELEASE}-1"
            sources = rh.ssh(hostset, host, "cat /etc/apt/sources.list.d/provision-cuda.list")
            assert f"{url}/ /" in sources
            again = _contract_run(standin, hostset, tmp_path / "run2", group)
            assert again.rc == 0 and again.changed == 0, again.output[-3000:]
            assert set(again.package_installs()) == {"skipping"}, again.output[-3000:]
    finally:
        rh.remove_standin(hostset, host, sr.STANDIN_KERNEL)
