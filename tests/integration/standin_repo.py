"""A local, signed, flat apt repository of STAND-IN packages that carry NVIDIA's real package names,
version strings and relationships, generated from a package plan and served over HTTP on the
test bridge.

NVIDIA's CUDA repository cannot be reached from the test hosts, and its packages need a GPU to
be of any use, so the `nvidia-repo` method is tested against this. The packages are made from
a lock group's ``packages`` (the plan the roles install: ``install`` entries with NVIDIA's names
and apt version expressions) through a small relationship table (RULES, each rule with its
source): the branch in the names below 590 (nvidia-open-<branch>; nvidia-fabricmanager-<branch>
below 580), the unversioned names from then on (nvidia-open, cuda-drivers, nvidia-fabricmanager),
the pinning packages (nvidia-driver-pinning-<branch> versioned <branch>-N,
nvidia-driver-pinning-<x.y.z> with its apt preferences file), and what each pulls in at its version. The layout is NVIDIA's
flat one (``deb [signed-by=KEY] URL/ /``, under ``compute/cuda/repos/<distro>/x86_64``), signed
with a throwaway gpg key that stands in for NVIDIA's (3bf863cc; 8793F200 on debian13) and whose
fingerprint the test pins like the real one. The "kernel module" is a tiny ELF object whose
.modinfo says the driver version, installed for a stand-in kernel, so the role's `modinfo`
check reads a real module header. Services are oneshot units that stay active.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from provision.fleet.apt_repo import index_and_sign
from tests.support.http_server import serving_folder as serve  # noqa: F401 (the stand-in's callers use sr.serve)

STANDIN_KERNEL = "6.1.0-99-standin"


@dataclass(frozen=True)
class Deb:
    name: str
    version: str
    depends: str = ""
    files: tuple[tuple[str, str, int], ...] = ()  # (path, content, mode)
    postinst: str = ""
    extra: str = ""  # more control fields


def _module_ko(version: str, workdir: Path) -> bytes:
    """An ELF object with a .modinfo section: what modinfo reads from a real nvidia.ko."""
    src = workdir / "m.c"
    src.write_text("int provision_standin;\n")
    info = workdir / "modinfo.bin"
    info.write_bytes(f"version={version}\0license=NVIDIA\0name=nvidia\0description=stand-in\0".encode())
    obj, ko = workdir / "m.o", workdir / "nvidia.ko"
    subprocess.run(["gcc", "-c", str(src), "-o", str(obj)], check=True)
    subprocess.run(
        [
            "objcopy",
            "--add-section",
            f".modinfo={info}",
            "--set-section-flags",
            ".modinfo=alloc,readonly",
            str(obj),
            str(ko),
        ],
        check=True,
    )
    return ko.read_bytes()


def _unit(description: str) -> str:
    return (
        f"[Unit]\nDescription={description} (stand-in)\n[Service]\nType=oneshot\nRemainAfterExit=yes\n"
        "ExecStart=/bin/true\n[Install]\nWantedBy=multi-user.target\n"
    )


# --- the relationship table: what each of NVIDIA's packages is, pulls in and excludes ------------
#
# Sources (each rule names its own): [facts-2] / [facts-3] /work/notes/i14-facts.md (the research
# part of issue 14) sections 2 and 3: NVIDIA's own image builds (gpu-driver-container
# ubuntu26.04/install.sh pin_driver_version, holodeck nv-driver.go) install the pinning package
# nvidia-driver-pinning-<x.y.z> (or -<branch>) first, then the unversioned nvidia-open /
# cuda-drivers; pinning packages exist for branches below 590 too (570, 580), the branch one
# versioned <branch>-N, the exact one <x.y.z>-N, each an apt preferences file
# /etc/apt/preferences.d/nvidia-driver-pin with `Pin: version <x.y.z>-*` (or <branch>.*) at
# priority 1000; the Fabric Manager lost its branch suffix at 580 (gpu-driver-container commit
# 78fa4ac0), the driver's at 590 (Driver Installation Guide, "Recent Updates"); NVIDIA's debian
# repositories use revision -1 (debian12 560.28.03-1, debian13 595.71.05-1), and the metapackages
# depend with >= (nvidia-open Depends nvidia-driver-open (>= <x.y.z>); cuda-drivers-580 Depends
# nvidia-driver (>= 580.65.06), NVIDIA developer forum thread 353805), so without a pin apt takes
# the newest parts. [guide-locking] Driver Installation Guide, "Version locking",
# https://docs.nvidia.com/datacenter/tesla/driver-installation-guide/version-locking.html.
# When the facts file comes to say otherwise, it wins: change the rule here, the tests follow.
# Placeholders: {version} x.y.z, {branch}, {deb} the package version (x.y.z-1), {kernel}.
#
# What is a STAND-IN: every file the packages carry (a module that is a tiny ELF with NVIDIA's
# .modinfo version, empty libraries, services that run /bin/true, an nvcc that prints its
# release), the parts a metapackage pulls in (three of NVIDIA's many: the module, libnvidia-compute,
# nvidia-persistenced), the pinning files' Package lines, and the signing key. The names, version
# strings and the kinds of relationship are NVIDIA's.


@dataclass(frozen=True)
class Rule:
    """How to make the package(s) a name in the plan stands for."""

    pattern: str  # a full-match regex of the package name; named groups version / branch / cuda
    source: str
    version: str = "{version}-1"  # the package's version, when the plan's entry leaves it to the name
    depends: tuple[str, ...] = ()  # package names this one needs, made by their own rules
    relations: str = ""  # control lines: Depends on those names with versions, Provides, Conflicts
    files: tuple[tuple[str, str, int], ...] = ()
    postinst: str = ""


_MODULE = (("/lib/modules/{kernel}/updates/dkms/nvidia.ko", "@ko", 0o644),)
_DEPMOD = "#!/bin/sh\ndepmod -a {kernel} 2>/dev/null || true\n"
_FABRIC_MANAGER = (("/lib/systemd/system/nvidia-fabricmanager.service", "@unit:NVIDIA Fabric Manager", 0o644),)
_DRIVER_PARTS = ("libnvidia-compute", "nvidia-persistenced")
_PARTS_AT_LEAST = "libnvidia-compute (>= {deb}), nvidia-persistenced (>= {deb})"


def _pin_file(name: str, pin: str) -> tuple[str, str, int]:
    """The preferences file a pinning package installs [facts-2]: one path for every pinning
    package, so two of them cannot be installed together (they also Conflict)."""
    body = (
        f"# STAND-IN for NVIDIA's {name} (provision tests)\n"
        "Package: nvidia-* libnvidia-* libcuda* cuda-drivers* xserver-xorg-video-nvidia*\n"
        f"Pin: version {pin}\nPin-Priority: 1000\n"
    )
    return ("/etc/apt/preferences.d/nvidia-driver-pin", body, 0o644)


def _metapackage(stem: str, module: str, branches: str = r"\d+") -> Rule:
    """``stem`` and ``stem-<branch>`` (``branches``: the branch numbers NVIDIA's repository has the
    name for): depend with >= on the module and the driver's parts [facts-2]."""
    return Rule(
        rf"{stem}(?:-(?P<branch>{branches}))?",
        "[facts-2]",
        depends=(module, *_DRIVER_PARTS),
        relations=f"Depends: {module} (>= {{deb}}), {_PARTS_AT_LEAST}\n",
    )


def _module(name: str, other: str) -> Rule:
    """A module package: NVIDIA's depends on dkms; the stand-in, which builds nothing, on what its
    postinst and the role's modinfo check run (kmod, from the OS archive)."""
    return Rule(
        name, "[guide-locking]", relations=f"Depends: kmod\nConflicts: {other}\n", files=_MODULE, postinst=_DEPMOD
    )


RULES: tuple[Rule, ...] = (
    # pinning packages: the exact version's name carries it; the branch's is versioned <branch>-N
    Rule(
        r"nvidia-driver-pinning-(?P<version>\d+\.\d+\.\d+)",
        "[facts-2][guide-locking]",
        files=(_pin_file("nvidia-driver-pinning-{version}", "{version}-*"),),
        relations="Provides: nvidia-driver-pinning\nConflicts: nvidia-driver-pinning\n",
    ),
    Rule(
        r"nvidia-driver-pinning-(?P<branch>\d+)",
        "[facts-2][guide-locking]",
        version="{branch}-1",
        files=(_pin_file("nvidia-driver-pinning-{branch}", "{branch}.*"),),
        relations="Provides: nvidia-driver-pinning\nConflicts: nvidia-driver-pinning\n",
    ),
    # the metapackages of the open and the proprietary modules: per branch before 590, one
    # unversioned name from 590; and the two module flavours, which exclude each other (one nvidia.ko)
    # nvidia-open-<branch> exists from 570 only: below it the open flavour is nvidia-kernel-open-<b>
    # then cuda-drivers-<b> (packaging.yaml, CUDA 12.0-12.5 installation guides), which no role
    # test plans, so the stand-in has no rule for it and refuses nvidia-open-<b> below 570
    _metapackage("nvidia-open", "nvidia-kernel-open-dkms", r"5[7-9]\d|[6-9]\d\d"),
    _metapackage("cuda-drivers", "nvidia-kernel-dkms"),
    _module("nvidia-kernel-open-dkms", "nvidia-kernel-dkms"),
    _module("nvidia-kernel-dkms", "nvidia-kernel-open-dkms"),
    Rule(
        r"libnvidia-compute",
        "[guide-locking]",
        files=(("/usr/lib/x86_64-linux-gnu/libnvidia-compute.so.{version}", "", 0o644),),
    ),
    Rule(
        r"nvidia-persistenced",
        "[guide-locking]",
        files=(("/lib/systemd/system/nvidia-persistenced.service", "@unit:NVIDIA Persistence Daemon", 0o644),),
    ),
    # Fabric Manager: before 580 per branch (one at a time), from 580 without the branch [facts-3]
    Rule(
        r"nvidia-fabricmanager-(?P<branch>\d+)",
        "[facts-3]",
        relations="Provides: nvidia-fabricmanager\nConflicts: nvidia-fabricmanager\n",
        files=_FABRIC_MANAGER,
    ),
    Rule(r"nvidia-fabricmanager", "[facts-3]", files=_FABRIC_MANAGER),
    # the CUDA toolkit and cuDNN (their versions are their own, not the driver's)
    Rule(
        r"cuda-toolkit-(?P<major>\d+)-(?P<minor>\d+)",
        "[facts-7]",
        files=(("/usr/local/cuda-{major}.{minor}/bin/nvcc", "@nvcc", 0o755),),
    ),
    Rule(
        r"cudnn(?P<cudnn_major>\d+)-cuda-(?P<cuda>\d+)",
        "[facts-7]",
        depends=("libcudnn{cudnn_major}-cuda-{cuda}",),
        relations="Depends: libcudnn{cudnn_major}-cuda-{cuda} (= {deb})\n",
    ),
    Rule(
        r"libcudnn(?P<cudnn_major>\d+)-cuda-(?P<cuda>\d+)",
        "[facts-7]",
        files=(("/usr/lib/x86_64-linux-gnu/libcudnn.so.{version}", "", 0o644),),
    ),
    # the development files: headers, then the dev package over the library at the same version
    Rule(
        r"libcudnn(?P<cudnn_major>\d+)-headers-cuda-(?P<cuda>\d+)",
        "[facts-7]",
        files=(("/usr/include/x86_64-linux-gnu/cudnn_version_v{cudnn_major}.h", "", 0o644),),
    ),
    Rule(
        r"libcudnn(?P<cudnn_major>\d+)-dev-cuda-(?P<cuda>\d+)",
        "[facts-7]",
        depends=("libcudnn{cudnn_major}-cuda-{cuda}", "libcudnn{cudnn_major}-headers-cuda-{cuda}"),
        relations="Depends: libcudnn{cudnn_major}-cuda-{cuda} (= {deb}), libcudnn{cudnn_major}-headers-cuda-{cuda} (= {deb})\n",
    ),
)


def rule_for(name: str) -> tuple[Rule, dict[str, str]]:
    """The first rule whose pattern is the whole name, and what its groups read from the name."""
    for rule in RULES:
        m = re.fullmatch(rule.pattern, name)
        if m:
            return rule, {k: v for k, v in m.groupdict().items() if v is not None}
    raise KeyError(f"no stand-in rule for {name!r}: add one (with its source) to standin_repo.RULES")


def _package_version(expression: str | None, rule: Rule, fields: dict[str, str]) -> str:
    """The package version an apt plan's version expression (``595.58.03-*``) selects, or, for an
    unversioned entry (the name carries the version: pinning packages), the rule's own."""
    return rule.version.format(**fields) if expression is None else deb_version(expression)


def _upstream(deb_version: str) -> str:
    return deb_version.rsplit("-", 1)[0]


def deb_version(expression: str) -> str:
    """The stand-in package version an apt version expression of the plan selects (x.y.z-* -> x.y.z-1)."""
    if not expression.endswith("-*"):
        raise ValueError(f"not an apt version expression of NVIDIA's repository: {expression!r}")
    return f"{expression[:-2]}-1"


def debs_for_plan(
    packages: Mapping[str, Any], repositories: Collection[str] = ("cuda",), kernel: str = STANDIN_KERNEL
) -> list[Deb]:
    """The stand-in packages an apt plan (a lock group's ``packages``, THE CONTRACT's shape) installs
    from NVIDIA's repositories, with everything they pull in at the same version."""
    if packages.get("manager") != "apt":
        raise ValueError(f"the stand-in repository is an apt repository; the plan is {packages.get('manager')!r}")
    made: dict[tuple[str, str], Deb] = {}
    for entry in packages["install"]:
        if entry.get("repository") not in repositories:
            continue  # the OS's own archive (headers, dkms) or a repository not stood in for here
        rule, fields = rule_for(entry["name"])
        version = _package_version(entry.get("version"), rule, fields)
        _make(entry["name"], version, kernel, made)
    return list(made.values())


def _make(name: str, version: str, kernel: str, made: dict[tuple[str, str], Deb]) -> None:
    if (name, version) in made:
        return
    rule, fields = rule_for(name)
    upstream = _upstream(version)
    values = {"version": upstream, "deb": version, "kernel": kernel, "branch": upstream.split(".")[0], **fields}
    cuda = f"{fields.get('major')}.{fields.get('minor')}"
    files = tuple(
        (
            path.format(**values),
            _content(content, values, cuda),
            mode,
        )
        for path, content, mode in rule.files
    )
    made[(name, version)] = Deb(
        name,
        version,
        files=files,
        postinst=rule.postinst.format(**values),
        extra=rule.relations.format(**values),
    )
    for dependency in rule.depends:
        _make(dependency.format(**values), version, kernel, made)


def _content(content: str, values: dict[str, str], cuda: str) -> str:
    if content.startswith("@unit:"):
        return _unit(content.removeprefix("@unit:"))
    if content == "@nvcc":
        return f"#!/bin/sh\necho 'Cuda compilation tools, release {cuda}, V{values['version']}'\n"
    return content if content == "@ko" else content.format(**values)


def repository_debs(plans: Iterable[Mapping[str, Any]], kernel: str = STANDIN_KERNEL) -> list[Deb]:
    """One stand-in repository that carries every plan's packages (releases side by side, as
    NVIDIA's does), plus the stand-in kernel's headers (the OS archive's part, for DKMS)."""
    debs: dict[tuple[str, str], Deb] = {}
    for plan in plans:
        for deb in debs_for_plan(plan, kernel=kernel):
            debs.setdefault((deb.name, deb.version), deb)
    # NVIDIA's repository offers every release's and every branch's pinning package, whichever one a
    # plan picks [facts-2]
    modules = ("nvidia-kernel-open-dkms", "nvidia-kernel-dkms")
    for release in sorted({_upstream(d.version) for d in debs.values() if d.name in modules}):
        branch = release.split(".")[0]
        _make(f"nvidia-driver-pinning-{release}", f"{release}-1", kernel, debs)
        _make(f"nvidia-driver-pinning-{branch}", f"{branch}-1", kernel, debs)
    return [*debs.values(), *kernel_debs(kernel)]


def kernel_debs(kernel: str = STANDIN_KERNEL) -> list[Deb]:
    """The stand-in kernel's headers package: what DKMS needs before it builds (a folder)."""
    return [
        Deb(
            f"linux-headers-{kernel}",
            "1.0",
            files=((f"/usr/src/linux-headers-{kernel}/Makefile", "", 0o644),),
            postinst=f"#!/bin/sh\nmkdir -p /lib/modules/{kernel}\nln -sfn /usr/src/linux-headers-{kernel} "
            f"/lib/modules/{kernel}/build\n",
        )
    ]


def _build(deb: Deb, out: Path, ko: dict[str, bytes], work: Path) -> Path:
    root = Path(tempfile.mkdtemp(dir=work))
    (root / "DEBIAN").mkdir()
    control = (
        f"Package: {deb.name}\nVersion: {deb.version}\nArchitecture: amd64\nMaintainer: provision tests "
        f"<tests@provision.invalid>\nDescription: STAND-IN for NVIDIA's {deb.name} (provision tests)\n"
    )
    if deb.depends:
        control += f"Depends: {deb.depends}\n"
    (root / "DEBIAN" / "control").write_text(control + deb.extra)
    if deb.postinst:
        (root / "DEBIAN" / "postinst").write_text(deb.postinst)
        (root / "DEBIAN" / "postinst").chmod(0o755)
    for path, content, mode in deb.files:
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        if content == "@ko":
            target.write_bytes(ko[deb.version])
        else:
            target.write_text(content)
        target.chmod(mode)
    pkg = out / f"{deb.name}_{deb.version}_amd64.deb"
    subprocess.run(
        ["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(root), str(pkg)], check=True, capture_output=True
    )
    return pkg


@dataclass(frozen=True)
class Repo:
    path: Path
    key: Path  # armored public key
    fingerprint: str


# The key file NVIDIA's repository of each distro serves beside its packages (the stand-in key takes
# its name): 8793F200 for debian13, 3bf863cc for the other apt repositories ([facts] section 1:
# NVIDIA/cuda-repo-management README "Active pubkeys", SIGNATURES.md).
KEY_FILES = {"debian13": "8793F200.pub"}
APT_KEY_FILE = "3bf863cc.pub"


def repo_folder(root: Path, distro: str, arch: str = "x86_64") -> Path:
    """Where NVIDIA's layout puts a distro's flat repository under the served root."""
    return root / "compute" / "cuda" / "repos" / distro / arch


def build_repo(folder: Path, debs: list[Deb], key_file: str = "standin-key.asc", scratch: Path | None = None) -> Repo:
    """Packages, Packages.gz, Release and InRelease, signed with a throwaway key saved (armored) as
    ``key_file`` beside them (provision.fleet.apt_repo). The build's scratch goes to ``scratch``
    (default: beside ``folder``), never under a served folder."""
    folder.mkdir(parents=True, exist_ok=True)
    scratch = scratch or folder.parent
    work = scratch / "build"
    work.mkdir(parents=True, exist_ok=True)
    ko = {
        d.version: _module_ko(d.version.rsplit("-", 1)[0], Path(tempfile.mkdtemp(dir=work)))
        for d in debs
        if any(c == "@ko" for _, c, _ in d.files)
    }
    for deb in debs:
        _build(deb, folder, ko, work)
    signed = index_and_sign(folder, label="provision stand-in repo", key_file=key_file)
    return Repo(folder, signed.key, signed.fingerprint)
