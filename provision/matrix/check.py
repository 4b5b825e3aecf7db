"""``make check-knowledge``: compare the data with what the package index says, with only the index reachable.

Owns the comparison: for every torch (PyPI default variant) / TensorFlow / JAX release the data
lists that is on the index, the wheels' METADATA (read through :mod:`provision.matrix.wheels_read`,
the code that wrote ``wheels.yaml``) against pytorch.yaml / tensorflow.yaml / jax.yaml (cuDNN,
NCCL, CUDA runtime and cuBLAS pins, Python tags and Requires-Python, platforms) and against
``wheels.yaml`` itself; uv's pinned wheels and their sha256 (os.yaml ``standalone_python.uv_wheels``)
against the index's file list of that release; releases newer than the data (reported, not failures); and each NVIDIA
fact (driver, CUDA, cuDNN entries citing an NVIDIA URL) whose source it cannot reach, with that
source and the fact's confidence. Exit 1 on a contradiction, 2 when the index cannot be read, else
0; the last line is the summary.

Run: ``python -m provision.matrix.check [--cache DIR] [--index URL] [--jobs N] [--no-probe]``.
"""

from __future__ import annotations

import argparse
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from provision.matrix import Knowledge
from provision.matrix import load as load_knowledge
from provision.matrix.model import JaxRelease, StandalonePython, TensorflowRelease, TorchRelease
from provision.matrix.pypi import IndexReader, Project, add_reader_arguments
from provision.matrix.wheels import FrameworkPins, WheelPins
from provision.matrix.wheels import load as load_wheels
from provision.matrix.wheels_read import read_pins, release_lists, shared_names, targets

CONTRADICTION, NEWER, UNREACHABLE, NOTE = "contradiction", "newer", "unreachable", "note"


@dataclass
class Findings:
    """What one run found: how many facts it compared, and every line worth printing."""

    checked: int = 0
    lines: list[tuple[str, str]] = field(default_factory=list)  # (kind, text)
    groups: dict[str, int] = field(default_factory=dict)  # facts checked per subject (torch, jax, ...)

    def compare(self, what: str, data: object, index: object) -> None:
        """One fact: the data's value against the index's; a difference is a contradiction."""
        self.checked += 1
        group = what.split(maxsplit=1)[0].split("[", maxsplit=1)[0]
        self.groups[group] = self.groups.get(group, 0) + 1
        if data != index:
            self.lines.append((CONTRADICTION, f"{what}: data {_show(data)}, index {_show(index)}"))

    def add(self, kind: str, text: str) -> None:
        self.lines.append((kind, text))

    def count(self, kind: str) -> int:
        return sum(1 for k, _ in self.lines if k == kind)

    def summary(self) -> str:
        return (
            f"knowledge: {self.checked} facts checked, {self.count(CONTRADICTION)} contradictions, "
            f"{self.count(NEWER)} newer releases, {self.count(UNREACHABLE)} unreachable"
        )


def _show(v: object) -> str:
    if isinstance(v, (tuple, list, set, frozenset)):
        items = sorted(v, key=_natural) if isinstance(v, (set, frozenset)) else list(v)
        return "[" + ", ".join(str(x) for x in items) + "]"
    return str(v)


def _natural(x: object) -> tuple[int, ...] | tuple[int, str]:
    try:
        return tuple(int(p) for p in str(x).split("."))
    except ValueError:
        return (1 << 30, str(x))


# --- reading the pins --------------------------------------------------------------------------


def pin(fp: FrameworkPins | None, arch: str, *names: str) -> SpecifierSet | None:
    """The specifier a framework puts on the first of ``names`` it pins on ``arch`` (None: none)."""
    if fp is None:
        return None
    wanted = [canonicalize_name(n) for n in names]
    found: dict[str, SpecifierSet] = {}
    for text in fp.pins.get(arch, ()):
        r = Requirement(text)
        key = canonicalize_name(r.name)
        if key in wanted:
            found[key] = found.get(key, SpecifierSet()) & r.specifier
    return next((found[n] for n in wanted if n in found), None)


def pinned_version(spec: SpecifierSet | None) -> str | None:
    """The version an exact pin names (``==9.3.0.75``, ``==13.0.96.*``) or a range starts from (``>=9.8``)."""
    if spec is None:
        return None
    for op in ("==", "===", ">=", "~="):
        for s in spec:
            if s.operator == op:
                return s.version.removesuffix(".*")
    return None


def _minor(version: str | None) -> str | None:
    return ".".join(version.split(".")[:2]) if version else None


def _major(version: str | None) -> str | None:
    return version.split(".")[0] if version else None


def _cuda_names(lib: str, major: str | None) -> tuple[str, ...]:
    """PyPI names of a CUDA library for a CUDA major: ``nvidia-<lib>-cuNN``, and CUDA 13's unsuffixed one."""
    majors = [major] if major else ["13", "12", "11"]
    return tuple(n for m in majors for n in (f"nvidia-{lib}-cu{m}", *((f"nvidia-{lib}",) if m == "13" else ())))


def pythons_on_index(project: Project, version: str, arch: str = "x86_64") -> set[str]:
    """CPython versions with a Linux ``arch`` wheel of ``version`` (free-threaded builds left out)."""
    return set().union(*(f.pythons for f in project.files.get(version, ()) if f.arch == arch))


# --- the comparisons (pure: the tests give them stand-in reads) -----------------------------------


def compare_torch(f: Findings, rel: TorchRelease, project: Project, fp: FrameworkPins | None) -> None:
    what = f"torch {rel.version} (PyPI wheel)"
    if fp is None or "x86_64" not in fp.pins:
        f.add(NOTE, f"{what}: no Linux x86_64 wheel read")
        return
    variant = rel.variant(rel.pypi_default)
    cuda = variant.cuda if variant else None
    major = _major(cuda)
    f.compare(f"{what} python", set(rel.python), pythons_on_index(project, rel.version))
    _requires_python(f, what, rel.python, fp.requires_python)
    runtime = pinned_version(pin(fp, "x86_64", *_cuda_names("cuda-runtime", major)))
    f.compare(f"{what} CUDA runtime of pypi_default {rel.pypi_default}", cuda, _minor(runtime))
    cublas = pinned_version(pin(fp, "x86_64", *_cuda_names("cublas", major)))
    f.compare(f"{what} cuBLAS major of pypi_default {rel.pypi_default}", major, _major(cublas))
    if variant is not None and variant.cudnn is not None:
        got = pinned_version(pin(fp, "x86_64", *_cuda_names("cudnn", major)))
        f.compare(f"{what} cuDNN of pypi_default {rel.pypi_default}", variant.cudnn, got)
    if rel.nccl is not None:
        f.compare(f"{what} nccl", rel.nccl, pinned_version(pin(fp, "x86_64", *_cuda_names("nccl", major))))
    arm = pin(fp, "aarch64", *_cuda_names("cuda-runtime", major)) is not None
    f.compare(f"{what} pypi_aarch64_cuda (the aarch64 wheel pulls CUDA libraries)", rel.pypi_aarch64_cuda, arm)


def unsatisfiable(fp: FrameworkPins, arch: str, releases: Mapping[str, Sequence[str]]) -> list[str]:
    """The pins of one framework that no release on the index satisfies (``tensorrt-libs==8.6.1``)."""
    out = []
    for text in fp.pins.get(arch, ()):
        r = Requirement(text)
        if next(iter(r.specifier.filter(releases.get(canonicalize_name(r.name), ()))), None) is None:
            out.append(str(r))
    return out


def compare_tensorflow(
    f: Findings,
    rel: TensorflowRelease,
    project: Project,
    plain: FrameworkPins | None,
    cuda: FrameworkPins | None,
    *,
    releases: Mapping[str, Sequence[str]],
) -> None:
    what = f"tensorflow {rel.version}"
    if plain is None or "x86_64" not in plain.pins:
        f.add(NOTE, f"{what}: no Linux x86_64 wheel read")
        return
    f.compare(f"{what} python", set(rel.python), pythons_on_index(project, rel.version))
    _requires_python(f, what, rel.python, plain.requires_python)
    f.compare(f"{what} and_cuda (the wheel provides the [and-cuda] extra)", rel.and_cuda, cuda is not None)
    if cuda is None or not rel.and_cuda:
        return
    what = f"tensorflow[and-cuda] {rel.version}"
    # the extra's pins all have a release (2.15.0's tensorrt-libs==8.6.1 has none on PyPI); the
    # data says so with and_cuda_python: [] (installable on no Python)
    says = bool(rel.and_cuda_python)
    missing = unsatisfiable(cuda, "x86_64", releases)
    f.compare(f"{what} installable (every pin has a release)", says, not missing)
    if missing:
        f.add(NOTE, f"{what}: no release on the index for {', '.join(missing)}")
    runtime = pinned_version(pin(cuda, "x86_64", *_cuda_names("cuda-runtime", None)))
    f.compare(f"{what} cuda (runtime pin)", rel.cuda, _minor(runtime))
    cudnn = pinned_version(pin(cuda, "x86_64", *_cuda_names("cudnn", None)))
    f.compare(f"{what} cudnn (pin)", rel.cudnn, _minor(cudnn) if rel.cudnn.count(".") == 1 else cudnn)
    exact = all(
        all(s.operator == "==" for s in Requirement(t).specifier)
        for t in cuda.pins["x86_64"]
        if Requirement(t).specifier
    )
    f.compare(f"{what} exact_pins", rel.exact_pins, exact)
    nccl = pin(cuda, "x86_64", *_cuda_names("nccl", None))
    floor = None if nccl is None or any(s.operator == "==" for s in nccl) else pinned_version(nccl)
    f.compare(f"{what} nccl_min", rel.nccl_min, floor)


def compare_jax(
    f: Findings,
    rel: JaxRelease,
    plugins: Mapping[int, Project],
    lines: Mapping[int, FrameworkPins | None],
    *,
    jaxlib: Project | None = None,
) -> None:
    """``jaxlib`` (when given) narrows the Pythons: jax[cudaNN] needs its wheel as well as the plugin's."""
    what = f"jax {rel.version}"
    present = sorted((m for m, fp in lines.items() if fp is not None), reverse=True)
    f.compare(f"{what} cuda_majors (jax[cudaNN] installable)", list(rel.cuda_majors), present)
    for m in present:
        fp = lines[m]
        assert fp is not None
        pys = pythons_on_index(plugins[m], rel.version)
        if jaxlib is not None:
            pys &= pythons_on_index(jaxlib, rel.version)
        f.compare(f"{what} python (jaxlib and jax-cuda{m}-plugin wheels)", set(rel.python), pys)
        _requires_python(f, f"jax[cuda{m}] {rel.version}", rel.python, fp.requires_python)
        got = pinned_version(pin(fp, "x86_64", f"nvidia-cudnn-cu{m}"))
        want = rel.cudnn_min.get(m)
        f.compare(f"{what} cudnn_min[{m}] (plugin's floor)", want, got)


def _requires_python(f: Findings, what: str, pythons: Iterable[str], requires: str | None) -> None:
    spec = SpecifierSet(requires or "")
    outside = [p for p in pythons if not spec.contains(p)]
    f.compare(f"{what} python within Requires-Python {requires}", [], outside)


def compare_wheels_yaml(f: Findings, stored: WheelPins, fresh: Sequence[FrameworkPins]) -> None:
    """wheels.yaml against a fresh read: the same pins per arch and Requires-Python."""
    for fp in fresh:
        old = stored.get(fp.requirement)
        if old is None:
            f.add(NOTE, f"wheels.yaml has no entry for {fp.requirement} (regenerate it)")
            continue
        f.compare(f"wheels.yaml {fp.requirement} Requires-Python", old.requires_python, fp.requires_python)
        for arch in sorted(set(old.pins) | set(fp.pins)):
            f.compare(f"wheels.yaml {fp.requirement} pins on {arch}", old.pins.get(arch), fp.pins.get(arch))


def compare_releases(f: Findings, stored: WheelPins, now: Mapping[str, Sequence[str]]) -> None:
    """Every shared-package version wheels.yaml lists is still on the index; new ones are a note."""
    added = 0
    for name, versions in stored.releases.items():
        have = set(now.get(name, ()))
        gone = [v for v in versions if v not in have]
        f.compare(f"wheels.yaml releases of {name} still on the index", [], gone)
        added += len(have - set(versions))
    if added:
        f.add(NOTE, f"{added} shared-package releases on the index are newer than wheels.yaml (regenerate it)")


def compare_newer(f: Findings, name: str, listed: Iterable[str], project: Project) -> None:
    newest = max(Version(v) for v in listed)
    for v in project.final_versions():
        if v > newest:
            f.add(NEWER, f"{name} {v} is on the index, newer than the data's {newest}")


# --- NVIDIA facts --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fact:
    what: str
    source: str  # id or URL as cited
    url: str
    confidence: str


def nvidia_facts(k: Knowledge) -> list[Fact]:
    """Driver, CUDA and cuDNN entries citing an NVIDIA URL (one line per entry and such source)."""
    entries: list[tuple[str, tuple[str, ...], str]] = []
    entries += [(f"driver branch {b.branch}", b.source, b.confidence) for b in k.t.branches]
    entries += [(f"CUDA {t.version}", t.source, t.confidence) for t in k.t.toolkits]
    entries += [(f"cuDNN {c.version}", c.source, c.confidence) for c in k.t.cudnn]
    out = []
    for what, sources, confidence in entries:
        for s in sources:
            url = s if s.startswith("https://") else (k.t.sources[s].url if s in k.t.sources else "")
            host = urllib.parse.urlparse(url).hostname or ""
            if host == "nvidia.com" or host.endswith(".nvidia.com"):
                out.append(Fact(what, s, url, confidence))
    return out


def reachable(urls: Iterable[str], timeout: float = 5, jobs: int = 8) -> dict[str, bool]:
    """Whether each URL's host answers at all (any HTTP status counts), probed once per host."""
    hosts = sorted({urllib.parse.urlparse(u).hostname or "" for u in urls} - {""})

    def probe(host: str) -> bool:
        try:
            urllib.request.urlopen(urllib.request.Request(f"https://{host}/", method="HEAD"), timeout=timeout)
        except urllib.error.HTTPError:
            return True
        except OSError:
            return False
        return True

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        by_host = dict(zip(hosts, pool.map(probe, hosts), strict=True))
    return {u: by_host.get(urllib.parse.urlparse(u).hostname or "", False) for u in urls}


def report_nvidia(f: Findings, facts: Sequence[Fact], up: Mapping[str, bool]) -> None:
    for fact in facts:
        if not up.get(fact.url, False):
            f.add(UNREACHABLE, f"{fact.what}: source {fact.source} ({fact.url}), confidence {fact.confidence}")
    n = sum(1 for fact in facts if up.get(fact.url, False))
    if n:
        f.add(NOTE, f"{n} NVIDIA-sourced facts have a reachable source; this check has no reader for them")


def compare_uv(f: Findings, sp: StandalonePython, project: Project) -> None:
    """standalone_python.uv_wheels against the index's own file list of that uv release: per
    arch, the same Linux glibc wheels with the same sha256 (python_env installs uv by these)."""
    files = project.files.get(sp.uv, ())
    for arch, pinned in sp.uv_wheels.items():
        index = {w.filename: w.sha256 for w in files if w.arch == arch}
        f.compare(f"uv {sp.uv} wheels [{arch}]", sorted(pinned.items()), sorted(index.items()))


# --- the run -----------------------------------------------------------------------------------


def run(k: Knowledge, stored: WheelPins, reader: IndexReader, probe_nvidia: bool = True) -> Findings:
    f = Findings()
    plugin_names = ("jax-cuda12-plugin", "jax-cuda13-plugin")
    projects = reader.projects(["torch", "tensorflow", "jax", "jaxlib", "uv", *plugin_names])
    empty = [n for n in ("torch", "tensorflow", "jax") if not projects[n].versions]
    if empty:  # a wrong --index answers 404 for everything: that is no index of these frameworks
        raise OSError(f"it lists no {', '.join(empty)}")
    reads = read_pins(reader, targets(k, reader))
    by_req: dict[str, FrameworkPins] = {}
    for r in reads:
        for fp in r.pins.values():
            by_req[fp.requirement] = fp
    for rel in k.t.torch:
        compare_torch(f, rel, projects["torch"], by_req.get(f"torch=={rel.version}"))
    now = release_lists(reader, set(stored.releases) | shared_names(by_req.values()))
    for tf in k.t.tensorflow:
        compare_tensorflow(
            f,
            tf,
            projects["tensorflow"],
            by_req.get(f"tensorflow=={tf.version}"),
            by_req.get(f"tensorflow[and-cuda]=={tf.version}"),
            releases=now,
        )
    plugins = {12: projects["jax-cuda12-plugin"], 13: projects["jax-cuda13-plugin"]}
    for jx in k.t.jax:
        lines = {m: by_req.get(f"jax[cuda{m}]=={jx.version}") for m in (13, 12)}
        compare_jax(f, jx, plugins, lines, jaxlib=projects["jaxlib"])
    if k.t.standalone_python is not None:
        compare_uv(f, k.t.standalone_python, projects["uv"])
    compare_wheels_yaml(f, stored, list(by_req.values()))
    compare_releases(f, stored, now)
    compare_newer(f, "torch", (r.version for r in k.t.torch), projects["torch"])
    compare_newer(f, "tensorflow", (r.version for r in k.t.tensorflow), projects["tensorflow"])
    compare_newer(f, "jax", (r.version for r in k.t.jax), projects["jax"])
    variants = sum(1 for r in k.t.torch for v in r.variants if v.name != r.pypi_default)
    f.add(NOTE, f"{variants} torch variants live only on download.pytorch.org: not on the index, not checked")
    facts = nvidia_facts(k)
    report_nvidia(f, facts, reachable({x.url for x in facts}) if probe_nvidia else {})
    for err in reader.errors:
        f.add(NOTE, f"pip: {err}")
    return f


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m provision.matrix.check", description=__doc__)
    add_reader_arguments(ap, jobs=12)
    ap.add_argument("--no-probe", action="store_true", help="do not probe NVIDIA hosts: report them unreachable")
    args = ap.parse_args(argv)
    start = time.monotonic()
    reader = IndexReader.from_arguments(args)
    try:
        f = run(load_knowledge(), load_wheels(), reader, probe_nvidia=not args.no_probe)
    except OSError as exc:  # the index itself unreachable: nothing was checked
        print(f"knowledge: the index {args.index} cannot be read ({exc}); nothing checked", file=sys.stderr)
        return 2
    order = {CONTRADICTION: 0, NEWER: 1, NOTE: 2, UNREACHABLE: 3}
    for kind, text in sorted(f.lines, key=lambda kt: order[kt[0]]):
        print(f"{kind}: {text}")
    print(
        f"read {reader.pip_runs} pip runs ({reader.cache_hits} METADATA from the cache "
        f"{reader.cache}) in {time.monotonic() - start:.0f} s"
    )
    print("facts checked: " + ", ".join(f"{g} {n}" for g, n in f.groups.items()))
    print(f.summary())
    return 1 if f.count(CONTRADICTION) else 0


if __name__ == "__main__":
    sys.exit(main())
