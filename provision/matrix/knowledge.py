"""Load ``data/*.yaml`` into typed tables and answer lookups by name.

The data is read once per process (:func:`load` is cached) and validated on the way in: a
malformed entry is a bug in the data, reported with the file and entry so that it is fixed
there, never papered over in code.
"""

from __future__ import annotations

import functools
import hashlib
import marshal
import os
import re
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any, cast

from provision.errors import BadInput
from provision.matrix.consistency import DataError, check_gpu_driver_floors, check_sorted
from provision.matrix.model import (
    EOL_PAST,
    Architecture,
    BranchClass,
    Constant,
    CudaToolkit,
    CudnnBuild,
    CudnnRelease,
    DriverBranch,
    Gpu,
    InstanceType,
    Interconnect,
    JaxCudaLine,
    JaxRelease,
    KernelModuleRule,
    MinorCompat,
    OsRelease,
    Price,
    Source,
    StandalonePython,
    Tables,
    TensorflowRelease,
    TorchRelease,
    TorchVariant,
)
from provision.matrix.names import nearest, normalize
from provision.matrix.packaging import PackagingError, build_packaging

_PCI = re.compile(r"^\[?(?:0x)?(10de):(?:0x)?([0-9a-f]{4})\]?$", re.IGNORECASE)
_MONTH = re.compile(r"^\d{4}-(0[1-9]|1[0-2])$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


# Every torch release has CPU wheels (download.pytorch.org/whl/cpu, version tag +cpu) on both archs.
_CPU_VARIANT = TorchVariant(name="cpu", cuda=None, cudnn=None, arch_list=(), ptx=False, aarch64=True, confidence="high")


def normalize_pci_id(text: str) -> str | None:
    """``"10DE:2330"`` / ``"[10de:2330]"`` / ``"0x10de:0x2330"`` -> ``"10de:2330"``; else None."""
    m = _PCI.match(text.strip())
    return f"{m.group(1).lower()}:{m.group(2).lower()}" if m else None


class Knowledge:
    """The compatibility knowledge: typed tables plus name lookups.

    ``version`` is the data's own version (meta.yaml); ``sha256`` covers every data file, so a
    lockfile can tell whether it was resolved with exactly this knowledge.
    """

    def __init__(self, tables: Tables, version: str, sha256: str) -> None:
        self.t = tables
        self.version = version
        self.sha256 = sha256
        self._gpu_index: dict[str, str] = {}
        self._gpus: dict[str, Gpu] = {}
        self._pci: dict[str, Gpu] = {}
        for g in tables.gpus:
            self._gpus[g.name] = g
            for n in (g.name, *g.aliases, *g.nvml_names):
                self._gpu_index.setdefault(normalize(n), g.name)
            for pci in g.pci_ids:
                self._pci[pci] = g
        self._os_index: dict[str, str] = {}
        for o in tables.os_releases.values():
            for n in (o.id, *o.aliases):
                self._os_index[normalize(n)] = o.id
        self._it_index = {normalize(n): n for n in tables.instance_types}

    # --- GPUs -----------------------------------------------------------------------------
    @property
    def gpus(self) -> list[Gpu]:
        return list(self.t.gpus)

    def gpu(self, name: str) -> Gpu:
        """A GPU by canonical name, alias, NVML name or PCI ID; unknown -> BadInput (exit 2)."""
        pci = normalize_pci_id(name)
        if pci is not None:
            found = self._pci.get(pci)
            if found is None:
                raise BadInput(f"unknown GPU PCI ID `{name}`", self.unknown_gpu_fix(pci))
            return found
        return self._gpus[_lookup("GPU", name, self._gpu_index, "see `provision matrix` for known GPUs")]

    def unknown_gpu_fix(self, pci_id: str) -> str:
        """How to describe a GPU whose PCI ID the catalogue lacks: a known model of its architecture."""
        assumed = self.assumed_gpu(pci_id)
        if assumed is None:
            return (
                "its architecture is not known either: give --gpu a known model of the same architecture "
                "(`provision matrix` lists them)"
            )
        arch = assumed[0].arch
        same = [g.name for g in self.t.gpus if g.arch == arch and g.compute_capability == assumed[0].compute_capability]
        same = same or [g.name for g in self.t.gpus if g.arch == arch]
        return (
            f"by its device ID it is a {arch} GPU (compute capability {assumed[0].compute_capability}): "
            f"give a known {arch} model, e.g. --gpu {same[0]}; see `provision matrix`"
        )

    def gpu_by_pci_id(self, pci_id: str) -> Gpu | None:
        """The model for an lspci ID like ``10de:2330`` (any case), or None when unknown."""
        pci = normalize_pci_id(pci_id)
        return self._pci.get(pci) if pci else None

    def assumed_gpu(self, pci_id: str, compute_capability: str | None = None) -> tuple[Gpu, str] | None:
        """A stand-in model for a GPU the catalogue does not know, and what is assumed of it: its
        architecture from its device ID's range in the driver's name table (gpus.yaml
        pci_device_ranges) or from ``compute_capability`` (NVML's, on a host with a driver); None
        when neither tells. The stand-in takes the architecture's rules (driver floor, kernel
        modules, CUDA range); its memory is unknown (0)."""
        pci = normalize_pci_id(pci_id)
        if pci is None:
            return None
        device = int(pci.split(":")[1], 16)
        found = next(((a, cc) for lo, hi, a, cc in self.t.pci_device_ranges if lo <= device <= hi), None)
        how = "its device ID's range in the driver's name table"
        if compute_capability:  # the driver's own answer beats the range
            arch = next(
                (a for a in self.t.architectures.values() if compute_capability in a.compute_capabilities), None
            )
            if arch is not None:
                found, how = (arch.name, compute_capability), "NVML's compute capability"
        if found is None:
            return None
        arch = self.t.architectures[found[0]]
        gpu = Gpu(
            name=pci,
            arch=arch.name,
            compute_capability=found[1],
            memory_gib=0.0,
            pci_ids=(pci,),
            pci_forms={pci: "unknown"},
            nvml_names=(),
            aliases=(),
            needs_fabric_manager=False,
            kernel_modules=arch.kernel_modules,
            min_driver_branch=arch.min_driver_branch,
            last_driver_branch=arch.last_driver_branch,
            min_cuda=arch.first_cuda,
            last_cuda=arch.last_cuda,
            host_arch=None,
            note="not in the catalogue: resolved for its architecture",
            source=("gpus.yaml pci_device_ranges",),
            confidence="low",
        )
        why = (
            f"GPU {pci} is not in the catalogue: resolved as a {arch.name} GPU of compute capability "
            f"{found[1]} (from {how}); if that is wrong, describe it with --gpu, a known {arch.name} model"
        )
        return gpu, why

    def architecture(self, name: str) -> Architecture:
        return self.t.architectures[name]

    # --- EC2 --------------------------------------------------------------------------------
    def instance_type(self, name: str) -> InstanceType:
        key = _lookup("EC2 instance type", name, self._it_index, "see `provision matrix --instances`")
        return self.t.instance_types[key]

    @property
    def instance_types(self) -> list[InstanceType]:
        return list(self.t.instance_types.values())

    # --- OS ---------------------------------------------------------------------------------
    def os_release(self, name: str) -> OsRelease:
        # the supported names come from the data, so the error can never list a stale set
        supported = f"supported: {', '.join(self.t.os_releases)} (os-release ID-VERSION_ID)"
        key = _lookup("OS", name, self._os_index, supported, always=supported)
        return self.t.os_releases[key]

    @property
    def os_releases(self) -> list[OsRelease]:
        return list(self.t.os_releases.values())

    # --- versions ---------------------------------------------------------------------------
    def toolkit(self, version: str) -> CudaToolkit:
        want = ".".join(version.strip().split(".")[:2])
        for tk in self.t.toolkits:
            if tk.version == want:
                return tk
        known = [tk.version for tk in self.t.toolkits]
        close = _nearest_versions(want, known)
        raise BadInput(
            f"unknown CUDA toolkit version `{version}`",
            f"known versions: {', '.join(close or known[:4])}",
            suggestions=close,
        )

    def branch(self, branch: int) -> DriverBranch | None:
        return next((b for b in self.t.branches if b.branch == branch), None)

    def cudnn_release(self, version: str) -> CudnnRelease:
        want = version.strip()
        for rel in self.t.cudnn:  # newest first: "9.10" finds the newest 9.10.x
            if rel.version == want or rel.version.startswith(want + "."):
                return rel
        known = [r.version for r in self.t.cudnn]
        close = _nearest_versions(want, known)
        raise BadInput(
            f"unknown cuDNN version `{version}`",
            f"known versions: {', '.join(close or known[:4])}",
            suggestions=close,
        )

    def minor_floor(self, cuda_major: int) -> str | None:
        mc = self.t.minor_compat.get(cuda_major)
        return mc.min_driver if mc else None


def _torch_variant(v: dict[str, Any], confidence: str) -> TorchVariant:
    """One pytorch.yaml variant. A CUDA variant with an aarch64 build must give that build's own
    ``arch_list_aarch64``: the sbsa builds compile fewer architectures (no sm_75 from 2.7 on), so
    the x86_64 list is no stand-in for it (a T4G would get a torch without its kernels)."""
    arch_list = tuple(str(a) for a in v.get("arch_list", []))
    if v.get("aarch64") and arch_list and "arch_list_aarch64" not in v:
        raise DataError(f"pytorch variant {v['name']}: aarch64: true without its own arch_list_aarch64")
    return TorchVariant(
        name=str(v["name"]),
        cuda=_opt_str(v.get("cuda")),
        cudnn=_opt_str(v.get("cudnn")),
        arch_list=arch_list,
        ptx=bool(v.get("ptx", False)),
        aarch64=bool(v.get("aarch64", False)),
        confidence=str(v.get("confidence", confidence)),
        arch_list_aarch64=tuple(str(a) for a in v.get("arch_list_aarch64", arch_list)),
        arch_list_aarch64_confidence="high" if v.get("arch_list_aarch64_measured", True) else "medium",
    )


def _lookup(what: str, name: str, index: dict[str, str], otherwise: str, always: str = "") -> str:
    """The canonical name for ``name`` in ``index``; unknown -> BadInput naming the nearest.

    ``always`` is added to the hint even when near names are suggested (the OS list is short).
    """
    key = index.get(normalize(name))
    if key is not None:
        return key
    close = nearest(name, index)
    hint = f"did you mean {', '.join(close)}?" if close else otherwise
    if close and always:
        hint = f"{hint} {always}"
    raise BadInput(f"unknown {what} `{name}`", hint, suggestions=close)


def _nearest_versions(want: str, known: list[str]) -> list[str]:
    try:
        target = tuple(int(p) for p in want.split(".")[:2])
    except ValueError:
        return known[:3]

    def dist(v: str) -> tuple[int, int]:
        parts = tuple(int(p) for p in v.split(".")[:2])
        return abs(parts[0] - target[0]), abs(parts[1] - (target[1] if len(target) > 1 else 0))

    return sorted(known, key=dist)[:2]


# --- loading ----------------------------------------------------------------------------------


def _files() -> list[tuple[str, bytes]]:
    root = resources.files("provision.matrix") / "data"
    out = [(p.name, p.read_bytes()) for p in root.iterdir() if p.name.endswith(".yaml")]
    return sorted(out)


def parse_yaml(text: bytes) -> Any:
    """A data file's YAML (the C loader where PyYAML has it: the knowledge loads on every start)."""
    import yaml  # noqa: PLC0415 (here, not at the top: with the parsed copy cached, a start needs no YAML, 10 ms)

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return yaml.load(text, Loader=loader)


@functools.lru_cache(maxsize=1)
def load() -> Knowledge:
    """The knowledge shipped with this package (parsed once per process)."""
    files = _files()
    digest = hashlib.sha256()
    for name, data in files:
        digest.update(name.encode() + b"\0" + data + b"\0")
    merged = cached_yaml(digest.hexdigest(), lambda: _merge(files))
    tables = build_tables(merged)
    return Knowledge(tables, str(merged.get("version", "0")), digest.hexdigest())


def _merge(files: list[tuple[str, bytes]]) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for name, data in files:
        if name == "wheels.yaml":
            continue  # provision.matrix.wheels parses it on first use (only a resolve of two frameworks reads it)
        for key, value in (parse_yaml(data) or {}).items():
            if key in merged:
                raise DataError(f"data/{name}: section `{key}` is defined twice")
            merged[key] = value
    return merged


def cached_yaml(digest: str, parse: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Data files, parsed once per version of them: YAML construction was most of a
    cold `provision resolve` (about 80 of 180 ms). The copy is marshal (plain data: loading it runs
    nothing), named by the files' sha256 so that changed data is parsed anew; any trouble with the
    cache (a read-only home, a truncated file) only means parsing the YAML."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    path = Path(base) / "provision" / "knowledge" / f"{digest}.marshal"
    try:
        doc = marshal.loads(path.read_bytes())
        if isinstance(doc, dict):
            return doc
    except (OSError, EOFError, ValueError, TypeError):
        pass
    merged = parse()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_bytes(marshal.dumps(merged))
        os.replace(tmp, path)  # atomic: a concurrent reader sees the whole file or none
    except (OSError, ValueError):
        pass
    return merged


def build_tables(d: dict[str, Any]) -> Tables:
    t = Tables()
    t.sources = {k: Source(k, str(v["url"]), str(v.get("what", ""))) for k, v in d.get("sources", {}).items()}
    t.default_os = str(d.get("default_os", t.default_os))
    t.snapshot = str(d.get("snapshot_date", ""))
    for a in d.get("architectures", []):
        t.architectures[a["name"]] = Architecture(
            name=a["name"],
            compute_capabilities=tuple(a["compute_capabilities"]),
            first_cuda=str(a["first_cuda"]),
            min_driver_branch=int(a["min_driver_branch"]),
            last_driver_branch=_opt_int(a.get("last_driver_branch")),
            last_cuda=_opt_str(a.get("last_cuda")),
            kernel_modules=cast(KernelModuleRule, a["kernel_modules"]),
            source=_src(a),
            confidence=str(a.get("confidence", "high")),
        )
    for g in d.get("gpus", []):
        arch = t.architectures.get(g["arch"])
        if arch is None:
            raise DataError(f"gpu {g['name']}: unknown architecture {g['arch']!r}")
        pci_forms = {str(k).lower(): str(v) for k, v in (g.get("pci_ids") or {}).items()}
        t.gpus.append(
            Gpu(
                name=g["name"],
                arch=arch.name,
                compute_capability=str(g["compute_capability"]),
                memory_gib=float(g["memory_gib"]),
                pci_ids=tuple(pci_forms),
                pci_forms=pci_forms,
                nvml_names=tuple(g.get("nvml_names", [])),
                aliases=tuple(g.get("aliases", [])),
                needs_fabric_manager=bool(g.get("fabric_manager", False)),
                kernel_modules=cast(KernelModuleRule, g.get("kernel_modules", arch.kernel_modules)),
                min_driver_branch=int(g.get("min_driver_branch", arch.min_driver_branch)),
                min_driver=_opt_str(g.get("min_driver")),
                last_driver_branch=_opt_int(g.get("last_driver_branch", arch.last_driver_branch)),
                min_cuda=str(g.get("min_cuda", arch.first_cuda)),
                last_cuda=_opt_str(g.get("last_cuda", arch.last_cuda)),
                host_arch=_opt_str(g.get("host_arch")),
                note=str(g.get("note", "")),
                source=_src(g),
                confidence=str(g.get("confidence", "high")),
            )
        )
    ranges = []
    for r in d.get("pci_device_ranges") or []:
        if r["arch"] not in t.architectures:
            raise DataError(f"pci_device_ranges: unknown architecture {r['arch']!r}")
        ranges.append((int(str(r["first"]), 16), int(str(r["last"]), 16), str(r["arch"]), str(r["compute_capability"])))
    t.pci_device_ranges = tuple(ranges)
    gpus = {g.name: g for g in t.gpus}
    for fam in d.get("instance_families", []):
        gpu = gpus.get(fam["gpu"])
        if gpu is None:
            raise DataError(f"instance family {fam['family']}: unknown GPU {fam['gpu']!r}")
        ic = fam.get("interconnect")
        interconnect = Interconnect(str(ic["kind"]), _src(ic), str(ic.get("confidence", "low"))) if ic else None
        for size, count in fam["sizes"].items():
            p = (fam.get("prices") or {}).get(size)
            price = (
                Price(float(p["usd_per_hour"]), str(p["read"]), _src(p), str(p.get("confidence", "low"))) if p else None
            )
            t.instance_types[size] = InstanceType(
                name=size,
                family=fam["family"],
                gpu=gpu,
                gpu_count=int(count),
                arch=str(fam["arch"]),
                fabric_manager=bool((fam.get("fabric_manager") or {}).get(size, False)),
                efa=bool((fam.get("efa") or {}).get(size, False)),
                gpu_memory_gib=float(fam.get("gpu_memory_gib", gpu.memory_gib)),
                price=price,
                note=str(fam.get("note", "")),
                source=_src(fam),
                confidence=str(fam.get("confidence", "high")),
                interconnect=interconnect,
            )
    for c in d.get("finetune_memory", []):
        t.finetune_memory[c["name"]] = Constant(
            name=c["name"],
            value=c["value"] if isinstance(c["value"], bool) else float(c["value"]),
            what=str(c.get("what", "")),
            source=_src(c),
            confidence=str(c.get("confidence", "low")),
        )
    for o in d.get("os_releases", []):
        t.os_releases[o["id"]] = OsRelease(
            id=o["id"],
            family=o["family"],
            pythons=tuple(str(p) for p in o["pythons"]),
            gcc=int(o["gcc"]),
            archs=tuple(o.get("archs", ["x86_64", "aarch64"])),
            install_methods=tuple(o["install_methods"]),
            repo_name=_opt_str(o.get("repo_name")),
            eol=_opt_str(o.get("eol")),
            aliases=tuple(o.get("aliases", [])),
            source=_src(o),
            confidence=str(o.get("confidence", "medium")),
            unmanaged=_opt_str(o.get("unmanaged")),
            distro_cuda_toolkit=_opt_str(o.get("distro_cuda_toolkit")),
            repo_first_branch=int(o["repo_first_branch"]) if o.get("repo_first_branch") else None,
            codename=_opt_str(o.get("codename")),
        )
    sp = d.get("standalone_python")
    if sp:
        t.standalone_python = StandalonePython(
            uv=str(sp["uv"]),
            uv_wheels=_uv_wheels(sp),
            pythons=tuple(str(p) for p in sp["pythons"]),
            archs=tuple(sp["archs"]),
            read=str(sp["read"]),
            source=_src(sp),
            confidence=str(sp.get("confidence", "medium")),
        )
    for m in d.get("minor_version_compatibility", []):
        major = int(m["cuda_major"])
        t.minor_compat[major] = MinorCompat(major, str(m["min_driver"]), _src(m))
    for c in d.get("cuda_toolkits", []):
        t.toolkits.append(
            CudaToolkit(
                version=str(c["version"]),
                releases={str(k): str(v) for k, v in (c.get("releases") or {}).items()},
                full_compat_min_driver=_opt_str(c.get("full_compat_min_driver")),
                minor_compat_min_driver=str(c["minor_compat_min_driver"]),
                sm_min=int(c["sm_min"]),
                sm_max=int(c["sm_max"]),
                gcc_max=_opt_int(c.get("gcc_max")),
                os=tuple(c.get("os", [])),
                os_confidence=str(c.get("os_confidence", "low")),
                source=_src(c),
                confidence=str(c.get("confidence", "high")),
            )
        )
    for b in d.get("driver_branches", []):
        eol = _opt_str(b.get("eol"))
        if eol is not None and eol != EOL_PAST and not _MONTH.match(eol):
            raise DataError(f"driver branch {b['branch']}: eol {eol!r} is neither YYYY-MM, {EOL_PAST!r} nor null")
        t.branches.append(
            DriverBranch(
                branch=int(b["branch"]),
                cls=cast(BranchClass, b["class"]),
                max_cuda=str(b["max_cuda"]),
                eol=eol,
                newest=_opt_str(b.get("newest")),
                releases=tuple(str(r) for r in b.get("releases", [])),
                distro={str(k): str(v) for k, v in (b.get("distro") or {}).items()},
                note=str(b.get("note", "")),
                source=_src(b),
                confidence=str(b.get("confidence", "high")),
                tagged=tuple(str(r) for r in (d.get("release_tags") or {}).get(str(b["branch"]), [])),
            )
        )
    floors = d.get("cudnn_series_min_cc") or []
    t.cudnn_series_min_cc = tuple((str(f["from"]), str(f["min_cc"])) for f in floors)
    if not floors or floors[-1]["from"] != "0":
        raise DataError('cudnn_series_min_cc must end with the series from "0" (every release has a floor)')
    t.cudnn_first_for_arch = {str(a): str(v) for a, v in (d.get("cudnn_first_for_architecture") or {}).items()}
    om = d.get("open_modules_geforce") or {}
    t.open_modules_geforce_beta = int(om.get("beta_from", 0))
    t.open_modules_geforce_production = int(om.get("production_from", 0))
    if not 0 < t.open_modules_geforce_beta <= t.open_modules_geforce_production:
        raise DataError("open_modules_geforce needs beta_from <= production_from")
    for r in d.get("cudnn", []):
        t.cudnn.append(
            CudnnRelease(
                version=str(r["version"]),
                builds=tuple(CudnnBuild(int(b["cuda_major"]), str(b["min_driver"])) for b in r["builds"]),
                min_cc=str(r["min_cc"]),
                max_cuda_minor={int(b["cuda_major"]): str(b["max_cuda"]) for b in r["builds"] if "max_cuda" in b},
                source=_src(r),
                confidence=str(r.get("confidence", "high")),
                sass=tuple(str(cc) for cc in r.get("sass", [])),
            )
        )
    for r in d.get("pytorch", []):
        variants = tuple(_torch_variant(v, str(r.get("confidence", "high"))) for v in r["variants"])
        variants = (*variants, _CPU_VARIANT)
        for version in r["releases"]:
            t.torch.append(
                TorchRelease(
                    version=str(version),
                    python=tuple(str(p) for p in r["python"]),
                    pypi_default=str(r["pypi_default"]),
                    variants=variants,
                    pypi_aarch64_cuda=bool(r.get("pypi_aarch64_cuda", False)),
                    nccl=_opt_str(r.get("nccl")),
                    note=str(r.get("note", "")),
                    source=_src(r),
                    confidence=str(r.get("confidence", "high")),
                    python_x86_64_only=tuple(str(p) for p in r.get("python_x86_64_only", [])),
                )
            )
    for r in d.get("tensorflow", []):
        python = tuple(str(p) for p in r["python"])
        and_cuda = bool(r["and_cuda"])
        # Without the field: the extra installs wherever the release has wheels.
        and_cuda_python = tuple(str(p) for p in r.get("and_cuda_python", python if and_cuda else ()))
        if not set(and_cuda_python) <= set(python) or (and_cuda_python and not and_cuda):
            raise DataError(f"tensorflow {r['version']}: and_cuda_python {list(and_cuda_python)} outside its extra")
        t.tensorflow.append(
            TensorflowRelease(
                version=str(r["version"]),
                python=python,
                cuda=str(r["cuda"]),
                cudnn=str(r["cudnn"]),
                and_cuda=and_cuda,
                exact_pins=bool(r.get("exact_pins", False)),
                nccl_min=_opt_str(r.get("nccl_min")),
                min_cc=str(r.get("min_cc", "5.0")),
                note=str(r.get("note", "")),
                source=_src(r),
                confidence=str(r.get("confidence", "high")),
                and_cuda_python=and_cuda_python,
                and_cuda_why=str(r.get("and_cuda_why", "")),
            )
        )
    for line in d.get("jax_cuda_lines", []):
        t.jax_lines[int(line["cuda_major"])] = JaxCudaLine(
            extra=str(line["extra"]),
            cuda_major=int(line["cuda_major"]),
            min_driver=str(line["min_driver"]),
            min_cc=str(line["min_cc"]),
            source=_src(line),
            confidence=str(line.get("confidence", "high")),
        )
    for r in d.get("jax", []):
        t.jax.append(
            JaxRelease(
                version=str(r["version"]),
                python=tuple(str(p) for p in r["python"]),
                cuda_majors=tuple(int(m) for m in r["cuda_majors"]),
                cudnn_min={int(k): str(v) for k, v in (r.get("cudnn_min") or {}).items()},
                note=str(r.get("note", "")),
                source=_src(r),
                confidence=str(r.get("confidence", "high")),
            )
        )
    p = d.get("packaging")
    if p:
        try:
            t.packaging = build_packaging(p)
        except (PackagingError, KeyError, TypeError) as exc:
            raise DataError(f"data/packaging.yaml: {exc}") from None
        t.torch_index = t.packaging.torch_index
        t.pypi_index = t.packaging.pypi_index
    check_sorted(t)
    check_gpu_driver_floors(t)
    return t


def _uv_wheels(sp: dict[str, Any]) -> dict[str, dict[str, str]]:
    """standalone_python.uv_wheels: every arch of ``archs`` has uv's wheels, each a file of that
    uv release with a sha256 (python_env refuses any other file, so a typo here is caught now)."""
    wheels = sp.get("uv_wheels") or {}
    out: dict[str, dict[str, str]] = {}
    for arch in sp["archs"]:
        files = {str(k): str(v) for k, v in (wheels.get(arch) or {}).items()}
        if not files:
            raise DataError(f"data: standalone_python.uv_wheels has no wheel of uv for {arch}")
        for name, sha in files.items():
            if not name.startswith(f"uv-{sp['uv']}-") or not name.endswith(".whl") or not _SHA256.fullmatch(sha):
                raise DataError(
                    f"data: standalone_python.uv_wheels.{arch}: {name} is no uv {sp['uv']} wheel, or no sha256"
                )
        out[str(arch)] = files
    return out


def _src(entry: dict[str, Any]) -> tuple[str, ...]:
    s = entry.get("source")
    if s is None:
        return ()
    return (str(s),) if isinstance(s, str) else tuple(str(x) for x in s)


def _opt_str(v: Any) -> str | None:
    return None if v is None else str(v)


def _opt_int(v: Any) -> int | None:
    return None if v is None else int(v)
