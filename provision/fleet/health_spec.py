"""The health spec (``provision.health/1``): what ``provision-health`` on a host compares it with.

Built here, on the controller, from the typed lock group ``up`` applied (never from the run dir's
YAML read back): the expected versions are :func:`provision.stack.drift.expected_versions` limited
to the components the lock pins (:data:`provision.model.components.COMPONENTS`), the driver package
is the lock's own ``nvidia_driver`` install, the venv's wheels are the group's closure. The host
program (``provision/remote/health/``) reads it with the standard library; the format is
docs/how-to/health.md's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from provision.fleet.verify import HostResult, key_figures
from provision.model.components import COMPONENTS, TORCH_VARIANT
from provision.model.lock import LockGroup
from provision.stack.drift import expected_versions

SCHEMA = "provision.health/1"
PERSISTENCED = "nvidia-persistenced"


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
