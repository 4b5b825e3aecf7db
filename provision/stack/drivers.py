"""Driver choice: the driver branches, versions, install methods and kernel module flavours allowed.

A pinned driver narrows the branches; the OS's install methods (NVIDIA's repository, the distro's
own packages) and the GPU's kernel module rule (open, proprietary) narrow the rest. Why a single
branch was skipped is kept only when no choice is left. :func:`driver_rank` orders the
choices that pass: no caveats, then LTSB/production, then the newest branch, then nvidia-repo.
"""

from __future__ import annotations

from provision.matrix import Knowledge
from provision.matrix.model import DriverBranch
from provision.stack.candidates import DriverChoice
from provision.stack.distro_versions import ubuntu_driver
from provision.stack.request import DRIVER_SPEC, HostSpec, StackRequest
from provision.stack.rules import Check, install_methods, open_modules_alpha, open_modules_beta

BRANCH_RANK = {"ltsb": 0, "production": 1, "new-feature": 2}
REPO_LACKS = "install_method: NVIDIA's "  # the start of a "this OS's repository lacks the branch" failure


class Drivers:
    """The driver choices of one request on one host.

    Why a branch or method is impossible goes to ``failures``: the search's list of what failed
    before any candidate was tried, shared so that the answer names it when nothing is left.
    """

    def __init__(self, request: StackRequest, host: HostSpec, knowledge: Knowledge, failures: list[str]) -> None:
        self.req = request
        self.host = host
        self.k = knowledge
        self.failures = failures

    def choices(self) -> list[DriverChoice]:
        """Drivers allowed by the GPU, the pin, the OS's install methods and the module flavours."""
        req, host, k = self.req, self.host, self.k
        if req.driver == "none":
            # Left alone, the driver the probe found is the one the wheels will run on: the rules
            # check it (a cu130 torch on an R535 host fails them, and an older variant is chosen).
            found = host.probed.driver_version if host.probed is not None else None
            return [DriverChoice(None, found, "none", None)]
        if req.driver == "auto" and host.gpu is None and (req.cpu_only or host.probed is not None):
            # CPU wheels need no driver; and a probed host without an NVIDIA GPU has nothing a
            # driver could drive (its preflight would refuse the install). A pin is still honoured.
            return [DriverChoice(None, None, "none", None)]
        pin_branch: int | None = None
        pin_version: str | None = None
        if req.driver != "auto":
            m = DRIVER_SPEC.match(req.driver)
            assert m is not None
            pin_branch = int(m.group(1))
            pin_version = req.driver if m.group(2) else None
        methods = install_methods(req, host)
        out: list[DriverChoice] = []
        noted = len(self.failures)
        for b in k.t.branches:
            if pin_branch is not None and b.branch != pin_branch:
                continue
            for method in methods:
                version = self._branch_version(b, method, pin_version)
                if version is None:
                    continue
                flavour = self._flavour(b)
                if flavour is None or not self._in_repo(b, method):
                    continue
                version = self._host_version(b, method, flavour, version, pin_version)
                if version is None:
                    continue
                out.append(DriverChoice(b, version, method, flavour))
        if out:  # why single branches were skipped matters only when none is left ...
            # ... or when the OS's repository lacks every branch the GPU can run: then the other
            # branches fail driver_gpu, and the missing repository branch is the answer
            self.failures[noted:] = [f for f in self.failures[noted:] if self._left_behind(f)]
        return out

    def _left_behind(self, failure: str) -> bool:
        """A repository failure for a GPU whose last branch is older than the repository's first."""
        gpu, first = self.host.gpu, self.host.os.repo_first_branch
        last = gpu.last_driver_branch if gpu is not None else None
        return failure.startswith(REPO_LACKS) and first is not None and last is not None and last < first

    def _branch_version(self, b: DriverBranch, method: str, pin: str | None) -> str | None:
        if method == "distro":
            have = b.distro.get(self.host.os.id)
            if have is None:
                if self.req.install_method == "distro":  # else nvidia-repo covers the branch
                    self.failures.append(
                        f"install_method: {self.host.os.id}'s own packages do not carry branch {b.branch}"
                    )
                return None
            if pin is not None and pin != have and not self._reads_host_index(method):
                self.failures.append(f"install_method: {self.host.os.id} packages carry {have}, not {pin}")
                return None
            return have
        if pin is not None:
            return pin
        if b.newest is None and self.req.driver != "auto":
            self.failures.append(f"driver: no known release of branch {b.branch}; pin an exact version")
        return b.newest

    def _in_repo(self, b: DriverBranch, method: str) -> bool:
        """Whether NVIDIA's repository for this OS carries the branch (checked after the flavour, whose
        failure is the more useful answer for a GPU that no branch fits anyway)."""
        first = self.host.os.repo_first_branch
        if method != "nvidia-repo" or first is None or b.branch >= first:
            return True
        last = self.host.gpu.last_driver_branch if self.host.gpu is not None else None
        if last is not None and b.branch > last:
            return False  # the GPU cannot run the branch anyway: driver_gpu is not this rule's to say
        repo = self.host.os.repo_name or self.host.os.id
        self.failures.append(
            f"{REPO_LACKS}{repo} repository has no driver branch {b.branch} (it starts at "
            f"R{first}); use an older OS release whose repository carries R{b.branch}"
        )
        return False

    def _reads_host_index(self, method: str) -> bool:
        """Ubuntu's distro driver on a probed host: its own index says the version, not the knowledge."""
        return method == "distro" and self.host.probed is not None and self.host.os.id.startswith("ubuntu")

    def _host_version(self, b: DriverBranch, method: str, flavour: str, version: str, pin: str | None) -> str | None:
        """The version the host's index offers (provision.stack.distro_versions), where it decides."""
        if not self._reads_host_index(method):
            return version
        found = ubuntu_driver(self.host.probed, b.branch, flavour == "open")
        why = found.refused
        if why is None and pin is not None and found.version not in (None, pin):
            why = f"install_method: the host's index offers {found.version}, not {pin}"
        if why is not None:
            if self.req.install_method == "distro":  # else nvidia-repo covers the branch
                self.failures.append(why)
            return None
        return found.version or version

    def _flavour(self, b: DriverBranch) -> str | None:
        """Rule kernel_modules: the module flavour for this GPU and branch (None: impossible)."""
        want = self.req.kernel_modules
        rule = self.host.gpu.kernel_modules if self.host.gpu else "open-recommended"
        has_open = b.branch >= 515
        has_proprietary = b.branch < 620
        gpu = self.host.gpu
        beta = gpu is not None and open_modules_beta(self.k, gpu, b.branch)
        if want == "auto":
            if rule == "proprietary-only":
                want = "proprietary"
            elif rule == "open-only" or (has_open and not beta):
                want = "open"
            else:  # GeForce/workstation cards: proprietary until open is production (open_modules_geforce)
                want = "proprietary"
        name = gpu.name if gpu else "this GPU"
        if want == "open" and gpu is not None and open_modules_alpha(self.k, gpu, b.branch):
            self.failures.append(
                f"kernel_modules: branch {b.branch}'s open kernel modules are alpha quality on {name} and do not "
                "load on GeForce/workstation GPUs without NVreg_OpenRmEnableUnsupportedGpus=1; use proprietary"
            )
            return None
        if want == "open" and rule == "proprietary-only":
            self.failures.append(f"kernel_modules: {name} (pre-Turing) needs the proprietary kernel modules")
            return None
        if want == "proprietary" and rule == "open-only":
            self.failures.append(f"kernel_modules: {name} needs the open kernel modules")
            return None
        if want == "open" and not has_open:
            self.failures.append(f"kernel_modules: branch {b.branch} has no open kernel modules (from 515)")
            return None
        if want == "proprietary" and not has_proprietary:
            self.failures.append(f"kernel_modules: branch {b.branch} ships open kernel modules only")
            return None
        return want


def driver_rank(d: DriverChoice, c: Check) -> tuple[int, ...]:
    """Prefer: no caveats, then LTSB/production, then the newest branch, then nvidia-repo."""
    b = d.branch
    if b is None:
        return (0,)
    return (
        len(c.warnings),
        BRANCH_RANK.get(b.cls, 3),
        -b.branch,
        0 if d.method == "nvidia-repo" else 1,
    )
