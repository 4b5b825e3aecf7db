"""Frameworks in one venv: do their own pins on shared packages leave an installable version?

Owns the env_conflict rule's logic (``Rules.check_together`` calls :func:`check`). Two or more
frameworks conflict when a package they all pin (nvidia-cudnn-cu12, nvidia-nccl-cu13,
cuda-toolkit, tensorrt-libs, ...) has no release on the index that satisfies every framework's
specifier, with each wheel's markers evaluated for the group's arch and Python. The pins and the
release lists are ``data/wheels.yaml``, read from the wheels' METADATA; this is a per-package
test, not a full resolver (wheel tags of the shared packages are not checked), which is what
makes pip refuse the pairs in practice (facts: i15 section 2). A framework whose pins the file
does not hold (a download.pytorch.org variant, a release read after it) is reported unchecked,
never passed as fine.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from provision.matrix import Knowledge, wheels
from provision.matrix.wheels import WheelPins
from provision.stack.candidates import FwChoice

# The packages named first when several conflict: what a user recognises (cuDNN, NCCL, runtime, cuBLAS).
_FIRST = ("nvidia-cudnn", "nvidia-nccl", "nvidia-cuda-runtime", "nvidia-cublas")


@dataclass(frozen=True)
class Verdict:
    """What the rule found: conflicts (each makes the group fail) and members it could not check."""

    conflicts: tuple[str, ...] = ()
    unchecked: tuple[str, ...] = ()


@dataclass(frozen=True)
class Member:
    """One framework of the group: its requirement (the ``wheels.yaml`` key) and, for a build the
    file does not hold, the pins the other data knows (a torch variant's cuDNN and NCCL)."""

    requirement: str
    known: tuple[str, ...] = ()


def members(k: Knowledge, fws: Sequence[FwChoice]) -> tuple[Member, ...]:
    """What each framework is looked up as in ``wheels.yaml``. A torch CPU build pins no CUDA package
    (left out); the download.pytorch.org build of a release's PyPI-default variant is the wheel PyPI
    serves (``torch==2.6.0+cu124`` is ``torch==2.6.0``); another variant keeps its local tag (not in
    the file) with the cuDNN and NCCL pins pytorch.yaml gives it, so that what is known still fails
    and the rest is reported unchecked."""
    out = []
    for fw in fws:
        if fw.variant == "cpu":
            continue
        rel = next((r for r in k.t.torch if r.version == fw.version), None) if fw.name == "torch" else None
        if rel is None:
            out.append(Member(fw.requirement))
        elif fw.variant == rel.pypi_default:
            out.append(Member(f"torch=={fw.version}"))
        else:
            major = (fw.cuda or "").split(".")[0]
            known = [f"nvidia-cudnn-cu{major}=={fw.cudnn}"] if fw.cudnn else []
            known += [f"nvidia-nccl-cu{major}=={fw.nccl}"] if fw.nccl else []
            out.append(Member(fw.requirement, tuple(known)))
    return tuple(out)


def check(group: Sequence[Member | str], arch: str, python: str, pins: WheelPins | None = None) -> Verdict:
    """The verdict on installing every member (``torch==2.8.0``, ``jax[cuda12]==0.6.0``) in one venv."""
    ms = tuple(m if isinstance(m, Member) else Member(m) for m in group)
    if len(ms) < 2:
        return Verdict()
    return (_shipped() if pins is None else _Pins(pins)).check(ms, arch, python)


def allowed(requirement: str, prefix: str, arch: str, python: str) -> tuple[str, str, tuple[str, ...]] | None:
    """The shared package named ``prefix``* (``nvidia-cudnn-cu``) that ``requirement``'s own pins
    name on (arch, Python): (package, the pin, the releases on the index it allows, newest first);
    None where wheels.yaml does not know. A fresh install takes the first: a range
    (``jax[cuda12]``'s ``>=9.8,<10``) gets the newest release on the index."""
    return _shipped().allowed(requirement, prefix, arch, python)


@functools.lru_cache(maxsize=1)
def _shipped() -> _Pins:
    return _Pins(wheels.load())


class _Pins:
    """One wheels.yaml, with what the search asks of it again and again parsed and decided once.

    The search tries every framework release x variant x Python, and so thousands of groups, but
    only a few hundred members and pins: a member's pins on (arch, Python) and whether a combined
    specifier leaves a release are each computed once (profiled: re-parsing the pins per group was
    nine tenths of an unsatisfiable resolve with its suggestions)."""

    def __init__(self, pins: WheelPins) -> None:
        self.pins = pins
        self._specs: dict[tuple[Member, str, str], dict[str, SpecifierSet] | None] = {}
        self._fits: dict[tuple[str, str], bool] = {}
        self._allowed: dict[tuple[str, str, str, str], tuple[str, str, tuple[str, ...]] | None] = {}
        self._verdicts: dict[tuple[tuple[Member, ...], str, str], Verdict] = {}

    def check(self, group: tuple[Member, ...], arch: str, python: str) -> Verdict:
        key = (group, arch, python)
        if key not in self._verdicts:
            if len(self._verdicts) > 8192:  # a long-lived process (property tests) stays bounded
                self._verdicts.clear()
            self._verdicts[key] = self._check(group, arch, python)
        return self._verdicts[key]

    def member_specs(self, m: Member, arch: str, python: str) -> dict[str, SpecifierSet] | None:
        """The member's combined specifier per shared package (None: its pins are unknown)."""
        key = (m, arch, python)
        if key not in self._specs:
            fp = self.pins.get(m.requirement)
            found = fp.requirements(arch, python) if fp is not None else None
            if found is None and m.known:
                found = [Requirement(t) for t in m.known]
            specs: dict[str, SpecifierSet] | None = None
            if found is not None:
                specs = {}
                for r in found:
                    name = canonicalize_name(r.name)
                    specs[name] = specs.get(name, SpecifierSet()) & r.specifier
            self._specs[key] = specs
        return self._specs[key]

    def allowed(self, requirement: str, prefix: str, arch: str, python: str) -> tuple[str, str, tuple[str, ...]] | None:
        """:func:`allowed`, decided once per (requirement, prefix, arch, Python): the rules ask it for
        every candidate set the search tries."""
        key = (requirement, prefix, arch, python)
        if key not in self._allowed:
            self._allowed[key] = None
            specs = self.member_specs(Member(requirement), arch, python)
            for name, spec in sorted((specs or {}).items()):
                if name.startswith(prefix) and name in self.pins.releases:
                    versions = sorted(spec.filter(self.pins.releases[name]), key=Version, reverse=True)
                    if versions:
                        self._allowed[key] = (name, str(spec), tuple(str(v) for v in versions))
                        break
        return self._allowed[key]

    def satisfiable(self, name: str, spec: SpecifierSet) -> bool:
        key = (name, str(spec))
        if key not in self._fits:
            # filter() admits pre-releases only when no final release matches (pip's default choice).
            self._fits[key] = next(iter(spec.filter(self.pins.releases[name])), None) is not None
        return self._fits[key]

    def _check(self, group: tuple[Member, ...], arch: str, python: str) -> Verdict:
        pins = self.pins
        requirements = tuple(m.requirement for m in group)
        unchecked: list[str] = []
        partial: list[str] = []
        specs: dict[str, dict[str, SpecifierSet]] = {}  # package -> member -> its combined specifier
        for m in group:
            req = m.requirement
            others = ", ".join(r for r in requirements if r != req)
            fp = pins.get(req)
            mine = self.member_specs(m, arch, python)
            if mine is None:
                why = "not in wheels.yaml" if fp is None else f"no Linux {arch} wheel in wheels.yaml"
                unchecked.append(
                    f"{req}: its pins on shared CUDA packages are unknown ({why}, read {pins.read}); "
                    f"whether it installs beside {others} is unchecked"
                )
                continue
            if (fp is None or arch not in fp.pins) and m.known:  # the file lacks it: pytorch.yaml's pins only
                partial.append(
                    f"{req}: only its {' and '.join(Requirement(t).name for t in m.known)} pins are known "
                    f"(pytorch.yaml; the build is not in wheels.yaml): whether its other pins install beside "
                    f"{others} is unchecked"
                )
            for name, spec in mine.items():
                specs.setdefault(name, {})[req] = spec
        conflicts: list[str] = []
        for a_i, a in enumerate(requirements):
            for b in requirements[a_i + 1 :]:
                msg = self._pair(a, b, specs, unchecked)
                if msg is not None:
                    conflicts.append(msg)
        if not conflicts and len(requirements) > 2:
            conflicts += self._whole(specs)
        if not conflicts:
            unchecked += partial
        return Verdict(tuple(conflicts), tuple(dict.fromkeys(unchecked)))

    def _pair(self, a: str, b: str, specs: dict[str, dict[str, SpecifierSet]], unchecked: list[str]) -> str | None:
        clashes = []
        for name, by in specs.items():
            if a in by and b in by:
                if name not in self.pins.releases:
                    unchecked.append(f"{name}: no release list in wheels.yaml; {a} and {b} both pin it (unchecked)")
                    continue
                if not self.satisfiable(name, by[a] & by[b]):
                    clashes.append(name)
        if not clashes:
            return None
        clashes.sort(key=_priority)
        name = clashes[0]
        more = f" (also {', '.join(clashes[1:])})" if clashes[1:] else ""
        return (
            f"{a} {_verb(specs[name][a])} {name}{specs[name][a]}, {b} {_verb(specs[name][b])} {name}{specs[name][b]}: "
            f"no release of {name} satisfies both{more}"
        )

    def _whole(self, specs: dict[str, dict[str, SpecifierSet]]) -> list[str]:
        """Three or more frameworks that fit pairwise but not all together on one package."""
        out = []
        for name, by in sorted(specs.items(), key=lambda kv: _priority(kv[0])):
            if len(by) < 3 or name not in self.pins.releases:
                continue
            combined = SpecifierSet()
            for s in by.values():
                combined &= s
            if not self.satisfiable(name, combined):
                needs = ", ".join(f"{req} {_verb(s)} {name}{s}" for req, s in by.items())
                out.append(f"{needs}: no release of {name} satisfies all of them")
        return out


def _verb(spec: SpecifierSet) -> str:
    items = list(spec)
    exact = len(items) == 1 and items[0].operator in ("==", "===") and not items[0].version.endswith(".*")
    return "pins" if exact else "needs"


def _priority(name: str) -> tuple[int, str]:
    rank = next((i for i, p in enumerate(_FIRST) if name.startswith(p)), len(_FIRST))
    return rank, name
