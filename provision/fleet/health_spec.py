"""The health spec (``provision.health/1``): what ``provision-health`` on a host compares it with.

Built here, on the controller, from the typed lock group ``up`` applied (never from the run dir's
YAML read back): the expected versions are :func:`provision.stack.drift.expected_versions` limited
to the components the lock pins (:data:`provision.model.components.COMPONENTS`), the driver package
is the lock's own ``nvidia_driver`` install, the venv's wheels are the group's closure. The host
program (``provision/remote/health/``) reads it with the standard library; the format is
docs/how-to/health.md's.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from provision.ansible.checks import refuse_templates
from provision.files import private_dir, replace_file
from provision.fleet.verify import HostResult, key_figures
from provision.model.components import COMPONENTS, TORCH_VARIANT
from provision.model.defaults import HEALTH_PROGRAM_DIR, HEALTH_SPEC_FILE
from provision.model.lock import Lock, LockGroup
from provision.remote.health import SOURCES
from provision.stack.drift import expected_versions

if TYPE_CHECKING:
    from provision.hosts.facts import HostFacts, InstalledHealth

SCHEMA = "provision.health/1"
PERSISTENCED = "nvidia-persistenced"
# Where `up`'s controller writes the last verify's verdict on a host (as root, through the
# Transport) and the host program reads it; the health role's ``health_state_dir`` holds it.
LAST_VERIFY = "/var/lib/provision/last-verify.json"
LAST_VERIFY_SCHEMA = "provision.last-verify/1"


def group_hash(group: LockGroup) -> str:
    """A lock group's identity for the state DB and the health spec: what is installed, not which
    hosts share it. The wheel closure is part of it (two locks of one torch whose closures differ
    are two locks: `provision rollback` goes from one to the other); a group without one hashes as
    before the closure was added here."""
    doc = {"host": group.host.to_json(), "stack": group.stack.to_json(), "packages": group.to_json()["packages"]}
    if group.python_packages:
        doc["python_packages"] = group.to_json()["python_packages"]
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class LastVerify:
    """The verdict of the last verify and when it ran (timezone-aware), and its key figures, which
    provision-health's textfile shows (``provision_verify_gemm_tflops{gpu=...}``)."""

    verdict: str
    at: datetime
    max_age_s: int | None = None  # older than this is unhealthy; None: the age is only shown
    gpu: str | None = None  # the GPU model the figures are of ("CPU" on a host without one)
    figures: Mapping[str, float] = field(default_factory=dict)  # gemm_tflops, copy_gbps

    @classmethod
    def from_result(cls, result: HostResult, at: datetime, max_age_s: int | None = None) -> LastVerify:
        """From a host's verify (its ``provision.verify/1`` report; an up record's ``verify`` as
        ``HostResult(host, report=...)``): the figures verify's table shows (:func:`key_figures`)."""
        if result.report is None:
            return cls("fail", at, max_age_s)
        f = key_figures(result)
        figures = {k: v for k, v in (("gemm_tflops", f.gemm_tflops), ("copy_gbps", f.copy_gbps)) if v is not None}
        return cls(str(result.report.get("verdict")), at, max_age_s, f.gpu, figures)

    def to_json(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "at": self.at.isoformat(),
            "max_age_s": self.max_age_s,
            "gpu": self.gpu,
            "figures": dict(self.figures),
        }


def health_spec(
    group: LockGroup,
    lock_hash: str,
    venv: str | None,
    *,
    probed_gpus: Sequence[str] = (),
    nvswitches: int | None = None,
    verify: LastVerify | None = None,
) -> dict[str, Any]:
    """The spec for a host of ``group``: ``probed_gpus`` the GPU names its probe saw (NVML's), ``venv``
    the framework venv (None: no venv to check)."""
    locked = {c.key for c in COMPONENTS if c.locked} | {TORCH_VARIANT}
    expected = {k: v for k, v in expected_versions(group).items() if k in locked}
    plan = group.packages
    driver: dict[str, Any] = {"manager": plan.manager if plan else None, "package": None}
    if plan is not None:
        installs = plan.for_role("nvidia_driver")
        # The package whose version is the driver's (apt's nvidia-open=595.58.03-*, dnf's 3:595.58.03):
        # the pinned one; a pinning helper package (unversioned) does not say.
        candidates = [i for i in installs if i.version] or list(installs)
        driver["package"] = candidates[0].name if candidates else None
    # The fabric manager's systemd unit, as the lock's package plan names it (the names are data).
    fabric_manager = next((s.name for s in plan.services if s.role == "fabric_manager"), None) if plan else None
    return {
        "schema": SCHEMA,
        "lock_hash": lock_hash,
        "group": group.name,
        "expected": expected,
        "driver": driver,
        "gpus": {"count": group.host.gpu_count, "models": list(probed_gpus), "nvswitches": nvswitches},
        "fabric_manager": fabric_manager if group.stack.fabric_manager is not None and nvswitches != 0 else None,
        "persistence": plan is not None and any(s.name == PERSISTENCED for s in plan.services),
        "venv": venv if group.stack.frameworks else None,
        "python_packages": [{"name": p.name, "version": p.version, "sha256": p.sha256} for p in group.python_packages],
        "verify": verify.to_json() if verify else None,
    }


def last_verify(lock_hash: str, verify: LastVerify) -> dict[str, Any]:
    """What `up` writes to :data:`LAST_VERIFY` on a host after its smoke job: the verdict, its time,
    its key figures (the textfile's) and the lock hash it was verified against (the program ignores
    a verdict of another lock)."""
    return {"schema": LAST_VERIFY_SCHEMA, "lock_hash": lock_hash, **verify.to_json()}


# Where a run dir holds the program (PROGRAM_DIR/<file>, beside site.yml): Ansible's copy looks a
# relative ``src`` up in the playbook's own files/ folder, so the run dir stays whole (`plan --out`
# runs from a copy on another machine) and records the program it installed.
PROGRAM_DIR = Path("files") / "health"


def write_program(run_dir: Path) -> dict[str, str]:
    """Copy the program's files (:data:`provision.remote.health.SOURCES`) into ``run_dir``; the
    health role's ``health_sources``: {file on the host: its ``src`` for Ansible's copy}."""
    for name, source in SOURCES.items():
        target = run_dir / PROGRAM_DIR / name
        private_dir(target.parent)
        replace_file(target, source.read_text())
    return {name: str(PROGRAM_DIR.relative_to("files") / name) for name in SOURCES}


def host_vars(
    lock: Lock, facts: Mapping[str, HostFacts | None], venv: str, sources: Mapping[str, str]
) -> dict[str, dict[str, Any]]:
    """The health role's per-host variables (its defaults/main.yml): each host's spec, with the
    GPU names and NVSwitch count its probe saw (``facts``; None: planned without a probe, the
    models are then not compared), and the program's files (``sources``, :func:`write_program`).

    Per host, not per group: two hosts of one group may hold GPUs NVML names differently. A GPU
    name comes from the host, so it is refused with a template marker like every role value
    (:func:`provision.ansible.checks.dump`): Ansible would evaluate it on the controller.
    """
    out: dict[str, dict[str, Any]] = {}
    for group in lock.groups:
        digest = group_hash(group)
        for host in group.hosts:
            f = facts.get(host)
            names = [g.name for g in f.nvml.gpus] if f is not None and f.nvml is not None else []
            spec = health_spec(
                group, digest, venv, probed_gpus=names, nvswitches=f.nvswitch_count if f is not None else None
            )
            refuse_templates(spec, f"host {host}: health spec")
            out[host] = {"health_spec": spec, "health_sources": dict(sources)}
    return out


def program_digests() -> dict[str, str]:
    """{file name on the host: sha256} of the program `up` installs (:data:`SOURCES`), as
    ``sha256sum`` prints them."""
    return {name: hashlib.sha256(source.read_bytes()).hexdigest() for name, source in SOURCES.items()}


def installed_change(
    installed: InstalledHealth | None, spec: Mapping[str, object], role_vars: Mapping[str, object]
) -> str | None:
    """What `up` must change of provision-health on a host (None: nothing, or nothing the probe
    can tell): the program's files (:func:`program_digests`) and the spec (``spec``, as the role
    writes it: JSON, so compared as JSON data) against what the probe found (``installed``).

    A host whose last verify passed with the same lock is skipped only when this is None, so a
    host converged before the health role existed, or whose spec or program was removed, gets
    them. Not compared (None) where the probe did not look (``installed`` None) or the run's role
    variables (``role_vars``, its group's) leave the role out or move its files elsewhere: the
    probe reads the default places only.
    """
    moved = role_vars.get("health_spec_file", HEALTH_SPEC_FILE) != HEALTH_SPEC_FILE or (
        f"{role_vars.get('health_lib_dir', HEALTH_PROGRAM_DIR.rsplit('/', 1)[0])}/health" != HEALTH_PROGRAM_DIR
    )
    if installed is None or role_vars.get("health_enabled", True) is False or moved:
        return None
    if not installed.files:
        return "provision-health is not installed"
    if any(installed.files.get(name) != digest for name, digest in program_digests().items()):
        return "provision-health is another version"
    want = json.loads(json.dumps(spec))
    if installed.spec is None:
        return f"provision-health has no spec ({HEALTH_SPEC_FILE})"
    if installed.spec.get("lock_hash") != want.get("lock_hash"):
        return f"provision-health's spec is of lock {installed.spec.get('lock_hash')}"
    return None if dict(installed.spec) == want else "provision-health's spec differs from this run's"
