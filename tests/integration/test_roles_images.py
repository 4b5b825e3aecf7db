"""What real images bring along, on Debian 12 SSH test hosts: an NVIDIA repository entry already
there, and Secure Boot signing of the DKMS-built driver.

- Host 2: the image carries an entry for the repository's URL with another `signed-by` (as
  cuda-keyring, DLAMI and cloud GPU images do). STAND-IN: the repository is standin_repo's signed
  flat repository on the bridge (NVIDIA's cannot be reached); the conflict is apt's own, shown
  first by adding a second entry by hand. signed_repo (applied alone, as nvidia_driver and
  container_toolkit include it) must leave apt working, and converge.
- Host 1: REAL: Debian's nvidia-driver from non-free built by Debian's dkms 3.0.10 against the
  kernel linux-headers-amd64 brings (the test hosts run the machine's kernel, whose headers Debian
  does not carry), with a MOK pair made here: the module must carry the MOK's signature. No
  Secure Boot firmware here: what is checked is the signature, not a load.
"""

from __future__ import annotations

import functools
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.hosts import harness
from tests.integration import roles_harness as rh
from tests.integration import standin_repo as sr

NO_FRAMEWORKS = {"frameworks_enabled": False, "verify_frameworks": {}, "python_env_enabled": False}
MOK = "/root/provision-mok"


@pytest.fixture(scope="module")
def signed_distro_run(testhosts: harness.HostSet, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Starts the distro driver install with a MOK pair on host 1 at once; its test waits for it."""
    host = testhosts.hosts[0]
    kernel = rh.ssh(testhosts, host, "apt-cache depends linux-headers-amd64 | sed -n 's/.*Depends: linux-headers-//p'")
    kernel = kernel.split()[0]
    # the lock pins what the mirror has (Debian's point releases move the driver's version); the
    # role adds non-free itself, so it is taken away again after the look
    version = rh.ssh(
        testhosts,
        host,
        "sed -i 's/ main$/ main non-free/' /etc/apt/sources.list; apt-get update -qq; "
        "apt-cache policy nvidia-driver | sed -n 's/ *Candidate: //p'; "
        "sed -i 's/ main non-free$/ main/' /etc/apt/sources.list; apt-get update -qq",
    ).strip()
    version = version.split("-")[0]
    rh.ssh(
        testhosts,
        host,
        f"mkdir -p {MOK} && openssl req -new -x509 -nodes -days 30 -subj '/CN=provision test MOK/' "
        f"-newkey rsa:2048 -keyout {MOK}/MOK.priv -outform DER -out {MOK}/MOK.der 2>/dev/null",
    )
    group = rh.lock_group(
        "signed", [host.name], gpu="L4", gpu_count=1, os="debian-12", install_method="distro", frameworks=[]
    )
    group["stack"]["driver"].update(version=version, branch=version.split(".")[0])
    group["stack"]["cuda_toolkit"] = None
    overrides = {
        "nvidia_driver_kernel": kernel,
        "preflight_kernel": kernel,
        "nvidia_driver_mok_key": f"{MOK}/MOK.priv",
        "nvidia_driver_mok_cert": f"{MOK}/MOK.der",
        **NO_FRAMEWORKS,
    }
    tmp = tmp_path_factory.mktemp("signed")
    started = time.monotonic()
    proc = rh.start(rh.render(tmp / "run1", testhosts, host, group, overrides=overrides))
    run2 = functools.partial(rh.render, tmp / "run2", testhosts, host, group, overrides=overrides)
    # Debian renames the module: nvidia-current (proprietary), nvidia-current-open
    module = "nvidia-current-open" if group["stack"]["driver"]["kernel_modules"] == "open" else "nvidia-current"
    yield {
        "host": host,
        "kernel": kernel,
        "version": version,
        "module": module,
        "proc": proc,
        "started": started,
        "run2": run2,
    }
    if proc.poll() is None:
        proc.kill()


def _signed_repo_play(run: Path, testhosts: harness.HostSet, host: harness.TestHost, repo: sr.Repo, url: str) -> Path:
    """signed_repo applied alone, with the variables nvidia_driver's nvidia-repo path gives it."""
    run.mkdir(parents=True, exist_ok=True)
    (run / "inventory.yml").write_text(yaml.safe_dump({"all": {"hosts": {host.name: rh.connection(testhosts, host)}}}))
    play = [
        {
            "hosts": "all",
            "gather_facts": True,
            "tasks": [
                {
                    "name": "Add the stand-in repository",
                    "ansible.builtin.include_role": {"name": "signed_repo"},
                    "vars": {
                        "signed_repo_label": "nvidia_driver",
                        "signed_repo_name": "provision-cuda",
                        "signed_repo_description": "stand-in NVIDIA CUDA repository",
                        "signed_repo_key_url": f"{url}/standin-key.asc",
                        "signed_repo_key_fingerprint": repo.fingerprint,
                        "signed_repo_apt_source": f"{url}/ /",
                    },
                }
            ],
        }
    ]
    (run / "site.yml").write_text(yaml.safe_dump(play, sort_keys=False))
    (run / "ansible.cfg").write_text(
        f"[defaults]\ninventory = inventory.yml\nroles_path = {rh.REPO / 'playbooks' / 'roles'}\n"
    )
    return run


def test_an_image_entry_for_the_repository_with_another_signed_by_is_replaced(
    signed_distro_run: dict[str, Any], testhosts: harness.HostSet, tmp_path: Path
) -> None:
    host = testhosts.hosts[1]
    repo = sr.build_repo(tmp_path / "repo", sr.driver_debs("580.82.07"))
    rh.reach_bridge_directly(testhosts, host)
    image_list = "/etc/apt/sources.list.d/cuda-debian12-x86_64.list"
    with sr.serve(repo.path, f"{testhosts.net}.1") as url:
        try:
            # the image's entry, as cuda-keyring writes it (its own keyring holds the same key;
            # armored, which apt's signed-by takes as .asc: the test hosts have no gpg)
            rh.ssh(
                testhosts,
                host,
                f"cat > /usr/share/keyrings/cuda-archive-keyring.asc <<'EOF'\n{repo.key.read_text()}EOF\n"
                f"echo 'deb [signed-by=/usr/share/keyrings/cuda-archive-keyring.asc] {url}/ /' > {image_list}; "
                "apt-get update -qq",
            )
            # apt's own conflict, reproduced: a second entry for the URL with another signed-by
            rh.ssh(
                testhosts,
                host,
                f"echo 'deb [signed-by=/usr/share/keyrings/other.asc] {url}/ /' > /etc/apt/sources.list.d/second.list",
            )
            clash = subprocess.run(
                ["ssh", "-F", str(testhosts.ssh_config), host.name, "apt-get update -qq"],
                capture_output=True,
                text=True,
            )
            assert clash.returncode != 0 and "Conflicting values set for option Signed-By" in clash.stderr
            rh.ssh(testhosts, host, "rm /etc/apt/sources.list.d/second.list")

            first = rh.apply(_signed_repo_play(tmp_path / "run1", testhosts, host, repo, url), host.name)
            assert first.rc == 0 and first.changed > 0, first.output[-3000:]
            update = subprocess.run(
                ["ssh", "-F", str(testhosts.ssh_config), host.name, "apt-get update"], capture_output=True, text=True
            )
            assert update.returncode == 0 and "Conflicting" not in update.stderr, update.stderr
            assert "nvidia-open-580" in rh.ssh(testhosts, host, "apt-cache policy nvidia-open-580")
            listing = rh.ssh(testhosts, host, f"cat {image_list}")
            assert listing.startswith("# provision (signed_repo provision-cuda) disabled: deb [signed-by="), listing
            backup = rh.ssh(testhosts, host, "cat /var/backups/provision-apt/cuda-debian12-x86_64.list.*")
            assert backup == f"deb [signed-by=/usr/share/keyrings/cuda-archive-keyring.asc] {url}/ /\n"

            second = rh.apply(_signed_repo_play(tmp_path / "run2", testhosts, host, repo, url), host.name)
            assert second.rc == 0 and second.changed == 0, second.output[-3000:]
        finally:
            rh.ssh(
                testhosts,
                host,
                f"rm -rf {image_list} /etc/apt/sources.list.d/provision-cuda.list /etc/apt/sources.list.d/second.list "
                "/usr/share/keyrings/cuda-archive-keyring.asc /usr/share/keyrings/provision-cuda.asc "
                "/var/backups/provision-apt /etc/apt/apt.conf.d/02direct-bridge; apt-get update -qq",
                check=False,
            )


def _hex(serial: str) -> str:
    return serial.strip().replace(":", "").upper().lstrip("0")


@pytest.mark.slow
def test_the_dkms_built_module_is_signed_by_the_mok(
    signed_distro_run: dict[str, Any], testhosts: harness.HostSet
) -> None:
    run = signed_distro_run
    host, kernel = run["host"], run["kernel"]
    try:  # two shared cores: the DKMS build of the whole driver takes a while
        first = rh.finish(run["proc"], host.name, timeout=3000)
    except subprocess.TimeoutExpired as timeout:
        out = timeout.output.decode() if isinstance(timeout.output, bytes) else str(timeout.output)
        pytest.fail(f"the install did not finish in {timeout.timeout} s; last output:\n{out[-3000:]}")
    print(
        f"\ndistro install with MOK signing (driver {run['version']}, {kernel}): {time.monotonic() - run['started']:.0f} s"
    )
    assert first.rc == 0 and first.changed > 0, first.output[-4000:]
    assert "dkms-3.0" in rh.ssh(testhosts, host, "dkms --version")
    assert f"mok_signing_key={MOK}/MOK.priv" in rh.ssh(
        testhosts, host, "cat /etc/dkms/framework.conf.d/provision-mok.conf"
    )
    module = run["module"]
    assert rh.ssh(testhosts, host, f"modinfo -k {kernel} -F signer {module}").strip() == "provision test MOK"
    serial = rh.ssh(testhosts, host, f"openssl x509 -inform DER -in {MOK}/MOK.der -noout -serial").split("=", 1)[1]
    assert _hex(rh.ssh(testhosts, host, f"modinfo -k {kernel} -F sig_key {module}")) == _hex(serial)

    second = rh.apply(run["run2"](), host.name)
    assert second.rc == 0 and second.changed == 0, second.output[-4000:]
