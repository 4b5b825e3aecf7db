"""Apply a rendered run dir to a test host with plain `ansible-playbook`, and read what happened.

The run dir is what `provision plan` writes (render.write_run_dir) from a lock group; the hosts'
connection variables point at the SSH test hosts with their real host keys.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from packaging.utils import canonicalize_name

from provision.ansible.rundir import write_run_dir
from provision.model.settings import InstallSettings
from provision.stack.lock import LockGroup, build_lock, dumps_lock
from provision.stack.lock import lock_group as resolved_group
from provision.stack.request import HostSpec, StackRequest
from provision.stack.resolve import resolve
from tests.hosts import harness

BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parents[2]
# No GPU on the test hosts: the role variables that stand a GPU-less host in for a GPU host (no GPU
# check, no module load, no nvidia-smi check; each documented in its role's defaults, true there).
# render() sets them, nothing else differs from a GPU host's run.
GPU_LESS = {
    "preflight_check_gpu": False,
    "nvidia_driver_load_module": False,
    "verify_check_driver": False,
}
_RECAP = re.compile(r"^(\S+)\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)


@dataclass
class Outcome:
    rc: int
    ok: int
    changed: int
    failed: int
    output: str

    def error_lines(self) -> list[str]:
        """The failure messages the play printed (`[ERROR]: Task failed: ...: <msg>`)."""
        return [line.split(": ", 2)[-1] for line in self.output.splitlines() if line.startswith("[ERROR]: Task failed")]

    def task_results(self, task: str) -> list[str]:
        """How each run of the task ``task`` (``role : name``) ended ("skipping", "ok", "changed"),
        from the play's output."""
        return [part.split("\n")[1].split(":")[0] for part in self.output.split(f"TASK [{task}]")[1:]]

    def package_installs(self) -> list[str]:
        """How each of the apt tasks a converged apply skips (apt not asked: dpkg shows what the
        plan installs installed) ended: package_plan's install, the driver's kernel headers."""
        return [
            *self.task_results("package_plan : Install the packages at exactly the plan's versions"),
            *self.task_results("nvidia_driver : Install the kernel headers for DKMS"),
        ]


def lock_group(name: str, hosts: list[str], **request: Any) -> dict[str, Any]:
    """A lock group from the real resolver; ``host`` keys go to HostSpec, the rest to the request."""
    host_keys = {k: request.pop(k) for k in ("gpu", "gpu_count", "os", "arch") if k in request}
    resolution = resolve(StackRequest.build(**request), HostSpec.describe(**host_keys))
    return resolved_group(name, hosts, resolution).to_json()


def hgx_group(hosts: list[str], driver: str, os: str = "debian-12", **request: Any) -> dict[str, Any]:
    """The role tests' NVIDIA-repository group: 8 x H100-SXM (an NVSwitch board, so Fabric Manager
    too) at exactly ``driver``, no frameworks (their wheels come from indexes the hosts cannot reach)."""
    return lock_group(
        "hgx",
        hosts,
        gpu="H100-SXM",
        gpu_count=8,
        os=os,
        driver=driver,
        install_method="nvidia-repo",
        frameworks=[],
        **request,
    )


def connection(hostset: harness.HostSet, host: harness.TestHost) -> dict[str, Any]:
    return {
        "ansible_host": host.address,
        "ansible_user": host.user,
        "ansible_ssh_private_key_file": str(hostset.key),
        "ansible_ssh_common_args": f"-o UserKnownHostsFile={hostset.known_hosts} -o StrictHostKeyChecking=yes",
        "ansible_python_interpreter": "/usr/bin/python3",
    }


def render(
    run: Path,
    hostset: harness.HostSet,
    host: harness.TestHost,
    group: Mapping[str, Any],
    *,
    install: InstallSettings | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Path:
    group = {**group, "hosts": [host.name]}
    lock = build_lock([LockGroup.from_json(group)])
    text = dumps_lock(lock)
    write_run_dir(
        run,
        lock,
        text,
        {host.name: connection(hostset, host)},
        install or InstallSettings(),
        overrides={**GPU_LESS, **(overrides or {})},
    )
    return run


def start(run: Path, *options: str) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "PATH": f"{BIN}:{os.environ['PATH']}",
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_FORCE_COLOR": "0",
        "ANSIBLE_SSH_CONTROL_PATH_DIR": str(run / ".cp"),
    }
    return subprocess.Popen(
        [str(BIN / "ansible-playbook"), "site.yml", *options],
        cwd=run,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def finish(proc: subprocess.Popen[str], host: str, timeout: float = 1200) -> Outcome:
    out, _ = proc.communicate(timeout=timeout)
    for m in _RECAP.finditer(out):
        if m.group(1) == host:
            return Outcome(proc.returncode, int(m.group(2)), int(m.group(3)), int(m.group(5)), out)
    return Outcome(proc.returncode, 0, 0, 0, out)


def apply(run: Path, host: str, *options: str) -> Outcome:
    return finish(start(run, *options), host)


def cpu_torch_config(
    folder: Path,
    hostset: harness.HostSet,
    wheelhouse: Path,
    *,
    venv: str | None = None,
    extra: str = "",
    install: str = "",
    stack: str = "",
) -> Path:
    """A provision.yaml for `up` on the test hosts: the CPU torch stack from the wheelhouse, no
    driver; ``venv`` in place of the default one, ``extra`` more top-level YAML, ``install`` and
    ``stack`` more of their settings (flow-style ``key: value, `` pairs)."""
    path = folder / "provision.yaml"
    where = (f"venv: {venv}, " if venv else "") + install
    path.write_text(
        f"stack: {{{stack}frameworks: ['{harness.TORCH_CPU}+cpu'], driver: none}}\n"
        f"install: {{{where}pip: {{find_links: ['{wheelhouse}']}}, apt: {{proxy: '{hostset.proxy}'}}}}\n"
        "verify: {allow_cpu: true}\n" + extra
    )
    return path


def unprovision(hostset: harness.HostSet, hosts: list[harness.TestHost]) -> None:
    """Leave hosts as fresh as the tests that come after expect them (they count changes)."""
    for h in hosts:
        ssh(hostset, h, "rm -rf /opt/provision /tmp/provision-verify.*")


def _python_env_packages() -> list[str]:
    """Every package the python_env role installs on the Debian 12 test hosts: the venv packages the
    plan renders for Python 3.11 and the role's own module packages (from its defaults)."""
    defaults = yaml.safe_load((REPO / "playbooks/roles/python_env/defaults/main.yml").read_text())
    return ["python3-venv", "python3.11-venv", *defaults["python_env_module_packages"]]


# What makes a host's apt fetch the packages the python_env role installs, as on a fresh host: the
# packages, what they pulled in (an earlier test's up may have left both: --autoremove), apt's cache.
# A package the role installs by name is marked manual, so --autoremove alone keeps it: CI once saw
# python3-packaging fetched by two of three hosts because an earlier up had left it on the third.
PURGE_PYTHON_ENV_PACKAGES = (
    f"apt-get purge -y -q --autoremove {' '.join(_python_env_packages())} >/dev/null; apt-get clean"
)


def ssh(hostset: harness.HostSet, host: harness.TestHost, command: str, check: bool = True) -> str:
    r = subprocess.run(
        ["ssh", "-F", str(hostset.ssh_config), host.name, command], capture_output=True, text=True, timeout=600
    )
    if check and r.returncode != 0:
        raise AssertionError(f"{host.name}: {command}: rc={r.returncode} {r.stderr.strip()}")
    return r.stdout


def installed_closure(hostset: harness.HostSet, host: harness.TestHost) -> dict[str, str]:
    """What the host's venv holds, name -> version (pip itself aside), to compare with a lock
    group's ``python_packages``: the closure installed by hash, nothing resolved on the host."""
    freeze = ssh(hostset, host, "/opt/provision/venv/bin/python -m pip freeze --all --exclude pip")
    return {canonicalize_name(n): v for n, _, v in (ln.partition("==") for ln in freeze.split())}


def locked_closure(python_packages: list[dict[str, Any]]) -> dict[str, str]:
    return {canonicalize_name(p["name"]): p["version"] for p in python_packages}


def host_snapshot(hostset: harness.HostSet, host: harness.TestHost) -> str:
    """What a refused run must not have touched: packages, apt sources and pins, modprobe config."""
    return ssh(
        hostset,
        host,
        "dpkg-query -W -f '${Package} ${Version} ${Status}\\n' | sort | md5sum; "
        "ls -la /etc/apt/sources.list.d /etc/apt/preferences.d /etc/modprobe.d /etc/kernel 2>&1; "
        "ls /opt/provision 2>&1",
        check=False,
    )


# What the nvidia-repo role leaves on a host that ran it against the stand-in repository (standin_repo):
# its packages (Maintainer "provision tests"), the repository's source, keyring and pins, the
# kernel guard and module config, the stand-in kernel's header folder and the direct route to the
# bridge. Left in place, the next test's host has an apt source on a server that is gone.
REMOVE_STANDIN = (
    "pkgs=$(dpkg-query -W -f '${Package} ${Maintainer}\\n' | awk '/provision tests/ {print $1}'); "
    '[ -z "$pkgs" ] || { apt-mark unhold $pkgs >/dev/null; dpkg --purge $pkgs >/dev/null; }; '
    "rm -f /etc/apt/sources.list.d/provision-*.list /usr/share/keyrings/provision-*.asc "
    "/etc/apt/preferences.d/provision-* /etc/kernel/postinst.d/zz-provision-nvidia "
    "/etc/modprobe.d/provision-*.conf /etc/apt/apt.conf.d/02direct-bridge /var/lib/provision/stack.json; "
    "rm -rf /lib/modules/KERNEL/build; apt-get update -qq"
)


def remove_standin(hostset: harness.HostSet, host: harness.TestHost, kernel: str) -> None:
    """Take what the stand-in repository's runs left off ``host`` (see REMOVE_STANDIN)."""
    ssh(hostset, host, REMOVE_STANDIN.replace("KERNEL", shlex.quote(kernel)))


def quote(text: str) -> str:
    return shlex.quote(text)


def reach_bridge_directly(hostset: harness.HostSet, host: harness.TestHost) -> None:
    """Let apt and Python on the host reach a server on the bridge address without the filtering proxy
    (the proxy passes only the Debian mirror and PyPI; the stand-in repository is on the bridge)."""
    gw = f"{hostset.net}.1"
    ssh(
        hostset,
        host,
        f"printf 'Acquire::http::Proxy::{gw} \"DIRECT\";\\n' > /etc/apt/apt.conf.d/02direct-bridge; "
        f"grep -q '^no_proxy=.*{gw}' /etc/environment || sed -i 's/^no_proxy=.*/&,{gw}/' /etc/environment",
    )
