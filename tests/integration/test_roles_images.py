"""What real images bring along, on Debian 12 SSH test hosts: an NVIDIA repository entry already
there (Secure Boot signing of the DKMS-built driver is checked on the distro build of
test_roles.py: one DKMS build serves both).

- Host 2: the image carries an entry for the repository's URL with another `signed-by` (as
  cuda-keyring, DLAMI and cloud GPU images do). STAND-IN: the repository is standin_repo's signed
  flat repository on the bridge (NVIDIA's cannot be reached); the conflict is apt's own, shown
  first by adding a second entry by hand. signed_repo (applied alone, as nvidia_driver and
  container_toolkit include it) must leave apt working, and converge.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from tests.hosts import harness
from tests.integration import roles_harness as rh
from tests.integration import standin_plans as sp
from tests.integration import standin_repo as sr

NO_FRAMEWORKS = {"frameworks_enabled": False, "verify_frameworks": {}, "python_env_enabled": False}


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
    testhosts: harness.HostSet, tmp_path: Path
) -> None:
    host = testhosts.hosts[1]
    repo = sr.build_repo(tmp_path / "repo", sr.repository_debs([sp.apt_plan("debian12", "580.95.05")]))
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
