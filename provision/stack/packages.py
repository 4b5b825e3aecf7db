"""The package plan: what the roles install for a resolved stack, per component.

Driver package names per install method and OS family (with NVIDIA's repository URL), the
Fabric Manager, the system CUDA toolkit and cuDNN packages, and pip's index URLs and exact
requirement lines.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from provision.stack.candidates import DriverChoice, FwChoice, Scope


class Packages(Scope):
    def _fm_packages(self, d: DriverChoice) -> list[str]:
        p = self.k.t.packages
        if p is None:
            return []
        fam = self._family(d.method)
        return [
            n.format(branch=d.branch.branch if d.branch else "", version=d.version or "")
            for n in p.fabric_manager.get(d.method, {}).get(fam, ())
        ]

    def _family(self, method: str) -> str:
        if method == "distro":
            return self.host.os.id.split("-")[0]
        return self.host.os.family

    def packages(self, d: DriverChoice, combo: Sequence[FwChoice], cudnn_major: int | None) -> dict[str, Any]:
        """Package names per install method and OS, index URLs and pip requirement lines."""
        p, host, req = self.k.t.packages, self.host, self.req
        out: dict[str, Any] = {
            "os_family": host.os.family,
            "driver": None,
            "fabric_manager": [],
            "cuda_toolkit": [],
            "cudnn": [],
        }
        if p is not None and d.branch is not None and d.flavour is not None:
            fam = self._family(d.method)
            flavour = d.flavour
            if d.method == "nvidia-repo" and d.branch.branch >= p.new_packaging_from:
                flavour += "_pinned"
            names = p.driver.get(d.method, {}).get(fam, {}).get(flavour, ())
            out["driver"] = {
                "method": d.method,
                "names": [n.format(branch=d.branch.branch, version=d.version) for n in names],
                "repo": f"{p.repo_url}/{host.os.repo_name}/{'sbsa' if host.arch == 'aarch64' else 'x86_64'}/"
                if d.method == "nvidia-repo" and host.os.repo_name
                else None,
            }
            if host.needs_fabric_manager:
                out["fabric_manager"] = self._fm_packages(d)
        if p is not None and req.cuda_toolkit:
            major, minor = req.cuda_toolkit.split(".")
            out["cuda_toolkit"] = [
                n.format(cuda_major=major, cuda_minor=minor) for n in p.cuda_toolkit.get(host.os.family, ())
            ]
        if p is not None and req.cudnn and cudnn_major is not None:
            out["cudnn"] = [
                n.format(cudnn_major=req.cudnn.split(".")[0], cuda_major=cudnn_major, cudnn=req.cudnn)
                for n in p.cudnn.get(host.os.family, ())
            ]
        indexes = _dedupe([fw.index_url for fw in combo])
        pypi = self.k.t.pypi_index
        index_url = next((i for i in indexes if i != pypi), pypi)
        extra = [i for i in indexes if i != index_url]
        if index_url != pypi and any(fw.name != "torch" for fw in combo) and pypi not in extra:
            extra.append(pypi)
        if index_url != pypi and pypi not in extra:
            extra.append(pypi)  # torch's own dependencies (filelock, sympy, nvidia-*) come from PyPI
        out["pip"] = {
            "index_url": index_url,
            "extra_index_urls": extra,
            "requirements": [fw.requirement for fw in combo],
        }
        return out


def _dedupe(items: Sequence[str]) -> list[str]:
    out: list[str] = []
    for i in items:
        if i not in out:
            out.append(i)
    return out
