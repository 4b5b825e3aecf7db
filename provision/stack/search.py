"""The search: candidates newest first, the first set of releases that passes every rule wins.

Frameworks (each one's best candidates first), then Python, then the driver choice with the best
rank; of one set of framework releases, the variants and Python that pass with the fewest
caveats win. When nothing passes, :class:`Unsatisfiable` names the failing rules of the candidate
that came nearest, the most fundamental rule first. Suggestions (changes that do resolve) are added
by :func:`provision.stack.resolve.resolve`, above both this module and :mod:`provision.stack.suggest`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TypeVar

from packaging.version import Version

from provision.errors import Unsatisfiable
from provision.matrix import Knowledge
from provision.stack.candidates import Candidates, DriverChoice, FwChoice
from provision.stack.drivers import Drivers, driver_rank
from provision.stack.packages import dedupe, has_driver_packages, has_fabric_manager
from provision.stack.request import HostSpec, StackRequest
from provision.stack.resolution import Resolution, assemble
from provision.stack.rules import Check, Rules

T = TypeVar("T")
# Rules whose verdict changes with the Python (its wheels, [and-cuda]'s pins, the wheels' markers):
# only a candidate that failed one of these can pass with a standalone Python.
_PER_PYTHON = ("python:", "tf_and_cuda:", "env_conflict:")

RULE_ORDER = {
    rule: i
    for i, rule in enumerate(
        (
            "gpu_host_arch",
            "os_arch",
            "install_method",
            "gpu_arch",
            "arch",
            "driver_gpu",
            "kernel_modules",
            "driver_cuda",
            "toolkit_gpu",
            "toolkit_os",
            "cudnn_gpu",
            "cudnn_cuda",
            "cudnn_driver",
            "tf_system_cuda",
            "tf_and_cuda",
            "env_conflict",
            "fabric_manager",
            "driver",
            "python",
        )
    )
}


class Resolver:
    """One resolution: the request, the host and the knowledge; :meth:`run` searches."""

    def __init__(self, request: StackRequest, host: HostSpec, knowledge: Knowledge, *, explain: bool = True) -> None:
        self.req = request
        # explain=False: only whether a set exists matters (the suggestions' relaxed tries), so a
        # request every driver choice fails on its own is refused before the search, whose only
        # use then would be the nearest miss of the message
        self.explain = explain
        self.host = host
        self.k = knowledge
        self.failures: list[str] = []  # rules that failed before the search (no candidates at all)
        no_gpu = host.gpu is None and host.probed is not None and request.driver in ("auto", "none")
        self.candidates = Candidates(request, knowledge, no_gpu=no_gpu)
        self.rules = Rules(request, host, knowledge)
        self.drivers = Drivers(request, host, knowledge, self.failures)
        self._nearest_key: tuple[int, int] | None = None
        self._nearest_miss: list[str] | None = None
        self._python_blocked = False  # a candidate failed the python rule (a standalone Python may help)
        # Memos of pure rule answers, keyed by the identity of the choices (DriverChoice holds a
        # DriverBranch with a dict: not hashable). run() empties them and holds every choice it
        # keys alive until it returns, so no id can be reused for another choice while it is a key.
        self._fw_driver: dict[tuple[int, int, bool], Check] = {}
        self._system: dict[int, tuple[Check, int | None]] = {}
        self._static: dict[tuple[int, str], tuple[Check, bool]] = {}

    def os_pythons(self) -> tuple[list[str], str | None]:
        """The OS pass's Pythons (a pinned one, else the probed host's python3, else the OS's list),
        or none and the python failure that says why."""
        osr = self.host.os
        want = self.req.python or self.req.host_python
        if want is None:
            rest = sorted(osr.pythons[1:], key=Version, reverse=True)
            return [osr.default_python, *rest], None
        if want in osr.pythons:
            return [want], None
        hint = "; python_source auto or standalone installs one" if self.req.python_source == "os" else ""
        return [], f"python: Python {want} is not packaged for {osr.id} (it has {', '.join(osr.pythons)}){hint}"

    def standalone_pythons(self) -> tuple[list[str], str | None]:
        """The standalone pass's Pythons (python-build-standalone via uv), newest first, or none and
        the python failure that says why."""
        sp = self.k.t.standalone_python
        if sp is None or self.host.arch not in sp.archs:
            return [], f"python: no standalone CPython is known for {self.host.arch}"
        if self.req.python is None:
            return list(sp.pythons), None
        if self.req.python in sp.pythons:
            return [self.req.python], None
        return [], f"python: no standalone CPython {self.req.python} (uv {sp.uv} offers {', '.join(sp.pythons)})"

    def python_passes(self) -> list[tuple[list[str], str | None, str | None]]:
        """(Pythons, why standalone or None, why no Python or None) per pass: the OS's first; a
        standalone CPython only when asked for, or under auto when no set of releases fits an OS Python."""
        source, osr = self.req.python_source, self.host.os
        passes: list[tuple[list[str], str | None, str | None]] = []
        if source in ("auto", "os"):
            pythons, failure = self.os_pythons()
            passes.append((pythons, None, failure))
        if source == "os":
            return passes
        if source == "standalone":
            why = "install.python_source is standalone"
        elif self.req.python and self.req.python not in osr.pythons:
            why = f"Python {self.req.python} is not packaged for {osr.id}"
        else:
            have = self.req.python or self.req.host_python or ", ".join(osr.pythons)
            why = f"no release that fits the request supports {osr.id}'s Python {have}"
        pythons, failure = self.standalone_pythons()
        passes.append((pythons, why, failure))
        return passes

    def run(self) -> Resolution:
        self._fw_driver.clear()
        self._system.clear()
        self._static.clear()
        base = self.rules.host_check()
        if not base.ok:
            raise self._unsatisfiable(base.failures)
        specs = self.candidates.framework_specs()
        passes = self.python_passes()
        drivers = self.drivers.choices()
        driver_checks = {id(d): self.rules.check_driver_gpu(d) for d in drivers}
        fm_needed = self.host.needs_fabric_manager
        if not self.explain and drivers and all(not self._driver_ok(d, driver_checks, fm_needed) for d in drivers):
            raise self._unsatisfiable([f for d in drivers for f in driver_checks[id(d)].failures])
        cand_lists = [list(self.candidates.for_spec(s)) for s in specs]
        for spec, cands in zip(specs, cand_lists, strict=True):
            if not cands:
                self.failures.append(
                    f"{spec.name}: no known release matches `{spec.text}`" + self.candidates.index_note(spec)
                )
        python_failures = [f for _, _, f in passes if f is not None]
        if any(not c for c in cand_lists) or not any(p for p, _, _ in passes) or not drivers:
            raise self._unsatisfiable(self.failures + python_failures)
        os_searched = False
        for pythons, standalone_why, _ in passes:
            if not pythons:
                continue
            if standalone_why is not None and os_searched and not self._python_blocked:
                break  # no candidate failed on its Python: another Python cannot help
            os_searched = standalone_why is None
            found = self._search(
                cand_lists=cand_lists,
                pythons=pythons,
                drivers=drivers,
                driver_checks=driver_checks,
                fm_needed=fm_needed,
                base=base,
                standalone_why=standalone_why,
            )
            if found is not None:
                return found
        self.failures += python_failures
        # Rules every driver choice fails on its own (a pinned branch too old for the GPU) are
        # part of the answer whatever the nearest framework candidate was.
        driver_only = [f for d in drivers for f in driver_checks[id(d)].failures]
        if drivers and all(not driver_checks[id(d)].ok for d in drivers):
            self.failures += driver_only
        raise self._unsatisfiable(self.failures + (self._nearest_miss or []))

    def _search(
        self,
        *,
        cand_lists: list[list[FwChoice]],
        pythons: list[str],
        drivers: list[DriverChoice],
        driver_checks: dict[int, Check],
        fm_needed: bool,
        base: Check,
        standalone_why: str | None,
    ) -> Resolution | None:
        """The newest set of releases that passes on one of ``pythons``; None when none does."""
        # The releases newest first; of one set of releases, the variants and Pythons that pass
        # with the fewest caveats (a cu130 wheel the driver runs natively over the cu132 one it
        # runs through minor-version compatibility), the first of them on a tie.
        for releases in _product([_by_release(c) for c in cand_lists]):
            best_set: tuple[int, Check, tuple[FwChoice, ...], str, DriverChoice, int | None] | None = None
            for combo in _product(releases):
                for python in pythons:
                    if standalone_why is not None and any(python not in fw.python for fw in combo):
                        continue  # a standalone minor no wheel of the set has: the OS pass said why already
                    found = self._best_driver(combo, python, drivers, driver_checks, fm_needed)
                    if found is None:
                        continue
                    total = Check()
                    total.merge(base)
                    total.merge(found[0])
                    if best_set is None or len(total.warnings) < best_set[0]:
                        best_set = (len(total.warnings), total, combo, python, found[1], found[2])
            if best_set is not None:
                _, total, combo, python, driver, cudnn_major = best_set
                total.reasons += _python_floor_reasons(combo, cand_lists, python)
                return assemble(
                    self.req,
                    self.host,
                    self.k,
                    (combo, python, driver),
                    total,
                    cudnn_major=cudnn_major,
                    standalone_why=standalone_why,
                )
        return None

    def _best_driver(
        self,
        combo: tuple[FwChoice, ...],
        python: str,
        drivers: list[DriverChoice],
        driver_checks: dict[int, Check],
        fm_needed: bool,
    ) -> tuple[Check, DriverChoice, int | None] | None:
        """The best driver for these wheels on this Python (rank: :func:`driver_rank`), with
        everything the rules said; None when the wheels or every driver fail a rule."""
        static = Check()
        ptx: dict[str, bool] = {}
        for fw in combo:
            ch, via = self._framework_static(fw, python)
            static.merge(ch)
            ptx[fw.name] = via
        # Only whether a set exists matters without explain: wheels that fail on their own fail
        # together too, and the rules they failed tell whether another Python could help (a rule
        # outside _PER_PYTHON does not change with it), so the costly venv check is skipped.
        if self.explain or static.ok:
            static.merge(self.rules.check_together(combo, python))
            static.merge(self.rules.check_system_use(combo))
        if not static.ok:
            self._python_blocked = self._python_blocked or any(f.startswith(_PER_PYTHON) for f in static.failures)
            self._closest(static.failures, stage=1)
            return None
        best: tuple[tuple[int, ...], DriverChoice, Check, int | None] | None = None
        for d in drivers:
            c = Check()
            c.merge(driver_checks[id(d)])
            for fw in combo:
                c.merge(self._framework_driver(fw, d, ptx[fw.name]))
            system, cudnn_major = self._driver_system(d, fm_needed)
            c.merge(system)
            if not c.ok:
                self._closest(c.failures, stage=0)
                continue
            key = driver_rank(d, c)
            if best is None or key < best[0]:
                best = (key, d, c, cudnn_major)
        if best is None:
            return None
        static.merge(best[2])
        return static, best[1], best[3]

    def _driver_ok(self, d: DriverChoice, driver_checks: dict[int, Check], fm_needed: bool) -> bool:
        """Whether driver ``d`` passes the rules that do not look at the wheels; one that fails them
        fails with every set of wheels (a system CUDA toolkit the OS has no package of)."""
        return driver_checks[id(d)].ok and self._driver_system(d, fm_needed)[0].ok

    def _framework_static(self, fw: FwChoice, python: str) -> tuple[Check, bool]:
        """The driver-independent rules for one wheel on one Python, asked once per pair."""
        key = (id(fw), python)
        if key not in self._static:
            self._static[key] = self.rules.check_framework_static(fw, python)
        return self._static[key]

    def _framework_driver(self, fw: FwChoice, d: DriverChoice, via_ptx: bool) -> Check:
        """Rule driver_cuda for one wheel on one driver, asked once per pair: a search that finds
        nothing (every suggestion's relaxed try) meets the same pair in thousands of combinations."""
        key = (id(fw), id(d), via_ptx)
        if key not in self._fw_driver:
            self._fw_driver[key] = self.rules.check_framework_driver(fw, d.version, via_ptx)
        return self._fw_driver[key]

    def _driver_system(self, d: DriverChoice, fm_needed: bool) -> tuple[Check, int | None]:
        """What one driver choice meets whatever the wheels: the system CUDA toolkit and cuDNN on it,
        and whether its install method packages its branch (and Fabric Manager); asked once per driver."""
        if id(d) in self._system:
            return self._system[id(d)]
        c, cudnn_major = self.rules.check_system_cuda(d.version, d.method)
        if d.branch is not None and not has_driver_packages(self.k, self.host, d):
            c.fail("install_method", f"{self.host.os.id}'s {d.method} packages do not carry branch {d.branch.branch}")
        if fm_needed and d.method == "distro" and not has_fabric_manager(self.k, self.host, d):
            c.fail(
                "fabric_manager",
                f"{self.host.os.id}'s own packages have no Fabric Manager; use the nvidia-repo method",
            )
        self._system[id(d)] = (c, cudnn_major)
        return c, cudnn_major

    def _closest(self, failures: list[str], stage: int) -> None:
        """Keep the failures of the candidate that came nearest: fewest failing rules, then the
        one that got further (past the driver-independent rules), then the newest."""
        key = (len({f.split(":")[0] for f in failures}), stage)
        if self._nearest_key is None or key < self._nearest_key:
            self._nearest_key = key
            self._nearest_miss = list(failures)

    def _unsatisfiable(self, failures: list[str]) -> Unsatisfiable:
        # The most fundamental rule first: a wrong GPU architecture is not fixed by another Python.
        ranked = sorted(dedupe(failures), key=lambda f: RULE_ORDER.get(f.split(":")[0], len(RULE_ORDER)))
        conflicts = ranked[:8] or ["no candidate passed every rule"]
        return Unsatisfiable(
            f"no compatible set of versions: {conflicts[0]}",
            "see the conflicts and suggestions; `provision matrix` shows what is known",
            conflicts=conflicts,
        )


def _by_release(cands: Sequence[FwChoice]) -> list[list[FwChoice]]:
    """One framework's candidates in runs of one release (its variants, CUDA lines), order kept."""
    runs: list[list[FwChoice]] = []
    for fw in cands:
        if runs and runs[-1][0].version == fw.version:
            runs[-1].append(fw)
        else:
            runs.append([fw])
    return runs


def _product(lists: Sequence[Sequence[T]]) -> Iterator[tuple[T, ...]]:
    """Combinations in preference order: the first framework's newest first, and so on."""
    if not lists:
        yield ()
        return
    for head in lists[0]:
        for tail in _product(lists[1:]):
            yield (head, *tail)


def _python_floor_reasons(combo: Sequence[FwChoice], cand_lists: list[list[FwChoice]], python: str) -> list[str]:
    """Why a framework is older than its newest candidate when Python is the reason: every newer
    release has no wheel for the venv's Python (the newest jax on Ubuntu 22.04's 3.11)."""
    out = []
    for fw, cands in zip(combo, cand_lists, strict=True):
        newer = [c for c in cands if Version(c.version) > Version(fw.version)]
        if newer and all(python not in c.python for c in newer):
            oldest = min(newer, key=lambda c: Version(c.version))
            needs = sorted({p for c in newer for p in c.python}, key=Version)
            out.append(
                f"{fw.name} {fw.version}, not {newer[0].version}: {fw.name} {oldest.version} and newer have no "
                f"wheel for Python {python} (they take {', '.join(needs)}; --python-source standalone reaches them)"
            )
    return out
