"""Collect facts: run the probe commands over a :class:`Transport` and feed the pure parsers.

One POSIX shell script per host carries every command (one SSH round trip, whatever the number
of facts): ``remote/snippets/probe.sh``, a file shipped with the package and sent as it is, its
parameters (and the snippets below, as text) in environment variables (:func:`probe_command`).
Its output is a series of sections, each the raw output of one real tool, which
:mod:`provision.hosts.parse_system` and :mod:`provision.hosts.parse_packages` parse. The few
facts that need root (package-manager locks), the script's ``root`` part, run in a second call
under ``sudo`` when the login user is not root. Hosts are probed in parallel.

Small stdlib-only Python programs (``snippets/``) run on the host for what no standard tool
prints: NVML, lock holders, venv package versions, the EC2 metadata service.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from provision.errors import OperationFailed, ProvisionError
from provision.hosts import facts as hf
from provision.hosts import parse_packages as pp
from provision.hosts import parse_system as ps
from provision.hosts.inventory import HostTarget
from provision.hosts.local import LocalTransport
from provision.hosts.ssh import SSHTransport, connect
from provision.hosts.transport import Transport
from provision.matrix import load
from provision.model.defaults import HEALTH_PROGRAM_DIR, HEALTH_SPEC_FILE
from provision.model.facts import UbuntuDriverIndex
from provision.resources import playbooks_dir

SNIPPETS = Path(__file__).resolve().parents[1] / "remote" / "snippets"
IMDS_DEFAULT = "http://169.254.169.254"
_SECTION = re.compile(r"^@@provision-section (\S+)@@$", re.M)
UPGRADE_UNITS = (
    "unattended-upgrades.service",
    "apt-daily.service",
    "apt-daily-upgrade.service",
    "apt-daily-upgrade.timer",
    "dnf-automatic.timer",
    "dnf-automatic-install.timer",
    "dnf-automatic.service",
    "dnf-automatic-install.service",
)
# dpkg-query's format for the package sections (parse_dpkg_query reads exactly this).
DPKG_FORMAT = r"${db:Status-Abbrev}\t${Package}\t${Version}\n"
RUNTIMES = ("docker", "podman", "containerd", "nerdctl", "crictl", "nvidia-ctk", "nvidia-container-runtime")


@dataclass(frozen=True)
class GatherOptions:
    """What to ask besides the fixed facts, and where the EC2 metadata service is."""

    venv: str | None = None
    # None: the standard address, asked only where DMI says the machine is on EC2. Set (tests,
    # proxies): always asked there. AWS_EC2_METADATA_SERVICE_ENDPOINT / _DISABLED are honoured
    # as in every AWS tool.
    imds_endpoint: str | None = None
    imds_disabled: bool = False
    command_timeout: float = 120.0
    lookup: hf.GpuLookup = hf.no_lookup

    @classmethod
    def from_env(cls, **kwargs: Any) -> GatherOptions:
        endpoint = os.environ.get("AWS_EC2_METADATA_SERVICE_ENDPOINT") or None
        disabled = os.environ.get("AWS_EC2_METADATA_DISABLED", "").lower() == "true"
        return cls(imds_endpoint=endpoint, imds_disabled=disabled, **kwargs)


PROBE_SCRIPT = SNIPPETS / "probe.sh"


def _snippet(name: str) -> str:
    return (SNIPPETS / f"{name}.py").read_text()


def probe_env(options: GatherOptions, parts: Sequence[str]) -> dict[str, str]:
    """The probe script's parameters (its header lists them) for ``parts`` (``main``, ``root``)."""
    env: dict[str, str] = {}
    if "main" in parts:
        endpoint = "" if options.imds_disabled else (options.imds_endpoint or IMDS_DEFAULT)
        env.update(
            PROVISION_DPKG_FORMAT=DPKG_FORMAT,
            PROVISION_UPGRADE_UNITS=" ".join(UPGRADE_UNITS),
            PROVISION_RUNTIMES=" ".join(RUNTIMES),
            PROVISION_NVML_PY=_snippet("nvml_query"),
            PROVISION_IMDS_ENDPOINT=endpoint,
            # an endpoint set (tests, proxies) is always asked; the standard one only on EC2 hardware
            PROVISION_IMDS_ASK="always" if options.imds_endpoint else "ec2",
            PROVISION_VENV_PYTHON=options.venv.rstrip("/") + "/bin/python" if options.venv else "",
            PROVISION_HEALTH_SPEC=HEALTH_SPEC_FILE,
            PROVISION_HEALTH_DIR=HEALTH_PROGRAM_DIR,
        )
        if endpoint:
            env["PROVISION_IMDS_PY"] = _snippet("imds")
        if options.venv:
            env["PROVISION_VENV_PY"] = _snippet("venv_packages")
    if "root" in parts:
        fcntl_locks, pid_files = package_lock_files()
        env["PROVISION_LOCK_FILES"] = " ".join([*(f"fcntl:{p}" for p in fcntl_locks), *(f"pid:{p}" for p in pid_files)])
        env["PROVISION_LOCKS_PY"] = _snippet("package_locks")
    return env


def probe_command(options: GatherOptions, parts: Sequence[str]) -> str:
    """The shell command that runs the probe script (:data:`PROBE_SCRIPT`, sent as it is) for
    ``parts``, its parameters as environment variables (``env``, so sudo's reset does not drop them)."""
    assignments = [f"{name}={value}" for name, value in probe_env(options, parts).items()]
    return shlex.join(["env", *assignments, "sh", "-c", PROBE_SCRIPT.read_text(), "provision-probe", *parts])


def package_lock_files() -> tuple[list[str], list[str]]:
    """The package managers' lock files: (fcntl-locked files, pid files), the one list the
    preflight role waits on too (its files/package_locks.json)."""

    doc = json.loads((playbooks_dir() / "roles" / "preflight" / "files" / "package_locks.json").read_text())
    return [str(p) for p in doc["fcntl"]], [str(p) for p in doc["pid_files"]]


def split_sections(output: str) -> dict[str, str]:
    """``@@provision-section NAME@@`` markers -> {NAME: the text printed after it}."""
    parts = _SECTION.split(output)
    return {parts[i]: parts[i + 1].strip("\n") for i in range(1, len(parts) - 1, 2)}


def _files(text: str) -> list[tuple[str, str]]:
    """``@@file PATH`` blocks of one section -> [(path, content)]."""
    chunks = re.split(r"^@@file (.+)$", text, flags=re.M)
    return [(chunks[i].strip(), chunks[i + 1]) for i in range(1, len(chunks) - 1, 2)]


def facts_from_sections(sections: dict[str, str], options: GatherOptions) -> hf.HostFacts:
    """Pure: the raw sections of a host's output -> its facts."""
    s = sections.get
    facts = hf.HostFacts()
    ident = s("id", "").split()
    facts.user = ident[0] if ident else None
    facts.privileged = len(ident) > 1 and ident[1] == "0"
    facts.hostname = s("hostname", "").strip() or None
    if s("os_release"):
        facts.os = ps.parse_os_release(s("os_release", ""))
    uname = s("uname", "").split()
    if len(uname) >= 2:
        facts.kernel, facts.arch = uname[0], uname[1]

    devices = ps.parse_lspci_nn(s("lspci", "")) or ps.parse_sysfs_pci(_sysfs_rows(s("sysfs_pci", "")))
    facts.gpus, facts.nvswitch_count = ps.classify_pci(devices, options.lookup)
    modules = ps.parse_proc_modules(s("proc_modules", ""))
    facts.nouveau_loaded = "nouveau" in modules
    facts.nvidia_module_loaded = "nvidia" in modules or bool(s("proc_driver"))

    packages = {**pp.parse_dpkg_query(s("dpkg", "")), **pp.parse_rpm_query(s("rpm", ""))}
    facts.driver_packages = pp.driver_packages(packages)
    facts.driver = (
        ps.parse_proc_driver_version(s("proc_driver", ""))
        or ps.parse_modinfo(s("modinfo", ""))
        or pp.driver_from_packages(packages)
        or hf.DriverInfo(None, None)
    )

    if s("nvidia_smi"):
        try:
            facts.nvml = ps.parse_nvidia_smi_xml(s("nvidia_smi", ""))
        except Exception as exc:  # ElementTree's ParseError and friends: report, keep the rest
            facts.nvml_error = f"nvidia-smi -q -x did not parse: {exc}"
    elif s("nvml"):
        facts.nvml, facts.nvml_error = ps.parse_nvml_json(s("nvml", ""))
    if facts.nvml and facts.driver.version is None:
        facts.driver = hf.DriverInfo(facts.nvml.driver_version, facts.driver.flavor)

    facts.kernel_headers = _headers(sections, packages, facts.kernel)
    if s("ubuntu_driver_index"):
        facts.ubuntu_driver_index = _ubuntu_driver_index(s("ubuntu_driver_index", ""), facts.kernel)
    facts.efi = s("efi", "").strip() == "yes" if s("efi") else None
    facts.secure_boot = ps.parse_mokutil_sb_state(s("mokutil", "")) if s("mokutil") else None
    if facts.secure_boot is None:
        facts.secure_boot = ps.parse_efivar_secure_boot(s("efivar_sb", "")) if s("efivar_sb") else None
    if facts.secure_boot is None and facts.efi is False:
        facts.secure_boot = False  # legacy BIOS boot: there is no Secure Boot to reject modules

    toolkits = {t.version: t for t in pp.cuda_toolkits_from_packages(packages)}
    for path, content in _files(s("cuda_dirs", "")):
        tk = pp.parse_cuda_version_file(path, content)
        if tk:
            toolkits[tk.version] = tk
    nvcc_lines = s("nvcc", "").splitlines()
    nvcc = pp.parse_nvcc_version(s("nvcc", ""))
    if nvcc and nvcc not in toolkits:  # e.g. Debian's nvidia-cuda-toolkit: /usr/bin/nvcc
        where = nvcc_lines[0].rsplit("/bin/", 1)[0] if nvcc_lines and "/bin/" in nvcc_lines[0] else None
        toolkits[nvcc] = hf.CudaToolkit(nvcc, where or None)
    facts.cuda_toolkits = sorted(toolkits.values(), key=lambda t: [int(x) for x in t.version.split(".")])
    header = _files(s("cudnn_header", ""))
    version = pp.parse_cudnn_header(header[0][1]) if header else None
    facts.cudnn = hf.Cudnn(version, header[0][0]) if version else pp.cudnn_from_packages(packages)

    facts.python = ps.parse_python_version(s("python", ""))
    facts.pythons = ps.parse_python_list(s("pythons", ""))
    if facts.python and facts.python not in facts.pythons:
        facts.pythons = sorted([*facts.pythons, facts.python], key=lambda v: [int(x) for x in v.split(".")])
    if options.venv:
        facts.venv = ps.parse_venv_json(options.venv, s("venv", ""))
    facts.disks = ps.parse_df(s("df", ""))
    facts.memory_bytes = ps.parse_meminfo(s("meminfo", ""))
    nproc = s("nproc", "").strip()
    facts.cpus = int(nproc) if nproc.isdigit() else None

    states = s("units", "").split()
    # `systemctl is-active A B ...` prints one state per unit, in order.
    units = ""
    if len(states) == len(UPGRADE_UNITS):
        units = "\n".join(f"{u} {st}" for u, st in zip(UPGRADE_UNITS, states, strict=True))
    facts.unattended_upgrades = ps.parse_unattended(units, s("processes", ""), s("apt_periodic", ""))
    facts.container_runtimes = ps.parse_container_runtimes(s("runtimes", ""))
    facts.ec2_instance_type = ps.parse_ec2_instance_type(s("imds", ""))
    if "health" in sections:
        facts.health = ps.parse_installed_health(s("health", ""))
    if "locks" in sections:
        facts.package_locks, why = ps.parse_locks_json(s("locks", ""))
        if why:
            facts.warnings.append(why)
    return facts


def _sysfs_rows(text: str) -> str:
    """``grep -H . ./SLOT/{class,vendor,device}`` -> ``SLOT CLASS VENDOR DEVICE`` rows."""
    fields: dict[str, dict[str, str]] = {}
    for line in text.splitlines():
        path, _, value = line.rpartition(":")  # the slot itself has colons, the value none
        parts = path.split("/")
        if len(parts) >= 2 and value:
            fields.setdefault(parts[-2], {})[parts[-1]] = value.strip()
    return "\n".join(
        f"{slot} {f['class']} {f['vendor']} {f['device']}"
        for slot, f in sorted(fields.items())
        if {"class", "vendor", "device"} <= set(f)
    )


def _ubuntu_driver_index(text: str, kernel: str | None) -> UbuntuDriverIndex:
    """The ``ubuntu_driver_index`` section: ``@@lists``, then ``@@images``, ``@@show``, ``@@policy`` parts."""
    parts = dict(re.findall(r"^@@(images|show|policy)\n(.*?)(?=^@@|\Z)", text, re.M | re.S))
    modules = pp.precompiled_modules(pp.parse_apt_cache_show(parts.get("show", "")), kernel or "")
    return UbuntuDriverIndex(
        kernel_flavour=pp.kernel_flavour(kernel, pp.kernel_metapackages(parts.get("images", ""))),
        modules=tuple(modules),
        userspace=pp.parse_apt_cache_policy_all(parts.get("policy", "")),
        lists="@@lists no" not in text,
    )


def _headers(sections: dict[str, str], packages: dict[str, str], kernel: str | None) -> hf.KernelHeaders:
    s = sections.get
    installed = s("headers_build", "").strip() == "yes"
    installable: bool | None = None
    package: str | None = None
    # /lib/modules/$(uname -r)/build is what DKMS builds against; both linux-headers-* (deb) and
    # kernel-devel (rpm) provide it.
    if s("apt_headers") and kernel:
        package = f"linux-headers-{kernel}"
        installed = installed or package in packages
        text = s("apt_headers", "")
        if "@@listed " in text:
            installable = "@@listed yes" in text
        else:
            installable = pp.parse_apt_cache_policy(text, "@@lists no" not in text)
    elif s("dnf_headers") and kernel:
        text = s("dnf_headers", "")
        m = re.search(r"^@@rc (\d+)$", text, re.M)
        package = f"kernel-devel-{kernel}"
        installable = pp.parse_dnf_list(text, int(m.group(1)) if m else 1)
    if installed:
        installable = True
    return hf.KernelHeaders(installed=installed, installable=installable, package=package)


def _known_root(transport: Transport) -> bool | None:
    if isinstance(transport, SSHTransport):
        return transport.user == "root"
    if isinstance(transport, LocalTransport):
        return os.geteuid() == 0
    return None


def gather(transport: Transport, options: GatherOptions | None = None) -> hf.HostFacts:
    """All facts of one host. Raises OperationFailed when the host cannot run the script at all."""
    options = options or GatherOptions()
    root = _known_root(transport)
    result = transport.run(
        probe_command(options, ["main", "root"] if root else ["main"]), timeout=options.command_timeout
    )
    sections = split_sections(result.stdout)
    if "id" not in sections:
        why = result.stderr.strip()[:200] or "no output"
        raise OperationFailed(
            f"probe script failed on {transport.name}: {why}", "check that the host has a POSIX sh and coreutils"
        )
    warnings: list[str] = []
    if not root and sections["id"].split()[1:2] != ["0"]:
        # Not root: the root-only facts under sudo (never prompting), else as the user, marked.
        privileged = transport.run(probe_command(options, ["root"]), sudo=True, timeout=options.command_timeout)
        if "locks" in split_sections(privileged.stdout):
            sections.update(split_sections(privileged.stdout))
        else:
            said = privileged.stderr.strip().splitlines()
            warnings.append(
                f"sudo failed ({said[-1] if said else 'no output'}); facts that need root were read as the login user"
            )
            plain = transport.run(probe_command(options, ["root"]), timeout=options.command_timeout)
            sections.update(split_sections(plain.stdout))
    facts = facts_from_sections(sections, options)
    facts.warnings[:0] = warnings
    return facts


@dataclass
class ProbeResult:
    """One host's answer: facts, or the error that stopped the probe."""

    host: str
    facts: hf.HostFacts | None = None
    error: ProvisionError | None = None
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_json(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "ok": self.ok,
            "error": self.error.to_json()["error"] if self.error else None,
            "facts": self.facts.to_json() if self.facts else None,
            "duration_s": round(self.duration_s, 2),
        }


def probe_one(
    target: HostTarget,
    options: GatherOptions,
    *,
    accept_new_host_keys: bool = False,
    connect_timeout: float = 10.0,
    ssh_config: Path | None = None,
    env: dict[str, str] | None = None,
) -> ProbeResult:
    start = time.monotonic()
    try:
        transport = connect(
            target,
            accept_new_host_keys=accept_new_host_keys,
            connect_timeout=connect_timeout,
            ssh_config=ssh_config,
            env=env,
        )
        try:
            facts = gather(transport, options)
        finally:
            transport.close()
    except ProvisionError as exc:
        return ProbeResult(target.name, error=exc, duration_s=time.monotonic() - start)
    return ProbeResult(target.name, facts=facts, duration_s=time.monotonic() - start)


def probe_hosts(
    targets: Sequence[HostTarget],
    options: GatherOptions,
    *,
    parallel: int = 16,
    on_done: Callable[[ProbeResult], None] | None = None,
    **connect_kwargs: Any,
) -> list[ProbeResult]:
    """Probe every target at once (up to ``parallel``); results in the order of ``targets``.

    A host that fails is reported in its result; the others still answer.
    """

    def one(target: HostTarget) -> ProbeResult:
        result = probe_one(target, options, **connect_kwargs)
        if on_done:
            on_done(result)
        return result

    if len(targets) == 1:
        return [one(targets[0])]
    with ThreadPoolExecutor(max_workers=max(1, min(parallel, len(targets)))) as pool:
        return list(pool.map(one, targets))


def matrix_lookup() -> hf.GpuLookup:
    """PCI ID -> model from the knowledge data (provision.matrix)."""

    return load().gpu_by_pci_id
