"""``data/wheels.yaml``: the frameworks' own pins on the packages they share, and those packages' releases.

Owns the typed form of that file (:class:`WheelPins`), its loader (parsed on first use, not with
the rest of the knowledge: only a resolve of two or more frameworks reads it) and the two rules
of what goes in it, shared by the writer (:mod:`provision.matrix.wheels_read`) and the check:
which names are shared (:func:`is_shared`) and how a Requires-Dist marker reduces to one Linux
arch (:func:`reduce_requires`).
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from packaging.markers import Marker
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from provision.matrix.knowledge import cached_yaml, parse_yaml

ARCHS = ("x86_64", "aarch64")
# The Pythons a marker is evaluated on (newest first; a pure wheel is read with the newest that fits).
PYTHONS = ("3.15", "3.14", "3.13", "3.12", "3.11", "3.10", "3.9", "3.8")
# The packages two frameworks can both pin: NVIDIA's CUDA library wheels (nvidia-*-cu11/cu12/cu13
# and CUDA 13's unsuffixed names), the cuda-toolkit meta-package and cuda-* bindings, TensorRT.
_SHARED = re.compile(r"^(nvidia-|cuda-|tensorrt)")
# Requirements read one level further: their pins count as the framework's (cuda-toolkit[...]'s
# extras, jax[cudaNN] -> jax-cudaNN-plugin[with-cuda] -> jax-cudaNN-pjrt).
_EXPAND = re.compile(r"^(cuda-toolkit|jax-cuda\d+-(plugin|pjrt))$")


def is_shared(name: str) -> bool:
    return bool(_SHARED.match(canonicalize_name(name)))


def is_expanded(name: str) -> bool:
    return bool(_EXPAND.match(canonicalize_name(name)))


def environment(arch: str, python: str, extra: str = "") -> dict[str, str]:
    """The marker environment of CPython ``python`` on Linux ``arch``."""
    return {
        "implementation_name": "cpython",
        "implementation_version": f"{python}.0",
        "os_name": "posix",
        "platform_machine": arch,
        "platform_python_implementation": "CPython",
        "platform_release": "",
        "platform_system": "Linux",
        "platform_version": "",
        "python_full_version": f"{python}.0",
        "python_version": python,
        "sys_platform": "linux",
        "extra": extra,
    }


def applies(marker: Marker | None, arch: str, python: str, extras: Iterable[str] = ()) -> bool:
    """Whether a requirement with ``marker`` is installed for these extras on Linux ``arch``."""
    if marker is None:
        return True
    return any(marker.evaluate(environment(arch, python, e)) for e in ("", *extras))


def reduce_requires(requires: Iterable[str], arch: str, extras: Iterable[str] = ()) -> list[Requirement]:
    """The shared or expanded requirements that apply on ``arch`` with ``extras``, markers reduced:
    none where they apply on every Python, a Python-only marker where they apply on some."""
    ex = tuple(extras)
    out = []
    for text in requires:
        try:
            r = Requirement(text)
        except InvalidRequirement:
            continue
        if not (is_shared(r.name) or is_expanded(r.name)):
            continue
        on = [p for p in PYTHONS if applies(r.marker, arch, p, ex)]
        if not on:
            continue
        r.marker = None if len(on) == len(PYTHONS) else Marker(_python_marker(on))
        out.append(r)
    return out


def _python_marker(on: Sequence[str]) -> str:
    """A marker true on exactly ``on`` of :data:`PYTHONS`: a range where they are contiguous."""
    idx = sorted(PYTHONS.index(p) for p in on)
    if idx != list(range(idx[0], idx[-1] + 1)):
        return " or ".join(f'python_version == "{p}"' for p in on)
    newest, oldest = PYTHONS[idx[0]], PYTHONS[idx[-1]]
    parts = [f'python_version >= "{oldest}"'] if idx[-1] != len(PYTHONS) - 1 else []
    parts += [f'python_version <= "{newest}"'] if idx[0] != 0 else []
    return " and ".join(parts)


@functools.lru_cache(maxsize=8192)
def _requirement(text: str) -> Requirement:
    """One parse of a requirement string the data holds (read only by its callers)."""
    return Requirement(text)


@functools.lru_cache(maxsize=4096)
def requirement_key(text: str) -> str:
    """``"jax[cuda12]==0.6.0"`` in one spelling (canonical name, sorted extras). Cached: the
    resolver asks it of the same few hundred strings once per candidate set it tries."""
    r = _requirement(text)
    extras = f"[{','.join(sorted(canonicalize_name(e) for e in r.extras))}]" if r.extras else ""
    return f"{canonicalize_name(r.name)}{extras}{r.specifier}"


@dataclass(frozen=True)
class FrameworkPins:
    """One framework release's pins on shared packages, per Linux arch it has a wheel for."""

    requirement: str
    requires_python: str | None
    pins: Mapping[str, tuple[str, ...]]  # arch -> requirement strings; an arch absent: no wheel there
    wheels: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # arch -> the files read

    def requirements(self, arch: str, python: str) -> list[Requirement] | None:
        """The pins in force on ``arch`` with ``python`` (None: no wheel for that arch)."""
        if arch not in self.pins:
            return None
        out = []
        for text in self.pins[arch]:
            r = _requirement(text)
            if applies(r.marker, arch, python):
                out.append(r)
        return out

    def to_yaml(self) -> dict[str, Any]:
        return {
            "requirement": self.requirement,
            "requires_python": self.requires_python,
            "wheels": {a: list(v) for a, v in self.wheels.items()},
            "pins": {a: list(v) for a, v in self.pins.items()},
        }


@dataclass(frozen=True)
class WheelPins:
    """The whole of ``wheels.yaml``."""

    read: str
    index: str
    source: tuple[str, ...]
    frameworks: Mapping[str, FrameworkPins]  # requirement_key -> pins
    releases: Mapping[str, tuple[str, ...]]  # canonical shared name -> versions on the index

    def get(self, requirement: str) -> FrameworkPins | None:
        return self.frameworks.get(requirement_key(requirement))

    def to_yaml(self) -> dict[str, Any]:
        return {
            "wheel_pins": {
                "read": self.read,
                "index": self.index,
                "source": list(self.source),
                "frameworks": [f.to_yaml() for f in self.frameworks.values()],
                "releases": {n: list(v) for n, v in sorted(self.releases.items())},
            }
        }


def build(doc: Mapping[str, Any]) -> WheelPins:
    """``wheels.yaml``'s parsed ``wheel_pins`` section -> :class:`WheelPins`."""
    fws: dict[str, FrameworkPins] = {}
    for f in doc.get("frameworks") or ():
        pins = {str(a): tuple(str(p) for p in v) for a, v in (f.get("pins") or {}).items() if v is not None}
        unknown = set(pins) - set(ARCHS)
        if unknown:
            raise ValueError(f"{f['requirement']}: unknown arch {sorted(unknown)}")
        fp = FrameworkPins(
            requirement=str(f["requirement"]),
            requires_python=f.get("requires_python"),
            pins=pins,
            wheels={str(a): tuple(str(x) for x in v) for a, v in (f.get("wheels") or {}).items()},
        )
        fws[requirement_key(fp.requirement)] = fp
    return WheelPins(
        read=str(doc.get("read", "")),
        index=str(doc.get("index", "")),
        source=tuple(str(s) for s in doc.get("source") or ()),
        frameworks=fws,
        releases={canonicalize_name(n): tuple(str(v) for v in vs) for n, vs in (doc.get("releases") or {}).items()},
    )


@functools.lru_cache(maxsize=1)
def load() -> WheelPins:
    """The ``wheels.yaml`` shipped with this package (parsed once per process, on first use)."""
    data = (resources.files("provision.matrix") / "data" / "wheels.yaml").read_bytes()
    digest = hashlib.sha256(b"wheels.yaml\0" + data).hexdigest()
    doc = cached_yaml(digest, lambda: parse_yaml(data) or {})
    return build(doc.get("wheel_pins") or {})


def dump(pins: WheelPins, header: Sequence[str]) -> str:
    """``wheels.yaml``'s text: the header comment, then the data (flow lists, one framework per block)."""
    import yaml  # noqa: PLC0415 (only the writer (check-knowledge) needs it: not every start)

    body = yaml.safe_dump(pins.to_yaml(), sort_keys=False, default_flow_style=None, width=200)
    return "".join(f"# {line}\n".replace("# \n", "#\n") for line in header) + body
