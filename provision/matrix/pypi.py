"""Read the package index: release lists (simple API) and wheel METADATA (pip's metadata-only path).

This module owns every read of PyPI that the knowledge makes about itself: ``wheels.yaml`` is
written from it (:mod:`provision.matrix.wheels_read`) and ``make check-knowledge``
(:mod:`provision.matrix.check`) compares the data with it, so both see the index the same way.

METADATA comes from ``pip install --dry-run --report - --no-deps --use-feature=fast-deps``: pip
takes the PEP 658 ``.metadata`` file where the index serves one and otherwise reads the wheel's
``*.dist-info/METADATA`` with HTTP range requests (its lazy wheel), never the whole wheel (without
fast-deps pip downloads it: 888 MB for torch 2.8.0 x86_64, measured 27 s here). Results are cached
per input (name, version, Python, arch, index) as JSON under the cache directory: a wheel's
METADATA never changes once uploaded.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from provision.matrix.wheels import ARCHS, PYTHONS

PYPI = "https://pypi.org/simple"
# Every manylinux glibc tag a Linux wheel of the frameworks carries (pip expands only the legacy
# manylinux2014/2010 aliases itself, so torch 2.4's manylinux1 wheel needs its tag spelled out).
_GLIBC = range(5, 40)
_LEGACY = ("manylinux2014", "manylinux2010", "manylinux1")


def default_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "provision" / "pypi"


def platforms(arch: str) -> list[str]:
    """pip ``--platform`` values for any manylinux wheel of ``arch``."""
    return [f"manylinux_2_{g}_{arch}" for g in reversed(_GLIBC)] + [f"{p}_{arch}" for p in _LEGACY]


@dataclass(frozen=True)
class WheelFile:
    """One file of a release on the index (from the simple API)."""

    filename: str
    requires_python: str | None
    sha256: str | None = None  # as the index lists it (PEP 691 ``hashes``)

    @property
    def arch(self) -> str | None:
        """``x86_64`` / ``aarch64`` for a Linux wheel, ``any`` for a pure one, else None."""
        tags = self._tags()
        if not tags:
            return None
        plats = {t.platform for t in tags}
        if plats == {"any"}:
            return "any"
        for arch in ARCHS:
            if any(p.endswith(arch) and p.startswith("manylinux") for p in plats):
                return arch
        return None

    @property
    def pythons(self) -> set[str]:
        """CPython versions of a compiled wheel (``cp311`` -> 3.11; free-threaded ``cp313t`` left out)."""
        out = set()
        for t in self._tags():
            if t.interpreter.startswith("cp") and not t.abi.endswith("t"):
                digits = t.interpreter[2:]
                out.add(f"{digits[0]}.{digits[1:]}")
        return out

    def _tags(self) -> frozenset[Any]:
        if not self.filename.endswith(".whl"):
            return frozenset()
        try:
            return parse_wheel_filename(self.filename)[3]
        except InvalidWheelFilename:
            return frozenset()


@dataclass(frozen=True)
class Project:
    """A project's release list and files (simple API, JSON form)."""

    name: str
    versions: tuple[str, ...]  # oldest first, as the index orders them by version
    files: dict[str, tuple[WheelFile, ...]]  # version -> files

    def final_versions(self) -> list[Version]:
        out = []
        for v in self.versions:
            try:
                parsed = Version(v)
            except InvalidVersion:
                continue
            if not parsed.is_prerelease and not parsed.is_devrelease:
                out.append(parsed)
        return sorted(out)


@dataclass(frozen=True)
class Metadata:
    """What pip read from one wheel's METADATA."""

    name: str
    version: str
    filename: str
    requires_dist: tuple[str, ...]
    requires_python: str | None
    provides_extra: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_json(d: dict[str, Any]) -> Metadata:
        return Metadata(
            name=str(d["name"]),
            version=str(d["version"]),
            filename=str(d["filename"]),
            requires_dist=tuple(str(r) for r in d.get("requires_dist") or ()),
            requires_python=d.get("requires_python"),
            provides_extra=tuple(str(e) for e in d.get("provides_extra") or ()),
        )


@dataclass(frozen=True)
class Want:
    """One METADATA read: ``name==version`` as a wheel for ``python`` on Linux ``arch``."""

    name: str
    version: str
    python: str
    arch: str

    @property
    def requirement(self) -> str:
        return f"{self.name}=={self.version}"


def _positive(text: str) -> int:
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, not {n}")
    return n


def add_reader_arguments(ap: argparse.ArgumentParser, jobs: int) -> None:
    """The options every command that reads the index takes (the check and the wheels.yaml writer)."""
    ap.add_argument("--cache", type=Path, default=None, help="METADATA cache (default ~/.cache/provision/pypi)")
    ap.add_argument("--index", default=PYPI)
    ap.add_argument("--jobs", type=_positive, default=jobs, help="parallel pip runs and page fetches")


class IndexReader:
    """Reads one package index; METADATA reads are cached on disk, release lists in memory."""

    def __init__(self, cache: Path | None = None, index: str = PYPI, jobs: int = 8, timeout: float = 30) -> None:
        self.cache = cache or default_cache()
        self.index = index.rstrip("/")
        self.jobs = jobs
        self.timeout = timeout
        self._projects: dict[str, Project] = {}
        self.pip_runs = 0
        self.errors: list[str] = []  # pip's last stderr line per failed run
        self.cache_hits = 0

    @classmethod
    def from_arguments(cls, args: argparse.Namespace) -> IndexReader:
        return cls(args.cache, args.index, args.jobs)

    # --- release lists -----------------------------------------------------------------------
    def project(self, name: str) -> Project:
        key = canonicalize_name(name)
        if key not in self._projects:
            self._projects[key] = self._fetch_project(key)
        return self._projects[key]

    def projects(self, names: Iterable[str]) -> dict[str, Project]:
        """Several release lists, fetched in parallel."""
        todo = sorted({canonicalize_name(n) for n in names} - set(self._projects))
        with ThreadPoolExecutor(max_workers=self.jobs) as pool:
            for key, proj in zip(todo, pool.map(self._fetch_project, todo), strict=True):
                self._projects[key] = proj
        return {canonicalize_name(n): self._projects[canonicalize_name(n)] for n in names}

    def _fetch_project(self, key: str) -> Project:
        url = f"{self.index}/{key}/"
        req = urllib.request.Request(url, headers={"Accept": "application/vnd.pypi.simple.v1+json"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                doc = json.load(resp)
        except OSError as exc:
            if getattr(exc, "code", None) == 404:
                return Project(key, (), {})
            raise
        except ValueError as exc:  # an index that answers with no PEP 691 JSON: unreadable, like no answer
            raise OSError(f"{url} is no simple-API JSON page ({exc})") from exc
        return parse_simple(key, doc)

    # --- METADATA ------------------------------------------------------------------------------
    def metadata(self, wants: Sequence[Want]) -> dict[Want, Metadata | None]:
        """METADATA for each input (None: no wheel for that Python and arch), cached per input."""
        out: dict[Want, Metadata | None] = {}
        todo: list[Want] = []
        for w in dict.fromkeys(wants):
            hit = self._cached(w)
            if hit is not None:
                out[w] = hit
                self.cache_hits += 1
            else:
                todo.append(w)
        with ThreadPoolExecutor(max_workers=self.jobs) as pool:
            for part in pool.map(self._read_batch, _batches(todo, self.jobs)):
                out.update(part)
        return out

    def _cache_path(self, w: Want) -> Path:
        key = f"{self.index}|{canonicalize_name(w.name)}|{w.version}|{w.python}|{w.arch}"
        return self.cache / "metadata" / (hashlib.sha256(key.encode()).hexdigest()[:32] + ".json")

    def _cached(self, w: Want) -> Metadata | None:
        path = self._cache_path(w)
        try:
            return Metadata.from_json(json.loads(path.read_text()))
        except (OSError, ValueError, KeyError):
            return None

    def _read_batch(self, batch: Sequence[Want]) -> dict[Want, Metadata | None]:
        """One pip run for a batch of one Python and arch (distinct names); singly on a failure."""
        found = self._pip(batch)
        if found is None:
            if len(batch) == 1:
                return {batch[0]: None}
            out: dict[Want, Metadata | None] = {}
            for w in batch:
                out.update(self._read_batch([w]))
            return out
        result: dict[Want, Metadata | None] = {}
        for w in batch:
            md = found.get(canonicalize_name(w.name))
            result[w] = md
            if md is not None:
                path = self._cache_path(w)
                path.parent.mkdir(parents=True, exist_ok=True)
                tmp = path.with_suffix(f".{os.getpid()}.tmp")
                tmp.write_text(json.dumps(md.to_json(), indent=1))
                tmp.replace(path)
        return result

    def _pip(self, batch: Sequence[Want]) -> dict[str, Metadata] | None:
        python, arch = batch[0].python, batch[0].arch
        target = [f"--platform={p}" for p in platforms(arch)]
        self.pip_runs += 1
        proc = pip_dry_run([w.requirement for w in batch], python, target, ["--index-url", self.index], deps=False)
        if proc.returncode != 0:
            tail = proc.stderr.strip().splitlines()[-1:] or [f"exit {proc.returncode}"]
            self.errors.append(f"{' '.join(w.requirement for w in batch)} (Python {python}, {arch}): {tail[0]}")
            return None
        report = json.loads(proc.stdout)
        out: dict[str, Metadata] = {}
        for item in report.get("install", []):
            # the report's metadata has the cache's keys (PEP 566 JSON form); the file name is the URL's
            url = str(item["download_info"]["url"])
            md = Metadata.from_json({**item["metadata"], "filename": url.rsplit("/", 1)[-1].split("#", 1)[0]})
            out[canonicalize_name(md.name)] = md
        return out


def pip_dry_run(
    requirements: Sequence[str],
    python: str,
    target: Sequence[str],
    sources: Sequence[str],
    *,
    deps: bool,
    env: Mapping[str, str] | None = None,
    timeout: float = 600,
) -> subprocess.CompletedProcess[str]:
    """pip's resolver on metadata alone: ``install --dry-run --report -`` for a Python and platform
    (``target``: ``--platform`` / ``--abi`` options) from ``sources`` (index options). ``deps``:
    resolve the dependencies too (the lock's wheel closure, :mod:`provision.fleet.closure`), or
    read the named wheels' METADATA only (the knowledge's reads). Wheels only, never a build.
    """
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "--isolated",  # the given sources alone: no local find-links / extra indexes from pip.conf
        "install",
        "--dry-run",
        "--ignore-installed",
        *([] if deps else ["--no-deps"]),
        "--report",
        "-",
        "--quiet",
        "--no-cache-dir",
        "--disable-pip-version-check",
        "--use-feature=fast-deps",
        "--only-binary=:all:",
        "--python-version",
        python,
        *target,
        *sources,
        *requirements,
    ]
    return subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        env=None if env is None else dict(env),
    )


def parse_simple(name: str, doc: dict[str, Any]) -> Project:
    """A simple-API JSON page (PEP 691) -> :class:`Project` (yanked files left out)."""
    files: dict[str, list[WheelFile]] = {}
    for f in doc.get("files", []):
        if f.get("yanked"):
            continue
        version = _file_version(name, str(f["filename"]))
        if version is not None:
            sha256 = (f.get("hashes") or {}).get("sha256")
            files.setdefault(version, []).append(
                WheelFile(str(f["filename"]), f.get("requires-python"), None if sha256 is None else str(sha256))
            )
    versions = tuple(str(v) for v in doc.get("versions", []))
    return Project(name, versions, {v: tuple(fs) for v, fs in files.items()})


def _file_version(name: str, filename: str) -> str | None:
    if filename.endswith(".whl"):
        try:
            return str(parse_wheel_filename(filename)[1])
        except InvalidWheelFilename:
            return None
    stem = filename.removesuffix(".tar.gz").removesuffix(".zip")
    head, _, version = stem.rpartition("-")
    return version if head and canonicalize_name(head) == canonicalize_name(name) else None


def pick_python(project: Project, version: str, arch: str, prefer: Sequence[str] = ()) -> str | None:
    """The Python to read ``version``'s wheel for ``arch`` with: a preferred one it has a wheel for,
    else its newest CPython wheel; for a pure or ``py3-none-<platform>`` wheel the newest its
    Requires-Python allows."""
    files = project.files.get(version, ())
    compiled = set().union(*(f.pythons for f in files if f.arch == arch)) if files else set()
    if compiled:
        for p in prefer:
            if p in compiled:
                return p
        return max(compiled, key=Version)
    pure = [f for f in files if f.arch == arch and not f.pythons] or [f for f in files if f.arch == "any"]
    if not pure:
        return None
    try:
        spec = SpecifierSet(pure[0].requires_python or "")
    except InvalidSpecifier:
        spec = SpecifierSet()
    for p in (*prefer, *PYTHONS):
        if spec.contains(p):
            return p
    return None


def _batches(wants: Sequence[Want], jobs: int) -> list[list[Want]]:
    """Group by (Python, arch); a batch holds one version per name (pip takes one of each) and
    is small enough that the batches spread over ``jobs`` workers."""
    groups: dict[tuple[str, str], list[Want]] = {}
    for w in wants:
        groups.setdefault((w.python, w.arch), []).append(w)
    size = max(1, min(8, -(-len(wants) // max(1, jobs))))
    out: list[list[Want]] = []
    for items in groups.values():
        open_batches: list[list[Want]] = []
        for w in items:
            name = canonicalize_name(w.name)
            target = next(
                (b for b in open_batches if len(b) < size and all(canonicalize_name(x.name) != name for x in b)),
                None,
            )
            if target is None:
                target = []
                open_batches.append(target)
            target.append(w)
        out += open_batches
    return out
