"""Read the frameworks' pins from the index, and write ``data/wheels.yaml`` from them.

Owns which framework releases ``wheels.yaml`` covers (:func:`targets`) and how one release's pins
are read (:func:`read_pins`: its wheel METADATA per Linux arch, the extras it is installed with,
cuda-toolkit's and the jax plugins' METADATA one level down). ``make check-knowledge`` reads
through the same functions, so the file and the check cannot drift apart.

Regenerate with ``python -m provision.matrix.wheels_read`` (``--cache DIR``, ``--index URL``).
"""

from __future__ import annotations

import argparse
import datetime
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from provision.matrix import Knowledge
from provision.matrix import load as load_knowledge
from provision.matrix.pypi import IndexReader, Metadata, Want, add_reader_arguments, pick_python
from provision.matrix.wheels import (
    ARCHS,
    FrameworkPins,
    WheelPins,
    dump,
    is_expanded,
    is_shared,
    reduce_requires,
    requirement_key,
)

SOURCE = "pypi_wheel_metadata"


@dataclass(frozen=True)
class Target:
    """A framework release to read: its name and version, the extras it is installed with (each
    option one ``wheels.yaml`` entry, kept where the wheel provides the extra) and the Pythons the
    data lists for it (read with one of them where a wheel exists)."""

    name: str
    version: str
    options: tuple[tuple[str, ...], ...]
    prefer: tuple[str, ...] = ()


@dataclass
class Read:
    """What :func:`read_pins` found for one target: an entry per extras option, the top METADATA per arch."""

    target: Target
    pins: dict[tuple[str, ...], FrameworkPins] = field(default_factory=dict)
    top: dict[str, Metadata | None] = field(default_factory=dict)


# Read with these Pythons where the release has them: pip takes one Python per run, so wheels read
# with the same one share runs (torch 2.2-2.15, TF 2.16+, every jax have 3.12; older ones 3.11).
_BATCH_PYTHONS = ("3.12", "3.11")


def _prefer(pythons: Sequence[str]) -> tuple[str, ...]:
    return tuple(p for p in _BATCH_PYTHONS if p in pythons) + tuple(p for p in pythons if p not in _BATCH_PYTHONS)


def _want(reader: IndexReader, name: str, version: str, arch: str, prefer: Sequence[str]) -> Want | None:
    """The read of ``name==version`` for ``arch``; a pure wheel is read once for both arches."""
    proj = reader.project(name)
    py = pick_python(proj, version, arch, _prefer(prefer))
    if py is None:
        return None
    files = proj.files.get(version, ())
    pure = bool(files) and all(f.arch in ("any", None) for f in files) and any(f.arch == "any" for f in files)
    return Want(name, version, py, ARCHS[0] if pure else arch)


def _requirement(name: str, extras: Sequence[str], version: str) -> str:
    return f"{name}[{','.join(extras)}]=={version}" if extras else f"{name}=={version}"


def targets(k: Knowledge, reader: IndexReader) -> list[Target]:
    """The releases the data lists, plus: for torch and TensorFlow every PyPI patch release of a
    listed minor (users pin them; 2.19.1 beside 2.19.0), and for all three every final release
    newer than the data's newest (what the data will list next)."""
    out: list[Target] = []
    projects = reader.projects(["torch", "tensorflow", "jax"])

    def versions(name: str, listed: Iterable[str], siblings: bool) -> list[str]:
        have = [Version(v) for v in listed]
        newest = max(have)
        minors = {(v.major, v.minor) for v in have}
        extra = [
            v
            for v in projects[name].final_versions()
            if v > newest or (siblings and (v.major, v.minor) in minors and v >= min(have))
        ]
        return [str(v) for v in sorted(set(have) | set(extra), reverse=True)]

    torch_py = {r.version: r.python for r in k.t.torch}
    for v in versions("torch", torch_py, siblings=True):
        out.append(Target("torch", v, ((),), torch_py.get(v, ())))
    tf_py = {r.version: r.python for r in k.t.tensorflow}
    for v in versions("tensorflow", tf_py, siblings=True):
        out.append(Target("tensorflow", v, ((), ("and-cuda",)), tf_py.get(v, _near(tf_py, v))))
    jax_py = {r.version: r.python for r in k.t.jax}
    for v in versions("jax", jax_py, siblings=False):
        out.append(Target("jax", v, (("cuda12",), ("cuda13",)), jax_py.get(v, ())))
    return out


def _near(listed: dict[str, tuple[str, ...]], version: str) -> tuple[str, ...]:
    """The Pythons of the listed release of the same minor (a patch release not listed yet)."""
    v = Version(version)
    for other, py in listed.items():
        o = Version(other)
        if (o.major, o.minor) == (v.major, v.minor):
            return py
    return ()


@dataclass
class _Node:
    """One (target, extras option, arch) being expanded: pins so far and reads still to make."""

    read: Read
    extras: tuple[str, ...]
    arch: str
    pins: list[str] = field(default_factory=list)
    wheels: list[str] = field(default_factory=list)
    pending: list[Requirement] = field(default_factory=list)
    broken: bool = False


def read_pins(reader: IndexReader, wanted: Sequence[Target]) -> list[Read]:
    """Each target's pins on shared packages per arch, read in rounds (one parallel batch each)."""
    reader.projects({t.name for t in wanted})
    reads = [Read(t) for t in wanted]
    tops: dict[tuple[int, str], Want] = {}
    for i, r in enumerate(reads):
        for arch in ARCHS:
            w = _want(reader, r.target.name, r.target.version, arch, r.target.prefer)
            if w is not None:
                tops[i, arch] = w
    found = reader.metadata(list(tops.values()))
    nodes: list[_Node] = []
    for i, r in enumerate(reads):
        for arch in ARCHS:
            w = tops.get((i, arch))
            md = found.get(w) if w else None
            r.top[arch] = md
            if md is None:
                continue
            provided = {canonicalize_name(e) for e in md.provides_extra}
            for extras in r.target.options:
                if any(canonicalize_name(e) not in provided for e in extras):
                    continue
                node = _Node(r, extras, arch, wheels=[md.filename])
                _take(node, md, extras)
                nodes.append(node)
    _expand(reader, nodes)
    for node in nodes:
        if node.broken:
            continue
        r = node.read
        req = _requirement(r.target.name, node.extras, r.target.version)
        old = r.pins.get(node.extras)
        pins = dict(old.pins) if old else {}
        wheels = dict(old.wheels) if old else {}
        pins[node.arch] = tuple(sorted(set(node.pins), key=_pin_order))
        wheels[node.arch] = tuple(node.wheels)
        top = r.top[node.arch]
        r.pins[node.extras] = FrameworkPins(req, top.requires_python if top else None, pins, wheels)
    return reads


def _pin_order(text: str) -> tuple[str, str]:
    r = Requirement(text)
    return canonicalize_name(r.name), text


def _take(node: _Node, md: Metadata, extras: Sequence[str]) -> None:
    for req in reduce_requires(md.requires_dist, node.arch, extras):
        if is_expanded(req.name):
            node.pending.append(req)
        if is_shared(req.name):
            node.pins.append(str(req))


def _expand(reader: IndexReader, nodes: list[_Node]) -> None:
    """Read each pending expanded requirement (one exact version) and take its pins, until none."""
    while any(n.pending for n in nodes):
        reader.projects({r.name for n in nodes for r in n.pending})
        asks: dict[tuple[int, int], tuple[Want, Requirement]] = {}
        for ni, n in enumerate(nodes):
            for ri, req in enumerate(n.pending):
                matches = list(req.specifier.filter(reader.project(req.name).files))
                w = _want(reader, req.name, matches[0], n.arch, n.read.target.prefer) if len(matches) == 1 else None
                if w is None:
                    n.broken = True  # not one installable version: this entry stays out (unchecked)
                    continue
                asks[ni, ri] = (w, req)
        found = reader.metadata([w for w, _ in asks.values()])
        for n in nodes:
            n.pending = []
        for (ni, _), (w, req) in asks.items():
            md = found.get(w)
            n = nodes[ni]
            if md is None:
                n.broken = True
                continue
            n.wheels.append(md.filename)
            _take(n, md, sorted(req.extras))


def release_lists(reader: IndexReader, names: Iterable[str]) -> dict[str, tuple[str, ...]]:
    """Each shared package's versions with a file on the index (yanked ones left out), oldest first."""
    out = {}
    for name, proj in reader.projects(sorted(set(names))).items():
        vs = []
        for v in proj.files:
            try:
                vs.append(Version(v))
            except InvalidVersion:
                continue
        out[name] = tuple(str(v) for v in sorted(vs))
    return out


def shared_names(pins: Iterable[FrameworkPins]) -> set[str]:
    """The shared packages these frameworks pin, on any arch (their release lists go in the file)."""
    return {canonicalize_name(Requirement(p).name) for fp in pins for ps in fp.pins.values() for p in ps}


def build_pins(reader: IndexReader, reads: Sequence[Read], date: str) -> WheelPins:
    fws = {}
    for r in reads:
        for fp in r.pins.values():
            fws[requirement_key(fp.requirement)] = fp
    return WheelPins(date, reader.index, (SOURCE,), fws, release_lists(reader, shared_names(fws.values())))


HEADER = (
    "The frameworks' own pins on the packages they share, read from the package index.",
    "",
    "frameworks: per release (torch: the PyPI default wheel; tensorflow and tensorflow[and-cuda];",
    "jax[cuda12] / jax[cuda13]) the Requires-Dist on nvidia-* (cu11/cu12/cu13 and CUDA 13's unsuffixed",
    "names), cuda-* and tensorrt*, per Linux arch it has a wheel for (an arch absent: no wheel there),",
    "with the extras applied, markers reduced to that arch (kept only where a pin depends on Python),",
    "cuda-toolkit[...] and jax-cudaNN-plugin[with-cuda] -> jax-cudaNN-pjrt expanded one level;",
    "wheels: the files read. releases: every version of each of those packages with a file on the",
    "index (yanked left out), so whether some version satisfies two frameworks is decided offline.",
    "",
    "Read with pip's metadata-only path (pip install --dry-run --report - --no-deps",
    "--use-feature=fast-deps: PEP 658 .metadata where served, else HTTP range requests into the",
    "wheel) and the simple API (PEP 691 JSON). Written by `python -m provision.matrix.wheels_read`,",
    "checked by `make check-knowledge`: do not edit by hand, regenerate.",
)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m provision.matrix.wheels_read", description=__doc__)
    add_reader_arguments(ap, jobs=8)
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "data" / "wheels.yaml")
    args = ap.parse_args(argv)
    reader = IndexReader.from_arguments(args)
    reads = read_pins(reader, targets(load_knowledge(), reader))
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    pins = build_pins(reader, reads, date)
    args.out.write_text(dump(pins, HEADER))
    print(
        f"wrote {args.out}: {len(pins.frameworks)} framework entries, {len(pins.releases)} shared packages "
        f"({reader.pip_runs} pip runs, {reader.cache_hits} cached)",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
